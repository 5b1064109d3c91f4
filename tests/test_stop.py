"""A stop at any moment after the last epoch keeps the trained weights (one real process)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import free_ports
from training import datasets
from training.progress import PROGRESS_FILE, read_events

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]
EPOCHS = 2


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("datasets")
    datasets.prepare("mnist_5k", folder, datasets.Settings())
    return folder


def train(data_dir: Path, run: Path) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "training", "train", "--model", "mnist_mlp"]
    argv += ["--epochs", str(EPOCHS), "--data-dir", str(data_dir), "--output-dir", str(run)]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("TF_CONFIG", None)
    return subprocess.Popen(argv, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)


def last_epoch_ended(run: Path) -> bool:
    """The last epoch's event and backup are written (or the results already)."""
    events = read_events(run / PROGRESS_FILE)
    if not any(e.get("event") == "epoch" and e.get("epoch") == EPOCHS for e in events):
        return False
    # tf.train.CheckpointManager numbers its saves (ckpt-<n> after epoch n here)
    # and names the newest in its state file once the save is whole; a kill
    # between ckpt-2.index and that line resumes, rightly, from ckpt-1.
    # The backup folder goes once the results are written, perhaps right now.
    try:
        state = (run / "backup" / "chief" / "checkpoint").read_text()
    except FileNotFoundError:
        state = ""
    return f'"ckpt-{EPOCHS}"' in state or (run / "metrics.json").exists()


@pytest.mark.parametrize(
    ("sig", "delay"),
    [
        (signal.SIGTERM, 0.0),
        (signal.SIGTERM, 0.4),
        (signal.SIGTERM, 1.0),
        # systemd's SIGKILL after TimeoutStopSec, the OOM killer, a power cut.
        (signal.SIGKILL, 0.0),
    ],
)
def test_a_stop_after_the_last_epoch_keeps_the_weights(
    data_dir: Path, tmp_path: Path, sig: signal.Signals, delay: float
) -> None:
    run = tmp_path / "run"
    task = train(data_dir, run)
    deadline = time.monotonic() + 300
    while not last_epoch_ended(run) and task.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert last_epoch_ended(run), "the run never ended its last epoch"
    time.sleep(delay)
    task.send_signal(sig)  # SIGTERM: what stop.yml, systemd and the launcher send
    _, stderr = task.communicate(timeout=120)
    assert task.returncode in (0, 128 + sig, -sig), stderr[-3000:]

    results = (run / "metrics.json").exists() and (run / "model.keras").exists()
    backup = any((run / "backup" / "chief").glob("*.index"))
    # Either the results were written (and then the backup goes) or the backup stays.
    assert results != backup, f"results {results}, backup {backup}: {stderr[-2000:]}"

    if results:
        return
    # The unit's restart (or a second start by hand) finishes what is left.
    again = train(data_dir, run)
    _, stderr = again.communicate(timeout=300)
    assert again.returncode == 0, stderr[-3000:]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["resumed_from_epoch"] == EPOCHS  # nothing trained twice
    assert metrics["test_accuracy"] > 0.8
    assert not (run / "backup").exists()


def test_a_stop_mid_run_ends_two_synchronous_workers_at_once(
    data_dir: Path, tmp_path: Path
) -> None:
    # multi_worker_mirrored starts TensorFlow's preemption notifier, which
    # takes SIGTERM for itself: the workers must still end on it, not go on
    # training until the launcher's SIGKILL (or systemd's, 30 s later).
    ports = free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    tasks = []
    for index in range(2):
        argv = [sys.executable, "-m", "training", "train", "--model", "mnist_mlp", "--epochs"]
        argv += ["200", "--data-dir", str(data_dir), "--output-dir", str(tmp_path / "run")]
        tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_CONFIG": json.dumps(tf_config)}
        tasks.append(subprocess.Popen(argv, cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True))
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and all(t.poll() is None for t in tasks):
            if (tmp_path / "run" / "backup" / "chief" / "ckpt-1.index").exists():
                break  # epoch 1 is done and backed up
            time.sleep(0.1)
        for task in tasks:
            task.send_signal(signal.SIGTERM)
        codes = [task.wait(timeout=60) for task in tasks]  # 200 epochs take minutes
    finally:
        for task in tasks:
            if task.poll() is None:
                task.kill()
    # Both end as stopped, even the one whose partner went first while it was
    # inside a collective; neither trains on to its end (0) or waits for SIGKILL.
    assert codes == [143, 143], [t.stderr.read()[-2000:] for t in tasks if t.stderr]
    epochs = [
        e["epoch"]
        for e in read_events(tmp_path / "run" / PROGRESS_FILE)
        if e.get("event") == "epoch"
    ]
    assert max(epochs) < 200
    assert list((tmp_path / "run" / "backup" / "chief").glob("ckpt-*.index"))  # kept
