"""mnist_wide_mlp: 784 -> 512 -> 512 ReLU units (dropout 0.2) -> 10 logits, trained with Adam.

The layout of Keras' classic ``examples/mnist_mlp.py`` (keras-team/keras 2.x).
Its 669,706 float32 weights make 2.68 MB of gradients per step: the model the
benchmark uses where the all-reduce, not the CPU, sets the pace (at 100 Mb/s
the ring all-reduce of two workers needs at least 0.21 s a step).
"""

from __future__ import annotations

from typing import Any

from training.models._common import IMAGE_SHAPE, NUM_CLASSES, compile_model

HIDDEN_UNITS = 512
DROPOUT = 0.2


def build(learning_rate: float, steps_per_execution: int = 1) -> Any:
    """A compiled MLP: float32 (batch, 28, 28) -> logits (batch, 10); 669,706 weights."""
    import tf_keras as keras

    model = keras.Sequential(
        [
            keras.layers.Input(shape=IMAGE_SHAPE),
            keras.layers.Flatten(),
            keras.layers.Dense(HIDDEN_UNITS, activation="relu"),
            keras.layers.Dropout(DROPOUT),
            keras.layers.Dense(HIDDEN_UNITS, activation="relu"),
            keras.layers.Dropout(DROPOUT),
            keras.layers.Dense(NUM_CLASSES),
        ],
        name="mnist_wide_mlp",
    )
    return compile_model(model, learning_rate, steps_per_execution)
