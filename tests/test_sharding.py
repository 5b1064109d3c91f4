"""Two real MultiWorkerMirroredStrategy workers: what input each one trains on."""

from __future__ import annotations

import json

from tests.conftest import run_workers

WORKER = """
import json, sys
import tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
from training import data
from tests.test_data import _id_dataset, ids_of
n, global_batch, epochs = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
steps = data.steps_per_epoch(n, global_batch)
dist = strategy.experimental_distribute_dataset(
    data.make_train_dataset(_id_dataset(n), global_batch, seed=11))
it = iter(dist)
batches = []
for _ in range(steps * epochs):
    images, _ = next(it)
    local = strategy.experimental_local_results(images)[0].numpy()
    batches.append(ids_of(local))
print(json.dumps({"steps": steps, "batches": batches}))
"""


def test_workers_get_disjoint_halves_of_each_global_batch_for_every_step() -> None:
    n, global_batch, epochs = 1001, 64, 2  # 1001 does not divide: the remainder is dropped
    lines = run_workers(WORKER, str(n), str(global_batch), str(epochs))
    results = [json.loads(line) for line in lines]
    steps = results[0]["steps"]
    w0, w1 = results[0]["batches"], results[1]["batches"]
    # Every worker runs the same number of steps, each on half the global batch.
    assert len(w0) == len(w1) == steps * epochs
    assert all(len(b) == global_batch // 2 for b in w0 + w1)
    # Within a step the two halves are disjoint; within an epoch no example repeats.
    for a, b in zip(w0, w1, strict=True):
        assert not set(a) & set(b)
    epoch_one = [i for b in w0[:steps] + w1[:steps] for i in b]
    assert len(set(epoch_one)) == steps * global_batch
