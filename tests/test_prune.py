"""prune-data: a node keeps its latest datasets, those a running task reads, its own shards."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.test_datasets import id_npz
from training import datasets
from training.cli import main
from training.datasets import DatasetError, Settings
from training.datasets.prune import prune


def prepared(folder: Path, name: str, age_days: float, files: int = 2) -> Path:
    """A dataset folder ``name`` with ``files`` shards of 1000 bytes, last used ``age_days`` ago."""
    path = folder / name
    path.mkdir(parents=True)
    (path / "dataset.json").write_text("{}")
    for j in range(files):
        (path / f"train-{j:05d}-of-{files:05d}.rec").write_bytes(b"\0" * 1000)
    when = time.time() - age_days * 86400
    os.utime(path, (when, when))
    return path


def test_the_most_recently_used_stay_and_older_datasets_go(tmp_path: Path) -> None:
    for name, age in [("a-000000000001", 3), ("b-000000000002", 2), ("c-000000000003", 1)]:
        prepared(tmp_path, name, age)
    (tmp_path / "download-mnist.npz").write_bytes(b"mnist")
    (tmp_path / "notes").mkdir()

    result = prune(tmp_path, keep=2, current="a-000000000001", running=[])

    # The dataset in use counts as the newest; the oldest other one goes.
    assert result.kept == ["a-000000000001", "c-000000000003"]
    assert result.removed == ["b-000000000002"]
    assert result.freed_bytes == 2002 and result.changed
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a-000000000001",
        "c-000000000003",
        "download-mnist.npz",
        "notes",
    ]


def test_a_dataset_a_running_task_names_stays(tmp_path: Path) -> None:
    prepared(tmp_path, "old-000000000001", 9)
    prepared(tmp_path, "new-000000000002", 1)
    # A task of an earlier run, still reading the old dataset: its id is on its command line.
    code = "import time; print('ready', flush=True); time.sleep(60)"
    task = subprocess.Popen(
        [sys.executable, "-c", code, "--dataset", "old-000000000001"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert task.stdout is not None and task.stdout.readline() == "ready\n"
        result = prune(tmp_path, keep=1, current="new-000000000002")
    finally:
        task.kill()
        task.wait()
    assert result.in_use == ["old-000000000001"]
    assert not result.removed and (tmp_path / "old-000000000001").is_dir()


def test_only_the_listed_train_shards_stay_in_the_current_dataset(tmp_path: Path) -> None:
    source = id_npz(tmp_path / "digits.npz", 40)
    manifest, _ = datasets.prepare(str(source), tmp_path / "c", Settings(shards=4))
    here = manifest.path
    own = ["train-00000-of-00004.rec", "train-00002-of-00004.rec"]
    result = prune(tmp_path / "c", keep=3, current=here.name, train_shards=own, running=[])
    assert result.removed_files == [
        f"{here.name}/train-00001-of-00004.rec",
        f"{here.name}/train-00003-of-00004.rec",
    ]
    assert sorted(p.name for p in here.iterdir()) == [
        "dataset.json",
        "test-00000-of-00001.rec",
        "train-00000-of-00004.rec",
        "train-00002-of-00004.rec",
    ]
    # A second time nothing is left to remove.
    assert not prune(tmp_path / "c", 3, here.name, own, running=[]).changed
    # A name that is no train shard of it (a typo, another dataset's) removes nothing.
    for wrong in (["train-00000-of-00012.rec"], ["nosuch.rec"], [*own, "train-00004-of-00004.rec"]):
        with pytest.raises(
            DatasetError,
            match=r"not name a train shard of .* \(its files are "
            r"train-00000-of-00004.rec to train-00002-of-00004.rec\); nothing",
        ):
            prune(tmp_path / "c", 3, here.name, wrong, running=[])
    assert len(list(here.glob("train-*"))) == 2


def test_a_keep_below_one_or_an_unknown_current_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match=r"training_data_keep\) must be a whole number, 1 or"):
        prune(tmp_path, keep=0)
    with pytest.raises(DatasetError, match="not a prepared dataset's folder"):
        prune(tmp_path, keep=1, current="gone-000000000001")
    # A mistyped folder is no empty one: "nothing to remove" would hide the typo.
    with pytest.raises(DatasetError, match=r"nocache is not a folder\. Fix: give the folder"):
        prune(tmp_path / "nocache", keep=1)


def test_reusing_a_prepared_dataset_marks_it_used(tmp_path: Path) -> None:
    source = id_npz(tmp_path / "digits.npz", 40)
    manifest, _ = datasets.prepare(str(source), tmp_path / "c", Settings(shards=2))
    os.utime(manifest.path, (0, 0))
    datasets.prepare(str(source), tmp_path / "c", Settings(shards=2))
    assert manifest.path.stat().st_mtime > time.time() - 60


def test_the_command_prints_what_it_removed(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    prepared(tmp_path, "a-000000000001", 2)
    prepared(tmp_path, "b-000000000002", 1)
    assert main(["prune-data", "--data-dir", str(tmp_path), "--keep", "1"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["removed"] == ["a-000000000001"] and out["changed"]
    assert main(["prune-data", "--data-dir", str(tmp_path), "--train-shards", "x"]) == 2
    assert "--train-shards needs --current" in capsys.readouterr().err
