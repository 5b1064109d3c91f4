"""Restarts, the start-up watchdog, the backup copy, status, metrics and plots, without a run."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import free_ports, run_tensorflow_script
from training import backup, datasets, tasklog
from training.cluster import parse_tf_config
from training.exporter import Exporter
from training.plots import CONFUSION_PLOT, LOSS_PLOT, RATE_PLOT, plot_run
from training.progress import ProgressWriter, read_events
from training.status import task_status
from training.train import saved_results

ROOT = Path(__file__).resolve().parents[1]


def test_restarts_are_counted_from_the_task_log(tmp_path: Path) -> None:
    for expected in (0, 1, 2):
        _, restarts = tasklog.open_task_log(tmp_path, "worker-1")
        assert restarts == expected
    writer = ProgressWriter(tasklog.task_log_path(tmp_path, "worker-1"))
    writer.write("resume", from_epoch=2)
    writer.write("epoch", epoch=3, loss=0.25, accuracy=0.9, examples_per_second=410.0, seconds=5)
    summary = tasklog.summarise(tasklog.task_log_path(tmp_path, "worker-1"))
    assert summary["restarts"] == 2
    assert summary["resumed_from"] == 2
    assert (summary["epoch"], summary["loss"]) == (3, 0.25)


def _recovery(run: Path, resumed: int | None, chief_restarts: int = 0) -> str:
    metrics = {"resumed_from_epoch": resumed, "restarts": chief_restarts}
    (run / "metrics.json").write_text(json.dumps(metrics))
    out = subprocess.run(
        [sys.executable, "-m", "training", "recovery", "--run-dir", str(run)],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def test_the_recovery_line_names_every_task_that_restarted(tmp_path: Path) -> None:
    for task, starts in (("chief-0", 2), ("ps-0", 2), ("worker-0", 1), ("worker-1", 3)):
        for _ in range(starts):
            tasklog.open_task_log(tmp_path, task)
    assert _recovery(tmp_path, 2, chief_restarts=1) == (
        "restarted chief-0 (1 time), ps-0 (1 time), worker-1 (2 times); "
        "the chief resumed from the backup made after epoch 2"
    )


def test_the_recovery_line_says_when_nothing_or_only_a_worker_restarted(tmp_path: Path) -> None:
    for task in ("chief-0", "worker-0", "worker-1"):
        tasklog.open_task_log(tmp_path, task)
    assert _recovery(tmp_path, None) == "none (no task restarted)"
    tasklog.open_task_log(tmp_path, "worker-1")
    assert _recovery(tmp_path, None) == (
        "restarted worker-1 (1 time); the chief ran on without a restart"
    )


def test_the_recovery_line_says_a_chief_restarted_before_any_backup_began_again(
    tmp_path: Path,
) -> None:
    for _ in range(2):
        tasklog.open_task_log(tmp_path, "worker-0")
    assert _recovery(tmp_path, None, chief_restarts=1) == (
        "restarted worker-0 (1 time); "
        "the chief restarted before its first backup, so training began again at epoch 1"
    )


def stuck_task(tf_config: dict, task_log: Path) -> subprocess.CompletedProcess[str]:
    """Run a task of ``tf_config`` with a 1 s startup watchdog, stuck holding the GIL."""
    # TensorFlow's MultiWorkerMirroredStrategy() set-up holds the GIL while it waits for a
    # peer; builtin sum over a long iterator does too, so no thread of the task would run.
    code = (
        "import itertools, os, sys\n"
        "from training.cluster import parse_tf_config\n"
        "from training.tasklog import StartupWatchdog\n"
        "tf_config = parse_tf_config(os.environ['TF_CONFIG'])\n"
        f"StartupWatchdog(tf_config, 1.0, {str(task_log)!r}).start()\n"
        "sum(itertools.repeat(1, 10**12))\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "TF_CONFIG": json.dumps(tf_config), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_watchdog_ends_a_task_stuck_holding_the_gil_and_names_the_missing_one(
    tmp_path: Path,
) -> None:
    up, down, me = free_ports(3)
    listener = socket.create_server(("127.0.0.1", up))
    tf_config = {
        "cluster": {"worker": [f"127.0.0.1:{up}", f"127.0.0.1:{down}", f"127.0.0.1:{me}"]},
        "task": {"type": "worker", "index": 2},
    }
    task_log = tmp_path / "tasks" / "worker-2.jsonl"
    started = time.monotonic()
    result = stuck_task(tf_config, task_log)
    listener.close()
    assert result.returncode == -tasklog.STARTUP_TIMEOUT_SIGNAL
    assert time.monotonic() - started < 30
    assert f"worker-1 (127.0.0.1:{down})" in result.stderr
    assert "worker-0" not in result.stderr.split("not answering:")[1]
    assert "training_run_startup_timeout" in result.stderr
    (event,) = [e for e in read_events(task_log) if e["event"] == "timeout"]
    assert event["missing"] == [f"worker-1 (127.0.0.1:{down})"]


def test_watchdog_asks_about_the_addresses_when_every_port_answers(tmp_path: Path) -> None:
    # Not "not answering: every task answers on its port" (a local run on an address that
    # something else answers for).
    up, me = free_ports(2)
    listener = socket.create_server(("127.0.0.1", up))
    tf_config = {
        "cluster": {"worker": [f"127.0.0.1:{up}", f"127.0.0.1:{me}"]},
        "task": {"type": "worker", "index": 1},
    }
    result = stuck_task(tf_config, tmp_path / "tasks" / "worker-1.jsonl")
    listener.close()
    assert result.returncode == -tasklog.STARTUP_TIMEOUT_SIGNAL
    assert "not answering" not in result.stderr
    assert "although every task's port answers: is each host's tf_cluster_address" in result.stderr


def test_watchdog_stays_quiet_once_the_cluster_formed() -> None:
    tf_config = parse_tf_config(
        json.dumps(
            {
                "cluster": {"worker": ["127.0.0.1:2001", "127.0.0.1:2002"]},
                "task": {"type": "worker", "index": 0},
            }
        )
    )
    assert tf_config is not None
    dog = tasklog.StartupWatchdog(tf_config, 0.5, None).start()
    dog.formed()
    time.sleep(1.5)  # still alive: the watchdog's signal would have ended pytest


def test_a_worker_copies_the_chiefs_backup_and_forgets_a_stale_one(tmp_path: Path) -> None:
    chief_backup = tmp_path / "chief-node" / "backup"
    (chief_backup / "chief").mkdir(parents=True)
    (chief_backup / "chief" / "checkpoint").write_text("epoch 2")
    mine = tmp_path / "worker-node" / "backup"
    assert backup.sync_from_chief(str(chief_backup), mine) is True
    assert (mine / "chief" / "checkpoint").read_text() == "epoch 2"
    # The chief starts a new run: no backup there yet, so none here either.
    (chief_backup / "chief" / "checkpoint").unlink()
    (chief_backup / "chief").rmdir()
    assert backup.sync_from_chief(str(chief_backup), mine) is False
    assert not (mine / "chief").exists()
    backup.remove_synced_backup(mine)
    assert not mine.exists()


def test_an_unreachable_chief_fails_the_copy(tmp_path: Path) -> None:
    with pytest.raises(backup.BackupSyncError, match="cannot copy the chief's backup"):
        backup.sync_from_chief("nobody@127.0.0.1:/nowhere/backup", tmp_path / "backup", timeout=30)


def test_local_status_reads_the_launcher_and_the_task_log(tmp_path: Path) -> None:
    (tmp_path / "launcher.json").write_text(
        json.dumps(
            {
                "pid": os.getpid(),
                "state": "running",
                "tasks": {"worker-1": {"pid": os.getpid(), "state": "running", "restarts": 1}},
            }
        )
    )
    writer = ProgressWriter(tasklog.task_log_path(tmp_path, "worker-1"))
    writer.write("start", restarts=0)
    writer.write("start", restarts=1)
    writer.write("epoch", epoch=2, loss=0.5, accuracy=0.8, examples_per_second=300.0, seconds=4)
    status = task_status(tmp_path, "worker-1", sample_seconds=0.1)
    assert status["state"] == "running"
    assert status["restarts"] == 1
    assert status["epoch"] == 2
    assert status["memory_mb"] and status["memory_mb"] > 0
    assert status["line"].split()[:4] == ["worker-1", "running", "2", "0.5000"]
    assert status["line"].split()[-2] == "1"  # restarts
    assert status["header"].split()[:4] == ["task", "state", "epoch", "loss"]
    assert len(status["line"]) <= 61 + len(status["host"])  # Ansible folds lines above 80


@pytest.mark.parametrize(
    ("returncode", "state"), [(2, "failed"), (143, "stopped"), (-9, "stopped"), (None, "stopped")]
)
def test_local_status_after_the_launcher_ended_tells_failed_from_stopped(
    tmp_path: Path, returncode: int | None, state: str
) -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    (tmp_path / "launcher.json").write_text(
        json.dumps(
            {
                "pid": gone.pid,
                "state": "failed",
                "tasks": {
                    "worker-1": {"pid": gone.pid, "state": "exited", "returncode": returncode}
                },
            }
        )
    )
    ProgressWriter(tasklog.task_log_path(tmp_path, "worker-1")).write("start", restarts=0)
    assert task_status(tmp_path, "worker-1", sample_seconds=0.1)["state"] == state


def test_the_status_command_reports_every_task_of_the_node_in_order(tmp_path: Path) -> None:
    for task in ("worker-1", "worker-0"):
        ProgressWriter(tasklog.task_log_path(tmp_path, task)).write("start", restarts=0)
    argv = [sys.executable, "-m", "training", "status", "--run-dir", str(tmp_path), "--sample", "0"]
    out = subprocess.run(
        [*argv, "--task=worker-1", "--task=worker-0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    states = json.loads(out)
    assert [s["task"] for s in states] == ["worker-1", "worker-0"]
    assert {s["state"] for s in states} == {"never ran"}


def test_each_task_serves_its_metrics_to_prometheus() -> None:
    (port,) = free_ports(1)
    exporter = Exporter(port, "127.0.0.1", "worker-1", "run-x")
    exporter.restarts.set(2)
    exporter.record(epoch=3, steps=10, seconds=2.0, examples=640, logs={"loss": 0.5})
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    labels = 'job_type="worker",run_id="run-x",task="worker-1"'
    assert f"raspi_tf_examples_per_second{{{labels}}} 320.0" in text
    assert f"raspi_tf_step_seconds{{{labels}}} 0.2" in text
    assert f"raspi_tf_epoch{{{labels}}} 3.0" in text
    assert f"raspi_tf_restarts{{{labels}}} 2.0" in text
    assert f"raspi_tf_steps_total{{{labels}}} 10.0" in text


def test_a_task_that_only_serves_exports_its_restarts_alone() -> None:
    # Exported as 0.0 for the whole run, a parameter_server worker's or ps's examples/s, steps
    # and loss would make a Prometheus graph of the workers show flat zeros, not "no data".
    (port,) = free_ports(1)
    exporter = Exporter(port, "127.0.0.1", "ps-0", "run-x", trains=False)
    exporter.restarts.set(1)
    exporter.record(epoch=3, steps=10, seconds=2.0, examples=640)  # ignored: it trains nothing
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    series = {line.split("{")[0] for line in text.splitlines() if line.startswith("raspi_tf_")}
    assert series == {"raspi_tf_restarts"}, text


def test_plots_show_each_epoch_and_each_worker(tmp_path: Path) -> None:
    progress = ProgressWriter(tmp_path / "progress.jsonl")
    for epoch in (1, 2, 3):
        progress.write("epoch", epoch=epoch, loss=1.0 / epoch, accuracy=0.5 + epoch / 10, seconds=3)
    for task in ("worker-0", "worker-1"):
        log = ProgressWriter(tasklog.task_log_path(tmp_path, task))
        log.write("start", restarts=0)
        log.write("epoch", epoch=1, examples_per_second=300.0)
        log.write("start", restarts=1)
        log.write("epoch", epoch=2, examples_per_second=280.0)
    (tmp_path / "metrics.json").write_text(json.dumps({"test_accuracy": 0.96, "model": "m"}))
    written = plot_run(tmp_path)
    assert [p.name for p in written] == [LOSS_PLOT, RATE_PLOT]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in written)


def test_a_diverged_loss_is_written_as_strict_json_and_plotted_as_a_gap(tmp_path: Path) -> None:
    progress = ProgressWriter(tmp_path / "progress.jsonl")
    progress.write("epoch", epoch=1, loss=0.5, accuracy=0.8, test_accuracy=0.85, seconds=3)
    progress.write("epoch", epoch=2, loss=float("nan"), accuracy=0.1, test_accuracy=0.1, seconds=3)

    def no_constants(name: str) -> None:
        raise AssertionError(f"{name} is not JSON")

    lines = (tmp_path / "progress.jsonl").read_text().splitlines()
    assert [json.loads(line, parse_constant=no_constants)["loss"] for line in lines] == [0.5, None]
    assert [p.name for p in plot_run(tmp_path)] == [LOSS_PLOT]


def test_a_run_without_epochs_gets_no_plots(tmp_path: Path) -> None:
    assert plot_run(tmp_path) == []


def test_the_confusion_matrix_is_plotted_from_the_metrics(tmp_path: Path) -> None:
    metrics = {
        "test_accuracy": 0.75,
        "classes": ["cat", "dog", "owl"],
        "confusion_matrix": [[3, 1, 0], [0, 3, 1], [0, 0, 0]],  # no owl in the test split
    }
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    (written,) = plot_run(tmp_path)
    assert written.name == CONFUSION_PLOT and written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


RESUME_SCRIPT = """
import sys
import numpy as np
import tf_keras as keras
from training.backup import backup_callback

backup_dir, io_device = sys.argv[1], sys.argv[2]
x = np.random.default_rng(0).random((64, 4), dtype=np.float32)
y = (x.sum(axis=1) > 2).astype("int32")

def model():
    m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    m.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m

class DieInEpoch2(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        if epoch == 2:
            raise KeyboardInterrupt

class Seen(keras.callbacks.Callback):
    epochs = []
    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(epoch)

def fit(last_callback):
    backup = backup_callback(keras, backup_dir, io_device)
    model().fit(x, y, epochs=4, verbose=0, callbacks=[backup, last_callback])

try:
    fit(DieInEpoch2())
except KeyboardInterrupt:
    pass
fit(Seen())
print(Seen.epochs)
"""


def test_a_backup_pinned_to_one_device_resumes_where_the_first_process_died(
    tmp_path: Path,
) -> None:
    # The parameter_server path (backup read and written on one device), on this process's CPU.
    device = "/job:localhost/replica:0/task:0/device:CPU:0"
    last = run_tensorflow_script(RESUME_SCRIPT, str(tmp_path / "backup"), device)
    assert last == "[2, 3]"  # epochs 0 and 1 were backed up
    # Kept when fit returns: the task removes it once the model and metrics are saved.
    assert (tmp_path / "backup" / "chief").exists()


def test_saved_results_belong_to_their_run_only(tmp_path: Path) -> None:
    (tmp_path / "metrics.json").write_text(json.dumps({"run_id": "r1", "test_accuracy": 0.97}))
    assert saved_results(tmp_path, "r1") is None  # no model.keras yet
    (tmp_path / "model.keras").write_bytes(b"")
    assert saved_results(tmp_path, "r1") == {"run_id": "r1", "test_accuracy": 0.97}
    assert saved_results(tmp_path, "r2") is None
    assert saved_results(tmp_path, "") is None


def test_a_chief_restarted_after_saving_its_results_ends_at_once(tmp_path: Path) -> None:
    # Killed after it wrote metrics.json and model.keras but before it exited, the chief is
    # started again; waiting startup_timeout for workers that have finished would fail the run.
    folder = tmp_path / "datasets"
    datasets.prepare("mnist_5k", folder, datasets.Settings())
    run = tmp_path / "run"
    run.mkdir()
    metrics = {"run_id": "r1", "model": "mnist_mlp", "strategy": "multi_worker_mirrored"}
    metrics |= {"tasks": ["worker-0", "worker-1"], "test_accuracy": 0.97, "test_loss": 0.1}
    metrics |= {"train_seconds": 9.0, "examples_per_second": 3000.0}
    (run / "metrics.json").write_text(json.dumps(metrics))
    (run / "model.keras").write_bytes(b"")
    ports = free_ports(2)
    tf_config = {
        "cluster": {"worker": [f"127.0.0.1:{port}" for port in ports]},
        "task": {"type": "worker", "index": 0},
    }
    argv = [sys.executable, "-m", "training", "train", "--model", "mnist_mlp", "--run-id", "r1"]
    argv += ["--data-dir", str(folder), "--output-dir", str(run), "--startup-timeout", "120"]
    env = {**os.environ, "TF_CONFIG": json.dumps(tf_config), "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=100, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "its results are already saved" in done.stderr
    events = read_events(run / "progress.jsonl")
    assert [e["event"] for e in events] == ["end"] and events[0]["test_accuracy"] == 0.97


# `python -m training train` whose model gives NaN logits, so the loss is NaN from step 1.
NAN_TRAIN = """
import sys
import tf_keras as keras
from training import models
from training.cli import main

def build(learning_rate, steps_per_execution=1):
    nan = keras.layers.Lambda(lambda x: x * float("nan"))
    layers = [keras.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(10), nan]
    return models.compile_model(keras.Sequential(layers), learning_rate, steps_per_execution)

models.get = lambda name: build
sys.exit(main(sys.argv[1:]))
"""


def test_a_diverged_task_exits_with_the_status_no_supervisor_restarts(tmp_path: Path) -> None:
    # Restarted, it would resume from the same backup with the same step size and diverge
    # again: four starts and a run recorded as "the restart limit is reached".
    folder = tmp_path / "datasets"
    datasets.prepare("mnist_5k", folder, datasets.Settings())
    argv = [sys.executable, "-c", NAN_TRAIN, "train", "--epochs", "2", "--data-dir", str(folder)]
    argv += ["--output-dir", str(tmp_path / "run"), "--metrics-port-offset", "0"]
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    env |= {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=200, check=False
    )
    assert done.returncode == tasklog.DIVERGED_EXIT == 3, done.stderr[-2000:]
    assert (
        "error: training diverged: the loss became nan in epoch 1/2; a restart would diverge "
        "again. Fix: a lower learning_rate (now 0.001)" in done.stderr
    )
    assert not (tmp_path / "run" / "model.keras").exists()
