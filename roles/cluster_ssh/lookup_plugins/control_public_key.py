"""Lookup control_public_key: the control node's public key that cluster_ssh authorises.

A control node may hold one key, several or none in ``~/.ssh``, or log in with a
key named in the inventory (``ansible_ssh_private_key_file``). The role authorises
one key for the account Ansible logs in with, chosen here so that a second run of
site.yml logs in with a key the nodes already trust, and refuses with the fix
when there is none to choose.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

DOCUMENTATION = """
name: control_public_key
short_description: The control node's public key that cluster_ssh authorises on a node
description:
  - Returns one dict with keys C(path) (the public key file) and C(key) (its first line),
    or no element when the setting is empty (authorise nothing).
  - With the setting C(auto), the key is the C(.pub) beside O(private_key_file) when the
    inventory names one, or else the first of C(~/.ssh/id_ed25519.pub),
    C(~/.ssh/id_ecdsa.pub) and C(~/.ssh/id_rsa.pub) that exists (default identities that
    ssh offers by itself).
  - Raises an error naming O(host), the file and the fix when the chosen file is missing,
    unreadable, or holds no public key (a private key, for instance).
options:
  _terms:
    description: The setting cluster_ssh_control_public_key_file (auto, a path, or empty).
    required: true
  private_key_file:
    description: The host's ansible_ssh_private_key_file, empty when the inventory names none.
    type: str
    default: ""
  home:
    description: The control node's home folder (the default, ~, for tests).
    type: str
    default: "~"
  host:
    description: The inventory host the key is for, named in errors.
    type: str
    default: ""
"""

#: The default identities of ssh(1) (``-i``), in the order the role prefers them:
#: ed25519, the type the README makes with ``ssh-keygen -t ed25519``, first.
DEFAULT_KEYS = ("id_ed25519", "id_ecdsa", "id_rsa")

#: How a public key line starts (sshd(8), AUTHORIZED_KEYS FILE FORMAT), options aside.
KEY_TYPES = ("ssh-", "ecdsa-sha2-", "sk-")

SETTING = "cluster_ssh_control_public_key_file"


def choose(
    setting: str, private_key_file: str = "", home: str = "~", host: str = ""
) -> Path | None:
    """The public key file to authorise, or None when ``setting`` is empty.

    Args:
        setting: ``auto``, a path (``~`` expanded) or ``""``.
        private_key_file: the host's ``ansible_ssh_private_key_file``, or ``""``.
        home: the control node's home folder.
        host: the inventory host, for error messages.

    Raises:
        AnsibleLookupError: ``auto`` found no key, or a named file is missing.
    """
    where = f"{host}: " if host else ""
    if not setting:
        return None
    if setting != "auto":
        path = Path(setting).expanduser()
        if not path.is_file():
            raise AnsibleLookupError(
                f"{where}{SETTING} is {setting}, which does not exist on the control node. "
                f"Name your public key (ls ~/.ssh/*.pub), or set {SETTING}: auto to use the "
                "key ssh would offer, or '' to authorise none."
            )
        return path
    if private_key_file:
        private = Path(private_key_file).expanduser()
        path = private.with_name(private.name + ".pub")
        if not path.is_file():
            raise AnsibleLookupError(
                f"{where}ansible_ssh_private_key_file is {private_key_file}, but {path} does not "
                f"exist, and cluster_ssh authorises that key on the node. Write it with "
                f"`ssh-keygen -y -f {private} > {path}`, or name the public key in {SETTING}."
            )
        return path
    folder = Path(home).expanduser() / ".ssh"
    for name in DEFAULT_KEYS:
        path = folder / f"{name}.pub"
        if path.is_file():
            return path
    looked = ", ".join(f"{name}.pub" for name in DEFAULT_KEYS)
    raise AnsibleLookupError(
        f"{where}the control node has no SSH key to authorise on the nodes: none of {looked} "
        f"is in {folder}. Make one with `ssh-keygen -t ed25519` and copy it to each node once "
        f"(`ssh-copy-id`), or name yours in {SETTING} (or ansible_ssh_private_key_file), or set "
        f"{SETTING}: '' to authorise none."
    )


def read(path: Path, host: str = "") -> str:
    """The public key line of ``path`` (``type base64 [comment]``).

    Raises:
        AnsibleLookupError: ``path`` cannot be read or holds no public key.
    """
    where = f"{host}: " if host else ""
    try:
        text = path.read_text(errors="replace")
    except OSError as err:
        raise AnsibleLookupError(f"{where}cannot read {path} ({err.strerror}).") from err
    lines = [
        line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
    ]
    if not lines or not lines[0].startswith(KEY_TYPES):
        private = "PRIVATE KEY" in text
        raise AnsibleLookupError(
            f"{where}{path} holds no SSH public key"
            + (" (it is a private key: name the .pub file beside it)" if private else "")
            + f". Set {SETTING} to a public key (ls ~/.ssh/*.pub)."
        )
    return lines[0]


class LookupModule(LookupBase):
    """The lookup ``query('control_public_key', setting, ...)``: see DOCUMENTATION."""

    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """``[{"path": ..., "key": ...}]``, or ``[]`` when the setting is empty."""
        self.set_options(var_options=variables, direct=kwargs)
        setting = str(terms[0]) if terms else ""
        host = self.get_option("host")
        path = choose(setting, self.get_option("private_key_file"), self.get_option("home"), host)
        if path is None:
            return []
        return [{"path": str(path), "key": read(path, host)}]
