"""Training metrics in the Prometheus text format, served by each task.

Each task serves ``http://<address>:<port>/metrics`` with ``prometheus_client``
(the Prometheus project's own Python client). Every series carries the labels
``task`` (``worker-1``), ``job_type`` (``worker``) and ``run_id``; Prometheus
adds ``instance``. Series:

- ``raspi_tf_examples_per_second``: this task's examples/s over the last
  progress interval (its own per-worker batches), gauge.
- ``raspi_tf_step_seconds``: mean wall seconds of one step over that interval.
- ``raspi_tf_loss``, ``raspi_tf_accuracy``: the newest training values.
- ``raspi_tf_epoch``: the epoch being trained (1-based).
- ``raspi_tf_steps_total``: steps this process ran, counter.
- ``raspi_tf_restarts``: restarts of this task in this run so far.

Parameter-server ps and worker tasks only run servers: they export
``raspi_tf_restarts`` alone (``trains=False``), so a graph of them shows no
data rather than a flat zero; the chief counts the cluster's examples/s.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

LABELS = ("task", "job_type", "run_id")


class Exporter:
    """The metrics of one task; a no-op when ``port`` is 0.

    Args:
        port: TCP port to serve on; 0 serves nothing.
        address: address to bind (``127.0.0.1`` on the local inventory).
        task: the task name, e.g. ``worker-1``.
        run_id: the run's name.
        trains: False for a task that only serves (a ps, or a worker of
            ``parameter_server``): it exports ``raspi_tf_restarts`` alone.
    """

    def __init__(
        self, port: int, address: str, task: str, run_id: str, trains: bool = True
    ) -> None:
        self.enabled = port > 0
        self.trains = trains
        if not self.enabled:
            return
        import prometheus_client as prom

        registry = prom.CollectorRegistry()
        values = (task, task.rsplit("-", 1)[0], run_id)

        def gauge(name: str, doc: str) -> Any:
            return prom.Gauge(name, doc, LABELS, registry=registry).labels(*values)

        self.restarts = gauge("raspi_tf_restarts", "restarts of this task in this run")
        if trains:
            self.examples_per_second = gauge(
                "raspi_tf_examples_per_second", "examples/s of this task over the last interval"
            )
            self.step_seconds = gauge(
                "raspi_tf_step_seconds", "mean seconds per step, last interval"
            )
            self.loss = gauge("raspi_tf_loss", "newest training loss")
            self.accuracy = gauge("raspi_tf_accuracy", "newest training accuracy")
            self.epoch = gauge("raspi_tf_epoch", "epoch being trained, 1-based")
            self.steps = prom.Counter(
                "raspi_tf_steps", "steps run by this process", LABELS, registry=registry
            ).labels(*values)
        try:
            prom.start_http_server(port, addr=address, registry=registry)
        except OSError as err:
            # Metrics are a view: a taken port must not stop the training.
            log.warning("cannot serve metrics on %s:%d: %s", address, port, err)
            self.enabled = False
            return
        log.info("metrics at http://%s:%d/metrics", address, port)

    def record(
        self,
        *,
        epoch: int | None = None,
        steps: int = 0,
        seconds: float = 0.0,
        examples: int = 0,
        logs: dict[str, float] | None = None,
    ) -> None:
        """Update the series after ``steps`` steps took ``seconds`` and trained ``examples``."""
        if not (self.enabled and self.trains):
            return
        if epoch is not None:
            self.epoch.set(epoch)
        if steps:
            self.steps.inc(steps)
        if seconds > 0 and steps:
            self.step_seconds.set(seconds / steps)
            self.examples_per_second.set(examples / seconds)
        for key, gauge in (("loss", self.loss), ("accuracy", self.accuracy)):
            if logs and key in logs:
                gauge.set(logs[key])
