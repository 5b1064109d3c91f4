"""mnist: the full MNIST digits, from the Keras ``mnist.npz`` (60,000 train, 10,000 test).

``-e dataset=mnist``. Input shape (28, 28), uint8 pixels 0-255 scaled by
1/255; classes ``"0"`` .. ``"9"``, label ``i`` is digit ``i``.

Preparing (control node): ``site.yml`` downloads :data:`MNIST_URL` once
(``get_url`` with its sha256) and passes the file as ``source``; the shard
writer checks its sha256 against :data:`MNIST_SHA256` before reading it and
writes the Keras train/test split as it is. The digest is the pinned sha256,
so the id is known without reading the file: a prepared copy is found even
before the download. Loading (tasks): as every dataset, through the shard
pipeline (:mod:`training.datasets.pipeline`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from training.datasets._base import DatasetError, Plan, Settings
from training.datasets.npz_file import Arrays, Row, sha256sum

if TYPE_CHECKING:
    import numpy as np

NAME = "mnist"
#: Where Keras fetches the full MNIST (``keras.datasets.mnist.load_data``).
MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
#: sha256 of that file, as pinned in Keras' ``mnist.load_data`` (file_hash).
MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"
#: Examples of each split in that file.
TRAIN_EXAMPLES, TEST_EXAMPLES = 60_000, 10_000
INPUT_SHAPE = (28, 28)
CLASSES = [str(d) for d in range(10)]


def check(spec: str, settings: Settings, source: Path | None = None) -> None:
    """Nothing to check before the download: the file is checked when it is prepared."""


def _verify(source: Path | None) -> None:
    if source is None:
        raise DatasetError(
            f"dataset mnist is prepared from the Keras file {MNIST_URL}; download it "
            "(site.yml does, checking its sha256) and pass it with --source"
        )
    try:
        got = sha256sum(source)
    except OSError as err:
        raise DatasetError(
            f"{source} cannot be read ({err.strerror}). Fix: download {MNIST_URL} again "
            "(site.yml does)"
        ) from None
    if got != MNIST_SHA256:
        raise DatasetError(
            f"{source}: sha256 {got} is not the Keras mnist.npz ({MNIST_SHA256}); "
            "delete the file and download it again"
        )


def plan(spec: str, settings: Settings, source: Path | None = None) -> Plan:
    """The Keras split as it is; ``source`` is read (and its sha256 checked) only to prepare.

    Raises:
        DatasetError: (from ``load``) no ``source``, or a file whose sha256 is
            not :data:`MNIST_SHA256`.
    """

    def verify() -> None:
        _verify(source)

    arrays = Arrays(source or Path(), check=verify)
    labels = Arrays(source or Path())

    def load(row: Row) -> tuple[np.ndarray, int]:
        x = arrays.get(row.array)[row.index]
        y = labels.get("y" + row.array[1:])[row.index]
        return x, int(y)

    scale = 1 / 255
    return Plan(
        name=NAME,
        kind=NAME,
        digest=MNIST_SHA256,
        settings_used={},
        input_shape=INPUT_SHAPE,
        dtype="uint8",
        scale=scale,
        classes=CLASSES,
        train=[Row("x_train", i) for i in range(TRAIN_EXAMPLES)],
        test=[Row("x_test", i) for i in range(TEST_EXAMPLES)],
        load=load,
        preprocessing={
            "kind": NAME,
            "input_shape": list(INPUT_SHAPE),
            "scale": scale,
            "classes": CLASSES,
        },
        source=str(source) if source else MNIST_URL,
    )
