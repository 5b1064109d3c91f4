"""The own-data benchmark: preparing photos, a worker's memory, bytes staged, the input pipeline.

``make bench`` runs ``python -m training data-bench --photos
runs/bench-<id>/photos --out runs/bench-<id>/data.json`` on the control
node before its training cases (:func:`data_bench`). It

1. writes the folder of camera-like photos that the bench's ``pi_mobilenet``
   cases train on (:mod:`training.bench_photos`), unless it is there;
2. prepares it as ``train.yml`` does (``training.datasets.prepare``,
   ``image_size`` 64, rgb, the default split and shards) into a folder of
   its own, timed, then once more with nothing changed, timed: seconds per
   1,000 images. The second finds the dataset's id prepared, having read
   and hashed every image file (:mod:`training.datasets.image_folder`);
3. does the same with a folder of ``multiple`` times as many photos (the
   first ones the same);
4. trains the model in one process (``python -m training train``, a
   subprocess: a worker and its own chief) on each of the two prepared
   datasets and reads each process's peak resident memory (``ru_maxrss`` of
   ``os.wait4``). A task streams the shards through a shuffle buffer of at
   most :data:`training.datasets.pipeline.SHUFFLE_BUFFER_BYTES`, and the
   chief evaluates the test split in batches of
   :data:`training.train.EVAL_CHUNK` with
   :data:`training.datasets.pipeline.PREFETCH_BATCHES` more decoded ahead,
   so once the splits fill those, its memory does not grow with the dataset;
5. counts the bytes each node holds of the smaller dataset for 1, 2 and 3
   nodes (:func:`staged_bytes`), by the rule ``roles/training_data`` stages
   by.

The input pipeline's own speed is measured on a bench node, where training
runs: :func:`pipeline_rate` (``python -m training pipeline-bench``, which
``molecule/bench`` runs after the 1-node ``pi_mobilenet`` case) times the
batches :func:`training.datasets.pipeline.train_dataset` delivers with
nothing else running. ``python -m training bench`` (:mod:`training.bench`)
sets all of it against the training cases. This module imports neither
TensorFlow nor OpenCV until a measurement needs them.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from training import bench_photos, datasets
from training.bench import BenchError
from training.datasets.shards import MANIFEST_FILE, Manifest

log = logging.getLogger(__name__)

#: Photos of the bench's folder and of the smaller dataset: at 64x64x3 its
#: training split (four fifths) already fills the shuffle buffer; its test
#: split is smaller than the chief's evaluation batches in flight, which the
#: larger dataset's fill. Also the bench's pi_mobilenet cases' photos.
DEFAULT_IMAGES = 4000
#: The larger dataset is this many times the smaller.
DEFAULT_MULTIPLE = 4
#: The model whose worker's memory is read: the image classifier of the bench's cases.
DEFAULT_MODEL = "pi_mobilenet"
#: Epochs of each memory run: the second starts with the shuffle buffer and
#: TensorFlow's caches already at their size.
DEFAULT_EPOCHS = 2
#: Examples a step of the memory runs and of the pipeline, as in the bench's cases.
DEFAULT_BATCH = 64
#: Node counts :func:`staging` counts the bytes for.
STAGING_NODES = (1, 2, 3)
#: Seed of the memory runs, as the bench's cases (train.yml's default).
SEED = 42


class DataBenchError(BenchError):
    """A photo folder that is not the one asked for, or a measuring run that failed."""


def staged_bytes(manifest: Manifest, nodes: int) -> list[dict[str, Any]]:
    """Bytes each of ``nodes`` nodes holds of a prepared dataset, one worker task a node.

    The rule of ``roles/training_data`` (its filter
    ``training_data_host_files``): node ``i`` (worker ``i``; node 0 holds the
    chief) receives ``dataset.json`` and the train shards ``j`` with
    ``j % nodes == i`` (:meth:`training.datasets.Manifest.train_files`,
    TensorFlow's FILE sharding), and node 0 the test shards as well.

    Args:
        manifest: the prepared dataset, its folder holding ``dataset.json``.
        nodes: 1 or more, at most the train shards.

    Returns:
        One dict a node, in order: ``node`` (its index), ``train_shards``,
        ``train_bytes``, ``test_bytes``, ``bytes`` (every file it holds,
        ``dataset.json`` included), ``goal`` (1/``nodes`` of the training
        split's bytes, plus the test split's on node 0) and ``ratio``
        (``bytes`` over ``goal``).

    Raises:
        training.datasets.DatasetError: more nodes than train shards.
    """
    manifest_bytes = (manifest.path / MANIFEST_FILE).stat().st_size
    train_total = sum(s.bytes for s in manifest.train.shards)
    test_total = sum(s.bytes for s in manifest.test.shards)
    rows = []
    for node in range(nodes):
        shards = manifest.train_files(node, nodes)
        train = sum(s.bytes for s in shards)
        test = test_total if node == 0 else 0
        held = manifest_bytes + train + test
        goal = train_total / nodes + test
        rows.append(
            {
                "node": node,
                "train_shards": len(shards),
                "train_bytes": train,
                "test_bytes": test,
                "bytes": held,
                "goal": round(goal),
                "ratio": round(held / goal, 4),
            }
        )
    return rows


def staging(manifest: Manifest, node_counts: tuple[int, ...] = STAGING_NODES) -> dict[str, Any]:
    """:func:`staged_bytes` for each of ``node_counts``, with the dataset's sizes.

    Returns:
        ``dataset`` (the id), ``train_bytes``, ``test_bytes``,
        ``manifest_bytes``, ``bytes`` (all three: the prepared folder), and
        ``nodes``: ``{"nodes": n, "per_node": staged_bytes(manifest, n)}`` each.
    """
    train = sum(s.bytes for s in manifest.train.shards)
    test = sum(s.bytes for s in manifest.test.shards)
    manifest_bytes = (manifest.path / MANIFEST_FILE).stat().st_size
    return {
        "dataset": manifest.id,
        "train_bytes": train,
        "test_bytes": test,
        "manifest_bytes": manifest_bytes,
        "bytes": train + test + manifest_bytes,
        "nodes": [{"nodes": n, "per_node": staged_bytes(manifest, n)} for n in node_counts],
    }


def time_prepare(folder: Path, cache_dir: Path, images: int) -> tuple[Manifest, dict[str, Any]]:
    """Prepare ``folder`` into ``cache_dir``, timed, then again with nothing changed, timed.

    The settings are :class:`training.datasets.Settings`' defaults, which
    ``train.yml`` gives a folder unless told otherwise.

    Returns:
        The manifest, and ``images``, ``dataset`` (the id), ``seconds``,
        ``again_seconds``, each also per 1,000 images, and ``bytes`` (the shards').

    Raises:
        DataBenchError: the first call found the dataset prepared (``cache_dir``
            is not new), or the second prepared it again.
    """
    import cv2  # noqa: F401  imported before the clock starts: an import is no preparing

    settings = datasets.Settings()
    start = time.perf_counter()
    manifest, written = datasets.prepare(str(folder), cache_dir, settings)
    seconds = time.perf_counter() - start
    start = time.perf_counter()
    again, rewritten = datasets.prepare(str(folder), cache_dir, settings)
    again_seconds = time.perf_counter() - start
    if not written or rewritten or again.id != manifest.id:
        raise DataBenchError(
            f"{folder}: preparing it into {cache_dir} wrote {written}, again {rewritten}; "
            "the first must prepare and the second find it prepared"
        )
    per = 1000 / images
    return manifest, {
        "images": images,
        "dataset": manifest.id,
        "train_examples": manifest.train.examples,
        "test_examples": manifest.test.examples,
        "seconds": round(seconds, 3),
        "seconds_per_1000": round(seconds * per, 3),
        "again_seconds": round(again_seconds, 4),
        "again_seconds_per_1000": round(again_seconds * per, 4),
        "bytes": manifest.bytes,
    }


def train_peak_rss(
    manifest: Manifest,
    data_dir: Path,
    run_dir: Path,
    model: str = DEFAULT_MODEL,
    epochs: int = DEFAULT_EPOCHS,
    batch_size: int = DEFAULT_BATCH,
) -> dict[str, Any]:
    """Train ``model`` on a prepared dataset in one process and read the process's peak RSS.

    ``python -m training train`` runs as a child process, with no TF_CONFIG
    (one process, a worker and its own chief), its log in
    ``<run_dir>/train.log``; ``os.wait4`` gives that child's own resource
    use, whose ``ru_maxrss`` is its peak resident set (KiB on Linux).

    Returns:
        ``dataset``, ``train_examples``, ``test_examples``, ``model``,
        ``epochs``, ``batch_size``, ``peak_rss_bytes``,
        ``examples_per_second`` (the run's steady rate) and ``wall_seconds``.

    Raises:
        DataBenchError: the run failed; the message ends with its log's last lines.
    """
    run_dir, data_dir = run_dir.resolve(), Path(data_dir).resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    code = Path(__file__).resolve().parents[1]
    argv = [
        sys.executable,
        "-m",
        "training",
        "train",
        f"--model={model}",
        f"--dataset={manifest.id}",
        f"--data-dir={data_dir}",
        f"--epochs={epochs}",
        f"--batch-size={batch_size}",
        f"--output-dir={run_dir}",
        f"--run-id=memory-{manifest.train.examples}",
        f"--seed={SEED}",
    ]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(code), os.environ.get("PYTHONPATH")])),
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    env.pop("TF_CONFIG", None)
    log_file = run_dir / "train.log"
    start = time.monotonic()
    with log_file.open("wb") as out:
        child = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=code)
        try:
            _, status, usage = os.wait4(child.pid, 0)
        except BaseException:  # interrupted: the run does not outlive the bench
            child.kill()
            child.wait()
            raise
    child.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - start
    if child.returncode != 0:
        tail = log_file.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        raise DataBenchError(
            f"training {model} on {manifest.id} failed (exit {child.returncode}); "
            f"its log {log_file} ends:\n" + "\n".join(tail)
        )
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    return {
        "dataset": manifest.id,
        "train_examples": manifest.train.examples,
        "test_examples": manifest.test.examples,
        "model": model,
        "epochs": epochs,
        "batch_size": batch_size,
        "peak_rss_bytes": int(usage.ru_maxrss) * 1024,
        "examples_per_second": float(metrics["steady_examples_per_second"]),
        "wall_seconds": round(wall, 1),
    }


def _photos(folder: Path, images: int) -> dict[str, Any]:
    """The photo folder of ``images`` at ``folder``: written now, or as found when whole."""
    if not folder.exists():
        start = time.perf_counter()
        info = bench_photos.write_photo_folder(folder, images)
        info["write_seconds"] = round(time.perf_counter() - start, 2)
        return info
    info = bench_photos.read_photo_folder(folder)
    if info["images"] != images:
        raise DataBenchError(
            f"{folder} holds {info['images']} photos, not {images}; remove it, or give "
            f"--images {info['images']}"
        )
    return info


def data_bench(
    photos: Path,
    out: Path,
    images: int = DEFAULT_IMAGES,
    multiple: int = DEFAULT_MULTIPLE,
    model: str = DEFAULT_MODEL,
    epochs: int = DEFAULT_EPOCHS,
    batch_size: int = DEFAULT_BATCH,
) -> dict[str, Any]:
    """Measure what the module docstring lists and write it, as JSON, to ``out``.

    The larger photo folder, the prepared datasets and the memory runs go
    into a temporary folder beside ``out``, removed at the end; ``photos``
    stays for the bench's cases.

    Args:
        photos: the bench's photo folder, written here unless it is there.
        out: the JSON file to write (``runs/bench-<id>/data.json``).
        images: photos of the smaller dataset, 10 or more.
        multiple: the larger dataset is this many times the smaller, 2 or more.
        model: the model the memory runs train.
        epochs: epochs of each memory run, 1 or more.
        batch_size: examples a step of the memory runs, 1 or more.

    Returns:
        What is written: ``photos`` (:func:`training.bench_photos.write_photo_folder`'s
        description, with ``write_seconds`` when written now), ``prepare``
        (:func:`time_prepare` of each dataset, smaller first), ``memory``
        (:func:`train_peak_rss` of each), ``staging`` (:func:`staging` of the
        smaller), ``image_size`` and ``finished`` (UTC, ISO 8601).

    Raises:
        DataBenchError: a count out of range, a photo folder of another size,
            or a run that failed.
        training.models.UnknownModelError: an unknown model.
    """
    from training import models

    if images < len(bench_photos.CLASSES) or multiple < 2 or epochs < 1 or batch_size < 1:
        raise DataBenchError(
            f"images must be {len(bench_photos.CLASSES)} or more, multiple 2 or more, epochs "
            f"and batch_size 1 or more: {images}, {multiple}, {epochs}, {batch_size}"
        )
    models.get(model)
    photos, out = Path(photos).resolve(), Path(out).resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    found = _photos(photos, images)
    log.info("photos: %d in %s", found["images"], photos)
    result: dict[str, Any] = {
        "photos": found,
        "image_size": list(datasets.Settings().image_size),
        "prepare": [],
        "memory": [],
    }
    with tempfile.TemporaryDirectory(prefix=".data-bench-", dir=out.parent) as tmp:
        work = Path(tmp)
        larger = work / f"photos_x{multiple}"  # its first images are those of photos
        bench_photos.write_photo_folder(larger, images * multiple)
        prepared = []
        for count, folder in ((images, photos), (images * multiple, larger)):
            cache = work / f"cache-{count}"
            manifest, timing = time_prepare(folder, cache, count)
            log.info("prepared %d photos in %.1f s", count, timing["seconds"])
            result["prepare"].append(timing)
            prepared.append((manifest, cache))
        result["staging"] = staging(prepared[0][0])
        for manifest, cache in prepared:
            run = train_peak_rss(
                manifest, cache, work / f"run-{manifest.train.examples}", model, epochs, batch_size
            )
            log.info(
                "%s on %d examples: peak RSS %.0f MiB",
                model,
                run["train_examples"],
                run["peak_rss_bytes"] / 2**20,
            )
            result["memory"].append(run)
    result["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    tmp_out = out.with_name(f".{out.name}.tmp")
    tmp_out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    tmp_out.replace(out)
    return result


def pipeline_rate(
    data_dir: str,
    dataset: str,
    batch_size: int = DEFAULT_BATCH,
    seconds: float = 20.0,
    seed: int = SEED,
) -> dict[str, Any]:
    """Examples/s the training input pipeline alone delivers on this node.

    The command ``python -m training pipeline-bench`` on a bench node:
    :func:`training.datasets.pipeline.train_dataset` of the staged dataset
    (one process, so every train shard; batches of ``batch_size``, as a
    1-node case's), with the threads a 1-node run's task gets here, drawn
    as fast as it gives them, with no model: 20 batches untimed (the shuffle
    buffer fills), then ``seconds`` of them.

    Args:
        data_dir: the folder holding the staged ``<dataset id>/``.
        dataset: the prepared dataset's id, or a registered name.
        batch_size: examples a batch, 1 or more.
        seconds: wall seconds of timed batches, above 0.
        seed: the shuffle seed.

    Returns:
        ``dataset`` (the id), ``batch_size``, ``threads``, ``batches``,
        ``seconds``, ``examples_per_second``.

    Raises:
        DataBenchError: ``batch_size`` below 1 or ``seconds`` not above 0.
        training.datasets.DatasetError: the dataset, or one of its train
            shards, is not staged in ``data_dir``.
    """
    if batch_size < 1 or not seconds > 0:
        raise DataBenchError(
            f"batch_size must be 1 or more and seconds above 0: {batch_size}, {seconds}"
        )
    from training.datasets import pipeline
    from training.train import TrainConfig, thread_count

    manifest = datasets.read_manifest(data_dir, datasets.prepared_id(data_dir, dataset))
    datasets.verify_files(manifest, manifest.all_train_files())
    import tensorflow as tf

    threads = thread_count(TrainConfig(), None)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    batches = iter(pipeline.train_dataset(manifest, data_dir, batch_size, seed))
    for _ in range(20):
        next(batches)
    count = 0
    start = time.perf_counter()
    while True:
        next(batches)
        count += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            break
    return {
        "dataset": manifest.id,
        "batch_size": batch_size,
        "threads": threads,
        "batches": count,
        "seconds": round(elapsed, 3),
        "examples_per_second": round(count * batch_size / elapsed, 1),
    }
