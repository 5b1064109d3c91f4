"""Every role default is documented where `ansible-doc -t role` shows it to a user."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
ROLES = sorted(p.parent.parent for p in ROOT.glob("roles/*/meta/argument_specs.yml"))


@pytest.mark.parametrize("role", ROLES, ids=lambda p: p.name)
def test_every_default_has_a_described_option(role: Path) -> None:
    defaults_file = role / "defaults/main.yml"
    defaults = yaml.safe_load(defaults_file.read_text()) if defaults_file.exists() else {}
    specs = yaml.safe_load((role / "meta/argument_specs.yml").read_text())["argument_specs"]
    options: dict[str, dict] = {}
    for entry in specs.values():
        options |= entry.get("options", {})
    missing = sorted(set(defaults or {}) - set(options))
    assert not missing, f"roles/{role.name}/meta/argument_specs.yml lacks {missing}"
    for name in defaults or {}:
        option = options[name]
        assert option.get("description"), f"{role.name}: {name} has no description"
        assert "type" in option, f"{role.name}: {name} has no type"
