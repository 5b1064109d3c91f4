"""Per-task event log and start-up watchdog, for restarts, status and plots.

Every task (the chief too) appends JSON lines to ``<output dir>/tasks/<task>.jsonl``
on its own node, one per event, each with ``event`` and ``time`` (Unix seconds):

- ``start``: the process started; ``restarts`` is how many starts came before
  (restarts are counted from this file, so systemd units and the local
  launcher count them the same way), ``pid``, ``host``.
- ``resume``: ``from_epoch``, the last epoch the restored backup had finished.
- ``epoch``: ``epoch`` (1-based), ``loss``, ``accuracy``, ``seconds``,
  ``examples_per_second`` of this worker (its own per-worker batches),
  ``cpu_seconds``: the CPU time (user and system, over every thread) this
  process spent in the epoch; over ``seconds``, how busy its cores were.
- ``end``: the task finished its part of the run.
- ``timeout``: the start-up watchdog gave up; ``missing`` names the tasks.

This module imports no TensorFlow.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from training.cluster import TFConfig
from training.progress import ProgressWriter, plural, read_events

log = logging.getLogger(__name__)

TASKS_DIR = "tasks"
#: The signal that ends a task whose cluster did not form within the start-up
#: timeout (its default action ends the process, and Python installs no handler,
#: so it works while TensorFlow holds the GIL). Supervisors do not restart it.
STARTUP_TIMEOUT_SIGNAL = signal.SIGALRM
#: The exit status of a task whose loss became NaN or infinite. Supervisors do
#: not restart it: it would resume from the same backup with the same step
#: size and diverge again.
DIVERGED_EXIT = 3
#: Why a run ended when a task exited with :data:`DIVERGED_EXIT` (after "task <name>: ").
DIVERGED_REASON = (
    "training diverged (the loss became NaN or infinite), not restarted: it would diverge "
    "again. Fix: a lower learning_rate; its last lines give the epoch and the step size"
)
#: The exit status of a task whose script exited with 2, argparse's usage error
#: (``parser.error``, an argument it does not take): ``EX_USAGE`` of BSD's
#: sysexits.h. Our own commands exit 2 for bad input that a restart may mend
#: (a node's backup not yet reachable), so a script's 2 is given this code.
#: Supervisors do not restart it: the same arguments would be refused again.
USAGE_EXIT = 64
#: Why a run ended when a task exited with :data:`USAGE_EXIT` (after "task <name>: ").
USAGE_REASON = (
    "ran a script that exited with code 2, a usage error (argparse's, for an argument it does "
    "not take), not restarted: it would exit the same way. Fix: its last lines say what it "
    "refused"
)
#: The exit statuses supervisors do not restart (the launcher here, ``RestartPreventExitStatus``
#: on nodes, with :data:`STARTUP_TIMEOUT_SIGNAL`), each with why the run ended.
NOT_RESTARTED = {DIVERGED_EXIT: DIVERGED_REASON, USAGE_EXIT: USAGE_REASON}
#: Seconds (at most a quarter of the timeout) between the watchdog's two probes.
PROBE_MARGIN = 10.0


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
    """Ends this task when its cluster has not formed within ``timeout`` seconds.

    TensorFlow waits for a missing task for a long time (MultiWorkerMirroredStrategy's
    set-up, the parameter-server coordinator's first connection). Past the timeout
    the watchdog logs which tasks do not answer on their port, writes a ``timeout``
    event to the task log and kills the task with :data:`STARTUP_TIMEOUT_SIGNAL`;
    the supervisor (systemd's ``RestartPreventExitStatus``, or the local launcher)
    does not restart it and ends the run, naming the missing task.

    The watchdog is a separate process (``python -m training startup-watchdog``),
    not a thread: in TensorFlow 2.21 a restarted task blocks inside
    ``MultiWorkerMirroredStrategy()`` while a peer is gone for good, holding
    Python's GIL, so no thread of its own process runs again (``faulthandler``
    shows a watchdog thread still in ``Event.wait`` past its deadline). The
    two share a pipe: :meth:`formed` closes it, and so does the
    task's death, so the watchdog never outlives its task.

    Call :meth:`formed` once training runs (the first step or epoch).
    """

    def __init__(self, tf_config: TFConfig, timeout: float, task_log: Path | None) -> None:
        self.tf_config = tf_config
        self.timeout = timeout
        self.task_log = task_log
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> StartupWatchdog:
        """Start watching (nothing when the timeout is 0); returns self."""
        if self.timeout > 0:
            command = [sys.executable, "-m", "training", "startup-watchdog"]
            command += ["--pid", str(os.getpid()), "--timeout", str(self.timeout)]
            if self.task_log is not None:
                command += ["--task-log", str(self.task_log)]
            env = {**os.environ, "TF_CONFIG": self.tf_config.to_json()}
            self._process = subprocess.Popen(command, stdin=subprocess.PIPE, env=env)
        return self

    def formed(self) -> None:
        """The cluster formed: stop watching."""
        if self._process is not None and self._process.stdin is not None:
            self._process.stdin.close()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
            self._process = None


def watch_startup(pid: int, timeout: float, tf_config: TFConfig, task_log: Path | None) -> int:
    """The watchdog process of :class:`StartupWatchdog`: wait, then end task ``pid``.

    Waits until its standard input closes (the task formed its cluster, or
    died) or ``timeout`` seconds pass. On timeout it logs the tasks that did
    not answer on their port, both :data:`PROBE_MARGIN` seconds before and at
    the timeout, appends a ``timeout`` event to ``task_log`` and sends
    :data:`STARTUP_TIMEOUT_SIGNAL` to ``pid``.

    Returns:
        0 when the task formed its cluster or ended first, 1 when it timed out.
    """
    # Probe twice, `margin` apart, and name the tasks missing both times: the
    # other tasks of a restarted cluster time out at about the same moment,
    # and one that has just been ended by its own watchdog is not the cause.
    margin = min(PROBE_MARGIN, timeout / 4)
    if select.select([sys.stdin], [], [], timeout - margin)[0]:
        return 0
    earlier = set(unreachable_tasks(tf_config))
    if select.select([sys.stdin], [], [], margin)[0]:
        return 0
    missing = [task for task in unreachable_tasks(tf_config) if task in earlier]
    where = "(journalctl -u raspi-tf-task@<task>, or runs/<run>/logs/<task>.log)"
    message = f"{tf_config.task.name}: the cluster did not form within {timeout:.0f} s " + (
        f"(training_run_startup_timeout); not answering: {', '.join(missing)}. Look at the log "
        f"of those tasks {where}"
        if missing
        else "(training_run_startup_timeout), although every task's port answers: is each "
        "host's tf_cluster_address that host's own (not one that something else answers "
        f"for, such as a NAT or proxy)? Look at the tasks' logs {where}"
    )
    if select.select([sys.stdin], [], [], 0)[0]:
        return 0  # formed while the ports were probed
    log.error(message)
    if task_log is not None:
        ProgressWriter(task_log).write("timeout", missing=missing, message=message)
    try:
        os.kill(pid, STARTUP_TIMEOUT_SIGNAL)
    except ProcessLookupError:
        return 0
    return 1


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


def restart_counts(restarts: dict[str, int]) -> str:
    """``"worker-0 (1 time), worker-1 (2 times)"``: the tasks with restarts, in the given order."""
    return ", ".join(f"{task} ({plural(n, 'time')})" for task, n in restarts.items() if n)


def recovery_line(
    run_dir: Path, resumed_from_epoch: int | None = None, chief_restarts: int = 0
) -> str:
    """What the run lived through, for the summary's ``recovery`` line.

    Reads every ``<run_dir>/tasks/*.jsonl`` (on nodes the play has fetched them
    to the control node by then) and counts each task's restarts. The line has
    no ``": "``, so Ansible prints it unquoted.

    Args:
        run_dir: the run's folder on this machine.
        resumed_from_epoch: the chief's ``resumed_from_epoch`` from
            ``metrics.json`` (None or 0 when it never restored a backup).
        chief_restarts: the chief's ``restarts`` from ``metrics.json``.

    Returns:
        ``"none (no task restarted)"``, or e.g. ``"restarted worker-0 (1 time),
        worker-1 (1 time); the chief resumed from the backup made after epoch 1"``.
    """
    counts = restart_counts(
        {
            path.stem: summarise(path)["restarts"]
            for path in sorted((Path(run_dir) / TASKS_DIR).glob("*.jsonl"))
        }
    )
    if resumed_from_epoch:
        then = f"the chief resumed from the backup made after epoch {resumed_from_epoch}"
    elif chief_restarts:
        then = "the chief restarted before its first backup, so training began again at epoch 1"
    elif counts:
        then = "the chief ran on without a restart"
    else:
        return "none (no task restarted)"
    return f"restarted {counts}; {then}" if counts else then
