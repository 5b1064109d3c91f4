"""Data and models of one's own through train.yml and site.yml on the local inventory.

An image folder written from real digits and photographs (tests/imagefolder.py)
with a truncated and an empty image, scikit-learn's iris as a CSV with class
names, and a model file outside the repository.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import cv2
import pytest

from tests.conftest import run_playbook
from tests.imagefolder import CLASSES, write_image_folder
from tests.tabular import IRIS_FEATURES, write_iris_csv

pytestmark = pytest.mark.integration

MY_MODEL = '''"""A model of one's own, outside the repository: a small MLP for feature vectors."""

import tf_keras as keras

from training.models import compile_model


from layers import hidden  # a module beside it, which goes with it


def build(learning_rate, steps_per_execution=1, *, input_shape, num_classes):
    model = keras.Sequential([keras.Input(input_shape), hidden(), keras.layers.Dense(num_classes)])
    return compile_model(model, learning_rate, steps_per_execution)
'''
LAYERS = """import tf_keras as keras


def hidden():
    return keras.layers.Dense(32, activation="relu")
"""


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of the user's data, and the data folders of this module's runs."""
    root = tmp_path_factory.mktemp("own")
    write_image_folder(root / "photos", bad=True, per_class=100)
    return root


def data_vars(work: Path) -> list[str]:
    """Prepare and read datasets in the test's own folder, not the checkout's .cache."""
    cache = work / "datasets"
    return ["-e", f"training_data_cache_dir={cache}", "-e", f"training_data_dir={cache}"]


def train(work: Path, runs: Path, *extra: str) -> str:
    result = run_playbook(
        "train.yml", "-e", f"training_run_runs_dir={runs}", *data_vars(work), *extra
    )
    return " ".join(result.stdout.split()) + f" rc={result.returncode}"


def recap_changed(text: str) -> int:
    match = re.search(r"localhost\s*:\s*ok=\d+\s+changed=(\d+)", text)
    assert match, text[-2000:]
    return int(match.group(1))


def test_check_mode_builds_the_model_for_a_folder_not_prepared_yet(
    work: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    photos = ["-e", f"dataset={work / 'photos'}", "--check"]
    refused = train(work, runs, *photos, "-e", "model=tabular_mlp")
    assert refused.endswith("rc=2"), refused[-2000:]
    assert "tabular_mlp cannot take inputs of shape (64, 64, 3)" in refused, refused[-2000:]
    # Its photos are counted from their names: two workers at 300 each need 600.
    small = train(work, runs, *photos, "-e", "model=pi_mobilenet", "-e", "batch_size=300")
    assert small.endswith("rc=2"), small[-2000:]
    assert re.search(
        r"\d+ training examples are fewer than one step's global batch of 600 "
        r"\(batch_size 300 x 2 replicas\)\. Fix: -e batch_size=\d+ or less",
        small,
    ), small[-2000:]
    passed = train(work, runs, *photos, "-e", "model=pi_mobilenet")
    assert passed.endswith("rc=0"), passed[-2000:]
    assert "Check mode: every check passed; a run would train pi_mobilenet" in passed
    assert "The dataset is not prepared yet: its images were counted, not decoded." in passed
    assert not (work / "datasets").exists() and not runs.exists()


def test_bad_images_are_refused_before_the_start_then_skipped(work: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    refused = train(work, runs, "-e", f"dataset={work / 'photos'}")
    assert refused.endswith("rc=2"), refused[-2000:]
    assert "2 files cannot be read: one/broken.jpg (truncated JPEG" in refused, refused[-2000:]
    assert "seven/empty.png (empty file)" in refused
    assert "-e skip_bad_images=true" in refused
    assert not runs.exists()  # nothing started, no run folder

    settings = ["-e", "skip_bad_images=true", "-e", "image_size=32", "-e", "batch_size=16"]
    out = train(
        work, runs, "-e", f"dataset={work / 'photos'}", "-e", "model=pi_mobilenet", *settings
    )
    assert out.endswith("rc=0"), out[-3000:]
    assert re.search(r"pi_mobilenet on photos \(4 classes, 32x32x3; \d+ train / \d+ test", out)
    run = runs / "latest"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["classes"] == CLASSES
    assert metrics["test_accuracy"] >= 0.9, metrics["per_class_accuracy"]
    # pi_mobilenet's random shift of training photos is not in the exported model.
    # One test image at most, on a near tie of two classes' logits.
    exported = metrics["export"]["float32"]["test_accuracy"]
    assert abs(exported - metrics["test_accuracy"]) <= 1 / metrics["test_examples"]
    assert sorted(s["file"] for s in metrics["skipped_examples"]) == [
        "one/broken.jpg",
        "seven/empty.png",
    ]
    assert sum(map(sum, metrics["confusion_matrix"])) == metrics["test_examples"]
    preprocessing = json.loads((run / "preprocessing.json").read_text())
    assert preprocessing["classes"] == CLASSES
    assert (preprocessing["image_size"], preprocessing["input_shape"]) == ([32, 32], [32, 32, 3])
    assert (run / "confusion_matrix.png").stat().st_size > 0


def test_the_same_folder_is_prepared_once_and_again_after_one_image_changes(work: Path) -> None:
    folder = work / "photos"
    data = ["--tags", "data", *data_vars(work), "-e", f"dataset={folder}"]
    settings = ["-e", "skip_bad_images=true", "-e", "image_size=32"]
    first = run_playbook("site.yml", *data, *settings)
    assert first.returncode == 0, first.stdout[-3000:]
    prepared = set((work / "datasets").glob("photos-*"))
    second = run_playbook("site.yml", *data, *settings)
    assert second.returncode == 0, second.stdout[-3000:]
    assert recap_changed(second.stdout) == 0
    assert set((work / "datasets").glob("photos-*")) == prepared

    image = next((folder / "zero").glob("*.png"))
    cv2.imwrite(str(image), 255 - cv2.imread(str(image)))  # one photo changed
    third = run_playbook("site.yml", *data, *settings)
    assert third.returncode == 0, third.stdout[-3000:]
    assert recap_changed(third.stdout) == 1, third.stdout[-3000:]
    assert len(set((work / "datasets").glob("photos-*")) - prepared) == 1


def test_a_csv_trains_with_a_model_file_from_another_folder(work: Path, tmp_path: Path) -> None:
    csv = write_iris_csv(work / "iris.csv", row_numbers=True)  # a column that is no feature
    model = work / "elsewhere" / "my_model.py"
    model.parent.mkdir()
    model.write_text(MY_MODEL)
    (model.parent / "layers.py").write_text(LAYERS)
    runs = tmp_path / "runs"
    out = train(
        work,
        runs,
        *("-e", f"dataset={csv}", "-e", "label_column=species", "-e", f"model={model}"),
        *("-e", "batch_size=8", "-e", "epochs=20", "-e", "learning_rate=0.01"),
        *("-e", "ignore_columns=row"),
    )
    assert out.endswith("rc=0"), out[-3000:]
    assert f"{model} on iris (3 classes, 4 features; 120 train / 30 test" in out
    assert "training started: my_model.py with multi_worker_mirrored" in out
    run = runs / "latest"
    # The run keeps what it trained: the model file and the module it imports.
    assert (run / "model" / "my_model.py").read_text() == MY_MODEL
    assert (run / "model" / "layers.py").read_text() == LAYERS
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["classes"] == ["setosa", "versicolor", "virginica"]
    assert metrics["test_accuracy"] >= 0.85, metrics
    preprocessing = json.loads((run / "preprocessing.json").read_text())
    assert preprocessing["label_column"] == "species"
    assert preprocessing["feature_columns"] == IRIS_FEATURES  # without the row numbers
    assert len(preprocessing["mean"]) == len(preprocessing["std"]) == 4
