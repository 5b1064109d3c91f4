"""The README's two commands on the local inventory: real TensorFlow clusters on this machine."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import BIN, ROOT, run_playbook
from training import datasets

pytestmark = pytest.mark.integration


def training_processes() -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    # This checkout's local tasks run its venv's Python; node tasks in molecule's
    # containers (one PID namespace) and another checkout's runs are not ours.
    return [
        line
        for line in out.splitlines()
        if ("-m training train" in line or "-m training launch" in line)
        and line.startswith(f"{BIN}/")
    ]


@pytest.fixture(scope="module")
def provisioned() -> None:
    result = run_playbook("site.yml")
    assert result.returncode == 0, result.stdout[-3000:]


def train(runs: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_playbook("train.yml", "-e", f"training_run_runs_dir={runs}", *extra)


def metrics_of(runs: Path) -> dict:
    latest = runs / "latest"
    return json.loads((latest / "metrics.json").read_text())


@pytest.fixture(scope="module")
def undisturbed(provisioned: None, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """The main job: mnist_cnn with multi_worker_mirrored on 2 local workers."""
    runs = tmp_path_factory.mktemp("main")
    return train(runs, "-e", "model=mnist_cnn"), runs


def test_main_job_mwms_cnn(undisturbed: tuple) -> None:
    result, runs = undisturbed
    assert result.returncode == 0, result.stdout[-4000:]
    latest = runs / "latest"
    assert latest.is_symlink()
    assert (latest / "model.keras").stat().st_size > 100_000
    assert list((latest / "tensorboard" / "train").glob("events.out.tfevents.*"))
    assert {p.name for p in (latest / "tf_config").iterdir()} == {"worker-0.json", "worker-1.json"}
    m = metrics_of(runs)
    assert m["strategy"] == "multi_worker_mirrored"
    assert m["tasks"] == ["worker-0", "worker-1"]
    assert m["global_batch_size"] == 2 * m["batch_size_per_worker"]
    # The global batch is twice one worker's: Adam's step size grows by sqrt(2).
    assert m["learning_rate"] == pytest.approx(m["base_learning_rate"] * 2**0.5)
    assert "learning rate 0.00141 (0.001 x sqrt(2), learning_rate_scaling=sqrt)" in result.stdout
    assert len(m["history"]["loss"]) == m["epochs"]
    assert m["test_accuracy"] >= 0.95, m["test_accuracy"]
    assert m["restarts"] == 0 and m["resumed_from_epoch"] is None
    # The model as TFLite float32 beside it, scored with the LiteRT interpreter.
    tflite = m["export"]["float32"]
    assert (latest / "model.tflite").stat().st_size == tflite["bytes"]
    assert abs(tflite["test_accuracy"] - m["test_accuracy"]) <= 0.01
    summary = r"tflite\s+float32 \d+ KB 0\.9\d+\s+test accuracy\s+\(model\*\.tflite\)"
    assert re.search(summary, result.stdout)
    # Progress is shown while the run goes, and the summary at the end.
    assert "epoch 8/8" in result.stdout
    assert "test accuracy" in result.stdout
    # Plots next to the summary.
    for png in ("loss_accuracy.png", "examples_per_second.png"):
        assert (latest / png).read_bytes()[:4] == b"\x89PNG"
    assert not (latest / "backup").exists()  # removed once the run succeeded
    # Each task leaves fit as soon as its last epoch is backed up: tf.data's
    # per-device prefetch with autotuning on can hold the last one there for
    # seconds, the other task waiting for it to save the model.
    for task in m["tasks"]:
        events = [
            json.loads(x) for x in (latest / "tasks" / f"{task}.jsonl").read_text().splitlines()
        ]
        epochs = [e for e in events if e["event"] == "epoch"]
        end = next(e for e in events if e["event"] == "end")
        assert end["time"] - epochs[-1]["time"] < 5, (task, end["time"] - epochs[-1]["time"])
        # Each epoch says how busy the task kept its cores (make bench reads it).
        assert all(e["cpu_seconds"] > 0 for e in epochs), epochs
    assert not training_processes()


def start_train(runs: Path, *extra: str) -> subprocess.Popen[str]:
    """train.yml in the background, in a session of its own (a terminal's Ctrl-C: killpg)."""
    return subprocess.Popen(
        [str(BIN / "ansible-playbook"), "train.yml", "-e", f"training_run_runs_dir={runs}", *extra],
        cwd=ROOT,
        env={**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def wait_for_epoch(runs: Path, epoch: int, timeout: float = 300) -> None:
    """Until the chief reports the end of ``epoch``."""
    progress = runs / "latest" / "progress.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if progress.exists():
            events = [json.loads(line) for line in progress.read_text().splitlines() if line]
            if any(e["event"] == "epoch" and e["epoch"] >= epoch for e in events):
                return
        time.sleep(0.5)
    raise AssertionError(f"epoch {epoch} did not end within {timeout} s")


def kill_task(runs: Path, task: str) -> None:
    state = json.loads((runs / "latest" / "launcher.json").read_text())
    os.kill(state["tasks"][task]["pid"], signal.SIGKILL)


def test_a_worker_killed_in_epoch_2_resumes_from_the_backup(
    undisturbed: tuple, tmp_path: Path
) -> None:
    play = start_train(tmp_path, "-e", "model=mnist_cnn")
    wait_for_epoch(tmp_path, 1)
    time.sleep(1.5)  # into epoch 2
    kill_task(tmp_path, "worker-1")
    output, _ = play.communicate(timeout=900)
    assert play.returncode == 0, output[-4000:]
    latest = tmp_path / "latest"
    m = metrics_of(tmp_path)
    assert m["resumed_from_epoch"] >= 1  # from the backup, not from epoch 0
    assert len(m["history"]["loss"]) == m["epochs"]
    baseline = metrics_of(undisturbed[1])["test_accuracy"]
    assert abs(m["test_accuracy"] - baseline) <= 0.02, (m["test_accuracy"], baseline)
    assert "resumed from the backup made after epoch" in output
    summary = " ".join(output.split())
    assert "recovery restarted" in summary and "worker-1 (1 time)" in summary, output[-3000:]
    assert (
        "task worker-1 exited with code -9; restart 1 of 3"
        in (latest / "logs" / "launcher.log").read_text()
    )
    worker_log = [
        json.loads(x) for x in (latest / "tasks" / "worker-1.jsonl").read_text().splitlines()
    ]
    assert [e["restarts"] for e in worker_log if e["event"] == "start"] == [0, 1]
    assert not training_processes()


def test_a_task_failing_at_every_start_ends_the_run_at_the_restart_limit(
    provisioned: None, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    cache = ROOT / ".cache" / "datasets"
    dataset = datasets.prepared_id(cache, "mnist_5k")
    shutil.copytree(cache / dataset, data / dataset)
    runs = tmp_path / "runs"
    play = start_train(
        runs,
        "-e",
        f"training_run_data_dir={data}",
        "-e",
        "training_run_max_restarts=1",
        "-e",
        "training_run_restart_delay_seconds=1",
    )
    wait_for_epoch(runs, 1)
    # Every start of worker-1 now fails: a shard it reads is gone.
    (shard,) = (data / dataset).glob("train-00001-of-*.rec")
    shard.unlink()
    kill_task(runs, "worker-1")
    output, _ = play.communicate(timeout=600)
    text = " ".join(output.split())
    assert play.returncode != 0
    assert (
        "was restarted 1 time: the restart limit (training_run_max_restarts=1) is reached" in text
    )
    assert f"{shard.name} is missing" in text  # the task's last log lines
    assert re.search(r"- worker-1 +failed ", output), output[-3000:]  # the status table
    assert json.loads((runs / "latest" / "run.json").read_text())["state"] == "failed"
    assert not training_processes()


def test_status_and_stop_mid_run_keep_the_backups(provisioned: None, tmp_path: Path) -> None:
    # Epochs enough that the run is still going when status.yml looks at it on a busy
    # machine: stop.yml ends it. A failure stops it too, so no later test finds its ports taken.
    play = start_train(tmp_path, "-e", "epochs=200")
    try:
        wait_for_epoch(tmp_path, 1)
        status = run_playbook("status.yml", "-e", f"training_run_runs_dir={tmp_path}")
        assert status.returncode == 0, status.stdout[-3000:]
        for task in ("worker-0", "worker-1"):
            row = rf"{task} +running +[1-9]\d* +\d\.\d{{4}} +\d+% +\d+ "
            assert re.search(row, status.stdout), status.stdout[-3000:]
        assert re.search(r"task +state +epoch +loss +cpu +mem MB +restarts +host", status.stdout)
        assert re.search(r"^ *- running$", status.stdout, re.M), status.stdout[-3000:]
        stop = run_playbook("stop.yml", "-e", f"training_run_runs_dir={tmp_path}")
        assert stop.returncode == 0, stop.stdout[-3000:]
        output, _ = play.communicate(timeout=300)
        assert play.returncode != 0  # train.yml reports the run as stopped
        assert "stopped" in output
        assert not training_processes()
        latest = tmp_path / "latest"
        record = json.loads((latest / "run.json").read_text())
        assert (record["state"], record["reason"]) == ("stopped", "stopped by stop.yml")
        assert list((latest / "backup" / "chief").glob("ckpt-*.index"))  # the backup stays
    finally:
        if play.poll() is None:
            run_playbook("stop.yml", "-e", f"training_run_runs_dir={tmp_path}")
            play.communicate(timeout=300)


def test_two_train_yml_naming_one_run_at_once_start_one_run(
    provisioned: None, tmp_path: Path
) -> None:
    # Two train.yml started in the same second name one run (the id is the start's second):
    # both writing to its folder, its tasks would train but run.json say "failed".
    plays = [start_train(tmp_path, "-e", "epochs=1", "-e", "training_run_id=same") for _ in "ab"]
    outputs = [play.communicate(timeout=600)[0] for play in plays]
    codes = sorted(play.returncode for play in plays)
    assert codes[0] == 0 and codes[1] != 0, outputs
    refused = " ".join(outputs[[p.returncode for p in plays].index(codes[1])].split())
    # Refused at the name check (started a few seconds apart) or at the folder's creation.
    assert "exists: a run keeps its results" in refused or (
        "was made by another train.yml while this one checked the nodes" in refused
    ), refused[-3000:]
    record = json.loads((tmp_path / "same" / "run.json").read_text())
    assert record["state"] == "succeeded", record
    assert (tmp_path / "same" / "metrics.json").exists()
    assert not training_processes()


def test_follow_takes_up_a_run_after_ctrl_c_on_train_yml(provisioned: None, tmp_path: Path) -> None:
    play = start_train(tmp_path, "-e", "epochs=5")
    wait_for_epoch(tmp_path, 1)
    os.killpg(play.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
    output, _ = play.communicate(timeout=120)
    assert play.returncode != 0 and "User interrupted execution" in output, output[-2000:]
    latest = tmp_path / "latest"
    assert json.loads((latest / "run.json").read_text())["state"] == "running"
    follow = run_playbook("follow.yml", "-e", f"training_run_runs_dir={tmp_path}")
    assert follow.returncode == 0, follow.stdout[-3000:]
    assert "epoch 5/5" in follow.stdout  # the epochs it had not shown yet
    assert re.search(r"test accuracy 0\.9\d+ on 1000 held-out images", follow.stdout)
    assert re.search(r"per class +weakest \d 0\.\d{3}, .* of 10 classes", follow.stdout)
    record = json.loads((latest / "run.json").read_text())
    assert (record["state"], record["model"]) == ("succeeded", "mnist_cnn")
    assert (latest / "model.keras").exists() and (latest / "metrics.json").exists()
    assert not training_processes()
    again = run_playbook("follow.yml", "-e", f"training_run_runs_dir={tmp_path}")
    assert again.returncode == 0, again.stdout[-3000:]
    assert "already ended (succeeded" in " ".join(again.stdout.split())
    assert re.search(r"test accuracy 0\.9\d+ on 1000 held-out images", again.stdout)


def test_follow_exports_a_run_that_ended_while_nothing_followed_it(
    provisioned: None, tmp_path: Path
) -> None:
    play = start_train(tmp_path, "-e", "epochs=3")
    wait_for_epoch(tmp_path, 1)
    os.killpg(play.pid, signal.SIGINT)  # Ctrl-C; the run goes on and ends on its own
    play.communicate(timeout=120)
    latest = tmp_path / "latest"
    deadline = time.monotonic() + 300
    while json.loads((latest / "run.json").read_text())["state"] == "running":
        assert time.monotonic() < deadline, "the launcher did not record the end"
        time.sleep(1)
    assert not list(latest.glob("*.tflite"))  # train.yml, which exports, was gone
    # As stop.yml records a run it caught while its tasks saved the model: follow.yml exports
    # it as it does a run that succeeded.
    record = json.loads((latest / "run.json").read_text())
    assert record["state"] == "succeeded", record
    caught = "stopped by stop.yml after its last epoch; its model and metrics were saved"
    (latest / "run.json").write_text(json.dumps({**record, "state": "stopped", "reason": caught}))
    follow = run_playbook("follow.yml", "-e", f"training_run_runs_dir={tmp_path}")
    assert follow.returncode == 0, follow.stdout[-3000:]
    assert f"already ended (stopped: {caught})" in " ".join(follow.stdout.split())
    assert re.search(r"tflite +float32 \d+ KB 0\.\d+ +test accuracy", follow.stdout)
    assert (latest / "model.tflite").exists()
    assert "export" in json.loads((latest / "metrics.json").read_text())


def starts_of(run: Path, task: str) -> list[int]:
    """The restart count of each start of ``task``, from its own log."""
    events = [json.loads(x) for x in (run / "tasks" / f"{task}.jsonl").read_text().splitlines()]
    return [e["restarts"] for e in events if e["event"] == "start"]


def test_parameter_server_survives_a_dead_worker_and_resumes_after_a_dead_ps(
    provisioned: None, tmp_path: Path
) -> None:
    play = start_train(tmp_path, "-e", "model=mnist_cnn", "-e", "strategy=parameter_server")
    wait_for_epoch(tmp_path, 1)
    kill_task(tmp_path, "worker-1")  # the coordinator goes on with worker-0
    wait_for_epoch(tmp_path, 2)
    time.sleep(1)
    kill_task(tmp_path, "ps-0")  # the variables are gone: the chief restarts
    output, _ = play.communicate(timeout=900)
    assert play.returncode == 0, output[-4000:]
    latest = tmp_path / "latest"
    m = metrics_of(tmp_path)
    assert m["strategy"] == "parameter_server"
    assert sorted(m["tasks"]) == ["chief-0", "ps-0", "worker-0", "worker-1"]
    assert m["resumed_from_epoch"] >= 2  # from the chief's backup, not from epoch 0
    assert len(m["history"]["loss"]) == m["epochs"]
    assert m["test_accuracy"] >= 0.90, m["test_accuracy"]
    assert starts_of(latest, "worker-1") == [0, 1]
    assert starts_of(latest, "ps-0") == [0, 1]
    assert starts_of(latest, "chief-0") == [0, 1]  # for the ps only, not for the worker
    assert "restarted chief-0 (1 time), ps-0 (1 time), worker-1 (1 time); the chief" in " ".join(
        output.split()
    ), output[-3000:]
    assert not training_processes()  # ps and worker servers never exit by themselves


@pytest.mark.parametrize("model", ["mnist_mlp", "mnist_lstm"])
def test_other_models(provisioned: None, tmp_path: Path, model: str) -> None:
    result = train(tmp_path, "-e", f"model={model}")
    assert result.returncode == 0, result.stdout[-4000:]
    m = metrics_of(tmp_path)
    assert m["test_accuracy"] >= 0.90
    # An LSTM converts too (with a batch of 1, TensorFlow's recipe for its fused op).
    assert abs(m["export"]["float32"]["test_accuracy"] - m["test_accuracy"]) <= 0.01
    assert (tmp_path / "latest" / "model.tflite").is_file()


def test_a_batch_bigger_than_the_dataset_is_refused_before_anything_starts(
    provisioned: None, tmp_path: Path
) -> None:
    # 4,000 examples cannot fill one global batch of 2 x 3,000.
    result = train(tmp_path, "-e", "batch_size=3000")
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert "task worker-0: 4000 training examples are fewer than one step's global batch" in text
    assert "of 6000 (batch_size 3000 x 2 replicas)" in text
    assert "Fix: -e batch_size=2000 or less, or more examples" in text
    assert not training_processes()
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_check_mode_says_what_would_train_warns_and_starts_nothing(
    provisioned: None, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    result = run_playbook(
        "train.yml",
        "--check",
        *("-e", "epochs=3", "-e", "threads=999", "-e", f"training_run_runs_dir={runs}"),
    )
    text = " ".join(result.stdout.split())
    assert result.returncode == 0, text[-2000:]
    # Two workers of 999 threads each on this machine's cores: slow, not wrong.
    assert "WARNING: host localhost: threads=999 with 2 tasks of the run on this host" in text
    assert "Fix: -e threads=0" in text
    assert (
        "a run would train mnist_cnn on mnist_5k for 3 epochs, batch 64 per worker, "
        "multi_worker_mirrored over worker-0, worker-1." in text
    )
    assert not list(runs.glob("*/run.json"))  # nothing started


def test_unknown_model_is_refused_before_anything_starts(provisioned: None, tmp_path: Path) -> None:
    result = train(tmp_path, "-e", "model=resnet")
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert "model=resnet is unknown. Known models: mnist_cnn, mnist_lstm, mnist_mlp" in text
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
