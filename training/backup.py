"""Share the chief's BackupAndRestore backup with the other workers of a node cluster.

tf_keras' ``BackupAndRestore`` under MultiWorkerMirroredStrategy writes the
backup on the chief only (``<run>/backup/chief``), yet every worker restores
from that same path when it restarts; a worker that finds no backup, or an
older one, starts at another epoch than the chief and the run crashes.
On the local inventory all tasks share one folder.
On nodes each worker's unit runs ``python -m training sync-backup`` before it
starts (``ExecStartPre``): rsync over SSH with the cluster key copies the
chief's folder over the worker's own.

Why a copy and not a shared mount: a Pi that loses its Wi-Fi must not hang on
a dead NFS or sshfs mount, the copy is a few MB (the model and optimizer
state), and it is needed only at a start, when no epoch is being written.

Under ParameterServerStrategy only the chief runs ``fit``, but the variables
live on the ps tasks, and TensorFlow would save and restore each one on its
own ps host. :func:`backup_callback` pins the backup's file I/O to the
chief's CPU (``tf.train.CheckpointOptions(experimental_io_device=...)``), so
the whole backup is on the chief's disk, where a restarted chief reads it.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
from pathlib import Path
from typing import Any

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
    """Remove a worker's copy of the chief's backup once its run has succeeded.

    On the local inventory the folder is the chief's own (no copy): it is
    removed only once empty, by the last task out.
    """
    if (backup_dir / SYNC_MARKER).exists():
        shutil.rmtree(backup_dir, ignore_errors=True)
    _remove_if_empty(backup_dir)


def remove_chief_backup(backup_dir: Path) -> None:
    """Remove the chief's backup, once the run's model and metrics are on disk.

    :func:`backup_callback` keeps the backup when ``fit`` returns (tf_keras
    would delete it there): until the results are written it is the only copy
    of the trained weights, and a task stopped or killed in between must
    leave it.
    """
    shutil.rmtree(backup_dir / "chief", ignore_errors=True)
    _remove_if_empty(backup_dir)


def _remove_if_empty(backup_dir: Path) -> None:
    with contextlib.suppress(OSError):
        backup_dir.rmdir()  # only when empty: the last task out removes it


#: Where a parameter_server run reads and writes its backup: the chief's CPU.
#: Without it TensorFlow runs each variable's SaveV2/RestoreV2 on the ps task
#: that holds it, so the checkpoint would be split over the ps hosts' disks.
CHIEF_IO_DEVICE = "/job:chief/replica:0/task:0/device:CPU:0"


def backup_callback(keras: Any, backup_dir: Path, io_device: str | None = None) -> Any:
    """tf_keras' ``BackupAndRestore`` for ``backup_dir``, its files on one host.

    Args:
        keras: the tf_keras module the model was built with.
        backup_dir: the run's ``backup`` folder; the chief's copy goes to
            ``backup_dir/chief``.
        io_device: None for tf_keras' own callback (multi_worker_mirrored and
            single process: every task saves on its own host). A device name
            such as :data:`CHIEF_IO_DEVICE` makes every save and restore read
            and write files there, through ``tf.train.CheckpointOptions``
            (``experimental_io_device``), which tf_keras does not pass itself.

    Returns:
        A Keras callback; put it first, it restores in ``on_train_begin``. It
        keeps the backup when ``fit`` returns (``delete_checkpoint=False``):
        call :func:`remove_chief_backup` once the results are saved.
    """
    if io_device is None:
        return keras.callbacks.BackupAndRestore(backup_dir=str(backup_dir), delete_checkpoint=False)

    import tensorflow as tf
    from tf_keras.src.distribute.worker_training_state import WorkerTrainingState

    options = tf.train.CheckpointOptions(experimental_io_device=io_device)

    class _OneDiskState(WorkerTrainingState):
        # The coordinator (chief) is the only task that runs the callback, and
        # it is the checkpointing task: read and write managers are the same.
        def back_up(self, epoch: int, batch: int = 0) -> None:
            self.write_checkpoint_manager.save(options=options)

        def restore(self) -> None:
            latest = self.read_checkpoint_manager.latest_checkpoint
            if latest:
                self.read_checkpoint_manager.checkpoint.restore(latest, options=options)

    class _OneDiskBackupAndRestore(keras.callbacks.BackupAndRestore):
        def on_train_begin(self, logs: Any = None) -> None:
            # tf_keras 2.21's on_train_begin with its state class swapped.
            model = self.model
            optimizer = model.optimizer
            if model.built and optimizer is not None and not getattr(optimizer, "_built", False):
                optimizer.build(model.trainable_variables)
            model._training_state = _OneDiskState(
                model, self.backup_dir, self.save_freq, self.save_before_preemption
            )
            self._training_state = model._training_state
            self._training_state.restore()

    return _OneDiskBackupAndRestore(backup_dir=str(backup_dir), delete_checkpoint=False)
