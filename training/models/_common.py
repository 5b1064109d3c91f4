"""What every MNIST model shares: input shape, class count and compilation."""

from __future__ import annotations

from typing import Any

#: MNIST images are 28 x 28 grey levels; 10 digit classes.
IMAGE_SHAPE = (28, 28)
NUM_CLASSES = 10


def compile_model(model: Any, learning_rate: float, steps_per_execution: int = 1) -> Any:
    """Compile with Adam, sparse categorical cross-entropy on logits, and accuracy.

    Adam: Kingma and Ba, "Adam: A Method for Stochastic Optimization", ICLR 2015.

    Args:
        model: an uncompiled tf_keras model.
        learning_rate: Adam's step size.
        steps_per_execution: training steps ``fit`` runs in one call of its
            compiled function (Keras' ``compile`` argument); callbacks see
            every that-many steps.
    """
    import tf_keras as keras

    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
    )
    return model
