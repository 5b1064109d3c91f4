"""The state of each task of a run, for ``status.yml``: one JSON object per task; the newest runs.

State comes from systemd (nodes: the task's unit) or from the local
launcher's state file; epoch, loss and restarts from the task's own log
(:mod:`training.tasklog`); CPU and memory from ``/proc/<pid>`` of the task's
main process and its descendants, sampled over ``sample_seconds``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path
from typing import Any

from training.datasets._base import input_kind
from training.follow import unit_state
from training.launcher import pid_alive, read_state
from training.tasklog import summarise, task_log_path

#: Clock ticks per second of /proc/<pid>/stat times.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[11]) + int(fields[12])  # utime + stime, fields 14 and 15 of proc(5)


def _rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return None


def _tree(pid: int) -> list[int]:
    """``pid`` and every process descended from it (a script task's script), from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])  # field 4 of proc(5)
        except (OSError, IndexError, ValueError):
            continue  # ended while we looked
        children.setdefault(parent, []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        found.append(todo.pop())
        todo += children.get(found[-1], [])
    return found


def _sum(values: list[Any]) -> Any:
    known = [v for v in values if v is not None]
    return round(sum(known), 1) if known else None


def usage(pid: int | None, sample_seconds: float = 1.0) -> dict[str, float | None]:
    """CPU use (percent of one core, over ``sample_seconds``) and resident memory (MB).

    Both count the process and its descendants: a script task's main process
    (:mod:`training.script`) waits while the script it started trains.

    Returns:
        ``{"cpu_percent", "memory_mb"}``; None for a process that is gone, and
        cpu_percent None when ``sample_seconds`` is 0 (not sampled).
    """
    if not pid or not pid_alive(pid):
        return {"cpu_percent": None, "memory_mb": None}
    pids = _tree(pid)
    if sample_seconds <= 0:
        return {"cpu_percent": None, "memory_mb": _sum([_rss_mb(p) for p in pids])}
    before = {p: _cpu_ticks(p) for p in pids}
    time.sleep(sample_seconds)
    ticks = []
    for p, start in before.items():
        end = _cpu_ticks(p)
        if start is not None and end is not None:
            ticks.append(end - start)
    cpu = round(100.0 * sum(ticks) / CLOCK_TICKS / sample_seconds, 1) if ticks else None
    return {"cpu_percent": cpu, "memory_mb": _sum([_rss_mb(p) for p in pids])}


def _systemd(unit: str) -> tuple[str, int | None, int]:
    state = unit_state(unit)
    active, result = state.get("ActiveState", ""), state.get("Result", "")
    sub = state.get("SubState", "")
    pid = int(state.get("MainPID", "0") or 0) or None
    restarts = int(state.get("NRestarts", "0") or 0)
    if active == "active":
        return "running", pid, restarts
    if active == "activating" and sub == "auto-restart":
        return "restarting", pid, restarts
    if active in ("activating", "reloading"):
        return "starting", pid, restarts
    if active == "deactivating":
        return "stopping", pid, restarts
    if active == "failed" or result not in ("", "success"):
        return "failed", None, restarts
    return "inactive", None, restarts  # finished or stopped: the task log tells which


def _failed_on_its_own(returncode: int | None) -> bool:
    """Whether a local task's exit status is its own error, not the launcher's stop.

    A stopped task exits with 128 + SIGTERM (training.train's handler) or is
    killed by a signal (a negative status from :mod:`subprocess`).
    """
    return returncode is not None and returncode > 0 and returncode != 128 + signal.SIGTERM


def task_status(
    run_dir: Path, task: str, unit: str | None = None, sample_seconds: float = 1.0
) -> dict[str, Any]:
    """One task's state.

    Args:
        run_dir: the task's run folder on its node (the run folder on the
            local inventory).
        task: the task name, e.g. ``worker-1``.
        unit: its systemd unit on nodes; None on the local inventory.
        sample_seconds: how long CPU use is sampled, in seconds.

    Returns:
        ``{"task", "state", "restarts", "epoch", "loss", "accuracy",
        "examples_per_second", "resumed_from", "cpu_percent", "memory_mb"}``;
        state is one of running, restarting, starting, stopping, finished,
        failed, stopped, inactive, never ran (the local launcher never
        started it: the run was refused first).

    Raises:
        training.follow.FollowError: systemd does not know the unit.
    """
    logged = summarise(task_log_path(run_dir, task))
    if unit:
        state, pid, restarts = _systemd(unit)
        if state == "inactive" and logged["started"] is not None:
            state = "finished" if logged["ended"] else "stopped"
    else:
        launcher = read_state(run_dir)
        info = launcher.get("tasks", {}).get(task, {})
        pid = info.get("pid")
        restarts = int(info.get("restarts", logged["restarts"]))
        if info.get("state") == "running" and pid_alive(pid):
            state = "running"
        elif info.get("state") == "restarting":
            state = "restarting"
        elif info.get("returncode") == 0 or logged["ended"]:
            state = "finished"
        elif _failed_on_its_own(info.get("returncode")):
            state = "failed"
        elif launcher.get("state") == "stopped" or (info and not pid_alive(launcher.get("pid"))):
            state = "stopped"
        elif info:
            state = "failed"
        else:
            state = "never ran"
    result: dict[str, Any] = {
        "task": task,
        "host": socket.gethostname(),
        "state": state,
        "restarts": max(restarts, logged["restarts"]),
        "epoch": logged["epoch"],
        "loss": logged["loss"],
        "accuracy": logged["accuracy"],
        "examples_per_second": logged["examples_per_second"],
        "resumed_from": logged["resumed_from"],
        **usage(pid if state in ("running", "starting") else None, sample_seconds),
    }
    result["line"] = describe(result)
    result["header"] = HEADER
    return result


#: The column heads of :func:`describe`'s lines; a line fits 74 characters
#: (Ansible's YAML output folds longer ones) for host names up to 13.
HEADER = (
    f"{'task':<10} {'state':<10} {'epoch':>5}  {'loss':>6}  {'cpu':>4}  {'mem MB':>6}  "
    f"{'restarts':>8}  host"
)


def tasks_status(
    run_dir: Path,
    tasks: list[str],
    unit_template: str | None = None,
    sample_seconds: float = 1.0,
) -> list[dict[str, Any]]:
    """:func:`task_status` of several tasks of one node, their CPU sampled over the same window.

    One call per node instead of one per task: ``status.yml`` and ``stop.yml``
    start one Python a node, and a stop waits ``sample_seconds`` once.

    Args:
        run_dir: the tasks' run folder on this node.
        tasks: task names, e.g. ``["worker-0", "worker-1"]``.
        unit_template: their systemd unit with ``{task}`` for the name, e.g.
            ``raspi-tf-task@{task}.service``; None on the local inventory.
        sample_seconds: how long CPU use is sampled, in seconds.

    Returns:
        One :func:`task_status` dict per task, in the order given.

    Raises:
        training.follow.FollowError: systemd does not know a unit.
    """
    from concurrent.futures import ThreadPoolExecutor

    def one(task: str) -> dict[str, Any]:
        unit = unit_template.format(task=task) if unit_template else None
        return task_status(run_dir, task, unit, sample_seconds)

    with ThreadPoolExecutor(max_workers=max(len(tasks), 1)) as pool:
        return list(pool.map(one, tasks))


def describe(status: dict[str, Any]) -> str:
    """One table line of :func:`task_status`'s result, under :data:`HEADER`, e.g.

    ``worker-1   running        3  0.3124   96%     512         1  node2``.
    """

    def fmt(value: Any, spec: str) -> str:
        return format(value, spec) if isinstance(value, (int, float)) else "-"

    cpu = fmt(status["cpu_percent"], ".0f")
    return (
        f"{status['task']:<10} {status['state']:<10} {fmt(status['epoch'], 'd'):>5}  "
        f"{fmt(status['loss'], '.4f'):>6}  {cpu + ('%' if cpu != '-' else ''):>4}  "
        f"{fmt(status['memory_mb'], '.0f'):>6}  {status['restarts']:>8}  {status['host']}"
    )


def _input_kind(run: Path) -> str | None:
    """What the model of ``run`` takes (:func:`training.datasets.input_kind`), or None."""
    try:
        preprocessing = json.loads((run / "preprocessing.json").read_text(encoding="utf-8"))
        return input_kind(preprocessing)
    except (OSError, ValueError, AttributeError):
        return None


def newest_runs(
    runs_dir: Path, count: int, having: str = "run.json", takes: str | None = None
) -> list[str]:
    """The ids of the newest ``count`` runs in ``runs_dir``: folders holding the file ``having``.

    Newest first by the folder's time of change (its files are written as
    it runs): by name, a run named with ``training_run_id`` (``my run``)
    would sort after every timestamped id. Links (``latest``) are left out;
    a ``runs_dir`` that does not exist has none. With ``takes`` (``csv`` or
    ``images``) only runs whose model takes that kind of input are named.
    """
    try:
        folders = [f for f in runs_dir.iterdir() if f.is_dir() and not f.is_symlink()]
    except OSError:
        return []
    runs = [
        f for f in folders if (f / having).is_file() and (takes is None or _input_kind(f) == takes)
    ]
    runs.sort(key=lambda f: f.stat().st_mtime, reverse=True)
    return [f.name for f in runs[:count]]


def starting_run(runs_dir: Path, latest: str = "latest") -> str | None:
    """The id of a run train.yml has recorded but not yet pointed ``latest`` at, or None.

    train.yml records a run (``run.json``, state ``running``) before it
    starts the tasks, and points ``runs/latest`` at it once they run: in
    between, stop.yml and status.yml without ``-e run`` would act on the run
    before it. The newest such run started no earlier than ``latest``'s.
    """

    def record(folder: Path) -> dict[str, Any]:
        try:
            data = json.loads((folder / "run.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    link = runs_dir / latest
    current = link.resolve() if link.is_symlink() else None
    since = float(record(current).get("started") or 0) if current else 0.0
    for name in newest_runs(runs_dir, 5):
        folder = runs_dir / name
        data = record(folder)
        started = data.get("started")
        if (
            folder.resolve() != current
            and data.get("state") == "running"
            and isinstance(started, (int, float))
            and started >= since
        ):
            return name
    return None
