"""The summary ``train.yml`` and ``follow.yml`` print when a run ends, built from its folder.

``python -m training summary --run-dir runs/<id>`` prints it, one line per
fact, each a label padded to :data:`LABEL_WIDTH` and its value::

    run           20261206T041323Z-mnist_cnn-mwms
    model         mnist_cnn on mnist_5k (10 classes, 28x28; 4000 train / 1000 test images), 8 epochs
    learning rate 0.00141 (0.001 x sqrt(2), learning_rate_scaling=sqrt)
    ...

Everything comes from the run's folder on the control node: ``run.json``
(what was started, on which dataset), ``metrics.json`` (what the chief
measured, and the TensorFlow Lite export's results under ``export``) and
each task's event log (restarts, :func:`training.tasklog.recovery_line`).
A run of a user's own script (``metrics.json`` holds ``script``) gets the
shorter summary of :func:`script_lines`. This module imports no TensorFlow.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from training.datasets._base import input_kind
from training.progress import PROGRESS_FILE, epoch_line, newest_epochs, plural, read_events

#: Width of the label column; "learning rate" and "test accuracy" are the longest labels.
LABEL_WIDTH = 13
#: Classes the per-class line names; metrics.json keeps them all.
PER_CLASS_SHOWN = 4
#: What a run's folder holds, for the results line (docs/operations.md lists each file).
RESULT_FILES = (
    "model.keras, model*.tflite, preprocessing.json, metrics.json, *.png plots, tensorboard/, logs/"
)
#: A prepared dataset's id is ``<name>-<12 hex digits of its key>``.
_ID_KEY = re.compile(r"-[0-9a-f]{12}$")


class SummaryError(Exception):
    """A run folder without a readable ``metrics.json``; the message names the file."""


def _line(label: str, value: str) -> str:
    return f"{label:<{LABEL_WIDTH}} {value}"


def dataset_text(data: Mapping[str, Any] | None, spec: str) -> str:
    """The dataset of a run in words: its name, classes, shape, split sizes and skipped files.

    Args:
        data: ``id``, ``input_shape``, ``classes`` (names), ``train_examples``,
            ``test_examples``, ``skipped`` (a list of skipped files, or their count) and
            ``ignored_files`` (files that are not examples), as ``prepare-data`` prints them
            and ``run.json`` keeps them; ``name`` when given, else the id without its key.
            Empty for a run recorded before datasets were prepared with an id.
        spec: the dataset as the user named it, used when ``data`` is empty.

    Returns:
        ``'<name> (<n> classes, <H>x<W>[x<C>]; <train> train / <test> test images[; <k> files
        skipped][; <m> other files ignored])'``; for 1-D features (a CSV's rows) ``<n>
        features``, and "examples" for examples that are not pixels (:func:`_unit`).
    """
    if not data or "id" not in data:
        return str(spec)
    name = str(data.get("name") or _ID_KEY.sub("", str(data["id"])))
    shape = [int(n) for n in data.get("input_shape", [])]
    unit = _unit(data)
    classes = len(data.get("classes", []))
    described = [f"{classes} {'class' if classes == 1 else 'classes'}"]
    if len(shape) == 1:
        described.append(plural(shape[0], "feature"))
    elif shape:
        described.append("x".join(str(n) for n in shape))
    parts = [
        ", ".join(described),
        f"{data.get('train_examples', '?')} train / {data.get('test_examples', '?')} test {unit}",
    ]
    skipped = data.get("skipped", [])
    count = skipped if isinstance(skipped, int) else len(skipped or [])
    if count:
        parts.append(f"{plural(count, 'file')} skipped")
    ignored = int(data.get("ignored_files") or 0)
    if ignored:
        # Files of other types (a .webp, a .heic, notes): the user sees that some were left out.
        parts.append(f"{plural(ignored, 'other file')} ignored")
    return f"{name} ({'; '.join(parts)})"


def _unit(data: Mapping[str, Any]) -> str:
    """What a dataset's examples are called: ``images`` (pixels), else ``examples``.

    A CSV's rows and an ``.npz``'s features other than ``uint8`` pixels of an
    image's shape are examples (:func:`training.datasets._base.input_kind`).
    """
    shape = list(data.get("input_shape", []))
    return "images" if len(shape) >= 2 and input_kind(dict(data)) == "images" else "examples"


def per_class_text(per_class: Mapping[str, float | None] | None) -> str:
    """Each class's test accuracy in words, the weakest first, ties in the classes' order.

    Args:
        per_class: ``{class name: accuracy on its test examples}`` as
            metrics.json's ``per_class_accuracy`` holds it; None for a class
            the test split has no example of.

    Returns:
        ``'<class> <accuracy>, ...'`` with 3 decimals, for at most
        :data:`PER_CLASS_SHOWN` classes: ``'weakest 8 0.930, 5 0.941, 3 0.950, 9 0.952 of 10
        classes'`` when there are more; a class without test examples comes last, as
        ``'<class> no test example'``. ``''`` when ``per_class`` is empty or missing.
    """
    if not per_class:
        return ""
    scored = sorted(
        ((name, acc) for name, acc in per_class.items() if acc is not None), key=lambda c: c[1]
    )
    unscored = [name for name, acc in per_class.items() if acc is None]
    named = [f"{name} {acc:.3f}" for name, acc in scored] + [
        f"{name} no test example" for name in unscored
    ]
    if len(named) <= PER_CLASS_SHOWN:
        return ", ".join(named)
    return f"weakest {', '.join(named[:PER_CLASS_SHOWN])} of {len(named)} classes"


def tflite_text(metrics: Mapping[str, Any], export_error: str = "") -> str:
    """The TensorFlow Lite variants a run has, each with its size and test accuracy, or why none.

    Args:
        metrics: the run's metrics.json; ``export`` and ``export_max_accuracy_drop`` are
            what ``python -m training export`` added (:func:`training.tflite.export_run`).
        export_error: the export's last line of error output when it failed this time.

    Returns:
        ``'float32 143 KB 0.9690 test accuracy'`` (:func:`training.tflite.summary`),
        ``'not exported: <why>'``, or, when metrics.json records no export, how to make it.
    """
    from training.tflite import summary

    if export_error:
        return f"not exported: {export_error}"
    export = metrics.get("export")
    if not export:
        run = metrics.get("run_id") or "<run id>"
        return f"not exported yet: ansible-playbook follow.yml -e run={run} exports it"
    return summary(export, float(metrics.get("export_max_accuracy_drop", 0.0)))


def batch_text(metrics: Mapping[str, Any]) -> str:
    """The global batch and how it is made up: ``'128 global (64 per worker x 2 replicas)'``."""
    if metrics["strategy"] == "parameter_server":
        return (
            f"{metrics['global_batch_size']} per step, each worker applying its own batch "
            "asynchronously"
        )
    replicas = metrics["num_replicas_in_sync"]
    return (
        f"{metrics['global_batch_size']} global ({metrics['batch_size_per_worker']} per worker "
        f"x {plural(replicas, 'replica')})"
    )


def _recovery(run_dir: Path, metrics: Mapping[str, Any]) -> str:
    from training.tasklog import recovery_line

    try:
        return recovery_line(
            run_dir, metrics.get("resumed_from_epoch"), metrics.get("restarts") or 0
        )
    except (OSError, ValueError, KeyError) as e:  # a task log cut off mid-line, unreadable
        return f"unknown ({e})"


def run_lines(
    run_dir: Path | str,
    record: Mapping[str, Any],
    metrics: Mapping[str, Any],
    export_error: str = "",
) -> list[str]:
    """The summary of a run of raspi-tf's own training, one fact a line.

    Args:
        run_dir: the run's folder, as it is to be shown.
        record: the run's run.json (``run_id``, ``model``, ``data``); {} when it has none.
        metrics: the run's metrics.json, as the chief wrote it (:mod:`training.train`).
        export_error: the TensorFlow Lite export's error, when it failed this time.

    Returns:
        The lines: run, model, learning rate, strategy, batch, test accuracy, per class,
        tflite, wall time, throughput, recovery, results, tensorboard.
    """
    m = metrics
    data = record.get("data") or {}
    unit = _unit(data) if data else "images"  # a run recorded before datasets had ids: MNIST
    rule = f" ({m['learning_rate_rule']})" if m.get("learning_rate_rule") else ""
    wire = m.get("config", {}).get("all_reduce_dtype", "float32")
    wire = f", {wire} all-reduce" if wire != "float32" else ""
    since = "its last start" if m.get("resumed_from_epoch") is not None else "start"
    steady = (
        f", {m['steady_examples_per_second']:.0f} examples/s after the first epoch"
        if m["epochs"] > 1
        else ""
    )
    tensorboard = shlex.quote(f"{run_dir}/tensorboard")
    return [
        _line("run", str(record.get("run_id") or m.get("run_id") or Path(run_dir).name)),
        _line(
            "model",
            f"{record.get('model') or m['model']} on {dataset_text(data, m['dataset'])}, "
            f"{plural(m['epochs'], 'epoch')}",
        ),
        _line("learning rate", f"{m['learning_rate']:.3g}{rule}"),
        _line("strategy", f"{m['strategy']} over {', '.join(m['tasks'])}{wire}"),
        _line("batch", batch_text(m)),
        _line(
            "test accuracy",
            f"{m['test_accuracy']:.4f} on {m['test_examples']} held-out {unit} "
            f"(loss {m['test_loss']:.4f})",
        ),
        _line("per class", per_class_text(m.get("per_class_accuracy")) or "not recorded"),
        _line("tflite", f"{tflite_text(m, export_error)} (model*.tflite)"),
        _line(
            "wall time",
            f"{m['train_seconds']:.1f} s training ({m['wall_seconds']:.1f} s for the chief "
            f"from {since} to end)",
        ),
        _line("throughput", f"{m['examples_per_second']:.0f} examples/s over the run{steady}"),
        _line("recovery", _recovery(Path(run_dir), m)),
        _line("results", f"{run_dir} ({RESULT_FILES})"),
        _line("tensorboard", f"tensorboard --logdir {tensorboard}"),
    ]


def script_lines(
    run_dir: Path | str, record: Mapping[str, Any], metrics: Mapping[str, Any]
) -> list[str]:
    """The summary of a run of a user's script (:mod:`training.script`), one fact a line.

    Returns:
        The lines: run, script, the staged dataset, tasks, wall time, the
        last epoch (when the script printed Keras' epochs), recovery, results.
    """
    m = metrics
    data = record.get("data") or {}
    outputs = ", ".join(m.get("outputs") or []) or "the script wrote no file"
    # Keras' epochs as the script printed them (training.script.ScriptOutput).
    epochs = newest_epochs(read_events(Path(run_dir) / PROGRESS_FILE))
    return [
        _line("run", str(record.get("run_id") or m.get("run_id") or Path(run_dir).name)),
        _line("script", m["script"]),
        # Staged for the script, which may read it or its own data: not "trained on".
        _line(
            "staged data",
            f"{dataset_text(data, record.get('dataset', ''))}, in RASPI_TF_DATA_DIR",
        ),
        _line("tasks", ", ".join(m["tasks"])),
        _line("wall time", f"{m['wall_seconds']:.1f} s for the chief's script"),
        *([_line("training", epoch_line(epochs[-1]))] if epochs else []),
        _line("recovery", _recovery(Path(run_dir), m)),
        _line("results", f"{run_dir}: {outputs} (and metrics.json, script/, logs/)"),
    ]


def lines(run_dir: Path | str, export_error: str = "") -> list[str]:
    """The summary of the run in ``run_dir``: :func:`run_lines`, or :func:`script_lines`.

    Then one ``WARNING: ...`` line for each of metrics.json's ``warnings``.

    Raises:
        SummaryError: ``run_dir`` is no folder, holds no run (no ``run.json`` nor
            ``metrics.json``), or its ``metrics.json`` is missing or not JSON (a run that
            did not finish: ``status.yml`` says what it did).
    """
    folder = Path(run_dir)
    fix = "Fix: give a folder of runs/, e.g. runs/latest"
    if not str(run_dir).strip() or not folder.is_dir():
        what = "is a file" if folder.exists() and str(run_dir).strip() else "does not exist"
        raise SummaryError(f"run folder {str(run_dir)!r} {what}. {fix}")
    try:
        record = json.loads((folder / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = {}  # a run started by hand (python -m training train) has no run.json
    try:
        metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        if not record:
            raise SummaryError(
                f"{folder} is no run folder: it has no run.json nor metrics.json. {fix}"
            ) from e
        raise SummaryError(
            f"{folder}/metrics.json cannot be read ({e}): the run did not finish. "
            f"Fix: ansible-playbook status.yml -e run={folder.name} says what it did"
        ) from e
    if "script" in metrics:
        summary = script_lines(run_dir, record, metrics)
    else:
        summary = run_lines(run_dir, record, metrics, export_error)
    # A model of no use yet (training.train.untrained): said last, where the eye lands.
    return summary + [f"WARNING: {warning}" for warning in metrics.get("warnings") or []]
