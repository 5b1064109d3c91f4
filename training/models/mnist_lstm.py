"""mnist_lstm: each image read row by row, 28 time steps of 28 pixels, by an LSTM of 128 units.

LSTM: Hochreiter and Schmidhuber, Neural Computation 9(8), 1997. Row-by-row
MNIST as in the Keras example ``mnist_hierarchical_rnn`` and TensorFlow's
classic recurrent MNIST tutorials.
"""

from __future__ import annotations

from typing import Any

from training.models._common import IMAGE_SHAPE, NUM_CLASSES, compile_model

UNITS = 128
#: Adam step size. With few steps (4,000 digits, global batch 128, 8 epochs) the
#: LSTM learns too little at Adam's suggested 0.001; 0.004 ends far more accurate.
LEARNING_RATE = 0.004


def build(learning_rate: float, steps_per_execution: int = 1) -> Any:
    """A compiled LSTM: float32 (batch, 28, 28) -> logits (batch, 10); 81,674 weights."""
    import tf_keras as keras

    model = keras.Sequential(
        [
            keras.layers.Input(shape=IMAGE_SHAPE),
            keras.layers.LSTM(UNITS),
            keras.layers.Dense(NUM_CLASSES),
        ],
        name="mnist_lstm",
    )
    return compile_model(model, learning_rate, steps_per_execution)
