"""A folder of the user's photos trains on the three nodes, each holding only its shards.

The folder is written on the control node from real digits and photographs
(tests/imagefolder.py), with a truncated and an empty image.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import testinfra

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
NODE_DATA = "/var/lib/raspi-tf/datasets"
NODE_RUNS = "/var/lib/raspi-tf/runs"
#: A model file of the user's, and the module beside it that it imports.
PHOTO_CNN = """from blocks import cnn


def build(learning_rate, steps_per_execution=1, *, input_shape, num_classes):
    return cnn(learning_rate, steps_per_execution, input_shape, num_classes)
"""
BLOCKS = """from training.models import mnist_cnn


def cnn(learning_rate, steps_per_execution, input_shape, num_classes):
    return mnist_cnn.build(
        learning_rate, steps_per_execution, input_shape=input_shape, num_classes=num_classes
    )
"""
#: Worker index of each node's worker task (the inventory's order); node1's also evaluates.
WORKERS = {"node1": 0, "node2": 1, "node3": 2}

sys.path.insert(0, str(PROJECT))
from tests.imagefolder import CLASSES, write_image_folder  # noqa: E402


def node(name: str):
    """Node ``name`` as root at its console: through Docker (the playbooks use SSH)."""
    return testinfra.get_host(f"docker://{name}")


def train(*extra: str) -> str:
    result = subprocess.run(
        ["ansible-playbook", "-i", INVENTORY, str(PROJECT / "playbooks" / "train.yml"), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # molecule's Ansible sends a failed task to stderr
        text=True,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"},
        timeout=1800,
        check=False,
    )
    return " ".join(result.stdout.split()) + f" rc={result.returncode}"


def test_a_photo_folder_trains_and_each_node_holds_only_its_shards() -> None:
    folder = EPHEMERAL / "photos"
    write_image_folder(folder, bad=True, per_class=100)
    runs = EPHEMERAL / "own-runs"
    # molecule keeps its ephemeral folder across scenario runs of a checkout: start empty.
    shutil.rmtree(runs, ignore_errors=True)
    given = ["-e", f"dataset={folder}", "-e", f"training_run_runs_dir={runs}"]

    refused = train(*given)
    assert refused.endswith("rc=2"), refused[-3000:]
    assert "one/broken.jpg (truncated JPEG" in refused, refused[-3000:]
    assert "seven/empty.png" in refused, refused[-3000:]
    assert not runs.exists()  # refused before any node changed or any task started

    # The user's own model file, whose layers come from a module beside it: both go to the nodes.
    models = EPHEMERAL / "my-models"
    models.mkdir(exist_ok=True)
    (models / "blocks.py").write_text(BLOCKS)
    (models / "photo_cnn.py").write_text(PHOTO_CNN)
    settings = ["-e", "skip_bad_images=true", "-e", "image_size=32", "-e", "batch_size=16"]
    out = train(
        *given, *settings, "-e", "training_run_id=photos-mwms", "-e", f"model={models}/photo_cnn.py"
    )
    assert out.endswith("rc=0"), out[-3000:]
    for name in WORKERS:
        copied = node(name).check_output(f"ls {NODE_RUNS}/photos-mwms/model").split()
        assert {"blocks.py", "photo_cnn.py"} <= set(copied), name  # and Python's __pycache__
    metrics = json.loads((runs / "photos-mwms" / "metrics.json").read_text())
    assert metrics["classes"] == CLASSES
    assert metrics["test_accuracy"] >= 0.9, metrics["per_class_accuracy"]

    dataset = metrics["dataset_id"]
    manifest = json.loads((PROJECT / ".cache/datasets" / dataset / "dataset.json").read_text())
    train_shards = [s["file"] for s in manifest["train"]["shards"]]
    test_shards = [s["file"] for s in manifest["test"]["shards"]]
    shards = manifest["train"]["shards"] + manifest["test"]["shards"]
    sizes = {s["file"]: s["bytes"] for s in shards}
    staged = {}
    for name, index in WORKERS.items():
        listing = node(name).check_output(f"cd {NODE_DATA}/{dataset} && stat -c '%n %s' *")
        files = dict(line.rsplit(" ", 1) for line in listing.splitlines())
        want = set(train_shards[index :: len(WORKERS)]) | {"dataset.json"}
        if name == "node1":  # the chief's host evaluates
            want |= set(test_shards)
        assert set(files) == want, (name, sorted(files))
        assert all(int(files[f]) == sizes[f] for f in files if f != "dataset.json")
        staged[name] = sum(int(b) for b in files.values())
    whole = sum(sizes.values())
    print(f"bytes staged per node of {whole} prepared: {staged}")  # read by the closing notes

    # The same folder again: nothing to prepare, nothing to copy (check mode changes nothing).
    again = train(*given, *settings, "--check")
    assert again.endswith("rc=0"), again[-3000:]
    for name in WORKERS:
        assert f"changed: [{name}] => (item=train-" not in again, again[-3000:]
