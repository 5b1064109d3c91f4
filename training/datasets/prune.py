"""Remove prepared datasets a folder no longer needs: old ids, and shards a node no longer reads.

Every changed photo, setting or shard count prepares a dataset under a new
id (:func:`training.datasets.shards.dataset_id`), and each node keeps the
shards it received in ``<training_data_dir>/<id>/``. On a Pi's SD card
those folders fill the disk. :func:`prune` keeps the ``keep`` datasets used
most recently (the folder's modification time; staging or preparing a
dataset marks it used) and every dataset a process on the machine still
names in its command line (a task reads ``--dataset <id>``; a script gets
``<data-dir>/<id>``). In the folder of the dataset in use it can also
remove the train shards that are not in a list: those a node held for the
worker layout of an earlier run, which a ``parameter_server`` worker
(it reads every train shard its node holds) would read as its own. Test
shards stay: only the evaluating task reads them, by the manifest's list.

Only folders whose name is a dataset id (:data:`~training.datasets.shards.ID_PATTERN`)
are touched: downloads and anything else in the folder stay.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.datasets._base import DatasetError
from training.datasets.shards import ID_PATTERN

#: The train shards of a prepared folder (:func:`~training.datasets.shards.train_shard_name`).
TRAIN_SHARDS = "train-*-of-*.rec"
#: A train shard's name: its index and the dataset's count of train shards.
SHARD_NAME = re.compile(r"train-(\d{5})-of-(\d{5})\.rec")


@dataclass
class Pruned:
    """What :func:`prune` removed and kept.

    Attributes:
        removed: ids of the dataset folders removed, oldest first.
        removed_files: train shards removed from the current dataset's folder,
            as ``<id>/<file>``.
        freed_bytes: bytes of all the files removed.
        kept: ids of the dataset folders kept, most recently used first.
        in_use: ids kept because a running process names them.
    """

    removed: list[str] = field(default_factory=list)
    removed_files: list[str] = field(default_factory=list)
    freed_bytes: int = 0
    kept: list[str] = field(default_factory=list)
    in_use: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        """Whether anything was removed."""
        return bool(self.removed or self.removed_files)

    def as_json(self) -> dict[str, Any]:
        """The JSON ``prune-data`` prints: these fields and ``changed``."""
        return {
            "changed": self.changed,
            "removed": self.removed,
            "removed_files": self.removed_files,
            "freed_bytes": self.freed_bytes,
            "kept": self.kept,
            "in_use": self.in_use,
        }


def command_lines() -> list[str]:
    """The command line of every process this user may read, arguments joined by spaces.

    From ``/proc/<pid>/cmdline`` on Linux; elsewhere (a macOS control node)
    from ``ps``. A process that ends while it is read is left out.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        out = subprocess.run(
            ["ps", "-axww", "-o", "command="], capture_output=True, text=True, check=True
        )
        return out.stdout.splitlines()
    lines = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if raw:
            lines.append(raw.replace(b"\0", b" ").decode(errors="replace"))
    return lines


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def _remove(path: Path) -> None:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except OSError as err:
        raise DatasetError(
            f"cannot remove {path}: {err.strerror}. Fix: run as the folder's owner (root on a "
            "node: the playbooks become root for this)"
        ) from None


def _check_shard_names(here: Path, names: set[str]) -> None:
    """Refuse names that are not train shards of the dataset in ``here``: they would keep none.

    A train shard is ``train-<j>-of-<count>.rec`` with ``j < count``
    (:func:`~training.datasets.shards.train_shard_name`), and one dataset's
    shards all have the same count: that of the shards in ``here``.
    """
    present = {p.name for p in here.glob(TRAIN_SHARDS)}
    counts = set()
    bad = []
    for name in sorted(names | present):
        match = SHARD_NAME.fullmatch(name)
        if match is None or int(match[1]) >= int(match[2]):
            bad.append(name)
        else:
            counts.add(match[2])
    if bad or len(counts) > 1:
        theirs = f"its files are {min(present)} to {max(present)}" if present else "it has none"
        raise DatasetError(
            f"{', '.join(bad or sorted(names - present))} "
            f"{'do' if len(bad) > 1 else 'does'} not name a train shard of {here} ({theirs}); "
            "nothing was removed. Fix: give the names of its train shards this folder keeps"
        )


def prune(
    data_dir: Path | str,
    keep: int,
    current: str | None = None,
    train_shards: Sequence[str] | None = None,
    running: Iterable[str] | None = None,
) -> Pruned:
    """Remove the dataset folders in ``data_dir`` beyond the ``keep`` most recently used.

    ``current`` is marked used now (its folder's modification time) and is
    always kept. A folder whose id appears in a running process's command
    line is kept whatever its age. Folders whose name is not a dataset id,
    and plain files, are left alone.

    Args:
        data_dir: a folder of prepared or staged datasets, ``<data_dir>/<id>/``.
        keep: dataset folders to keep, ``current`` included; 1 or more.
        current: the id of the dataset in use now, if any.
        train_shards: with ``current``: the train shard files
            (``train-*.rec``) ``<data_dir>/<current>/`` keeps; its other
            train shards are removed. None keeps them all.
        running: the command lines to look for ids in; default
            :func:`command_lines`.

    Returns:
        What was removed and kept.

    Raises:
        DatasetError: ``keep`` below 1, ``data_dir`` not a folder,
            ``current`` not a dataset id or not in ``data_dir``, a name in
            ``train_shards`` that is not one of its train shards (nothing is
            removed then), or a folder that cannot be removed.
    """
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
        raise DatasetError(
            f"keep {keep!r} (--keep, training_data_keep) must be a whole number, 1 or more: "
            "the dataset in use counts as one. Fix: training_data_keep=3"
        )
    folder = Path(data_dir)
    if not folder.is_dir():
        raise DatasetError(
            f"{folder} is not a folder. Fix: give the folder of datasets (.cache/datasets on the "
            "control node, training_data_dir on a node)"
        )
    result = Pruned()
    if current is not None:
        here = folder / current
        if not ID_PATTERN.fullmatch(current) or not here.is_dir():
            raise DatasetError(
                f"{here} is not a prepared dataset's folder. Fix: give the id of a dataset "
                f"in {folder}"
            )
        if train_shards is not None:
            wanted = set(train_shards)
            _check_shard_names(here, wanted)
            for path in sorted(here.glob(TRAIN_SHARDS)):
                if path.name not in wanted:
                    result.freed_bytes += _size(path)
                    _remove(path)
                    result.removed_files.append(f"{current}/{path.name}")
        os.utime(here)
    found = [p for p in folder.iterdir() if p.is_dir() and ID_PATTERN.fullmatch(p.name)]
    found.sort(key=lambda p: (p.name != current, -p.stat().st_mtime, p.name))
    result.kept = [p.name for p in found[:keep]]
    beyond = found[keep:]
    # The processes are read only when a folder could go: on each staging, most nodes have none.
    lines = list(command_lines() if running is None else running) if beyond else []
    for path in beyond:
        if any(path.name in line for line in lines):
            result.kept.append(path.name)
            result.in_use.append(path.name)
        else:
            result.freed_bytes += _size(path)
            _remove(path)
            result.removed.append(path.name)
    result.removed.reverse()
    return result
