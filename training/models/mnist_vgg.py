"""mnist_vgg: two VGG blocks (two 3x3 convolutions and a 2x2 max-pool each), dropout, dense head.

The block of Simonyan and Zisserman, "Very Deep Convolutional Networks for
Large-Scale Image Recognition", ICLR 2015, at MNIST's size: 32 then 64
filters. On 28x28 digits it computes 5.8 times as much per example as
``mnist_cnn`` (14.0 M against 2.4 M multiply-adds forward, counted layer by
layer) for 81,002 weights (324 KB of gradients), so the step's computing, not
the all-reduce, takes most of a node's time: the benchmark's model for what a
second node buys when computing dominates. It takes images of any size from
:data:`MIN_SIZE` up and any channel count; grey images ``(height, width)`` get
a channel axis.
"""

from __future__ import annotations

from typing import Any

from training.models._common import (
    DEFAULT_INPUT_SHAPE,
    DEFAULT_NUM_CLASSES,
    compile_model,
    image_input,
)

#: Filters of the first and second block.
FILTERS = (32, 64)
DROPOUT = 0.5
#: Smallest height and width: a block's second convolution (no padding) takes 2
#: pixels and its pool halves, rounding down: 10 -> 8 -> 4 -> 2 -> 1.
MIN_SIZE = 10


def build(
    learning_rate: float,
    steps_per_execution: int = 1,
    *,
    input_shape: tuple[int, ...] = DEFAULT_INPUT_SHAPE,
    num_classes: int = DEFAULT_NUM_CLASSES,
) -> Any:
    """A compiled VGG-style CNN: float32 (batch, *input_shape) -> logits (batch, num_classes).

    81,002 weights for (28, 28) and 10 classes.

    Raises:
        ModelError: ``input_shape`` is no image (rank 2 or 3) of at least
            :data:`MIN_SIZE` pixels a side.
    """
    import tf_keras as keras

    layers, _ = image_input("mnist_vgg", input_shape, MIN_SIZE)
    for filters in FILTERS:
        layers += [
            keras.layers.Conv2D(filters, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(filters, 3, activation="relu"),
            keras.layers.MaxPooling2D(2),
        ]
    layers += [
        keras.layers.Flatten(),
        keras.layers.Dropout(DROPOUT),
        keras.layers.Dense(num_classes),
    ]
    model = keras.Sequential(layers, name="mnist_vgg")
    return compile_model(model, learning_rate, steps_per_execution)
