"""Shared fixtures: the repository root and a helper to run ansible-playbook."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run_playbook(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """Run ansible-playbook from the repository root; output captured as text."""
    env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(
        [str(BIN / "ansible-playbook"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


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
