"""A run's model as TensorFlow Lite: convert, quantise, and score each variant on the test split.

The control node exports a finished run (``python -m training export``,
which ``train.yml`` calls once the results are back): it holds the run's
``model.keras`` and the whole prepared dataset, so the int8 calibration can
sample the training split whatever strategy trained the model, and no node
spends its time on conversion. The variants are TensorFlow's post-training
quantisation modes (https://ai.google.dev/edge/litert/models/post_training_quantization):

- ``float32``: the model as it is, ``model.tflite``;
- ``dynamic_int8``: int8 weights, float activations, ``model-dynamic-int8.tflite``;
- ``int8``: full-integer: int8 weights and activations, int8 input and
  output, calibrated on :data:`CALIBRATION_EXAMPLES` training examples,
  ``model-int8.tflite``; the one an integer-only accelerator can run.

Each variant is run with the LiteRT interpreter (``ai_edge_litert``, the
successor of ``tflite-runtime``; TensorFlow's own ``tf.lite.Interpreter``
where it is not installed) on the test split, so its accuracy is measured,
not assumed: int8 is not always as accurate, nor always faster, on a Pi.
TensorFlow is imported when a function is called, not with the module.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The variants in the order they are written, and each one's file.
VARIANT_FILES = {
    "float32": "model.tflite",
    "dynamic_int8": "model-dynamic-int8.tflite",
    "int8": "model-int8.tflite",
}
#: Training examples the full-integer converter runs to find each
#: activation's range; TensorFlow's guide asks for "around 100-500".
CALIBRATION_EXAMPLES = 300
#: Test examples a call of the interpreter scores at once.
EVAL_BATCH = 256


class ExportError(Exception):
    """A run or a variant that cannot be exported; the message says why and the fix."""


def parse_variants(text: str) -> list[str]:
    """The variants of a comma-separated list, float32 first, each once.

    ``float32`` is always exported: the others are measured against it.

    Raises:
        ExportError: a name that is not a variant, naming the known ones.
    """
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in VARIANT_FILES]
    if unknown:
        raise ExportError(
            f"export variant {', '.join(unknown)} is not one of {', '.join(VARIANT_FILES)}; "
            "fix: set export_variants to a list of these"
        )
    return [v for v in VARIANT_FILES if v == "float32" or v in names]


def convert(model: Any, variant: str, calibration: Iterable[Any] | None = None) -> bytes:
    """The flatbuffer of ``model`` as ``variant``, from TensorFlow's converter.

    The model is converted with a free batch size. A model whose ops need a
    fixed one (a Keras LSTM: its loop's tensor lists need static shapes) is
    converted again from a concrete function of batch size 1, TensorFlow's
    recipe for fused RNN ops (https://ai.google.dev/edge/litert/models/rnn);
    :class:`Runner` then feeds it one example at a time.

    Args:
        model: a tf_keras model taking float32 (batch, *input_shape).
        variant: a key of :data:`VARIANT_FILES`.
        calibration: for ``int8``, float32 arrays of shape (1, *input_shape),
            examples of the training input as the model sees it.

    Raises:
        ExportError: ``int8`` without calibration examples, or a model
            TensorFlow's converter cannot convert (its first error line).
    """
    try:
        return _convert(model, variant, calibration, fixed_batch=False)
    except ExportError:
        raise
    except Exception:  # the converter raises several types: retry once with a fixed batch
        try:
            return _convert(model, variant, calibration, fixed_batch=True)
        except ExportError:
            raise
        except Exception as e:
            first = next((ln for ln in str(e).splitlines() if "error" in ln), str(e)[:300])
            raise ExportError(f"TensorFlow's converter cannot convert the model: {first}") from e


def _convert(
    model: Any, variant: str, calibration: Iterable[Any] | None, *, fixed_batch: bool
) -> bytes:
    import tensorflow as tf

    if fixed_batch:
        spec = tf.TensorSpec([1, *model.inputs[0].shape[1:]], model.inputs[0].dtype)
        function = tf.function(lambda x: model(x, training=False)).get_concrete_function(spec)
        converter = tf.lite.TFLiteConverter.from_concrete_functions([function], model)
    else:
        converter = tf.lite.TFLiteConverter.from_keras_model(model)
    if variant in ("dynamic_int8", "int8"):
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if variant == "int8":
        if calibration is None:
            raise ExportError("the int8 variant needs calibration examples of the training split")
        examples = list(calibration)

        def representative() -> Iterator[list[Any]]:
            for x in examples:
                yield [x]

        converter.representative_dataset = representative
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = tf.int8
        converter.inference_output_type = tf.int8
    return bytes(converter.convert())


def interpreter(model: bytes | str | Path, threads: int | None = None) -> Any:
    """A LiteRT interpreter of a ``.tflite`` flatbuffer or file, tensors not yet allocated.

    ``ai_edge_litert.interpreter.Interpreter`` when installed (the nodes'),
    otherwise TensorFlow's ``tf.lite.Interpreter``; both have the same API.
    """
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:  # a control node without ai-edge-litert
        import tensorflow as tf

        Interpreter = tf.lite.Interpreter
    if isinstance(model, bytes):
        return Interpreter(model_content=model, num_threads=threads)
    return Interpreter(model_path=str(model), num_threads=threads)


@dataclass(frozen=True)
class Runner:
    """One interpreter with its input and output tensors, quantisation included.

    Attributes:
        interpreter: the LiteRT interpreter.
        input_shape: the model's input shape without the batch axis.
        input_dtype, output_dtype: numpy dtypes of the tensors (float32 or int8).
        input_quant, output_quant: (scale, zero point) of an int8 tensor, (0.0, 0) otherwise.
        input_index, output_index: the tensors' indices in the interpreter.
        fixed_batch: the model takes one example a call (converted with a batch of 1).
    """

    interpreter: Any
    input_shape: tuple[int, ...]
    input_dtype: Any
    output_dtype: Any
    input_quant: tuple[float, int]
    output_quant: tuple[float, int]
    input_index: int
    output_index: int
    fixed_batch: bool

    @classmethod
    def load(cls, model: bytes | str | Path, threads: int | None = None) -> Runner:
        """The runner of a flatbuffer or ``.tflite`` file, its tensors allocated for one input."""
        interp = interpreter(model, threads)
        interp.allocate_tensors()
        inp = interp.get_input_details()[0]
        out = interp.get_output_details()[0]
        return cls(
            interp,
            tuple(int(d) for d in inp["shape"][1:]),
            inp["dtype"],
            out["dtype"],
            (float(inp["quantization"][0]), int(inp["quantization"][1])),
            (float(out["quantization"][0]), int(out["quantization"][1])),
            int(inp["index"]),
            int(out["index"]),
            int(inp["shape_signature"][0]) == 1,
        )

    def logits(self, x: Any) -> Any:
        """float32 (batch, classes) scores of float32 inputs (batch, *input_shape).

        An int8 model's input is quantised and its output dequantised here,
        with the scale and zero point the converter chose, so every variant
        takes and gives what the Keras model does.

        Raises:
            ExportError: inputs of another shape than the model's, naming both.
        """
        import numpy as np

        x = np.asarray(x, np.float32)
        if tuple(x.shape[1:]) != self.input_shape:
            raise ExportError(
                f"inputs of shape {tuple(x.shape[1:])} do not fit the model's "
                f"{self.input_shape}; fix: preprocess them as the run's preprocessing.json says"
            )
        if self.input_dtype != np.float32:
            scale, zero = self.input_quant
            info = np.iinfo(self.input_dtype)
            x = np.clip(np.round(x / scale + zero), info.min, info.max).astype(self.input_dtype)
        if self.fixed_batch and x.shape[0] != 1:
            # Converted with a fixed batch of 1 (see convert): one example at a time.
            return np.concatenate([self._invoke(x[i : i + 1]) for i in range(x.shape[0])])
        return self._invoke(x)

    def _invoke(self, x: Any) -> Any:
        import numpy as np

        interp = self.interpreter
        if tuple(interp.get_input_details()[0]["shape"]) != x.shape:
            interp.resize_tensor_input(self.input_index, list(x.shape))
            interp.allocate_tensors()
        # A converted Keras LSTM keeps its state in variable tensors between calls;
        # each input is a new sequence, as it is for the Keras model.
        interp.reset_all_variables()
        interp.set_tensor(self.input_index, x)
        interp.invoke()
        y = interp.get_tensor(self.output_index)
        if self.output_dtype != np.float32:
            scale, zero = self.output_quant
            y = (y.astype(np.float32) - zero) * scale
        return y


def score(model: bytes | str | Path, batches: Iterable[tuple[Any, Any]], num_classes: int) -> Any:
    """Accuracy and confusion matrix of a ``.tflite`` model over (features, labels) batches.

    Args:
        model: the flatbuffer or its file.
        batches: float32 (batch, *input_shape) features and int (batch,)
            labels, such as :func:`training.datasets.pipeline.test_dataset`'s.
        num_classes: the dataset's number of classes.

    Returns:
        A :class:`training.train.Evaluation` (its loss is NaN: the
        quantised variants give no comparable logits).
    """
    import numpy as np

    from training.train import Evaluation

    runner = Runner.load(model)
    confusion = np.zeros((num_classes, num_classes), np.int64)
    for x, y in batches:
        predicted = runner.logits(np.asarray(x)).argmax(axis=1)
        np.add.at(confusion, (np.asarray(y), predicted), 1)
    total = int(confusion.sum())
    return Evaluation(float("nan"), float(np.trace(confusion)) / max(total, 1), confusion)


def export_run(
    run_dir: Path,
    data_dir: Path,
    variants: list[str],
    max_accuracy_drop: float,
) -> dict[str, dict[str, Any]]:
    """Write each variant of a finished run's model beside it and score it on the test split.

    Reads ``<run_dir>/model.keras`` and ``metrics.json`` (its ``dataset_id``
    and ``test_accuracy``), the prepared dataset ``<data_dir>/<dataset_id>``,
    writes ``<run_dir>/<variant file>`` for each variant and adds
    ``export`` to ``metrics.json``: ``{variant: {"file", "bytes",
    "test_accuracy", "accuracy_drop", "too_lossy"}}``, the drop against the
    Keras model's test accuracy, ``too_lossy`` when it is more than
    ``max_accuracy_drop``; a variant the converter cannot make is
    ``{"file": None, "error": why}`` and the others are still written. A
    variant exported before and not named now keeps its entry while its
    file is there, so exporting one more variant loses none.

    Returns:
        ``export`` as written, in :data:`VARIANT_FILES` order.

    Raises:
        ExportError: the run has no model or metrics, or its dataset is not
            prepared in ``data_dir``; each message names the path and the fix.
    """
    import numpy as np

    from training import datasets
    from training.datasets import pipeline
    from training.train import METRICS_FILE, MODEL_FILE, write_json

    model_path, metrics_path = run_dir / MODEL_FILE, run_dir / METRICS_FILE
    for path in (model_path, metrics_path):
        if not path.is_file():
            raise ExportError(
                f"{path} is missing: only a finished run can be exported; "
                "fix: give the folder of a run that ended with its model"
            )
    metrics = json.loads(metrics_path.read_text(encoding="utf-8"))
    if metrics.get("script") or "dataset_id" not in metrics:
        raise ExportError(script_run_message(run_dir, metrics))
    dataset_id = metrics["dataset_id"]
    if not (Path(data_dir) / dataset_id / datasets.MANIFEST_FILE).is_file():
        raise ExportError(_prepare_again(run_dir, Path(data_dir), dataset_id))
    try:
        manifest = datasets.read_manifest(data_dir, dataset_id)
    except datasets.DatasetError as e:
        raise ExportError(f"{run_dir}: {e}") from e
    keras = _tf_keras()
    model = keras.models.load_model(model_path)
    calibration = None
    if "int8" in variants:
        sample = pipeline.train_dataset(manifest, data_dir, 1, seed=0).take(CALIBRATION_EXAMPLES)
        calibration = [np.asarray(x, np.float32) for x, _ in sample]
    keras_accuracy = float(metrics["test_accuracy"])
    out: dict[str, dict[str, Any]] = {}
    for variant in variants:
        path = run_dir / VARIANT_FILES[variant]
        try:
            blob = convert(model, variant, calibration)
        except ExportError as e:
            # The run keeps model.keras; the summary says which variant is missing and why.
            out[variant] = {"file": None, "error": str(e)}
            continue
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(blob)
        tmp.replace(path)
        result = score(
            blob,
            pipeline.test_dataset(manifest, data_dir, EVAL_BATCH).as_numpy_iterator(),
            len(manifest.classes),
        )
        drop = keras_accuracy - result.accuracy
        out[variant] = {
            "file": path.name,
            "bytes": len(blob),
            "test_accuracy": result.accuracy,
            "accuracy_drop": round(drop, 6),
            "too_lossy": drop > max_accuracy_drop,
        }
    before = metrics.get("export") or {}
    for variant, result in before.items():
        file = result.get("file") if isinstance(result, dict) else None
        if variant not in out and variant in VARIANT_FILES and file and (run_dir / file).is_file():
            out[variant] = result
    metrics["export"] = {v: out[v] for v in VARIANT_FILES if v in out}
    metrics["export_max_accuracy_drop"] = max_accuracy_drop
    write_json(metrics_path, metrics)
    return dict(metrics["export"])


def _prepare_again(run_dir: Path, data_dir: Path, dataset_id: str) -> str:
    """The refusal of an export whose dataset is gone (pruned): prepare it again, not train."""
    try:
        spec = str(json.loads((run_dir / "run.json").read_text(encoding="utf-8"))["dataset"])
    except (OSError, ValueError, KeyError, TypeError):
        spec = dataset_id.rsplit("-", 1)[0]
    return (
        f"{run_dir}: its dataset {dataset_id} is not in {data_dir} (removed?). Fix: prepare it "
        f"again, which trains nothing: ansible-playbook site.yml --tags data -e dataset={spec} "
        "with the -e settings the run had (image_size, color_mode, test_fraction, label_column, "
        "ignore_columns), "
        f"or python -m training prepare-data --dataset {spec} --cache-dir {data_dir} with the "
        f"same flags; it comes back as {dataset_id}. Then export again."
    )


def script_run_message(run_dir: Path, metrics: dict[str, Any]) -> str:
    """Why a run has nothing to export (a script run, or no finished run), and the fix."""
    if metrics.get("script"):
        return (
            f"{run_dir} is a run of the script {metrics['script']}: raspi-tf exports only "
            "the models its own training writes; fix: give a run of raspi-tf's training, or "
            "convert the model in your script (tf.lite.TFLiteConverter.from_keras_model)"
        )
    return (
        f"{run_dir}/metrics.json names no dataset_id: not a finished run's; "
        "fix: give the folder of a run that train.yml finished"
    )


def summary(export: dict[str, dict[str, Any]], max_accuracy_drop: float) -> str:
    """One line: each variant's size in KB and test accuracy, a drop too large flagged.

    For example ``float32 143 KB 0.9690, int8 42 KB 0.9680 test accuracy``.
    """
    parts = []
    for variant, r in export.items():
        if r.get("error"):
            parts.append(f"{variant} not exported ({r['error']})")
            continue
        part = f"{variant} {r['bytes'] / 1000:.0f} KB {r['test_accuracy']:.4f}"
        if r["too_lossy"]:
            part += f" (loses {r['accuracy_drop']:.4f}, more than {max_accuracy_drop})"
        parts.append(part)
    return ", ".join(parts) + " test accuracy"


def _tf_keras() -> Any:
    import os

    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tf_keras

    return tf_keras
