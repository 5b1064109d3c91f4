"""mnist_lstm: each image read row by row, one time step per row, by an LSTM of 128 units.

LSTM: Hochreiter and Schmidhuber, Neural Computation 9(8), 1997. Row-by-row
MNIST as in the Keras example ``mnist_hierarchical_rnn`` and TensorFlow's
classic recurrent MNIST tutorials: a 28x28 digit is 28 time steps of 28
pixels. An image (height, width, channels) is height time steps of width x
channels values, a row's pixels with their channels side by side.
"""

from __future__ import annotations

from typing import Any

from training.models._common import (
    DEFAULT_INPUT_SHAPE,
    DEFAULT_NUM_CLASSES,
    compile_model,
    image_shape,
)

UNITS = 128
#: Adam step size. With few steps (4,000 digits, global batch 128, 8 epochs) the
#: LSTM learns too little at Adam's suggested 0.001; 0.004 ends far more accurate.
LEARNING_RATE = 0.004


def build(
    learning_rate: float,
    steps_per_execution: int = 1,
    *,
    input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE,
    num_classes: int = DEFAULT_NUM_CLASSES,
) -> Any:
    """A compiled LSTM: float32 (batch, *input_shape) -> logits (batch, num_classes).

    81,674 weights for (28, 28) and 10 classes.

    Raises:
        ModelError: ``input_shape`` is no image (rank 2 or 3).
    """
    import tf_keras as keras

    shape = image_shape("mnist_lstm", input_shape)
    layers: list[Any] = [keras.layers.Input(shape=shape)]
    if len(shape) == 3:
        layers.append(keras.layers.Reshape((shape[0], shape[1] * shape[2])))
    model = keras.Sequential(
        [*layers, keras.layers.LSTM(UNITS), keras.layers.Dense(num_classes)],
        name="mnist_lstm",
    )
    return compile_model(model, learning_rate, steps_per_execution)
