"""The tf.data input of a task: stream the staged shard files, never the whole split in memory.

Every kind of dataset reaches a task the same way, as the fixed-length
record shards of :mod:`training.datasets.shards`, read by
``tf.data.FixedLengthRecordDataset``:

- :func:`train_dataset` (``multi_worker_mirrored`` and one process): the
  manifest's train files in order, auto-sharded by FILE, so worker ``i`` of
  ``N`` reads only the shards ``j % N == i`` that its node holds;
- :func:`per_worker_dataset_fn` (``parameter_server``): each worker reads
  the train shards present in its own staged folder;
- :func:`test_dataset` (the chief's evaluation): the test files, in order.

Records are shuffled before they are decoded, in a buffer of at most
:data:`SHUFFLE_BUFFER_BYTES`: a task's memory does not grow with the
dataset. Batches are decoded whole (``tf.io.decode_raw``), features cast to
float32 and multiplied by the manifest's ``scale``, labels int32.
TensorFlow is imported when a function is called, not with the module.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training.datasets._base import DatasetError
from training.datasets.shards import LABEL_BYTES, Manifest, ShardFile

if TYPE_CHECKING:
    import tensorflow as tf

#: Most bytes of records a task's shuffle buffer holds: its memory stays flat
#: whatever the dataset's size, and a dataset of up to this size (mnist_5k's
#: training split) is shuffled whole.
SHUFFLE_BUFFER_BYTES = 32 << 20
#: Shard files a task reads at once, one record of each in turn.
INTERLEAVE_FILES = 4
#: Read-ahead of each open shard file.
READ_BUFFER_BYTES = 256 << 10
#: Batches made ahead of the training step.
PREFETCH_BATCHES = 2


def steps_per_epoch(n_train: int, global_batch: int) -> int:
    """Optimizer steps in one pass over ``n_train`` examples, remainder dropped.

    Every worker runs exactly this many steps per epoch whatever the size of
    its shards: the training dataset repeats, so uneven shards never leave
    one worker waiting for another at the end of an epoch.

    Raises:
        DatasetError: the dataset is smaller than one global batch.
    """
    steps = n_train // global_batch
    if steps < 1:
        raise DatasetError(
            f"{n_train} training examples are fewer than one step's batch of {global_batch}; "
            "lower batch_size"
        )
    return steps


def shuffle_buffer(manifest: Manifest) -> int:
    """Records in the shuffle buffer: the whole split, or :data:`SHUFFLE_BUFFER_BYTES` of it."""
    return max(1, min(manifest.train.examples, SHUFFLE_BUFFER_BYTES // manifest.record_bytes))


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


def decoder(manifest: Manifest) -> Callable[[Any], tuple[Any, Any]]:
    """A function of a batch of records (tf.string (batch,)) to (features, labels).

    Features are float32 (batch, *input_shape), multiplied by the manifest's
    ``scale``; labels int32 (batch,). Both are read little-endian, as written.
    """
    import tensorflow as tf

    shape = list(manifest.input_shape)
    uint8 = manifest.dtype == "uint8"
    feature_bytes = manifest.record_bytes - LABEL_BYTES
    scale = float(manifest.scale)

    def decode(records: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        labels = tf.io.decode_raw(
            tf.strings.substr(records, 0, LABEL_BYTES), tf.int32, little_endian=True
        )
        features = tf.io.decode_raw(
            tf.strings.substr(records, LABEL_BYTES, feature_bytes),
            tf.uint8 if uint8 else tf.float32,
            little_endian=True,
        )
        x = tf.reshape(tf.cast(features, tf.float32), [-1, *shape])
        if scale != 1.0:
            x = x * scale
        return x, tf.reshape(labels, [-1])

    return decode


def _read(files: Any, manifest: Manifest) -> tf.data.Dataset:
    """Records of the file names in dataset ``files``, a few files at a time in turn."""
    import tensorflow as tf

    size = manifest.record_bytes
    return files.interleave(
        lambda name: tf.data.FixedLengthRecordDataset(name, size, buffer_size=READ_BUFFER_BYTES),
        cycle_length=INTERLEAVE_FILES,
        block_length=1,
    )


def _paths(manifest: Manifest, data_dir: Path | str, files: list[Any]) -> list[str]:
    return [str(Path(data_dir) / manifest.id / s.file) for s in files]


def train_dataset(
    manifest: Manifest,
    data_dir: Path | str,
    global_batch: int,
    seed: int,
    files: list[ShardFile] | None = None,
) -> tf.data.Dataset:
    """The training input of ``multi_worker_mirrored`` and of a single process.

    The pipeline: the manifest's train files in order -> ``interleave`` of
    ``FixedLengthRecordDataset`` -> shuffle (:func:`shuffle_buffer` records,
    reshuffled every pass) -> repeat -> batch by the global batch, remainder
    dropped -> decode -> prefetch :data:`PREFETCH_BATCHES`. The auto-shard
    policy is FILE, set explicitly: under ``multi_worker_mirrored`` each
    worker keeps the files ``j % N == i`` (what its node holds), reads only
    their records, and ``fit`` splits each of its global batches into the
    per-worker batches of successive steps. The dataset repeats and ``fit``
    runs a fixed ``steps_per_epoch``, so every worker runs the same number
    of steps in every epoch, whatever the sizes of its shards.

    Args:
        manifest: the staged dataset.
        data_dir: the folder holding ``<id>/`` on this node.
        global_batch: examples per synchronous step over all replicas.
        seed: shuffle seed; each worker gives its own (``training.train``
            adds its index), so that two workers' streams of equal length do
            not pair the same examples in every global batch.
        files: the train shards to read; every one (the default) for a
            cluster's workers, whose FILE sharding picks their own.

    Returns:
        Endless batches of (float32 (global_batch, *input_shape), int32 (global_batch,)).
    """
    import tensorflow as tf

    _no_autotune_in_device_prefetch()
    names = tf.data.Dataset.from_tensor_slices(
        _paths(manifest, data_dir, manifest.all_train_files() if files is None else files)
    )
    ds = _read(names, manifest)
    ds = ds.shuffle(shuffle_buffer(manifest), seed=seed, reshuffle_each_iteration=True)
    ds = ds.repeat().batch(global_batch, drop_remainder=True).map(decoder(manifest))
    ds = ds.prefetch(PREFETCH_BATCHES)
    return ds.with_options(_options(tf.data.experimental.AutoShardPolicy.FILE))


def per_worker_dataset_fn(
    manifest: Manifest, data_dir: Path | str, batch: int
) -> Callable[[Any], tf.data.Dataset]:
    """A ``dataset_fn`` for ``DatasetCreator`` under ``parameter_server``.

    The coordinator has each worker run this function's graph: the worker
    lists the train shards present in its own staged folder
    (``<data_dir>/<id>/train-*.rec``, in a random order) and draws its own
    batches from them, shuffled with no fixed seed, so asynchronous workers
    do not repeat each other's batches. Sharding is OFF: which shards a
    worker reads is which shards its node holds.

    Args:
        manifest: the staged dataset.
        data_dir: the folder holding ``<id>/`` on every node.
        batch: examples in one worker's step.

    Returns:
        A function of a ``tf.distribute.InputContext`` giving endless
        batches of (float32 (batch, *input_shape), int32 (batch,)).
    """
    import tensorflow as tf

    pattern = str(Path(data_dir) / manifest.id / "train-*.rec")
    buffer = shuffle_buffer(manifest)
    decode = decoder(manifest)

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        per_replica = input_context.get_per_replica_batch_size(batch)
        files = tf.data.Dataset.list_files(pattern, shuffle=True)
        ds = _read(files, manifest).shuffle(buffer, reshuffle_each_iteration=True)
        ds = ds.repeat().batch(per_replica, drop_remainder=True).map(decode)
        ds = ds.prefetch(PREFETCH_BATCHES)
        return ds.with_options(_options(tf.data.experimental.AutoShardPolicy.OFF))

    return dataset_fn


def test_dataset(manifest: Manifest, data_dir: Path | str, batch: int) -> tf.data.Dataset:
    """The test split for the chief's evaluation: the test files in order, not shuffled.

    Args:
        manifest: the staged dataset.
        data_dir: the folder holding ``<id>/`` on this node.
        batch: examples per batch; the last batch may be smaller.

    Returns:
        One pass of batches of (float32 (batch, *input_shape), int32 (batch,)).
    """
    import tensorflow as tf

    files = _paths(manifest, data_dir, manifest.test_files())
    ds = tf.data.FixedLengthRecordDataset(
        files, manifest.record_bytes, buffer_size=READ_BUFFER_BYTES
    )
    ds = ds.batch(batch).map(decoder(manifest)).prefetch(PREFETCH_BATCHES)
    return ds.with_options(_options(tf.data.experimental.AutoShardPolicy.OFF))
