"""A run that loses a worker in epoch 2, seen by Prometheus and TensorBoard; status and stop.

Runs after test_cluster.py (the undisturbed runs of side_effect are the baseline).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import testinfra

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
EPHEMERAL = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"])
NODE_RUNS = "/var/lib/raspi-tf/runs"
NODES = ("node1", "node2", "node3")


def node(name: str):
    """Node ``name`` as root at its console: through Docker (the playbooks use SSH)."""
    return testinfra.get_host(f"docker://{name}")


def playbook(name: str, *extra: str) -> subprocess.Popen[str]:
    """A playbook in the background, in a session of its own (a terminal's Ctrl-C: killpg)."""
    return subprocess.Popen(
        ["ansible-playbook", "-i", INVENTORY, str(PROJECT / "playbooks" / name), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"},
        start_new_session=True,
    )


def start_train(run_id: str, runs: Path, *extra: str) -> subprocess.Popen[str]:
    """train.yml for run ``run_id``, its results in ``runs``, in the background."""
    args = ["-e", f"training_run_id={run_id}", "-e", f"training_run_runs_dir={runs}"]
    return playbook("train.yml", *args, *extra)


def wait_for_epoch(
    run_id: str, epoch: int, play: subprocess.Popen[str], timeout: float = 600
) -> None:
    n1 = node("node1")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if play.poll() is not None:
            output = play.stdout.read() if play.stdout else ""
            raise AssertionError(f"train.yml ended before epoch {epoch}: {output[-3000:]}")
        text = n1.run(f"cat {NODE_RUNS}/{run_id}/progress.jsonl 2>/dev/null").stdout
        events = [json.loads(line) for line in text.splitlines() if line.strip()]
        if any(e["event"] == "epoch" and e["epoch"] >= epoch for e in events):
            return
        time.sleep(1)
    raise AssertionError(f"{run_id}: epoch {epoch} did not end within {timeout} s")


def address(name: str) -> str:
    return subprocess.run(
        [
            "docker",
            "inspect",
            "-f",
            "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
            name,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def prometheus(query: str) -> list[dict]:
    url = f"http://{address('node1')}:9090/api/v1/query?" + urllib.parse.urlencode({"query": query})
    return get_json(url)["data"]["result"]


def until(probe, timeout: float = 90):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = probe()
            if value:
                return value
        except OSError:
            pass
        if time.monotonic() > deadline:
            return probe()
        time.sleep(3)


def baseline_accuracy(strategy: str) -> float:
    """Test accuracy of side_effect's undisturbed run with ``strategy``."""
    for metrics in sorted((EPHEMERAL / "runs").glob("*/metrics.json")):
        data = json.loads(metrics.read_text())
        if data["strategy"] == strategy:
            return float(data["test_accuracy"])
    raise AssertionError(f"no undisturbed {strategy} run in side_effect")


def rows_until(query: str, want: int, timeout: float = 120) -> list[dict]:
    """Prometheus' rows for ``query`` once there are ``want``, else its last after ``timeout``."""
    rows: list[dict] = []

    def probe() -> bool:
        nonlocal rows
        rows = prometheus(query)
        return len(rows) >= want

    until(probe, timeout)
    return rows


def watch_monitoring(run_id: str, seen: dict[str, Any]) -> None:
    """Query Prometheus and TensorBoard from the control node while the run goes.

    A task's series go stale when its process ends (Prometheus cannot scrape
    it), and the tasks of a short run are not all between two scrapes at once
    when one of them is restarting: what Prometheus saw is asked over the
    run so far (``max_over_time``), not at one instant.
    """
    seen["examples"] = rows_until(
        f'max_over_time(raspi_tf_examples_per_second{{run_id="{run_id}"}}[15m]) > 0', 3
    )
    seen["cpu"] = rows_until(
        '100 * (1 - avg by (node) (rate(node_cpu_seconds_total{mode="idle"}[1m])))', len(NODES)
    )
    tensorboard = f"http://{address('node1')}:6006"
    seen["tb_tags"] = until(
        lambda: {
            run: tags
            for run, tags in get_json(f"{tensorboard}/data/plugin/scalars/tags").items()
            if run.startswith(run_id)
        }
    )


@pytest.fixture(scope="module")
def fault_run() -> dict[str, Any]:
    """mnist_cnn, multi_worker_mirrored on 3 nodes, as side_effect; worker-1 killed in epoch 2."""
    runs = EPHEMERAL / "fault-runs"
    play = start_train(
        "fault-mwms", runs,
        "-e", "model=mnist_cnn", "-e", "tf_cluster_strategy=multi_worker_mirrored",
    )  # fmt: skip
    seen: dict[str, Any] = {}
    watcher = threading.Thread(target=watch_monitoring, args=("fault-mwms", seen), daemon=True)
    try:
        wait_for_epoch("fault-mwms", 1, play)
        watcher.start()  # Prometheus and TensorBoard, while the run goes on
        # Into epoch 2 (the backup of epoch 1 written), then kill -9 worker-1's
        # training process. An epoch can take about a second, so the test
        # notes when it killed rather than assuming which epoch that was.
        time.sleep(1)
        n2 = node("node2")
        pid = n2.check_output("systemctl show -p MainPID --value raspi-tf-task@worker-1.service")
        assert int(pid) > 0
        seen["killed_at"] = time.time()  # the nodes are containers on this clock
        n2.run(f"kill -9 {pid}")
        output, _ = play.communicate(timeout=1200)
        watcher.join(timeout=120)
    finally:
        if play.poll() is None:
            play.kill()
    seen["rc"], seen["output"] = play.returncode, output
    seen["metrics"] = json.loads((runs / "fault-mwms" / "metrics.json").read_text())
    seen["dir"] = runs / "fault-mwms"
    return seen


def test_the_run_survives_a_killed_worker(fault_run: dict[str, Any]) -> None:
    assert fault_run["rc"] == 0, fault_run["output"][-4000:]
    m = fault_run["metrics"]
    # Resumed from a backup, never from epoch 0, and from about where the kill
    # fell: the epochs whose progress line was written before the kill, give or
    # take one (the chief writes the line after the epoch's last step and its
    # test evaluation, and the backup after the line).
    progress = (fault_run["dir"] / "progress.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in progress if line.strip()]
    ended = max(
        e["epoch"] for e in events if e["event"] == "epoch" and e["time"] < fault_run["killed_at"]
    )
    assert ended >= 1 and abs(m["resumed_from_epoch"] - ended) <= 1, (m, ended)
    assert m["resumed_from_epoch"] >= 1, m["resumed_from_epoch"]
    assert len(m["history"]["loss"]) == m["epochs"] == 8
    baseline = baseline_accuracy("multi_worker_mirrored")
    assert abs(m["test_accuracy"] - baseline) <= 0.02, (m["test_accuracy"], baseline)
    assert "resumed from the backup made after epoch" in fault_run["output"]
    worker_log = fault_run["dir"] / "tasks" / "worker-1.jsonl"
    starts = [
        e for e in map(json.loads, worker_log.read_text().splitlines()) if e["event"] == "start"
    ]
    assert [e["restarts"] for e in starts] == [0, 1]
    journal = (fault_run["dir"] / "logs" / "worker-1.log").read_text()
    assert "copied the chief's backup" in journal  # ExecStartPre brought the chief's epoch
    for png in ("loss_accuracy.png", "examples_per_second.png"):
        assert (fault_run["dir"] / png).read_bytes()[:4] == b"\x89PNG"


def test_prometheus_saw_every_worker_and_every_node(fault_run: dict[str, Any]) -> None:
    tasks = {r["metric"]["task"] for r in fault_run.get("examples", [])}
    assert tasks == {"worker-0", "worker-1", "worker-2"}, fault_run.get("examples")
    assert all(float(r["value"][1]) > 0 for r in fault_run["examples"])
    nodes = {r["metric"]["node"] for r in fault_run.get("cpu", [])}
    assert nodes == set(NODES), fault_run.get("cpu")


def test_tensorboard_on_the_chief_lists_the_runs_scalars(fault_run: dict[str, Any]) -> None:
    tags = fault_run["tb_tags"]
    assert any("epoch_loss" in t and "epoch_accuracy" in t for t in tags.values()), tags


def kill_unit(name: str, task: str) -> None:
    """``kill -9`` the training process of ``task`` on node ``name``."""
    host = node(name)
    pid = host.check_output(f"systemctl show -p MainPID --value raspi-tf-task@{task}.service")
    assert int(pid) > 0, f"{task} is not running on {name}"
    host.run(f"kill -9 {pid}")


def test_parameter_server_survives_a_dead_worker_and_resumes_after_a_dead_ps() -> None:
    """worker-2 killed in epoch 2, ps-0 in epoch 3: the chief's backup is on the chief's disk."""
    runs = EPHEMERAL / "fault-runs"
    play = start_train(
        "fault-ps", runs,
        "-e", "model=mnist_cnn", "-e", "tf_cluster_strategy=parameter_server",
    )  # fmt: skip
    try:
        wait_for_epoch("fault-ps", 1, play)
        kill_unit("node3", "worker-2")  # the coordinator goes on with the other workers
        wait_for_epoch("fault-ps", 2, play)
        time.sleep(1)
        kill_unit("node2", "ps-0")  # the variables are gone: the chief restarts
        output, _ = play.communicate(timeout=1200)
    finally:
        if play.poll() is None:
            play.kill()
    assert play.returncode == 0, output[-4000:]
    run = runs / "fault-ps"
    m = json.loads((run / "metrics.json").read_text())
    # Restored on the chief from the backup the chief itself wrote after epoch 2.
    assert m["resumed_from_epoch"] >= 2, m["resumed_from_epoch"]
    assert len(m["history"]["loss"]) == m["epochs"]
    baseline = baseline_accuracy("parameter_server")
    assert abs(m["test_accuracy"] - baseline) <= 0.03, (m["test_accuracy"], baseline)
    assert "resumed from the backup made after epoch" in output

    def starts(task: str) -> list[int]:
        events = map(json.loads, (run / "tasks" / f"{task}.jsonl").read_text().splitlines())
        return [e["restarts"] for e in events if e["event"] == "start"]

    assert starts("worker-2") == [0, 1]
    assert starts("ps-0") == [0, 1]
    assert starts("chief-0") == [0, 1]  # for the ps only: a dead worker did not stop it


def test_status_and_stop_mid_run_keep_the_backups() -> None:
    runs = EPHEMERAL / "stop-runs"
    play = start_train("stop-mwms", runs, "-e", "epochs=40")
    try:
        wait_for_epoch("stop-mwms", 1, play)
        status = playbook(
            "status.yml", "-e", "run=stop-mwms", "-e", f"training_run_runs_dir={runs}"
        )
        status_out, _ = status.communicate(timeout=300)
        assert status.returncode == 0, status_out[-3000:]
        for task in ("worker-0", "worker-1", "worker-2"):
            assert re.search(rf"{task} +running +[1-9] .* \d+% ", status_out), status_out
        stop = playbook("stop.yml", "-e", "run=stop-mwms", "-e", f"training_run_runs_dir={runs}")
        stop_out, _ = stop.communicate(timeout=300)
        assert stop.returncode == 0, stop_out[-3000:]
        output, _ = play.communicate(timeout=300)
    finally:
        if play.poll() is None:
            play.kill()
    assert play.returncode != 0 and "stopped" in output
    for name in NODES:
        active = node(name).run("systemctl list-units 'raspi-tf-task@*' --state=active --no-legend")
        assert active.stdout.strip() == "", f"{name}: {active.stdout}"
        assert node(name).run("pgrep -f '[-]m training train'").rc == 1
    backup = node("node1").run(f"ls {NODE_RUNS}/stop-mwms/backup/chief/")
    assert re.search(r"ckpt-\d+\.index", backup.stdout), backup.stdout
    assert json.loads((runs / "stop-mwms" / "run.json").read_text())["state"] == "stopped"


def test_follow_brings_back_a_run_that_train_yml_stopped_following() -> None:
    """Ctrl-C on train.yml in epoch 1: the units train on; follow.yml takes the run up."""
    runs = EPHEMERAL / "follow-runs"
    play = start_train("follow-mwms", runs, "-e", "epochs=4")
    try:
        wait_for_epoch("follow-mwms", 1, play)
        os.killpg(play.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
        output, _ = play.communicate(timeout=120)
    finally:
        if play.poll() is None:
            play.kill()
    assert play.returncode != 0 and "User interrupted execution" in output, output[-2000:]
    # train.yml did not see the end: the run is still recorded as running.
    assert json.loads((runs / "follow-mwms" / "run.json").read_text())["state"] == "running"
    follow = playbook("follow.yml", "-e", "run=follow-mwms", "-e", f"training_run_runs_dir={runs}")
    follow_out, _ = follow.communicate(timeout=900)
    assert follow.returncode == 0, follow_out[-3000:]
    assert re.search(r"test accuracy 0\.9\d+ on 1000 held-out images", follow_out), follow_out
    run = runs / "follow-mwms"
    record = json.loads((run / "run.json").read_text())
    assert (record["state"], record["model"]) == ("succeeded", "mnist_cnn")
    for result in ("model.keras", "metrics.json", "logs/worker-2.log"):
        assert (run / result).exists(), result
    for name in NODES:
        active = node(name).run("systemctl list-units 'raspi-tf-task@*' --state=active --no-legend")
        assert active.stdout.strip() == "", f"{name}: {active.stdout}"


def test_a_worker_failing_at_every_start_ends_the_run_naming_it() -> None:
    """node3's dataset vanishes and worker-2 is killed: its unit stops at systemd's start limit."""
    runs = EPHEMERAL / "limit-runs"
    n3 = node("node3")
    # The staged mnist_5k folder (mnist_5k-<key>) that worker-2 reads its shards from.
    dataset = n3.check_output("ls -d /var/lib/raspi-tf/datasets/mnist_5k-*/").rstrip("/")
    play = start_train("limit-mwms", runs, "-e", "training_run_startup_timeout=60")
    try:
        wait_for_epoch("limit-mwms", 1, play)
        n3.run(f"mv {dataset} {dataset}.away")  # every start of worker-2 now fails
        kill_unit("node3", "worker-2")
        output, _ = play.communicate(timeout=900)
    finally:
        n3.run(f"mv {dataset}.away {dataset}")
        if play.poll() is None:
            play.kill()
    text = " ".join(output.split())
    assert play.returncode != 0
    # The chief gave up waiting for worker-2, whose unit had stopped at the limit.
    # 1 + training_node_max_restarts (3) starts; systemd may count the refused 5th as a restart.
    assert re.search(r"worker-2 on node3 failed \(restarted [34] times\)", text), text[-4000:]
    # worker-2's last lines: its staged dataset is gone
    assert re.search(r"dataset mnist_5k-\w+ is not in \S+: \S+ is missing", text), text[-4000:]
    assert re.search(r"the cluster did not form within 60 s .*not answering: worker-2", text)
    assert json.loads((runs / "limit-mwms" / "run.json").read_text())["state"] == "failed"
    for name in NODES:
        assert node(name).run("pgrep -f '[-]m training train'").rc == 1


def test_a_run_that_ended_unfollowed_is_left_by_stop_and_recorded_by_follow() -> None:
    """train.yml lost (Ctrl-C) in epoch 1; the tasks finish; stop.yml has nothing to stop, and
    follow.yml records the run, brings its model back and exports it."""
    runs = EPHEMERAL / "late-stop-runs"
    play = start_train("late-stop", runs, "-e", "epochs=2")
    try:
        wait_for_epoch("late-stop", 1, play)
        os.killpg(play.pid, signal.SIGINT)
        play.communicate(timeout=120)
    finally:
        if play.poll() is None:
            play.kill()
    deadline = time.monotonic() + 600
    while any(node(name).run("pgrep -f '[-]m training train'").rc == 0 for name in NODES):
        assert time.monotonic() < deadline, "the tasks did not finish the run"
        time.sleep(2)
    assert node("node1").run(f"test -s {NODE_RUNS}/late-stop/metrics.json").rc == 0
    given = ("-e", "run=late-stop", "-e", f"training_run_runs_dir={runs}")
    stop = playbook("stop.yml", *given)
    stop_out, _ = stop.communicate(timeout=300)
    assert stop.returncode == 0, stop_out[-3000:]
    text = " ".join(stop_out.split())
    assert "ended on its own: no task of it runs any more, so there is nothing to stop" in text
    run = runs / "late-stop"
    assert json.loads((run / "run.json").read_text())["state"] == "running"  # left as it was
    follow = playbook("follow.yml", *given)
    follow_out, _ = follow.communicate(timeout=600)
    assert follow.returncode == 0, follow_out[-3000:]
    record = json.loads((run / "run.json").read_text())
    assert record["state"] == "succeeded", record
    assert (run / "model.keras").stat().st_size > 100_000
    assert (run / "model.tflite").stat().st_size > 10_000  # exported, as train.yml would have
    assert json.loads((run / "metrics.json").read_text())["test_accuracy"] > 0.5


def docker_restart(name: str) -> None:
    """Cut node ``name``'s power (SIGKILL, no shutdown), boot it and wait until it is up."""
    before = address(name)
    subprocess.run(["docker", "restart", "--timeout", "0", name], check=True, timeout=120)
    assert address(name) == before, f"{name} came back at another address: firewalls would differ"
    host = node(name)
    deadline = time.monotonic() + 180
    while host.run("systemctl is-system-running").stdout.strip() not in ("running", "degraded"):
        assert time.monotonic() < deadline, f"{name} did not finish booting"
        time.sleep(2)


def test_a_restarted_node_rejoins_the_run_and_starts_nothing_once_it_ended() -> None:
    """node3 (worker-2) restarted in epoch 2: its enabled unit starts at boot; the run resumes."""
    runs = EPHEMERAL / "reboot-runs"
    # An epoch takes about a second on an idle machine: enough of them are left
    # after the first that node3 is down before the run could end.
    play = start_train("reboot-mwms", runs, "-e", "epochs=10")
    try:
        wait_for_epoch("reboot-mwms", 1, play)
        docker_restart("node3")
        output, _ = play.communicate(timeout=1200)
    finally:
        if play.poll() is None:
            play.kill()
    assert play.returncode == 0, output[-4000:]
    run = runs / "reboot-mwms"
    m = json.loads((run / "metrics.json").read_text())
    assert m["resumed_from_epoch"] is not None, "the run never lost node3: it ended first"
    assert m["resumed_from_epoch"] >= 1, m["resumed_from_epoch"]
    assert len(m["history"]["loss"]) == m["epochs"] == 10
    assert "resumed from the backup made after epoch" in output
    starts = [
        e
        for e in map(json.loads, (run / "tasks" / "worker-2.jsonl").read_text().splitlines())
        if e["event"] == "start"
    ]
    assert len(starts) >= 2, starts  # once at the run's start, again after the boot
    # The run has ended: its units are disabled, and a node booting now starts none.
    docker_restart("node3")
    time.sleep(5)
    units = node("node3").run("systemctl list-units 'raspi-tf-task@*' --all --no-legend").stdout
    assert " active " not in f" {units} " and "activating" not in units, units
    assert node("node3").run("pgrep -f '[-]m training train'").rc == 1
