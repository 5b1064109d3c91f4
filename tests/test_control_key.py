"""Which key of the control node site.yml authorises on the nodes, and what it says without one."""

from __future__ import annotations

import getpass
import importlib.util
import json
import os
import shutil
from pathlib import Path

import pytest
from ansible.errors import AnsibleLookupError

from tests.conftest import BIN, ROOT, run_playbook

_spec = importlib.util.spec_from_file_location(
    "control_public_key", ROOT / "roles/cluster_ssh/lookup_plugins/control_public_key.py"
)
assert _spec and _spec.loader
lookup = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lookup)

ED25519 = (
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOv8WfKRbP9FZ1VZmSJ2wSX6m7PAJ3Vt4bQ1q4Vd7h3k me@laptop"
)
RSA = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 me@laptop"


def _keys(home: Path, **keys: str) -> Path:
    """``home/.ssh`` holding ``name.pub`` for each keyword."""
    folder = home / ".ssh"
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in keys.items():
        (folder / f"{name}.pub").write_text(text + "\n")
    return folder


def test_of_several_keys_the_ed25519_one_is_chosen(tmp_path: Path) -> None:
    folder = _keys(tmp_path, id_rsa=RSA, id_ed25519=ED25519)
    assert lookup.choose("auto", home=str(tmp_path)) == folder / "id_ed25519.pub"


def test_a_single_rsa_key_is_chosen(tmp_path: Path) -> None:
    folder = _keys(tmp_path, id_rsa=RSA)
    assert lookup.choose("auto", home=str(tmp_path)) == folder / "id_rsa.pub"


def test_the_inventorys_private_key_names_its_public_key(tmp_path: Path) -> None:
    _keys(tmp_path, id_ed25519=ED25519)
    private = tmp_path / "keys" / "pis"
    private.parent.mkdir()
    private.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    Path(f"{private}.pub").write_text(RSA)
    assert lookup.choose("auto", str(private), home=str(tmp_path)) == Path(f"{private}.pub")


def test_a_private_key_without_its_public_one_gives_the_command_that_writes_it(
    tmp_path: Path,
) -> None:
    private = tmp_path / "pis"
    with pytest.raises(
        AnsibleLookupError, match=r"pi1: ansible_ssh_private_key_file .*ssh-keygen -y"
    ):
        lookup.choose("auto", str(private), home=str(tmp_path), host="pi1")


def test_no_key_names_the_folder_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(AnsibleLookupError) as err:
        lookup.choose("auto", home=str(tmp_path), host="pi1")
    message = str(err.value)
    assert message.startswith("pi1: the control node has no SSH key")
    assert str(tmp_path / ".ssh") in message
    assert "ssh-keygen -t ed25519" in message
    assert "cluster_ssh_control_public_key_file: ''" in message


def test_a_named_file_that_is_missing_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AnsibleLookupError, match=r"control_public_key_file is .*does not exist"):
        lookup.choose(str(tmp_path / "nope.pub"), home=str(tmp_path))


def test_an_empty_setting_authorises_nothing(tmp_path: Path) -> None:
    _keys(tmp_path, id_ed25519=ED25519)
    assert lookup.choose("", home=str(tmp_path)) is None


def test_a_private_key_named_as_the_public_one_is_refused(tmp_path: Path) -> None:
    private = tmp_path / "id_ed25519"
    private.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n")
    with pytest.raises(AnsibleLookupError, match=r"it is a private key: name the \.pub file"):
        lookup.read(lookup.choose(str(private), home=str(tmp_path)))


def _env_without_user(home: Path) -> dict[str, str]:
    """This environment with no USER or LOGNAME, HOME at ``home`` and the venv first on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("USER", "LOGNAME")}
    return {**env, "HOME": str(home), "PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}"}


def _authorise(home: Path) -> tuple[int, str]:
    """Run the role's key tasks on this machine in check mode, as if it were an SSH node."""
    result = run_playbook(
        "tests/playbooks/control_key.yml",
        "--check",
        "-v",
        "-e",
        json.dumps({"__cluster_ssh_connections": ["local"]}),
        env=_env_without_user(home),
        timeout=120,
    )
    return result.returncode, result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("id") is None, reason="needs id(1)")
def test_without_user_set_the_login_account_gets_the_key(tmp_path: Path) -> None:
    _keys(tmp_path, id_rsa=RSA, id_ed25519=ED25519)
    returncode, output = _authorise(tmp_path)
    assert returncode == 0, output[-3000:]
    assert "getpwnam" not in output
    assert f"user: {getpass.getuser()}" in output
    assert "ssh-ed25519 AAAAC3" in output and "ssh-rsa" not in output


def test_without_a_key_the_playbook_stops_with_the_fix(tmp_path: Path) -> None:
    returncode, output = _authorise(tmp_path)
    assert returncode == 2, output[-3000:]
    assert "localhost: the control node has no SSH key" in output
    assert "ssh-keygen -t ed25519" in output
