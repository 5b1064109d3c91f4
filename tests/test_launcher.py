"""Local launcher: starts every task, ends the run with the chief, leaves nothing running."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from training import follow as follow_module
from training import launcher
from training.follow import LINE_SEPARATOR
from training.follow import follow as follow_run
from training.follow import status as follow_status
from training.launcher import pid_alive
from training.tasklog import DIVERGED_EXIT, STARTUP_TIMEOUT_SIGNAL, USAGE_EXIT

# A stand-in for `python -m training train`: behaves by its TF_CONFIG task name.
FAKE_TASK = textwrap.dedent(
    """
    import json, os, sys, time
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    name = f"{task['type']}-{task['index']}"
    plan = json.loads(os.environ["FAKE_PLAN"]).get(name, "serve")
    print(f"{name} up", flush=True)
    if plan == "serve":
        while True:
            time.sleep(1)
    kind, seconds, code = plan.split(":")
    marker = os.path.join(os.environ["FAKE_DIR"], name + ".started")
    if kind == "flaky" and os.path.exists(marker):
        seconds, code = "1", "0"  # fails on its first start only
    open(marker, "a").close()
    time.sleep(float(seconds))
    print(f"{name} exiting with {code}", flush=True)
    if kind == "signal":
        os.kill(os.getpid(), int(code))
    sys.exit(int(code))
    """
)


def make_run(
    tmp_path: Path, plan: dict[str, str], servers: set[str], chief: str, **extra: object
) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    script = tmp_path / "fake_task.py"
    script.write_text(FAKE_TASK)
    names = sorted({*plan, *servers, chief})
    tasks = [
        {
            "name": n,
            "server": n in servers,
            "tf_config": {
                "cluster": {},
                "task": {"type": n.split("-")[0], "index": int(n.split("-")[1])},
            },
        }
        for n in names
    ]
    spec = {
        "command": [sys.executable, str(script)],
        "tasks": tasks,
        "chief": chief,
        "env": {"FAKE_PLAN": json.dumps(plan), "FAKE_DIR": str(tmp_path)},
        "stop_grace_seconds": 5,
        **extra,
    }
    (run / launcher.SPEC_FILE).write_text(json.dumps(spec))
    return run


def launch(run: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "training", "launch", "--run-dir", str(run)],
        cwd=Path(__file__).resolve().parents[1],
    )


def task_pids(run: Path) -> list[int]:
    return [t["pid"] for t in launcher.read_state(run)["tasks"].values()]


def test_ps_servers_are_stopped_when_the_chief_succeeds(tmp_path: Path) -> None:
    run = make_run(tmp_path, {"chief-0": "exit:1:0"}, {"ps-0", "worker-0", "worker-1"}, "chief-0")
    assert launch(run).wait(timeout=60) == 0
    state = launcher.read_state(run)
    assert state["state"] == "succeeded"
    assert set(state["tasks"]) == {"chief-0", "ps-0", "worker-0", "worker-1"}
    assert not any(pid_alive(p) for p in task_pids(run))
    assert "chief-0 up" in (run / "logs" / "chief-0.log").read_text()


def test_workers_finishing_after_the_chief_get_their_grace(tmp_path: Path) -> None:
    plan = {"worker-0": "exit:1:0", "worker-1": "exit:2:0"}
    run = make_run(tmp_path, plan, set(), "worker-0")
    assert launch(run).wait(timeout=60) == 0
    state = launcher.read_state(run)
    assert state["tasks"]["worker-1"]["returncode"] == 0  # finished by itself, not killed


def test_a_failing_task_fails_the_run_and_stops_the_others(tmp_path: Path) -> None:
    plan = {"worker-0": "exit:30:0", "worker-1": "exit:1:4"}
    run = make_run(tmp_path, plan, set(), "worker-0", max_restarts=0)
    started = time.monotonic()
    assert launch(run).wait(timeout=60) == 1
    assert time.monotonic() - started < 20  # not the 30 s the chief would have run
    status = follow_status(run)
    assert status["state"] == "failed" and status["done"] and not status["ok"]
    assert "worker-1 exited with code 4" in status["line"]
    assert "worker-1 exiting with 4" in status["log_tail"]
    assert not any(pid_alive(p) for p in task_pids(run))


def test_a_task_that_dies_is_restarted_and_the_run_goes_on(tmp_path: Path) -> None:
    plan = {"worker-0": "exit:6:0", "worker-1": "flaky:0.5:137"}
    run = make_run(tmp_path, plan, set(), "worker-0", restart_delay_seconds=0.5)
    assert launch(run).wait(timeout=60) == 0
    state = launcher.read_state(run)
    assert state["state"] == "succeeded"
    assert state["tasks"]["worker-1"]["restarts"] == 1
    assert state["tasks"]["worker-1"]["returncode"] == 0
    log = (run / "logs" / "worker-1.log").read_text()
    assert log.count("worker-1 up") == 2


def test_a_task_failing_at_every_start_ends_the_run_at_the_restart_limit(tmp_path: Path) -> None:
    plan = {"worker-0": "exit:60:0", "worker-1": "exit:0.2:4"}
    run = make_run(tmp_path, plan, set(), "worker-0", max_restarts=2, restart_delay_seconds=0.2)
    assert launch(run).wait(timeout=60) == 1
    assert "worker-0 exiting" not in (run / "logs" / "worker-0.log").read_text()  # stopped
    status = follow_status(run)
    assert status["state"] == "failed"
    assert "task worker-1 exited with code 4 and was restarted 2 times" in status["line"]
    assert "training_run_max_restarts=2" in status["line"]
    assert "worker-1 exiting with 4" in status["log_tail"]  # its last log lines
    assert (run / "logs" / "worker-1.log").read_text().count("worker-1 up") == 3
    assert not any(pid_alive(p) for p in task_pids(run))


def test_the_follower_names_the_tasks_restarted_so_far(tmp_path: Path) -> None:
    plan = {"worker-0": "exit:60:0", "worker-1": "flaky:0.5:137"}
    run = make_run(tmp_path, plan, set(), "worker-0", restart_delay_seconds=0.5)
    proc = launch(run)
    try:
        line = ""
        for _ in range(100):
            line = follow_status(run)["line"]
            if "restarted so far" in line:
                break
            time.sleep(0.2)
        assert line.endswith("· restarted so far: worker-1 (1 time)"), line
    finally:
        launcher.stop(run)
        proc.wait(timeout=60)


def test_stop_ends_every_task(tmp_path: Path) -> None:
    run = make_run(tmp_path, {"chief-0": "exit:600:0"}, {"ps-0", "worker-0"}, "chief-0")
    proc = launch(run)
    deadline = time.monotonic() + 30
    while launcher.read_state(run).get("state") != "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(task_pids(run)) == 3
    result = launcher.stop(run)
    assert proc.wait(timeout=30) == 3
    assert result["state"] == "stopped"
    assert not any(pid_alive(p) for p in task_pids(run))


def test_tasks_die_with_a_killed_launcher(tmp_path: Path) -> None:
    run = make_run(tmp_path, {"chief-0": "exit:600:0"}, {"ps-0"}, "chief-0")
    proc = launch(run)
    deadline = time.monotonic() + 30
    while launcher.read_state(run).get("state") != "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    pids = task_pids(run)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(pid_alive(p) for p in pids)
    assert follow_status(run)["state"] == "failed"  # the follower notices the dead launcher


def test_follow_returns_when_progress_changes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / launcher.STATE_FILE).write_text(json.dumps({"pid": os.getpid(), "state": "running"}))
    started = time.monotonic()
    assert follow_run(run, wait=1.0)["line"].startswith("waiting for the chief")
    assert time.monotonic() - started >= 1.0
    (run / "progress.jsonl").write_text(
        json.dumps(
            {
                "event": "start",
                "epochs": 8,
                "steps_per_epoch": 31,
                "model": "m",
                "strategy": "s",
                "tasks": ["a", "b"],
            }
        )
        + "\n"
    )
    assert "training started: m with s on 2 tasks" in follow_run(run, wait=5.0)["line"]


def test_follow_holds_news_until_least_but_not_the_end_of_the_run(tmp_path: Path) -> None:
    # Each poll costs the chief's node a Python start: epochs a second apart
    # must not each wake it.
    run = tmp_path / "run"
    run.mkdir()
    state = run / launcher.STATE_FILE
    state.write_text(json.dumps({"pid": os.getpid(), "state": "running"}))
    cursor = tmp_path / "cursor"
    (run / "progress.jsonl").write_text("")
    follow_run(run, wait=0.1, cursor_file=cursor)
    start = {"event": "start", "epochs": 9, "steps_per_epoch": 1, "model": "m", "strategy": "s"}
    events = [start] + [{"event": "epoch", "epoch": i, "loss": 0.5} for i in (1, 2)]
    text = "".join(json.dumps(e) + "\n" for e in events)
    # The epochs end 0.2 s into the poll; it returns with them at 1.5 s, not at 30.
    writer = threading.Timer(0.2, (run / "progress.jsonl").write_text, [text])
    started = time.monotonic()
    writer.start()
    lines = follow_run(run, wait=30, cursor_file=cursor, least=1.5)["line"]
    assert 1.5 <= time.monotonic() - started < 30
    assert [line.split(":")[0] for line in lines.split(LINE_SEPARATOR)] == [
        "training started",
        "epoch 1/9",
        "epoch 2/9",
    ]
    state.write_text(json.dumps({"pid": os.getpid(), "state": "succeeded"}))
    started = time.monotonic()
    assert follow_run(run, wait=60, cursor_file=cursor, least=60)["done"]
    assert time.monotonic() - started < 60


def test_many_epochs_in_one_poll_share_a_line_but_the_newest(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / launcher.STATE_FILE).write_text(json.dumps({"pid": os.getpid(), "state": "running"}))
    start = {"event": "start", "epochs": 9, "steps_per_epoch": 1, "model": "m", "strategy": "s"}
    epochs = [
        {"event": "epoch", "epoch": i, "loss": 1.0 / i, "accuracy": 0.5 + i / 20}
        for i in range(1, 7)
    ]
    text = "".join(json.dumps(e) + "\n" for e in [start, *epochs])
    (run / "progress.jsonl").write_text(text)
    line = follow_run(run, wait=0.1, cursor_file=tmp_path / "cursor")["line"]
    assert line.split(LINE_SEPARATOR) == [
        "training started: m with s on 0 tasks, 9 epochs of 1 step",
        "epochs 1-5/9: loss 1.0000 -> 0.2000, accuracy 0.5500 -> 0.7500",
        "epoch 6/9: loss 0.1667, accuracy 0.8000",
    ]


def test_a_script_s_lines_since_the_last_poll_are_shown_the_newest_first_cut(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / launcher.STATE_FILE).write_text(json.dumps({"pid": os.getpid(), "state": "running"}))
    start = {"event": "start", "script": "train.py", "tasks": ["worker-0", "worker-1"]}
    logs = [
        {"event": "log", "line": f"Epoch {i}/6: 31/31 - 1s - loss: 0.{9 - i}000"}
        for i in range(1, 7)
    ]
    text = "".join(json.dumps(e) + "\n" for e in [start, *logs])
    (run / "progress.jsonl").write_text(text)
    line = follow_run(run, wait=0.1, cursor_file=tmp_path / "cursor")["line"]
    assert line.split(LINE_SEPARATOR) == [
        "train.py started on 2 tasks",
        *(f"train.py: Epoch {i}/6: 31/31 - 1s - loss: 0.{9 - i}000" for i in range(3, 7)),
    ]


def test_spec_without_its_chief_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "launch.json"
    spec.write_text(
        json.dumps({"command": ["true"], "tasks": [{"name": "worker-0"}], "chief": "chief-0"})
    )
    with pytest.raises(launcher.LaunchError, match="chief 'chief-0' is not one of its tasks"):
        launcher.load_spec(spec)


def test_follow_keeps_a_restart_between_the_epochs_around_it(tmp_path: Path) -> None:
    # Many epochs in one poll are not one "epochs 1-7/9" line put before the restart, when
    # epochs 4-7 came after it.
    run = tmp_path / "run"
    run.mkdir()
    (run / launcher.STATE_FILE).write_text(json.dumps({"pid": os.getpid(), "state": "running"}))
    start = {"event": "start", "epochs": 9, "steps_per_epoch": 10, "tasks": ["a"], "restarts": 0}
    events = [
        start,
        *[{"event": "epoch", "epoch": i, "loss": 1.0 / i, "accuracy": 0.5} for i in (1, 2, 3, 4)],
        {**start, "restarts": 1},
        {"event": "resume", "epoch": 3},
        *[{"event": "epoch", "epoch": i, "loss": 1.0 / i, "accuracy": 0.6} for i in (4, 5, 6, 7)],
    ]
    (run / "progress.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    lines = follow_run(run, wait=0.1, cursor_file=tmp_path / "cursor")["line"].split(LINE_SEPARATOR)
    heads = [line.split(":")[0] for line in lines]
    assert heads[0] == "training started" and heads[1] == "epochs 1-4/9", lines
    assert heads[-2:] == ["epochs 4-6/9", "epoch 7/9"], lines
    assert len(heads) == 6, lines  # the restart and the resume between them, in order


def test_follow_with_a_cursor_reports_every_epoch_once(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / launcher.STATE_FILE).write_text(json.dumps({"pid": os.getpid(), "state": "running"}))
    cursor = tmp_path / "cursor"
    progress = run / "progress.jsonl"
    start = {
        "event": "start",
        "epochs": 3,
        "steps_per_epoch": 10,
        "model": "m",
        "strategy": "s",
        "tasks": ["a"],
    }
    epochs = [{"event": "epoch", "epoch": i, "loss": 1.0 / i, "accuracy": 0.5} for i in (1, 2)]
    # A poll with nothing new while the launcher still says starting does not repeat a line.
    (run / launcher.STATE_FILE).write_text(json.dumps({"pid": os.getpid(), "state": "starting"}))
    progress.write_text(json.dumps(start) + "\n")
    assert follow_run(run, wait=0.1, cursor_file=cursor)["line"].startswith("training started")
    assert follow_run(run, wait=0.1, cursor_file=cursor)["line"].endswith(
        "(no news since the last line)"
    )
    (run / launcher.STATE_FILE).write_text(json.dumps({"pid": os.getpid(), "state": "running"}))
    cursor.unlink()
    progress.write_text("".join(json.dumps(e) + "\n" for e in [start, *epochs]))
    lines = follow_run(run, wait=0.1, cursor_file=cursor)["line"].split(LINE_SEPARATOR)
    assert [line.split(":")[0] for line in lines] == ["training started", "epoch 1/3", "epoch 2/3"]
    with progress.open("a") as handle:
        handle.write(
            json.dumps({"event": "epoch", "epoch": 3, "loss": 0.2, "accuracy": 0.9}) + "\n"
        )
    assert follow_run(run, wait=0.1, cursor_file=cursor)["line"].startswith("epoch 3/3")
    # Between epochs: a step that moved on is shown as it is; a poll with nothing new says so.
    with progress.open("a") as handle:
        handle.write(json.dumps({"event": "batch", "epoch": 4, "step": 5, "loss": 0.1}) + "\n")
    moved = follow_run(run, wait=0.1, cursor_file=cursor)["line"]
    assert "no news" not in moved
    assert follow_run(run, wait=0.1, cursor_file=cursor)["line"].endswith(
        "(no news since the last line)"
    )
    # A run that stopped moving says for how long (a hung cluster shows no error).
    with progress.open("a") as handle:
        stuck = {"event": "batch", "epoch": 4, "step": 6, "loss": 0.1, "time": time.time() - 725}
        handle.write(json.dumps(stuck) + "\n")
    follow_run(run, wait=0.1, cursor_file=cursor)
    assert "(no news for 12 min " in follow_run(run, wait=0.1, cursor_file=cursor)["line"]
    # The end is said once, with the outcome.
    with progress.open("a") as handle:
        end = {"event": "end", "test_accuracy": 0.97, "test_loss": 0.1, "examples_per_second": 9}
        handle.write(json.dumps(end) + "\n")
    (run / launcher.STATE_FILE).write_text(json.dumps({"pid": os.getpid(), "state": "succeeded"}))
    assert follow_run(run, wait=0.1, cursor_file=cursor)["line"] == (
        "succeeded; finished: test accuracy 0.9700, test loss 0.1000, 9 examples/s"
    )
    # ... and once when the outcome comes a poll after the end's line.
    with progress.open("a") as handle:
        handle.write(json.dumps(end) + "\n")
    (run / launcher.STATE_FILE).write_text(json.dumps({"pid": os.getpid(), "state": "running"}))
    assert follow_run(run, wait=0.1, cursor_file=cursor)["line"].startswith("finished: ")
    # A poll between the end's line and the outcome does not repeat the end (no second
    # "finished: ... (no news for 1 s)").
    assert follow_run(run, wait=0.1, cursor_file=cursor)["line"] == (
        "training finished; waiting for the chief to write its results and exit"
    )
    (run / launcher.STATE_FILE).write_text(json.dumps({"pid": os.getpid(), "state": "succeeded"}))
    assert follow_run(run, wait=0.1, cursor_file=cursor)["line"] == "succeeded"


def test_a_task_that_gave_up_waiting_for_the_cluster_is_not_restarted(tmp_path: Path) -> None:
    # Its start-up watchdog found tasks that never answered; waiting again would not help.
    plan = {"worker-0": "exit:60:0", "worker-1": f"signal:0.5:{int(STARTUP_TIMEOUT_SIGNAL)}"}
    run = make_run(tmp_path, plan, set(), "worker-0", max_restarts=3, restart_delay_seconds=0.2)
    assert launch(run).wait(timeout=60) == 1
    status = follow_status(run)
    assert "task worker-1 gave up waiting for the cluster to form" in status["line"]
    assert launcher.read_state(run)["tasks"]["worker-1"]["restarts"] == 0
    assert not any(pid_alive(p) for p in task_pids(run))


def test_a_diverged_task_is_not_restarted_and_the_run_says_why(tmp_path: Path) -> None:
    plan = {"worker-0": "exit:60:0", "worker-1": f"exit:0.5:{DIVERGED_EXIT}"}
    run = make_run(tmp_path, plan, set(), "worker-0", max_restarts=3, restart_delay_seconds=0.2)
    assert launch(run).wait(timeout=60) == 1
    status = follow_status(run)
    line = " ".join(status["line"].split())
    assert "task worker-1: training diverged (the loss became NaN or infinite)" in line
    # "its last lines give the epoch and the step size": so they are printed (the log of
    # "worker-1", not of "worker-1:").
    assert f"worker-1 exiting with {DIVERGED_EXIT}" in status["log_tail"]
    assert "not restarted: it would diverge again. Fix: a lower learning_rate" in line
    assert launcher.read_state(run)["tasks"]["worker-1"]["restarts"] == 0
    assert not any(pid_alive(p) for p in task_pids(run))


def test_a_task_with_a_usage_error_is_not_restarted(tmp_path: Path) -> None:
    # A script's argparse exits 2 for an argument it does not take: every start would.
    plan = {"worker-0": "exit:60:0", "worker-1": f"exit:0.5:{USAGE_EXIT}"}
    run = make_run(tmp_path, plan, set(), "worker-0", max_restarts=3, restart_delay_seconds=0.2)
    assert launch(run).wait(timeout=60) == 1
    line = " ".join(follow_status(run)["line"].split())
    assert "task worker-1: ran a script that exited with code 2, a usage error" in line
    assert "not restarted: it would exit the same way" in line
    assert launcher.read_state(run)["tasks"]["worker-1"]["restarts"] == 0


def test_a_live_run_on_the_same_ports_is_found(tmp_path: Path) -> None:
    run_dir = tmp_path / "run-a"
    run_dir.mkdir()
    tasks = [{"name": "worker-0", "port": 40001}, {"name": "worker-1", "port": 40002}]
    (run_dir / launcher.SPEC_FILE).write_text(json.dumps({"tasks": tasks}))
    # A process whose command line reads like `python -m training launch --run-dir ...`.
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    fake = subprocess.Popen([*argv, "training", "launch", "--run-dir", str(run_dir)])
    try:
        time.sleep(0.2)
        found = launcher.runs_on_ports({40002, 40009})
        assert found == [{"run_dir": str(run_dir), "pid": fake.pid, "ports": [40002]}]
        assert launcher.runs_on_ports({40003}) == []
    finally:
        fake.kill()
        fake.wait()
    assert launcher.runs_on_ports({40002}) == []


def test_a_run_whose_train_yml_was_interrupted_gets_its_outcome_and_plots(tmp_path: Path) -> None:
    run = make_run(tmp_path, {"worker-0": "exit:1:0"}, set(), "worker-0")
    (run / "run.json").write_text(json.dumps({"run_id": "r", "state": "running"}))
    epochs = [{"event": "epoch", "epoch": i, "loss": 1.0 / i, "accuracy": 0.5} for i in (1, 2)]
    (run / "progress.jsonl").write_text("".join(json.dumps(e) + "\n" for e in epochs))
    assert launch(run).wait(timeout=60) == 0
    assert json.loads((run / "run.json").read_text())["state"] == "succeeded"
    assert (run / "loss_accuracy.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    ("unit", "expected"),
    [
        (
            {"Result": "signal", "ExecMainStatus": "14", "NRestarts": "1"},
            "gave up waiting for the cluster to form (training_run_startup_timeout; "
            "restarted 1 time)",
        ),
        ({"Result": "signal", "ExecMainStatus": "9", "NRestarts": "0"}, "killed by signal 9"),
        ({"Result": "exit-code", "ExecMainStatus": "1", "NRestarts": "3"}, "exit code 1"),
        (
            {"Result": "exit-code", "ExecMainStatus": "64", "NRestarts": "0"},
            "ran a script that exited with code 2, a usage error (argparse's, for an argument it "
            "does not take), not restarted",
        ),
        (
            {"Result": "exit-code", "ExecMainStatus": "3", "NRestarts": "0"},
            "training diverged (the loss became NaN or infinite), not restarted",
        ),
    ],
)
def test_a_failed_chief_unit_says_why(
    monkeypatch: pytest.MonkeyPatch, unit: dict[str, str], expected: str
) -> None:
    monkeypatch.setattr(follow_module, "unit_state", lambda _: {"ActiveState": "failed", **unit})
    monkeypatch.setattr(follow_module, "journal_tail", lambda _: "")
    state, reason, _ = follow_module._systemd_status("raspi-tf-task@chief-0.service", False)
    assert state == "failed"
    assert expected in reason


def test_a_run_whose_ports_another_launcher_holds_starts_nothing(tmp_path: Path) -> None:
    # Two train.yml started seconds apart both pass the preflight: the first launcher's
    # port locks refuse the second before it starts any task.
    port = 40000 + os.getpid() % 10000

    def run_on_port(folder: Path, plan: str) -> Path:
        folder.mkdir(exist_ok=True)
        run = make_run(folder, {"worker-0": plan}, set(), "worker-0")
        spec = json.loads((run / launcher.SPEC_FILE).read_text())
        spec["tasks"][0]["port"] = port
        (run / launcher.SPEC_FILE).write_text(json.dumps(spec))
        return run

    run = run_on_port(tmp_path / "second", "exit:1:0")
    lock = Path(tempfile.gettempdir()) / f"raspi-tf-port-{port}.lock"
    with lock.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # what the first launcher holds
        assert launch(run).wait(timeout=60) == 1
        state = launcher.read_state(run)
        assert state["state"] == "failed"
        assert f"port(s) {port} belong to another local run which started first" in state["reason"]
        assert not list((run / "logs").glob("worker-*.log")) and state["tasks"] == {}
        # runs/latest stays with the run that holds the ports (status.yml, stop.yml).
        assert not (run.parent / launcher.LATEST_LINK).exists()
    # Once the first launcher is gone (the kernel drops its lock), a run starts.
    third = run_on_port(tmp_path / "third", "exit:0.2:0")
    assert launch(third).wait(timeout=60) == 0
    assert (third.parent / launcher.LATEST_LINK).resolve() == third.resolve()
    # A launcher that holds the ports is named, with the stop command for it.
    fourth = run_on_port(tmp_path / "fourth", "exit:30:0")
    first = launch(fourth)
    try:
        # Its process is listed as soon as it runs, but holds the ports only once its
        # state says it is starting its tasks: until then a later launcher may win.
        deadline = time.monotonic() + 30
        while launcher.read_state(fourth).get("state") not in ("starting", "running"):
            assert time.monotonic() < deadline, launcher.read_state(fourth)
            time.sleep(0.1)
        late = run_on_port(tmp_path / "fifth", "exit:0.2:0")
        assert launch(late).wait(timeout=60) == 1
        reason = launcher.read_state(late)["reason"]
        winner = launcher.runs_on_ports({port})[0]["run_dir"].rsplit("/", 1)[-1]
        assert f"belong to run {winner}, which started first" in reason, reason
        assert f"ansible-playbook stop.yml -e run={winner}" in reason
    finally:
        first.terminate()
        first.wait(timeout=60)


def test_a_failed_tasks_last_lines_leave_out_tensorflows_start_up_notes(tmp_path: Path) -> None:
    # A task restarted once: its log repeats TensorFlow's start-up notes before each failure.
    start = [
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        "I0000 00:00:1796678009.489584    4311 port.cc:153] oneDNN custom operations are on.",
        "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow",
    ]
    failure = ["Traceback (most recent call last):", '  File "train.py", line 2, in <module>']
    failure += ["ModuleNotFoundError: No module named 'camera'"]
    log = tmp_path / "worker-1.log"
    log.write_text("\n".join(start + failure + start + failure) + "\n")
    assert follow_module.tail(log, 4).splitlines() == [failure[-1], *failure]
