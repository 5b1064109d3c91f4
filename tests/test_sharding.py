"""Two real MultiWorkerMirroredStrategy workers: what input each one trains on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_workers
from tests.test_datasets import file_ids, id_npz
from training import datasets

WORKER = """
import json, sys
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
from training import datasets
from training.datasets import pipeline
from tests.test_datasets import ids_of
data_dir, dataset = sys.argv[1], sys.argv[2]
global_batch, epochs = int(sys.argv[3]), int(sys.argv[4])
manifest = datasets.read_manifest(data_dir, dataset)
steps = pipeline.steps_per_epoch(manifest.train.examples, global_batch)
dist = strategy.experimental_distribute_dataset(
    pipeline.train_dataset(manifest, data_dir, global_batch, seed=11))
it = iter(dist)
batches = []
for _ in range(steps * epochs):
    images, _ = next(it)
    local = strategy.experimental_local_results(images)[0].numpy()
    batches.append(ids_of(local))
print(json.dumps({"steps": steps, "batches": batches}))
"""


def test_each_worker_reads_only_its_own_shards(tmp_path: Path) -> None:
    # 1001 examples in 4 shards of 251, 250, 250, 250: worker 0 reads shards 0 and 2,
    # worker 1 shards 1 and 3 (TensorFlow's FILE policy), and nothing else.
    source = id_npz(tmp_path / "ids.npz", 1001)
    manifest, _ = datasets.prepare(str(source), tmp_path, datasets.Settings(shards=4))
    global_batch, epochs = 64, 2
    logs: list[str] = []
    lines = run_workers(
        WORKER, str(tmp_path), manifest.id, str(global_batch), str(epochs), logs=logs, log_level="1"
    )
    results = [json.loads(line) for line in lines]
    steps = results[0]["steps"]
    assert steps == 1001 // global_batch
    for worker, result in enumerate(results):
        batches = result["batches"]
        # Every worker runs the same number of steps, each on half the global batch.
        assert len(batches) == steps * epochs
        assert all(len(b) == global_batch // 2 for b in batches)
        seen = [i for b in batches for i in b]
        # Only the examples of its own files, and no example twice within an epoch.
        assert set(seen) <= file_ids(manifest, manifest.train_files(worker, 2))
        epoch = seen[: steps * global_batch // 2]
        assert len(set(epoch)) == len(epoch)
    ids = [{i for b in r["batches"] for i in b} for r in results]
    assert not ids[0] & ids[1]
    # FILE sharding applied as asked: no fallback from AUTO, no sharding warning.
    for log in logs:
        assert "AUTO" not in log and "shard" not in log.lower(), log[-3000:]


def test_a_process_alone_on_a_node_reads_the_shards_the_node_holds(tmp_path: Path) -> None:
    # step-bench on a node of a 2-node cluster: shards 0 and 2 staged, 1 and 3 not.
    source = id_npz(tmp_path / "ids.npz", 1001)
    manifest, _ = datasets.prepare(str(source), tmp_path, datasets.Settings(shards=4))
    for shard in manifest.train_files(1, 2):
        (tmp_path / manifest.id / shard.file).unlink()
    held = manifest.staged_train_files(tmp_path)
    assert held == manifest.train_files(0, 2)
    from tests.test_datasets import ids_of
    from training.datasets import pipeline

    batches = pipeline.train_dataset(manifest, tmp_path, 50, seed=3, files=held).take(10)
    seen = {i for images, _ in batches for i in ids_of(images.numpy())}
    assert seen and seen <= file_ids(manifest, held)
    for shard in held:
        (tmp_path / manifest.id / shard.file).unlink()
    with pytest.raises(datasets.DatasetError, match=r"no training shard of dataset .* Fix: run"):
        manifest.staged_train_files(tmp_path)
