"""Local launcher: runs every task of a one-machine cluster as a child process.

On real nodes each task is a systemd unit. A laptop or CI machine may have no
systemd, so for the local inventory ``train.yml`` starts this launcher in the
background instead. It does for one machine what the units and ``train.yml``
do on nodes:

- starts the ps and worker tasks, then the chief, each with its own
  TF_CONFIG, its output in ``<run>/logs/<task>.log``;
- when the chief exits, gives the tasks that finish by themselves
  (multi_worker_mirrored workers) a grace period, then stops the rest
  (parameter_server's ps and worker servers never exit on their own);
- restarts a task that fails (what ``Restart=on-failure`` does on nodes), at
  most ``max_restarts`` times per task, ``restart_delay_seconds`` apart; the
  restarted tasks resume from the chief's backup (``BackupAndRestore``);
- does not restart a task that gave up waiting for the cluster to form
  (killed by its start-up watchdog with :data:`training.tasklog.STARTUP_TIMEOUT_SIGNAL`,
  as ``RestartPreventExitStatus`` on nodes): the run ends, naming the missing tasks;
- does not restart a task whose loss diverged (:data:`training.tasklog.DIVERGED_EXIT`)
  or that exited with a usage error (:data:`training.tasklog.USAGE_EXIT`, argparse's):
  the same start would end the same way;
- when a task fails once more than allowed, or the launcher is told to stop
  (SIGTERM, SIGINT, ``python -m training stop``), stops every task it started;
- records its state in ``<run>/launcher.json`` for ``follow`` and ``stop``.

Children get ``PR_SET_PDEATHSIG`` so they die with the launcher even if it is
killed with SIGKILL: nothing is left running.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import logging
import os
import shlex
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from training.progress import plural
from training.tasklog import NOT_RESTARTED, STARTUP_TIMEOUT_SIGNAL

log = logging.getLogger(__name__)

STATE_FILE = "launcher.json"
SPEC_FILE = "launch.json"
LOG_DIR = "logs"
FINAL_STATES = ("succeeded", "failed", "stopped")
#: Seconds between SIGTERM and SIGKILL when stopping a task.
KILL_AFTER = 10.0
POLL = 0.5
PR_SET_PDEATHSIG = 1


class LaunchError(RuntimeError):
    """A launch spec that cannot run, or a run folder without a launcher."""


@dataclass
class _Child:
    name: str
    server: bool
    process: subprocess.Popen[bytes]
    log_handle: IO[bytes]
    task: dict[str, Any]
    returncode: int | None = None
    restarts: int = 0
    restart_at: float | None = None


@dataclass
class Launcher:
    """Supervises the tasks of one launch spec (see :func:`load_spec`).

    Attributes:
        run_dir: the run folder; the state file and logs go there.
        spec: the parsed launch spec.
    """

    run_dir: Path
    spec: dict[str, Any]
    children: dict[str, _Child] = field(default_factory=dict)
    state: dict[str, Any] = field(default_factory=dict)
    stop_requested: str = ""
    _port_locks: list[int] = field(default_factory=list)

    def _write_state(self, **changes: Any) -> None:
        self.state.update(changes)
        self.state["tasks"] = {
            c.name: {
                "pid": c.process.pid,
                "returncode": c.returncode,
                "state": "running"
                if c.returncode is None
                else ("restarting" if c.restart_at is not None else "exited"),
                "restarts": c.restarts,
                "log": f"{LOG_DIR}/{c.name}.log",
            }
            for c in self.children.values()
        }
        tmp = self.run_dir / f".{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(self.state, indent=2) + "\n", encoding="utf-8")
        tmp.replace(self.run_dir / STATE_FILE)

    def _start(self, task: dict[str, Any], restarts: int = 0) -> None:
        env = {**os.environ, **{k: str(v) for k, v in self.spec.get("env", {}).items()}}
        env["TF_CONFIG"] = json.dumps(task["tf_config"], sort_keys=True)
        (self.run_dir / LOG_DIR).mkdir(parents=True, exist_ok=True)
        handle = (self.run_dir / LOG_DIR / f"{task['name']}.log").open("ab")
        process = subprocess.Popen(
            [str(arg) for arg in self.spec["command"]],
            cwd=self.spec.get("cwd") or None,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        self.children[task["name"]] = _Child(
            task["name"], bool(task.get("server")), process, handle, task, restarts=restarts
        )
        log.info("started %s (pid %d)", task["name"], process.pid)

    def _poll(self) -> list[_Child]:
        exited = []
        for child in self.children.values():
            if child.returncode is None and child.process.poll() is not None:
                child.returncode = child.process.returncode
                child.log_handle.close()
                exited.append(child)
        return exited

    def _stop_all(self, grace: float) -> None:
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(
            c.returncode is None and not c.server for c in self.children.values()
        ):
            time.sleep(POLL)
            self._poll()
        for sig, wait in ((signal.SIGTERM, KILL_AFTER), (signal.SIGKILL, KILL_AFTER)):
            for child in self.children.values():
                child.restart_at = None  # a stopping run restarts nothing
            alive = [c for c in self.children.values() if c.returncode is None]
            for child in alive:
                _signal_group(child.process.pid, sig)
            deadline = time.monotonic() + wait
            while (
                time.monotonic() < deadline
                and self._poll() is not None
                and any(c.returncode is None for c in self.children.values())
            ):
                time.sleep(POLL)
        self._poll()

    def run(self) -> int:
        """Start the tasks and supervise them until the run ends.

        Returns:
            0 when the chief succeeded, 1 when a task failed, 3 when stopped.
        """
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, self._on_signal)
        chief = self.spec["chief"]
        grace = float(self.spec.get("stop_grace_seconds", 30))
        taken = self._claim_ports()
        if taken:
            # Two train.yml started seconds apart both pass the preflight; the port
            # locks let only one of them start tasks.
            others = [r for r in runs_on_ports(set(taken)) if r["pid"] != os.getpid()]
            winner = Path(others[0]["run_dir"]).name if others else ""
            stop = f" -e run={shlex.quote(winner)}" if winner else ""
            reason = (
                f"port(s) {', '.join(map(str, taken))} belong to "
                + (f"run {winner}, " if winner else "another local run ")
                + "which started first; nothing of this run was started. Wait for it to end "
                + f"or stop it (ansible-playbook stop.yml{stop})"
            )
            log.error("run refused: %s", reason)
            self._write_state(pid=os.getpid(), state="failed", reason=reason, finished=time.time())
            _settle_run_record(self.run_dir, "failed", reason, plot=False)
            return 1
        self._write_state(
            pid=os.getpid(),
            state="starting",
            started=time.time(),
            chief=chief,
            reason="",
            finished=None,
        )
        point_latest(self.run_dir)
        ordered = sorted(self.spec["tasks"], key=lambda t: t["name"] == chief)
        for task in ordered:
            if self.stop_requested:
                break
            self._start(task)
        self._write_state(state="running")
        outcome, reason = "", ""
        max_restarts = int(self.spec.get("max_restarts", 3))
        delay = float(self.spec.get("restart_delay_seconds", 5))
        while not outcome:
            if self.stop_requested:
                outcome, reason = "stopped", f"stopped by {self.stop_requested}"
                grace = 0.0
                break
            self._restart_due()
            for child in self._poll():
                if child.name == chief and child.returncode == 0:
                    outcome, reason = "succeeded", f"chief {chief} exited with code 0"
                elif child.name != chief and child.returncode == 0 and not child.server:
                    pass  # a multi_worker_mirrored worker that finished its part
                elif child.returncode == -STARTUP_TIMEOUT_SIGNAL:
                    outcome = "failed"
                    reason = (
                        f"task {child.name} gave up waiting for the cluster to form "
                        "(training_run_startup_timeout); its last lines name the tasks that "
                        "did not answer"
                    )
                    grace = 0.0
                elif child.returncode in NOT_RESTARTED:
                    outcome = "failed"
                    reason = f"task {child.name}: {NOT_RESTARTED[child.returncode]}"
                    grace = 0.0
                elif child.restarts < max_restarts:
                    child.restart_at = time.monotonic() + delay
                    log.warning(
                        "task %s exited with code %s; restart %d of %d in %.0f s",
                        child.name,
                        child.returncode,
                        child.restarts + 1,
                        max_restarts,
                        delay,
                    )
                else:
                    outcome = "failed"
                    reason = (
                        f"task {child.name} exited with code {child.returncode} and was "
                        f"restarted {plural(child.restarts, 'time')}: "
                        "the restart limit "
                        f"(training_run_max_restarts={max_restarts}) is reached"
                    )
                    grace = 0.0
                self._write_state()
                if outcome:
                    break
            else:
                time.sleep(POLL)
        log.info("run %s: %s", outcome, reason)
        self._write_state(state="stopping", reason=reason)
        self._stop_all(grace if outcome == "succeeded" else 0.0)
        # Before the final state: train.yml's follower waits for it, then shows the plots.
        _settle_run_record(self.run_dir, outcome, reason)
        self._write_state(state=outcome, reason=reason, finished=time.time())
        return {"succeeded": 0, "failed": 1, "stopped": 3}[outcome]

    def _claim_ports(self) -> list[int]:
        """Lock every task port of the run for the launcher's life; return those taken.

        One ``flock`` per port on ``<tmp>/raspi-tf-port-<port>.lock``: the kernel
        drops it when the launcher ends, even by SIGKILL, so a lock never goes stale.
        """
        taken = []
        for port in sorted(task_ports(self.spec)):
            path = Path(tempfile.gettempdir()) / f"raspi-tf-port-{port}.lock"
            fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                taken.append(port)
            else:
                self._port_locks.append(fd)
        return taken

    def _restart_due(self) -> None:
        now = time.monotonic()
        for child in list(self.children.values()):
            if child.restart_at is not None and now >= child.restart_at:
                self._start(child.task, restarts=child.restarts + 1)
                self._write_state()

    def _on_signal(self, signum: int, _frame: Any) -> None:
        self.stop_requested = signal.Signals(signum).name


#: The link in the runs folder to the newest run that started (docs/operations.md).
LATEST_LINK = "latest"


def point_latest(run_dir: Path) -> None:
    """Point ``<runs folder>/latest`` at ``run_dir``, atomically.

    The launcher does it once it holds the run's ports, not train.yml before:
    of two runs started at the same moment, the one refused at its ports must
    not take ``latest`` (and with it status.yml and stop.yml) from the one
    that trains.
    """
    link = run_dir.parent / LATEST_LINK
    new = run_dir.parent / f".{LATEST_LINK}.{os.getpid()}"
    new.unlink(missing_ok=True)
    new.symlink_to(run_dir.name)
    os.replace(new, link)


def _settle_run_record(run_dir: Path, outcome: str, reason: str, plot: bool = True) -> None:
    """Plot the run, and mark ``run.json`` with the outcome if it still says running.

    The launcher makes a local run's plots (on nodes train.yml makes them from
    the task logs it collects). train.yml records the outcome itself; marking
    ``run.json`` here covers a train.yml that was interrupted (Ctrl-C) while
    the run went on in the background.
    """
    path = run_dir / "run.json"
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        record = {}
    if record.get("state") == "running":
        record.update(state=outcome, reason=reason)
        tmp = run_dir / ".run.json.tmp"
        tmp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)
    if not plot:
        return
    from training.plots import plot_run

    try:
        plot_run(run_dir)
    except Exception as err:  # plots are a view: the run's outcome stands
        log.warning("no plots for %s: %s", run_dir.name, err)


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def load_spec(path: Path) -> dict[str, Any]:
    """Read and check a launch spec.

    The spec is JSON: ``command`` (argv list run for every task), ``tasks``
    (list of ``{"name", "tf_config", "server"}``), ``chief`` (a task name),
    optional ``env`` (dict), ``cwd``, ``stop_grace_seconds`` (seconds the
    non-server tasks get to finish after the chief, default 30),
    ``max_restarts`` (restarts allowed per task, default 3) and
    ``restart_delay_seconds`` (default 5).

    Raises:
        LaunchError: unreadable, or a required key missing.
    """
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as err:
        raise LaunchError(f"cannot read launch spec {path}: {err}") from None
    for key in ("command", "tasks", "chief"):
        if key not in spec:
            raise LaunchError(f"launch spec {path} has no {key!r}")
    if spec["chief"] not in {t["name"] for t in spec["tasks"]}:
        raise LaunchError(f"launch spec {path}: chief {spec['chief']!r} is not one of its tasks")
    return spec


def task_ports(spec: dict[str, Any]) -> set[int]:
    """The TCP ports of a launch spec's tasks (tasks without a ``port`` have none)."""
    return {int(t["port"]) for t in spec.get("tasks", []) if "port" in t}


def read_state(run_dir: Path) -> dict[str, Any]:
    """The launcher's last recorded state, or ``{}`` if it has not written one."""
    try:
        return dict(json.loads((run_dir / STATE_FILE).read_text(encoding="utf-8")))
    except (OSError, json.JSONDecodeError):
        return {}


def pid_alive(pid: int | None) -> bool:
    """True if a process with this pid exists (and is not a zombie)."""
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def runs_on_ports(ports: set[int]) -> list[dict[str, Any]]:
    """Local runs still going on this machine whose tasks use any of ``ports``.

    A second run on the same ports would pass the port check while the first
    one's tasks are still starting, then fail at its bind.

    Returns:
        One ``{"run_dir", "pid", "ports"}`` per live launcher (``ports``: the
        shared ones, sorted), found through /proc and each launcher's spec.
    """
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().decode("utf-8", "replace").split("\0")
        except OSError:
            continue
        if "training" not in argv or "launch" not in argv or "--run-dir" not in argv:
            continue
        run_dir = Path(argv[argv.index("--run-dir") + 1])
        if not run_dir.is_absolute():
            with contextlib.suppress(OSError):
                run_dir = (proc / "cwd").resolve() / run_dir
        try:
            spec = json.loads((run_dir / SPEC_FILE).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        shared = sorted(ports & task_ports(spec))
        if shared and pid_alive(int(proc.name)):
            found.append({"run_dir": str(run_dir), "pid": int(proc.name), "ports": shared})
    return found


def stop(run_dir: Path, timeout: float = 60.0) -> dict[str, Any]:
    """Stop a run's launcher and all its tasks; wait for them to be gone.

    Returns:
        The final :func:`training.follow.status`.

    Raises:
        LaunchError: ``run_dir`` holds no launcher state.
    """
    state = read_state(run_dir)
    if not state:
        raise LaunchError(
            f"{run_dir} holds no local run (no {STATE_FILE}); pass the folder of a run, "
            "e.g. runs/latest"
        )
    pid = int(state.get("pid") or 0)
    if pid_alive(pid) and _is_launcher(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(POLL)
    for task in read_state(run_dir).get("tasks", {}).values():
        if pid_alive(task.get("pid")) and _is_launcher(task["pid"], "training"):
            _signal_group(task["pid"], signal.SIGKILL)
    from training.follow import status

    return status(run_dir)


def _is_launcher(pid: int, needle: str = "training") -> bool:
    try:
        return needle in Path(f"/proc/{pid}/cmdline").read_bytes().decode("utf-8", "replace")
    except OSError:
        return False


def launch(run_dir: Path, spec_path: Path) -> int:
    """Run the launcher in this process until the run ends; see :meth:`Launcher.run`."""
    spec = load_spec(spec_path)
    (run_dir / LOG_DIR).mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(run_dir / LOG_DIR / "launcher.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s launcher: %(message)s"))
    logging.getLogger().addHandler(handler)
    launcher = Launcher(run_dir, spec)
    try:
        return launcher.run()
    except Exception as err:
        log.exception("launcher crashed")
        launcher._stop_all(0.0)
        launcher._write_state(
            state="failed", reason=f"the launcher crashed: {err!r}", finished=time.time()
        )
        return 1
