"""site.yml and train.yml refuse a bad -e value before anything runs, naming it and the fix."""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, free_ports, run_playbook


def refused(*args: str) -> str:
    """Run ansible-playbook with ``args``, require it to fail; its output on one line."""
    result = run_playbook(*args)
    text = " ".join(result.stdout.split())
    assert result.returncode != 0, text[-2000:]
    return text


def small_dataset(tmp_path: Path) -> Path:
    """A folder holding a small mnist_5k.npz, for runs refused after the tasks' start-up check.

    On a fresh clone (CI's unit stage) nothing is staged, and that check refuses the run first.
    """
    data = tmp_path / "datasets"
    data.mkdir()
    images = np.zeros((256, 28, 28), np.uint8)
    labels = np.arange(256, dtype=np.uint8) % 10
    np.savez(data / "mnist_5k.npz", x_train=images, y_train=labels, x_test=images, y_test=labels)
    return data


@pytest.mark.parametrize(
    ("given", "said"),
    [
        # Accepted, it would make every task fail at each start until the restart limit.
        (
            "training_run_startup_timeout=-5",
            "training_run_startup_timeout=-5 must be a whole number in digits, 0 or more",
        ),
        # Refused with the fix, before Ansible's argument check or argparse print a screenful.
        (
            "training_run_startup_timeout=abc",
            "Fix: e.g. -e training_run_startup_timeout=300",
        ),
        (
            "training_run_metrics_port_offset=abc",
            "Fix: e.g. -e training_run_metrics_port_offset=1000",
        ),
        ("training_run_poll_seconds=abc", "Fix: e.g. -e training_run_poll_seconds=15"),
    ],
)
def test_a_bad_number_is_refused_before_the_run(tmp_path: Path, given: str, said: str) -> None:
    runs = tmp_path / "runs"
    text = refused("train.yml", "-e", given, "-e", f"training_run_runs_dir={runs}")
    assert said in text, text[-2000:]
    assert "usage:" not in text and "argument_spec_data" not in text
    assert not runs.exists() or not any(runs.iterdir())


def test_site_refuses_an_unknown_dataset_before_any_role_runs() -> None:
    text = refused("site.yml", "-e", "dataset=cifar")
    assert "dataset=cifar is unknown: not a dataset name (mnist, mnist_5k)" in text, text[-2000:]
    assert "Fix: -e dataset=mnist_5k, or the path of a folder of images" in text
    assert "tf_runtime" not in text  # refused before the venv's import smoke test


@pytest.mark.parametrize("kind", ["relative", "file"])
def test_a_runs_folder_that_cannot_hold_runs_is_refused_before_the_run(
    tmp_path: Path, kind: str
) -> None:
    # A relative folder would be made under playbooks/ and looked for in the project (the
    # run starts, its follower fails); a file would give a raw "Not a directory".
    if kind == "file":
        given = tmp_path / "a-file"
        given.write_text("")
        said = f"training_run_runs_dir={given} is a file, not a folder. Fix:"
    else:
        given = Path("myruns")
        said = "training_run_runs_dir=myruns is a relative path. Fix: an absolute one"
    text = refused("train.yml", "-e", f"training_run_runs_dir={given}")
    assert said in text, text[-2000:]
    assert not (Path(__file__).parents[1] / "playbooks" / "myruns").exists()


def test_a_latest_that_is_not_a_link_is_refused_before_the_run(tmp_path: Path) -> None:
    # A folder there would crash the launcher (IsADirectoryError) after the run is named.
    runs = tmp_path / "runs"
    (runs / "latest").mkdir(parents=True)
    text = refused("train.yml", "-e", f"training_run_runs_dir={runs}")
    assert f"{runs}/latest is a folder, not the link to the newest run" in text, text[-2000:]
    assert f"Fix: rename it (mv {runs}/latest {runs}/latest.mine)" in text
    assert sorted(p.name for p in runs.iterdir()) == ["latest"]


@pytest.mark.parametrize(
    ("given", "fix"),
    [
        ("../../escape", "escape"),
        (".hidden", "hidden"),
        ("latest", "my-run"),
        (" ", "my-run"),  # would train into runs/' '/, which status.yml -e run=' ' cannot name
        (["..", "x"], "x"),  # a list would train into runs/['..', 'x']/
        ("é" * 101, "my-run"),  # 101 characters but 202 bytes: the limit counts bytes
    ],
)
def test_a_run_id_that_is_not_one_folder_name_is_refused_before_the_run(
    tmp_path: Path, given: str | list[str], fix: str
) -> None:
    # ../../escape would train into runs/../../escape and move a 'latest' link beside it,
    # outside the runs folder.
    runs = tmp_path / "a" / "b" / "runs"
    extra = json.dumps({"training_run_id": given, "training_run_runs_dir": str(runs)})
    text = refused("train.yml", "-e", extra)
    assert "is not the name of one folder of" in text, text[-2000:]
    assert f"Fix: a plain name, such as -e training_run_id={fix}," in text
    assert not [p for p in tmp_path.rglob("*") if not p.is_dir()]  # no run, no latest link


def test_a_busy_metrics_port_is_refused_before_the_run(tmp_path: Path) -> None:
    # Refused, not only warned of in the task's log: the run would train unseen by Prometheus.
    low, mid, high = sorted(free_ports(3))
    offset = high - mid  # worker-0 (port mid) would serve metrics on high, which is taken
    ports = {"worker": [mid, low], "ps": free_ports(1), "chief": free_ports(1)}
    runs = tmp_path / "runs"
    data = small_dataset(tmp_path)  # the tasks' start-up check comes first
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", high))
        busy.listen()
        text = refused(
            "train.yml",
            "-e", json.dumps({"tf_cluster_ports": ports}),
            "-e", f"training_run_metrics_port_offset={offset}",
            "-e", f"training_run_runs_dir={runs}",
            "-e", f"training_data_dir={data}",
        )  # fmt: skip
    assert (
        f"Host localhost: worker-0's metrics port {high} (its TensorFlow port + "
        f"training_run_metrics_port_offset {offset}) is in use." in text
    ), text[-2000:]
    assert "-e training_run_metrics_port_offset=0" in text
    assert not runs.exists() or not any(runs.iterdir())


@pytest.mark.parametrize("group", ["worker", "chief"])
def test_a_mistyped_host_in_a_local_inventory_is_named_with_the_fix(
    tmp_path: Path, group: str
) -> None:
    # The fix names the typo, not "use training_run_launcher=systemd"; a typo in a group that
    # the strategy does not use (chief, under multi_worker_mirrored) is refused as well.
    inventory = tmp_path / "inventory"
    shutil.copytree(Path(__file__).parents[1] / "inventory" / "local", inventory)
    hosts = inventory / "hosts.yml"
    text = hosts.read_text()
    typo = text.replace(
        f"{group}:\n          hosts:\n            localhost:",
        f"{group}:\n          hosts:\n            locahost:",
    )
    assert typo != text
    hosts.write_text(typo)
    runs = tmp_path / "runs"
    said = refused("-i", str(inventory), "train.yml", "-e", f"training_run_runs_dir={runs}")
    assert (
        "starts every task on the control node (localhost), but the cluster's groups name "
        "locahost. Fix: if that is this machine (a typo?), name it localhost" in said
    ), said[-2000:]
    assert not runs.exists()


def test_all_reduce_settings_with_parameter_server_are_refused(tmp_path: Path) -> None:
    # Like all_reduce_dtype, all_reduce=ring and pack_bytes would do nothing there.
    runs = tmp_path / "runs"
    text = refused(
        "train.yml",
        "-e", "strategy=parameter_server", "-e", "all_reduce=ring", "-e", "pack_bytes=32768",
        "-e", f"training_run_runs_dir={runs}",
    )  # fmt: skip
    assert (
        "all_reduce=ring, pack_bytes=32768 do not fit strategy=parameter_server: parameter_server "
        "has no all-reduce. Fix: leave them out" in text
    ), text[-2000:]
    assert not runs.exists()


def test_linear_learning_rate_scaling_with_parameter_server_is_refused(tmp_path: Path) -> None:
    # parameter_server scales no step size: the setting would be ignored.
    runs = tmp_path / "runs"
    text = refused(
        "train.yml",
        "-e", "strategy=parameter_server", "-e", "learning_rate_scaling=linear",
        "-e", f"training_run_runs_dir={runs}",
    )  # fmt: skip
    assert (
        "learning_rate_scaling=linear does not fit strategy=parameter_server" in text
        and "Fix: leave learning_rate_scaling out and set the step size itself" in text
    ), text[-2000:]
    assert not runs.exists()


def test_a_local_inventory_with_another_machines_address_is_refused(tmp_path: Path) -> None:
    # Every other check passes; the tasks would wait 300 s for each other and the timeout
    # would say "not answering: every task answers on its port".
    inventory = tmp_path / "inventory"
    shutil.copytree(Path(__file__).parents[1] / "inventory" / "local", inventory)
    host_vars = inventory / "host_vars" / "localhost.yml"
    host_vars.write_text(
        host_vars.read_text().replace(
            "tf_cluster_address: 127.0.0.1", "tf_cluster_address: 10.255.255.1"
        )
    )
    runs = tmp_path / "runs"
    text = refused(
        "-i", str(inventory), "train.yml",
        "-e", f"training_run_runs_dir={runs}",
        "-e", f"training_data_dir={small_dataset(tmp_path)}",
    )  # fmt: skip
    assert (
        "Host localhost, task worker-0: tf_cluster_address 10.255.255.1 is not an address of "
        "this machine" in text
    ), text[-2000:]
    assert not any(runs.rglob("launch.json"))


def test_a_model_name_that_cannot_be_a_module_is_not_offered_as_a_file(tmp_path: Path) -> None:
    # Not "add training/models/__init__.py", which exists.
    runs = tmp_path / "runs"
    text = refused("train.yml", "-e", "model=__init__", "-e", f"training_run_runs_dir={runs}")
    assert "model=__init__ is unknown" in text, text[-2000:]
    assert "add a model as a module of training/models/, named with letters" in text
    assert not runs.exists()


def test_a_model_path_that_is_no_python_file_is_refused_before_the_run(tmp_path: Path) -> None:
    # A name with a / is a model file's path, taken from where ansible-playbook runs (the
    # project here), never from training/models/: ../ climbs from the checkout to /etc/passwd.
    runs = tmp_path / "runs"
    model = os.path.relpath("/etc/passwd", ROOT)
    text = refused("train.yml", "-e", f"model={model}", "-e", f"training_run_runs_dir={runs}")
    assert "model file /etc/passwd is not a .py file. Fix: give the path of a Python file" in text
    assert "add training/models/" not in text
    assert not runs.exists()


def test_a_model_file_that_does_not_exist_is_refused_before_the_run(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    missing = tmp_path / "nowhere" / "my_model.py"
    text = refused("train.yml", "-e", f"model={missing}", "-e", f"training_run_runs_dir={runs}")
    assert f"model={missing}: no such file on the control node ({missing})." in text, text[-2000:]
    assert "Fix: the path of a Python file that defines build()" in text
    assert not runs.exists()
