"""mnist_vgg: two VGG blocks (two 3x3 convolutions and a 2x2 max-pool each), dropout, dense head.

The block of Simonyan and Zisserman, "Very Deep Convolutional Networks for
Large-Scale Image Recognition", ICLR 2015, at MNIST's size: 32 then 64
filters. It computes 5.8 times as much per example as ``mnist_cnn`` (14.0 M
against 2.4 M multiply-adds forward, counted layer by layer) for 81,002
weights (324 KB of gradients), so the step's computing, not the all-reduce,
takes most of a node's time: the benchmark's model for what a second node
buys when computing dominates.
"""

from __future__ import annotations

from typing import Any

from training.models._common import IMAGE_SHAPE, NUM_CLASSES, compile_model

#: Filters of the first and second block.
FILTERS = (32, 64)
DROPOUT = 0.5


def build(learning_rate: float, steps_per_execution: int = 1) -> Any:
    """A compiled VGG-style CNN: float32 (batch, 28, 28) -> logits (batch, 10); 81,002 weights."""
    import tf_keras as keras

    layers: list[Any] = [
        keras.layers.Input(shape=IMAGE_SHAPE),
        keras.layers.Reshape((*IMAGE_SHAPE, 1)),
    ]
    for filters in FILTERS:
        layers += [
            keras.layers.Conv2D(filters, 3, padding="same", activation="relu"),
            keras.layers.Conv2D(filters, 3, activation="relu"),
            keras.layers.MaxPooling2D(2),
        ]
    layers += [
        keras.layers.Flatten(),
        keras.layers.Dropout(DROPOUT),
        keras.layers.Dense(NUM_CLASSES),
    ]
    model = keras.Sequential(layers, name="mnist_vgg")
    return compile_model(model, learning_rate, steps_per_execution)
