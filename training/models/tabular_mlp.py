"""tabular_mlp: a feature vector (a CSV row's numbers) -> 64 -> 32 ReLU units -> a logit per class.

A small multilayer perceptron for tabular data such as sensor readings: the
CSV dataset standardises each feature column with the training split's mean
and standard deviation, so the features arrive centred and scaled. Dropout of
0.1 after the first layer keeps it from memorising a few hundred rows.
"""

from __future__ import annotations

from typing import Any

from training.models._common import DEFAULT_NUM_CLASSES, compile_model, refuse

HIDDEN_UNITS = (64, 32)
DROPOUT = 0.1
#: The shape a build called without a dataset's gets: 13 features (as the wine data has).
DEFAULT_INPUT_SHAPE = (13,)


def build(
    learning_rate: float,
    steps_per_execution: int = 1,
    *,
    input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE,
    num_classes: int = DEFAULT_NUM_CLASSES,
) -> Any:
    """A compiled MLP: float32 (batch, n_features) -> logits (batch, num_classes).

    Raises:
        ModelError: ``input_shape`` is not ``(n_features,)`` (an image).
    """
    import tf_keras as keras

    shape = tuple(int(d) for d in input_shape)
    if len(shape) != 1 or shape[0] < 1:
        refuse(
            "tabular_mlp",
            shape,
            "it takes a feature vector (n_features,)",
            "for images use model=mnist_cnn or model=pi_mobilenet",
        )
    model = keras.Sequential(
        [
            keras.layers.Input(shape=shape),
            keras.layers.Dense(HIDDEN_UNITS[0], activation="relu"),
            keras.layers.Dropout(DROPOUT),
            keras.layers.Dense(HIDDEN_UNITS[1], activation="relu"),
            keras.layers.Dense(num_classes),
        ],
        name="tabular_mlp",
    )
    return compile_model(model, learning_rate, steps_per_execution)
