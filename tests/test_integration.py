"""The README's two commands on the local inventory: real TensorFlow clusters on this machine."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_playbook

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


def test_a_task_failing_mid_run_fails_the_play_and_stops_everything(
    provisioned: None, tmp_path: Path
) -> None:
    # 4,000 examples cannot fill one global batch of 2 x 3,000: every worker exits at start.
    result = train(tmp_path, "-e", "batch_size=3000")
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert "failed" in text and "lower batch_size" in text, text[-3000:]
    assert not training_processes()
    assert not (tmp_path / "latest").exists()


def test_unknown_model_is_refused_before_anything_starts(provisioned: None, tmp_path: Path) -> None:
    result = train(tmp_path, "-e", "model=resnet")
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert "model=resnet is unknown. Known models: mnist_cnn, mnist_lstm, mnist_mlp" in text
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
