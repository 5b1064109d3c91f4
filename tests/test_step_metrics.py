"""Two real multi_worker_mirrored workers: per-step logs cost no all-reduce, epoch logs still do."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_workers

# Each worker trains the same model twice from the same weights: with tf_keras'
# per-step metrics, then with local_step_metrics. Gradients are all-reduced
# either way, so both runs follow the same trajectory.
WORKER = """
import json, sys
import numpy as np
import tensorflow as tf
import tf_keras as keras
from training.strategy import local_step_metrics

strategy = tf.distribute.MultiWorkerMirroredStrategy()
rng = np.random.default_rng(0)
x = rng.random((512, 8), dtype=np.float32)
y = (x[:, 0] > 0.5).astype("int32")  # worker 1's half differs from worker 0's

class Record(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.steps, self.epochs = [], []
    def on_train_batch_end(self, batch, logs=None):
        self.steps.append(float(logs["loss"]))
    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append({k: float(v) for k, v in logs.items()})

runs = {}
for mode in ("keras", "local"):
    tf.keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
        model.compile(keras.optimizers.SGD(0.5),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=["accuracy"], steps_per_execution=2)
    model.distribute_reduction_method = "first"
    if mode == "local":
        local_step_metrics(model)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(64).repeat()
    record = Record()
    model.fit(ds, epochs=3, steps_per_epoch=8, callbacks=[record], verbose=0)
    runs[mode] = {"steps": record.steps, "epochs": record.epochs}
print(json.dumps(runs))
"""


@pytest.fixture(scope="module")
def workers() -> list[dict]:
    return [json.loads(line) for line in run_workers(WORKER)]


def test_keras_per_step_logs_are_all_reduced_ours_are_each_workers_own(workers: list[dict]) -> None:
    w0, w1 = workers
    # tf_keras reads every metric over both workers in every step...
    assert w0["keras"]["steps"] == pytest.approx(w1["keras"]["steps"])
    # ...local_step_metrics does not: each worker logs its own half of the batch.
    assert w0["local"]["steps"] != pytest.approx(w1["local"]["steps"])


def test_epoch_logs_stay_over_every_worker(workers: list[dict]) -> None:
    w0, w1 = workers
    assert len(w0["local"]["epochs"]) == 3
    epochs = zip(w0["local"]["epochs"], w1["local"]["epochs"], w0["keras"]["epochs"], strict=True)
    for a, b, keras in epochs:
        assert a == pytest.approx(b)
        assert a == pytest.approx(keras, rel=1e-4)
    assert w0["local"]["epochs"][-1]["loss"] < w0["local"]["epochs"][0]["loss"]
