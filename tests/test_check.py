"""`python -m training check`: what a task refuses before TensorFlow starts."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from training import data
from training.cli import main
from training.netcheck import NetCheckError, listen


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("datasets")
    data.prepare("mnist_5k", folder)
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
        (["--dataset", "cifar10"], "dataset 'cifar10' is unknown"),
        (["--dataset", "mnist"], "stage it with `ansible-playbook site.yml -e dataset=mnist`"),
        (["--model", "resnet"], "model 'resnet' is unknown"),
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


def test_the_global_batch_counts_every_worker(
    staged: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]}
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})
    )
    assert main(["check", "--data-dir", str(staged), "--batch-size", "2000"]) == 0
    assert main(["check", "--data-dir", str(staged), "--batch-size", "2001"]) == 2
    assert "global batch of 4002 (batch_size 2001 x 2 replicas)" in capsys.readouterr().err


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


def test_tf_config_file_that_is_missing(staged: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--data-dir", str(staged), "--tf-config-file", "/nonexistent"]) == 2
    assert "cannot read --tf-config-file" in capsys.readouterr().err


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_listener_accepts_until_told_to_stop(tmp_path: Path) -> None:
    port, stop = free_port(), tmp_path / "stop"
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
