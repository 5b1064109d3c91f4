"""The facts of the machine a benchmark runs on: CPU model, cores, memory, versions.

``make bench`` records them into ``runs/bench-<id>/machine.json`` before its
first case (``python -m training machine --out ...``), so that the report
names the machine that measured, wherever the report itself runs. This
module imports no TensorFlow: the version comes from the installed
package's metadata.
"""

from __future__ import annotations

import json
import os
import platform
import re
from importlib import metadata
from pathlib import Path
from typing import Any

MACHINE_FILE = "machine.json"
#: The distributions TensorFlow is installed as, in the order they are looked for.
TENSORFLOW_DISTRIBUTIONS = (
    "tensorflow-cpu",
    "tensorflow",
    "tensorflow-aarch64",
    "tensorflow-intel",
    "tensorflow-macos",
)
#: ``/proc/cpuinfo`` keys that name the CPU: x86 kernels give ``model name``,
#: some ARM kernels only ``Model`` (the board) or ``Hardware`` (the SoC).
_CPUINFO_KEYS = ("model name", "Model", "Hardware")


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name, e.g. ``AMD EPYC 7B13 64-Core Processor``.

    Args:
        cpuinfo: the text of ``/proc/cpuinfo``; None reads this machine's.

    Returns:
        The first of ``_CPUINFO_KEYS`` found, else :func:`platform.processor`,
        else the architecture (``x86_64``, ``aarch64``).
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip():
            fields.setdefault(key.strip(), " ".join(value.split()))
    for key in _CPUINFO_KEYS:
        if key in fields:
            return fields[key]
    return platform.processor() or platform.machine() or "unknown CPU"


def cpu_slug(model: str) -> str:
    """``model`` as a file-name part: lower case, ASCII letters and digits joined by ``-``.

    ``Intel(R) Xeon(R) CPU @ 2.20GHz`` gives ``intel-xeon-cpu-2-20ghz``; at
    most 60 characters; ``unknown-cpu`` when nothing is left.
    """
    text = re.sub(r"\((r|tm)\)", " ", model.lower())
    slug = re.sub(r"[^a-z0-9]+", "-", text).strip("-")[:60].strip("-")
    return slug or "unknown-cpu"


def memory_bytes() -> int | None:
    """Physical memory of this machine in bytes; None where the system does not say."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (AttributeError, ValueError, OSError):
        return None


def tensorflow_version() -> str | None:
    """The installed TensorFlow's version, from its package metadata; None if none is."""
    for name in TENSORFLOW_DISTRIBUTIONS:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def machine_facts() -> dict[str, Any]:
    """The facts of the machine this runs on, read now.

    Returns:
        ``cpu_model``, ``cores`` (logical CPUs), ``memory_bytes``,
        ``tensorflow_version``, ``python_version``, ``system`` (kernel and
        release) and ``architecture``.
    """
    return {
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "memory_bytes": memory_bytes(),
        "tensorflow_version": tensorflow_version(),
        "python_version": platform.python_version(),
        "system": f"{platform.system()} {platform.release()}",
        "architecture": platform.machine(),
    }


def read_machine(folder: Path) -> dict[str, Any]:
    """The facts recorded in ``folder/machine.json``, else this machine's.

    Returns:
        :func:`machine_facts`' keys and ``recorded``: True when they come
        from the file, False when the file is missing or unreadable and
        they describe the machine reading them.
    """
    try:
        facts = json.loads((folder / MACHINE_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {**machine_facts(), "recorded": False}
    if not isinstance(facts, dict) or not facts.get("cpu_model"):
        return {**machine_facts(), "recorded": False}
    return {**facts, "recorded": True}


def write_machine(path: Path) -> dict[str, Any]:
    """Write :func:`machine_facts` to ``path`` as JSON (its folder made if missing)."""
    facts = machine_facts()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(facts, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
    return facts
