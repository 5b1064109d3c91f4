"""Follow a run: its state and one human line of progress, for ``train.yml`` to print.

A run's state comes from the local launcher's state file (local inventory) or
from systemd, for the chief's unit (nodes); its progress from the chief's
``progress.jsonl``. States: ``starting``, ``running``, ``stopping``,
``succeeded``, ``failed``, ``stopped``.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from training.launcher import FINAL_STATES, LOG_DIR, STATE_FILE, pid_alive, read_state
from training.progress import PROGRESS_FILE, describe, describe_epochs, plural, read_events
from training.tasklog import NOT_RESTARTED, STARTUP_TIMEOUT_SIGNAL, restart_counts

#: Seconds between two looks at the run while following it.
POLL = 0.5
#: Written into the chief's run folder by stop.yml before it stops the units.
STOP_MARKER = ".stop-requested"


class FollowError(RuntimeError):
    """A run folder or unit that cannot be followed."""


#: Between the lines of one poll (an Ansible loop label shows one line).
LINE_SEPARATOR = " || "
#: Epochs one poll shows a line each; more share one line, but the newest.
MAX_EPOCH_LINES = 3
#: Lines of a script's output one poll shows at most, the newest.
MAX_LOG_LINES = 4


#: TensorFlow's start-up lines, which a failed task's last lines leave out: its
#: C++ info logging (``I0000 00:00:...``, oneDNN and CPU-instruction notes) and
#: absl's note. Its warnings and errors stay: they may say what failed.
TF_NOISE = re.compile(
    r"^(I\d{4} \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: I "
    r"|WARNING: All log messages before absl|To enable the following instructions)"
)


def tail(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a text file but :data:`TF_NOISE`, or '' if it is missing."""
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 16384))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return ""
    kept = [line for line in text.splitlines() if not TF_NOISE.match(line)]
    return "\n".join(kept[-lines:])


def journal_tail(unit: str, lines: int = 15) -> str:
    """The unit's last journal lines but :data:`TF_NOISE` (needs root or systemd-journal)."""
    # More lines than asked for: the noise left out leaves enough.
    argv = ["journalctl", "--unit", unit, f"--lines={lines * 3}", "--output=cat", "--no-pager"]
    try:
        out = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    kept = [line for line in out.splitlines() if not TF_NOISE.match(line)]
    return "\n".join(kept[-lines:])


def unit_state(unit: str) -> dict[str, str]:
    """The unit's state as systemd reports it (ActiveState, Result, NRestarts, ...).

    Raises:
        FollowError: systemctl is missing or does not know the unit.
    """
    props = "ActiveState,SubState,Result,ExecMainStatus,NRestarts,LoadState,MainPID"
    try:
        out = subprocess.run(
            ["systemctl", "show", unit, f"--property={props}"],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise FollowError(f"cannot ask systemd about {unit}: {err}") from None
    state = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    if state.get("LoadState") == "not-found":
        raise FollowError(f"systemd has no unit {unit}; run site.yml")
    return state


def _systemd_status(unit: str, ended: bool) -> tuple[str, str, str]:
    state = unit_state(unit)
    active, result = state.get("ActiveState", ""), state.get("Result", "")
    restarts = state.get("NRestarts", "0")
    if active in ("active", "reloading") or (active == "activating"):
        return "running", "", ""
    if active == "deactivating":
        return "stopping", "", ""
    if active == "inactive" and result == "success" and not ended:
        return "stopped", f"chief {unit} was stopped before the run ended (stop.yml)", ""
    if active == "inactive" and result == "success":
        return "succeeded", f"chief {unit} exited with code 0", ""
    code = state.get("ExecMainStatus", "?")
    times = f"restarted {plural(restarts, 'time')}"
    if result == "signal" and code == str(int(STARTUP_TIMEOUT_SIGNAL)):
        reason = (
            f"chief {unit} gave up waiting for the cluster to form "
            f"(training_run_startup_timeout; {times})"
        )
    elif result == "signal":
        reason = f"chief {unit} was killed by signal {code} ({times})"
    elif code.isdigit() and int(code) in NOT_RESTARTED:
        reason = f"chief {unit}: {NOT_RESTARTED[int(code)]}"
    else:
        reason = f"chief {unit} {result or active} (exit code {code}, {times})"
    return "failed", reason, journal_tail(unit)


def status(run_dir: Path, unit: str | None = None) -> dict[str, Any]:
    """The run's state for a follower.

    Args:
        run_dir: the chief's run folder (progress.jsonl, and launcher.json
            for a local run).
        unit: the chief's systemd unit on nodes; None for a local run.

    Returns:
        ``{"state", "done", "ok", "line", "reason", "log_tail"}``: ``line`` is
        one human line of progress; ``log_tail`` the last lines of the task
        that failed, when one did.
    """
    events = read_events(run_dir / PROGRESS_FILE)
    state: dict[str, Any] = {}  # the local launcher's; nodes have none
    if unit:
        ended = any(e.get("event") == "end" for e in events)
        current, reason, log_tail = _systemd_status(unit, ended)
    else:
        state = read_state(run_dir)
        current, reason, log_tail = _local_status(run_dir, state)
    if current in ("failed", "stopped") and (run_dir / STOP_MARKER).exists():
        current, reason, log_tail = "stopped", "stopped by stop.yml", ""
        if (run_dir / "metrics.json").exists():  # the stop came as the results were saved
            reason = "stopped by stop.yml after its last epoch; its model and metrics were saved"
    line = describe(events)
    restarted = restart_counts({n: t.get("restarts", 0) for n, t in state.get("tasks", {}).items()})
    if current == "running" and restarted:
        line = f"{line} · restarted so far: {restarted}"
    if current in ("failed", "stopped"):
        line = f"{current}: {reason}"
    elif current == "stopping":
        line = f"{reason or 'the chief is done'}; stopping the other tasks"
    elif current == "succeeded":
        line = f"succeeded; {describe(events)}"
    return {
        "state": current,
        "done": current in FINAL_STATES,
        "ok": current == "succeeded",
        "line": line,
        "reason": reason,
        "log_tail": log_tail,
    }


def _local_status(run_dir: Path, state: dict[str, Any]) -> tuple[str, str, str]:
    current = state.get("state", "starting")
    reason = state.get("reason", "")
    if current not in FINAL_STATES and state and not pid_alive(state.get("pid")):
        current, reason = "failed", "the launcher died; see logs/launcher.log"
    log_tail = ""
    if current == "failed":  # a stop is asked for, not a fault to read up on
        failed = [
            n for n, t in state.get("tasks", {}).items() if t.get("returncode") not in (0, None)
        ]
        culprit = reason.split()[1].rstrip(":") if reason.startswith(("task ", "chief ")) else ""
        name = culprit or (failed[0] if failed else "launcher")
        log_tail = tail(run_dir / LOG_DIR / f"{name}.log")
    if current == "succeeded":
        reason = reason or "the chief exited with code 0"
    return current, reason, log_tail


def follow(
    run_dir: Path,
    wait: float,
    unit: str | None = None,
    cursor_file: Path | None = None,
    least: float = 0.0,
) -> dict[str, Any]:
    """Wait until the run's progress or state changes, or ``wait`` seconds pass.

    Args:
        run_dir: the chief's run folder.
        wait: the most seconds to wait, in seconds.
        least: the least seconds to wait for progress, in seconds: news that
            comes sooner is held until then (the run ending or changing state
            is not). Every poll starts a Python on the chief's node, with
            Ansible's module around it; on a node of one core with epochs of
            a second or two, returning at every epoch takes a large share of
            the chief's CPU from training.
        unit: the chief's systemd unit on nodes; None for a local run.
        cursor_file: where the follower keeps how many progress events it
            has shown; with it, ``line`` has one line per epoch finished since
            the last call (joined by :data:`LINE_SEPARATOR`), so no epoch goes
            unreported between two polls.

    Returns:
        :func:`status` of the run at that moment.

    Raises:
        FollowError: ``run_dir`` does not exist (the chief may not have made
            it yet: then the state is ``starting``), or the unit is unknown.
    """
    if not unit and not run_dir.is_dir():
        raise FollowError(f"run folder {run_dir} does not exist")

    def snapshot() -> tuple[Any, ...]:
        files = (run_dir / PROGRESS_FILE, run_dir / STATE_FILE)
        return tuple(f.stat().st_mtime_ns if f.exists() else 0 for f in files)

    before = snapshot()
    first = status(run_dir, unit)
    deadline = time.monotonic() + wait
    current = first
    earliest = time.monotonic() + min(least, wait)
    while time.monotonic() < deadline:
        current = status(run_dir, unit)
        if current["done"] or current["state"] != first["state"]:
            break
        if snapshot() != before and time.monotonic() >= earliest:
            # The change may have come after the status above: read it again, or its line
            # would be the previous poll's (a second "training started", not the first step).
            current = status(run_dir, unit)
            break
        time.sleep(POLL)
    if cursor_file is not None:
        current["line"] = _new_lines(run_dir, cursor_file, current)
    return current


def _quiet_for(last: dict[str, Any]) -> str:
    """How long the run has written no progress, e.g. " (no news for 12 min 5 s)".

    A run that has not moved for many polls may be stuck (a hung cluster
    shows no error); the age says how long, from the chief's own clock.
    """
    written = last.get("time")
    if not isinstance(written, (int, float)):
        return " (no news since the last line)"
    quiet = max(0.0, time.time() - written)
    if quiet < 60:
        return f" (no news for {quiet:.0f} s)"
    return f" (no news for {int(quiet // 60)} min {int(quiet % 60)} s)"


def _new_lines(run_dir: Path, cursor_file: Path, current: dict[str, Any]) -> str:
    events = read_events(run_dir / PROGRESS_FILE)
    try:
        seen = int(cursor_file.read_text())
    except (OSError, ValueError):
        seen = 0
    shown = [
        i
        for i in range(min(seen, len(events)), len(events))
        if events[i]["event"] in ("start", "resume", "epoch", "end", "log")
    ]
    logs = [i for i in shown if events[i]["event"] == "log"]
    if len(logs) > MAX_LOG_LINES:
        # A script's output lines (epochs, its own prints): the newest of this poll only.
        dropped = set(logs[:-MAX_LOG_LINES])
        shown = [i for i in shown if i not in dropped]
    epochs = [i for i in shown if events[i]["event"] == "epoch"]
    if len(epochs) > MAX_EPOCH_LINES:
        # Many short epochs in one poll: one line for each run of them between other events
        # (a restart, a resume), the newest epoch on its own line.
        total = next((e for e in events if e["event"] == "start"), {}).get("epochs", "?")
        lines, group = [], []
        for i in shown:
            if events[i]["event"] == "epoch" and i != epochs[-1]:
                group.append(i)
                continue
            if len(group) == 1:
                lines.append(describe(events[: group[0] + 1]))
            elif group:
                lines.append(describe_epochs([events[j] for j in group], total))
            group = []
            lines.append(describe(events[: i + 1]))
    else:
        lines = [describe(events[: i + 1]) for i in shown]
    if current["state"] not in ("running", "starting") or not lines:
        # A step line that moved on is news too; only a poll with no event at all is not.
        nothing_new = bool(events) and seen >= len(events)
        if current["state"] == "succeeded" and nothing_new:
            final = "succeeded"  # its "finished: ..." line came with an earlier poll
        elif current["state"] == "running" and nothing_new and events[-1]["event"] == "end":
            # Its "finished: ..." line came with an earlier poll; the outcome is still to come.
            final = "training finished; waiting for the chief to write its results and exit"
        elif current["state"] in ("running", "starting") and nothing_new:
            final = current["line"] + _quiet_for(events[-1])
        else:
            final = current["line"]
        if lines and final.endswith(lines[-1]):
            lines[-1] = final  # "succeeded; finished: ..." rather than "finished: ..." twice
        else:
            lines.append(final)
    elif events[-1]["event"] == "batch":
        lines.append(describe(events))
    if cursor_file.parent.is_dir():
        cursor_file.write_text(str(len(events)))
    # One Ansible loop item per poll: several events share its one-line label.
    return LINE_SEPARATOR.join(dict.fromkeys(lines))
