"""A NumPy ``.npz`` file of one's own: ``x_train``, ``y_train``, ``x_test``, ``y_test``.

``-e dataset=/path/to/data.npz`` (the suffix ``.npz`` in any letter case),
the layout of Keras' ``mnist.npz``: the file is written, for example, with
``numpy.savez("data.npz", x_train=x_train, y_train=y_train, x_test=x_test,
y_test=y_test)``.

Arrays: ``x_train`` (n_train, ...) and ``x_test`` (n_test, ...) of any
shape, the same after the first axis; ``y_train`` (n_train,) and ``y_test``
(n_test,) of whole numbers 0 .. classes - 1. An optional ``class_names``
array gives the class names (label ``i`` is ``class_names[i]``); without it
the classes are ``"0"``, ``"1"``, ... up to the largest label.

Input shape: ``x_train.shape[1:]``. ``uint8`` features are stored as they
are and scaled by 1/255 (pixels); any other numeric dtype is stored as
float32 and scaled by 1.

Preparing (control node): :func:`plan` hashes the file and reads the labels
and the arrays' headers only; the shard writer then loads ``x_train`` and
``x_test`` once each (an ``.npz`` is a zip of whole arrays: the control node
holds one split's features while it writes them). Loading (tasks): as every
dataset, through the shard pipeline (:mod:`training.datasets.pipeline`).
"""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training.datasets._base import DatasetError, Plan, Settings, slug

if TYPE_CHECKING:
    import numpy as np

KIND = "npz"
#: The arrays every ``.npz`` dataset holds.
ARRAYS = ("x_train", "y_train", "x_test", "y_test")
#: How the file should be written, for the messages.
_FIX = (
    "numpy.savez(path, x_train=..., y_train=..., x_test=..., y_test=...), y holding whole "
    "numbers 0 .. classes - 1 and optionally class_names=[...]"
)


@dataclass(frozen=True, slots=True)
class Row:
    """One example: row ``index`` of array ``array`` (``x_train`` or ``x_test``)."""

    array: str
    index: int

    def __str__(self) -> str:
        return f"{self.array}[{self.index}]"


def claims(path: Path) -> bool:
    """True for a file whose suffix is ``.npz`` in any letter case."""
    return path.is_file() and path.suffix.lower() == ".npz"


def sha256sum(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def array_header(path: Path, name: str) -> tuple[tuple[int, ...], np.dtype[Any]]:
    """Shape and dtype of array ``name`` in the ``.npz`` at ``path``, its data unread.

    Raises:
        DatasetError: the file is not a readable ``.npz`` or lacks the array.
    """
    import numpy as np

    try:
        with zipfile.ZipFile(path) as archive, archive.open(f"{name}.npy") as member:
            version = np.lib.format.read_magic(member)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(member)
            else:
                shape, _, dtype = np.lib.format.read_array_header_2_0(member)
    except KeyError:
        raise DatasetError(f"{path} has no array {name!r}. Fix: write it with {_FIX}") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise DatasetError(
            f"{path} is not a readable .npz file ({err}). Fix: write it with {_FIX}"
        ) from None
    return tuple(shape), dtype


class Arrays:
    """The feature arrays of an ``.npz``, each loaded from the file on its first use."""

    def __init__(self, path: Path, check: Callable[[], None] | None = None) -> None:
        self.path = path
        self.check = check
        self.loaded: dict[str, np.ndarray] = {}

    def get(self, name: str) -> np.ndarray:
        """Array ``name``; the previous split's features are let go (one split in memory)."""
        import numpy as np

        if name not in self.loaded:
            if self.check is not None:
                self.check()
                self.check = None
            self.loaded.clear()
            try:
                with np.load(self.path, allow_pickle=False) as data:
                    self.loaded[name] = data[name]
            except (OSError, ValueError, KeyError, zipfile.BadZipFile, EOFError) as err:
                raise DatasetError(
                    f"{self.path}: array {name!r} cannot be read ({err}). Fix: write it with {_FIX}"
                ) from None
        return self.loaded[name]


def _labels(path: Path, data: Any, split: str, length: int) -> np.ndarray:
    import numpy as np

    name = f"y_{split}"
    y = np.asarray(data[name])
    if y.ndim != 1 or len(y) != length:
        one_hot = y.ndim == 2 and len(y) == length and y.shape[1] > 1
        fix = (
            f"class numbers, not one-hot rows: {name}={name}.argmax(axis=1)"
            if one_hot
            else f"write it with {_FIX}"
        )
        raise DatasetError(
            f"{path}: {name} has shape {y.shape}, x_{split} {length} examples; {name} must be "
            f"({length},), one label an example. Fix: {fix}"
        )
    if not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.floating)) or (
        len(y) and (not np.all(np.isfinite(y)) or np.any(y != np.round(y)) or y.min() < 0)
    ):
        raise DatasetError(
            f"{path}: {name} ({y.dtype}) does not hold whole numbers 0 or more. Fix: labels "
            "0 .. classes - 1, with the names in class_names"
        )
    return y.astype(np.int64)


def plan(spec: str, settings: Settings, source: Path | None = None) -> Plan:
    """Check the arrays of the ``.npz`` file ``spec`` and hash it; no features are read.

    Args:
        spec: the file's path on the control node.
        settings: none of its fields shape an ``.npz`` (the shard count and
            seed are the writer's).
        source: not used (the file is its own source).

    Raises:
        DatasetError: a file that is not a readable ``.npz``, a missing
            array, lengths that do not match, features of a shape or dtype
            that cannot train, labels that are not whole numbers, or class
            names that do not cover the labels; each names the array and the fix.
    """
    return _plan(Path(spec).expanduser().resolve(), digest=True)


def check(spec: str, settings: Settings, source: Path | None = None) -> None:
    """Validate the file's arrays (headers and labels only; the file is not hashed).

    Raises:
        DatasetError: everything :func:`plan` refuses.
    """
    _plan(Path(spec).expanduser().resolve(), digest=False)


def _plan(path: Path, digest: bool) -> Plan:
    import numpy as np

    headers = {}
    for name in ARRAYS:
        headers[name] = array_header(path, name)
    (train_shape, train_dtype), (test_shape, test_dtype) = headers["x_train"], headers["x_test"]
    for name, shape, dtype in (
        ("x_train", train_shape, train_dtype),
        ("x_test", test_shape, test_dtype),
    ):
        if len(shape) < 2 or 0 in shape[1:]:
            fix = (
                f"one feature an example is a column: {name}={name}.reshape(-1, 1)"
                if len(shape) == 1
                else f"write it with {_FIX}"
            )
            raise DatasetError(
                f"{path}: {name} has shape {shape}; it must be (examples, ...features). Fix: {fix}"
            )
        if not (np.issubdtype(dtype, np.integer) or np.issubdtype(dtype, np.floating)):
            raise DatasetError(
                f"{path}: {name} holds {dtype}, not numbers. Fix: features of a numeric dtype "
                "(uint8 pixels, or floats)"
            )
    if train_shape[1:] != test_shape[1:]:
        raise DatasetError(
            f"{path}: x_train's examples have shape {train_shape[1:]}, x_test's "
            f"{test_shape[1:]}; both splits need the same. Fix: write it with {_FIX}"
        )
    try:
        with np.load(path, allow_pickle=False) as data:
            y_train = _labels(path, data, "train", train_shape[0])
            y_test = _labels(path, data, "test", test_shape[0])
            names = [str(n) for n in data["class_names"]] if "class_names" in data else None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise DatasetError(f"{path} cannot be read ({err}). Fix: write it with {_FIX}") from None
    top = int(max(y_train.max(initial=0), y_test.max(initial=0)))
    if names is None:
        classes = [str(i) for i in range(top + 1)]
    elif len(names) <= top or len(set(names)) != len(names):
        raise DatasetError(
            f"{path}: class_names has {len(names)} names, not all distinct, or fewer than the "
            f"labels need ({top + 1}). Fix: one distinct name per class, label i named "
            "class_names[i]"
        )
    else:
        classes = names
    uint8 = train_dtype == np.uint8 and test_dtype == np.uint8
    stored = "uint8" if uint8 else "float32"
    scale = 1 / 255 if uint8 else 1.0
    arrays = Arrays(path)
    labels = {"x_train": y_train, "x_test": y_test}

    def load(row: Row) -> tuple[np.ndarray, int]:
        x = arrays.get(row.array)[row.index]
        if not uint8:
            x = x.astype(np.float32)
            if not np.all(np.isfinite(x)):
                raise DatasetError(
                    f"{path}: {row} holds NaN or infinity. Fix: finite features only"
                )
        return x, int(labels[row.array][row.index])

    input_shape = tuple(int(n) for n in train_shape[1:])
    return Plan(
        name=slug(path.stem),
        kind=KIND,
        digest=sha256sum(path) if digest else "",
        settings_used={},
        input_shape=input_shape,
        dtype=stored,
        scale=scale,
        classes=classes,
        train=[Row("x_train", i) for i in range(train_shape[0])],
        test=[Row("x_test", i) for i in range(test_shape[0])],
        load=load,
        preprocessing={
            "kind": KIND,
            "input_shape": list(input_shape),
            "dtype": stored,
            "scale": scale,
            "classes": classes,
        },
        source=str(path),
    )
