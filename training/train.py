"""One task of a training run: strategy first, then data, model, ``fit``, save, evaluate.

The same code runs every task; TF_CONFIG says which one. Only the chief
writes the model, the TensorBoard logs, the progress file and the metrics
JSON to the real output folder; every other task writes to a temporary
folder that it removes when it ends (the pattern of TensorFlow's
"Multi-worker training with Keras" tutorial).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import math
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from training import datasets, models
from training.backup import (
    CHIEF_IO_DEVICE,
    backup_callback,
    remove_chief_backup,
    remove_synced_backup,
)
from training.cluster import Task, TFConfig, host_key, is_loopback, parse_tf_config, split_address
from training.datasets import Manifest, ShardFile, pipeline
from training.exporter import Exporter
from training.progress import (
    PROGRESS_FILE,
    ProgressWriter,
    make_callback,
    newest_epochs,
    plural,
    read_events,
)
from training.strategy import (
    ALL_REDUCE_DTYPES,
    ALL_REDUCE_IMPLEMENTATIONS,
    all_reduce_in,
    local_step_metrics,
)
from training.tasklog import StartupWatchdog, open_task_log

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
MODEL_FILE = "model.keras"
#: Beside the model: what a prediction does to raw input (the dataset's preprocessing).
PREPROCESSING_FILE = "preprocessing.json"
TENSORBOARD_DIR = "tensorboard"
BACKUP_DIR = "backup"
#: Test examples per call of the model in the chief's per-epoch evaluation.
EVAL_CHUNK = 500


@dataclass(frozen=True)
class TrainConfig:
    """Everything a task needs besides TF_CONFIG; one field per command-line flag.

    Attributes:
        model: a name from :func:`training.models.available`.
        dataset: a prepared dataset's id (``<name>-<key>``), or a registered
            name (``mnist_5k``): its newest prepared folder in ``data_dir``.
        data_dir: folder holding the staged ``<dataset id>/`` folders.
        strategy: ``multi_worker_mirrored`` or ``parameter_server``.
        epochs: passes over the training set.
        batch_size: examples per worker per step (the per-worker batch).
        learning_rate: Adam step size for one worker's batch; None takes the
            model's ``LEARNING_RATE``.
        learning_rate_scaling: how ``multi_worker_mirrored`` grows the step
            size with its replicas (:func:`training.models.scaled_learning_rate`);
            ``parameter_server`` and a single process keep ``learning_rate``.
        output_dir: the run folder; only the chief writes into it.
        seed: shuffle and weight-initialisation seed, the same on all tasks.
        progress_interval: least seconds between two progress lines.
        run_id: the run's name, recorded in the metrics.
        startup_timeout: seconds a task waits for its cluster to form before
            it exits naming the tasks that do not answer (0: wait forever).
        metrics_port_offset: a task serves Prometheus metrics on its TF_CONFIG
            port plus this offset; 0: no metrics.
        metrics_address: address the metrics bind; empty means 127.0.0.1 when
            the task's TF_CONFIG address is loopback, else every interface.
        threads: TensorFlow's intra-op and inter-op threads for this task;
            0 shares this machine's CPUs (those the process may run on) among
            the run's tasks on this host, at least one each.
        steps_per_execution: training steps in one call of Keras' compiled
            train function; callbacks and progress see every that-many steps.
            0 chooses (:func:`training.models.resolve_steps_per_execution`:
            8 under ``multi_worker_mirrored`` for a model that takes it, else 1).
        all_reduce: ``auto`` or ``ring``, the collective implementation of
            ``multi_worker_mirrored`` (:func:`training.strategy.make_strategy`).
        pack_bytes: gradient bytes per all-reduce pack; 0 lets TensorFlow pack.
        all_reduce_dtype: ``float32``, or ``float16`` to all-reduce the
            gradients in half the bytes (:func:`training.strategy.all_reduce_in`).
        epoch_eval: the chief measures accuracy on the test split after every
            epoch (``test_accuracy`` in the epoch events, TensorBoard and the
            metrics; what time-to-accuracy is read from).
        script: a user's script on this node (script mode,
            :mod:`training.script`): the task runs it instead of ``model``,
            with the arguments of ``RASPI_TF_SCRIPT_ARGS``; empty: raspi-tf's
            own training.
    """

    model: str = "mnist_cnn"
    dataset: str = "mnist_5k"
    data_dir: str = ".cache/datasets"
    strategy: str = "multi_worker_mirrored"
    epochs: int = 8
    batch_size: int = 64
    learning_rate: float | None = None
    learning_rate_scaling: str = "sqrt"
    output_dir: str = "runs/manual"
    seed: int = 42
    progress_interval: float = 10.0
    run_id: str = ""
    startup_timeout: float = 600.0
    metrics_port_offset: int = 0
    metrics_address: str = ""
    threads: int = 0
    steps_per_execution: int = 0
    all_reduce: str = "auto"
    pack_bytes: int = 0
    all_reduce_dtype: str = "float32"
    epoch_eval: bool = True
    script: str = ""


class TrainError(RuntimeError):
    """A run that cannot start: bad flags, a missing dataset file."""


class DivergedError(TrainError):
    """The loss became NaN or infinite: the task exits with ``DIVERGED_EXIT``, not restarted."""


def check(config: TrainConfig, global_batch: bool = True) -> TFConfig | None:
    """Validate everything that can be checked without TensorFlow.

    Args:
        config: the task's settings.
        global_batch: also refuse a training split smaller than one global
            batch (:func:`check_global_batch`); ``python -m training check``
            does that after building the model, whose mismatch comes first.

    Returns:
        The parsed TF_CONFIG, or None when the task trains alone.

    Raises:
        training.cluster.ClusterConfigError: a bad TF_CONFIG.
        training.models.UnknownModelError: an unknown model.
        training.script.ScriptError: a script that is missing, does not parse
            or imports Keras 3 (script mode).
        training.datasets.DatasetError: a dataset that is not staged here, a
            malformed manifest, a missing shard file of this task or one of
            another size, fewer shards than workers, or a training split too
            small for a single global batch.
        TrainError: epochs or batch size below 1, steps_per_execution, threads
            or pack_bytes below 0, an unknown all_reduce or all_reduce_dtype,
            float16 with parameter_server, learning_rate_scaling=linear with
            parameter_server, a learning rate that
            is not a positive finite number, a metrics port (TF_CONFIG port +
            offset) above 65535.
    """
    tf_config = parse_tf_config(os.environ.get("TF_CONFIG"), config.strategy)
    if config.epochs < 1:
        raise TrainError(f"epochs={config.epochs} must be 1 or more")
    if config.batch_size < 1:
        raise TrainError(f"batch_size={config.batch_size} must be 1 or more")
    if config.steps_per_execution < 0:
        raise TrainError(
            f"steps_per_execution={config.steps_per_execution} must be 0 (chosen for the model "
            "and strategy) or more (1: one step per call)"
        )
    if config.threads < 0:
        raise TrainError(f"threads={config.threads} must be 0 (share the CPUs) or more")
    if config.pack_bytes < 0:
        raise TrainError(f"pack_bytes={config.pack_bytes} must be 0 (TensorFlow packs) or more")
    if config.all_reduce not in ALL_REDUCE_IMPLEMENTATIONS:
        raise TrainError(
            f"all_reduce={config.all_reduce} is unknown; choose one of "
            f"{', '.join(ALL_REDUCE_IMPLEMENTATIONS)}"
        )
    if config.all_reduce_dtype not in ALL_REDUCE_DTYPES:
        raise TrainError(
            f"all_reduce_dtype={config.all_reduce_dtype} is unknown; choose one of "
            f"{', '.join(ALL_REDUCE_DTYPES)}"
        )
    if config.all_reduce_dtype != "float32" and config.strategy == "parameter_server":
        raise TrainError(
            f"all_reduce_dtype={config.all_reduce_dtype} applies to multi_worker_mirrored's "
            "all-reduce; parameter_server has none. Fix: all_reduce_dtype=float32"
        )
    if not (math.isfinite(config.startup_timeout) and config.startup_timeout >= 0):
        raise TrainError(f"startup_timeout={config.startup_timeout} must be 0 or more seconds")
    if not 0 <= config.metrics_port_offset < 65535:
        raise TrainError(
            f"training_run_metrics_port_offset={config.metrics_port_offset} must be 0 (no "
            "metrics) to 65534. Fix: -e training_run_metrics_port_offset=1000"
        )
    _metrics_port(config, tf_config)  # raises when the port is above 65535 or a task's
    lr = config.learning_rate
    if lr is not None and not (math.isfinite(lr) and lr > 0):
        raise TrainError(f"learning_rate={lr} must be a positive number, such as 0.001")
    try:
        models.scaled_learning_rate(1.0, 1, config.learning_rate_scaling)
    except ValueError as err:
        raise TrainError(str(err)) from None
    if config.learning_rate_scaling == "linear" and config.strategy == "parameter_server":
        raise TrainError(
            "learning_rate_scaling=linear does not fit strategy=parameter_server: each worker "
            "applies the gradients of its own batch, so its step size is not scaled. Fix: leave "
            "learning_rate_scaling out and set the step size itself (learning_rate=...)"
        )
    if config.script:
        from training.script import check_script

        check_script(Path(config.script))
    else:
        models.get(config.model)
        if config.steps_per_execution > 1:
            models.check_steps_per_execution(config.model)
    if tf_config is not None and tf_config.task.type == "ps":
        return tf_config  # holds variables, reads no data
    manifest = datasets.read_manifest(
        config.data_dir, datasets.prepared_id(config.data_dir, config.dataset)
    )
    datasets.verify_files(manifest, task_shards(manifest, config.strategy, tf_config))
    if global_batch:
        check_global_batch(config, tf_config, manifest.train.examples)
    return tf_config


def replica_count(config: TrainConfig, tf_config: TFConfig | None) -> int:
    """The replicas one step's global batch is split over.

    ``multi_worker_mirrored``: every worker and the chief, one replica each (CPU
    nodes). ``parameter_server`` and one process alone: 1, as each worker
    applies its own batch.
    """
    if tf_config is not None and config.strategy == "multi_worker_mirrored":
        return tf_config.num_workers + len(tf_config.cluster.get("chief", []))
    return 1


def check_global_batch(config: TrainConfig, tf_config: TFConfig | None, n_train: int) -> None:
    """Refuse a training split smaller than one step's global batch.

    Every worker runs the same number of steps an epoch, ``n_train`` over the
    global batch rounded down: a split smaller than one batch makes no step.

    Args:
        config: the task's settings (batch_size, strategy).
        tf_config: the task's TF_CONFIG, None for one process alone.
        n_train: examples in the training split.

    Raises:
        training.datasets.DatasetError: ``n_train`` below batch_size x replicas,
            with both numbers and the fix.
    """
    n = replica_count(config, tf_config)
    if n_train < config.batch_size * n:
        # batch_size 1 is the least: with fewer examples than replicas only more examples do.
        fits = n_train // n
        fix = (
            f"-e batch_size={fits}{' or less' if fits > 1 else ''}, or more examples"
            if fits >= 1
            else f"more examples (at least {n}, one for each replica)"
        )
        raise datasets.DatasetError(
            f"{n_train} training examples are fewer than one step's global batch of "
            f"{config.batch_size * n} (batch_size {config.batch_size} x {plural(n, 'replica')}). "
            f"Fix: {fix}"
        )


#: Fewest optimizer steps in a whole run (epochs x steps per epoch) below which
#: :func:`few_steps` warns. Adam (Kingma and Ba, ICLR 2015) at its default
#: step size of 0.001 moves each weight by at most about that much a step: a
#: hundred steps are where the models of ``training/models/`` start to learn
#: (mnist_cnn on mnist_5k runs 248 in 8 epochs on two workers).
MIN_RUN_STEPS = 100
#: Smallest batch a worker that :func:`few_steps` suggests: below it a step's
#: gradient is mostly noise and each step costs more than its examples.
MIN_SUGGESTED_BATCH = 8


def few_steps(config: TrainConfig, tf_config: TFConfig | None, n_train: int) -> str | None:
    """A warning when the whole run makes fewer than :data:`MIN_RUN_STEPS` steps.

    A small dataset (a few hundred photos) at the default batch of 64 a
    worker makes one or two steps an epoch: the run succeeds and its model
    has barely trained (test accuracy at chance), with no error to say why.

    Args:
        config: the task's settings (epochs, batch_size, strategy).
        tf_config: the task's TF_CONFIG, None for one process alone.
        n_train: examples in the training split.

    Returns:
        The warning, with the steps and the fix, or None.
    """
    n = replica_count(config, tf_config)
    batch = config.batch_size * n
    steps = n_train // batch
    if steps * config.epochs >= MIN_RUN_STEPS:
        return None
    # The fixes, each alone: the epochs at this batch, the largest batch at these epochs.
    epochs = -(-MIN_RUN_STEPS // max(steps, 1))
    per_worker = n_train // -(-MIN_RUN_STEPS // config.epochs) // n
    fixes = [f"-e epochs={epochs}"]
    if MIN_SUGGESTED_BATCH <= per_worker < config.batch_size:
        fixes.insert(0, f"-e batch_size={per_worker}")
    return (
        f"{n_train} training examples make {plural(steps, 'step')} an epoch at a global batch "
        f"of {batch}, {steps * config.epochs} in {plural(config.epochs, 'epoch')}: too few for the "
        f"model to learn much. Fix: {' or '.join(fixes)}, for at least {MIN_RUN_STEPS} steps"
    )


def task_shards(manifest: Manifest, strategy: str, tf_config: TFConfig | None) -> list[ShardFile]:
    """The shard files this task reads, which its node must hold.

    One process alone reads every shard. A training task reads the train
    shards of its index among the run's training tasks
    (:meth:`Manifest.train_files`, :func:`_trainers`): TensorFlow's FILE
    auto-sharding under ``multi_worker_mirrored``, the files staged on its
    node under ``parameter_server``. The chief (worker 0 under
    ``multi_worker_mirrored``) also reads the test shards; a ps task reads none.

    Raises:
        training.datasets.DatasetError: fewer train shards than training tasks.
    """
    if tf_config is None:
        return [*manifest.all_train_files(), *manifest.test_files()]
    trainers = [t.name for t in _trainers(strategy, tf_config)]
    files: list[ShardFile] = []
    if tf_config.task.name in trainers:
        files += manifest.train_files(trainers.index(tf_config.task.name), len(trainers))
    if tf_config.is_chief:
        files += manifest.test_files()
    return files


def _trainers(strategy: str, tf_config: TFConfig) -> list[Task]:
    """The tasks that read training data, in the order of TensorFlow's worker index.

    Under ``multi_worker_mirrored`` that is a ``chief`` task if there is one
    (index 0), then the workers (``multi_worker_util.id_in_cluster``); under
    ``parameter_server``, the workers.
    """
    jobs = ("chief", "worker") if strategy == "multi_worker_mirrored" else ("worker",)
    return [t for t in tf_config.tasks if t.type in jobs]


def _trainer_index(tf_config: TFConfig | None) -> int:
    """The index of this task among the training tasks of multi_worker_mirrored; 0 alone."""
    if tf_config is None:
        return 0
    names = [t.name for t in _trainers("multi_worker_mirrored", tf_config)]
    return names.index(tf_config.task.name) if tf_config.task.name in names else 0


def worker_shards(
    manifest: Manifest, strategy: str, tf_config: TFConfig | None
) -> dict[str, dict[str, Any]]:
    """Each training task's shard files and example count, for the run's record.

    Returns:
        ``{task name: {"files": [...], "examples": n}}``; ``local`` for one
        process alone.
    """
    if tf_config is None:
        return {"local": _shard_record(manifest.all_train_files())}
    trainers = _trainers(strategy, tf_config)
    return {
        task.name: _shard_record(manifest.train_files(i, len(trainers)))
        for i, task in enumerate(trainers)
    }


def _shard_record(files: list[ShardFile]) -> dict[str, Any]:
    return {"files": [s.file for s in files], "examples": sum(s.examples for s in files)}


def saved_results(out: Path, run_id: str) -> dict[str, Any] | None:
    """The metrics of run ``run_id`` if its chief already saved its results in ``out``.

    A chief killed after it wrote ``metrics.json`` and ``model.keras`` but
    before it exited is started again (systemd, the local launcher); its
    workers have finished, so it could not form the cluster again, and its
    backup is gone. With the results whole there is nothing left to do.

    Returns:
        The metrics dict; None when either file is missing, unreadable, or
        belongs to another run, or ``run_id`` is empty (a bare
        ``python -m training train`` into a folder of older results trains).
    """
    if not run_id or not (out / MODEL_FILE).exists():
        return None
    try:
        metrics = json.loads((out / METRICS_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return metrics if isinstance(metrics, dict) and metrics.get("run_id") == run_id else None


def write_end(writer: ProgressWriter, metrics: dict[str, Any]) -> None:
    """Write the run's ``end`` progress event from its metrics (followers read it as done)."""
    writer.write(
        "end",
        test_loss=metrics.get("test_loss"),
        test_accuracy=metrics.get("test_accuracy"),
        train_seconds=metrics.get("train_seconds"),
        examples_per_second=metrics.get("examples_per_second"),
    )


def steady_rate(epoch_seconds: list[float], examples_per_epoch: int) -> float:
    """Examples/s over the epochs after the first, which also traces and warms up.

    Args:
        epoch_seconds: wall seconds of each epoch, in order.
        examples_per_epoch: examples one epoch trains on (steps x global batch).

    Returns:
        The rate in examples/s, rounded to 0.1; over the only epoch if there
        is one; 0.0 if there is none.
    """
    timed = epoch_seconds[1:] or epoch_seconds
    if not timed:
        return 0.0
    return round(examples_per_epoch * len(timed) / sum(timed), 1)


def usable_cpus(cgroup_root: Path = Path("/sys/fs/cgroup")) -> int:
    """CPUs this process can keep busy: its affinity mask, capped by any cgroup CPU quota.

    The quota (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` over
    ``cpu.cfs_period_us``) of this process's cgroup and of every parent is
    read; a container started with ``--cpus 1`` on a 4-core host gives 1.
    Rounded up, at least 1.
    """
    cpus = len(os.sched_getaffinity(0))
    try:
        lines = Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines()
    except OSError:
        return cpus
    names: tuple[str, ...]
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            base, names = cgroup_root, ("cpu.max",)
        elif "cpu" in controllers.split(","):
            base, names = cgroup_root / controllers, ("cpu.cfs_quota_us", "cpu.cfs_period_us")
        else:
            continue
        folder = base / path.lstrip("/")
        while True:
            quota = _cpu_quota(folder, names)
            if quota:
                cpus = min(cpus, max(1, math.ceil(quota)))
            if folder == base or base not in folder.parents:
                break
            folder = folder.parent
    return cpus


def _cpu_quota(folder: Path, names: tuple[str, ...]) -> float | None:
    try:
        values = [(folder / n).read_text(encoding="utf-8").split() for n in names]
    except OSError:
        return None
    if len(names) == 1:  # v2: "<quota|max> <period>"
        quota, period = values[0][0], values[0][1]
    else:
        quota, period = values[0][0], values[1][0]
    if quota in ("max", "-1"):
        return None
    return int(quota) / int(period)


def thread_count(config: TrainConfig, tf_config: TFConfig | None) -> int:
    """Threads per pool for this task: ``config.threads``, or this host's share.

    The share is :func:`usable_cpus` divided by the run's tasks with this
    task's host in TF_CONFIG, at least 1: two workers on a 2-core machine get
    one thread each instead of two each fighting over both cores, and a node
    held to one core's CPU time runs one thread instead of bursting into its
    quota and being throttled for the rest of each period.
    """
    if config.threads:
        return config.threads
    return max(1, usable_cpus() // _tasks_here(tf_config))


def _tasks_here(tf_config: TFConfig | None) -> int:
    if tf_config is None:
        return 1
    return max(1, sum(1 for t in tf_config.tasks if t.host == tf_config.task.host))


def oversubscribed(config: TrainConfig, tf_config: TFConfig | None) -> str | None:
    """A warning when ``config.threads`` gives this host more busy threads than CPUs.

    The run's tasks on this task's host each run ``threads`` intra-op
    threads; more of them than :func:`usable_cpus` take turns on the cores
    and every step waits for the slowest, which makes training many times
    slower. ``threads=0`` is never oversubscribed.

    Args:
        config: the task's settings; only ``threads`` is read.
        tf_config: the task's TF_CONFIG, None for one process alone.

    Returns:
        The warning, naming the fix, or None.
    """
    if not config.threads:
        return None
    cpus = usable_cpus()
    here = _tasks_here(tf_config)
    if config.threads * here <= cpus:
        return None
    share = max(1, cpus // here)
    return (
        f"threads={config.threads} with {plural(here, 'task')} of the run on this host keeps "
        f"{config.threads * here} "
        f"threads computing on {cpus} usable CPU(s): they take turns and every step is slower. "
        f"Fix: -e threads=0 (each task's share, {share} here) or at most {share}"
    )


#: Seconds a stopped task's main thread gets to unwind on its own before the
#: stop ends the process: it may be blocked inside a collective whose partner
#: has already gone, where no Python signal handler runs.
STOP_GRACE_SECONDS = 3.0


@dataclass
class _Stop:
    """A SIGTERM this task received, and whether it is being held."""

    signum: int = 0
    holding: bool = False
    cleanups: list[Any] = field(default_factory=list)
    watching: bool = False


_STOP = _Stop()


def stop_requested() -> int:
    """The exit status a received SIGTERM asks for (143), or 0 if none came."""
    return 128 + _STOP.signum if _STOP.signum else 0


def _exit_on_sigterm(signum: int, _frame: Any) -> None:
    _STOP.signum = signum
    if not _STOP.holding:
        raise SystemExit(128 + signum)


def _watch_for_sigterm(read_fd: int) -> None:
    while True:
        if signal.SIGTERM not in os.read(read_fd, 64):
            continue
        _STOP.signum = signal.SIGTERM
        while True:
            time.sleep(STOP_GRACE_SECONDS)
            if not _STOP.holding:
                break
        log.warning("stopped: the task did not unwind within %.0f s", STOP_GRACE_SECONDS)
        for cleanup in _STOP.cleanups:
            with contextlib.suppress(Exception):
                cleanup()
        os._exit(128 + signal.SIGTERM)


def take_sigterm() -> None:
    """End this task on SIGTERM, cleaning up on the way, within :data:`STOP_GRACE_SECONDS`.

    The Python handler raises ``SystemExit(143)`` in the main thread. When
    the main thread is blocked in TensorFlow (a collective waiting for a
    worker that has already stopped), the handler cannot run: a thread woken
    through ``signal.set_wakeup_fd`` then runs the cleanups and ends the
    process with status 143 after the grace period.

    Call it again after creating a ``multi_worker_mirrored`` strategy:
    TensorFlow's coordination service starts a preemption notifier there
    (tsl ``preemption_notifier.cc``, "SIGTERM caught") that takes SIGTERM for
    itself, for ``PreemptionCheckpointHandler``, which this project does not
    use; without this call a stopped worker goes on training until the
    launcher's SIGKILL 10 s later (systemd's after 30 s). Main thread only.
    """
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    if not _STOP.watching:
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
        threading.Thread(
            target=_watch_for_sigterm, args=(read_fd,), name="sigterm-watch", daemon=True
        ).start()
        _STOP.watching = True


@contextlib.contextmanager
def stop_deferred(task_name: str) -> Iterator[None]:
    """Hold a SIGTERM that arrives inside the block until the block is done.

    Wraps what a task does after ``fit`` returns: saving the model (under
    multi_worker_mirrored every worker takes part, so every worker holds the
    stop) and, on the chief, the metrics. A stop landing there (stop.yml, the
    launcher, ``systemctl stop``) waits the few seconds of saving instead of
    throwing away the trained weights; the backup stays until the results
    are written anyway (:func:`training.backup.remove_chief_backup`), in case
    SIGKILL follows (systemd's TimeoutStopSec, the launcher's KILL_AFTER).

    Raises:
        SystemExit: 143 (128 + SIGTERM) after the block, if a SIGTERM came
            before or inside it: the task ends as a stopped one, its work done.
    """
    _STOP.holding = True
    try:
        yield
    finally:
        _STOP.holding = False
    if _STOP.signum:
        log.info(
            "%s: stopped after writing its results (the stop came as they were saved)", task_name
        )
        raise SystemExit(128 + _STOP.signum)


def run(config: TrainConfig) -> dict[str, Any] | None:
    """Run this process's task of the run to its end.

    Returns:
        The metrics dict on the chief (also written to ``metrics.json``), None
        on every other task.

    Raises:
        Every error of :func:`check`, before TensorFlow is imported.
    """
    tf_config = check(config)
    if tf_config is None or tf_config.is_chief:
        saved = saved_results(Path(config.output_dir), config.run_id)
        if saved is not None:
            log.info(
                "run %s: its results are already saved (%s, %s); nothing to train",
                config.run_id,
                METRICS_FILE,
                MODEL_FILE,
            )
            progress = Path(config.output_dir) / PROGRESS_FILE
            if not any(e.get("event") == "end" for e in read_events(progress)):
                write_end(ProgressWriter(progress), saved)
            return saved
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    if tf_config is not None and config.strategy == "parameter_server":
        # Let the coordinator ride out unreachable workers (PS tutorial).
        os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")

    import tensorflow as tf

    from training.strategy import is_server_task, make_strategy, serve

    threads = thread_count(config, tf_config)
    warning = oversubscribed(config, tf_config)
    if warning:
        log.warning("%s", warning)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)

    task_name = tf_config.task.name if tf_config else "local"
    task_log, restarts = open_task_log(Path(config.output_dir), task_name)
    exporter = Exporter(
        _metrics_port(config, tf_config),
        _metrics_address(config, tf_config),
        task_name,
        config.run_id,
        trains=not is_server_task(tf_config, config.strategy),
    )
    if exporter.enabled:
        exporter.restarts.set(restarts)
    if restarts:
        log.info(
            "%s: start %d of this run (restarted %s)",
            task_name,
            restarts + 1,
            plural(restarts, "time"),
        )

    if is_server_task(tf_config, config.strategy):
        assert tf_config is not None
        serve(tf_config, threads)
        return None

    # A stopped task (SIGTERM from systemd or the launcher) unwinds normally,
    # so the temporary folder of a non-chief task is removed.
    take_sigterm()
    started = time.time()
    watchdog = (
        StartupWatchdog(tf_config, config.startup_timeout, task_log.path).start()
        if tf_config
        else None
    )
    try:
        # Before any other TensorFlow call (the thread counts above only configure).
        strategy = make_strategy(tf_config, config.strategy, config.all_reduce, config.pack_bytes)
    except Exception as err:
        if "Could not start gRPC server" in str(err) and tf_config is not None:
            raise TrainError(
                f"{tf_config.task.name} cannot listen on {tf_config.task.address}: the port is in "
                "use (a run still going, or another program); stop it or change the port"
            ) from None
        raise
    take_sigterm()  # back from TensorFlow's preemption notifier, which multi_worker_mirrored starts

    import tf_keras as keras

    keras.utils.set_random_seed(config.seed)
    is_chief = tf_config is None or tf_config.is_chief
    real_out = Path(config.output_dir)
    out = real_out if is_chief else Path(tempfile.mkdtemp(prefix=f"raspi-tf-{task_name}-"))
    if not is_chief:
        _STOP.cleanups.append(lambda: shutil.rmtree(out, ignore_errors=True))
    hooks = _Hooks(task_log, restarts, exporter, watchdog.formed if watchdog else None, threads)
    try:
        return _train(
            config, tf_config, strategy, is_chief, out, real_out, started, tf, keras, hooks
        )
    finally:
        if not is_chief:
            shutil.rmtree(out, ignore_errors=True)


@dataclass
class _Hooks:
    task_log: ProgressWriter
    restarts: int
    exporter: Exporter
    on_formed: Any
    threads: int


@dataclass(frozen=True)
class Evaluation:
    """A model's results on the test split.

    Attributes:
        loss: mean sparse categorical cross-entropy of the logits.
        accuracy: share of examples whose largest logit is their class.
        confusion: int64 (classes, classes): row = true class, column = predicted.
    """

    loss: float
    accuracy: float
    confusion: Any

    def per_class_accuracy(self, classes: list[str] | tuple[str, ...]) -> dict[str, float | None]:
        """``{class: accuracy on its test examples}``; None for a class with none."""
        rows = self.confusion.sum(axis=1)
        return {
            name: (float(self.confusion[i, i] / rows[i]) if rows[i] else None)
            for i, name in enumerate(classes)
        }


#: A model within this much test accuracy of always answering the test split's most
#: common class has learned next to nothing (:func:`untrained`).
UNTRAINED_MARGIN = 0.02


def untrained(evaluation: Evaluation) -> str | None:
    """A warning when the test accuracy is no better than answering the most common class.

    A run that made too few steps, or diverged quietly, ends "succeeded" with
    a model that predicts one class for everything: its accuracy is the
    share of that class in the test split (1/classes when they are
    balanced), which says nothing by itself.

    Returns:
        The warning with the fix, or None.
    """
    rows = evaluation.confusion.sum(axis=1)
    total = int(rows.sum())
    if not total:
        return None
    share = float(rows.max()) / total
    if evaluation.accuracy > share + UNTRAINED_MARGIN:
        return None
    return (
        f"test accuracy {evaluation.accuracy:.4f} is no better than always answering the most "
        f"common class ({share:.4f}): the model is of no use yet. Fix: more steps (more epochs, "
        "a smaller batch_size), or another model"
    )


def evaluate_model(model: Any, batches: Any, num_classes: int, keras: Any) -> Evaluation:
    """Loss, accuracy and confusion matrix of ``model`` over ``batches``, streamed.

    Calls the model directly, batch by batch, outside any distributed
    function: nothing here waits for the other workers (a distributed
    ``evaluate`` would need every one of them), and only one batch of the
    test split is in memory at a time.

    Args:
        model: a model giving logits (batch, num_classes).
        batches: an iterable of (features, int labels) batches, such as
            :func:`training.datasets.pipeline.test_dataset`.
        num_classes: the dataset's number of classes.
        keras: the tf_keras module.
    """
    import numpy as np

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")
    confusion = np.zeros((num_classes, num_classes), np.int64)
    loss = 0.0
    for x, y in batches:
        logits = model(x, training=False)
        loss += float(loss_fn(y, logits))
        np.add.at(confusion, (np.asarray(y), logits.numpy().argmax(axis=1)), 1)
    total = int(confusion.sum())
    return Evaluation(loss / max(total, 1), float(np.trace(confusion)) / max(total, 1), confusion)


def _evaluator(
    model: Any, manifest: Manifest, data_dir: str, keras: Any, strategy: Any, tf: Any
) -> Any:
    """The chief's per-epoch test-split loss and accuracy of ``model``'s current weights.

    A model with sync-on-read variables (BatchNormalization's moving mean and
    variance) is evaluated through a copy built outside the strategy and
    given this worker's own value of every variable: under
    multi_worker_mirrored, reading such a variable outside a replica averages
    it over the workers, a collective that the other workers, still
    training, never join (the run fails with "Collective instance ...
    expected type ..."). Other models are called directly.
    """
    on_read = tf.VariableSynchronization.ON_READ
    local = any(getattr(w, "synchronization", None) == on_read for w in model.weights)
    # Built here, outside the strategy's scope: ``fit`` runs its callbacks inside it,
    # where a new variable is a distributed one, broadcast from the chief alone.
    copy = keras.models.clone_model(model) if local else None

    def current() -> Any:
        if copy is None:
            return model
        copy.set_weights([strategy.experimental_local_results(w)[0].numpy() for w in model.weights])
        return copy

    def evaluate() -> dict[str, float]:
        result = evaluate_model(
            current(),
            pipeline.test_dataset(manifest, data_dir, EVAL_CHUNK),
            len(manifest.classes),
            keras,
        )
        return {"test_loss": result.loss, "test_accuracy": result.accuracy}

    return evaluate


def _metrics_port(config: TrainConfig, tf_config: TFConfig | None) -> int:
    """The task's Prometheus port: its TF_CONFIG port + ``metrics_port_offset``; 0 for none.

    Raises:
        TrainError: the port is above 65535, or it is the TensorFlow port of a
            task on the same host (an offset smaller than the spread of that
            host's ports): that task could not start its gRPC server.
    """
    if not config.metrics_port_offset or tf_config is None:
        return 0
    offset = config.metrics_port_offset
    here, own_port = split_address(tf_config.task.address)
    port = own_port + offset
    if port > 65535:
        raise TrainError(
            f"{tf_config.task.name}: port {port} (its TF_CONFIG port + metrics_port_offset "
            f"{offset}) is above 65535. Fix: a smaller "
            "training_run_metrics_port_offset (such as 1000), or 0 for no metrics"
        )
    neighbours = [t for t in tf_config.tasks if host_key(t.host) == host_key(here)]
    for other in neighbours:
        if split_address(other.address)[1] == port:
            used = [split_address(t.address)[1] for t in neighbours]
            spread = max(used) - min(used)
            # The next thousand above the spread clears every port of the host.
            suggestion = (spread // 1000 + 1) * 1000
            raise TrainError(
                f"{tf_config.task.name} on {here}: its metrics port {port} (its "
                f"TF_CONFIG port + training_run_metrics_port_offset {offset}) is the TensorFlow "
                f"port of {other.name} on the same host. Fix: an offset above the spread of the "
                f"host's ports ({spread})"
                + (
                    f", such as -e training_run_metrics_port_offset={suggestion},"
                    if max(used) + suggestion <= 65535
                    else ""
                )
                + " or 0 for no metrics"
            )
    return port


def _metrics_address(config: TrainConfig, tf_config: TFConfig | None) -> str:
    if config.metrics_address:
        return config.metrics_address
    if tf_config is None or is_loopback(tf_config.task.host):
        return "127.0.0.1"
    return "0.0.0.0"  # every interface: the cluster firewall guards the port


def _train(
    config: TrainConfig,
    tf_config: TFConfig | None,
    strategy: Any,
    is_chief: bool,
    out: Path,
    real_out: Path,
    started: float,
    tf: Any,
    keras: Any,
    hooks: _Hooks,
) -> dict[str, Any] | None:
    manifest = datasets.read_manifest(
        config.data_dir, datasets.prepared_id(config.data_dir, config.dataset)
    )
    ps = config.strategy == "parameter_server" and tf_config is not None
    replicas = strategy.num_replicas_in_sync
    workers = tf_config.num_workers if ps and tf_config else replicas
    # Global batch = per-worker batch x replicas in sync (TensorFlow's
    # multi-worker tutorial). With parameter_server each step is one worker's
    # batch, applied asynchronously.
    global_batch = config.batch_size * replicas
    steps = pipeline.steps_per_epoch(manifest.train.examples, global_batch)
    if ps:
        train_input = keras.utils.experimental.DatasetCreator(
            pipeline.per_worker_dataset_fn(manifest, config.data_dir, global_batch)
        )
    else:
        # Each worker shuffles its own shards in its own order: with one seed, equal
        # streams would pair the same examples in every global batch of every epoch.
        train_input = pipeline.train_dataset(
            manifest, config.data_dir, global_batch, config.seed + _trainer_index(tf_config)
        )
    base_learning_rate = config.learning_rate or models.learning_rate(config.model)
    learning_rate = (
        base_learning_rate
        if ps
        else models.scaled_learning_rate(base_learning_rate, replicas, config.learning_rate_scaling)
    )
    spe = models.resolve_steps_per_execution(
        config.model, config.steps_per_execution, config.strategy
    )
    with strategy.scope():
        model = models.build(
            config.model, learning_rate, spe, manifest.input_shape, len(manifest.classes)
        )
        if replicas > 1 and config.all_reduce_dtype != "float32":
            all_reduce_in(model.optimizer, config.all_reduce_dtype)
    # Per-step logs from this worker's own replica, with no all-reduce: tf_keras'
    # default sums them over the workers, and reads every metric cluster-wide
    # in every step (local_step_metrics); epoch logs stay cluster-wide.
    model.distribute_reduction_method = "first"
    if replicas > 1 and not ps:
        local_step_metrics(model)

    out.mkdir(parents=True, exist_ok=True)
    writer = ProgressWriter(out / PROGRESS_FILE)
    task_names = [t.name for t in tf_config.tasks] if tf_config else ["local"]
    writer.write(
        "start",
        epochs=config.epochs,
        steps_per_epoch=steps,
        model=config.model,
        strategy=config.strategy if tf_config else "single_process",
        tasks=task_names,
    )
    progress = make_callback(
        writer,
        steps,
        global_batch,
        config.progress_interval,
        batch_events=not ps,
        task_writer=hooks.task_log,
        worker_examples_per_step=global_batch if ps else config.batch_size,
        exporter=hooks.exporter,
        on_formed=hooks.on_formed,
        evaluate=(
            _evaluator(model, manifest, config.data_dir, keras, strategy, tf)
            if is_chief and config.epoch_eval
            else None
        ),
    )
    # The progress callback writes an epoch's event before the backup of that
    # epoch is made: every epoch a backup covers is in progress.jsonl (a task
    # dying between the two repeats the epoch, and the newer event wins).
    # BackupAndRestore restores in on_train_begin, before the first epoch,
    # wherever it is in the list. Under multi_worker_mirrored every task names
    # the same folder; tf_keras writes the chief's copy to <backup>/chief, the
    # others to temporary subfolders, and every task restores from
    # <backup>/chief (on nodes, a worker's unit copies the chief's folder over
    # before it starts: training.backup). Under parameter_server only the
    # chief runs fit; its backup must stay on its own disk, not on the ps
    # hosts that hold the variables.
    callbacks = [
        progress,
        backup_callback(keras, real_out / BACKUP_DIR, CHIEF_IO_DEVICE if ps else None),
        keras.callbacks.TensorBoard(log_dir=str(out / TENSORBOARD_DIR), update_freq="epoch"),
    ]
    if not ps:
        # Batch-level, so not under ParameterServerStrategy (tf_keras refuses those
        # there); a diverged parameter_server run is caught from its history below.
        callbacks.append(keras.callbacks.TerminateOnNaN())

    log.info(
        "%s: %s on %s, %d epochs x %d steps, global batch %d (%d per worker x %d replicas)",
        tf_config.task.name if tf_config else "local",
        config.model,
        manifest.id,
        config.epochs,
        steps,
        global_batch,
        config.batch_size,
        replicas,
    )
    t0 = time.monotonic()
    history = model.fit(
        train_input,
        epochs=config.epochs,
        steps_per_epoch=steps,
        callbacks=callbacks,
        verbose=0,
    )
    train_seconds = time.monotonic() - t0
    # From here the trained weights are only in memory and in the backup:
    # a stop waits for them to be saved (every MWMS worker saves).
    with stop_deferred(tf_config.task.name if tf_config else "local"):
        first_epoch = progress.first_epoch or 0
        losses = history.history.get("loss", [])
        if not losses and int(model.optimizer.iterations.numpy()) >= config.epochs * steps:
            # Restarted after its last epoch's backup (killed while saving): nothing
            # left to train, the restored weights are the trained ones.
            first_epoch = config.epochs
        last_loss = losses[-1] if losses else float("nan")
        if first_epoch < config.epochs and (
            not math.isfinite(last_loss) or len(losses) < config.epochs - first_epoch
        ):
            raise DivergedError(
                f"training diverged: the loss became {last_loss} in epoch "
                f"{first_epoch + max(1, len(losses))}/{config.epochs}; a restart would diverge "
                f"again. Fix: a lower learning_rate (now {base_learning_rate}"
                + (
                    f", {learning_rate:.3g} after learning_rate_scaling="
                    f"{config.learning_rate_scaling} over {replicas} replicas)"
                    if learning_rate != base_learning_rate
                    else ")"
                )
            )
        hooks.task_log.write("end")
        model_path = out / MODEL_FILE
        model.save(model_path)  # every MWMS worker saves: saving may run collectives
        if not is_chief:
            remove_synced_backup(real_out / BACKUP_DIR)
            return None

        epochs_done = [
            e
            for e in newest_epochs(read_events(out / PROGRESS_FILE))
            if e["epoch"] <= config.epochs
        ]
        # A run restarted after its last epoch trained nothing in this process:
        # its history is in the progress events.
        history_keys = list(history.history) or [
            key for key in ("loss", "accuracy") if epochs_done and key in epochs_done[-1]
        ]
        write_json(out / PREPROCESSING_FILE, preprocessing(manifest))
        restored = keras.models.load_model(model_path)  # outside the strategy: no collectives
        final = evaluate_model(
            restored,
            pipeline.test_dataset(manifest, config.data_dir, EVAL_CHUNK),
            len(manifest.classes),
            keras,
        )
        examples = config.epochs * steps * global_batch
        # Training time is the sum of the epochs, wherever they ran: a resumed run
        # did some in earlier processes, and parameter_server's fit also spends
        # tens of seconds starting and stopping the coordinator's workers.
        fit_seconds = train_seconds
        train_seconds = sum(float(e["seconds"]) for e in epochs_done) or fit_seconds
        metrics: dict[str, Any] = {
            "run_id": config.run_id,
            "config": asdict(config),
            "model": config.model,
            "dataset": config.dataset,
            "dataset_id": manifest.id,
            "strategy": config.strategy if tf_config else "single_process",
            "cluster": tf_config.cluster if tf_config else {},
            "tasks": task_names,
            "num_workers": workers,
            "num_replicas_in_sync": replicas,
            "epochs": config.epochs,
            "learning_rate": learning_rate,
            "base_learning_rate": base_learning_rate,
            "learning_rate_rule": models.learning_rate_rule(
                base_learning_rate, replicas, config.learning_rate_scaling, ps
            ),
            "batch_size_per_worker": config.batch_size,
            "global_batch_size": global_batch,
            "steps_per_epoch": steps,
            "train_examples": manifest.train.examples,
            # Whole global batches of the repeated, reshuffled split.
            "examples_per_epoch": steps * global_batch,
            "test_examples": manifest.test.examples,
            # The training shards each task read and their examples.
            "shards": worker_shards(manifest, config.strategy, tf_config),
            "skipped_examples": list(manifest.skipped),
            "history": {
                key: [float(e.get(key, math.nan)) for e in epochs_done] for key in history_keys
            },
            "epoch_seconds": [round(float(e["seconds"]), 3) for e in epochs_done],
            "epoch_examples_per_second": [
                round(steps * global_batch / float(e["seconds"]), 1) for e in epochs_done
            ],
            "steady_examples_per_second": steady_rate(
                [float(e["seconds"]) for e in epochs_done], steps * global_batch
            ),
            "restarts": hooks.restarts,
            "resumed_from_epoch": first_epoch or None,
            "test_loss": final.loss,
            "test_accuracy": final.accuracy,
            "classes": list(manifest.classes),
            "per_class_accuracy": final.per_class_accuracy(manifest.classes),
            # Rows: the true class; columns: the predicted one.
            "confusion_matrix": final.confusion.tolist(),
            # What the summary prints as WARNING lines.
            "warnings": [w for w in (untrained(final),) if w],
            "train_seconds": round(train_seconds, 3),
            "fit_seconds": round(fit_seconds, 3),
            "examples_per_second": round(examples / train_seconds, 1),
            "wall_seconds": round(time.time() - started, 3),
            "threads": hooks.threads,
            "steps_per_execution": min(spe, steps),  # Keras runs no more than an epoch a call
            "tensorflow_version": tf.__version__,
            "chief_host": socket.gethostname(),
            "finished": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        write_json(out / METRICS_FILE, metrics)
        remove_chief_backup(real_out / BACKUP_DIR)  # the results now hold what it held
        write_end(writer, metrics)
        return metrics


def preprocessing(manifest: Manifest) -> dict[str, Any]:
    """What ``preprocessing.json`` beside the model holds: all a prediction needs.

    The dataset's ``preprocessing`` (image size, colour mode, CSV
    statistics, ...) with its ``input_shape``, ``classes`` (logit ``i`` is
    ``classes[i]``) and the ``dataset`` id.
    """
    return {
        **manifest.preprocessing,
        "input_shape": list(manifest.input_shape),
        "classes": list(manifest.classes),
        "dataset": manifest.id,
    }


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as indented JSON through a temporary file: never half a file.

    A reader (follow, the export, the control node's fetch) sees the old file
    or the new one.
    """
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
