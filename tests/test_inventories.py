"""The TF_CONFIG every task of the shipped inventories gets, rendered through Ansible,
and the inventory mistakes that stop train.yml before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.conftest import run_playbook


def render(inventory: Path | str, strategy: str, out: Path) -> dict[str, dict]:
    result = run_playbook(
        "tests/playbooks/render_tf_config.yml",
        "-i",
        str(inventory),
        "-e",
        f"strategy={strategy}",
        "-e",
        f"render_dir={out}",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return {p.stem: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}


def test_local_inventory_mwms(tmp_path: Path) -> None:
    configs = render("inventory/local", "multi_worker_mirrored", tmp_path)
    cluster = {"worker": ["127.0.0.1:23456", "127.0.0.1:23457"]}
    assert configs == {
        "worker-0": {"cluster": cluster, "task": {"type": "worker", "index": 0}},
        "worker-1": {"cluster": cluster, "task": {"type": "worker", "index": 1}},
    }


def test_local_inventory_parameter_server(tmp_path: Path) -> None:
    configs = render("inventory/local", "parameter_server", tmp_path)
    cluster = {
        "ps": ["127.0.0.1:23458"],
        "worker": ["127.0.0.1:23456", "127.0.0.1:23457"],
        "chief": ["127.0.0.1:23459"],
    }
    assert set(configs) == {"chief-0", "ps-0", "worker-0", "worker-1"}
    for name, config in configs.items():
        job, index = name.split("-")
        assert config == {"cluster": cluster, "task": {"type": job, "index": int(index)}}
        assert isinstance(config["task"]["index"], int)


def test_example_inventory_mwms(tmp_path: Path) -> None:
    configs = render("inventory/example", "multi_worker_mirrored", tmp_path)
    workers = [f"192.168.1.10{i}:2222" for i in range(1, 5)]
    assert set(configs) == {f"worker-{i}" for i in range(4)}
    for i in range(4):
        assert configs[f"worker-{i}"] == {
            "cluster": {"worker": workers},
            "task": {"type": "worker", "index": i},
        }


def test_example_inventory_parameter_server(tmp_path: Path) -> None:
    configs = render("inventory/example", "parameter_server", tmp_path)
    assert configs["chief-0"]["cluster"] == {
        "ps": ["192.168.1.102:2223"],
        "worker": [f"192.168.1.10{i}:2222" for i in range(1, 5)],
        "chief": ["192.168.1.101:2224"],
    }
    assert configs["ps-0"]["task"] == {"type": "ps", "index": 0}
    assert len(configs) == 6


def write_inventory(tmp_path: Path, hosts: dict, groups: dict) -> Path:
    inv = tmp_path / "inventory"
    inv.mkdir()
    children = {g: {"hosts": {h: None for h in members}} for g, members in groups.items()}
    data = {"all": {"hosts": hosts, "children": {"cluster": {"children": children}}}}
    (inv / "hosts.yml").write_text(yaml.safe_dump(data))
    return inv


BAD = [
    (
        {"a": {"ansible_host": "10.0.0.1", "tf_cluster_ports": {"worker": [2222, 2222]}}},
        {"worker": ["a"]},
        "multi_worker_mirrored",
        "tasks worker-0 (10.0.0.1:2222, inventory host a) and worker-1 (10.0.0.1:2222, "
        "inventory host a) use the same address",
    ),
    (
        {"a": {"ansible_host": "10.0.0.1", "tf_cluster_ports": {"worker": [80]}}},
        {"worker": ["a"]},
        "multi_worker_mirrored",
        "host a: tf_cluster_ports.worker has port 80, outside 1024-65535",
    ),
    (
        {"a": {"ansible_host": "127.0.0.1"}, "b": {"ansible_host": "10.0.0.2"}},
        {"worker": ["a", "b"]},
        "multi_worker_mirrored",
        "worker-0 (127.0.0.1:2222, inventory host a) has a loopback address, "
        "but the cluster spans 2 hosts",
    ),
    (
        {"a": {"ansible_host": "10.0.0.1"}, "b": {"ansible_host": "10.0.0.2"}},
        {"worker": ["a", "b"], "chief": ["a"]},
        "parameter_server",
        "strategy parameter_server needs ps tasks, but inventory group 'ps' is empty or missing",
    ),
    (
        {"a": {"ansible_host": "10.0.0.1"}, "b": {"ansible_host": "10.0.0.2"}},
        {"workers": ["a", "b"], "chief": ["a"]},
        "multi_worker_mirrored",
        "inventory group 'worker' is empty or missing; add at least one host to [worker] (the "
        "inventory has a group 'workers': rename it worker)",
    ),
    (
        {"a": {"ansible_host": "10.0.0.1"}, "b": {"ansible_host": "10.0.0.2"}},
        {"worker": ["a"], "ps": ["b"], "chief": ["a", "b"]},
        "parameter_server",
        "strategy parameter_server needs exactly one chief; inventory group 'chief' has 2 hosts",
    ),
]


@pytest.mark.parametrize(("hosts", "groups", "strategy", "message"), BAD)
def test_bad_inventory_stops_before_anything_is_written(
    tmp_path: Path, hosts: dict, groups: dict, strategy: str, message: str
) -> None:
    inv = write_inventory(tmp_path, hosts, groups)
    out = tmp_path / "out"
    result = run_playbook(
        "tests/playbooks/render_tf_config.yml",
        "-i",
        str(inv),
        "-e",
        f"strategy={strategy}",
        "-e",
        f"render_dir={out}",
    )
    text = " ".join((result.stdout + result.stderr).split())
    assert result.returncode != 0
    assert message in text, text[-2000:]
    assert not out.exists()


def test_unknown_strategy_names_the_fix(tmp_path: Path) -> None:
    result = run_playbook(
        "tests/playbooks/render_tf_config.yml",
        "-e",
        "strategy=horovod",
        "-e",
        f"render_dir={tmp_path}/x",
    )
    assert result.returncode != 0
    assert "strategy=horovod is unknown. Fix: -e strategy=multi_worker_mirrored" in " ".join(
        result.stdout.split()
    )
