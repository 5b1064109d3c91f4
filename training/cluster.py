"""Cluster specs and TF_CONFIG: derive them from an inventory, parse and validate them.

Everything here is plain Python with no TensorFlow import, so a bad cluster is
refused in milliseconds, before any TensorFlow task starts, and the Ansible
filter plugin ``tf_cluster`` can call the same code on the control node.

The TF_CONFIG format is the one TensorFlow documents for multi-worker training
(https://www.tensorflow.org/guide/distributed_training#setting_up_the_tf_config_environment_variable)::

    {"cluster": {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]},
     "task": {"type": "worker", "index": 0}}
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

#: Task types TensorFlow knows (``tf.distribute.cluster_resolver``).
TASK_TYPES = ("chief", "worker", "ps", "evaluator")

#: Strategy name -> the jobs its cluster is made of, in start-up order.
#: With ``multi_worker_mirrored`` worker 0 is the chief, as in TensorFlow's
#: multi-worker Keras tutorial; ``parameter_server`` needs a separate chief
#: (the coordinator), at least one ps and at least one worker.
STRATEGY_JOBS: dict[str, tuple[str, ...]] = {
    "multi_worker_mirrored": ("worker",),
    "parameter_server": ("ps", "worker", "chief"),
}

#: Ports below 1024 need root; 65535 is the largest TCP port.
PORT_MIN, PORT_MAX = 1024, 65535


class ClusterConfigError(ValueError):
    """A cluster spec, TF_CONFIG or inventory that TensorFlow would choke on.

    The message names the task (or inventory host), what is wrong and the fix.
    """


@dataclass(frozen=True)
class Task:
    """One TensorFlow task of a cluster.

    Attributes:
        type: job name, one of :data:`TASK_TYPES`.
        index: position of the task within its job, 0-based.
        address: ``host:port`` the task's gRPC server listens on.
    """

    type: str
    index: int

    address: str = ""

    @property
    def name(self) -> str:
        """``<type>-<index>``, e.g. ``worker-1``: the task's name in logs and files."""
        return f"{self.type}-{self.index}"

    @property
    def host(self) -> str:
        """The host part of :attr:`address`, without brackets for IPv6."""
        return split_address(self.address)[0]


@dataclass(frozen=True)
class TFConfig:
    """A parsed and validated TF_CONFIG.

    Attributes:
        cluster: job name -> list of ``host:port``, as in the JSON.
        task: this process's task.
    """

    cluster: dict[str, list[str]]
    task: Task

    @property
    def tasks(self) -> list[Task]:
        """Every task of the cluster, job by job, in index order."""
        return [
            Task(job, i, address)
            for job in sorted(self.cluster, key=_job_order)
            for i, address in enumerate(self.cluster[job])
        ]

    @property
    def num_workers(self) -> int:
        """Number of ``worker`` tasks (the chief of ``parameter_server`` is not one)."""
        return len(self.cluster.get("worker", []))

    @property
    def is_chief(self) -> bool:
        """True for the task that writes the real outputs.

        That is the ``chief`` task if the cluster has one, else worker 0
        (TensorFlow's convention, ``multi_worker_util.is_chief``).
        """
        if "chief" in self.cluster:
            return self.task.type == "chief"
        return self.task.type == "worker" and self.task.index == 0

    def to_json(self) -> str:
        """The TF_CONFIG JSON text for this task."""
        return json.dumps(
            {"cluster": self.cluster, "task": {"type": self.task.type, "index": self.task.index}},
            sort_keys=True,
        )


def _job_order(job: str) -> int:
    return TASK_TYPES.index(job) if job in TASK_TYPES else len(TASK_TYPES)


#: A DNS host name (RFC 1123 labels of up to 63 characters; '_' too, which some
#: /etc/hosts and Docker names carry), or an IPv4 address's digits and dots.
HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9_-]{1,63}(?<!-))*\.?")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def split_address(address: str) -> tuple[str, int]:
    """Split ``host:port`` (or ``[v6]:port``) into host and port.

    Raises:
        ClusterConfigError: no port, or a port that is not an integer.
    """
    host, sep, port = address.rpartition(":")
    if not sep or not host:
        raise ClusterConfigError(f"address {address!r} has no port; write it as host:port")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        return host, int(port)
    except ValueError:
        raise ClusterConfigError(
            f"address {address!r}: port {port!r} is not an integer; write it as host:port"
        ) from None


def is_loopback(host: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ``::1``."""
    if host.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_key(host: str) -> str:
    """``host`` as one machine is known by: ``loopback`` for any loopback name, else lowercase."""
    return "loopback" if is_loopback(host) else host.lower()


def validate_cluster(
    cluster: Mapping[str, Sequence[str]],
    strategy: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> None:
    """Check a cluster spec against the rules TensorFlow silently depends on.

    Args:
        cluster: job name -> list of ``host:port``.
        strategy: a key of :data:`STRATEGY_JOBS` to check the job layout it
            needs, or None to check addresses only.
        labels: optional task name (``worker-0``) -> where it comes from
            (``inventory host pi2``), added to messages.

    Raises:
        ClusterConfigError: unknown job, empty job, malformed address (or
            digits and dots that are not an IPv4 address), port outside
            1024-65535, the same host:port twice, a loopback address in a
            cluster spanning several hosts, or a job layout the strategy
            cannot run.
    """
    labels = labels or {}

    def where(task: Task) -> str:
        label = labels.get(task.name)
        return f"{task.name} ({task.address}{', ' + label if label else ''})"

    if not isinstance(cluster, Mapping) or not cluster:
        raise ClusterConfigError(
            "TF_CONFIG has no cluster: add a 'cluster' object such as "
            '{"worker": ["host1:2222", "host2:2222"]}'
        )
    for job, addresses in cluster.items():
        if job not in TASK_TYPES or job == "evaluator":
            raise ClusterConfigError(
                f"cluster job {job!r} is unknown: cluster jobs are chief, worker and ps "
                "(an evaluator is not part of the cluster)"
            )
        if isinstance(addresses, str) or not isinstance(addresses, Sequence) or not addresses:
            raise ClusterConfigError(
                f"cluster job {job!r} must be a non-empty list of host:port strings"
            )

    tasks = [
        Task(job, i, address)
        for job in sorted(cluster, key=_job_order)
        for i, address in enumerate(cluster[job])
    ]
    seen: dict[str, Task] = {}
    hosts: set[str] = set()
    for task in tasks:
        if not isinstance(task.address, str):
            raise ClusterConfigError(f"task {task.name}: address {task.address!r} is not a string")
        host, port = split_address(task.address)
        if host.replace(".", "").isdigit():
            # Digits and dots are meant as IPv4; a resolver would take "999.1.1.1" as a
            # name and the task would wait out the startup timeout for nothing.
            try:
                ipaddress.IPv4Address(host)
            except ValueError:
                raise ClusterConfigError(
                    f"task {where(task)}: {host} is not an IPv4 address (four numbers 0-255); "
                    "fix tf_cluster_address (or ansible_host) of its host in the inventory"
                ) from None
        if not _is_ip(host) and not HOST_NAME.fullmatch(host):
            # Passed to gRPC as it is, it leaves every task waiting out the startup timeout.
            raise ClusterConfigError(
                f"task {where(task)}: {host!r} is neither a host name (letters, digits, '-' and "
                "'.') nor an IP address; fix tf_cluster_address (or ansible_host) of its host in "
                "the inventory"
            )
        if not PORT_MIN <= port <= PORT_MAX:
            raise ClusterConfigError(
                f"task {where(task)}: port {port} is outside {PORT_MIN}-{PORT_MAX}; "
                "pick an unprivileged port such as 2222"
            )
        key = f"{host_key(host)}:{port}"
        if key in seen:
            raise ClusterConfigError(
                f"tasks {where(seen[key])} and {where(task)} use the same address; "
                "give every task on a host its own port"
            )
        seen[key] = task
        hosts.add(host_key(host))

    if len(hosts) > 1:
        for task in tasks:
            if is_loopback(task.host):
                raise ClusterConfigError(
                    f"task {where(task)} has a loopback address, but the cluster spans "
                    f"{len(hosts)} hosts, which cannot reach it; use the address the other "
                    "hosts know this machine by"
                )

    if strategy is not None:
        _validate_layout(cluster, strategy)


def _validate_layout(cluster: Mapping[str, Sequence[str]], strategy: str) -> None:
    if strategy not in STRATEGY_JOBS:
        raise ClusterConfigError(
            f"strategy {strategy!r} is unknown; choose one of {', '.join(STRATEGY_JOBS)}"
        )
    counts = {job: len(cluster.get(job, ())) for job in ("chief", "worker", "ps")}
    if strategy == "parameter_server":
        if counts["chief"] != 1 or counts["ps"] < 1 or counts["worker"] < 1:
            raise ClusterConfigError(
                "parameter_server needs exactly one chief, at least one ps and at least one "
                f"worker; this cluster has {counts['chief']} chief, {counts['ps']} ps and "
                f"{counts['worker']} worker tasks"
            )
    else:
        if counts["ps"]:
            raise ClusterConfigError(
                f"{strategy} does not use ps tasks, but the cluster has {counts['ps']}; "
                "remove them or use strategy=parameter_server"
            )
        if counts["chief"] > 1 or counts["worker"] + counts["chief"] < 1:
            raise ClusterConfigError(
                f"{strategy} needs at least one worker and at most one chief; this cluster "
                f"has {counts['chief']} chief and {counts['worker']} worker tasks"
            )


def parse_tf_config(text: str | None, strategy: str | None = None) -> TFConfig | None:
    """Parse and validate a TF_CONFIG JSON text.

    Args:
        text: the TF_CONFIG value; None or blank means "no cluster": the
            caller trains in one process.
        strategy: if given, also check the job layout this strategy needs.

    Returns:
        The parsed config, or None when ``text`` is None or blank.

    Raises:
        ClusterConfigError: not JSON, no task, a missing or unknown task type,
            an index that is not an integer or is outside its job, and every
            error of :func:`validate_cluster`.
    """
    if text is None or not text.strip():
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ClusterConfigError(f"TF_CONFIG is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise ClusterConfigError("TF_CONFIG must be a JSON object with 'cluster' and 'task'")
    cluster = data.get("cluster")
    task = data.get("task")
    if not isinstance(task, dict) or not task.get("type"):
        raise ClusterConfigError(
            'TF_CONFIG has no task type: add "task": {"type": "worker", "index": 0}'
        )
    task_type, index = task["type"], task.get("index", 0)
    if task_type not in TASK_TYPES:
        raise ClusterConfigError(
            f"TF_CONFIG task type {task_type!r} is unknown; use one of {', '.join(TASK_TYPES)}"
        )
    if isinstance(index, bool) or not isinstance(index, int):
        raise ClusterConfigError(
            f"TF_CONFIG task {task_type} index {index!r} must be an integer, not "
            f"{type(index).__name__}"
        )
    validate_cluster(cluster, strategy)  # type: ignore[arg-type]
    assert isinstance(cluster, dict)
    if task_type == "evaluator":
        if index != 0:
            raise ClusterConfigError(
                f"TF_CONFIG task evaluator {index}: there is one evaluator, index 0"
            )
        return TFConfig({k: list(v) for k, v in cluster.items()}, Task("evaluator", 0))
    if task_type not in cluster:
        raise ClusterConfigError(
            f"TF_CONFIG task {task_type} {index}: the cluster has no {task_type!r} job "
            f"(it has {', '.join(sorted(cluster))}); fix task.type or add the job"
        )
    size = len(cluster[task_type])
    if not 0 <= index < size:
        raise ClusterConfigError(
            f"TF_CONFIG task {task_type} {index}: index is outside job {task_type!r}, which "
            f"has {size} task(s); use an index from 0 to {size - 1}"
        )
    return TFConfig(
        {k: list(v) for k, v in cluster.items()},
        Task(task_type, index, cluster[task_type][index]),
    )


def derive_cluster(
    groups: Mapping[str, Sequence[str]],
    hostvars: Mapping[str, Mapping[str, Any]],
    strategy: str,
    job_groups: Mapping[str, str],
) -> dict[str, Any]:
    """Build the cluster spec and the task list from an Ansible inventory.

    Each inventory host in the group mapped to a job runs one task of that
    job per port listed in its ``tf_cluster_ports[job]``; task indices follow
    inventory order, then port order. The address is the host's
    ``tf_cluster_address``, else ``ansible_host``, else its inventory name.

    Args:
        groups: Ansible ``groups``: group name -> inventory hostnames.
        hostvars: Ansible ``hostvars``: inventory hostname -> its variables.
        strategy: a key of :data:`STRATEGY_JOBS`.
        job_groups: job name -> inventory group holding that job's hosts.

    Returns:
        ``{"strategy", "cluster": {job: [host:port]}, "tasks": [{"name",
        "type", "index", "host", "address", "port", "server", "tf_config"}],
        "chief": task name}``; ``tf_config`` is the task's TF_CONFIG as a
        dict; ``server`` is true for tasks that only serve and never exit by
        themselves (ps and worker of ``parameter_server``).

    Raises:
        ClusterConfigError: unknown strategy, an empty group, a missing or
            malformed ``tf_cluster_ports``, or anything :func:`validate_cluster`
            refuses; the message names the inventory host and variable.
    """
    if strategy not in STRATEGY_JOBS:
        raise ClusterConfigError(
            f"strategy={strategy!r} is unknown; choose one of {', '.join(STRATEGY_JOBS)}"
        )
    cluster: dict[str, list[str]] = {}
    tasks: list[dict[str, Any]] = []
    labels: dict[str, str] = {}
    for job in STRATEGY_JOBS[strategy]:
        group = job_groups.get(job, job)
        hosts = list(groups.get(group, []))
        if not hosts:
            close = difflib.get_close_matches(group, [g for g in groups if groups[g]], n=1)
            raise ClusterConfigError(
                f"strategy {strategy} needs {job} tasks, but inventory group {group!r} is "
                f"empty or missing; add {'one host' if job == 'chief' else 'at least one host'} "
                f"to [{group}]"
                + (f" (the inventory has a group {close[0]!r}: rename it {group})" if close else "")
            )
        if job == "chief" and len(hosts) != 1:
            raise ClusterConfigError(
                f"strategy {strategy} needs exactly one chief; inventory group {group!r} has "
                f"{len(hosts)} hosts ({', '.join(hosts)}); keep one"
            )
        for host in hosts:
            hv = hostvars.get(host, {})
            address = str(hv.get("tf_cluster_address") or hv.get("ansible_host") or host)
            ports = _host_ports(host, hv, job)
            if job == "chief" and len(ports) != 1:
                raise ClusterConfigError(
                    f"host {host}: tf_cluster_ports.chief lists {len(ports)} ports; the chief "
                    "is one task, list one port"
                )
            for port in ports:
                index = len(cluster.setdefault(job, []))
                host_port = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
                cluster[job].append(host_port)
                name = f"{job}-{index}"
                labels[name] = f"inventory host {host}"
                tasks.append(
                    {
                        "name": name,
                        "type": job,
                        "index": index,
                        "host": host,
                        "address": address,
                        "port": port,
                        "server": strategy == "parameter_server" and job != "chief",
                    }
                )
    try:
        validate_cluster(cluster, strategy, labels)
    except ClusterConfigError as err:
        raise ClusterConfigError(f"{err}{_inventory_hint(str(err))}") from None
    for task in tasks:
        task["tf_config"] = {
            "cluster": cluster,
            "task": {"type": task["type"], "index": task["index"]},
        }
    chief = "chief-0" if "chief" in cluster else "worker-0"
    return {"strategy": strategy, "cluster": cluster, "tasks": tasks, "chief": chief}


def _inventory_hint(message: str) -> str:
    if "same address" in message:
        return " (inventory: list distinct ports in tf_cluster_ports of that host)"
    if "loopback" in message:
        return (
            " (inventory: set tf_cluster_address, or ansible_host, of that host to an address "
            "the other hosts reach)"
        )
    return ""


def _host_ports(host: str, hv: Mapping[str, Any], job: str) -> list[int]:
    ports_by_job = hv.get("tf_cluster_ports")
    jobs = sorted({j for js in STRATEGY_JOBS.values() for j in js})
    for key in ports_by_job if isinstance(ports_by_job, Mapping) else ():
        if key not in jobs:
            close = difflib.get_close_matches(str(key), jobs, n=1)
            raise ClusterConfigError(
                f"host {host}: tf_cluster_ports has {key!r}, which is not a TensorFlow job; "
                f"the jobs are {', '.join(jobs)}"
                + (f" (did you mean {close[0]}?)" if close else "")
            )
    if ports_by_job is not None and not isinstance(ports_by_job, Mapping):
        raise ClusterConfigError(
            f"host {host}: tf_cluster_ports is {ports_by_job!r}, not a mapping of job to ports; "
            f"set it as tf_cluster_ports: {{{job}: [2222]}} (host_vars or group_vars), or per run "
            f"""-e '{{"tf_cluster_ports": {{"{job}": [2222]}}}}'"""
        )
    if ports_by_job is None or job not in ports_by_job:
        raise ClusterConfigError(
            f"host {host} is in the {job} group but tf_cluster_ports has no {job!r} entry; "
            f"set tf_cluster_ports: {{{job}: [2222]}} for it (host_vars or group_vars)"
        )
    raw = ports_by_job[job]
    items = raw if isinstance(raw, list) else [raw]
    ports: list[int] = []
    for item in items:
        if isinstance(item, bool) or not (isinstance(item, int) or str(item).isdigit()):
            raise ClusterConfigError(
                f"host {host}: tf_cluster_ports.{job} has {item!r}, which is not a port number; "
                "list integers such as [2222, 2223]"
            )
        port = int(item)
        if not PORT_MIN <= port <= PORT_MAX:
            raise ClusterConfigError(
                f"host {host}: tf_cluster_ports.{job} has port {port}, outside "
                f"{PORT_MIN}-{PORT_MAX}; pick an unprivileged port such as 2222"
            )
        ports.append(port)
    if not ports:
        raise ClusterConfigError(
            f"host {host}: tf_cluster_ports.{job} is empty; list one port per {job} task"
        )
    return ports
