"""mnist_cnn: two convolution blocks, dropout and a dense head.

The layout of the Keras example "Simple MNIST convnet"
(https://keras.io/examples/vision/mnist_convnet/): Conv 32 -> pool -> Conv 64
-> pool -> dropout 0.5 -> dense softmax head.
"""

from __future__ import annotations

from typing import Any

from training.models._common import IMAGE_SHAPE, NUM_CLASSES, compile_model


def build(learning_rate: float, steps_per_execution: int = 1) -> Any:
    """A compiled CNN: float32 (batch, 28, 28) -> logits (batch, 10); 34,826 weights."""
    import tf_keras as keras

    model = keras.Sequential(
        [
            keras.layers.Input(shape=IMAGE_SHAPE),
            keras.layers.Reshape((*IMAGE_SHAPE, 1)),
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(NUM_CLASSES),
        ],
        name="mnist_cnn",
    )
    return compile_model(model, learning_rate, steps_per_execution)
