"""Command line: ``python -m training <command>``.

Commands:

- ``train``: run this process's task (TF_CONFIG from the environment; without
  it, the whole run in one process).
- ``prepare-data``: prepare a dataset's shards on the control node; one JSON object.
- ``check``: validate a TF_CONFIG, model and dataset without starting TensorFlow.
- ``local-modules``: the modules beside a script or model file that it imports, which go
  with it, as JSON.
- ``models``: list the registered models, or check a ``-e model=`` value (``--check``).
- ``runs``: the ids of a runs folder's newest runs, as JSON (the refusals of an unknown run).
- ``launch``, ``follow``, ``running``, ``stop``: the local launcher (see :mod:`training.launcher`).
- ``status``: each task's state, epoch, loss, restarts, CPU and memory, as a JSON list.
- ``sync-backup``: copy the chief's backup before a worker starts (nodes).
- ``startup-watchdog``: started by ``train``, ends it if its cluster does not form in time.
- ``plot``: PNG plots of a run.
- ``export``: a finished run's model as TFLite float32 and int8 variants, each scored.
- ``predict``: classify images, camera frames or CSV rows with a run's TFLite model.
- ``bench``: the benchmark's comparisons of a ``runs/bench-<id>`` folder, and
  with ``--docs`` its Markdown results file.
- ``machine``: this machine's CPU model, cores, memory and versions, as JSON.
- ``all-reduce-bench``: time the all-reduce alone, in lockstep, on every worker of a cluster.
- ``step-bench``: when each training step starts, a model training alone on this node.
- ``bench-photos``: write the benchmark's folder of camera-like photos.
- ``data-bench``: the benchmark's own-data figures of the control node (preparing, memory,
  bytes staged), as JSON.
- ``pipeline-bench``: examples/s the training input pipeline alone delivers on this node.
- ``predict-bench``: time per input, size and accuracy of a run's Keras and TFLite models here.

Errors a user can fix exit with status 2 and one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import fields
from pathlib import Path

from training import datasets, models
from training.backup import BackupSyncError
from training.bench import DEFAULT_TARGET, BenchError
from training.cluster import STRATEGY_JOBS, ClusterConfigError, parse_tf_config
from training.data_bench import (
    DEFAULT_BATCH,
    DEFAULT_EPOCHS,
    DEFAULT_IMAGES,
    DEFAULT_MODEL,
    DEFAULT_MULTIPLE,
)
from training.follow import FollowError
from training.launcher import LaunchError
from training.netcheck import NetCheckError, check_own_address
from training.script import ScriptError
from training.strategy import ALL_REDUCE_DTYPES, ALL_REDUCE_IMPLEMENTATIONS
from training.tasklog import DIVERGED_EXIT
from training.train import DivergedError, TrainConfig, TrainError

USER_ERRORS = (
    BenchError,
    ClusterConfigError,
    datasets.DatasetError,
    models.UnknownModelError,
    models.ModelError,
    TrainError,
    LaunchError,
    FollowError,
    NetCheckError,
    BackupSyncError,
    ScriptError,
)


def _train_flags(parser: argparse.ArgumentParser) -> None:
    d = TrainConfig()
    parser.add_argument("--model", default=d.model, help="model name (default %(default)s)")
    parser.add_argument(
        "--dataset",
        default=d.dataset,
        help="prepared dataset id, or a registered name: its newest prepared folder in "
        "--data-dir (default %(default)s)",
    )
    parser.add_argument(
        "--data-dir",
        default=d.data_dir,
        help="folder of staged datasets, <id>/ each (default %(default)s)",
    )
    parser.add_argument(
        "--strategy",
        default=d.strategy,
        choices=list(STRATEGY_JOBS),
        help="distribution strategy (default %(default)s)",
    )
    parser.add_argument("--epochs", type=int, default=d.epochs, help="passes over the training set")
    parser.add_argument(
        "--batch-size",
        type=int,
        default=d.batch_size,
        help="examples per worker per step; global batch = this x replicas (default %(default)s)",
    )
    parser.add_argument(
        "--learning-rate",
        type=float,
        default=d.learning_rate,
        help="Adam step size for one worker's batch (default: the model's LEARNING_RATE, "
        "else 0.001)",
    )
    parser.add_argument(
        "--learning-rate-scaling",
        choices=models.LEARNING_RATE_SCALINGS,
        default=d.learning_rate_scaling,
        help="how multi_worker_mirrored grows the step size with its replicas "
        "(default %(default)s: x sqrt(replicas))",
    )
    parser.add_argument("--output-dir", default=d.output_dir, help="run folder (chief writes here)")
    parser.add_argument("--seed", type=int, default=d.seed, help="shuffle and init seed")
    parser.add_argument(
        "--progress-interval",
        type=float,
        default=d.progress_interval,
        help="least seconds between progress lines",
    )
    parser.add_argument("--run-id", default=d.run_id, help="run name recorded in the metrics")
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=d.startup_timeout,
        help="seconds to wait for the cluster to form, then exit naming the missing tasks "
        "(0: forever; default %(default)s)",
    )
    parser.add_argument(
        "--metrics-port-offset",
        type=int,
        default=d.metrics_port_offset,
        help="serve Prometheus metrics on the task's TF_CONFIG port + this (0: none)",
    )
    parser.add_argument(
        "--metrics-address",
        default=d.metrics_address,
        help="address the metrics bind (default: 127.0.0.1 for a loopback task, else all)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=d.threads,
        help="TensorFlow intra-/inter-op threads (0: this host's CPUs / its tasks of the run)",
    )
    parser.add_argument(
        "--steps-per-execution",
        type=int,
        default=d.steps_per_execution,
        help="training steps per call of Keras' train function (0: 8 under "
        "multi_worker_mirrored for a model whose build takes it, else 1)",
    )
    parser.add_argument(
        "--all-reduce",
        default=d.all_reduce,
        choices=list(ALL_REDUCE_IMPLEMENTATIONS),
        help="collective implementation of multi_worker_mirrored (default %(default)s)",
    )
    parser.add_argument(
        "--pack-bytes",
        type=int,
        default=d.pack_bytes,
        help="gradient bytes per all-reduce pack (0: TensorFlow packs; default %(default)s)",
    )
    parser.add_argument(
        "--all-reduce-dtype",
        default=d.all_reduce_dtype,
        choices=list(ALL_REDUCE_DTYPES),
        help="dtype of the gradients in the all-reduce; float16 halves the bytes "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--epoch-eval",
        action=argparse.BooleanOptionalAction,
        default=d.epoch_eval,
        help="the chief measures test accuracy after every epoch (default on)",
    )
    parser.add_argument(
        "--script",
        default=d.script,
        help="run this script of your own instead of --model (script mode; its arguments "
        "come from RASPI_TF_SCRIPT_ARGS)",
    )


def _config(args: argparse.Namespace) -> TrainConfig:
    return TrainConfig(**{f.name: getattr(args, f.name) for f in fields(TrainConfig)})


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m training``."""
    parser = argparse.ArgumentParser(
        prog="python -m training",
        description="The training code every TensorFlow task of a raspi-tf cluster runs.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="run this process's task of a run")
    _train_flags(train)

    modules = sub.add_parser(
        "local-modules",
        help="the modules beside a script or model file that it imports, which go with it, as JSON",
    )
    modules.add_argument(
        "--file", required=True, type=Path, help="the script's or the model file's path"
    )

    check = sub.add_parser("check", help="validate TF_CONFIG, model and dataset; start nothing")
    _train_flags(check)
    check.add_argument("--tf-config-file", type=Path, help="read TF_CONFIG from this file")
    check.add_argument("--no-data", action="store_true", help="do not look for the dataset's files")
    check.add_argument(
        "--script-args", default="", help="with --script: its arguments, as one string to split"
    )
    check.add_argument(
        "--own-address",
        action="store_true",
        help="also refuse a task address that is not this machine's (a local run: all tasks here)",
    )
    check.add_argument(
        "--build",
        action="store_true",
        help="also build the model once with TensorFlow and feed it one example of the "
        "dataset's shape (seconds)",
    )
    check.add_argument(
        "--input-shape",
        type=_shape,
        help="with --no-data --build: the shape of one example, e.g. 64x64x3 (a dataset not "
        "prepared yet: prepare-data --check says it)",
    )
    check.add_argument(
        "--num-classes", type=int, help="with --no-data --build: the dataset's class count"
    )
    check.add_argument(
        "--train-examples",
        type=int,
        help="with --no-data: the training split's size, checked against the global batch (a "
        "dataset not prepared yet: prepare-data --check says it)",
    )

    prep = sub.add_parser(
        "prepare-data",
        help="prepare a dataset into <cache-dir>/<id>/ unless it is there; print it as JSON",
    )
    _prepare_flags(prep)

    prune = sub.add_parser(
        "prune-data",
        help="remove the prepared datasets in a folder beyond the most recently used, keeping "
        "any a running process names; print what went as JSON",
    )
    prune.add_argument(
        "--data-dir",
        required=True,
        type=Path,
        help="the folder of datasets: .cache/datasets on the control node, "
        "/var/lib/raspi-tf/datasets on a node",
    )
    prune.add_argument(
        "--keep",
        type=int,
        default=3,
        help="datasets to keep, the most recently prepared or staged (default %(default)s)",
    )
    prune.add_argument("--current", help="the id of the dataset in use now: always kept")
    prune.add_argument(
        "--train-shards",
        nargs="*",
        help="with --current: the only train shard files its folder keeps (a node's own)",
    )

    models_parser = sub.add_parser("models", help="list the registered models as JSON")
    models_parser.add_argument(
        "--check",
        metavar="MODEL",
        help="print nothing and exit 0 if MODEL (a -e model= value) names a model or a model "
        "file; else say why, with the fix, and exit 2",
    )

    launch = sub.add_parser("launch", help="run a local cluster from a launch spec")
    launch.add_argument("--run-dir", required=True, type=Path, help="the run's folder")
    launch.add_argument("--spec", type=Path, help="launch spec (default <run-dir>/launch.json)")

    follow = sub.add_parser(
        "follow", help="wait for a run's next progress; print its state as JSON"
    )
    follow.add_argument("--run-dir", required=True, type=Path, help="the chief's run folder")
    follow.add_argument("--wait", type=float, default=20.0, help="most seconds to wait")
    follow.add_argument("--unit", help="the chief's systemd unit (nodes); none for a local run")
    follow.add_argument(
        "--least",
        type=float,
        default=0.0,
        help="least seconds to wait: progress that comes sooner is held until then",
    )
    follow.add_argument(
        "--cursor-file", type=Path, help="keep the count of events shown here; print each new epoch"
    )

    listen = sub.add_parser(
        "listen", help="hold ports open briefly, for the connectivity preflight"
    )
    listen.add_argument("--ports", required=True, help="comma-separated TCP ports")
    listen.add_argument("--seconds", type=float, default=60.0, help="most seconds to listen")
    listen.add_argument("--stop-file", type=Path, help="stop as soon as this file exists")

    status = sub.add_parser("status", help="the state of this node's tasks, a JSON list")
    status.add_argument("--run-dir", required=True, type=Path, help="the tasks' run folder")
    status.add_argument(
        "--task", required=True, action="append", help="task name, e.g. worker-1; repeatable"
    )
    status.add_argument(
        "--unit-template",
        help="the tasks' systemd unit with {task} for the name (nodes); none for a local run",
    )
    status.add_argument("--sample", type=float, default=1.0, help="seconds of CPU sampling")

    sync = sub.add_parser("sync-backup", help="copy the chief's backup before this worker starts")
    sync.add_argument(
        "--from", dest="source", default="", help="user@host:/run/backup of the chief; '' skips"
    )
    sync.add_argument("--backup-dir", required=True, type=Path, help="this worker's <run>/backup")

    plot = sub.add_parser("plot", help="write a run's PNG plots into its folder")
    plot.add_argument("--run-dir", required=True, type=Path, help="the run's folder")

    bench = sub.add_parser(
        "bench", help="compare the cases of a benchmark: bench.json, plots and a table"
    )
    bench.add_argument("--dir", required=True, type=Path, help="the runs/bench-<id> folder")
    bench.add_argument(
        "--target",
        type=_accuracy,
        default=DEFAULT_TARGET,
        help="test accuracy of 'time to accuracy' (default %(default)s)",
    )
    bench.add_argument(
        "--docs",
        type=Path,
        help="also write the results as Markdown here, <date>-<cpu>.md, and its README.md "
        "index (make bench: docs/benchmarks)",
    )

    machine = sub.add_parser(
        "machine", help="this machine's CPU model, cores, memory and versions, as JSON"
    )
    machine.add_argument("--out", type=Path, help="also write the JSON here (make bench)")

    all_reduce = sub.add_parser(
        "all-reduce-bench",
        help="time all-reduces of 4 bytes and of each model's gradients; every worker at once",
    )
    all_reduce.add_argument(
        "--models",
        default="",
        help="comma-separated models whose gradient size to time (default: 4 bytes only)",
    )
    all_reduce.add_argument(
        "--calls", type=int, default=100, help="most timed calls a size (default %(default)s)"
    )
    all_reduce.add_argument(
        "--seconds",
        type=float,
        default=20.0,
        help="most wall seconds of timed calls a size (default %(default)s)",
    )
    all_reduce.add_argument("--output", type=Path, help="also write the JSON list here")

    steps = sub.add_parser(
        "step-bench",
        help="time each training step of models training alone here; every node at once",
    )
    steps.add_argument(
        "--models", required=True, help="comma-separated models to trace, one after another"
    )
    steps.add_argument(
        "--seconds",
        type=float,
        default=20.0,
        help="wall seconds of timed steps a model (default %(default)s)",
    )
    steps.add_argument("--data-dir", required=True, help="folder of the staged datasets")
    steps.add_argument("--dataset", default="mnist_5k", help="dataset (default %(default)s)")
    steps.add_argument(
        "--batch-size", type=int, default=64, help="examples a step (default %(default)s)"
    )
    steps.add_argument(
        "--output-dir",
        type=Path,
        help="write steps-<model>-<--host>.json here, one file a model",
    )
    steps.add_argument("--host", default="", help="the node's name in the files' names")

    photos = sub.add_parser(
        "bench-photos", help="write the benchmark's folder of camera-like photos unless it is there"
    )
    photos.add_argument("--out", required=True, type=Path, help="the folder to write")
    photos.add_argument(
        "--images", type=_photo_count, default=DEFAULT_IMAGES, help="photos (default %(default)s)"
    )

    data = sub.add_parser(
        "data-bench",
        help="time preparing photos, read a worker's peak memory at 1x and 4x, count bytes staged",
    )
    data.add_argument(
        "--photos",
        required=True,
        type=Path,
        help="the bench's photo folder, written unless it is there (make bench: "
        "runs/bench-<id>/photos)",
    )
    data.add_argument(
        "--out", required=True, type=Path, help="the JSON to write (runs/bench-<id>/data.json)"
    )
    data.add_argument(
        "--images", type=_photo_count, default=DEFAULT_IMAGES, help="photos (default %(default)s)"
    )
    data.add_argument(
        "--multiple",
        type=int,
        default=DEFAULT_MULTIPLE,
        help="the larger dataset is this many times the photos (default %(default)s)",
    )
    data.add_argument(
        "--model", default=DEFAULT_MODEL, help="model of the memory runs (default %(default)s)"
    )
    data.add_argument(
        "--epochs",
        type=int,
        default=DEFAULT_EPOCHS,
        help="epochs a memory run (default %(default)s)",
    )
    data.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH,
        help="examples a step of the memory runs (default %(default)s)",
    )

    pipe = sub.add_parser(
        "pipeline-bench", help="examples/s the training input pipeline alone delivers here"
    )
    pipe.add_argument("--data-dir", required=True, help="folder of the staged datasets")
    pipe.add_argument("--dataset", required=True, help="the prepared dataset's id")
    pipe.add_argument(
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH,
        help="examples a batch (default %(default)s)",
    )
    pipe.add_argument(
        "--seconds", type=float, default=20.0, help="wall seconds timed (default %(default)s)"
    )
    pipe.add_argument("--host", default="", help="the node's name, recorded in the JSON")
    pipe.add_argument("--output", type=Path, help="also write the JSON here")

    pbench = sub.add_parser(
        "predict-bench",
        help="time per input, size and accuracy of a run's Keras model and TFLite variants here",
    )
    pbench.add_argument("--run-dir", type=Path, required=True, help="an exported run's folder")
    pbench.add_argument(
        "--inputs", type=int, default=200, help="inputs timed a form (default %(default)s)"
    )
    pbench.add_argument(
        "--threads", type=int, default=1, help="threads a model uses (default %(default)s)"
    )
    pbench.add_argument("--host", default="", help="the node's name, recorded in the JSON")
    pbench.add_argument("--output", type=Path, help="also write the JSON here")

    export = sub.add_parser(
        "export",
        help="write a finished run's model as TFLite variants and score each on the test split",
    )
    export.add_argument("--run-dir", type=Path, required=True, help="the run's folder")
    export.add_argument(
        "--data-dir",
        type=Path,
        required=True,
        help="the folder holding the run's prepared dataset (the control node's cache)",
    )
    export.add_argument(
        "--variants",
        default="float32",
        help="comma-separated: float32 (always), dynamic_int8, int8 (default: %(default)s)",
    )
    export.add_argument(
        "--max-accuracy-drop",
        type=float,
        default=0.02,
        help="a variant losing more test accuracy than this is reported (default: %(default)s)",
    )

    predict = sub.add_parser(
        "predict", help="classify images, camera frames or CSV rows with a run's TFLite model"
    )
    predict.add_argument(
        "--model", required=True, help="a folder holding model*.tflite and preprocessing.json"
    )
    predict.add_argument("--variant", default="float32", help="float32, dynamic_int8 or int8")
    predict.add_argument("--images", help="an image file or a folder of them")
    predict.add_argument("--csv", help="a CSV file with the model's feature columns")
    predict.add_argument("--camera", help="a camera's index or device path, read with OpenCV")
    predict.add_argument("--frames", type=int, default=1, help="camera frames to classify")
    predict.add_argument("--top", type=int, default=3, help="classes to print an input")
    predict.add_argument("--threads", type=int, help="interpreter threads (default: all cores)")
    predict.add_argument(
        "--check",
        action="store_true",
        help="load no model: say what would be classified, refusing what predict would refuse",
    )
    predict.add_argument(
        "--preprocessing",
        help="with --check: the run's preprocessing.json as JSON text, when --model is not here",
    )

    runs = sub.add_parser("runs", help="the ids of the newest runs of a runs folder, as JSON")
    runs.add_argument("--runs-dir", required=True, type=Path, help="the folder of runs")
    runs.add_argument("--newest", type=int, default=3, help="how many runs, newest first")
    runs.add_argument(
        "--having",
        default="run.json",
        help="the file a run's folder must hold (model.tflite: the runs predict can use)",
    )
    runs.add_argument(
        "--takes", choices=("csv", "images"), help="only runs whose model takes this input"
    )
    runs.add_argument(
        "--starting",
        action="store_true",
        help="the run train.yml has recorded but not yet pointed latest at, as JSON (or null)",
    )
    runs.add_argument(
        "--variant",
        default="float32",
        help="with --check: the TFLite variant the run must have exported (default %(default)s)",
    )
    runs.add_argument(
        "--check",
        metavar="RUN_DIR",
        type=Path,
        help="print nothing and exit 0 if RUN_DIR holds a TFLite model and its preprocessing; "
        "else say why, with the fix and the newest runs that do, and exit 2",
    )

    summary = sub.add_parser(
        "summary", help="print the summary of a finished run, as train.yml ends with it"
    )
    summary.add_argument("--run-dir", required=True, help="the run's folder, e.g. runs/latest")
    summary.add_argument(
        "--export-error",
        default="",
        help="why the TensorFlow Lite export failed this time, for the tflite line",
    )

    recovery = sub.add_parser("recovery", help="print which tasks of a run restarted, one line")
    recovery.add_argument("--run-dir", required=True, type=Path, help="the run's folder")

    watchdog = sub.add_parser(
        "startup-watchdog",
        help="(started by train) end task --pid if its cluster has not formed in time",
    )
    watchdog.add_argument("--pid", required=True, type=int, help="the task's process id")
    watchdog.add_argument("--timeout", required=True, type=float, help="seconds to wait")
    watchdog.add_argument("--task-log", type=Path, help="the task's tasks/<task>.jsonl")

    running = sub.add_parser(
        "running", help="local runs still going on any of these ports, as JSON"
    )
    running.add_argument("--ports", required=True, help="comma-separated TCP ports")

    stop = sub.add_parser("stop", help="stop a local run and all its tasks")
    stop.add_argument(
        "--run-dir", required=True, type=Path, help="the run's folder, e.g. runs/latest"
    )
    return parser


def _prepare_flags(prep: argparse.ArgumentParser) -> None:
    d = datasets.Settings()
    prep.add_argument(
        "--dataset",
        required=True,
        help="a registered name (mnist, mnist_5k) or the path of a folder of images (one "
        "subfolder per class), a .csv or an .npz file",
    )
    prep.add_argument(
        "--cache-dir",
        "--data-dir",
        dest="cache_dir",
        required=True,
        type=Path,
        help="the control node's folder of prepared datasets",
    )
    prep.add_argument("--source", type=Path, help="downloaded file, for datasets fetched by URL")
    prep.add_argument(
        "--image-size",
        type=_image_size,
        default=d.image_size,
        help="pixels images are resized to: 64 (square) or HEIGHTxWIDTH, e.g. 96x128 (default 64)",
    )
    prep.add_argument(
        "--color-mode", default=d.color_mode, help="rgb or grayscale (default %(default)s)"
    )
    prep.add_argument(
        "--test-fraction",
        type=_test_fraction,
        default=d.test_fraction,
        help="share of each class held out for the test split (default %(default)s)",
    )
    prep.add_argument(
        "--skip-bad-images",
        action="store_true",
        help="leave out images that do not decode, naming them, instead of refusing",
    )
    prep.add_argument(
        "--label-column", default=d.label_column, help="the CSV column holding the class"
    )
    prep.add_argument(
        "--ignore-columns",
        type=_column_names,
        default=d.ignore_columns,
        help="CSV columns that are no features (a row number, an id), comma-separated",
    )
    prep.add_argument(
        "--shards", type=int, default=d.shards, help="training shard files (default %(default)s)"
    )
    prep.add_argument(
        "--workers",
        type=int,
        default=1,
        help="the run's training tasks: the shards are at least this many",
    )
    prep.add_argument(
        "--check",
        action="store_true",
        help="validate the dataset and the settings and prepare nothing: describe the prepared "
        "dataset if it is there, else say it would change",
    )


def _sizes(text: str) -> tuple[int, ...]:
    """``64x64x3`` -> (64, 64, 3); () for text that is not positive whole numbers joined by x."""
    try:
        sizes = tuple(int(p) for p in text.lower().split("x"))
    except ValueError:
        return ()
    return sizes if min(sizes) >= 1 else ()


def _shape(text: str) -> tuple[int, ...]:
    """``64x64x3`` -> (64, 64, 3): an example's shape for argparse."""
    shape = _sizes(text)
    if not shape:
        raise argparse.ArgumentTypeError(f"{text!r} is not a shape; give sizes such as 64x64x3")
    return shape


def _image_size(text: str) -> tuple[int, int]:
    """``64`` -> (64, 64); ``96x128`` -> (96, 128): (height, width) for argparse."""
    sizes = _sizes(text)
    if len(sizes) not in (1, 2):
        raise argparse.ArgumentTypeError(
            f"image_size={text} is not an image size. Fix: -e image_size=64 (a square) or "
            "-e image_size=96x128 (height x width)"
        )
    return (sizes[0], sizes[-1])


def _test_fraction(text: str) -> float:
    """``0.2`` -> 0.2 for argparse; a percentage or a word is refused with the fix.

    The range is checked with the other settings
    (:func:`training.datasets._base.test_fraction_problem`).
    """
    try:
        return float(text)
    except ValueError:
        percent = text.strip().endswith("%")
        raise argparse.ArgumentTypeError(
            f"test_fraction={text} is not a number"
            + (", and a share is written as a fraction here, not a percentage" if percent else "")
            + ". Fix: -e test_fraction=0.2 (a fifth of each class held out for the test)"
        ) from None


def _check(args: argparse.Namespace) -> int:
    """``check``: what a task refuses before TensorFlow starts; 0, or a user error raised.

    In the order a user fixes them: settings and TF_CONFIG, the staged
    dataset (or, with ``--no-data``, the model's name), the task's address,
    the model against the dataset's shape (``--build``), then the training
    split against the global batch. Warnings go to stderr as ``warning: ``
    lines.
    """
    from training.train import check, check_global_batch, few_steps, oversubscribed

    if args.tf_config_file:
        try:
            os.environ["TF_CONFIG"] = args.tf_config_file.read_text(encoding="utf-8")
        except OSError as err:
            raise TrainError(f"cannot read --tf-config-file: {err}") from None
    config = _config(args)
    manifest = None
    n_train = None  # examples in the training split, when known and read by this task
    warnings = []
    if args.no_data:
        tf_config = parse_tf_config(os.environ.get("TF_CONFIG"), args.strategy)
        if args.script:
            from training.script import check_script, split_args

            check_script(Path(args.script))
            split_args(args.script_args)
        else:
            models.get(args.model)
            n_train = args.train_examples
    else:
        tf_config = check(config, global_batch=False)
        warnings.append(oversubscribed(config, tf_config))
        if tf_config is None or tf_config.task.type != "ps":
            manifest = datasets.read_manifest(
                config.data_dir, datasets.prepared_id(config.data_dir, config.dataset)
            )
            n_train = manifest.train.examples
    if tf_config is not None and tf_config.task.type == "ps":
        n_train = None  # a ps holds variables and reads no data
    if args.own_address and tf_config is not None and tf_config.task.host:
        check_own_address(tf_config.task.host)
    if args.build:
        from training.models._common import DEFAULT_INPUT_SHAPE, DEFAULT_NUM_CLASSES

        # Without the dataset (--no-data): the shape given, else a model's build default.
        models.check_model(
            config.model,
            manifest.input_shape if manifest else args.input_shape or DEFAULT_INPUT_SHAPE,
            len(manifest.classes) if manifest else args.num_classes or DEFAULT_NUM_CLASSES,
            config.learning_rate or models.learning_rate(config.model),
            models.resolve_steps_per_execution(
                config.model, config.steps_per_execution, config.strategy
            ),
        )
    if n_train is not None:
        check_global_batch(config, tf_config, n_train)
        if not config.script:  # a script's steps are its own
            warnings.append(few_steps(config, tf_config, n_train))
    for warning in filter(None, warnings):
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _prepare_data(args: argparse.Namespace) -> dict[str, object]:
    """``prepare-data``: the dataset prepared, or found, as one JSON object.

    With ``--check`` nothing is prepared: a dataset prepared already is
    described as without it (``changed`` false); one that is not is
    ``{"changed": true, "checked": <spec>, "kind": ...}`` with the shape,
    classes and example counts of :func:`training.datasets.describe`, once its
    spec and settings pass.
    """
    settings = datasets.Settings(
        image_size=args.image_size,
        color_mode=args.color_mode,
        test_fraction=args.test_fraction,
        skip_bad_images=args.skip_bad_images,
        label_column=args.label_column,
        ignore_columns=args.ignore_columns,
        # Raised to the workers, not from a bad value: check_settings refuses that.
        shards=max(args.shards, args.workers) if args.shards >= 1 else args.shards,
        seed=datasets.DEFAULT_SEED,
    )
    if args.check:
        found, _ = datasets.prepare(
            args.dataset, args.cache_dir, settings, args.source, check_only=True
        )
        if found is None:  # valid, not prepared yet: preparing would change it
            module = datasets.resolve(args.dataset)
            kind = getattr(module, "KIND", None) or getattr(module, "NAME", "")
            return {
                "changed": True,
                "checked": args.dataset,
                "kind": kind,
                **datasets.describe(args.dataset, settings, args.source),
                "ignored_settings": datasets.ignored_settings(args.dataset, settings),
            }
        manifest, written = found, False
    else:
        manifest, written = datasets.prepare(args.dataset, args.cache_dir, settings, args.source)
    return {
        "changed": written,
        "ignored_settings": datasets.ignored_settings(args.dataset, settings),
        "warnings": list(manifest.warnings),
        "id": manifest.id,
        "dir": str(manifest.path),
        "kind": manifest.kind,
        "input_shape": list(manifest.input_shape),
        "dtype": manifest.dtype,
        "classes": list(manifest.classes),
        "train_examples": manifest.train.examples,
        "test_examples": manifest.test.examples,
        "train_shards": [s.file for s in manifest.train.shards],
        "test_shards": [s.file for s in manifest.test.shards],
        "skipped": list(manifest.skipped),
        "ignored_files": manifest.ignored_files,
        "bytes": manifest.bytes,
    }


def _column_names(text: str) -> tuple[str, ...]:
    """Comma-separated column names for argparse: ``"row_id, site"`` -> ``("row_id", "site")``."""
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _photo_count(text: str) -> int:
    """A number of bench photos for argparse: one of each class at least."""
    from training.bench_photos import CLASSES

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < len(CLASSES):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of photos; give {len(CLASSES)} or more (one a class)"
        )
    return value


def _accuracy(text: str) -> float:
    """A test accuracy for argparse: a number above 0 and at most 1."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a test accuracy; give a fraction above 0 and at most 1, such as 0.95"
        )
    return value


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _step_bench(args: argparse.Namespace) -> int:
    """``step-bench``: every model checked before the first trains; a trace file each."""
    from training.bench import step_trace

    names = [name for name in args.models.split(",") if name]
    if not names:
        raise BenchError("--models is empty; name one model or more, e.g. --models mnist_cnn")
    if args.output_dir and not args.host:
        raise BenchError("--output-dir needs --host, the node's name in the files' names")
    for name in names:
        models.get(name)
    # Staged, or DatasetError.
    datasets.read_manifest(args.data_dir, datasets.prepared_id(args.data_dir, args.dataset))
    for name in names:
        trace = step_trace(name, args.data_dir, args.dataset, args.seconds, args.batch_size)
        text = json.dumps(trace) + "\n"
        if args.output_dir:
            _write_atomically(args.output_dir / f"steps-{name}-{args.host}.json", text)
        steps = len(trace["starts"]) - 1
        span = trace["starts"][-1] - trace["starts"][0]
        print(
            f"{name}: {steps} steps of {args.batch_size} in {span:.1f} s, "
            f"{1000 * span / max(steps, 1):.1f} ms a step"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run a command; return the process exit status (0 ok, 1 failed, 2 user error)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # absl logs every checkpoint shard at INFO: noise in the task logs.
    logging.getLogger("absl").setLevel(logging.DEBUG if args.verbose else logging.WARNING)
    try:
        return _dispatch(args)
    except DivergedError as err:
        print(f"error: {err}", file=sys.stderr)
        return DIVERGED_EXIT
    except USER_ERRORS as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _dispatch(args: argparse.Namespace) -> int:
    from training import launcher

    if args.command == "train" and args.script:
        from training import script as scripts
        from training.train import check

        config = _config(args)
        check(config)
        data = Path(config.data_dir) / datasets.prepared_id(config.data_dir, config.dataset)
        return scripts.run_script(
            Path(config.script),
            scripts.split_args(os.environ.get(scripts.ENV_SCRIPT_ARGS, "")),
            data_dir=data,
            output_dir=Path(config.output_dir),
            run_id=config.run_id,
        )
    if args.command == "train":
        from training.train import run, stop_requested

        try:
            metrics = run(_config(args))
        except BaseException:
            # Stopped: whatever the stop broke on the way out (a collective
            # whose partner stopped first) is part of the stop, not a failure.
            if stop_requested():
                return stop_requested()
            raise
        if metrics:
            print(
                f"{metrics['model']} with {metrics['strategy']} on {len(metrics['tasks'])} "
                f"task(s): test accuracy {metrics['test_accuracy']:.4f}, "
                f"{metrics['train_seconds']:.1f} s, {metrics['examples_per_second']:.0f} examples/s"
            )
        return 0
    if args.command == "check":
        return _check(args)
    if args.command == "local-modules":
        from training.script import local_modules

        print(json.dumps(local_modules(args.file)))
        return 0
    if args.command == "prepare-data":
        print(json.dumps(_prepare_data(args)))
        return 0
    if args.command == "prune-data":
        from training.datasets.prune import prune

        if args.train_shards is not None and args.current is None:
            raise datasets.DatasetError("--train-shards needs --current: the dataset they are of")
        pruned = prune(args.data_dir, args.keep, args.current, args.train_shards)
        print(json.dumps(pruned.as_json()))
        return 0
    if args.command == "models":
        if args.check is not None:
            models.check_name(args.check)
        else:
            print(json.dumps(models.available()))
        return 0
    if args.command == "launch":
        return launcher.launch(args.run_dir, args.spec or args.run_dir / launcher.SPEC_FILE)
    if args.command == "follow":
        from training.follow import follow

        print(json.dumps(follow(args.run_dir, args.wait, args.unit, args.cursor_file, args.least)))
        return 0
    if args.command == "listen":
        from training.netcheck import listen

        ports = [int(p) for p in args.ports.split(",") if p]
        return listen(ports, args.seconds, args.stop_file)
    if args.command == "status":
        from training.status import tasks_status

        print(json.dumps(tasks_status(args.run_dir, args.task, args.unit_template, args.sample)))
        return 0
    if args.command == "sync-backup":
        from training.backup import sync_from_chief

        if args.source:
            sync_from_chief(args.source, args.backup_dir)
        return 0
    if args.command == "plot":
        from training.plots import plot_run

        for path in plot_run(args.run_dir):
            print(path)
        return 0
    if args.command == "bench":
        from training.bench import report, table, write_docs

        out = report(args.dir, args.target)
        print(table(out))
        print(f"Report: {args.dir / 'bench.json'}; plots: {', '.join(out['plots']) or 'none'}")
        if args.docs:
            results, index = write_docs(out, args.docs)
            print(f"Results: {results}; index: {index}")
        return 0
    if args.command == "machine":
        from training.machine import machine_facts, write_machine

        facts = write_machine(args.out) if args.out else machine_facts()
        print(json.dumps(facts))
        return 0
    if args.command == "all-reduce-bench":
        from training.bench import all_reduce_bench

        names = [name for name in args.models.split(",") if name]
        text = json.dumps(all_reduce_bench(names, args.calls, args.seconds), indent=2) + "\n"
        if args.output:
            _write_atomically(args.output, text)
        print(text, end="")
        return 0
    if args.command == "step-bench":
        return _step_bench(args)
    if args.command == "bench-photos":
        from training.bench_photos import read_photo_folder, write_photo_folder

        if args.out.exists():
            print(json.dumps(read_photo_folder(args.out)))
        else:
            print(json.dumps(write_photo_folder(args.out, args.images)))
        return 0
    if args.command == "data-bench":
        from training.bench import own_data, own_data_lines
        from training.data_bench import data_bench

        result = data_bench(
            args.photos,
            args.out,
            args.images,
            args.multiple,
            args.model,
            args.epochs,
            args.batch_size,
        )
        print("\n".join(own_data_lines({"own_data": own_data(result, [], [])})))
        print(f"Figures: {args.out}")
        return 0
    if args.command == "pipeline-bench":
        from training.data_bench import pipeline_rate

        rate = pipeline_rate(args.data_dir, args.dataset, args.batch_size, args.seconds)
        text = json.dumps({"host": args.host, **rate}) + "\n"
        if args.output:
            _write_atomically(args.output, text)
        print(text, end="")
        return 0
    if args.command == "predict-bench":
        from training import predict_bench

        try:
            result = predict_bench.predict_bench(args.run_dir, args.inputs, args.threads, args.host)
        except predict_bench.PredictBenchError as e:
            print(f"predict-bench: {e}", file=sys.stderr)
            return 2
        if args.output:
            _write_atomically(args.output, json.dumps(result, indent=2) + "\n")
        print("\n".join(predict_bench.lines(result)))
        return 0
    if args.command == "export":
        from training import tflite

        try:
            variants = tflite.parse_variants(args.variants)
            result = tflite.export_run(
                args.run_dir, args.data_dir, variants, args.max_accuracy_drop
            )
        except tflite.ExportError as e:
            print(f"export: {e}", file=sys.stderr)
            return 2
        print(tflite.summary(result, args.max_accuracy_drop))
        return 0
    if args.command == "predict":
        from training import predict as predicting

        if args.camera is not None and args.camera.isdigit():
            args.camera = int(args.camera)
        if not (args.images or args.csv or args.camera is not None):
            print("predict: give --images, --csv or --camera", file=sys.stderr)
            return 2
        if args.check:
            return predicting.run_check(args)
        return predicting.run(args)
    if args.command == "runs":
        from training.status import newest_runs

        if args.check is not None:
            from training.predict import PredictError, check_run

            try:
                check_run(args.check, args.runs_dir, args.takes or "images", args.variant)
            except PredictError as e:
                print(f"error: {e}", file=sys.stderr)
                return 2
            return 0
        if args.starting:
            from training.status import starting_run

            print(json.dumps(starting_run(args.runs_dir)))
            return 0
        print(json.dumps(newest_runs(args.runs_dir, args.newest, args.having, args.takes)))
        return 0
    if args.command == "summary":
        from training import summary as summarising

        try:
            print("\n".join(summarising.lines(args.run_dir, args.export_error)))
        except summarising.SummaryError as e:
            print(f"summary: {e}", file=sys.stderr)
            return 2
        return 0
    if args.command == "recovery":
        from training.tasklog import recovery_line

        try:
            metrics = json.loads((args.run_dir / "metrics.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            metrics = {}
        print(
            recovery_line(
                args.run_dir, metrics.get("resumed_from_epoch"), metrics.get("restarts") or 0
            )
        )
        return 0
    if args.command == "startup-watchdog":
        from training.tasklog import watch_startup

        tf_config = parse_tf_config(os.environ.get("TF_CONFIG"))
        if tf_config is None:
            raise TrainError("startup-watchdog watches a cluster task: set TF_CONFIG")
        return watch_startup(args.pid, args.timeout, tf_config, args.task_log)
    if args.command == "running":
        wanted = {int(p) for p in args.ports.split(",") if p}
        print(json.dumps(launcher.runs_on_ports(wanted)))
        return 0
    if args.command == "stop":
        result = launcher.stop(args.run_dir)
        print(f"{args.run_dir.resolve().name}: {result['state']}; no task of it is running")
        return 0 if result["done"] else 1
    raise AssertionError(args.command)
