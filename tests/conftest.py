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


@pytest.fixture
def root() -> Path:
    return ROOT
