"""Share the chief's BackupAndRestore backup with the other workers of a node cluster.

tf_keras' ``BackupAndRestore`` under MultiWorkerMirroredStrategy writes the
backup on the chief only (``<run>/backup/chief``), yet every worker restores
from that same path when it restarts; a worker that finds no backup, or an
older one, starts at another epoch than the chief and the run crashes
(../shared/TESTBED.md). On the local inventory all tasks share one folder.
On nodes each worker's unit runs ``python -m training sync-backup`` before it
starts (``ExecStartPre``): rsync over SSH with the cluster key copies the
chief's folder over the worker's own.

Why a copy and not a shared mount: a Pi that loses its Wi-Fi must not hang on
a dead NFS or sshfs mount, the copy is a few MB (the model and optimizer
state), and it is needed only at a start, when no epoch is being written.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)

#: Written next to a copied backup, so the worker removes only copies, never
#: the chief's own backup (on the local inventory they are the same folder).
SYNC_MARKER = ".synced-from-chief"
#: rsync's exit status when the source does not exist ("partial transfer").
RSYNC_PARTIAL = 23
SSH_OPTIONS = "ssh -o BatchMode=yes -o ConnectTimeout=10"


class BackupSyncError(RuntimeError):
    """The chief's backup could not be read (chief unreachable, SSH refused)."""


def sync_from_chief(source: str, backup_dir: Path, timeout: float = 300.0) -> bool:
    """Make ``backup_dir/chief`` a copy of the chief's ``backup/chief`` folder.

    Args:
        source: ``user@host:/path/to/run/backup``, the chief's backup folder.
        backup_dir: this worker's ``<run>/backup``.
        timeout: most seconds the copy may take.

    Returns:
        True if the chief had a backup and it was copied; False if it has none
        yet (first start), after removing any stale local copy.

    Raises:
        BackupSyncError: rsync failed otherwise (host unreachable, SSH refused,
            timeout): the task must not start from a different epoch than the
            chief, so its unit fails and systemd tries again.
    """
    dest = backup_dir / "chief"
    dest.parent.mkdir(parents=True, exist_ok=True)
    remote = source.rstrip("/") + "/chief/"
    argv = ["rsync", "-a", "--delete", "-e", SSH_OPTIONS, remote, f"{dest}/"]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise BackupSyncError(f"cannot copy the chief's backup from {source}: {err}") from None
    if result.returncode == RSYNC_PARTIAL and "No such file or directory" in result.stderr:
        shutil.rmtree(dest, ignore_errors=True)
        log.info("the chief has no backup yet at %s: starting from epoch 0", source)
        return False
    if result.returncode != 0:
        raise BackupSyncError(
            f"cannot copy the chief's backup from {source} (rsync exit {result.returncode}): "
            f"{result.stderr.strip()[-500:]}"
        )
    (backup_dir / SYNC_MARKER).touch()
    log.info("copied the chief's backup from %s to %s", source, dest)
    return True


def remove_synced_backup(backup_dir: Path) -> None:
    """Remove a worker's copy of the chief's backup once its run has succeeded."""
    if (backup_dir / SYNC_MARKER).exists():
        shutil.rmtree(backup_dir, ignore_errors=True)
