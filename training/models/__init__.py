"""Model registry: every module in this package is a model, named after the module.

A model module defines::

    def build(
        learning_rate: float,
        steps_per_execution: int = 1,
        *,
        input_shape: tuple[int, ...] = (28, 28),
        num_classes: int = 10,
    ) -> tf_keras.Model

returning a compiled model that maps a batch of float32 examples
``(batch, *input_shape)`` to logits ``(batch, num_classes)``, compiled with
sparse categorical cross-entropy on logits, an ``accuracy`` metric and the
given ``steps_per_execution`` (:func:`compile_model` does all three). An
example is an image ``(height, width)`` or ``(height, width, channels)``
scaled to [0, 1], or a CSV's standardised feature vector ``(n_features,)``:
the run passes its dataset's ``input_shape`` and ``num_classes``; MNIST's
``(28, 28)`` and 10 are only the defaults of a ``build`` called without them.
A model that cannot take ``input_shape`` raises :class:`ModelError` naming
the shape and the fix. ``build`` may leave out ``steps_per_execution``
(the model then trains one step per call) and ``input_shape`` and
``num_classes`` (its model must then fit the dataset as it is; see
:func:`check_model`). A module may set ``LEARNING_RATE``, the step size used
when the user gives none (default :data:`DEFAULT_LEARNING_RATE`).

To add a model, drop ``my_model.py`` here and train it with
``-e model=my_model``, or keep the file anywhere on the control node and train
it with ``-e model=/path/to/my_model.py`` (:func:`get` imports a path, given
absolute or with a ``/`` in it, from the file itself, with its folder on
``sys.path`` for the modules it imports from there); nothing else changes.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import inspect
import math
import os
import pkgutil
import re
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

# The errors, and compile_model for a model of one's own (docs/extending.md).
from training.models._common import ModelError as ModelError
from training.models._common import UnknownModelError as UnknownModelError
from training.models._common import compile_model as compile_model

#: Adam's suggested step size (Kingma and Ba, ICLR 2015), for models that set none.
DEFAULT_LEARNING_RATE = 0.001
#: Steps per call of the train function when the user asks for none (0) and the
#: model's ``build`` takes the argument. The per-call cost of the distributed
#: train function is paid once per call, so a step gets cheaper up to about 8
#: steps a call and no further; a single process gains little.
AUTO_STEPS_PER_EXECUTION = 8

#: The ``build`` signature a model's fix names.
_BUILD_SIGNATURE = (
    "def build(learning_rate, steps_per_execution=1, *, input_shape=(28, 28), num_classes=10)"
)


def available() -> list[str]:
    """Names of the models in this package, sorted (model files elsewhere are not listed)."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def is_model_file(name: str) -> bool:
    """Whether ``name`` is the path of a model file rather than a model of this package.

    A path is absolute or has a ``/`` in it (``./my_model.py`` for one in the
    current folder); a name is a module of :mod:`training.models`.
    """
    return "/" in name or os.path.isabs(name)


def model_file(name: str) -> Path:
    """The absolute path of model file ``name`` (``~`` expanded), not resolved further."""
    return Path(name).expanduser().absolute()


def _where(name: str) -> str:
    """How messages name model ``name``'s file."""
    return str(model_file(name)) if is_model_file(name) else f"training/models/{name}.py"


def _import_error(where: str, is_the_file: Callable[[str], bool], err: Exception) -> ModelError:
    """The ModelError of a model module that raised ``err`` at import, with its own line."""
    lineno = None
    if isinstance(err, SyntaxError) and err.filename and is_the_file(err.filename):
        lineno = err.lineno
    for frame in traceback.extract_tb(err.__traceback__):
        if is_the_file(frame.filename):
            lineno = frame.lineno  # the module's own line that raised
    fix = "correct the module there"
    if isinstance(err, SyntaxError) and err.filename and not is_the_file(err.filename):
        # A module it imports (one beside it) does not parse: that file and line.
        return ModelError(
            f"{err.filename}, line {err.lineno}, imported by {where}"
            f"{f' (line {lineno})' if lineno else ''}: SyntaxError: {err.msg}. "
            "Fix: correct that line"
        )
    if isinstance(err, ModuleNotFoundError) and err.name and "." not in err.name:
        fix = (
            f"put {err.name}.py (or the package folder {err.name}/) beside {Path(where).name}, "
            "or correct the import; the nodes have the packages of the project's "
            "requirements.txt"
        )
    return ModelError(
        f"{where}{f', line {lineno}' if lineno else ''} cannot be imported: "
        f"{type(err).__name__}: {err}. Fix: {fix}"
    )


def _file_module(name: str) -> ModuleType:
    """Import model file ``name`` under a private module name, once per file.

    Raises:
        UnknownModelError: no such ``.py`` file.
        ModelError: the file raises at import.
    """
    path = model_file(name)
    if path.suffix != ".py" or not path.is_file():
        what = "is a folder" if path.is_dir() else "is not a .py file" if path.exists() else None
        raise UnknownModelError(
            f"model file {path} {what or 'does not exist'}. Fix: give the path of a Python "
            "file that defines build() (-e model=/path/to/my_model.py), "
            f"or a known model: {', '.join(available())}"
        )
    real = path.resolve()
    stem = re.sub(r"\W", "_", real.stem)
    module_name = f"_model_file_{stem}_{hashlib.sha256(str(real).encode()).hexdigest()[:12]}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, real)
    if spec is None or spec.loader is None:
        raise ModelError(f"{path} cannot be imported as a Python module. Fix: name it *.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # as an import does: the module may look itself up
    if str(real.parent) not in sys.path:
        # Its own modules beside it (from helpers import head), which go with it into
        # the run (training.script.local_modules). Last: they do not hide a package.
        sys.path.append(str(real.parent))
    try:
        spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[module_name]
        raise _import_error(str(path), lambda f: Path(f).resolve() == real, err) from err
    return module


def _closest(name: str) -> str | None:
    """The known model closest to ``name`` in any letter case, or None.

    Closeness is :func:`difflib.get_close_matches`' ratio (at least 0.6).
    """
    close = difflib.get_close_matches(name.lower(), available(), n=1)
    return close[0] if close else None


def _did_you_mean(name: str) -> str:
    """`` (did you mean X?)`` for the known model closest to ``name``, or ``""``."""
    close = _closest(name)
    return f" (did you mean {close}?)" if close else ""


def check_name(name: str) -> None:
    """Refuse the ``-e model=`` value ``name`` unless it names a model or a model file.

    A model file (:func:`is_model_file`) passes here; :func:`get` checks the
    file itself. Only the package is listed: no model module is imported.

    Raises:
        UnknownModelError: no such model; the message, in ``-e`` terms, lists
            the known models, the closest one, and the fixes: that model, a
            module added to ``training/models/`` (when ``name`` can be a module
            name), or a model file's path. A ``name`` ending in ``.py`` is
            told to give the file's path.
    """
    if is_model_file(name) or name in available():
        return
    if name.endswith(".py"):
        raise UnknownModelError(
            f"model={name} is no model name: a model file is named by its path. "
            f"Fix: -e model=./{name} (from the project's folder) or -e model=/path/to/{name}"
        )
    add = (
        f"add training/models/{name}.py (on nodes, run site.yml to deploy it)"
        if re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name)
        else "add a model as a module of training/models/, named with letters, digits and _ "
        "(its name is the model name)"
    )
    close = _closest(name)
    raise UnknownModelError(
        f"model={name} is unknown{f' (did you mean {close}?)' if close else ''}. Known models: "
        f"{', '.join(available())}. Fix: -e model={close or 'mnist_cnn'}, or {add}, or give a "
        "model file of your own: -e model=/path/to/my_model.py"
    )


def _module(name: str) -> ModuleType:
    """The module of model ``name``: a module of this package, or a model file's.

    Raises:
        UnknownModelError: no such model or file.
        ModelError: the module cannot be imported.
    """
    if is_model_file(name):
        return _file_module(name)
    if name not in available():
        hint = (
            " (a model file is named by its path: ./" + name + ")"
            if name.endswith(".py")
            else _did_you_mean(name)
        )
        raise UnknownModelError(
            f"model {name!r} is unknown{hint}; known models: {', '.join(available())} "
            "(add one as a module in training/models/, or give the path of a model file)"
        )
    try:
        return importlib.import_module(f"{__name__}.{name}")
    except Exception as err:
        raise _import_error(_where(name), lambda f: Path(f).name == f"{name}.py", err) from err


def get(name: str) -> Callable[..., Any]:
    """The ``build`` function of model ``name``.

    Args:
        name: a model of :func:`available`, or the path of a model file
            (:func:`is_model_file`), imported from that file.

    Raises:
        UnknownModelError: no such model or file (the message lists the known
            models), or a module without ``build``.
        ModelError: the module cannot be imported (a syntax error, a missing
            import, anything it raises at import); the message names its file
            and line.
    """
    build = getattr(_module(name), "build", None)
    if not callable(build):
        raise UnknownModelError(
            f"{_where(name)} defines no build() function. Fix: add "
            f"{_BUILD_SIGNATURE} that returns compile_model(model, learning_rate, "
            "steps_per_execution) (see training/models/mnist_mlp.py)"
        )
    return build


def _takes(function: Callable[..., Any], parameter: str) -> bool:
    """Whether ``function`` accepts the keyword argument ``parameter``."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return parameter in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


def _keras_3_name(function: Callable[..., Any]) -> str | None:
    """The first name of ``function``'s module bound to Keras 3 (``import keras``), or None.

    A module of Keras 3 (``keras``, ``keras.layers``) or an object defined in
    one (``from keras.layers import Dense``); tf-keras is the package ``tf_keras``.
    """
    for name, value in getattr(function, "__globals__", {}).items():
        module = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
        if isinstance(module, str) and (module == "keras" or module.startswith("keras.")):
            return name
    return None


def build(
    name: str,
    learning_rate: float,
    steps_per_execution: int = 1,
    input_shape: tuple[int, ...] | None = None,
    num_classes: int | None = None,
) -> Any:
    """Build and compile model ``name``.

    Args:
        name: a model of :func:`available`, or the path of a model file.
        learning_rate: the optimizer's step size.
        steps_per_execution: training steps per call of the train function.
        input_shape: one example's shape, e.g. ``(64, 64, 3)``; ``None`` (or
            a ``build`` without the parameter) leaves the model's default.
        num_classes: the number of classes, the model's outputs; ``None`` (or
            a ``build`` without the parameter) leaves the model's default.

    Raises:
        UnknownModelError: no such model, or ``steps_per_execution`` above 1
            for a model whose ``build`` takes only ``learning_rate``.
        ModelError: ``build`` cannot be called with these arguments (the
            message gives the signature to define), refused ``input_shape``
            (the message names the shape and the fix), raised, or returned
            something other than a compiled model.
    """
    make = get(name)
    where = _where(name)
    kwargs: dict[str, Any] = {}
    if steps_per_execution != 1:
        check_steps_per_execution(name)
        kwargs["steps_per_execution"] = steps_per_execution
    if input_shape is not None and _takes(make, "input_shape"):
        kwargs["input_shape"] = tuple(int(d) for d in input_shape)
    if num_classes is not None and _takes(make, "num_classes"):
        kwargs["num_classes"] = int(num_classes)
    try:
        inspect.signature(make).bind(learning_rate, **kwargs)
    except TypeError as err:  # build(input_shape, num_classes), say: the call itself fails
        given = ", ".join(["learning_rate", *(f"{k}=..." for k in kwargs)])
        raise ModelError(
            f"{where}: build() cannot be called as build({given}): {err}. Fix: define it as "
            f"{_BUILD_SIGNATURE}"
        ) from None
    except ValueError:
        pass  # no signature to read (a builtin): the call says
    try:
        model = make(learning_rate, **kwargs)
    except ModelError as err:
        raise ModelError(f"{where}: {err}") from err
    except Exception as err:
        # Keras 3 layers compiled by compile_model (tf-keras) fail with an error about an
        # optimizer identifier, which names neither Keras 3 nor the fix.
        keras_3 = _keras_3_name(make)
        fix = (
            f". The model file uses Keras 3 ({keras_3}), which tf-keras' compile_model and "
            "training do not take. Fix: import tf_keras as keras, not import keras, in the "
            "model file"
            if keras_3
            else ""
        )
        raise ModelError(f"{where}: build() failed: {type(err).__name__}: {err}{fix}") from err
    if getattr(model, "optimizer", None) is None or not callable(getattr(model, "fit", None)):
        raise ModelError(
            f"{where}: build() returned {type(model).__name__}, not a compiled "
            "model. Fix: end build() with return compile_model(model, learning_rate, "
            "steps_per_execution) (from training.models import compile_model)"
        )
    import tf_keras

    if not isinstance(model, tf_keras.Model):
        kind = f"{type(model).__module__}.{type(model).__name__}"
        raise ModelError(
            f"{where}: build() returned a {kind}, not a tf-keras model: TensorFlow 2.21's "
            "MultiWorkerMirroredStrategy and ParameterServerStrategy train tf-keras models "
            "only (Keras 3 fails in its first distributed step). Fix: import tf_keras as keras, "
            "not import keras, in the model file"
        )
    return model


def _declared(model: Any) -> tuple[str, str, int | None]:
    """What ``model`` says it takes and gives: ``("inputs of shape (28, 28)", "10 outputs", 10)``.

    The third item is the number of outputs of a model of vectors of logits, else ``None``.
    """
    try:
        takes = f"inputs of shape {tuple(model.input_shape[1:])}"
    except (AttributeError, TypeError, ValueError, RuntimeError):
        takes = "inputs of a shape it does not declare"
    try:
        out = tuple(model.output_shape[1:])
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return takes, "outputs of a shape it does not declare", None
    if len(out) == 1 and isinstance(out[0], int):
        return takes, f"{out[0]} outputs", out[0]
    return takes, f"outputs of shape {out}", None


def check_model(
    name: str,
    input_shape: tuple[int, ...],
    num_classes: int,
    learning_rate: float,
    steps_per_execution: int = 1,
) -> None:
    """Build model ``name`` as a task would, outside any strategy, and feed it one example.

    The example is zeros of the dataset's shape, float32 ``(1, *input_shape)``,
    as the input pipeline gives; the model must return logits ``(1,
    num_classes)``. On the control node, before the start, this finds what each
    task would otherwise find only in its first step, at every restart.

    Args:
        name: a model of :func:`available`, or the path of a model file.
        input_shape: the dataset's shape of one example, e.g. ``(64, 64, 3)``.
        num_classes: the dataset's number of classes.
        learning_rate: the step size the run compiles with.
        steps_per_execution: the run's steps per call (resolved, 1 or more).

    Raises:
        UnknownModelError: as :func:`build`.
        ModelError: ``build`` refuses the shape or fails (as :func:`build`),
            or the model takes no example of ``input_shape``, gives other
            than ``num_classes`` outputs or ends in softmax, not logits; the
            message names the model file, the dataset's shape and class
            count, the model's, and the fix.
    """
    import numpy as np

    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    shape = tuple(int(d) for d in input_shape)
    model = build(name, learning_rate, steps_per_execution, shape, num_classes)
    takes, gives, outputs = _declared(model)
    both = (
        f"the dataset has examples of shape {shape} in {num_classes} classes, the model "
        f"takes {takes} and gives {gives}"
    )
    make = get(name)
    passes = _takes(make, "input_shape") and _takes(make, "num_classes")
    receive = "" if passes else f", and let build() receive both: {_BUILD_SIGNATURE}"
    end = "end it with keras.layers.Dense(num_classes) (logits)"
    try:
        out = tuple(model(np.zeros((1, *shape), np.float32), training=False).shape)
    except Exception as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        also = f" and {end}" if outputs not in (None, num_classes) else ""
        raise ModelError(
            f"{_where(name)}: the model takes no example of the dataset's shape: {both} "
            f"({type(err).__name__}: {first}). Fix: start it with "
            f"keras.Input(shape=input_shape){also}{receive}"
        ) from err
    if out != (1, num_classes):
        raise ModelError(
            f"{_where(name)}: the model gives outputs of shape {out} for one example, not one "
            f"logit per class: {both}. Fix: {end}{receive}"
        )
    last = model.layers[-1] if getattr(model, "layers", None) else None
    activation = getattr(getattr(last, "activation", None), "__name__", "")
    if last is not None and (activation == "softmax" or type(last).__name__ == "Softmax"):
        # Cross-entropy on logits of probabilities learns slowly and badly, and predict and
        # the TFLite export apply softmax once more.
        raise ModelError(
            f"{_where(name)}: the model's last layer ({last.name}) applies softmax, but a "
            "model gives logits: compile_model's loss takes logits, and predict and the "
            f"export apply softmax themselves. Fix: {end}, without activation='softmax'"
        )


def takes_steps_per_execution(name: str) -> bool:
    """Whether model ``name``'s ``build`` accepts ``steps_per_execution``."""
    return _takes(get(name), "steps_per_execution")


def resolve_steps_per_execution(name: str, requested: int, strategy: str) -> int:
    """The steps per call of the train function a run of model ``name`` uses.

    Args:
        name: the model.
        requested: the user's ``steps_per_execution``; 0 chooses.
        strategy: ``multi_worker_mirrored`` or ``parameter_server``.

    Returns:
        ``requested`` when it is 1 or more; for 0,
        :data:`AUTO_STEPS_PER_EXECUTION` under ``multi_worker_mirrored`` (and a
        single process) when the model's ``build`` takes the argument, else 1
        (``parameter_server`` keeps one step per scheduled function).

    Raises:
        UnknownModelError: no such model (for ``requested`` 0). A ``requested`` above 1 that the
            model cannot take is refused by :func:`build` (and, before
            TensorFlow starts, by ``training.train.check``).
    """
    if requested >= 1:
        return requested
    if strategy == "parameter_server" or not takes_steps_per_execution(name):
        return 1
    return AUTO_STEPS_PER_EXECUTION


def check_steps_per_execution(name: str) -> None:
    """Raise UnknownModelError unless model ``name``'s ``build`` takes ``steps_per_execution``."""
    if not takes_steps_per_execution(name):
        raise UnknownModelError(
            f"training/models/{name}.py: build() takes no steps_per_execution. Fix: add the "
            "parameter and pass it to model.compile, or train with steps_per_execution=1"
        )


#: Each ``learning_rate_scaling``: the step size's factor for a number of
#: replicas, and how the run's summary writes it (:func:`learning_rate_rule`).
_SCALINGS: dict[str, tuple[Callable[[int], float], str]] = {
    "sqrt": (math.sqrt, "sqrt({})"),
    "linear": (float, "{}"),
    "none": (lambda _replicas: 1.0, "1"),
}

#: How the step size grows with the replicas of a synchronous all-reduce,
#: whose global batch is ``batch_size`` x replicas (``learning_rate_scaling``).
LEARNING_RATE_SCALINGS = tuple(_SCALINGS)


def scaled_learning_rate(base: float, replicas: int, scaling: str) -> float:
    """The step size for a global batch ``replicas`` times one worker's.

    ``sqrt`` multiplies ``base`` by the square root of ``replicas``, the rule
    for Adam (Malladi et al., "On the SDEs and Scaling Rules for Adaptive
    Gradient Algorithms", NeurIPS 2022; Hoffer et al., NeurIPS 2017, for SGD);
    ``linear`` by ``replicas``, the rule for SGD with momentum (Goyal et al.,
    "Accurate, Large Minibatch SGD", arXiv:1706.02677, 2017); ``none`` keeps
    ``base``. ``sqrt`` is the default: with the larger global batch of
    several workers it reaches a given test accuracy in fewer epochs than
    ``none``.

    Args:
        base: the step size for one worker's batch (``learning_rate``).
        replicas: replicas in sync, 1 or more.
        scaling: a name of :data:`LEARNING_RATE_SCALINGS`.

    Raises:
        ValueError: an unknown scaling, or fewer than one replica.
    """
    if scaling not in LEARNING_RATE_SCALINGS:
        raise ValueError(
            f"learning_rate_scaling={scaling} is unknown; choose one of "
            f"{', '.join(LEARNING_RATE_SCALINGS)}"
        )
    if replicas < 1:
        raise ValueError(f"replicas={replicas} must be 1 or more")
    return base * _SCALINGS[scaling][0](replicas)


def learning_rate_rule(base: float, replicas: int, scaling: str, asynchronous: bool) -> str:
    """How a run's step size came from ``base``, for the run's summary.

    Args:
        base: the step size for one worker's batch.
        replicas: replicas in sync (workers applying one global batch).
        scaling: a name of :data:`LEARNING_RATE_SCALINGS`.
        asynchronous: ``parameter_server``, whose steps are each one worker's batch.

    Returns:
        e.g. ``"0.001 x sqrt(2), learning_rate_scaling=sqrt"``; ``""`` when
        there is nothing to scale (one replica).
    """
    if asynchronous:
        # No apostrophe and no ": " in it: Ansible's YAML output would quote and fold the line.
        return f"{base}, not scaled under parameter_server, where each step is one worker batch"
    if replicas <= 1:
        return ""
    return f"{base} x {_SCALINGS[scaling][1].format(replicas)}, learning_rate_scaling={scaling}"


def learning_rate(name: str) -> float:
    """The step size model ``name`` recommends (its ``LEARNING_RATE``).

    Raises:
        UnknownModelError: no such model or file.
        ModelError: its module cannot be imported.
    """
    get(name)
    return float(getattr(_module(name), "LEARNING_RATE", DEFAULT_LEARNING_RATE))
