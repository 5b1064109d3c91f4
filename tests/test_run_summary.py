"""The summary a run ends with (training/summary.py), from its run.json and metrics.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from training.cli import main
from training.summary import SummaryError, dataset_text, lines, per_class_text

text = dataset_text
per_class = per_class_text


def test_an_image_folder_is_named_with_its_classes_shape_split_and_skipped_files() -> None:
    data = {
        "id": "photos-3f2a9c0d1e4b",
        "input_shape": [64, 64, 3],
        "classes": ["cat", "dog", "owl"],
        "train_examples": 812,
        "test_examples": 203,
        "skipped": [{"file": "dog/x.jpg", "reason": "truncated"}, {"file": "a.png", "reason": ""}],
        "ignored_files": 3,  # a .webp, a .heic, notes.txt: not images raspi-tf reads
    }
    assert text(data, "/home/me/photos") == (
        "photos (3 classes, 64x64x3; 812 train / 203 test images; 2 files skipped; "
        "3 other files ignored)"
    )


def test_nothing_skipped_says_nothing_of_it() -> None:
    data = {"id": "mnist_5k-0123456789ab", "input_shape": [28, 28], "classes": list("0123456789")}
    data |= {"train_examples": 4000, "test_examples": 1000, "skipped": []}
    assert text(data, "mnist_5k") == "mnist_5k (10 classes, 28x28; 4000 train / 1000 test images)"


def test_a_csv_has_features_and_examples() -> None:
    data = {"id": "iris-0123456789ab", "name": "iris", "input_shape": [4], "classes": ["a", "b"]}
    data |= {"train_examples": 120, "test_examples": 30, "skipped": 1}
    assert text(data, "iris.csv") == (
        "iris (2 classes, 4 features; 120 train / 30 test examples; 1 file skipped)"
    )


def test_an_npz_of_features_has_examples_and_one_of_pixels_images() -> None:
    data = {"id": "d-0123456789ab", "name": "d", "kind": "npz", "input_shape": [8, 8]}
    data |= {"classes": ["a", "b"], "train_examples": 90, "test_examples": 10}
    assert text(data | {"dtype": "float32"}, "d.npz").endswith("90 train / 10 test examples)")
    assert text(data | {"dtype": "uint8"}, "d.npz").endswith("90 train / 10 test images)")


def test_a_run_recorded_before_datasets_had_ids_is_named_as_given() -> None:
    assert text({}, "mnist_5k") == "mnist_5k"
    assert text(None, "mnist") == "mnist"


def test_a_few_classes_are_all_named_the_weakest_first() -> None:
    accuracy = {"cat": 0.96, "dog": 0.905, "owl": 0.8125}
    assert per_class(accuracy) == "owl 0.812, dog 0.905, cat 0.960"
    assert per_class({"ok": 1.0, "none": None}) == "ok 1.000, none no test example"
    assert per_class({}) == "" and per_class(None) == ""


def test_of_many_classes_only_the_weakest_are_named() -> None:
    accuracy = {str(d): 0.97 for d in range(10)} | {"8": 0.93, "5": 0.941, "3": 0.95, "9": 0.952}
    assert per_class(accuracy) == "weakest 8 0.930, 5 0.941, 3 0.950, 9 0.952 of 10 classes"


# A run's folder as train.yml leaves it: the quick start's run.json and metrics.json, cut to
# what the summary reads.
RUN_ID = "20261206T041323Z-mnist_cnn-mwms"
DATA = {
    "id": "mnist_5k-86dddb268823",
    "input_shape": [28, 28],
    "classes": [str(d) for d in range(10)],
    "train_examples": 4000,
    "test_examples": 1000,
    "skipped": [],
    "ignored_files": 0,
}
METRICS: dict[str, Any] = {
    "run_id": RUN_ID,
    "config": {"all_reduce_dtype": "float32"},
    "model": "mnist_cnn",
    "dataset": "mnist_5k-86dddb268823",
    "strategy": "multi_worker_mirrored",
    "tasks": ["worker-0", "worker-1"],
    "num_replicas_in_sync": 2,
    "epochs": 8,
    "learning_rate": 0.0014142135623730952,
    "learning_rate_rule": "0.001 x sqrt(2), learning_rate_scaling=sqrt",
    "batch_size_per_worker": 64,
    "global_batch_size": 128,
    "test_examples": 1000,
    "steady_examples_per_second": 5530.9,
    "restarts": 0,
    "resumed_from_epoch": None,
    "test_loss": 0.10247631072998047,
    "test_accuracy": 0.969,
    "per_class_accuracy": {"0": 0.98, "1": 0.97, "2": 0.97, "3": 0.92, "4": 0.97}
    | {"5": 0.99, "6": 0.98, "7": 0.97, "8": 0.96, "9": 0.98},
    "warnings": [],
    "train_seconds": 7.295,
    "examples_per_second": 4351.5,
    "wall_seconds": 11.329,
    "export": {
        "float32": {"file": "model.tflite", "bytes": 143232, "test_accuracy": 0.969}
        | {"accuracy_drop": 0.0, "too_lossy": False}
    },
    "export_max_accuracy_drop": 0.02,
}


def run_folder(root: Path, metrics: dict[str, Any], record: dict[str, Any] | None = None) -> Path:
    """``root/<run id>/`` holding run.json (unless ``record`` is {}) and metrics.json."""
    folder = root / RUN_ID
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps(metrics))
    if record is None:
        record = {"run_id": RUN_ID, "model": "mnist_cnn", "dataset": "mnist_5k", "data": DATA}
    if record:
        (folder / "run.json").write_text(json.dumps(record))
    return folder


def by_label(summary: list[str]) -> dict[str, str]:
    """Each line's value by its label (the first 13 characters, stripped)."""
    return {line[:13].strip(): line[14:] for line in summary}


def test_the_quick_starts_summary_reads_as_the_readme_shows_it(tmp_path: Path) -> None:
    folder = run_folder(tmp_path, METRICS)
    readme = (Path(__file__).parents[1] / "README.md").read_text()
    summary = lines(folder)
    for line in summary[:7]:  # the lines the README shows, from run to per class
        assert f"    - {line.replace(str(folder.parent), 'runs')}\n" in readme, line
    assert summary[7:] == [
        "tflite        float32 143 KB 0.9690 test accuracy (model*.tflite)",
        "wall time     7.3 s training (11.3 s for the chief from start to end)",
        "throughput    4352 examples/s over the run, 5531 examples/s after the first epoch",
        "recovery      none (no task restarted)",
        f"results       {folder} (model.keras, model*.tflite, preprocessing.json, metrics.json, "
        "*.png plots, tensorboard/, logs/)",
        f"tensorboard   tensorboard --logdir {folder}/tensorboard",
    ]


def test_asynchronous_half_precision_resumed_and_one_epoch_runs_say_so(tmp_path: Path) -> None:
    metrics = METRICS | {
        "strategy": "parameter_server",
        "config": {"all_reduce_dtype": "float16"},
        "epochs": 1,
        "resumed_from_epoch": 0,
        "per_class_accuracy": {},
    }
    summary = by_label(lines(run_folder(tmp_path, metrics)))
    assert summary["model"].endswith(", 1 epoch")
    assert summary["strategy"] == "parameter_server over worker-0, worker-1, float16 all-reduce"
    assert summary["batch"] == "128 per step, each worker applying its own batch asynchronously"
    assert summary["per class"] == "not recorded"
    assert summary["wall time"].endswith("from its last start to end)")
    assert summary["throughput"] == "4352 examples/s over the run"


def test_a_csv_run_counts_examples_and_a_failed_export_says_why(tmp_path: Path) -> None:
    data = DATA | {"id": "wine-0123456789ab", "input_shape": [13], "classes": ["a", "b", "c"]}
    record = {"run_id": RUN_ID, "model": "tabular_mlp", "data": data}
    folder = run_folder(tmp_path, {k: v for k, v in METRICS.items() if k != "export"}, record)
    summary = by_label(lines(folder))
    assert summary["model"].startswith("tabular_mlp on wine (3 classes, 13 features;")
    assert summary["test accuracy"] == "0.9690 on 1000 held-out examples (loss 0.1025)"
    assert summary["tflite"].startswith(
        f"not exported yet: ansible-playbook follow.yml -e run={RUN_ID}"
    )
    failed = by_label(lines(folder, "export: ValueError: cannot convert"))
    assert failed["tflite"] == "not exported: export: ValueError: cannot convert (model*.tflite)"


def test_a_model_of_no_use_yet_is_warned_of_last(tmp_path: Path) -> None:
    warning = "test accuracy 0.1000 is no better than always answering the most common class"
    summary = lines(run_folder(tmp_path, METRICS | {"warnings": [warning]}))
    assert summary[-1] == f"WARNING: {warning}" and summary[-2].startswith("tensorboard ")


def test_a_scripts_run_names_the_script_and_what_it_wrote(tmp_path: Path) -> None:
    metrics = {"script": "train_mine.py", "tasks": ["worker-0"], "wall_seconds": 42.0}
    record = {"run_id": RUN_ID, "dataset": "mnist_5k", "data": DATA}
    folder = run_folder(tmp_path, metrics | {"outputs": ["mine.keras"]}, record)
    assert lines(folder) == [
        f"run           {RUN_ID}",
        "script        train_mine.py",
        "staged data   mnist_5k (10 classes, 28x28; 4000 train / 1000 test images), in "
        "RASPI_TF_DATA_DIR",
        "tasks         worker-0",
        "wall time     42.0 s for the chief's script",
        "recovery      none (no task restarted)",
        f"results       {folder}: mine.keras (and metrics.json, script/, logs/)",
    ]


def test_a_run_started_by_hand_has_no_run_json_and_is_named_by_its_metrics(
    tmp_path: Path,
) -> None:
    summary = by_label(lines(run_folder(tmp_path, METRICS, record={})))
    assert summary["run"] == RUN_ID
    assert summary["model"] == "mnist_cnn on mnist_5k-86dddb268823, 8 epochs"


def test_a_folder_without_a_finished_run_is_refused_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fix = "Fix: give a folder of runs/, e.g. runs/latest"
    with pytest.raises(SummaryError, match=r"'.*nosuch' does not exist\. Fix: give a folder"):
        lines(tmp_path / "nosuch")
    with pytest.raises(SummaryError, match="'' does not exist"):
        lines("")
    (tmp_path / "data.csv").write_text("a,label\n")
    with pytest.raises(SummaryError, match=r"data\.csv' is a file\. Fix: give a folder"):
        lines(tmp_path / "data.csv")
    with pytest.raises(
        SummaryError, match=f"is no run folder: it has no run.json nor metrics.json. {fix}"
    ):
        lines(tmp_path)
    started = tmp_path / "started"
    started.mkdir()
    (started / "run.json").write_text(json.dumps({"run_id": "started", "state": "running"}))
    assert main(["summary", "--run-dir", str(started)]) == 2
    err = capsys.readouterr().err
    assert "started/metrics.json cannot be read" in err
    assert "Fix: ansible-playbook status.yml -e run=started" in err
    assert main(["summary", "--run-dir", str(run_folder(tmp_path, METRICS))]) == 0
    assert capsys.readouterr().out.startswith(f"run           {RUN_ID}\n")
