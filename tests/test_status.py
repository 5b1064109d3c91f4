"""status.yml and stop.yml find a run by id or by its folder, and say how it ended."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_playbook

RECORD = {
    "dataset": "mnist_5k",
    "launcher": "local",
    "model": "mnist_cnn",
    "reason": "port 23456 of worker-0 is in use",
    "run_id": "r1",
    "started": 1796118902,
    "state": "failed",
    "strategy": "multi_worker_mirrored",
    "tasks": ["worker-0", "worker-1"],
}


@pytest.fixture
def refused_run(tmp_path: Path) -> Path:
    """A run folder elsewhere than runs/, of a run refused before its tasks started."""
    run = tmp_path / "elsewhere" / "r1"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps(RECORD))
    return run


@pytest.mark.parametrize("form", ["{run}", "{run}/"])
def test_status_of_a_run_given_as_its_folder(refused_run: Path, form: str) -> None:
    lines = status_lines(form.format(run=refused_run))
    assert "- run r1 (multi_worker_mirrored)" in lines
    assert "- failed (port 23456 of worker-0 is in use)" in lines
    assert (
        sum(line.startswith(("- worker-0   never ran", "- worker-1   never ran")) for line in lines)
        == 2
    )


def test_a_run_id_with_a_trailing_slash_is_found_in_runs() -> None:
    # A run id, not a folder of the project ("No run <id> in <project>"). The run must be in the
    # default runs folder: -e training_run_runs_dir would outrank the playbook's own choice.
    run = ROOT / "runs" / "19700101T000000Z-test-trailing-slash"
    run.mkdir(parents=True)
    try:
        (run / "run.json").write_text(json.dumps({**RECORD, "run_id": run.name}))
        lines = status_lines(f"{run.name}/")
    finally:
        shutil.rmtree(run)
    assert f"- run {run.name} (multi_worker_mirrored)" in lines


def test_a_run_outside_any_runs_folder_is_answered_without_walking_it(tmp_path: Path) -> None:
    # -e run=../../etc must not walk all of / for run.json files, warning of /proc. The
    # folder is given relative to the checkout, as there, but made here: ../../etc exists
    # only where the checkout is two folders below /.
    folder = tmp_path / "etc"
    folder.mkdir()
    (folder / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    result = run_playbook("status.yml", "-e", f"run={os.path.relpath(folder, ROOT)}")
    text = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0
    assert f"{folder} has no run.json: not a run folder" in text, text[-2000:]
    assert "/proc" not in text


def test_stop_of_an_ended_run_given_as_its_folder(refused_run: Path) -> None:
    result = run_playbook("stop.yml", "-e", f"run={refused_run}")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "Run r1 already ended (failed)" in " ".join(result.stdout.split())


def test_a_missing_folder_names_the_runs_folder(tmp_path: Path) -> None:
    result = run_playbook("status.yml", "-e", f"run={tmp_path}/nope")
    assert result.returncode != 0
    assert f"No run nope in {tmp_path} (no run.json there)" in " ".join(result.stdout.split())


def test_a_misspelt_run_id_is_answered_with_the_newest_runs(tmp_path: Path) -> None:
    # A fileglob over runs/*/run.json finds nothing here, and an order by name would put a
    # run named with training_run_id after every timestamped one: newest first, by age.
    made = ("20261130T080000Z-c", "20261201T080000Z-a", "20261202T080000Z-b", "x", "my run")
    for age, run_id in enumerate(reversed(made)):
        (tmp_path / run_id).mkdir()
        if run_id != "x":
            (tmp_path / run_id / "run.json").write_text(json.dumps({**RECORD, "run_id": run_id}))
        os.utime(tmp_path / run_id, (time.time() - 60 * age, time.time() - 60 * age))
    result = run_playbook("status.yml", "-e", f"run={tmp_path}/nope")
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    newest = "The newest runs there: my run, 20261202T080000Z-b, 20261201T080000Z-a."
    assert newest in text, text[-2000:]
    assert "Unable to find" not in text


def test_a_folder_without_a_record_says_why_and_how_to_clear_it(tmp_path: Path) -> None:
    # A train.yml interrupted between making the run's folder and recording the run leaves it
    # empty; status.yml and stop.yml say why, not only "No run <id>" of a folder the user sees.
    (tmp_path / "20261202T094640Z-mnist_cnn-mwms").mkdir()
    for playbook in ("status.yml", "stop.yml"):
        result = run_playbook(playbook, "-e", f"run={tmp_path}/20261202T094640Z-mnist_cnn-mwms")
        text = " ".join(result.stdout.split())
        assert result.returncode != 0
        assert "20261202T094640Z-mnist_cnn-mwms has no run.json: not a run, or one whose" in text
        assert f"rmdir {tmp_path}/20261202T094640Z-mnist_cnn-mwms" in text, text[-2000:]


def test_a_folder_with_other_things_is_not_offered_for_removal(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    result = run_playbook("status.yml", "-e", f"run={tmp_path}")
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert (
        f"{tmp_path} has no run.json: not a run folder. Fix: -e run=<a run id> (a folder of" in text
    )
    assert "or the path of a run folder train.yml made elsewhere" in text
    root = run_playbook("status.yml", "-e", "run=/etc")  # not "a folder of / that train.yml made"
    assert "a folder of />" not in root.stdout and "or the path of a run folder" in root.stdout
    assert "rmdir" not in text


def test_an_empty_run_name_is_refused_with_the_fix() -> None:
    result = run_playbook("status.yml", "-e", "run=")
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert "-e run= is empty. Fix: -e run=<run id>" in text, text[-2000:]


def status_lines(run: Path | str) -> list[str]:
    """What status.yml -e run=<run> prints, a stripped line each; it must succeed."""
    result = run_playbook("status.yml", "-e", f"run={run}")
    assert result.returncode == 0, result.stdout[-3000:]
    return [line.strip() for line in result.stdout.splitlines()]


def recorded_run(tmp_path: Path, **changes: str) -> Path:
    """A run folder whose run.json is :data:`RECORD` with ``changes``."""
    run = tmp_path / "r1"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({**RECORD, **changes}))
    return run


def test_a_run_whose_tasks_never_started_is_not_shown_running(tmp_path: Path) -> None:
    # What a Ctrl-C on train.yml between recording the run and starting its tasks leaves.
    lines = status_lines(recorded_run(tmp_path, state="running", reason=""))
    assert "- not started; no task has run (train.yml interrupted, or still starting)" in lines


def test_a_succeeded_run_shows_its_test_accuracy(tmp_path: Path) -> None:
    run = recorded_run(tmp_path, state="succeeded", reason="chief worker-0 exited with code 0")
    (run / "metrics.json").write_text(json.dumps({"test_accuracy": 0.97301}))
    lines = status_lines(run)
    assert "- succeeded (chief worker-0 exited with code 0); test accuracy 0.9730" in lines


def test_stop_of_a_run_whose_tasks_never_started_records_it_stopped(tmp_path: Path) -> None:
    run = recorded_run(tmp_path, state="running", reason="")
    result = run_playbook("stop.yml", "-e", f"run={run}")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "Run r1 had not started any task" in " ".join(result.stdout.split())
    assert "backups stay" not in result.stdout
    record = json.loads((run / "run.json").read_text())
    assert (record["state"], record["reason"]) == (
        "stopped",
        "stopped by stop.yml before any task ran",
    )


def test_stop_without_a_run_stops_the_one_train_yml_is_starting(tmp_path: Path) -> None:
    # train.yml has recorded r2 and is still checking the nodes; runs/latest is the run before.
    old = recorded_run(tmp_path, state="succeeded", reason="chief worker-0 exited with code 0")
    (tmp_path / "latest").symlink_to(old.name)
    starting = tmp_path / "r2"
    starting.mkdir()
    record = {**RECORD, "run_id": "r2", "state": "running", "reason": ""}
    (starting / "run.json").write_text(json.dumps(record | {"started": RECORD["started"] + 60}))
    result = run_playbook("stop.yml", "-e", f"training_run_runs_dir={tmp_path}")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "Run r2 had not started any task" in " ".join(result.stdout.split())
    assert json.loads((starting / "run.json").read_text())["state"] == "stopped"
    assert json.loads((old / "run.json").read_text())["state"] == "succeeded"
    # Nothing is starting: the message says where a train.yml still checking is stopped.
    result = run_playbook("stop.yml", "-e", f"training_run_runs_dir={tmp_path}")
    text = " ".join(result.stdout.split())
    assert "Run r1 already ended (succeeded)" in text
    assert "A train.yml still checking the cluster has recorded no run yet: Ctrl-C" in text


def orphaned_run(tmp_path: Path) -> Path:
    """A local run recorded as running whose launcher and tasks were killed (kill -9): no
    train.yml saw the end."""
    run = recorded_run(tmp_path, state="running", reason="")
    dead = {"pid": 999999, "state": "running", "restarts": 0}
    state = {"pid": 999999, "state": "running", "chief": "worker-0"}
    (run / "launcher.json").write_text(
        json.dumps({**state, "tasks": {"worker-0": dead, "worker-1": dead}})
    )
    epoch = {"event": "epoch", "epoch": 1, "seconds": 2.0, "loss": 0.9, "accuracy": 0.7}
    (run / "progress.jsonl").write_text(json.dumps(epoch) + "\n")
    return run


def test_a_run_nobody_saw_end_is_not_shown_running(tmp_path: Path) -> None:
    text = " ".join(status_lines(orphaned_run(tmp_path)))
    assert "- running" not in text.split("- task")[0]
    assert (
        "ended, not yet recorded: no task runs any more. A train.yml still following it records "
        "the end within training_run_poll_seconds; if none is, ansible-playbook follow.yml -e "
        "run=r1 brings its results back" in text
    ), text


def test_follow_records_how_a_run_nobody_saw_end_ended(tmp_path: Path) -> None:
    run = orphaned_run(tmp_path)
    check = run_playbook("follow.yml", "--check", "-e", f"run={run}")
    assert check.returncode == 0, check.stdout[-3000:]
    assert "Check mode: every check passed; follow.yml would follow run r1" in check.stdout
    assert json.loads((run / "run.json").read_text())["state"] == "running"
    result = run_playbook("follow.yml", "-e", f"run={run}")
    assert result.returncode != 0  # it did not succeed, and follow.yml says so
    assert "Run r1 failed: the launcher died" in " ".join(result.stdout.split())
    record = json.loads((run / "run.json").read_text())
    assert (record["state"], record["reason"]) == (
        "failed",
        "the launcher died; see logs/launcher.log",
    )
    assert record["model"] == "mnist_cnn" and record["tasks"] == ["worker-0", "worker-1"]
    assert record["hosts"] == {"worker-0": "localhost", "worker-1": "localhost"}
    # The killed launcher made no plots; follow.yml does, from the epochs the run logged.
    assert (run / "loss_accuracy.png").exists()
    again = run_playbook("follow.yml", "-e", f"run={run}")
    assert again.returncode != 0  # the run's outcome, as train.yml gave it
    assert "Run r1 already ended: failed (the launcher died" in " ".join(again.stdout.split())
    assert json.loads((run / "run.json").read_text()) == record


def test_stop_leaves_a_run_whose_tasks_all_ended_for_follow_to_record(tmp_path: Path) -> None:
    # Recorded as stopped, a run that ended on its own would lose its export: follow.yml
    # refuses a stopped run without results.
    run = orphaned_run(tmp_path)
    result = run_playbook("stop.yml", "-e", f"run={run}")
    assert result.returncode == 0, result.stdout[-3000:]
    text = " ".join(result.stdout.split())
    assert (
        "Run r1 ended on its own: no task of it runs any more, so there is nothing to stop" in text
    )
    assert "ansible-playbook follow.yml -e run=r1 records it, brings its results back" in text
    assert json.loads((run / "run.json").read_text())["state"] == "running"
    assert not (run / ".stop-requested").exists()


def follow_refused(run: Path, *extra: str) -> str:
    """follow.yml on ``run``, which must refuse and leave it recorded as running; its output."""
    result = run_playbook("follow.yml", "-e", f"run={run}", *extra)
    assert result.returncode != 0, result.stdout[-3000:]
    assert json.loads((run / "run.json").read_text())["state"] == "running"
    return " ".join(result.stdout.split())


def rerecord(run: Path, **changes: object) -> None:
    """Change fields of ``run``'s run.json."""
    record = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**record, **changes}))


def test_follow_of_a_run_that_never_started_a_task_says_so(tmp_path: Path) -> None:
    text = follow_refused(recorded_run(tmp_path, state="running", reason=""))
    assert "Run r1 never started a task" in text
    assert "Fix: ansible-playbook stop.yml -e run=r1 records it as stopped" in text


def test_follow_refuses_an_inventory_that_puts_a_task_elsewhere(tmp_path: Path) -> None:
    run = orphaned_run(tmp_path)
    rerecord(run, hosts={"worker-0": "localhost", "worker-1": "pi2"})
    text = follow_refused(run)
    assert "Run r1 ran worker-0 on localhost, worker-1 on pi2 with training_run_launcher" in text
    assert "this inventory gives worker-0 on localhost, worker-1 on localhost" in text


def test_follow_refuses_a_model_other_than_the_runs(tmp_path: Path) -> None:
    text = follow_refused(orphaned_run(tmp_path), "-e", "model=mnist_mlp")
    assert "Run r1 trains model mnist_cnn; -e model=mnist_mlp would change nothing" in text
    assert "Fix: leave -e model out" in text


def test_follow_refuses_another_model_for_an_ended_run_too(refused_run: Path) -> None:
    # Not its summary with rc 0 and the -e model ignored.
    result = run_playbook("follow.yml", "-e", f"run={refused_run}", "-e", "model=mnist_mlp")
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert "-e model=mnist_mlp would change nothing" in text, text[-2000:]


def test_follow_takes_a_run_of_a_model_other_than_the_inventorys(tmp_path: Path) -> None:
    # inventory/local sets model: mnist_cnn; taken for an -e, it would make follow.yml refuse
    # every run of train.yml -e model=mnist_lstm ("-e model=mnist_cnn would change nothing").
    run = recorded_run(tmp_path, state="succeeded", reason="chief worker-0 exited with code 0")
    rerecord(run, model="mnist_lstm", dataset="mnist_5k")
    result = run_playbook("follow.yml", "-e", f"run={run}")
    text = " ".join(result.stdout.split())
    assert result.returncode == 0, text[-2000:]
    assert "would change nothing" not in text
    assert "Run r1 already ended (succeeded: chief worker-0 exited with code 0)" in text


def test_follow_refuses_a_run_of_another_cluster(tmp_path: Path) -> None:
    run = orphaned_run(tmp_path)
    rerecord(run, tasks=["worker-0", "worker-1", "worker-2"])
    text = follow_refused(run)
    assert "Run r1 ran worker-0, worker-1, worker-2 with training_run_launcher=local" in text
    assert "Fix: -i <the inventory the run was started with>" in text


def test_status_of_a_run_of_another_inventory_says_which_tasks_it_cannot_show(
    tmp_path: Path,
) -> None:
    # Not this inventory's two tasks as the whole run, worker-2 left out unsaid.
    run = orphaned_run(tmp_path)
    rerecord(run, tasks=["worker-0", "worker-1", "worker-2"], inventory=["/home/me/inventory/mine"])
    text = " ".join(" ".join(status_lines(run)).split())
    assert (
        "WARNING: the run ran worker-0, worker-1, worker-2; this inventory gives worker-0, "
        "worker-1, so only those are shown. Fix: -i /home/me/inventory/mine" in text
    )
    assert "Fix: -i /home/me/inventory/mine, and the same -e tf_cluster_* values" in follow_refused(
        run
    )


def test_the_newest_runs_are_the_folders_holding_the_file_asked_for(tmp_path: Path) -> None:
    from training.status import newest_runs

    for age, run_id in enumerate(("new", "mid", "old")):
        (tmp_path / run_id).mkdir()
        (tmp_path / run_id / "run.json").write_text("{}")
        if run_id == "mid":
            (tmp_path / run_id / "model.tflite").write_bytes(b"")
        os.utime(tmp_path / run_id, (time.time() - 60 * age, time.time() - 60 * age))
    (tmp_path / "latest").symlink_to(tmp_path / "new")
    assert newest_runs(tmp_path, 2) == ["new", "mid"]
    assert newest_runs(tmp_path, 3, having="model.tflite") == ["mid"]
    (tmp_path / "new" / "preprocessing.json").write_text(json.dumps({"kind": "csv"}))
    (tmp_path / "old" / "preprocessing.json").write_text(json.dumps({"kind": "image_folder"}))
    assert newest_runs(tmp_path, 3, takes="csv") == ["new"]
    assert newest_runs(tmp_path, 3, takes="images") == ["old"]
    assert newest_runs(tmp_path / "nosuch", 3) == []


def test_a_tasks_memory_counts_the_script_it_started() -> None:
    # A script task's main process waits while its script (a child) trains.
    from training.status import usage

    child = "import time; data = b'x' * 200_000_000; print('ready', flush=True); time.sleep(60)"
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import subprocess, sys; subprocess.run([sys.executable, '-c', {child!r}])",
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert parent.stdout is not None and parent.stdout.readline() == "ready\n"
        seen = usage(parent.pid, sample_seconds=0.2)
    finally:
        os.killpg(parent.pid, signal.SIGKILL)  # the script too
        parent.wait()
    assert seen["memory_mb"] is not None and seen["memory_mb"] > 200
    assert seen["cpu_percent"] is not None
