"""mnist_wide_mlp: flattened input -> 512 -> 512 ReLU units (dropout 0.2) -> a logit per class.

The layout of Keras' classic ``examples/mnist_mlp.py`` (keras-team/keras 2.x).
On MNIST (784 pixels, 10 classes) its 669,706 float32 weights make 2.68 MB of
gradients per step: the model the benchmark uses where the all-reduce, not the
CPU, sets the pace (at 100 Mb/s the ring all-reduce of two workers needs at
least 0.21 s a step). It flattens any input shape: images of any size and
channel count, or a CSV's feature vector.
"""

from __future__ import annotations

from typing import Any

from training.models._common import DEFAULT_INPUT_SHAPE, DEFAULT_NUM_CLASSES, compile_model

HIDDEN_UNITS = 512
DROPOUT = 0.2


def build(
    learning_rate: float,
    steps_per_execution: int = 1,
    *,
    input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE,
    num_classes: int = DEFAULT_NUM_CLASSES,
) -> Any:
    """A compiled MLP: float32 (batch, *input_shape) -> logits (batch, num_classes).

    669,706 weights for (28, 28) and 10 classes.
    """
    import tf_keras as keras

    model = keras.Sequential(
        [
            keras.layers.Input(shape=tuple(input_shape)),
            keras.layers.Flatten(),
            keras.layers.Dense(HIDDEN_UNITS, activation="relu"),
            keras.layers.Dropout(DROPOUT),
            keras.layers.Dense(HIDDEN_UNITS, activation="relu"),
            keras.layers.Dropout(DROPOUT),
            keras.layers.Dense(num_classes),
        ],
        name="mnist_wide_mlp",
    )
    return compile_model(model, learning_rate, steps_per_execution)
