"""The README's two commands on the local inventory: real TensorFlow clusters on this machine."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import BIN, ROOT, run_playbook

pytestmark = pytest.mark.integration


def training_processes() -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    return [
        line
        for line in out.splitlines()
        if "-m training train" in line or "-m training launch" in line
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


def test_main_job_mwms_cnn(provisioned: None, tmp_path: Path) -> None:
    result = train(tmp_path, "-e", "model=mnist_cnn")
    assert result.returncode == 0, result.stdout[-4000:]
    latest = tmp_path / "latest"
    assert latest.is_symlink()
    assert (latest / "model.keras").stat().st_size > 100_000
    assert list((latest / "tensorboard" / "train").glob("events.out.tfevents.*"))
    assert {p.name for p in (latest / "tf_config").iterdir()} == {"worker-0.json", "worker-1.json"}
    m = metrics_of(tmp_path)
    assert m["strategy"] == "multi_worker_mirrored"
    assert m["tasks"] == ["worker-0", "worker-1"]
    assert m["global_batch_size"] == 2 * m["batch_size_per_worker"]
    assert len(m["history"]["loss"]) == m["epochs"]
    assert m["test_accuracy"] >= 0.95, m["test_accuracy"]
    # Progress was shown while the run went, and the summary at the end.
    assert "epoch 8/8" in result.stdout
    assert "test accuracy" in result.stdout
    assert not training_processes()


def test_parameter_server_cnn(provisioned: None, tmp_path: Path) -> None:
    result = train(tmp_path, "-e", "model=mnist_cnn", "-e", "strategy=parameter_server")
    assert result.returncode == 0, result.stdout[-4000:]
    m = metrics_of(tmp_path)
    assert m["strategy"] == "parameter_server"
    assert sorted(m["tasks"]) == ["chief-0", "ps-0", "worker-0", "worker-1"]
    assert m["test_accuracy"] >= 0.90, m["test_accuracy"]
    assert not training_processes()  # ps and worker servers never exit by themselves


@pytest.mark.parametrize("model", ["mnist_mlp", "mnist_lstm"])
def test_other_models(provisioned: None, tmp_path: Path, model: str) -> None:
    result = train(tmp_path, "-e", f"model={model}")
    assert result.returncode == 0, result.stdout[-4000:]
    assert metrics_of(tmp_path)["test_accuracy"] >= 0.90


def test_a_batch_bigger_than_the_dataset_is_refused_before_anything_starts(
    provisioned: None, tmp_path: Path
) -> None:
    # 4,000 examples cannot fill one global batch of 2 x 3,000.
    result = train(tmp_path, "-e", "batch_size=3000")
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert "task worker-0: 4000 training examples are fewer than one step's batch of 6000" in text
    assert "lower batch_size" in text
    assert not training_processes()
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_a_worker_killed_mid_run_fails_the_play_and_stops_everything(
    provisioned: None, tmp_path: Path
) -> None:
    play = subprocess.Popen(
        [
            str(BIN / "ansible-playbook"),
            "train.yml",
            "-e",
            f"training_run_runs_dir={tmp_path}",
            "-e",
            "epochs=20",
            "-e",
            "training_run_poll_seconds=3",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    progress = tmp_path / "latest" / "progress.jsonl"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and '"epoch": 1,' not in (
        progress.read_text() if progress.exists() else ""
    ):
        time.sleep(1)
    state = json.loads((tmp_path / "latest" / "launcher.json").read_text())
    os.kill(state["tasks"]["worker-1"]["pid"], signal.SIGKILL)
    output, _ = play.communicate(timeout=300)
    text = " ".join(output.split())
    assert play.returncode != 0
    assert "task worker-1 exited with code -9" in text, text[-3000:]
    assert not training_processes()
    run = json.loads((tmp_path / "latest" / "run.json").read_text())
    assert run["state"] == "failed"
    assert (tmp_path / "latest" / "logs" / "worker-0.log").exists()  # the logs are kept


def test_unknown_model_is_refused_before_anything_starts(provisioned: None, tmp_path: Path) -> None:
    result = train(tmp_path, "-e", "model=resnet")
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert "model=resnet is unknown. Known models: mnist_cnn, mnist_lstm, mnist_mlp" in text
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
