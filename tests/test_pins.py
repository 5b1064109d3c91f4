"""One TensorFlow release everywhere: the control venv's pins match what the nodes get."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def pins(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            name, version = line.split("==")
            out[name.split("[")[0].lower()] = version
    return out


def test_every_control_requirement_is_pinned() -> None:
    for path in (ROOT / "requirements.txt", ROOT / "requirements-tf-keras.txt"):
        for line in path.read_text().splitlines():
            line = line.split("#")[0].strip()
            assert not line or "==" in line, f"{path.name}: {line!r} is not pinned"


def test_node_runtime_matches_control_venv() -> None:
    control = pins(ROOT / "requirements.txt") | pins(ROOT / "requirements-tf-keras.txt")
    defaults = yaml.safe_load((ROOT / "roles/tf_runtime/defaults/main.yml").read_text())
    version = defaults["tf_runtime_tensorflow_version"]
    assert control["tensorflow-cpu"] == version
    assert control["tf-keras"] == version
    assert control["tensorboard"] == version
    node = {
        p.split("==")[0]: p.split("==")[1] for p in defaults["tf_runtime_packages"] if "{{" not in p
    }
    assert node["numpy"] == control["numpy"]
