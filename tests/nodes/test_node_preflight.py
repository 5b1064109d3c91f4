"""site.yml refuses nodes that cannot run TensorFlow before it changes anything on them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import run_playbook
from tests.nodes.conftest import Containers, docker

pytestmark = pytest.mark.docker

FAKE_DPKG = (
    "#!/bin/sh\n"
    '[ "$1" = --print-architecture ] && { echo armhf; exit 0; }\n'
    'exec /usr/bin/dpkg "$@"\n'
)
ARMV6_CPUINFO = (
    "processor\t: 0\nmodel name\t: ARMv6-compatible processor rev 7 (v6l)\n"
    "Features\t: half thumb fastmult vfp edsp java tls\nHardware\t: BCM2835\n"
    "Model\t\t: Raspberry Pi Zero W Rev 1.1\n"
)
# Python 3.9, as on Raspberry Pi OS bullseye (Debian 11): no TensorFlow 2.21 wheel.
OLD_PYTHON = "#!/bin/sh\necho 3.9.2\n"
SMALL_MEMINFO = (
    "MemTotal:         524288 kB\nMemFree:          400000 kB\nMemAvailable:     420000 kB\n"
    "Buffers:           10000 kB\nCached:            50000 kB\nSwapCached:            0 kB\n"
    "SwapTotal:             0 kB\nSwapFree:              0 kB\n"
)


def inventory(tmp_path: Path, hosts: dict[str, dict]) -> Path:
    data = {
        "all": {
            "vars": {"ansible_connection": "community.docker.docker"},
            "children": {"cluster": {"children": {"worker": {"hosts": hosts}}}},
        }
    }
    path = tmp_path / "hosts.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_32_bit_armv6_and_small_nodes_are_refused_untouched(
    tmp_path: Path, containers: Containers
) -> None:
    dpkg = tmp_path / "dpkg"
    dpkg.write_text(FAKE_DPKG)
    dpkg.chmod(0o755)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(ARMV6_CPUINFO)
    meminfo = tmp_path / "meminfo"
    meminfo.write_text(SMALL_MEMINFO)
    python = tmp_path / "python3"
    python.write_text(OLD_PYTHON)
    python.chmod(0o755)
    armhf = containers.start("pi-armhf", {dpkg: "/usr/local/bin/dpkg"})
    armv6 = containers.start("pi-zero", {dpkg: "/usr/local/bin/dpkg", cpuinfo: "/proc/cpuinfo"})
    small = containers.start("pi-small", {meminfo: "/proc/meminfo"})
    bullseye = containers.start("pi-bullseye", {python: "/usr/local/bin/python3"})
    inv = inventory(
        tmp_path,
        {
            "pi-armhf": {"ansible_host": armhf},
            "pi-zero": {"ansible_host": armv6},
            "pi-small": {"ansible_host": small, "os_base_grow_swap": False},
            "pi-bullseye": {"ansible_host": bullseye},
        },
    )
    result = run_playbook("site.yml", "-i", str(inv), timeout=600)
    text = " ".join(result.stdout.split())
    assert result.returncode != 0

    assert "Host pi-armhf: its userland is armhf" in text, text[-4000:]
    assert "Fix: flash 64-bit Raspberry Pi OS (bookworm, arm64)" in text
    assert "set tf_runtime_tensorflow_wheel" in text
    assert "Host pi-zero: its userland is armhf (CPU ARMv6)" in text
    assert "an ARMv6 board (Pi 1, Pi Zero) cannot run it at all" in text
    assert "Host pi-small has 512 MiB of RAM and 0 MiB of swap, 512 MiB in all" in text
    assert "os_base_min_memory_mb=1800" in text and "set os_base_grow_swap=true" in text
    assert "Host pi-bullseye: python3 is Python 3.9.2, and TensorFlow 2.21.0 with" in text
    assert "installs on Python 3.11, 3.12, 3.13 only" in text

    # Refused in the first play: no package, user or file was added.
    for name in (armhf, armv6, small, bullseye):
        status = docker(
            "exec", name, "dpkg-query", "-W", "-f=${Status}", "python3-venv", check=False
        )
        assert "installed" not in status.stdout.replace("not-installed", "")
        assert docker("exec", name, "id", "raspi-tf", check=False).returncode != 0
