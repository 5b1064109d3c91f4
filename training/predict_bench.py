"""Time per input of a finished run's model in each form: Keras and each TFLite variant.

``python -m training predict-bench`` runs on a node (the benchmark runs it
on a bench node of one core, ``molecule/bench/predict.yml``): it loads the
run's ``model.keras`` with tf-keras and each ``.tflite`` variant the export
wrote with the LiteRT interpreter, and times one input at a time, as a Pi
classifying camera frames does. Keras is called as ``model(x,
training=False)``, the call Keras recommends for inputs that fit in one
batch (https://keras.io/api/models/model_training_apis/#predict-method);
a TFLite variant goes through :class:`training.tflite.Runner`, quantising an
int8 model's input and dequantising its output as ``predict`` does.

The inputs are uniform random numbers in [0, 1) of the model's input shape:
a convolutional or recurrent model does the same work whatever the values.
Accuracy is not measured here: it is the test accuracy the run and its
export measured on the test split (``metrics.json``), given beside each
form's time and size.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from training.tflite import VARIANT_FILES, ExportError, Runner, script_run_message

#: Inputs timed for each form, after :data:`WARMUP` untimed calls (the
#: first calls build TensorFlow's functions and the interpreter's plans).
INPUTS = 200
WARMUP = 10


class PredictBenchError(Exception):
    """A run that cannot be timed; the message names the file and the fix."""


def time_calls(call: Callable[[Any], Any], inputs: list[Any], warmup: int = WARMUP) -> list[float]:
    """Milliseconds each call of ``call`` on one input took, after ``warmup`` untimed calls.

    Args:
        call: a function of one input, such as a model's.
        inputs: the inputs, each float32 (1, *input_shape).
        warmup: untimed calls first, cycling over ``inputs``.

    Returns:
        One wall-clock time a call, in ms (``time.perf_counter``), in input order.
    """
    for i in range(warmup):
        call(inputs[i % len(inputs)])
    times = []
    for x in inputs:
        started = time.perf_counter()
        call(x)
        times.append((time.perf_counter() - started) * 1000)
    return times


def predict_bench(
    run_dir: Path, count: int = INPUTS, threads: int = 1, host: str = ""
) -> dict[str, Any]:
    """Size, test accuracy and time per input of a run's Keras model and TFLite variants.

    Args:
        run_dir: a finished, exported run's folder: ``model.keras``,
            ``metrics.json`` (its ``export``) and the ``.tflite`` files.
        count: inputs timed for each form.
        threads: TensorFlow's and the interpreter's threads (1: a Pi core's share).
        host: the node's name, recorded (default: this machine's hostname).

    Returns:
        ``{"host", "run", "model", "dataset", "threads", "inputs",
        "forms"}``; ``forms`` is a list, Keras first, then the variants in
        export order, each ``{"form", "file", "bytes", "test_accuracy",
        "ms_median", "ms_p90"}`` (milliseconds a single input).

    Raises:
        PredictBenchError: the run has no ``model.keras``, no
            ``metrics.json``, or no exported variant.
    """
    import numpy as np

    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import tf_keras as keras

    metrics_path, model_path = run_dir / "metrics.json", run_dir / "model.keras"
    for path in (metrics_path, model_path):
        if not path.is_file():
            raise PredictBenchError(
                f"{path} is missing; fix: give the folder of a run that ended with its model"
            )
    metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
    if metrics.get("script"):
        raise PredictBenchError(script_run_message(run_dir, metrics))
    export = {v: e for v, e in (metrics.get("export") or {}).items() if e.get("file")}
    if not export:
        raise PredictBenchError(
            f"{metrics_path} lists no TFLite variant; fix: export the run first "
            f"(python -m training export --run-dir {run_dir} --data-dir <datasets>)"
        )
    model = keras.models.load_model(model_path)
    shape = tuple(int(d) for d in model.input_shape[1:])
    rng = np.random.default_rng(0)
    inputs = [rng.random((1, *shape), dtype=np.float32) for _ in range(count)]
    forms = [
        _form(
            "keras",
            model_path,
            metrics.get("test_accuracy"),
            time_calls(lambda x: model(x, training=False), inputs),
        )
    ]
    for variant in VARIANT_FILES:
        if variant not in export:
            continue
        path = run_dir / export[variant]["file"]
        try:
            runner = Runner.load(path, threads)
        except (ExportError, ValueError, RuntimeError) as e:
            raise PredictBenchError(f"{path} does not load: {e}") from e
        times = time_calls(runner.logits, inputs)
        forms.append(_form(variant, path, export[variant].get("test_accuracy"), times))
    return {
        "host": host or socket.gethostname(),
        "run": metrics.get("run_id", run_dir.name),
        "model": metrics.get("model"),
        "dataset": metrics.get("dataset"),
        "threads": threads,
        "inputs": count,
        "forms": forms,
    }


def _form(name: str, path: Path, accuracy: Any, times: list[float]) -> dict[str, Any]:
    times = sorted(times)
    return {
        "form": name,
        "file": path.name,
        "bytes": path.stat().st_size,
        "test_accuracy": accuracy,
        "ms_median": round(statistics.median(times), 4),
        "ms_p90": round(times[int(0.9 * (len(times) - 1))], 4),
    }


def form_line(form: dict[str, Any]) -> str:
    """A form's figures as text, e.g. ``int8  42 KB  test accuracy 0.9690  0.097 ms an input``."""
    accuracy = form["test_accuracy"]
    return (
        f"{form['form']:<13}{form['bytes'] / 1000:>7.0f} KB  test accuracy "
        f"{'-' if accuracy is None else f'{accuracy:.4f}'}  {form['ms_median']:.3f} ms an input "
        f"(p90 {form['ms_p90']:.3f})"
    )


def lines(result: dict[str, Any]) -> list[str]:
    """:func:`predict_bench`'s figures as text: a head line, then a line a form."""
    head = (
        f"{result['model']} ({result['run']}) on {result['host']}, "
        f"{result['threads']} thread(s), median of {result['inputs']} single inputs:"
    )
    return [head, *(f"  {form_line(f)}" for f in result["forms"])]
