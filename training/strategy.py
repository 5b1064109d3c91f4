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


def serve(tf_config: TFConfig) -> None:
    """Run this task's gRPC server until the process is stopped; never returns normally."""
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=tf_config.task.type,
        task_index=tf_config.task.index,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    log.info("%s serving at %s until stopped", tf_config.task.name, tf_config.task.address)
    server.join()


#: Collective implementations for ``multi_worker_mirrored`` on CPU: ``auto``
#: lets TensorFlow choose (ring on CPU), ``ring`` asks for it explicitly.
ALL_REDUCE_IMPLEMENTATIONS = ("auto", "ring")


#: glibc ``mallopt`` parameters (malloc.h) and the values restore_malloc sets:
#: blocks up to 32 MiB (glibc's largest mmap threshold) come from the heap, and
#: up to 256 MiB of freed heap stays mapped instead of going back to the kernel.
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_BYTES, TRIM_THRESHOLD_BYTES = 32 << 20, 256 << 20


def restore_malloc(strategy: Any) -> bool:
    """Undo the malloc setting TensorFlow's input pipeline makes, which halves CPU training speed.

    The first ``GeneratorDataset`` kernel of a process (every
    MultiWorkerMirroredStrategy input goes through one: its
    MultiDeviceIterator) calls glibc's ``mallopt(M_MMAP_THRESHOLD, 128 KiB)``
    once, a memory patch for Python 3.11 (TensorFlow issue #65675). From
    then on every tensor buffer above 128 KiB is a fresh ``mmap`` whose
    pages fault in zeroed as the kernels write them: measured on one core,
    10,700 page faults and 34 ms of system time in every step of mnist_cnn
    at batch 64 (75-87 ms a step instead of 39-45). This triggers the patch
    now, through a two-element dataset distributed by ``strategy``, then sets
    the thresholds back up (:data:`MMAP_THRESHOLD_BYTES`,
    :data:`TRIM_THRESHOLD_BYTES`): 8-34 faults a step, 39 ms, the same
    accuracy, about 20 MB more resident memory.

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
