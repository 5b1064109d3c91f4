"""Datasets: deterministic preparation, checksums, and sharding that never hangs an epoch."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from training import data


def test_split_is_per_class_and_deterministic() -> None:
    y = np.repeat(np.arange(10), 50).astype(np.uint8)
    x = np.arange(500 * 4).reshape(500, 2, 2)
    a = data.split_per_class(x, y, 10, seed=1)
    b = data.split_per_class(x, y, 10, seed=1)
    for left, right in zip(a, b, strict=True):
        np.testing.assert_array_equal(left, right)
    x_train, y_train, x_test, y_test = a
    assert np.bincount(y_test).tolist() == [10] * 10
    assert len(x_train) == 400 and len(y_train) == 400
    train_rows = {tuple(r.ravel()) for r in x_train}
    assert not any(tuple(r.ravel()) in train_rows for r in x_test)


def test_prepare_mnist_5k(tmp_path: Path) -> None:
    path, written = data.prepare("mnist_5k", tmp_path)
    assert written
    assert data.prepare("mnist_5k", tmp_path) == (path, False)
    ds = data.load(tmp_path, "mnist_5k")
    assert path == tmp_path / "mnist_5k.npz"
    assert ds.x_train.shape == (4000, 28, 28) and ds.x_train.dtype == np.uint8
    assert ds.x_test.shape == (1000, 28, 28)
    assert np.bincount(ds.y_test).tolist() == [100] * 10
    assert ds.x_train.max() == 255
    # Prepared again, elsewhere: the very same bytes of data.
    again = data.load(data.prepare("mnist_5k", tmp_path / "again")[0].parent, "mnist_5k")
    np.testing.assert_array_equal(again.x_test, ds.x_test)


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


def test_prepare_mnist_checks_the_sha256(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = tmp_path / "download.npz"
    digest = _fake_mnist(source)
    with pytest.raises(data.DatasetError, match=r"is not the Keras mnist\.npz"):
        data.prepare("mnist", tmp_path / "out", source)
    assert not (tmp_path / "out" / "mnist.npz").exists()
    monkeypatch.setattr(data, "MNIST_SHA256", digest)
    assert data.load(
        data.prepare("mnist", tmp_path / "out", source)[0].parent, "mnist"
    ).x_train.shape == (60, 28, 28)


def test_prepare_mnist_without_download_says_how(tmp_path: Path) -> None:
    with pytest.raises(data.DatasetError, match="pass it with --source"):
        data.prepare("mnist", tmp_path)


def test_missing_dataset_says_how_to_stage_it(tmp_path: Path) -> None:
    with pytest.raises(data.DatasetError, match=r"`ansible-playbook site\.yml -e dataset=mnist`"):
        data.load(tmp_path, "mnist")
    with pytest.raises(data.DatasetError, match="dataset 'cifar10' is unknown"):
        data.load(tmp_path, "cifar10")


def test_unknown_dataset() -> None:
    with pytest.raises(data.DatasetError, match="known: mnist, mnist_5k"):
        data.prepare("cifar10", "/nonexistent")


def test_corrupt_file_is_refused_and_prepared_again(tmp_path: Path) -> None:
    (tmp_path / "mnist_5k.npz").write_bytes(b"not a zip")
    with pytest.raises(data.DatasetError, match=r"not a readable \.npz"):
        data.load(tmp_path, "mnist_5k")
    good, _ = data.prepare("mnist_5k", tmp_path / "good")
    (tmp_path / "mnist_5k.npz").write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(data.DatasetError, match=r"not a readable \.npz"):
        data.train_size(tmp_path, "mnist_5k")
    assert data.prepare("mnist_5k", tmp_path)[1]  # rewritten
    assert data.train_size(tmp_path, "mnist_5k") == 4000


def test_steps_per_epoch_drops_the_remainder() -> None:
    assert data.steps_per_epoch(4000, 128) == 31
    with pytest.raises(data.DatasetError, match="lower batch_size"):
        data.steps_per_epoch(100, 128)


def _id_dataset(n: int) -> data.Dataset:
    """A dataset whose every image carries its own element id in pixels (0, 0) and (0, 1)."""
    x = np.zeros((n, 28, 28), dtype=np.uint8)
    x[:, 0, 0] = np.arange(n) % 256
    x[:, 0, 1] = np.arange(n) // 256
    y = (np.arange(n) % 10).astype(np.uint8)
    return data.Dataset(x, y, x[:1], y[:1])


def ids_of(images: np.ndarray) -> list[int]:
    return (
        (np.rint(images[:, 0, 0] * 255) + 256 * np.rint(images[:, 0, 1] * 255)).astype(int).tolist()
    )


def test_one_process_sees_every_example_once_per_epoch() -> None:
    n, batch = 1000, 64
    steps = data.steps_per_epoch(n, batch)
    ds = data.make_train_dataset(_id_dataset(n), batch, seed=7)
    seen = [ids_of(images.numpy()) for images, _ in ds.take(steps * 3)]  # repeats past one pass
    assert len(seen) == steps * 3 and all(len(b) == batch for b in seen)
    first_epoch = [i for batch_ids in seen[:steps] for i in batch_ids]
    assert len(set(first_epoch)) == steps * batch  # no example twice in an epoch


def test_auto_shard_policy_is_explicit() -> None:
    import tensorflow as tf

    ds = data.make_train_dataset(_id_dataset(100), 10, seed=1)
    assert (
        ds.options().experimental_distribute.auto_shard_policy
        == tf.data.experimental.AutoShardPolicy.DATA
    )
    fn = data.make_per_worker_dataset_fn(_id_dataset(100), 10)
    ps_ds = fn(tf.distribute.InputContext(1, 0, 1))
    assert (
        ps_ds.options().experimental_distribute.auto_shard_policy
        == tf.data.experimental.AutoShardPolicy.OFF
    )
