"""`python -m training check`: what a task refuses before TensorFlow starts."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import check_mode_says, free_ports
from tests.test_datasets import id_npz
from training import datasets
from training.cli import main
from training.netcheck import NetCheckError, listen


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("datasets")
    datasets.prepare("mnist_5k", folder, datasets.Settings())
    return folder


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--learning-rate", "inf"], "learning_rate=inf must be a positive number"),
        (["--learning-rate", "-1"], "learning_rate=-1.0 must be a positive number"),
        (["--epochs", "0"], "epochs=0 must be 1 or more"),
        (["--batch-size", "0"], "batch_size=0 must be 1 or more"),
        (
            ["--batch-size", "5000"],
            "4000 training examples are fewer than one step's global batch of 5000",
        ),
        (["--dataset", "cifar10"], "dataset=cifar10 is neither a prepared dataset in"),
        (["--dataset", "mnist"], "stage it: ansible-playbook train.yml -e dataset=mnist (or"),
        (["--model", "resnet"], "model 'resnet' is unknown"),
        (["--steps-per-execution", "-1"], "steps_per_execution=-1 must be 0 (chosen for the"),
        (["--threads", "-1"], "threads=-1 must be 0 (share the CPUs) or more"),
        (["--pack-bytes", "-5"], "pack_bytes=-5 must be 0 (TensorFlow packs) or more"),
        (
            ["--strategy", "parameter_server", "--all-reduce-dtype", "float16"],
            "parameter_server has none. Fix: all_reduce_dtype=float32",
        ),
        (
            ["--strategy", "parameter_server", "--learning-rate-scaling", "linear"],
            "its step size is not scaled. Fix: leave learning_rate_scaling out",
        ),
    ],
)
def test_refusals_name_the_value_and_the_fix(
    staged: Path,
    flags: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert main(["check", "--data-dir", str(staged), *flags]) == 2
    assert message in capsys.readouterr().err


def as_worker_0(monkeypatch: pytest.MonkeyPatch, workers: list[str]) -> None:
    """Set TF_CONFIG to worker-0 of a cluster of ``workers`` (host:port each)."""
    tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": 0}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))


@pytest.mark.parametrize("host", ["10.255.255.1", "no-such-host.invalid"])
def test_a_local_task_on_another_machines_address_is_refused(
    staged: Path, host: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A local run with tf_cluster_address 10.255.255.1 would pass every other check, then
    # each task would wait training_run_startup_timeout for the others.
    as_worker_0(monkeypatch, [f"{host}:2222", f"{host}:2223"])
    argv = ["check", "--data-dir", str(staged), "--own-address"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"tf_cluster_address {host} " in err and "Fix: leave tf_cluster_address out" in err
    as_worker_0(monkeypatch, ["localhost:2222", "127.0.0.1:2223"])
    assert main(argv) == 0
    as_worker_0(monkeypatch, ["10.255.255.1:2222", "10.255.255.1:2223"])
    assert main(argv[:-1]) == 0  # nodes: checked by the network preflight instead


def test_the_global_batch_counts_every_worker(
    staged: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    as_worker_0(monkeypatch, ["127.0.0.1:2222", "127.0.0.1:2223"])
    assert main(["check", "--data-dir", str(staged), "--batch-size", "2000"]) == 0
    assert main(["check", "--data-dir", str(staged), "--batch-size", "2001"]) == 2
    assert "global batch of 4002 (batch_size 2001 x 2 replicas)" in capsys.readouterr().err


def test_threads_above_the_hosts_cpus_warn_with_the_share(
    staged: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("training.train.usable_cpus", lambda: 2)
    as_worker_0(monkeypatch, ["10.0.0.1:2222", "10.0.0.1:2223", "10.0.0.2:2222"])
    assert main(["check", "--data-dir", str(staged), "--threads", "999"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert (
        "warning: threads=999 with 2 tasks of the run on this host keeps 1998 threads "
        "computing on 2 usable CPU(s)" in err
    )
    assert "Fix: -e threads=0 (each task's share, 1 here) or at most 1" in err
    for fine in ("0", "1"):
        assert main(["check", "--data-dir", str(staged), "--threads", fine]) == 0
        assert "warning" not in capsys.readouterr().err


def test_a_metrics_port_above_65535_is_refused(
    staged: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = {"worker": ["127.0.0.1:62222"]}
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})
    )
    argv = ["check", "--data-dir", str(staged), "--metrics-port-offset", "5000"]
    assert main(argv) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "worker-0: port 67222" in err and "training_run_metrics_port_offset" in err


@pytest.mark.parametrize(
    ("task", "refused"),
    [
        ({"type": "worker", "index": 1}, True),  # 23457 + 1 is ps-0's port on the same host
        ({"type": "worker", "index": 0}, False),  # 23457 is worker-1's, but on another host
    ],
)
def test_a_metrics_port_on_another_tasks_port_is_refused(
    staged: Path,
    task: dict,
    refused: bool,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = {
        "chief": ["10.0.0.2:23459"],
        "worker": ["10.0.0.1:23456", "10.0.0.2:23457"],
        "ps": ["10.0.0.2:23458"],
    }
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": task}))
    argv = ["check", "--data-dir", str(staged), "--strategy", "parameter_server"]
    assert main([*argv, "--metrics-port-offset", "1"]) == (2 if refused else 0)
    err = " ".join(capsys.readouterr().err.split())
    if refused:
        assert "worker-1 on 10.0.0.2: its metrics port 23458" in err
        assert "the TensorFlow port of ps-0 on the same host" in err
        assert "-e training_run_metrics_port_offset=1000" in err
    assert main([*argv, "--metrics-port-offset", "1000"]) == 0


def test_tf_config_file_that_is_missing(staged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--data-dir", str(staged), "--tf-config-file", "/nonexistent"]) == 2
    assert "cannot read --tf-config-file" in capsys.readouterr().err


def test_listener_accepts_until_told_to_stop(tmp_path: Path) -> None:
    (port,), stop = free_ports(1), tmp_path / "stop"
    thread = threading.Thread(target=listen, args=([port], 30.0, stop))
    thread.start()
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    stop.touch()
    thread.join(timeout=5)
    assert not thread.is_alive()


def test_listener_says_a_port_is_in_use() -> None:
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        with pytest.raises(NetCheckError, match="is in use"):
            listen([busy.getsockname()[1]], 1.0)


@pytest.mark.parametrize(
    ("threads", "tasks_here", "expected"),
    [(0, 2, 1), (0, 1, 2), (0, 3, 1), (3, 2, 3)],
)
def test_threads_share_the_hosts_cpus_among_its_tasks(
    monkeypatch: pytest.MonkeyPatch, threads: int, tasks_here: int, expected: int
) -> None:
    from training.cluster import parse_tf_config
    from training.train import TrainConfig, thread_count

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    here = [f"10.0.0.1:{2222 + i}" for i in range(tasks_here)]
    tf_config = parse_tf_config(
        json.dumps(
            {
                "cluster": {"worker": [*here, "10.0.0.2:2222"]},
                "task": {"type": "worker", "index": 0},
            }
        )
    )
    assert thread_count(TrainConfig(threads=threads), tf_config) == expected
    assert thread_count(TrainConfig(threads=threads), None) == (threads or 2)


@pytest.mark.parametrize("version", [1, 2])
def test_a_cpu_quota_caps_the_usable_cpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: int
) -> None:
    from training import train

    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    if version == 1:
        line, unit = "4:cpu,cpuacct:/docker/abc/system.slice/x.service", "cpu,cpuacct/docker/abc"
        (tmp_path / unit).mkdir(parents=True)
        (tmp_path / unit / "cpu.cfs_quota_us").write_text("150000\n")
        (tmp_path / unit / "cpu.cfs_period_us").write_text("100000\n")
    else:
        line, unit = "0::/docker/abc/system.slice/x.service", "docker/abc"
        (tmp_path / unit).mkdir(parents=True)
        (tmp_path / unit / "cpu.max").write_text("100000 100000\n")
    real_read = Path.read_text

    def read_text(self: Path, *args: object, **kwargs: object) -> str:
        if str(self) == "/proc/self/cgroup":
            return line + "\n"
        return real_read(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", read_text)
    assert train.usable_cpus(tmp_path) == (2 if version == 1 else 1)
    (tmp_path / unit / ("cpu.max" if version == 2 else "cpu.cfs_quota_us")).write_text(
        "max 100000\n" if version == 2 else "-1\n"
    )
    assert train.usable_cpus(tmp_path) == 4


def test_the_offset_offered_for_a_clashing_metrics_port_clears_the_hosts_ports(
    staged: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # With ports 1000 apart, the default offset 1000 would clash the same way: not offered.
    as_worker_0(monkeypatch, ["127.0.0.1:23456", "127.0.0.1:24456"])
    argv = ["check", "--data-dir", str(staged)]
    assert main([*argv, "--metrics-port-offset", "1000"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "above the spread of the host's ports (1000), such as -e" in err
    assert "training_run_metrics_port_offset=2000" in err
    assert main([*argv, "--metrics-port-offset", "2000"]) == 0


@pytest.fixture
def copy_of_staged(staged: Path, tmp_path: Path) -> tuple[Path, datasets.Manifest]:
    """A copy of the staged mnist_5k, whose files a test may damage."""
    (dataset,) = [p.name for p in staged.iterdir()]
    shutil.copytree(staged / dataset, tmp_path / dataset)
    return tmp_path, datasets.read_manifest(tmp_path, dataset)


def test_a_task_needs_only_its_own_shards(
    copy_of_staged: tuple[Path, datasets.Manifest],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data_dir, manifest = copy_of_staged
    # worker-1 of 2 reads train shards 1, 3, ..., 11; worker-0 the others and the test split.
    (data_dir / manifest.id / manifest.train.shards[0].file).unlink()
    cluster = {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}})
    )
    argv = ["check", "--data-dir", str(data_dir), "--dataset", manifest.id]
    assert main(argv) == 0
    as_worker_0(monkeypatch, cluster["worker"])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{manifest.train.shards[0].file} is missing" in err
    assert "Fix: stage it: ansible-playbook train.yml -e dataset=mnist_5k" in err
    # The chief also reads the test split; a file of another size is named as well.
    (data_dir / manifest.id / manifest.test.shards[0].file).write_bytes(b"")
    assert main(argv) == 2
    assert f"{manifest.test.shards[0].file} has 0 bytes, not 788000" in capsys.readouterr().err


def test_a_run_of_more_workers_than_shards_is_refused(
    staged: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    as_worker_0(monkeypatch, [f"127.0.0.1:{2222 + i}" for i in range(13)])
    assert main(["check", "--data-dir", str(staged), "--batch-size", "8"]) == 2
    assert "12 training shard files for 13 workers" in capsys.readouterr().err


def test_task_shards_under_each_strategy(staged: Path) -> None:
    from training.cluster import parse_tf_config
    from training.train import task_shards, worker_shards

    (dataset,) = [p.name for p in staged.iterdir()]
    m = datasets.read_manifest(staged, dataset)
    train, test = [s.file for s in m.train.shards], [s.file for s in m.test.shards]
    assert [s.file for s in task_shards(m, "multi_worker_mirrored", None)] == train + test
    cluster = {
        "chief": ["127.0.0.1:2000"],
        "ps": ["127.0.0.1:2001"],
        "worker": ["127.0.0.1:2002", "127.0.0.1:2003", "127.0.0.1:2004"],
    }

    def files(kind: str, index: int, strategy: str = "parameter_server") -> list[str]:
        spec = {"cluster": cluster, "task": {"type": kind, "index": index}}
        tf_config = parse_tf_config(json.dumps(spec), strategy)
        return [s.file for s in task_shards(m, strategy, tf_config)]

    assert files("worker", 2) == train[2::3]
    assert files("chief", 0) == test and files("ps", 0) == []
    del cluster["ps"]
    # multi_worker_mirrored with a chief: the chief is worker index 0 of 4.
    assert files("chief", 0, "multi_worker_mirrored") == train[0::4] + test
    assert files("worker", 0, "multi_worker_mirrored") == train[1::4]
    spec = {"cluster": cluster, "task": {"type": "worker", "index": 0}}
    record = worker_shards(m, "multi_worker_mirrored", parse_tf_config(json.dumps(spec)))
    assert list(record) == ["chief-0", "worker-0", "worker-1", "worker-2"]
    examples = sum(s.examples for s in m.train.shards[3::4])
    assert record["worker-2"] == {"files": train[3::4], "examples": examples}


def test_a_run_of_few_steps_is_warned_with_the_fix() -> None:
    # 240 photos at 64 a worker on two workers: one step an epoch, 8 in all.
    from training.cluster import parse_tf_config
    from training.train import TrainConfig, few_steps

    two = parse_tf_config(
        json.dumps(
            {
                "cluster": {"worker": ["127.0.0.1:23456", "127.0.0.1:23457"]},
                "task": {"type": "worker", "index": 0},
            }
        )
    )
    warning = few_steps(TrainConfig(epochs=8, batch_size=64), two, 240)
    assert warning == (
        "240 training examples make 1 step an epoch at a global batch of 128, 8 in 8 "
        "epochs: too few for the model to learn much. Fix: -e batch_size=9 or -e epochs=100, "
        "for at least 100 steps"
    )
    # 240 examples in 13 steps of 9 a worker on two workers: 8 epochs make 104 steps.
    assert few_steps(TrainConfig(epochs=8, batch_size=9), two, 240) is None
    # 96 photos at 16 a worker, 6 epochs: 18 steps; a smaller batch alone would need 1.
    warning = few_steps(TrainConfig(epochs=6, batch_size=16), two, 96)
    assert warning is not None and "Fix: -e epochs=34, for at least 100 steps" in warning
    assert few_steps(TrainConfig(epochs=8, batch_size=64), two, 4000) is None  # mnist_5k: 248


def test_a_split_smaller_than_a_global_batch_is_refused_with_a_batch_that_fits() -> None:
    from training.cluster import parse_tf_config
    from training.datasets import DatasetError
    from training.train import TrainConfig, check_global_batch

    two = parse_tf_config(
        json.dumps(
            {
                "cluster": {"worker": ["127.0.0.1:23456", "127.0.0.1:23457"]},
                "task": {"type": "worker", "index": 0},
            }
        )
    )
    check_global_batch(TrainConfig(batch_size=1), two, 2)
    # The least batch a worker can take is 1: no "1 or less", and none below it.
    for n_train, fix in (
        (5, "Fix: -e batch_size=2 or less, or more examples"),
        (3, "Fix: -e batch_size=1, or more examples"),
        (1, "Fix: more examples (at least 2, one for each replica)"),
    ):
        with pytest.raises(DatasetError) as err:
            check_global_batch(TrainConfig(batch_size=8), two, n_train)
        assert str(err.value).endswith(f"(batch_size 8 x 2 replicas). {fix}")


def test_a_dataset_not_prepared_yet_is_checked_by_its_count(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # train.yml --check on a folder not prepared yet: prepare-data --check counted 72
    # training photos; two workers at 64 each need 128 for one step.
    as_worker_0(monkeypatch, ["127.0.0.1:23456", "127.0.0.1:23457"])
    argv = ["check", "--no-data", "--model", "pi_mobilenet", "--train-examples", "72"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "error: 72 training examples are fewer than one step's global batch of 128 "
        "(batch_size 64 x 2 replicas). Fix: -e batch_size=36 or less, or more examples\n"
    )
    assert main([*argv, "--batch-size", "36"]) == 0
    assert "warning: 72 training examples make 1 step an epoch" in capsys.readouterr().err
    # A model that cannot take the data is the first thing to fix, before the batch.
    table = ["--build", "--input-shape", "4", "--num-classes", "3"]
    assert main([*argv, *table]) == 2
    assert "pi_mobilenet cannot take inputs of shape (4,)" in capsys.readouterr().err
    # A parameter server reads no data; alone, one process is one replica.
    monkeypatch.setenv(
        "TF_CONFIG",
        json.dumps(
            {
                "cluster": {
                    "chief": ["127.0.0.1:2222"],
                    "worker": ["127.0.0.1:2223"],
                    "ps": ["127.0.0.1:2224"],
                },
                "task": {"type": "ps", "index": 0},
            }
        ),
    )
    assert main([*argv, "--strategy", "parameter_server", "--batch-size", "500"]) == 0
    monkeypatch.delenv("TF_CONFIG")
    assert main([*argv, "--batch-size", "72"]) == 0


def test_a_model_answering_one_class_is_warned_of() -> None:
    import numpy as np

    from training.train import Evaluation, untrained

    # 3 balanced classes, every test image called class 0: 0.3333, as good as guessing.
    one_class = Evaluation(1.1, 1 / 3, np.array([[40, 0, 0], [40, 0, 0], [40, 0, 0]]))
    assert untrained(one_class) == (
        "test accuracy 0.3333 is no better than always answering the most common class "
        "(0.3333): the model is of no use yet. Fix: more steps (more epochs, a smaller "
        "batch_size), or another model"
    )
    learned = Evaluation(0.2, 0.95, np.array([[38, 2, 0], [1, 39, 0], [2, 1, 37]]))
    assert untrained(learned) is None


def test_check_mode_says_an_npz_file_s_values_are_read_only_by_the_run(tmp_path: Path) -> None:
    # prepare-data --check reads an .npz file's array headers, not its values (the file may
    # not fit in memory): a NaN there is refused only when the run prepares it.
    digits = id_npz(tmp_path / "digits.npz", 200)
    text = check_mode_says(
        tmp_path / "runs", f"dataset={digits}", "model=mnist_mlp", "batch_size=16"
    )
    assert (
        "The dataset is not prepared yet: the shapes of its arrays were checked, not their "
        "values. The run reads them before any task starts and refuses a NaN or infinity." in text
    ), text[-2000:]
