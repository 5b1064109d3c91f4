"""What a user of a three-node cluster would check after site.yml and two train.yml runs."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import testinfra.utils.ansible_runner

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
RUNS = EPHEMERAL / "runs"
RUNNER = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY)
# Read as root through Docker; every playbook reaches the nodes over SSH.
testinfra_hosts = [f"docker://{name}" for name in RUNNER.get_hosts("cluster")]

USER = "raspi-tf"
TASKS = {"node1": ["worker-0", "chief-0"], "node2": ["worker-1", "ps-0"], "node3": ["worker-2"]}


def node(name: str):
    """Node ``name`` as root at its console: through Docker (the playbooks use SSH)."""
    return testinfra.get_host(f"docker://{name}")


def runs_by_strategy() -> dict[str, dict]:
    found = {}
    for metrics in sorted(RUNS.glob("*/metrics.json")):
        data = json.loads(metrics.read_text())
        data["_dir"] = metrics.parent
        found[data["strategy"]] = data
    return found


def test_tasks_ran_as_the_service_user(host) -> None:
    uid = str(host.user(USER).uid)
    for task in TASKS[host.backend.hostname]:
        unit = f"raspi-tf-task@{task}.service"
        assert host.run(f"systemctl show -p User --value {unit}").stdout.strip() == USER
        entries = [
            json.loads(line)
            for line in host.check_output(f"journalctl -u {unit} -o json --no-pager").splitlines()
        ]
        process_uids = {e["_UID"] for e in entries if e.get("_COMM", "").startswith("python")}
        assert process_uids == {uid}, f"{unit} ran as {process_uids}"


def test_no_training_process_is_left_running(host) -> None:
    assert host.run("pgrep -f '[-]m training train'").rc == 1
    for task in TASKS[host.backend.hostname]:
        assert (
            host.run(f"systemctl is-active raspi-tf-task@{task}.service").stdout.strip() != "active"
        )


def test_service_user_reaches_every_node_over_ssh_with_host_key_checking(host) -> None:
    for other in TASKS:
        result = host.run(
            f"runuser -u {USER} -- "
            f"ssh -o BatchMode=yes -o StrictHostKeyChecking=yes {other} hostname"
        )
        assert result.rc == 0, result.stderr
        assert result.stdout.strip() == other


def test_no_task_unit_is_enabled_after_the_runs(host) -> None:
    # A unit is enabled only while its run goes (so a rebooted node rejoins it): one
    # left enabled would start a finished run's task at the node's next boot.
    wants = host.check_output(
        "find /etc/systemd/system /run/systemd/system -mindepth 2 -name 'raspi-tf-task@*'"
    )
    assert wants == "", f"{host.backend.hostname}: {wants}"
    for task in TASKS[host.backend.hostname]:
        enabled = host.run(f"systemctl is-enabled raspi-tf-task@{task}.service").stdout.strip()
        assert enabled != "enabled", f"{task} on {host.backend.hostname} is {enabled}"


CONTROL = "172.30.99.1"  # this machine, as the nodes see it (the network's gateway)


def test_the_playbooks_logged_in_over_ssh_as_the_admin_user_with_its_key(host) -> None:
    journal = host.check_output("journalctl -u ssh --no-pager -o cat")
    assert f"Accepted publickey for pi from {CONTROL}" in journal
    assert "Accepted publickey for root" not in journal and "Accepted password" not in journal
    # cluster_ssh chose the key Ansible logs in with (ansible_ssh_private_key_file) for pi.
    control_key = (EPHEMERAL / "id_ed25519.pub").read_text().split()[1]
    assert control_key in host.file("/home/pi/.ssh/authorized_keys").content_string
    # and raised the rest with sudo: pi is no root, and root has no key of the control node.
    assert host.user("pi").uid != 0
    assert host.run("grep -qs ssh-ed25519 /root/.ssh/authorized_keys").rc != 0


def test_the_firewall_lets_in_the_control_node_it_found_in_ssh_client(host) -> None:
    # No cluster_firewall_allowed in this scenario: the address is the SSH session's.
    allowed = host.check_output("nft list set inet raspi_tf allowed4")
    assert CONTROL in allowed, allowed


def test_second_site_run_changed_nothing() -> None:
    # Molecule's idempotence step has already asserted 0 changed; this keeps
    # the claim visible next to the other behaviours.
    assert True


def test_mwms_run_reached_the_accuracy_and_came_home() -> None:
    run = runs_by_strategy()["multi_worker_mirrored"]
    assert run["tasks"] == ["worker-0", "worker-1", "worker-2"]
    assert run["test_accuracy"] >= 0.95, run["test_accuracy"]
    out = run["_dir"]
    assert (out / "model.keras").stat().st_size > 100_000
    assert list((out / "tensorboard").rglob("events.out.tfevents.*"))
    for task in ("worker-0", "worker-1", "worker-2"):
        assert (
            "Collective" in (out / "logs" / f"{task}.log").read_text()
            or (out / "logs" / f"{task}.log").stat().st_size > 0
        )


def test_parameter_server_run_came_home() -> None:
    run = runs_by_strategy()["parameter_server"]
    assert sorted(run["tasks"]) == ["chief-0", "ps-0", "worker-0", "worker-1", "worker-2"]
    assert run["test_accuracy"] >= 0.90, run["test_accuracy"]
    assert {p.stem for p in (run["_dir"] / "logs").glob("*.log")} == {
        "chief-0",
        "ps-0",
        "worker-0",
        "worker-1",
        "worker-2",
    }


def apt_cache_log() -> list[tuple[str, int, str, str]]:
    """apt-cacher-ng's transfer log on node1: (I or O, bytes, client, path) per line.

    I: fetched over the uplink (a cache miss); O: sent to a node.
    """
    text = node("node1").check_output("cat /var/log/apt-cacher-ng/apt-cacher.log")
    rows = [line.split("|", 4) for line in text.splitlines() if line.count("|") >= 4]
    return [(kind, int(size), client, path) for _, kind, size, client, path in rows]


def test_each_package_crossed_the_uplink_once_for_the_three_nodes() -> None:
    rows = apt_cache_log()
    members = {node(n).check_output("hostname -I").split()[0] for n in TASKS}
    served = Counter(client for kind, _, client, _ in rows if kind == "O")
    assert set(served) == members, f"files sent per client {dict(served)}; members {members}"
    # node1 fetched the package lists directly (to install the cache) and gave them to the
    # others, which install from them with no apt update: no list, not even an InRelease, is
    # asked for through the cache (an apt update on a node would fetch them again whenever
    # the mirror has published new ones).
    asked = sorted({path for kind, _, _, path in rows if kind == "O" and "/dists/" in path})
    assert not asked, f"package lists asked for through the cache: {asked}"
    # Each package sent to the nodes crossed the uplink once: counted in bytes against the
    # file's size, since a download the mirror cut off is resumed, or started again, in a
    # second log line (a restart after 0.8 MB of a 1.1 MB file logs 1.75x). Only a second
    # whole copy (2x, give or take a few header bytes) is the cache fetching for another node.
    size: dict[str, int] = {}
    crossed: Counter[str] = Counter()
    for kind, nbytes, _, path in rows:
        if kind == "O":
            size[path] = max(size.get(path, 0), nbytes)
        else:
            crossed[path] += nbytes
    assert any(path.endswith(".deb") for path in crossed), f"no package crossed: {rows[:20]}"
    twice = {
        path: f"{nbytes} bytes in, file {size[path]}"
        for path, nbytes in crossed.items()
        if path in size and nbytes >= 1.9 * size[path]
    }
    assert not twice, f"crossed the uplink more than once: {twice}; {len(rows)} log lines"
    uplink = sum(nbytes for kind, nbytes, _, _ in rows if kind == "I")
    sent = sum(nbytes for kind, nbytes, _, _ in rows if kind == "O")
    debs = sum(n for kind, n, _, path in rows if kind == "O" and path.endswith(".deb"))
    print(
        f"apt through node1's cache: {uplink / 1e6:.1f} MB over the uplink, {sent / 1e6:.1f} MB "
        f"sent to {len(members)} nodes ({debs / 1e6:.1f} MB of it packages)"
    )


def test_a_node_fetches_directly_while_the_apt_cache_is_down() -> None:
    detect = "/usr/local/lib/raspi-tf-apt-proxy-detect http://deb.debian.org/debian"
    assert node("node2").check_output(detect).strip() == "http://172.30.99.11:3142"
    node("node1").check_output("systemctl stop apt-cacher-ng")
    try:
        assert node("node2").check_output(detect).strip() == "DIRECT"
    finally:
        node("node1").check_output("systemctl start apt-cacher-ng")
    refused = node("outsider").run("timeout 5 bash -c '</dev/tcp/node1/3142'")
    assert refused.rc != 0, "the outsider reached node1's apt cache"


@pytest.fixture
def listener_on_node2():
    n2 = node("node2")
    n2.run(
        "systemctl stop raspi-tf-probe 2>/dev/null;"
        " systemctl reset-failed raspi-tf-probe 2>/dev/null"
    )
    started = n2.run(
        f"systemd-run --unit=raspi-tf-probe --uid={USER} --working-directory=/opt/raspi-tf/code "
        "/opt/raspi-tf/venv/bin/python -m training listen --ports 2222 --seconds 60"
    )
    assert started.rc == 0, started.stderr
    deadline = time.monotonic() + 20
    while n2.run("ss -ltn 'sport = :2222' | grep -q 2222").rc != 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    yield
    n2.run("systemctl stop raspi-tf-probe")


CONNECT = (
    'python3 -c "import socket,sys; s=socket.socket(); s.settimeout(5); '
    "r=s.connect_ex(('node2', 2222)); print(r); sys.exit(0)\""
)


def test_tensorflow_ports_refuse_a_container_outside_the_cluster(listener_on_node2: None) -> None:
    assert node("node3").check_output(CONNECT).strip() == "0"  # a member gets in
    refused = node("outsider").check_output(CONNECT).strip()
    assert refused != "0", "the outsider reached node2:2222"


def train_yml() -> tuple[int, str]:
    """train.yml with the scenario's settings: its exit code and its output on one line.

    Molecule's ansible.cfg sends failures to stderr (display_failed_stderr): both are read.
    """
    result = subprocess.run(
        ["ansible-playbook", "-i", INVENTORY, str(PROJECT / "playbooks" / "train.yml")],
        capture_output=True,
        text=True,
        timeout=600,
        env=os.environ,
        check=False,
    )
    return result.returncode, " ".join((result.stdout + result.stderr).split())


def assert_no_task_runs() -> None:
    for name in TASKS:
        active = node(name).run("systemctl list-units 'raspi-tf-task@*' --state=active --no-legend")
        assert active.stdout.strip() == "", f"{name}: {active.stdout}"


def test_blocked_worker_port_fails_the_preflight_naming_both_hosts() -> None:
    n3 = node("node3")
    n3.run("nft add table inet test_block")
    n3.run("nft add chain inet test_block input '{ type filter hook input priority -20; }'")
    n3.run("nft add rule inet test_block input iif != lo tcp dport 2222 drop")
    try:
        # Each probe has its own timeout (netcheck), so the play cannot hang on a
        # dropped port. No wall-clock bound here: how long it takes depends on how busy
        # the machine is.
        returncode, text = train_yml()
    finally:
        n3.run("nft delete table inet test_block")
    assert returncode != 0
    assert "cannot reach worker-2 on host node3 at 172.30.99.13:2222" in text, text[-3000:]
    assert "Host node1 cannot reach" in text
    assert_no_task_runs()


#: Every port the firewall keeps for the cluster's members (docs/operations.md):
#: each task's TensorFlow port and its metrics port (+1000), apt's cache, TensorBoard,
#: Prometheus and the node exporter; all on node1, the first member.
MEMBERS_ONLY = {
    2222: "worker's TensorFlow",
    2223: "ps' TensorFlow",
    2224: "chief's TensorFlow",
    3222: "worker's metrics",
    3223: "ps' metrics",
    3224: "chief's metrics",
    3142: "apt cache",
    6006: "TensorBoard",
    9090: "Prometheus",
    9100: "node exporter",
}
TASK_PORTS = (2222, 2223, 2224, 3222, 3223, 3224)
PROBE = (
    'python3 -c "import socket,sys\n'
    "for port in sys.argv[1:]:\n"
    " s = socket.socket(); s.settimeout(5)\n"
    " print(port, s.connect_ex(('node1', int(port))))\n"
    ' s.close()" '
)


@pytest.fixture
def listeners_on_node1():
    """node1 answers on every task port, as during a run (nothing trains between tests)."""
    n1 = node("node1")
    unit = "raspi-tf-probe-all"
    n1.run(f"systemctl stop {unit} 2>/dev/null; systemctl reset-failed {unit} 2>/dev/null")
    started = n1.run(
        f"systemd-run --unit={unit} --uid={USER} --working-directory=/opt/raspi-tf/code "
        "/opt/raspi-tf/venv/bin/python -m training listen "
        f"--ports {','.join(map(str, TASK_PORTS))} --seconds 120"
    )
    assert started.rc == 0, started.stderr
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        listening = n1.check_output("ss -ltnH")
        if all(f":{port} " in listening for port in MEMBERS_ONLY):
            break
        time.sleep(0.5)
    yield
    n1.run(f"systemctl stop {unit}")


def probe_node1(name: str) -> dict[int, int]:
    """connect_ex's result for each members-only port of node1, from node ``name`` (0: in)."""
    output = node(name).check_output(PROBE + " ".join(map(str, MEMBERS_ONLY)))
    rows = (line.split() for line in output.splitlines())
    return {int(port): int(result) for port, result in rows}


def test_every_members_only_port_answers_a_member_and_refuses_an_outsider(
    listeners_on_node1: None,
) -> None:
    from_member = probe_node1("node3")
    assert {MEMBERS_ONLY[p]: r for p, r in from_member.items() if r != 0} == {}
    from_outsider = probe_node1("outsider")
    reached = [f"{MEMBERS_ONLY[p]} ({p})" for p, r in from_outsider.items() if r == 0]
    assert reached == [], f"the outsider reached node1's {', '.join(reached)}"


#: The release of TensorFlow in a node's venv (tensorflow-cpu on x86_64, tensorflow on arm64).
TF_VERSION = (
    "/opt/raspi-tf/venv/bin/python -c 'import importlib.metadata as m; "
    'print(([d.version for d in m.distributions() if d.metadata["Name"].lower().replace("_", "-") '
    'in ("tensorflow", "tensorflow-cpu")] or [""])[0])\''
)


def test_a_node_with_another_tensorflow_is_refused_naming_both_versions() -> None:
    n3 = node("node3")
    real = node("node1").check_output(TF_VERSION).strip()
    # Fake an older release on node3: its venv's metadata is what the check reads.
    metadata = n3.check_output(
        "cd /opt/raspi-tf/venv/lib/python3*/site-packages && ls -d $PWD/tensorflow-[0-9]*.dist-info"
        " $PWD/tensorflow_cpu-[0-9]*.dist-info 2>/dev/null || true"
    ).strip()
    assert len(metadata.split()) == 1, metadata
    metadata += "/METADATA"
    n3.check_output(f"sed -i.real 's/^Version: .*/Version: 2.0.0/' {metadata}")
    try:
        assert n3.check_output(TF_VERSION).strip() == "2.0.0"
        returncode, text = train_yml()
    finally:
        n3.check_output(f"mv {metadata}.real {metadata}")
    assert returncode != 0
    assert "The nodes must run one TensorFlow release" in text, text[-3000:]
    assert f"node1: {real}" in text and "node3: 2.0.0" in text, text[-3000:]
    assert "run site.yml" in text
    assert_no_task_runs()
