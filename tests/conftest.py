"""Shared fixtures: the repository root and helpers to run ansible-playbook and TensorFlow."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run_playbook(
    *args: str, timeout: float = 1800, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ansible-playbook from the repository root; output captured as text.

    ``env`` replaces this process's environment when given.
    """
    env = {
        **(os.environ if env is None else env),
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_NOCOLOR": "1",
    }
    return subprocess.run(
        [str(BIN / "ansible-playbook"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def check_mode_says(runs_dir: Path, *extra_vars: str) -> str:
    """``train.yml --check`` on the local inventory with ``-e`` each of ``extra_vars``.

    Returns its output on one line (the YAML callback folds long lines), once it exited 0.
    """
    given = [arg for value in extra_vars for arg in ("-e", value)]
    done = run_playbook(
        "train.yml", "--check", *given, "-e", f"training_run_runs_dir={runs_dir}", timeout=300
    )
    text = " ".join(done.stdout.split())
    assert done.returncode == 0, text[-2000:]
    return text


def run_tensorflow_script(script: str, *args: str, timeout: float = 300) -> str:
    """Run ``script`` in a fresh Python with tf_keras as Keras; its last stdout line.

    Fails the test, with the end of stderr, when the script fails.
    """
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"},
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


@pytest.fixture
def root() -> Path:
    return ROOT


def free_ports(count: int) -> list[int]:
    """``count`` TCP ports of 127.0.0.1 that nothing listens on now."""
    socks = [socket.socket() for _ in range(count)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def run_workers(
    script: str,
    *args: str,
    count: int = 2,
    timeout: float = 240,
    logs: list[str] | None = None,
    log_level: str = "2",
) -> list[str]:
    """Run ``script`` as ``count`` MultiWorkerMirroredStrategy workers on 127.0.0.1.

    Each gets its TF_CONFIG (task ``worker``, its index) and the arguments;
    returns each worker's last stdout line, in task order. Fails the test,
    with the end of its output, when a worker fails. Each worker's stderr is
    appended to ``logs`` when given; ``log_level`` is TF_CPP_MIN_LOG_LEVEL
    (``1`` lets TensorFlow's warnings through).
    """
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(count)]}
    procs = []
    for index in range(count):
        tf_config = {"cluster": cluster, "task": {"type": "worker", "index": index}}
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TF_USE_LEGACY_KERAS": "1",
            "TF_CPP_MIN_LOG_LEVEL": log_level,
            "TF_CONFIG": json.dumps(tf_config),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", script, *args],
                env=env,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    try:
        outputs = [proc.communicate(timeout=timeout) for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err[-3000:]
    if logs is not None:
        logs.extend(err for _, err in outputs)
    return [out.strip().splitlines()[-1] for out, _ in outputs]
