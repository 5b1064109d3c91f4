"""What the built-in models share: their errors, default shape, image input and compilation."""

from __future__ import annotations

from typing import Any, NoReturn

#: The shape a model's ``build`` gets when called without a dataset's: MNIST's
#: 28 x 28 grey levels in 10 digit classes (``training.datasets.mnist``).
#: A run passes its dataset's ``input_shape`` and ``num_classes`` instead.
DEFAULT_INPUT_SHAPE: tuple[int, ...] = (28, 28)
DEFAULT_NUM_CLASSES = 10


class UnknownModelError(LookupError):
    """The asked-for model is neither a module of :mod:`training.models` nor a model file."""


class ModelError(TypeError):
    """A model that cannot be imported, built, or fed the dataset's examples."""


def refuse(model: str, input_shape: tuple[int, ...], why: str, fix: str) -> NoReturn:
    """Raise the :class:`ModelError` of a model that cannot take ``input_shape``.

    Args:
        model: the model's name, e.g. ``mnist_cnn``.
        input_shape: the dataset's shape of one example.
        why: what the model takes, or what the shape lacks.
        fix: what the user changes, e.g. ``use model=tabular_mlp``.

    Raises:
        ModelError: always; the message names the model, the shape, why and the fix.
    """
    raise ModelError(f"{model} cannot take inputs of shape {input_shape}: {why}. Fix: {fix}")


def image_shape(model: str, input_shape: tuple[int, ...], min_size: int = 1) -> tuple[int, ...]:
    """``input_shape`` as a tuple of ints, checked to be an image the model takes.

    Args:
        model: the model's name, for the refusal.
        input_shape: one example's shape: ``(height, width)`` (grey levels) or
            ``(height, width, channels)``.
        min_size: the smallest height and width the model takes (its
            convolutions, strides and pools shrink the image).

    Raises:
        ModelError: ``input_shape`` is not of rank 2 or 3 (a CSV's feature
            vector, say), or smaller than ``min_size``; the message says the fix.
    """
    shape = tuple(int(d) for d in input_shape)
    if len(shape) not in (2, 3) or min(shape) < 1:
        fix = (
            "for tabular data use model=tabular_mlp"
            if len(shape) == 1
            else "give images of shape (height, width) or (height, width, channels)"
        )
        refuse(model, shape, "it takes images (height, width[, channels])", fix)
    if min(shape[:2]) < min_size:
        refuse(
            model,
            shape,
            f"it needs images of at least {min_size}x{min_size} pixels",
            f"for a folder of images, prepare them at least that large (-e "
            f"image_size={min_size}); for smaller images use model=mnist_cnn or mnist_mlp, "
            "which take any size",
        )
    return shape


def image_input(
    model: str, input_shape: tuple[int, ...], min_size: int = 1
) -> tuple[list[Any], tuple[int, int, int]]:
    """The first layers of an image model: the input and, for grey images, a channel axis.

    Args:
        model: the model's name, for the refusal.
        input_shape: one example's shape: ``(height, width)`` (grey levels) or
            ``(height, width, channels)``.
        min_size: as :func:`image_shape`.

    Returns:
        ``(layers, (height, width, channels))``: ``[Input(input_shape)]``, plus
        ``Reshape((height, width, 1))`` for a rank-2 shape, and the shape the
        next layer receives.

    Raises:
        ModelError: as :func:`image_shape`.
    """
    import tf_keras as keras

    shape = image_shape(model, input_shape, min_size)
    layers: list[Any] = [keras.layers.Input(shape=shape)]
    if len(shape) == 2:
        layers.append(keras.layers.Reshape((*shape, 1)))
        shape = (*shape, 1)
    return layers, (shape[0], shape[1], shape[2])


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
