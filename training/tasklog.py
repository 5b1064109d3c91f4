"""Per-task event log and start-up watchdog, for restarts, status and plots.

Every task (the chief too) appends JSON lines to ``<output dir>/tasks/<task>.jsonl``
on its own node, one per event, each with ``event`` and ``time`` (Unix seconds):

- ``start``: the process started; ``restarts`` is how many starts came before
  (restarts are counted from this file, so systemd units and the local
  launcher count them the same way), ``pid``, ``host``.
- ``resume``: ``from_epoch``, the last epoch the restored backup had finished.
- ``epoch``: ``epoch`` (1-based), ``loss``, ``accuracy``, ``seconds``,
  ``examples_per_second`` of this worker (its own per-worker batches).
- ``end``: the task finished its part of the run.
- ``timeout``: the start-up watchdog gave up; ``missing`` names the tasks.

This module imports no TensorFlow.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any

from training.cluster import TFConfig
from training.progress import ProgressWriter, read_events

log = logging.getLogger(__name__)

TASKS_DIR = "tasks"
#: Exit status of a task whose cluster did not form within the start-up timeout.
STARTUP_TIMEOUT_EXIT = 3


def task_log_path(output_dir: Path, task: str) -> Path:
    """``<output_dir>/tasks/<task>.jsonl``."""
    return Path(output_dir) / TASKS_DIR / f"{task}.jsonl"


def count_starts(path: Path) -> int:
    """How many ``start`` events a task log holds (0 if it is missing)."""
    return sum(1 for e in read_events(path) if e.get("event") == "start")


def open_task_log(output_dir: Path, task: str) -> tuple[ProgressWriter, int]:
    """Record that this task starts; return its writer and its restarts so far.

    Returns:
        ``(writer, restarts)``: restarts is the number of earlier starts of
        this task in this run (0 on the first start).
    """
    path = task_log_path(output_dir, task)
    restarts = count_starts(path)
    writer = ProgressWriter(path)
    writer.write("start", restarts=restarts, pid=os.getpid(), host=socket.gethostname())
    return writer, restarts


def unreachable_tasks(tf_config: TFConfig, timeout: float = 2.0) -> list[str]:
    """The other tasks whose host:port does not accept a TCP connection now.

    Returns:
        ``["worker-1 (10.0.0.12:2222)", ...]``, in cluster order.
    """
    missing = []
    for task in tf_config.tasks:
        if task.name == tf_config.task.name:
            continue
        host, port = task.address.rsplit(":", 1)
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
                pass
        except OSError:
            missing.append(f"{task.name} ({task.address})")
    return missing


class StartupWatchdog:
    """Ends the process when its cluster has not formed within ``timeout`` seconds.

    TensorFlow waits for a missing task for a long time (MultiWorkerMirroredStrategy's
    first collective, the parameter-server coordinator's first connection). Past
    the timeout the watchdog logs which tasks do not answer on their port,
    writes a ``timeout`` event and exits with :data:`STARTUP_TIMEOUT_EXIT`, so the
    supervisor (systemd or the local launcher) restarts the task or, past its
    restart limit, ends the run, naming the missing task.

    Call :meth:`formed` once training runs (the first step or epoch).
    """

    def __init__(self, tf_config: TFConfig, timeout: float, writer: ProgressWriter | None) -> None:
        self.tf_config = tf_config
        self.timeout = timeout
        self.writer = writer
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="startup-watchdog", daemon=True)

    def start(self) -> StartupWatchdog:
        """Start watching (nothing when the timeout is 0); returns self."""
        if self.timeout > 0:
            self._thread.start()
        return self

    def formed(self) -> None:
        """The cluster formed: stop watching."""
        self._done.set()

    def _watch(self) -> None:
        if self._done.wait(self.timeout):
            return
        missing = unreachable_tasks(self.tf_config)
        who = ", ".join(missing) if missing else "every task answers on its port"
        message = (
            f"{self.tf_config.task.name}: the cluster did not form within {self.timeout:.0f} s "
            f"(training_run_startup_timeout); not answering: {who}. Look at the log of "
            "those tasks (journalctl -u raspi-tf-task@<task>, or runs/<run>/logs/<task>.log)"
        )
        log.error(message)
        if self.writer is not None:
            self.writer.write("timeout", missing=missing, message=message)
        logging.shutdown()
        os._exit(STARTUP_TIMEOUT_EXIT)


def summarise(path: Path) -> dict[str, Any]:
    """The newest state of one task log: restarts, epoch, loss, examples/s, ended.

    Returns:
        ``{"restarts", "epoch", "loss", "accuracy", "examples_per_second",
        "resumed_from", "ended", "started"}`` (None where unknown).
    """
    events = read_events(path)
    starts = [e for e in events if e.get("event") == "start"]
    epochs = [e for e in events if e.get("event") == "epoch"]
    resumes = [e for e in events if e.get("event") == "resume"]
    last = epochs[-1] if epochs else {}
    return {
        "restarts": max(len(starts) - 1, 0),
        "started": starts[-1]["time"] if starts else None,
        "epoch": last.get("epoch"),
        "loss": last.get("loss"),
        "accuracy": last.get("accuracy"),
        "examples_per_second": last.get("examples_per_second"),
        "resumed_from": resumes[-1]["from_epoch"] if resumes else None,
        "ended": bool(events) and events[-1].get("event") == "end",
    }
