"""Filters deciding which files of a prepared dataset each host receives.

A prepared dataset (``python -m training prepare-data``) is ``dataset.json``
plus train shard files and test shard files. Under TensorFlow's FILE
auto-shard policy worker ``i`` of ``N`` reads the train shards ``j`` with
``j % N == i`` (``tf.data.experimental.AutoShardPolicy.FILE``: the list of
files is sharded, then each worker reads its own), so a host needs only the
shards of the worker tasks it runs, and only the host of a task that
evaluates (the chief) needs the test split.

- ``prepared | training_data_host_files(worker_hosts, chief_hosts, host)``:
  the file names ``host`` receives, ``dataset.json`` first.
- ``train_shards | training_data_worker_shards(num_workers)``: the train
  shard names of each worker index, a list per worker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError

#: The manifest every host receives: tasks read the input shape and classes from it.
MANIFEST = "dataset.json"


def training_data_worker_shards(train_shards: Sequence[str], num_workers: int) -> list[list[str]]:
    """The train shards each worker reads under the FILE policy: shard j goes to worker j % N.

    Args:
        train_shards: the train shard file names, in shard order.
        num_workers: the number of worker tasks, 1 or more.

    Returns:
        ``num_workers`` lists of file names, in worker-index order; each in shard order.

    Raises:
        AnsibleFilterError: ``num_workers`` below 1, or fewer shards than workers (a worker
            would read nothing, and TensorFlow's FILE policy refuses that).
    """
    workers = int(num_workers)
    if workers < 1:
        raise AnsibleFilterError(f"training_data: {workers} worker tasks; a run needs 1 or more")
    shards = list(train_shards)
    if len(shards) < workers:
        raise AnsibleFilterError(
            f"training_data: {len(shards)} train shards for {workers} worker tasks; each worker "
            "needs at least one (prepare-data --workers raises the shard count to the workers)"
        )
    return [shards[index::workers] for index in range(workers)]


def training_data_host_files(
    prepared: Mapping[str, Any],
    worker_hosts: Sequence[str],
    chief_hosts: Sequence[str],
    host: str,
) -> list[str]:
    """The files of a prepared dataset that ``host`` receives.

    Args:
        prepared: what ``prepare-data`` printed: ``train_shards`` and ``test_shards`` (file
            names, in shard order).
        worker_hosts: the host of each worker task, in worker-index order (a host that runs
            two worker tasks is listed twice).
        chief_hosts: the hosts whose task evaluates on the test split.
        host: the inventory host name.

    Returns:
        ``dataset.json``, then the train shards of the host's worker tasks (in shard order),
        then the test shards if the host is in ``chief_hosts``.

    Raises:
        AnsibleFilterError: no worker task, or fewer shards than worker tasks.
    """
    hosts = list(worker_hosts)
    shards = list(prepared.get("train_shards", []))
    training_data_worker_shards(shards, len(hosts))  # refuses too few shards or no worker
    mine = {index for index, name in enumerate(hosts) if name == host}
    train = [name for j, name in enumerate(shards) if j % len(hosts) in mine]
    test = list(prepared.get("test_shards", [])) if host in chief_hosts else []
    return [MANIFEST, *train, *test]


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        """Filter name -> function."""
        return {
            "training_data_host_files": training_data_host_files,
            "training_data_worker_shards": training_data_worker_shards,
        }
