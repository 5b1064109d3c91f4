"""Containers for node tests: the molecule image, started without systemd, with faked hardware."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

IMAGE = "local/debian-systemd:bookworm"


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


def _missing(reason: str) -> None:
    # CI sets RASPI_TF_REQUIRE_DOCKER=1: there a missing engine is a failure, not a skip.
    if os.environ.get("RASPI_TF_REQUIRE_DOCKER") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def node_image() -> str:
    if shutil.which("docker") is None or docker("info", check=False).returncode != 0:
        _missing("no Docker engine answers; .ci/run starts one")
    if docker("image", "inspect", IMAGE, check=False).returncode != 0:
        _missing(f"image {IMAGE} is missing; build it with molecule/images/build.sh")
    return IMAGE


class Containers:
    """Starts containers and removes them at the end of the test."""

    def __init__(self, image: str) -> None:
        self.image = image
        self.names: list[str] = []

    def start(self, name: str, mounts: dict[Path, str] | None = None) -> str:
        full = f"{name}-{uuid.uuid4().hex[:6]}"
        args = ["run", "-d", "--name", full, "--hostname", name]
        for src, dest in (mounts or {}).items():
            args += ["-v", f"{src}:{dest}:ro"]
        docker(*args, self.image, "sleep", "infinity")
        self.names.append(full)
        return full

    def remove(self) -> None:
        for name in self.names:
            docker("rm", "-f", name, check=False)


@pytest.fixture
def containers(node_image: str) -> Iterator[Containers]:
    started = Containers(node_image)
    yield started
    started.remove()
