"""Two real MultiWorkerMirroredStrategy workers: what input each one trains on."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKER = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
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
    json.dump({"steps": steps, "batches": batches}, open(sys.argv[4], "w"))
    """
)


def free_ports(count: int) -> list[int]:
    socks = [socket.socket() for _ in range(count)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def test_workers_get_disjoint_halves_of_each_global_batch_for_every_step(tmp_path: Path) -> None:
    n, global_batch, epochs = 1001, 64, 2  # 1001 does not divide: the remainder is dropped
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    procs = []
    for index in range(2):
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "TF_CONFIG": json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}}
            ),
        }
        out = tmp_path / f"w{index}.json"
        procs.append(
            (
                subprocess.Popen(
                    [sys.executable, str(script), str(n), str(global_batch), str(epochs), str(out)],
                    env=env,
                    cwd=ROOT,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                ),
                out,
            )
        )
    results = []
    for proc, out in procs:
        output, _ = proc.communicate(timeout=240)
        assert proc.returncode == 0, output[-3000:]
        results.append(json.loads(out.read_text()))
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
