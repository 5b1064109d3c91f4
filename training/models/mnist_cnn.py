"""mnist_cnn: two convolution blocks, dropout and a dense head.

The layout of the Keras example "Simple MNIST convnet"
(https://keras.io/examples/vision/mnist_convnet/): Conv 32 -> pool -> Conv 64
-> pool -> dropout 0.5 -> dense softmax head. It takes images of any size
from :data:`MIN_SIZE` up and any channel count; grey images ``(height,
width)`` get a channel axis.
"""

from __future__ import annotations

from typing import Any

from training.models._common import (
    DEFAULT_INPUT_SHAPE,
    DEFAULT_NUM_CLASSES,
    compile_model,
    image_input,
)

#: Smallest height and width: each 3x3 convolution (no padding) takes 2 pixels
#: and each 2x2 pool halves, rounding down: 10 -> 8 -> 4 -> 2 -> 1.
MIN_SIZE = 10


def build(
    learning_rate: float,
    steps_per_execution: int = 1,
    *,
    input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE,
    num_classes: int = DEFAULT_NUM_CLASSES,
) -> Any:
    """A compiled CNN: float32 (batch, *input_shape) -> logits (batch, num_classes).

    34,826 weights for (28, 28) and 10 classes.

    Raises:
        ModelError: ``input_shape`` is no image (rank 2 or 3) of at least
            :data:`MIN_SIZE` pixels a side.
    """
    import tf_keras as keras

    inputs, _ = image_input("mnist_cnn", input_shape, MIN_SIZE)
    model = keras.Sequential(
        [
            *inputs,
            keras.layers.Conv2D(32, 3, activation="relu"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Conv2D(64, 3, activation="relu"),
            keras.layers.MaxPooling2D(2),
            keras.layers.Flatten(),
            keras.layers.Dropout(0.5),
            keras.layers.Dense(num_classes),
        ],
        name="mnist_cnn",
    )
    return compile_model(model, learning_rate, steps_per_execution)
