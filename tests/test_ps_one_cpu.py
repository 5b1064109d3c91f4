"""parameter_server on nodes of one CPU: the run trains instead of hanging (real processes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_ports
from training import datasets

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[1]


def test_parameter_server_trains_when_every_task_may_use_only_one_cpu(tmp_path: Path) -> None:
    # A node pinned to one core (a Pi-shaped container, a 1-vCPU VM): with inter-op
    # pools sized by the one CPU, the workers' first remote train function never
    # returns and the chief waits forever at 0% CPU.
    datasets.prepare("mnist_5k", tmp_path / "datasets", datasets.Settings())
    ps, worker0, worker1, chief = free_ports(4)
    cluster = {
        "chief": [f"127.0.0.1:{chief}"],
        "ps": [f"127.0.0.1:{ps}"],
        "worker": [f"127.0.0.1:{worker0}", f"127.0.0.1:{worker1}"],
    }
    cpu = min(os.sched_getaffinity(0))
    tasks = {}
    for kind, index in (("ps", 0), ("worker", 0), ("worker", 1), ("chief", 0)):
        argv = [sys.executable, "-m", "training", "train", "--model", "mnist_mlp"]
        argv += ["--strategy", "parameter_server", "--epochs", "1", "--no-epoch-eval"]
        argv += ["--data-dir", str(tmp_path / "datasets"), "--output-dir", str(tmp_path / "run")]
        tf_config = {"cluster": cluster, "task": {"type": kind, "index": index}}
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_CONFIG": json.dumps(tf_config)}
        with (tmp_path / f"{kind}-{index}.log").open("w") as log:  # no pipe to fill up
            tasks[f"{kind}-{index}"] = subprocess.Popen(
                argv,
                cwd=ROOT,
                env=env,
                stderr=log,
                preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
            )
    try:
        code = tasks["chief-0"].wait(timeout=300)  # a hang, not a slow run, reaches it
    except subprocess.TimeoutExpired:
        code = None
    finally:
        for task in tasks.values():
            if task.poll() is None:
                task.kill()
    assert code == 0, (tmp_path / "chief-0.log").read_text()[-2000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["strategy"] == "parameter_server"
    assert metrics["test_accuracy"] > 0.5
