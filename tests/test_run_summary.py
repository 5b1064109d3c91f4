"""The dataset line of a run's summary, from what prepare-data said (or run.json kept)."""

from __future__ import annotations

import importlib.util

from tests.conftest import ROOT

_spec = importlib.util.spec_from_file_location(
    "training_run_filters", ROOT / "roles/training_run/filter_plugins/training_run.py"
)
assert _spec and _spec.loader
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)
text = filters.training_run_dataset_text


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


def test_a_run_recorded_before_datasets_had_ids_is_named_as_given() -> None:
    assert text({}, "mnist_5k") == "mnist_5k"
    assert text(None, "mnist") == "mnist"


per_class = filters.training_run_per_class_text


def test_a_few_classes_are_all_named_the_weakest_first() -> None:
    accuracy = {"cat": 0.96, "dog": 0.905, "owl": 0.8125}
    assert per_class(accuracy) == "owl 0.812, dog 0.905, cat 0.960"
    assert per_class({"ok": 1.0, "none": None}) == "ok 1.000, none no test example"
    assert per_class({}) == "" and per_class(None) == ""


def test_of_many_classes_only_the_weakest_are_named() -> None:
    accuracy = {str(d): 0.97 for d in range(10)} | {"8": 0.93, "5": 0.941, "3": 0.95, "9": 0.952}
    assert per_class(accuracy) == "weakest 8 0.930, 5 0.941, 3 0.950, 9 0.952 of 10 classes"
