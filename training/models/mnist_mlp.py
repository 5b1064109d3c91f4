"""mnist_mlp: 784 -> 100 ReLU units -> 10 logits, trained with Adam.

The shape of TensorFlow's classic between-graph parameter-server example,
``tensorflow/tools/dist_test/python/mnist_replica.py`` (one hidden layer of
``hidden_units=100``, Adam).
"""

from __future__ import annotations

from typing import Any

from training.models._common import IMAGE_SHAPE, NUM_CLASSES, compile_model

HIDDEN_UNITS = 100


def build(learning_rate: float, steps_per_execution: int = 1) -> Any:
    """A compiled MLP: float32 (batch, 28, 28) -> logits (batch, 10); 79,510 weights."""
    import tf_keras as keras

    model = keras.Sequential(
        [
            keras.layers.Input(shape=IMAGE_SHAPE),
            keras.layers.Flatten(),
            keras.layers.Dense(HIDDEN_UNITS, activation="relu"),
            keras.layers.Dense(NUM_CLASSES),
        ],
        name="mnist_mlp",
    )
    return compile_model(model, learning_rate, steps_per_execution)
