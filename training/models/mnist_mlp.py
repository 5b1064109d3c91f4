"""mnist_mlp: the flattened input (784 pixels of MNIST) -> 100 ReLU units -> a logit per class.

The shape of TensorFlow's classic between-graph parameter-server example,
``tensorflow/tools/dist_test/python/mnist_replica.py`` (one hidden layer of
``hidden_units=100``, Adam). It flattens any input shape: images of any size
and channel count, or a CSV's feature vector.
"""

from __future__ import annotations

from typing import Any

from training.models._common import DEFAULT_INPUT_SHAPE, DEFAULT_NUM_CLASSES, compile_model

HIDDEN_UNITS = 100


def build(
    learning_rate: float,
    steps_per_execution: int = 1,
    *,
    input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE,
    num_classes: int = DEFAULT_NUM_CLASSES,
) -> Any:
    """A compiled MLP: float32 (batch, *input_shape) -> logits (batch, num_classes).

    79,510 weights for (28, 28) and 10 classes.
    """
    import tf_keras as keras

    model = keras.Sequential(
        [
            keras.layers.Input(shape=tuple(input_shape)),
            keras.layers.Flatten(),
            keras.layers.Dense(HIDDEN_UNITS, activation="relu"),
            keras.layers.Dense(num_classes),
        ],
        name="mnist_mlp",
    )
    return compile_model(model, learning_rate, steps_per_execution)
