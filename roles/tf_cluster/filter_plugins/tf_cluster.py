"""Filters deriving the TensorFlow cluster from the inventory.

They wrap :func:`training.cluster.derive_cluster`, so the rules that refuse a
bad cluster are the same code on the control node and in every task.

- ``groups | tf_cluster(hostvars, strategy, job_groups, default_ports)``:
  the cluster dict (``cluster``, ``tasks``, ``chief``); fails the task with the
  problem if the inventory is wrong.
- ``groups | tf_cluster_problem(hostvars, strategy, job_groups, default_ports)``:
  the problem as a string, ``''`` if there is none, for ``assert`` messages.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

try:
    from training.cluster import ClusterConfigError, derive_cluster
except ImportError:  # not installed: use the checkout this role lives in
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from training.cluster import ClusterConfigError, derive_cluster

from ansible.errors import AnsibleFilterError


class _WithDefaultPorts(Mapping[str, Any]):
    """A host's variables, with ``tf_cluster_ports`` defaulted."""

    def __init__(self, hostvars: Mapping[str, Any], default_ports: Mapping[str, Any]) -> None:
        self._hostvars = hostvars
        self._default = default_ports

    def __getitem__(self, host: str) -> Mapping[str, Any]:
        hv = self._hostvars[host]
        return {
            "tf_cluster_address": hv.get("tf_cluster_address"),
            "ansible_host": hv.get("ansible_host"),
            "tf_cluster_ports": hv.get("tf_cluster_ports") or self._default,
        }

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self._hostvars)

    def __len__(self) -> int:
        return len(self._hostvars)


def _derive(
    groups: Mapping[str, Any],
    hostvars: Mapping[str, Any],
    strategy: str,
    job_groups: Mapping[str, str],
    default_ports: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    return derive_cluster(
        {k: list(v) for k, v in groups.items()},
        _WithDefaultPorts(hostvars, dict(default_ports or {})),
        str(strategy),
        dict(job_groups),
    )


def tf_cluster(*args: Any) -> dict[str, Any]:
    """The derived cluster; raises AnsibleFilterError with the inventory problem."""
    try:
        return _derive(*args)
    except ClusterConfigError as err:
        raise AnsibleFilterError(str(err)) from None


def tf_cluster_problem(*args: Any) -> str:
    """What is wrong with the inventory's cluster, or '' when nothing is."""
    try:
        _derive(*args)
    except ClusterConfigError as err:
        return str(err)
    return ""


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        """Filter name -> function."""
        return {"tf_cluster": tf_cluster, "tf_cluster_problem": tf_cluster_problem}
