"""TF_CONFIG rules: every bad cluster is refused with a message naming the task and the fix."""

from __future__ import annotations

import json

import pytest

from training.cluster import ClusterConfigError, derive_cluster, parse_tf_config


def tf_config(cluster: dict, task_type: str = "worker", index: object = 0) -> str:
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


MWMS = {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]}
PS = {
    "chief": ["10.0.0.1:2224"],
    "ps": ["10.0.0.2:2223"],
    "worker": ["10.0.0.1:2222", "10.0.0.2:2222"],
}


def test_no_tf_config_means_one_process() -> None:
    assert parse_tf_config(None) is None
    assert parse_tf_config("  ") is None


def test_valid_mwms_config_and_chief() -> None:
    cfg = parse_tf_config(tf_config(MWMS, "worker", 1), "multi_worker_mirrored")
    assert cfg is not None
    assert cfg.task.name == "worker-1" and cfg.task.address == "10.0.0.2:2222"
    assert not cfg.is_chief
    assert parse_tf_config(tf_config(MWMS, "worker", 0)).is_chief  # type: ignore[union-attr]


def test_valid_ps_config_chief_is_the_coordinator() -> None:
    cfg = parse_tf_config(tf_config(PS, "chief", 0), "parameter_server")
    assert cfg is not None and cfg.is_chief and cfg.num_workers == 2
    worker0 = parse_tf_config(tf_config(PS, "worker", 0), "parameter_server")
    assert worker0 is not None and not worker0.is_chief


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"cluster": {"worker": ["a:2222"]}}', "no task type"),
        (tf_config(MWMS, "master", 0), "task type 'master' is unknown"),
        (tf_config(MWMS, "worker", 2), "index is outside job 'worker', which has 2 task"),
        (tf_config(MWMS, "worker", -1), "index is outside job"),
        (tf_config(MWMS, "worker", "1"), "must be an integer"),
        (tf_config(MWMS, "ps", 0), "the cluster has no 'ps' job"),
        ("{not json", "not valid JSON"),
        ('{"task": {"type": "worker", "index": 0}}', "no cluster"),
    ],
)
def test_bad_task(text: str, expected: str) -> None:
    with pytest.raises(ClusterConfigError, match=expected):
        parse_tf_config(text)


@pytest.mark.parametrize(
    ("cluster", "expected"),
    [
        (
            {"worker": ["10.0.0.1:2222", "10.0.0.1:2222"]},
            r"worker-0 .* and worker-1 .* same address",
        ),
        ({"worker": ["localhost:2222", "127.0.0.1:2222"]}, "same address"),
        ({"worker": ["10.0.0.1:80"]}, "port 80 is outside 1024-65535"),
        ({"worker": ["10.0.0.1:70000"]}, "port 70000 is outside"),
        ({"worker": ["10.0.0.1"]}, "has no port"),
        ({"worker": ["999.1.1.1:2222"]}, r"999.1.1.1 is not an IPv4 .* fix tf_cluster_address"),
        ({"worker": ["10.0.1:2222"]}, "10.0.1 is not an IPv4 address"),
        (
            {"worker": ["not-an-address!:2222"]},
            r"'not-an-address!' is neither a host name .* fix tf_cluster_address",
        ),
        ({"worker": ["pi 2:2222"]}, "'pi 2' is neither a host name"),
        ({"worker": ["-pi2:2222"]}, "'-pi2' is neither a host name"),
        ({"worker": ["10.0.0.1:22x2"]}, "not an integer"),
        (
            {"worker": ["127.0.0.1:2222", "10.0.0.2:2222"]},
            r"worker-0 \(127.0.0.1:2222\) has a loopback address, but the cluster spans 2 hosts",
        ),
        ({"worker": ["localhost:2222", "pi2:2222"]}, "loopback address"),
        ({"worker": ["10.0.0.1:2222"], "trainer": ["10.0.0.2:2222"]}, "job 'trainer' is unknown"),
    ],
)
def test_bad_cluster(cluster: dict, expected: str) -> None:
    with pytest.raises(ClusterConfigError, match=expected):
        parse_tf_config(tf_config(cluster, next(iter(cluster)), 0))


def test_loopback_is_fine_on_one_machine() -> None:
    cluster = {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}
    assert parse_tf_config(tf_config(cluster), "multi_worker_mirrored") is not None


@pytest.mark.parametrize(
    ("cluster", "task"),
    [
        ({"ps": ["10.0.0.2:2223"], "worker": ["10.0.0.1:2222"]}, "worker"),  # no chief
        (
            {
                "chief": ["10.0.0.1:2224", "10.0.0.3:2224"],
                "ps": ["10.0.0.2:2223"],
                "worker": ["10.0.0.1:2222"],
            },
            "worker",
        ),  # two chiefs
        ({"chief": ["10.0.0.1:2224"], "worker": ["10.0.0.1:2222"]}, "worker"),  # no ps
        ({"chief": ["10.0.0.1:2224"], "ps": ["10.0.0.2:2223"]}, "ps"),  # no worker
    ],
)
def test_parameter_server_layout(cluster: dict, task: str) -> None:
    with pytest.raises(
        ClusterConfigError, match="parameter_server needs exactly one chief, at least one ps"
    ):
        parse_tf_config(tf_config(cluster, task, 0), "parameter_server")


def test_mwms_refuses_ps_tasks() -> None:
    with pytest.raises(ClusterConfigError, match="does not use ps tasks"):
        parse_tf_config(tf_config(PS, "worker", 0), "multi_worker_mirrored")


def test_unknown_strategy() -> None:
    with pytest.raises(ClusterConfigError, match="strategy 'horovod' is unknown"):
        parse_tf_config(tf_config(MWMS), "horovod")


# --- inventory -> cluster -------------------------------------------------

GROUPS = {"worker": ["pi1", "pi2"], "chief": ["pi1"], "ps": ["pi2"]}
HOSTVARS = {
    "pi1": {
        "ansible_host": "192.168.1.101",
        "tf_cluster_ports": {"worker": [2222], "chief": [2224]},
    },
    "pi2": {"ansible_host": "192.168.1.102", "tf_cluster_ports": {"worker": [2222], "ps": [2223]}},
}
JOBS = {"chief": "chief", "worker": "worker", "ps": "ps"}


def test_derive_mwms_uses_workers_only() -> None:
    spec = derive_cluster(GROUPS, HOSTVARS, "multi_worker_mirrored", JOBS)
    assert spec["cluster"] == {"worker": ["192.168.1.101:2222", "192.168.1.102:2222"]}
    assert spec["chief"] == "worker-0"
    assert [t["tf_config"]["task"] for t in spec["tasks"]] == [
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
    ]
    assert not any(t["server"] for t in spec["tasks"])


def test_derive_parameter_server() -> None:
    spec = derive_cluster(GROUPS, HOSTVARS, "parameter_server", JOBS)
    assert spec["cluster"] == {
        "ps": ["192.168.1.102:2223"],
        "worker": ["192.168.1.101:2222", "192.168.1.102:2222"],
        "chief": ["192.168.1.101:2224"],
    }
    assert spec["chief"] == "chief-0"
    servers = {t["name"]: t["server"] for t in spec["tasks"]}
    assert servers == {"ps-0": True, "worker-0": True, "worker-1": True, "chief-0": False}


def test_derive_refuses_a_port_list_of_no_job() -> None:
    # Ignored, a misspelt job's ports would leave the host fewer tasks than the user listed.
    hv = {"box": {"tf_cluster_ports": {"worker": [3000], "workers": [3001]}}}
    with pytest.raises(ClusterConfigError) as err:
        derive_cluster({"worker": ["box"]}, hv, "multi_worker_mirrored", JOBS)
    assert str(err.value) == (
        "host box: tf_cluster_ports has 'workers', which is not a TensorFlow job; "
        "the jobs are chief, ps, worker (did you mean worker?)"
    )


def test_derive_several_tasks_per_host_in_port_order() -> None:
    hv = {"box": {"tf_cluster_address": "10.0.0.9", "tf_cluster_ports": {"worker": [3001, 3000]}}}
    spec = derive_cluster({"worker": ["box"]}, hv, "multi_worker_mirrored", JOBS)
    assert spec["cluster"]["worker"] == ["10.0.0.9:3001", "10.0.0.9:3000"]


@pytest.mark.parametrize(
    ("groups", "hostvars", "strategy", "expected"),
    [
        (
            {"worker": []},
            {},
            "multi_worker_mirrored",
            "inventory group 'worker' is\nempty|inventory group 'worker' is empty",
        ),
        (
            GROUPS,
            {**HOSTVARS, "pi2": {"ansible_host": "192.168.1.102"}},
            "multi_worker_mirrored",
            "host pi2 is in the worker group but tf_cluster_ports has no 'worker' entry",
        ),
        (
            GROUPS,
            {**HOSTVARS, "pi2": {"tf_cluster_ports": "3"}},  # not "has no 'worker' entry"
            "multi_worker_mirrored",
            "host pi2: tf_cluster_ports is '3', not a mapping of job to ports; set it as "
            r"tf_cluster_ports: \{worker: \[2222\]\}",
        ),
        (
            GROUPS,
            {**HOSTVARS, "pi2": {"tf_cluster_ports": {"worker": [22]}}},
            "multi_worker_mirrored",
            "host pi2: tf_cluster_ports.worker has port 22, outside 1024-65535",
        ),
        (
            GROUPS,
            {**HOSTVARS, "pi2": {"tf_cluster_ports": {"worker": ["x"]}}},
            "multi_worker_mirrored",
            "host pi2: tf_cluster_ports.worker has 'x', which is not a port number",
        ),
        (
            {**GROUPS, "ps": []},
            HOSTVARS,
            "parameter_server",
            "needs ps tasks, but inventory group 'ps'",
        ),
        ({**GROUPS, "chief": ["pi1", "pi2"]}, HOSTVARS, "parameter_server", "exactly one chief"),
        (
            {"worker": ["pi1", "localhost"]},
            {**HOSTVARS, "localhost": {"tf_cluster_ports": {"worker": [2222]}}},
            "multi_worker_mirrored",
            "inventory host localhost.*loopback address",
        ),
        (
            GROUPS,
            {
                **HOSTVARS,
                "pi2": {
                    "ansible_host": "192.168.1.101",
                    "tf_cluster_ports": {"worker": [2222], "ps": [2223]},
                },
            },
            "multi_worker_mirrored",
            "inventory host pi1.*inventory host pi2.*same address",
        ),
    ],
)
def test_derive_refuses_bad_inventory(
    groups: dict, hostvars: dict, strategy: str, expected: str
) -> None:
    with pytest.raises(ClusterConfigError, match=expected):
        derive_cluster(groups, hostvars, strategy, JOBS)
