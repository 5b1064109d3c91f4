"""Script mode through train.yml on the local inventory: a user's own script as every task."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import ROOT, run_playbook
from training.progress import read_events

pytestmark = pytest.mark.integration


def _train(runs: Path, *extra: str):
    return run_playbook("train.yml", "-e", f"training_run_runs_dir={runs}", *extra)


def test_the_example_script_trains_on_two_local_workers_and_its_model_comes_back(tmp_path):
    runs = tmp_path / "runs"
    result = _train(
        runs,
        *("-e", f"script={ROOT / 'examples' / 'multi_worker_script.py'}"),
        *("-e", "script_args='--epochs 2 --batch-size 32'"),
    )
    assert result.returncode == 0, result.stdout[-4000:]
    latest = runs / "latest"
    metrics = json.loads((latest / "metrics.json").read_text())
    assert metrics["script"] == "multi_worker_script.py"
    assert metrics["tasks"] == ["worker-0", "worker-1"]
    assert {"model.keras", "test.json"} <= set(metrics["outputs"])
    assert (latest / "model.keras").stat().st_size > 10_000
    assert json.loads((latest / "test.json").read_text())["test_accuracy"] >= 0.85
    assert (latest / "script" / "multi_worker_script.py").is_file()
    text = " ".join(result.stdout.split())
    assert "script multi_worker_script.py - staged data mnist_5k (10 classes" in text
    # The chief's lines are its progress events, which follow shows as they come;
    # Keras' epochs are epochs of the run, in train.yml's lines and its summary.
    events = read_events(latest / "progress.jsonl")
    assert any(e["event"] == "log" and "test accuracy 0." in e["line"] for e in events)
    assert [e["epoch"] for e in events if e["event"] == "epoch"] == [1, 2]
    assert events[-1]["event"] == "end"
    assert "epoch 2/2: loss 0." in text and "training epoch 2/2: loss 0." in text
    assert (latest / "loss_accuracy.png").is_file()
    # Each worker's own log has its epochs, which status.yml shows.
    for task in ("worker-0", "worker-1"):
        logged = read_events(latest / "tasks" / f"{task}.jsonl")
        assert [e["epoch"] for e in logged if e["event"] == "epoch"] == [1, 2], task
    # Each worker ran 2 epochs of 4,000 // 64 steps: the global batch is 32 x 2 workers.
    log = (latest / "logs" / "worker-1.log").read_text()
    assert "Epoch 2/2" in log and "62/62" in log


def test_a_script_failing_at_every_start_ends_the_run_at_the_restart_limit(tmp_path):
    # The failure comes from a module beside the script: it went with the script.
    (tmp_path / "camera.py").write_text("raise RuntimeError('no camera on this node')\n")
    script = tmp_path / "broken.py"
    script.write_text("import tensorflow as tf\nimport camera\n")
    runs = tmp_path / "runs"
    result = _train(
        runs,
        *("-e", f"script={script}", "-e", "training_run_max_restarts=1"),
        *("-e", "training_run_restart_delay_seconds=1"),
    )
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert "the restart limit (training_run_max_restarts=1) is reached" in text
    assert "RuntimeError: no camera on this node" in text  # the task's last log lines
    record = json.loads((runs / "latest" / "run.json").read_text())
    assert record["state"] == "failed"
    assert (runs / "latest" / "script" / "camera.py").is_file()


def test_a_script_refusing_its_arguments_is_not_restarted(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import argparse\nargparse.ArgumentParser().parse_args()\n")
    runs = tmp_path / "runs"
    result = _train(runs, "-e", f"script={script}", "-e", "script_args='--lr 0.01'")
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert "ran a script that exited with code 2, a usage error" in text, text[-3000:]
    assert "error: unrecognized arguments: --lr 0.01" in text  # its last lines
    assert "restart 1 of" not in (runs / "latest" / "logs" / "launcher.log").read_text()


def test_a_keras_3_script_is_refused_before_anything_starts(tmp_path):
    script = tmp_path / "k3.py"
    script.write_text("import os\nimport keras\n")
    runs = tmp_path / "runs"
    result = _train(runs, "-e", f"script={script}")
    text = " ".join(result.stdout.split())
    assert result.returncode != 0
    assert f"script={script}: {script} line 2: imports Keras 3 (keras)" in text
    assert "fix: import tf_keras as keras" in text
    assert not runs.exists()
