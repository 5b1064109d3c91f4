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


def make_strategy(tf_config: TFConfig | None, strategy: str) -> Any:
    """The ``tf.distribute.Strategy`` for this task.

    Args:
        tf_config: this task's parsed TF_CONFIG, or None to train in one
            process (TensorFlow's default strategy).
        strategy: a name of :data:`STRATEGIES`.

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
    if tf_config is None:
        log.info("no TF_CONFIG: training in this one process (default strategy)")
        return tf.distribute.get_strategy()
    if strategy == "multi_worker_mirrored":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if is_server_task(tf_config, strategy):
        raise ValueError(f"{tf_config.task.name} of parameter_server serves; call serve()")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    return tf.distribute.experimental.ParameterServerStrategy(resolver)
