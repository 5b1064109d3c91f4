"""Script mode on the three nodes: the example script as every task, its model back home."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import testinfra

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])


def node(name: str):
    """Node ``name`` as root at its console: through Docker (the playbooks use SSH)."""
    return testinfra.get_host(f"docker://{name}")


def test_the_example_script_trains_on_three_nodes_and_its_model_comes_back() -> None:
    runs = EPHEMERAL / "script-runs"
    # A script that imports the example, a module beside it: both go to every node.
    project = EPHEMERAL / "my-project"
    project.mkdir(exist_ok=True)
    shutil.copy(PROJECT / "examples" / "multi_worker_script.py", project)
    (project / "train.py").write_text("import multi_worker_script  # noqa: F401, it trains\n")
    result = subprocess.run(
        [
            *("ansible-playbook", "-i", INVENTORY, str(PROJECT / "playbooks" / "train.yml")),
            *("-e", f"script={project / 'train.py'}"),
            *("-e", "script_args='--epochs 2 --batch-size 32'"),
            *("-e", f"training_run_runs_dir={runs}", "-e", "training_run_id=script-mwms"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # molecule's Ansible sends a failed task to stderr
        text=True,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"},
        timeout=1800,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-4000:]
    run = runs / "script-mwms"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["script"] == "train.py"
    assert metrics["tasks"] == ["worker-0", "worker-1", "worker-2"]
    assert (run / "model.keras").stat().st_size > 10_000
    assert json.loads((run / "test.json").read_text())["test_accuracy"] >= 0.85
    assert {p.stem for p in (run / "logs").glob("*.log")} >= {"worker-0", "worker-1", "worker-2"}
    # Each node ran its copy of the script and its module, the training user's, not root's.
    for name in ("node1", "node2", "node3"):
        for file in ("train.py", "multi_worker_script.py"):
            copy = node(name).file(f"/var/lib/raspi-tf/runs/script-mwms/script/{file}")
            assert copy.exists and copy.user == "raspi-tf", (name, file)
