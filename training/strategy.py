"""Distribution strategies: TensorFlow's own, chosen by name and the task's TF_CONFIG.

- ``multi_worker_mirrored``: ``tf.distribute.MultiWorkerMirroredStrategy``,
  synchronous data parallelism, gradients summed by collective all-reduce.
- ``parameter_server``: ``tf.distribute.ParameterServerStrategy``; the chief
  is the coordinator, ps and worker tasks only run a ``tf.distribute.Server``
  that never returns (TensorFlow's "Parameter server training with
  ParameterServerStrategy" tutorial).

Call :func:`make_strategy` before any other TensorFlow call of the process:
MultiWorkerMirroredStrategy configures the runtime and fails once it is up.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

from training.cluster import STRATEGY_JOBS, TFConfig

log = logging.getLogger(__name__)

STRATEGIES = tuple(STRATEGY_JOBS)


def is_server_task(tf_config: TFConfig | None, strategy: str) -> bool:
    """True for the ps and worker tasks of ``parameter_server``: they only serve."""
    return (
        tf_config is not None
        and strategy == "parameter_server"
        and tf_config.task.type in ("ps", "worker")
    )


#: Least inter-op threads of a ps or worker server under ``parameter_server``.
#: TensorFlow sizes a server's inter-op pool by the CPUs the process may run
#: on; with one (a node pinned to one core), the workers' first remote train
#: function never returns and the run hangs at 0% CPU with no error (TF 2.21);
#: with two it trains as fast as under a one-core CPU quota.
SERVER_INTER_OP_THREADS = 2


def serve(tf_config: TFConfig, threads: int) -> None:
    """Run this task's gRPC server until the process is stopped; never returns normally.

    Args:
        tf_config: this task's place in the cluster (a ps or a
            ``parameter_server`` worker).
        threads: intra-op threads; the inter-op pool gets at least
            :data:`SERVER_INTER_OP_THREADS`.
    """
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=tf_config.task.type,
        task_index=tf_config.task.index,
        protocol=resolver.rpc_layer or "grpc",
        config=tf.compat.v1.ConfigProto(
            intra_op_parallelism_threads=threads,
            inter_op_parallelism_threads=max(threads, SERVER_INTER_OP_THREADS),
        ),
        start=True,
    )
    # The server's coordination service may have taken SIGTERM for its
    # preemption notifier (see training.train.take_sigterm); join() blocks in
    # TensorFlow, where no Python handler runs: SIGTERM ends the process.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    log.info("%s serving at %s until stopped", tf_config.task.name, tf_config.task.address)
    server.join()


#: Collective implementations for ``multi_worker_mirrored`` on CPU: ``auto``
#: lets TensorFlow choose (ring on CPU), ``ring`` asks for it explicitly.
ALL_REDUCE_IMPLEMENTATIONS = ("auto", "ring")


#: Dtypes the gradients of ``multi_worker_mirrored`` cross the network in
#: (``all_reduce_dtype``): float32 as computed, or float16 (half the bytes).
ALL_REDUCE_DTYPES = ("float32", "float16")


def all_reduce_in(optimizer: Any, dtype: str) -> None:
    """Make ``optimizer`` all-reduce its gradients in ``dtype``, and update in theirs.

    Horovod's fp16 compression (Sergeev and Del Balso, "Horovod: fast and easy
    distributed deep learning in TensorFlow", arXiv:1802.05799, 2018): each
    gradient is cast to float16 before the all-reduce sum and back to its
    variable's dtype after, so the all-reduce moves half the bytes and the
    optimizer's update stays in float32. float16 keeps 11 significant bits and
    magnitudes from about 6e-8 to 65504: a gradient element below 6e-8 becomes
    0, one above 65504 becomes inf (which TerminateOnNaN then stops).

    Overrides ``aggregate_gradients``, the hook tf_keras' optimizers leave for
    custom aggregation (``tf_keras.optimizers.Optimizer.aggregate_gradients``);
    the all-reduce keeps the strategy's ``CommunicationOptions``.

    Args:
        optimizer: a tf_keras optimizer (``model.optimizer`` after compile),
            built under a ``multi_worker_mirrored`` strategy's scope.
        dtype: a name of :data:`ALL_REDUCE_DTYPES`.

    Raises:
        ValueError: an unknown dtype.
        TypeError: an optimizer without ``aggregate_gradients`` (a legacy
            optimizer).
    """
    if dtype not in ALL_REDUCE_DTYPES:
        raise ValueError(
            f"all_reduce_dtype {dtype!r} is unknown; choose one of {', '.join(ALL_REDUCE_DTYPES)}"
        )
    if not callable(getattr(optimizer, "aggregate_gradients", None)):
        raise TypeError(
            f"{type(optimizer).__name__} has no aggregate_gradients: use a tf_keras.optimizers "
            "optimizer (not tf_keras.optimizers.legacy) to all-reduce in float16"
        )
    if dtype == "float32":
        return
    import tensorflow as tf

    wire = tf.as_dtype(dtype)

    def aggregate_gradients(grads_and_vars: Any) -> list[tuple[Any, Any]]:
        pairs = list(grads_and_vars)
        present = [(g, v) for g, v in pairs if g is not None]
        if not present:
            return pairs
        sent = [tf.cast(g, wire) for g, _ in present]
        summed = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, sent)
        back = iter([tf.cast(s, v.dtype) for s, (_, v) in zip(summed, present, strict=True)])
        return [(None, v) if g is None else (next(back), v) for g, v in pairs]

    optimizer.aggregate_gradients = aggregate_gradients


def local_step_metrics(model: Any) -> None:
    """Give ``model``'s per-step logs from this worker's replica, without an all-reduce.

    tf_keras returns every metric's ``result()`` from each train step
    (``Model.train_step`` -> ``get_metrics_result``), and under
    ``multi_worker_mirrored`` reading a metric's state (its SyncOnRead
    ``total`` and ``count`` variables) from a replica all-reduces it
    (``tf_keras.utils.metrics_utils.result_wrapper``). With a loss and one
    compiled metric that is four collectives in every step besides the
    gradients' one, each a round trip between the workers and a point where
    the faster worker waits for the slower: on small models they take a
    good part of a step's time.

    Afterwards a step's logs (what the per-step progress, the metrics
    exporter and TerminateOnNaN see) are this replica's running means over
    the epoch so far. The epoch's logs are unchanged: ``fit`` reads them
    through ``get_metrics_result`` in a cross-replica context at the end of
    every epoch, where this defers to tf_keras, so the history, the progress
    events and TensorBoard still average over every worker (one all-reduce
    per metric variable per epoch).

    Args:
        model: a compiled tf_keras model, built under the strategy's scope.
    """
    import tensorflow as tf

    keras_result = model.get_metrics_result

    def get_metrics_result() -> dict[str, Any]:
        if tf.distribute.in_cross_replica_context():
            return keras_result()
        logs: dict[str, Any] = {}
        for metric in model.metrics:
            # The class's result(), not the instance's: tf_keras wraps each
            # instance's in the sync-on-read context that all-reduces.
            value = type(metric).result(metric)
            if isinstance(value, dict):
                logs.update(value)
            else:
                logs[metric.name] = value
        return logs

    model.get_metrics_result = get_metrics_result


#: glibc ``mallopt`` parameters (malloc.h) and the values restore_malloc sets:
#: blocks up to 32 MiB (glibc's largest mmap threshold) come from the heap, and
#: up to 256 MiB of freed heap stays mapped instead of going back to the kernel.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES = 32 << 20, 256 << 20


def restore_malloc(strategy: Any) -> bool:
    """Undo the malloc setting TensorFlow's input pipeline makes, which slows CPU training.

    The first ``GeneratorDataset`` kernel of a process (every
    MultiWorkerMirroredStrategy input goes through one: its
    MultiDeviceIterator) calls glibc's ``mallopt(M_MMAP_THRESHOLD, 128 KiB)``
    once, a memory patch for Python 3.11 (TensorFlow issue #65675). From
    then on every tensor buffer above 128 KiB is a fresh ``mmap`` whose
    pages fault in zeroed as the kernels write them: thousands of page
    faults and their system time in every step. This triggers the patch
    now, through a two-element dataset distributed by ``strategy``, then sets
    the thresholds back up (:data:`MMAP_THRESHOLD_BYTES`,
    :data:`TRIM_THRESHOLD_BYTES`): the buffers come from the heap again, for
    the same accuracy and a little more resident memory.

    Returns:
        True when glibc took both settings; False without glibc (nothing
        changes then).
    """
    import ctypes

    import tensorflow as tf

    probe = tf.data.Dataset.range(2).batch(2)
    next(iter(strategy.experimental_distribute_dataset(probe)))
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(
            libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
            and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
        )
    except (OSError, AttributeError):
        return False


def make_strategy(
    tf_config: TFConfig | None,
    strategy: str,
    all_reduce: str = "auto",
    pack_bytes: int = 0,
) -> Any:
    """The ``tf.distribute.Strategy`` for this task.

    A ``multi_worker_mirrored`` cluster of a single worker trains with
    TensorFlow's default strategy: with nobody to all-reduce with, the
    collective runtime and the distributed input only cost time.

    Args:
        tf_config: this task's parsed TF_CONFIG, or None to train in one
            process (TensorFlow's default strategy).
        strategy: a name of :data:`STRATEGIES`.
        all_reduce: a name of :data:`ALL_REDUCE_IMPLEMENTATIONS`, the
            ``CommunicationImplementation`` of the gradient all-reduce.
        pack_bytes: ``CommunicationOptions.bytes_per_pack``: gradients are
            all-reduced in packs of about this many bytes; 0 lets TensorFlow
            pack them (one all-reduce for all of a model this small).

    Returns:
        The strategy; its ``num_replicas_in_sync`` gives the replicas a global
        batch is split over.

    Raises:
        ValueError: unknown strategy name, or a ps/worker task of
            ``parameter_server`` (those call :func:`serve` instead).
    """
    import tensorflow as tf

    if strategy not in STRATEGIES:
        raise ValueError(f"strategy {strategy!r} is unknown; choose one of {', '.join(STRATEGIES)}")
    if all_reduce not in ALL_REDUCE_IMPLEMENTATIONS:
        raise ValueError(
            f"all_reduce {all_reduce!r} is unknown; choose one of "
            f"{', '.join(ALL_REDUCE_IMPLEMENTATIONS)}"
        )
    if tf_config is None:
        log.info("no TF_CONFIG: training in this one process (default strategy)")
        return tf.distribute.get_strategy()
    if strategy == "multi_worker_mirrored":
        if len(tf_config.tasks) == 1:
            log.info("%s is the only worker: default strategy", tf_config.task.name)
            return tf.distribute.get_strategy()
        implementation = tf.distribute.experimental.CommunicationImplementation
        options = tf.distribute.experimental.CommunicationOptions(
            bytes_per_pack=pack_bytes,
            implementation=implementation.RING if all_reduce == "ring" else implementation.AUTO,
        )
        mirrored = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        if not restore_malloc(mirrored):
            log.warning("no glibc mallopt: steps may run slower (see restore_malloc)")
        return mirrored
    if is_server_task(tf_config, strategy):
        raise ValueError(f"{tf_config.task.name} of parameter_server serves; call serve()")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    return tf.distribute.experimental.ParameterServerStrategy(resolver)
