"""What every MNIST model shares: input shape, class count and compilation."""

from __future__ import annotations

from typing import Any

#: MNIST images are 28 x 28 grey levels; 10 digit classes.
IMAGE_SHAPE = (28, 28)
NUM_CLASSES = 10


def compile_model(model: Any, learning_rate: float) -> Any:
    """Compile with Adam, sparse categorical cross-entropy on logits, and accuracy.

    Adam: Kingma and Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015.
    """
    import tf_keras as keras

    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model
