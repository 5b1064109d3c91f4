"""The own-data benchmark's pieces: bytes staged per node, the bench photos, its refusals.

The measurements themselves (preparing thousands of photos, training twice
for the peak RSS) run in ``make bench``; these tests check the arithmetic
and the inputs on small data, and time nothing.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT
from training import bench_photos, data_bench, datasets
from training.cli import main
from training.datasets import DatasetError, Settings

_spec = importlib.util.spec_from_file_location(
    "training_data_filters", ROOT / "roles/training_data/filter_plugins/training_data.py"
)
assert _spec and _spec.loader
filters = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(filters)

#: 4x4 uint8 features and an int32 label: 20 bytes a record.
RECORD = 20


def _prepared(tmp_path: Path, n_train: int, n_test: int, shards: int = 12) -> datasets.Manifest:
    """A prepared .npz dataset of ``n_train`` and ``n_test`` 4x4 examples of 2 classes."""
    source = tmp_path / "small.npz"
    rng = np.random.default_rng(0)
    np.savez(
        source,
        x_train=rng.integers(0, 256, (n_train, 4, 4), dtype=np.uint8),
        y_train=np.arange(n_train) % 2,
        x_test=rng.integers(0, 256, (n_test, 4, 4), dtype=np.uint8),
        y_test=np.arange(n_test) % 2,
    )
    manifest, _ = datasets.prepare(str(source), tmp_path / "cache", Settings(shards=shards))
    assert manifest.record_bytes == RECORD
    return manifest


def test_each_node_holds_its_shards_and_the_chief_the_test_split(tmp_path: Path) -> None:
    # 125 examples dealt to 12 shards: shards 0-4 hold 11, shards 5-11 hold 10.
    manifest = _prepared(tmp_path, 125, 30)
    json_bytes = (manifest.path / "dataset.json").stat().st_size

    (one,) = data_bench.staged_bytes(manifest, 1)
    assert one["train_shards"] == 12
    assert one["bytes"] == json_bytes + 125 * RECORD + 30 * RECORD
    assert one["goal"] == 155 * RECORD

    chief, worker = data_bench.staged_bytes(manifest, 2)
    # Shards 0, 2, 4 (11 each) and 6, 8, 10 (10 each); shards 1, 3 (11) and 5, 7, 9, 11 (10).
    assert (chief["train_bytes"], worker["train_bytes"]) == (63 * RECORD, 62 * RECORD)
    assert (chief["test_bytes"], worker["test_bytes"]) == (30 * RECORD, 0)
    assert chief["goal"] == round(125 * RECORD / 2 + 30 * RECORD)
    assert worker["goal"] == round(125 * RECORD / 2)
    assert worker["ratio"] == round((json_bytes + 62 * RECORD) / (125 * RECORD / 2), 4)

    three = data_bench.staged_bytes(manifest, 3)
    assert [r["train_shards"] for r in three] == [4, 4, 4]
    assert sum(r["train_bytes"] for r in three) == 125 * RECORD
    assert [r["test_bytes"] for r in three] == [30 * RECORD, 0, 0]

    whole = data_bench.staging(manifest)
    assert whole["bytes"] == json_bytes + 155 * RECORD == manifest.bytes + json_bytes
    assert [n["nodes"] for n in whole["nodes"]] == [1, 2, 3]


@pytest.mark.parametrize("nodes", [1, 2, 3])
def test_staging_counts_the_files_the_training_data_role_copies(tmp_path: Path, nodes: int) -> None:
    manifest = _prepared(tmp_path, 125, 30)
    sizes = {s.file: s.bytes for s in (*manifest.train.shards, *manifest.test.shards)}
    sizes["dataset.json"] = (manifest.path / "dataset.json").stat().st_size
    prepared = {
        "train_shards": [s.file for s in manifest.train.shards],
        "test_shards": [s.file for s in manifest.test.shards],
    }
    hosts = [f"node{i}" for i in range(nodes)]
    rows = data_bench.staged_bytes(manifest, nodes)
    for host, row in zip(hosts, rows, strict=True):
        files = filters.training_data_host_files(prepared, hosts, hosts[:1], host)
        assert row["bytes"] == sum(sizes[f] for f in files), host


def test_staging_refuses_more_nodes_than_shards(tmp_path: Path) -> None:
    manifest = _prepared(tmp_path, 40, 10, shards=2)
    with pytest.raises(DatasetError, match="2 training shard files for 3 workers"):
        data_bench.staged_bytes(manifest, 3)


def test_bench_photos_are_camera_frames_of_ten_digits_the_same_each_time(tmp_path: Path) -> None:
    image, digit = bench_photos.photo(13)
    assert image.shape == (*bench_photos.FRAME, 3) and image.dtype == np.uint8
    assert digit == 3
    again, _ = bench_photos.photo(13)
    assert np.array_equal(image, again)
    assert not np.array_equal(image, bench_photos.photo(23)[0])  # another 3, another photo

    info = bench_photos.write_photo_folder(tmp_path / "photos", 24)
    assert info["images"] == 24 and info["classes"] == [str(d) for d in range(10)]
    assert sorted(p.name for p in (tmp_path / "photos" / "3").iterdir()) == [
        "000003.jpg",
        "000013.jpg",
        "000023.jpg",
    ]
    assert not (tmp_path / "photos.partial").exists()
    assert bench_photos.read_photo_folder(tmp_path / "photos") == info
    with pytest.raises(FileExistsError):
        bench_photos.write_photo_folder(tmp_path / "photos", 24)
    # A larger folder begins with the same files.
    bench_photos.write_photo_folder(tmp_path / "more", 30)
    first = tmp_path / "photos" / "7" / "000017.jpg"
    assert first.read_bytes() == (tmp_path / "more" / "7" / "000017.jpg").read_bytes()

    # Prepared as train.yml prepares a folder: the shape pi_mobilenet builds by default.
    manifest, _ = datasets.prepare(str(tmp_path / "photos"), tmp_path / "cache", Settings())
    assert manifest.input_shape == (64, 64, 3)
    assert list(manifest.classes) == info["classes"]


def test_data_bench_refuses_a_photo_folder_of_another_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench_photos.write_photo_folder(tmp_path / "photos", 12)
    argv = ["data-bench", "--photos", str(tmp_path / "photos"), "--out", str(tmp_path / "d.json")]
    assert main([*argv, "--images", "20"]) == 2
    assert "holds 12 photos, not 20; remove it, or give --images 12" in capsys.readouterr().err
    assert not (tmp_path / "d.json").exists()
    with pytest.raises(SystemExit):
        main([*argv, "--images", "5"])
    assert "give 10 or more (one a class)" in capsys.readouterr().err
    assert main([*argv, "--images", "12", "--model", "no_such_model"]) == 2
    assert "no_such_model" in capsys.readouterr().err


def test_a_failed_memory_run_ends_with_its_log(tmp_path: Path) -> None:
    manifest = _prepared(tmp_path, 40, 10, shards=2)
    with pytest.raises(data_bench.DataBenchError, match=r"failed \(exit 2\); its log .* ends:"):
        data_bench.train_peak_rss(manifest, tmp_path / "elsewhere", tmp_path / "run")


def test_pipeline_bench_gives_the_rate_of_a_staged_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    manifest = _prepared(tmp_path, 200, 20, shards=4)
    out = tmp_path / "pipeline-node1.json"
    argv = ["pipeline-bench", "--data-dir", str(tmp_path / "cache"), "--dataset", manifest.id]
    given = ["--batch-size", "8", "--seconds", "0.2", "--host", "node1", "--output", str(out)]
    assert main([*argv, *given]) == 0
    rate = json.loads(out.read_text())
    assert json.loads(capsys.readouterr().out) == rate
    assert (rate["host"], rate["dataset"], rate["batch_size"]) == ("node1", manifest.id, 8)
    assert rate["batches"] >= 1 and rate["examples_per_second"] > 0

    # A node that lacks a train shard: refused, naming it.
    (manifest.path / manifest.train.shards[3].file).unlink()
    assert main(argv) == 2
    assert "train-00003-of-00004.rec" in capsys.readouterr().err
