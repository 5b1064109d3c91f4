"""The benchmark's report: the cases of ``runs/bench-<id>/`` compared, as JSON, plots and tables.

``make bench`` runs every case through ``train.yml`` (molecule/bench: nodes of
one CPU core each, links shaped to 1 Gb/s and 100 Mb/s; and the local
inventory), each into ``runs/bench-<id>/<case>/``. A case's folder name says
what it measures::

    <model>-<nodes>node-<mwms|ps>-<link>mbit     nodes of molecule/bench
    <model>-local-<tasks>workers                 the control node (local inventory)

and its ``metrics.json`` and ``progress.jsonl`` hold the figures. This module
compares them:

- speed-up of 2 nodes over 1 (examples/s) and scaling efficiency
  (speed-up / nodes);
- time to a fixed test accuracy, from the chief's per-epoch evaluation
  (the sum of the epoch times up to the first epoch at or above it);
- all-reduce time per step: the step time of N nodes minus that of 1 node at
  the same per-worker batch, against the ring all-reduce lower bound
  2 (N - 1) / N x gradient bytes / link rate (Patarasuk and Yuan, "Bandwidth
  optimal all-reduce algorithms for clusters of workstations", JPDC 69(2),
  2009);
- parameter_server against multi_worker_mirrored on the same nodes;
- local workers against one process on the same cores;
- the all-reduce alone: :func:`time_all_reduces`, run on every bench node at
  once (``python -m training all-reduce-bench``), times all-reduces of each
  model's gradient size in lockstep, outside training, into
  ``all_reduce-<link>mbit.json``; with a model's 1-node step time it gives
  the efficiency that all-reduce alone leaves (the ceiling); the rest of
  the 2-node step is the distributed runtime's CPU time on the node's core
  and the wait for the slower node;
- the lockstep wait alone: :func:`step_trace`, run on every bench node at
  once (``python -m training step-bench``), times each training step of a
  model on one node by itself, into ``steps-<model>-<host>.json``;
  :func:`lockstep_pace` replays the nodes' traces in lockstep (each step as
  long as the slower node's step at that moment) and gives the share of
  their own pace that waiting for each other leaves them, with no
  all-reduce at all;
- own data (:func:`own_data`): the control node's figures of
  ``data.json`` (:mod:`training.data_bench`: preparing a folder of photos,
  a worker's peak memory at 1x and 4x the dataset, the bytes each node
  holds) and each bench node's ``pipeline-<host>.json`` (the input pipeline
  alone), set against the image classifier's 1-node case.

:func:`report` writes ``bench.json`` and the plots into the bench folder;
:func:`table` makes it plain-text tables; :func:`markdown` makes it the
results file ``docs/benchmarks/<date>-<cpu>.md`` (``--docs``), dated by the
bench's earliest case and named after the CPU in the folder's
``machine.json``, and :func:`index_markdown` lists those files. Both texts
give the benchmark's targets (:func:`check_targets`), each met or not.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from training.machine import cpu_slug, read_machine
from training.predict_bench import form_line
from training.progress import PROGRESS_FILE, newest_epochs, plural, read_events
from training.tasklog import TASKS_DIR

BENCH_FILE = "bench.json"
SPEEDUP_PLOT = "speedup.png"
EFFICIENCY_PLOT = "efficiency.png"
#: Default test accuracy of "time to accuracy", the one the benchmark's targets name.
DEFAULT_TARGET = 0.95
#: Bytes a weight's gradient takes in the all-reduce, per all_reduce_dtype.
BYTES_PER_WEIGHT = {"float32": 4, "float16": 2}
#: The benchmark's targets (:func:`check_targets`): the all-reduce at 100 Mb/s
#: at most this many times its ring lower bound ...
ALL_REDUCE_OVER_BOUND_TARGET = 1.5
#: ... 2 nodes at 1 Gb/s at least this scaling efficiency ...
EFFICIENCY_TARGET = 0.8
#: ... and 2 local workers at least this share of one process's examples/s.
LOCAL_RATIO_TARGET = 0.8
#: The image classifier of the own-data cases, which has a target of its own ...
IMAGE_CLASSIFIER = "pi_mobilenet"
#: ... its 2 nodes at 1 Gb/s at least this scaling efficiency ...
IMAGE_EFFICIENCY_TARGET = 0.9
#: ... the input pipeline alone at least this many times the examples/s that
#: training consumes on the same node (on one core it then takes at most
#: 1/this of the core's time) ...
PIPELINE_RATIO_TARGET = 10.0
#: ... a worker's peak RSS on the larger dataset at most this many times that
#: on the smaller (flat: the shuffle buffer is bounded) ...
RSS_RATIO_TARGET = 1.1
#: ... and each node's staged bytes at most this many times its share: 1/N
#: of the training split, plus the test split on the chief's node.
STAGING_RATIO_TARGET = 1.05
#: What ``python -m training data-bench`` writes into the bench folder.
DATA_FILE = "data.json"
#: The results files' folder in the repository, as the generated-by lines name it.
DOCS_DIR = "docs/benchmarks"
#: The index of the results files, in their folder.
DOCS_INDEX = "README.md"

_NODE_CASE = re.compile(
    r"^(?P<model>.+)-(?P<nodes>\d+)node-(?P<strategy>mwms|ps)-(?P<link>\d+)mbit(?:-fp16)?$"
)
_LOCAL_CASE = re.compile(r"^(?P<model>.+)-local-(?P<tasks>\d+)workers?$")
#: ``all_reduce-<link>mbit.json``: :func:`time_all_reduces`' figures at that link rate.
_ALL_REDUCE_FILE = re.compile(r"^all_reduce-(?P<link>\d+)mbit\.json$")
#: ``pipeline-<host>.json``: the input pipeline alone on that node (``pipeline-bench``).
_PIPELINE_FILE = re.compile(r"^pipeline-(?P<host>.+)\.json$")
#: ``predict-<case>.json``: a case's model in each form on its node (``predict-bench``).
_PREDICT_FILE = re.compile(r"^predict-(?P<case>.+)\.json$")
#: ``steps-<model>-<host>.json``: :func:`step_trace` of that model on that node.
_STEPS_FILE = re.compile(r"^steps-(?P<model>[a-z0-9_]+)-(?P<host>.+)\.json$")
#: ``<date>-<cpu>.md``: :func:`markdown` of a bench, in the docs folder.
_RESULTS_FILE = re.compile(r"^(?P<date>\d{4}-\d{2}-\d{2})-(?P<cpu>[a-z0-9-]+)\.md$")
#: The title :func:`markdown` gives a results file.
_RESULTS_TITLE = re.compile(r"^# Benchmark of (?P<date>\S+) on (?P<cpu>.+)$")


class BenchError(RuntimeError):
    """No benchmark folder, or no finished case in it."""


@dataclass(frozen=True)
class Case:
    """One finished case of a benchmark.

    Attributes:
        name: the case's folder name.
        model: model name.
        where: ``nodes`` (molecule/bench) or ``local`` (the control node).
        nodes: nodes (or local worker processes) that trained.
        strategy: ``multi_worker_mirrored`` or ``parameter_server``.
        link_mbit: the shaped link rate in Mb/s; 0 for local cases.
        examples_per_second: the cluster's steady rate (epochs after the first).
        step_seconds: seconds per synchronous step (global batch / rate).
        batch_per_worker: examples per worker per step.
        weights: the model's trainable weights (0 when unknown).
        test_accuracy: after the last epoch.
        seconds_to_target: training seconds until the per-epoch test accuracy
            first reached the target; None if it never did.
        epochs_to_target: that epoch; None if never.
        train_seconds: training time of all epochs.
        all_reduce_dtype: what the gradients crossed the all-reduce in
            (``float16`` cases end in ``-fp16``).
        cpu_seconds_per_step: CPU seconds (user and system, every thread) the
            chief's process spent a step in the epochs after the first, from
            its task log; None if the log has no ``cpu_seconds``.
        cpu_busy: that CPU time over the same epochs' wall time: 1.0 is one
            core busy the whole step; None as above.
        dataset: the prepared dataset's id it trained on (``""`` when its
            metrics do not say).
    """

    name: str
    model: str
    where: str
    nodes: int
    strategy: str
    link_mbit: int
    examples_per_second: float
    step_seconds: float
    batch_per_worker: int
    weights: int
    test_accuracy: float
    seconds_to_target: float | None
    epochs_to_target: int | None
    train_seconds: float
    all_reduce_dtype: str = "float32"
    cpu_seconds_per_step: float | None = None
    cpu_busy: float | None = None
    dataset: str = ""


def time_to_accuracy(epochs: list[dict[str, Any]], target: float) -> tuple[float, int] | None:
    """Training seconds and epoch at which ``test_accuracy`` first reached ``target``.

    Args:
        epochs: ``epoch`` events in order, each with ``seconds`` and, when the
            chief evaluated, ``test_accuracy``.
        target: accuracy in [0, 1].

    Returns:
        (sum of epoch seconds up to and including that epoch, the epoch), or
        None if no epoch reached it.
    """
    total = 0.0
    for event in epochs:
        total += float(event["seconds"])
        if float(event.get("test_accuracy", -1.0)) >= target:
            return round(total, 3), int(event["epoch"])
    return None


def ring_lower_bound(gradient_bytes: int, nodes: int, link_mbit: float) -> float:
    """Least seconds a ring all-reduce of ``gradient_bytes`` takes on ``nodes`` nodes.

    Each node sends 2 (N - 1) / N of the bytes over its link (reduce-scatter
    then all-gather; Patarasuk and Yuan, JPDC 2009), at ``link_mbit`` Mb/s.

    Raises:
        ValueError: nodes below 2 or a link rate that is not positive.
    """
    if nodes < 2 or not link_mbit > 0:
        raise ValueError(
            f"a ring needs 2 or more nodes and a positive rate, not {nodes}, {link_mbit}"
        )
    return 2 * (nodes - 1) / nodes * gradient_bytes / (link_mbit * 1e6 / 8)


def chief_cpu(case_dir: Path, steps_per_epoch: int) -> tuple[float, float] | None:
    """CPU seconds a step and the share of one core busy, of a case's chief.

    Reads ``tasks/chief-0.jsonl`` (parameter_server's coordinator, which
    computes no steps) or else ``tasks/worker-0.jsonl`` (multi_worker_mirrored's
    chief; its ``cpu_seconds`` leave out its test evaluation after each
    epoch), the epochs after the first (the first holds tracing and the
    cluster's forming).

    Returns:
        (CPU seconds per step, CPU seconds over wall seconds), or None when
        the log is missing or its epochs carry no ``cpu_seconds``.
    """
    for task in ("chief-0", "worker-0"):
        path = case_dir / TASKS_DIR / f"{task}.jsonl"
        if path.is_file():
            break
    else:
        return None
    epochs = [
        e for e in newest_epochs(read_events(path)) if int(e["epoch"]) > 1 and "cpu_seconds" in e
    ]
    wall = sum(float(e["seconds"]) for e in epochs)
    if not epochs or not wall > 0 or steps_per_epoch < 1:
        return None
    cpu = sum(float(e["cpu_seconds"]) for e in epochs)
    return round(cpu / (len(epochs) * steps_per_epoch), 5), round(cpu / wall, 3)


def read_case(case_dir: Path, target: float, weights: dict[str, int]) -> Case | None:
    """The figures of one case folder; None if its name is not a case or it did not finish."""
    node = _NODE_CASE.match(case_dir.name)
    local = _LOCAL_CASE.match(case_dir.name)
    metrics_file = case_dir / "metrics.json"
    if not (node or local) or not metrics_file.is_file():
        return None
    m = json.loads(metrics_file.read_text(encoding="utf-8"))
    epochs = newest_epochs(read_events(case_dir / PROGRESS_FILE))
    reached = time_to_accuracy(epochs, target)
    rate = float(m["steady_examples_per_second"])
    if node:
        where, nodes, link = "nodes", int(node["nodes"]), int(node["link"])
    else:
        assert local is not None
        where, nodes, link = "local", int(local["tasks"]), 0
    cpu = chief_cpu(case_dir, int(m.get("steps_per_epoch", 0)))
    return Case(
        name=case_dir.name,
        model=m["model"],
        where=where,
        nodes=nodes,
        strategy=m["strategy"],
        link_mbit=link,
        examples_per_second=rate,
        step_seconds=round(m["global_batch_size"] / rate, 5) if rate else math.nan,
        batch_per_worker=int(m["batch_size_per_worker"]),
        weights=weights.get(m["model"], 0),
        test_accuracy=round(float(m["test_accuracy"]), 4),
        seconds_to_target=reached[0] if reached else None,
        epochs_to_target=reached[1] if reached else None,
        train_seconds=float(m["train_seconds"]),
        all_reduce_dtype=str(m.get("config", {}).get("all_reduce_dtype", "float32")),
        cpu_seconds_per_step=cpu[0] if cpu else None,
        cpu_busy=cpu[1] if cpu else None,
        dataset=str(m.get("dataset_id", "")),
    )


def compare(
    cases: list[Case],
    all_reduces: dict[tuple[int, int], dict[str, Any]] | None = None,
    paces: dict[str, dict[str, Any]] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """The benchmark's comparisons between cases.

    Args:
        cases: the finished cases.
        all_reduces: :func:`read_all_reduces`' timings, if the bench made any.
        paces: :func:`read_step_traces`' lockstep paces by model, if the bench made any.

    Returns:
        ``scaling``: per model, link and node count above 1 (multi_worker_mirrored):
        speed-up, efficiency, time to target against 1 node, and the all-reduce
        time per step with its ring lower bound and their ratio; where the
        all-reduce of the model's gradients was also timed alone, that time
        (``all_reduce_alone_seconds``) and the efficiency it alone would leave,
        one node's step over that step plus it (``ceiling_efficiency``); where
        the model's steps were also traced alone on the nodes at once, the
        share of their pace lockstep leaves them (``lockstep_pace``) and, with
        the all-reduce alone, the efficiency the two predict together
        (``predicted_efficiency``: one node's step ``t`` over ``t / pace`` plus
        the all-reduce alone); where the chiefs' task logs carry CPU time,
        the CPU seconds a step on N nodes and on 1 (``cpu_seconds_per_step``,
        ``one_node_cpu_seconds_per_step``: their difference is what the
        distributed runtime adds to the core), the share of the core busy on
        N nodes (``cpu_busy``) and the seconds a step it waits
        (``idle_seconds_per_step``: for the all-reduce and the other nodes).
        ``strategies``: parameter_server against multi_worker_mirrored per model,
        nodes and link. ``local``: local workers against one local process.
        ``float16``: float16 all-reduce against float32 per model, nodes and
        link, with the all-reduce time against the ring bound of half the bytes.
    """
    single = {c.model: c for c in cases if c.where == "nodes" and c.nodes == 1}
    scaling = []
    for c in cases:
        base = single.get(c.model)
        if c.where != "nodes" or c.nodes < 2 or c.strategy != "multi_worker_mirrored" or not base:
            continue
        if c.all_reduce_dtype != "float32":
            continue  # compared in float16 below
        speedup = c.examples_per_second / base.examples_per_second
        row: dict[str, Any] = {
            "model": c.model,
            "link_mbit": c.link_mbit,
            "nodes": c.nodes,
            "examples_per_second": c.examples_per_second,
            "one_node_examples_per_second": base.examples_per_second,
            "speedup": round(speedup, 3),
            "efficiency": round(speedup / c.nodes, 3),
            "seconds_to_target": c.seconds_to_target,
            "one_node_seconds_to_target": base.seconds_to_target,
        }
        row.update(_all_reduce_figures(c, base))
        if c.cpu_seconds_per_step is not None and base.cpu_seconds_per_step is not None:
            row["cpu_seconds_per_step"] = c.cpu_seconds_per_step
            row["one_node_cpu_seconds_per_step"] = base.cpu_seconds_per_step
            row["cpu_busy"] = c.cpu_busy
            row["idle_seconds_per_step"] = round(c.step_seconds - c.cpu_seconds_per_step, 5)
        alone = (all_reduces or {}).get((c.link_mbit, row.get("gradient_bytes", -1)))
        if alone is not None:
            seconds = float(alone["median_seconds"])
            row["all_reduce_alone_seconds"] = seconds
            row["ceiling_efficiency"] = round(base.step_seconds / (base.step_seconds + seconds), 3)
        pace = (paces or {}).get(c.model, {}).get("pace")
        if pace:
            row["lockstep_pace"] = pace
            if alone is not None:
                t = base.step_seconds
                row["predicted_efficiency"] = round(
                    t / (t / pace + row["all_reduce_alone_seconds"]), 3
                )
        scaling.append(row)
    mirrored = {
        (c.model, c.nodes, c.link_mbit): c
        for c in cases
        if c.where == "nodes"
        and c.strategy == "multi_worker_mirrored"
        and c.all_reduce_dtype == "float32"
    }
    float16 = []
    for c in cases:
        other = mirrored.get((c.model, c.nodes, c.link_mbit))
        if c.all_reduce_dtype != "float16" or other is None:
            continue
        row = {
            "model": c.model,
            "nodes": c.nodes,
            "link_mbit": c.link_mbit,
            "float16_examples_per_second": c.examples_per_second,
            "float32_examples_per_second": other.examples_per_second,
            "ratio": round(c.examples_per_second / other.examples_per_second, 3),
            "float16_test_accuracy": c.test_accuracy,
            "float32_test_accuracy": other.test_accuracy,
        }
        base = single.get(c.model)
        if base is not None:
            row.update(_all_reduce_figures(c, base))
        float16.append(row)
    strategies = []
    for c in cases:
        other = mirrored.get((c.model, c.nodes, c.link_mbit))
        if c.strategy != "parameter_server" or other is None:
            continue
        strategies.append(
            {
                "model": c.model,
                "nodes": c.nodes,
                "link_mbit": c.link_mbit,
                "parameter_server_examples_per_second": c.examples_per_second,
                "multi_worker_mirrored_examples_per_second": other.examples_per_second,
                "ratio": round(c.examples_per_second / other.examples_per_second, 3),
                "parameter_server_test_accuracy": c.test_accuracy,
                "multi_worker_mirrored_test_accuracy": other.test_accuracy,
                "parameter_server_seconds_to_target": c.seconds_to_target,
                "multi_worker_mirrored_seconds_to_target": other.seconds_to_target,
            }
        )
    one_process = {c.model: c for c in cases if c.where == "local" and c.nodes == 1}
    local = []
    for c in cases:
        base = one_process.get(c.model)
        if c.where != "local" or c.nodes < 2 or base is None:
            continue
        local.append(
            {
                "model": c.model,
                "workers": c.nodes,
                "examples_per_second": c.examples_per_second,
                "one_process_examples_per_second": base.examples_per_second,
                "ratio": round(c.examples_per_second / base.examples_per_second, 3),
            }
        )
    return {"scaling": scaling, "strategies": strategies, "local": local, "float16": float16}


def _all_reduce_figures(case: Case, base: Case) -> dict[str, Any]:
    """The all-reduce's share of ``case``'s step (its step less one node's) and its ring bound."""
    if not case.weights or case.batch_per_worker != base.batch_per_worker:
        return {}
    measured = case.step_seconds - base.step_seconds
    gradient_bytes = case.weights * BYTES_PER_WEIGHT[case.all_reduce_dtype]
    bound = ring_lower_bound(gradient_bytes, case.nodes, case.link_mbit)
    return {
        "gradient_bytes": gradient_bytes,
        "one_node_step_seconds": base.step_seconds,
        "all_reduce_seconds_per_step": round(measured, 4),
        "ring_bound_seconds": round(bound, 4),
        "all_reduce_over_bound": round(measured / bound, 2),
    }


def time_all_reduces(
    strategy: Any, sizes: list[int], calls: int = 100, seconds: float = 20.0
) -> list[dict[str, Any]]:
    """Seconds one all-reduce (sum) of each size takes, every worker calling it in lockstep.

    Each worker must call this at the same time with the same arguments: a
    call returns when every replica has contributed. Each size is first
    called 10 times untimed (tracing, connections), then up to ``calls``
    times or ``seconds`` of wall time, whichever ends first. The all-reduce
    is the strategy's own (its ``CommunicationOptions``), as in training.

    Args:
        strategy: a ``MultiWorkerMirroredStrategy`` (made before any other
            TensorFlow call of the process).
        sizes: float32 elements per all-reduce, each at least 1.
        calls: most timed calls per size.
        seconds: most wall seconds of timed calls per size.

    Returns:
        One dict per size, in order: ``floats``, ``bytes`` (4 a float),
        ``calls`` timed, and the ``median_seconds``, ``p10_seconds`` and
        ``p90_seconds`` of a call.

    Raises:
        ValueError: a size below 1, or calls below 1.
    """
    if calls < 1 or any(n < 1 for n in sizes):
        raise ValueError(f"sizes and calls must be 1 or more, not {sizes}, {calls}")
    import time

    import tensorflow as tf

    def all_reduce_of(values: Any) -> Any:
        # values is captured, not passed: a function argument has no device,
        # and the collective then finds no destination for its sum.
        @tf.function
        def all_reduce() -> Any:
            summed = strategy.run(
                lambda: tf.distribute.get_replica_context().all_reduce("sum", values)
            )
            return strategy.experimental_local_results(summed)[0][0]

        return all_reduce

    out = []
    for n in sizes:
        all_reduce = all_reduce_of(tf.ones([n], tf.float32))
        for _ in range(10):
            all_reduce().numpy()
        times: list[float] = []
        deadline = time.monotonic() + seconds
        while len(times) < calls and (not times or time.monotonic() < deadline):
            start = time.perf_counter()
            all_reduce().numpy()
            times.append(time.perf_counter() - start)
        times.sort()
        out.append(
            {
                "floats": n,
                "bytes": 4 * n,
                "calls": len(times),
                "median_seconds": round(times[len(times) // 2], 6),
                "p10_seconds": round(times[len(times) // 10], 6),
                "p90_seconds": round(times[(9 * len(times)) // 10], 6),
            }
        )
    return out


def all_reduce_bench(
    model_names: list[str], calls: int = 100, seconds: float = 20.0
) -> list[dict[str, Any]]:
    """Time this task's all-reduces of 4 bytes and of each model's gradients, in lockstep.

    The command ``python -m training all-reduce-bench`` of every worker of a
    ``multi_worker_mirrored`` cluster (TF_CONFIG), started at the same time:
    the strategy first, with the threads a training task would get on this
    host, then each model built once to count its trainable weights, then
    :func:`time_all_reduces`.

    Args:
        model_names: models whose gradient size to time (4 bytes come first).
        calls: most timed calls per size.
        seconds: most wall seconds of timed calls per size.

    Returns:
        :func:`time_all_reduces`' rows, each with the ``model`` it is the size of
        (``""`` for the 4 bytes).

    Raises:
        BenchError: no TF_CONFIG, or one that is not a worker of a cluster
            of two or more workers.
        training.models.UnknownModelError: an unknown model.
    """
    import os

    from training.cluster import parse_tf_config
    from training.train import TrainConfig, thread_count

    tf_config = parse_tf_config(os.environ.get("TF_CONFIG"), "multi_worker_mirrored")
    if tf_config is None or len(tf_config.tasks) < 2:
        raise BenchError(
            "all-reduce-bench needs TF_CONFIG of a multi_worker_mirrored cluster of 2 or more "
            "workers, and every worker running it at once"
        )
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tensorflow as tf

    from training import models
    from training.strategy import make_strategy

    for name in model_names:
        models.get(name)  # an unknown name fails here, before the cluster forms
    threads = thread_count(TrainConfig(), tf_config)  # what a training task gets here
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    strategy = make_strategy(tf_config, "multi_worker_mirrored")
    sizes = {"": 1} | {name: _weights(name) for name in model_names}
    rows = time_all_reduces(strategy, list(sizes.values()), calls, seconds)
    return [{"model": name, **row} for name, row in zip(sizes, rows, strict=True)]


def step_trace(
    model_name: str,
    data_dir: str,
    dataset: str = "mnist_5k",
    seconds: float = 20.0,
    batch_size: int = 64,
    seed: int = 42,
) -> dict[str, Any]:
    """When each training step of ``model_name`` starts on this node, training alone.

    The command ``python -m training step-bench``, run on every bench node at
    once: the model trains by itself (TensorFlow's default strategy, the
    threads a 1-node run gets here, ``batch_size`` examples a step, one step
    a call of Keras' train function) for ``seconds`` after 20 untimed steps.
    The nodes share a clock (one kernel under the bench's containers), so
    :func:`lockstep_pace` can set their traces side by side.

    Args:
        model_name: a model of :func:`training.models.available`.
        data_dir: folder holding the staged ``<dataset id>/``.
        dataset: the prepared dataset's id, or a registered name (its newest
            prepared folder in ``data_dir``).
        seconds: wall seconds of timed steps, more than 0.
        batch_size: examples a step, 1 or more.
        seed: shuffle and weight-initialisation seed.

    Returns:
        ``model``, ``batch_size`` and ``starts``: the wall-clock time
        (``time.time()``, seconds) each timed step started, the last entry
        the end of the last step.

    Raises:
        ValueError: ``seconds`` not above 0 or ``batch_size`` below 1.
        training.models.UnknownModelError: an unknown model.
        training.datasets.DatasetError: the dataset, or any of its train
            shards, is not staged in ``data_dir``.
    """
    if seconds <= 0 or batch_size < 1:
        raise ValueError(
            f"seconds must be above 0 and batch_size 1 or more: {seconds}, {batch_size}"
        )
    import os
    import time

    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    from training import datasets, models
    from training.datasets import pipeline
    from training.train import TrainConfig, thread_count

    models.get(model_name)
    staged = datasets.read_manifest(data_dir, datasets.prepared_id(data_dir, dataset))
    import tensorflow as tf

    threads = thread_count(TrainConfig(), None)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    tf.keras.utils.set_random_seed(seed)
    model = models.build(
        model_name, models.learning_rate(model_name), 1, staged.input_shape, len(staged.classes)
    )
    # The shards this node holds: a bench node of a 2-node case holds half of them.
    own = staged.staged_train_files(data_dir)
    batches = iter(pipeline.train_dataset(staged, data_dir, batch_size, seed, own))
    train_step = model.make_train_function()
    for _ in range(20):
        float(train_step(batches)["loss"])
    starts = [time.time()]
    deadline = starts[0] + seconds
    while starts[-1] < deadline:
        float(train_step(batches)["loss"])  # the step's result: it has run
        starts.append(time.time())
    return {
        "model": model_name,
        "batch_size": batch_size,
        "starts": [round(t, 6) for t in starts],
    }


def lockstep_pace(traces: list[list[float]]) -> dict[str, Any]:
    """How fast nodes training alone would go had they to wait for each other each step.

    A replay: from the latest first start to the earliest last end of the
    traces, the nodes start every step together, and it lasts as long as the
    longest of the steps they were running at that moment in their own
    traces (a synchronous step waits for the slowest replica; the all-reduce
    itself is left out). Where the nodes' speeds vary apart, from step to
    step or over seconds, the replay is slower than either node alone.

    Args:
        traces: per node, :func:`step_trace`'s ``starts``: ascending
            wall-clock seconds, the last the end of the last step.

    Returns:
        ``seconds`` the traces overlap, ``own_steps_per_second`` (each node's
        steps in that window over its length, the mean over the nodes),
        ``lockstep_steps_per_second`` (the replay's) and ``pace``: the
        second over the first, 1.0 when the nodes never wait.

    Raises:
        ValueError: fewer than two traces, a trace of fewer than two times,
            or traces that do not overlap.
    """
    import bisect

    if len(traces) < 2 or any(len(t) < 2 for t in traces):
        raise ValueError("lockstep_pace needs two or more traces of two or more times each")
    begin = max(t[0] for t in traces)
    end = min(t[-1] for t in traces)
    if end <= begin:
        raise ValueError("the traces do not overlap in time: were the nodes started together?")

    def step_at(trace: list[float], when: float) -> float:
        k = min(max(bisect.bisect_right(trace, when) - 1, 0), len(trace) - 2)
        return trace[k + 1] - trace[k]

    now, steps = begin, 0
    while True:
        step = max(step_at(t, now) for t in traces)
        if now + step > end:
            break
        now, steps = now + step, steps + 1
    own = [
        (bisect.bisect_right(t, end) - bisect.bisect_left(t, begin) - 1) / (end - begin)
        for t in traces
    ]
    own_rate = sum(own) / len(own)
    lockstep = steps / (now - begin) if steps else 0.0
    return {
        "seconds": round(end - begin, 3),
        "own_steps_per_second": round(own_rate, 2),
        "lockstep_steps_per_second": round(lockstep, 2),
        "pace": round(lockstep / own_rate, 3) if own_rate else 0.0,
    }


def read_step_traces(bench_dir: Path) -> dict[str, dict[str, Any]]:
    """:func:`lockstep_pace` of each model whose steps ``bench_dir`` holds from 2+ nodes.

    Returns:
        By model: ``nodes`` (the hosts, sorted) and :func:`lockstep_pace`'s figures;
        a model traced on one node only is left out.
    """
    found: dict[str, dict[str, list[float]]] = {}
    for path in sorted(bench_dir.glob("steps-*.json")):
        match = _STEPS_FILE.match(path.name)
        if match:
            trace = json.loads(path.read_text(encoding="utf-8"))["starts"]
            found.setdefault(match["model"], {})[match["host"]] = trace
    return {
        model: {"nodes": sorted(by_host), **lockstep_pace(list(by_host.values()))}
        for model, by_host in found.items()
        if len(by_host) >= 2
    }


def read_all_reduces(bench_dir: Path) -> dict[tuple[int, int], dict[str, Any]]:
    """The all-reduce timings of ``bench_dir``, by (link rate in Mb/s, gradient bytes)."""
    found = {}
    for path in sorted(bench_dir.glob("all_reduce-*mbit.json")):
        match = _ALL_REDUCE_FILE.match(path.name)
        if not match:
            continue
        for row in json.loads(path.read_text(encoding="utf-8")):
            found[(int(match["link"]), int(row["bytes"]))] = row
    return found


def read_pipelines(bench_dir: Path) -> list[dict[str, Any]]:
    """Each bench node's ``pipeline-<host>.json`` (``python -m training pipeline-bench``)."""
    found = []
    for path in sorted(bench_dir.glob("pipeline-*.json")):
        match = _PIPELINE_FILE.match(path.name)
        if not match:
            continue
        row = _read_json(path)
        if isinstance(row, dict) and "examples_per_second" in row:
            found.append({**row, "host": row.get("host") or match["host"]})
    return found


def read_predicts(bench_dir: Path) -> list[dict[str, Any]]:
    """Each ``predict-<case>.json`` (:func:`training.predict_bench.predict_bench`), by case."""
    out = []
    for path in sorted(bench_dir.glob("predict-*.json")):
        found = _PREDICT_FILE.match(path.name)
        data = _read_json(path)
        if found and isinstance(data, dict) and data.get("forms"):
            out.append({"case": found["case"], **data})
    return out


def own_data(
    data: dict[str, Any] | None, pipelines: list[dict[str, Any]], cases: list[Case]
) -> dict[str, Any] | None:
    """The own-data figures of a bench, set against each other and the training cases.

    Args:
        data: ``data.json`` (:func:`training.data_bench.data_bench`), or None.
        pipelines: :func:`read_pipelines`' rows.
        cases: the bench's finished cases.

    Returns:
        None when the bench has neither; else ``photos``, ``image_size`` and
        ``prepare`` as ``data.json`` gives them (None and ``[]`` without it);
        ``memory``: the runs of ``data.json``, smallest dataset first, and
        ``ratio``, the largest one's peak RSS over the smallest's (None with
        fewer than two runs); ``staging``: ``data.json``'s, with ``ratio``,
        the most any node holds over its goal (None without it);
        ``pipeline``: a row a node, with the 1-node multi_worker_mirrored
        case of the same dataset that trains fastest (``case``,
        ``training_examples_per_second``) and ``ratio``, the pipeline's
        examples/s over that case's (None without such a case).
    """
    if data is None and not pipelines:
        return None
    data = data or {}
    runs = sorted(data.get("memory") or [], key=lambda r: r["train_examples"])
    memory = None
    if runs:
        ratio = (
            round(runs[-1]["peak_rss_bytes"] / runs[0]["peak_rss_bytes"], 3)
            if len(runs) > 1
            else None
        )
        memory = {"runs": runs, "ratio": ratio}
    staging = data.get("staging")
    if staging:
        worst = max(row["ratio"] for n in staging["nodes"] for row in n["per_node"])
        staging = {**staging, "ratio": worst}
    rows = []
    for p in pipelines:
        trained = [
            c
            for c in cases
            if c.where == "nodes"
            and c.nodes == 1
            and c.strategy == "multi_worker_mirrored"
            and c.all_reduce_dtype == "float32"
            and c.dataset == p.get("dataset")
        ]
        row = {
            "host": p["host"],
            "dataset": p.get("dataset", ""),
            "batch_size": p.get("batch_size"),
            "threads": p.get("threads"),
            "examples_per_second": float(p["examples_per_second"]),
            "case": None,
            "model": None,
            "training_examples_per_second": None,
            "ratio": None,
        }
        if trained:
            fastest = max(trained, key=lambda c: c.examples_per_second)
            row.update(
                case=fastest.name,
                model=fastest.model,
                training_examples_per_second=fastest.examples_per_second,
                ratio=round(row["examples_per_second"] / fastest.examples_per_second, 2),
            )
        rows.append(row)
    return {
        "photos": data.get("photos"),
        "image_size": data.get("image_size"),
        "prepare": sorted(data.get("prepare") or [], key=lambda r: r["images"]),
        "memory": memory,
        "staging": staging,
        "pipeline": rows,
    }


def report(bench_dir: Path, target: float = DEFAULT_TARGET) -> dict[str, Any]:
    """Read every case of ``bench_dir``, write ``bench.json`` and the plots there.

    Returns:
        The report written to ``bench.json``: ``bench_id`` (the folder's
        name), ``started`` (:func:`bench_started`), ``machine``
        (:func:`training.machine.read_machine`), ``target_accuracy``,
        ``cases`` (one dict per :class:`Case`), the comparisons of
        :func:`compare`, ``lockstep`` (:func:`read_step_traces`),
        ``own_data`` (:func:`own_data`; None when the bench has none),
        ``on_a_node`` (:func:`read_predicts`: each timed case's model in
        each form) and ``plots`` (file names).

    Raises:
        BenchError: no such folder, or no finished case in it.
    """
    if not bench_dir.is_dir():
        raise BenchError(f"{bench_dir} is not a folder; run make bench first")
    from training import models

    names = {m["model"] for d in bench_dir.iterdir() for m in [_case_match(d.name)] if m}
    weights = {name: _weights(name) for name in names & set(models.available())}
    cases = [
        case
        for d in sorted(bench_dir.iterdir())
        if d.is_dir() and not d.is_symlink()
        for case in [read_case(d, target, weights)]
        if case is not None
    ]
    if not cases:
        raise BenchError(
            f"{bench_dir} holds no finished case (<model>-<n>node-<mwms|ps>-<link>mbit[-fp16] or "
            "<model>-local-<n>workers with a metrics.json)"
        )
    out: dict[str, Any] = {
        "bench_id": bench_dir.resolve().name,
        "started": bench_started([bench_dir / c.name for c in cases]),
        "machine": read_machine(bench_dir),
        "target_accuracy": target,
        "cases": [asdict(c) for c in cases],
    }
    paces = read_step_traces(bench_dir)
    out.update(compare(cases, read_all_reduces(bench_dir), paces))
    out["lockstep"] = paces
    out["own_data"] = own_data(_read_json(bench_dir / DATA_FILE), read_pipelines(bench_dir), cases)
    out["on_a_node"] = read_predicts(bench_dir)
    out["plots"] = [p.name for p in _plot(bench_dir, out)]
    _write_atomically(bench_dir / BENCH_FILE, json.dumps(out, indent=2) + "\n")
    return out


def bench_started(case_dirs: list[Path]) -> str | None:
    """When the earliest of ``case_dirs`` started, in UTC: ``YYYY-MM-DDTHH:MM:SSZ``.

    A case starts at ``started`` of its ``run.json`` (train.yml's record of
    the run, Unix seconds), else at ``finished`` less ``wall_seconds`` of its
    ``metrics.json``, else at the first event of its ``progress.jsonl``. The
    bench's own files date it, so a report run again later dates it the same.

    Returns:
        The time, or None when no case says when it started.
    """
    starts = [t for d in case_dirs for t in [_case_started(d)] if t is not None]
    if not starts:
        return None
    return dt.datetime.fromtimestamp(min(starts), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _case_started(case_dir: Path) -> float | None:
    """Unix seconds at which the run of ``case_dir`` started (see :func:`bench_started`)."""
    record = _read_json(case_dir / "run.json")
    try:
        return float(record["started"])
    except (KeyError, TypeError, ValueError):
        pass
    metrics = _read_json(case_dir / "metrics.json")
    try:
        finished = dt.datetime.fromisoformat(str(metrics["finished"]))
        return finished.timestamp() - float(metrics["wall_seconds"])
    except (KeyError, TypeError, ValueError):
        pass
    times = [float(e["time"]) for e in read_events(case_dir / PROGRESS_FILE) if "time" in e]
    return min(times) if times else None


def _read_json(path: Path) -> Any:
    """The JSON in ``path``; None when it is missing or not JSON."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file: a reader sees the old or the new."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _case_match(name: str) -> re.Match[str] | None:
    return _NODE_CASE.match(name) or _LOCAL_CASE.match(name)


def _weights(name: str) -> int:
    """Trainable weights of model ``name`` (builds it: imports TensorFlow)."""
    import os

    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    from training import models

    model = models.build(name, models.learning_rate(name))
    return int(sum(int(w.shape.num_elements()) for w in model.trainable_weights))


def _plain(text: str) -> str:
    return text


def _code(text: str) -> str:
    return f"`{text}`"


def _link(mbit: int) -> str:
    """A link rate as people say it: ``1 Gb/s``, ``100 Mb/s``."""
    return f"{mbit // 1000} Gb/s" if mbit and mbit % 1000 == 0 else f"{mbit} Mb/s"


def _reached(seconds: float | None, epoch: int | None = None) -> str:
    if seconds is None:
        return "not reached"
    return f"{seconds:.1f} s" + (f" (ep {epoch})" if epoch is not None else "")


def _case_cells(c: dict[str, Any]) -> list[str]:
    """A case's figures as text: examples/s, ms a step, chief CPU, test accuracy, to target."""
    cpu = (
        f"{1000 * c['cpu_seconds_per_step']:.1f} ({c['cpu_busy']:.0%})"
        if c.get("cpu_seconds_per_step") is not None and c.get("cpu_busy") is not None
        else "-"
    )
    return [
        f"{c['examples_per_second']:.1f}",
        f"{1000 * c['step_seconds']:.1f}",
        cpu,
        f"{c['test_accuracy']:.4f}",
        _reached(c["seconds_to_target"], c["epochs_to_target"]),
    ]


def _case_label(c: dict[str, Any], q: Callable[[str], str] = _plain) -> str:
    """``mnist_cnn, 2 nodes, 1 Gb/s, float16 all-reduce``: a case in words."""
    if c["where"] == "local":
        who = "one process" if c["nodes"] == 1 else f"{c['nodes']} workers"
        parts = [q(c["model"]), f"local, {who}, batch {c['batch_per_worker']}"]
    else:
        parts = [q(c["model"]), plural(c["nodes"], "node"), _link(c["link_mbit"])]
    if c["strategy"] == "parameter_server":
        parts.append(q("parameter_server"))
    if c.get("all_reduce_dtype", "float32") != "float32":
        parts.append(f"{c['all_reduce_dtype']} all-reduce")
    return ", ".join(parts)


def _row_label(r: dict[str, Any], q: Callable[[str], str] = _plain) -> str:
    """``mnist_cnn, 2 nodes, 1 Gb/s``: the model, nodes and link of a comparison row."""
    return f"{q(r['model'])}, {r['nodes']} nodes, {_link(r['link_mbit'])}"


def _scaling_head(r: dict[str, Any], q: Callable[[str], str] = _plain) -> str:
    return f"{_row_label(r, q)}: speed-up {r['speedup']:.2f}, efficiency {r['efficiency']:.2f}"


def _scaling_notes(r: dict[str, Any]) -> list[list[str]]:
    """Where a scaling row's step goes: a note a figure, each note lines that fit :func:`table`."""
    notes = []
    if "all_reduce_over_bound" in r:
        notes.append(
            [
                f"a step computes {1000 * r['one_node_step_seconds']:.1f} ms on 1 node; "
                f"the all-reduce adds {1000 * r['all_reduce_seconds_per_step']:.1f} ms",
                f"(ring lower bound {1000 * r['ring_bound_seconds']:.1f} ms, "
                f"{r['all_reduce_over_bound']:.2f}x)",
            ]
        )
    if "ceiling_efficiency" in r:
        notes.append(
            [
                f"alone, in lockstep, it takes {1000 * r['all_reduce_alone_seconds']:.1f} "
                f"ms, which leaves at most {r['ceiling_efficiency']:.2f}"
            ]
        )
        wait = r["all_reduce_seconds_per_step"] - r["all_reduce_alone_seconds"]
        if wait > 0:
            notes.append(
                [
                    f"the other {1000 * wait:.1f} ms: the runtime's extra work on the "
                    "core and the wait for the slower node"
                ]
            )
    if "lockstep_pace" in r:
        notes.append(
            [
                f"trained alone on the nodes at once, in lockstep they keep "
                f"{r['lockstep_pace']:.2f} of their own pace"
            ]
        )
    if "predicted_efficiency" in r:
        notes.append(
            [
                f"that and the all-reduce alone predict efficiency "
                f"{r['predicted_efficiency']:.2f} (measured {r['efficiency']:.2f})"
            ]
        )
    if "cpu_seconds_per_step" in r:
        notes.append(
            [
                f"the chief's CPU a step: {1000 * r['one_node_cpu_seconds_per_step']:.1f} "
                f"ms on 1 node, {1000 * r['cpu_seconds_per_step']:.1f} ms on {r['nodes']}; "
                f"its core busy {r['cpu_busy']:.0%},",
                f"idle {1000 * r['idle_seconds_per_step']:.1f} ms a step waiting for the "
                "all-reduce and the other nodes",
            ]
        )
    return notes


def _strategy_line(r: dict[str, Any], q: Callable[[str], str] = _plain) -> str:
    return (
        f"{_row_label(r, q)}: {r['parameter_server_examples_per_second']:.0f} ex/s (test acc "
        f"{r['parameter_server_test_accuracy']:.3f}) against "
        f"{r['multi_worker_mirrored_examples_per_second']:.0f} "
        f"({r['multi_worker_mirrored_test_accuracy']:.3f}): {r['ratio']:.2f}x"
    )


def _float16_line(r: dict[str, Any], q: Callable[[str], str] = _plain) -> str:
    return (
        f"{_row_label(r, q)}: {r['float16_examples_per_second']:.0f} ex/s "
        f"(test acc {r['float16_test_accuracy']:.3f}) against "
        f"{r['float32_examples_per_second']:.0f} ({r['float32_test_accuracy']:.3f}): "
        f"{r['ratio']:.2f}x"
    )


def _float16_note(r: dict[str, Any]) -> str | None:
    if "all_reduce_over_bound" not in r:
        return None
    return (
        f"all-reduce {1000 * r['all_reduce_seconds_per_step']:.1f} ms a step; ring "
        f"lower bound of {r['gradient_bytes'] / 1e6:.2f} MB "
        f"{1000 * r['ring_bound_seconds']:.1f} ms ({r['all_reduce_over_bound']:.2f}x)"
    )


def _local_line(r: dict[str, Any], q: Callable[[str], str] = _plain) -> str:
    return (
        f"{q(r['model'])}: {r['workers']} workers {r['examples_per_second']:.0f} ex/s, one "
        f"process {r['one_process_examples_per_second']:.0f} ex/s: {r['ratio']:.2f}x"
    )


def _mib(n: float) -> str:
    return f"{n / 2**20:.0f} MiB"


def _mb(n: float) -> str:
    """Bytes as people say them, in powers of 1000: ``4.1 KB``, ``39.3 MB``."""
    if n >= 1e6:
        return f"{n / 1e6:.1f} MB"
    return f"{n / 1e3:.1f} KB"


def _images_of(own: dict[str, Any], dataset: str) -> int | None:
    """The photos the prepared ``dataset`` was made from, by the preparing rows."""
    return next((r["images"] for r in own.get("prepare") or [] if r["dataset"] == dataset), None)


def _photos_line(own: dict[str, Any]) -> str | None:
    photos, size = own.get("photos"), own.get("image_size")
    if not photos:
        return None
    height, width = photos["frame"]
    prepared = f", prepared at {size[0]}x{size[1]} rgb" if size else ""
    return (
        f"{photos['images']} JPEGs of {width}x{height} pixels in {len(photos['classes'])} "
        f"classes ({_mb(photos['bytes'])}){prepared}"
    )


def _prepare_line(r: dict[str, Any]) -> str:
    return (
        f"{r['images']} photos: {r['seconds']:.2f} s, {r['seconds_per_1000']:.2f} s a 1,000; "
        f"again, unchanged: {r['again_seconds']:.3f} s, {r['again_seconds_per_1000']:.3f} s a 1,000"
    )


def _pipeline_line(r: dict[str, Any]) -> str:
    alone = f"{r['host']}: {r['examples_per_second']:.0f} examples/s alone"
    if r["case"] is None:
        return f"{alone}; no 1-node case trained on its dataset"
    return f"{alone}; {r['case']} trains {r['training_examples_per_second']:.1f}: {r['ratio']:.1f}x"


def _memory_head(memory: dict[str, Any], q: Callable[[str], str] = _plain) -> str:
    run = memory["runs"][0]
    return (
        f"peak RSS of one training process ({q(run['model'])}, "
        f"{plural(run['epochs'], 'epoch')} of {run['batch_size']})"
    )


def _multiple(memory: dict[str, Any]) -> int:
    """How many times the smallest dataset the largest memory run's is (4 unless measured)."""
    runs = memory.get("runs") or []
    if len(runs) < 2:
        return 4
    return round(runs[-1]["train_examples"] / runs[0]["train_examples"])


def _memory_line(own: dict[str, Any], run: dict[str, Any]) -> str:
    photos = _images_of(own, run["dataset"])
    of = f"{photos} photos, " if photos else ""
    test = f" and {run['test_examples']} test" if "test_examples" in run else ""
    return (
        f"{of}{run['train_examples']} training{test} examples: {_mib(run['peak_rss_bytes'])} "
        f"({run['examples_per_second']:.0f} examples/s)"
    )


def _staging_sizes(staging: dict[str, Any]) -> str:
    return (
        f"training split {_mb(staging['train_bytes'])}, test split {_mb(staging['test_bytes'])}, "
        f"dataset.json {_mb(staging['manifest_bytes'])}"
    )


def _staging_line(n: dict[str, Any]) -> str:
    held = ", ".join(_mb(r["bytes"]) for r in n["per_node"])
    goals = ", ".join(_mb(r["goal"]) for r in n["per_node"])
    return f"{plural(n['nodes'], 'node')}: {held} (its share: {goals})"


def _image_classifier_row(out: dict[str, Any]) -> dict[str, Any] | None:
    return next(
        (
            r
            for r in out.get("scaling", [])
            if r["model"] == IMAGE_CLASSIFIER and r["nodes"] == 2 and r["link_mbit"] == 1000
        ),
        None,
    )


def own_data_lines(out: dict[str, Any]) -> list[str]:
    """The own-data section of :func:`table`: :func:`own_data`'s figures and their verdicts.

    Args:
        out: :func:`report`'s output, or any dict with ``own_data`` (and ``scaling``).

    Returns:
        Plain lines of at most 100 columns; none when the bench has no own data.
    """
    own = out.get("own_data")
    if not own:
        return []
    pipeline_met, memory_met, staging_met = (t["met"] for t in own_data_targets(own))
    lines = [f"{_OWN}:"]
    photos = _photos_line(own)
    if photos:
        lines.append(f"  photos: {photos}")
    if own["prepare"]:
        lines.append("  preparing on the control node:")
        lines += [f"    {_prepare_line(r)}" for r in own["prepare"]]
    if own["pipeline"]:
        lines.append(
            f"  input pipeline alone against training on the same node: {_verdict(pipeline_met)}"
        )
        lines += [f"    {_pipeline_line(r)}" for r in own["pipeline"]]
    else:
        lines.append("  input pipeline alone: not measured (no pipeline-<node>.json)")
    memory = own["memory"]
    if memory:
        lines.append(f"  {_memory_head(memory)}: {_verdict(memory_met)}")
        lines += [f"    {_memory_line(own, run)}" for run in memory["runs"]]
        if memory["ratio"] is not None:
            lines.append(
                f"    {_multiple(memory)}x the training examples: {memory['ratio']:.2f}x the memory"
            )
    staging = own["staging"]
    if staging:
        lines.append(f"  bytes staged on each node, a worker each: {_verdict(staging_met)}")
        lines.append(f"    {_staging_sizes(staging)}")
        lines += [f"    {_staging_line(n)}" for n in staging["nodes"]]
        lines.append(f"    at most {staging['ratio']:.3f}x a node's share")
    row = _image_classifier_row(out)
    if row:
        met = row["efficiency"] >= IMAGE_EFFICIENCY_TARGET
        lines.append(
            f"  {IMAGE_CLASSIFIER}, 2 nodes at 1 Gb/s: efficiency {row['efficiency']:.2f}: "
            f"{_verdict(met)}"
        )
    return lines


def own_data_markdown(out: dict[str, Any]) -> list[str]:
    """The own-data section of :func:`markdown`: tables of :func:`own_data`'s figures, verdicts."""
    own = out.get("own_data")
    if not own:
        return []
    pipeline_t, memory_t, staging_t = own_data_targets(own, _code)

    def verdict(t: dict[str, Any]) -> list[str]:
        return ["", f"Target: {t['target']}: **{_verdict(t['met'])}**."]

    lines = ["", f"## {_OWN}", ""]
    photos = _photos_line(own)
    lines.append(
        f"The bench's photos: {photos}, as `train.yml` prepares a folder."
        if photos
        else "This bench has no data.json: only the input pipeline was measured."
    )
    if own["prepare"]:
        lines += ["", "### Preparing on the control node", ""]
        lines += _md_table(
            ["photos", "prepare", "a 1,000 photos", "again, unchanged", "a 1,000 photos"],
            [
                [
                    str(r["images"]),
                    f"{r['seconds']:.2f} s",
                    f"{r['seconds_per_1000']:.2f} s",
                    f"{r['again_seconds']:.3f} s",
                    f"{r['again_seconds_per_1000']:.3f} s",
                ]
                for r in own["prepare"]
            ],
        )
    lines += ["", "### The input pipeline alone against training", ""]
    if own["pipeline"]:
        lines += _md_table(
            ["node", "pipeline alone, examples/s", "training case", "training, ex/s", "ratio"],
            [
                [
                    r["host"],
                    f"{r['examples_per_second']:.0f}",
                    _code(r["case"]) if r["case"] else "none of its dataset",
                    f"{r['training_examples_per_second']:.1f}" if r["case"] else "-",
                    f"{r['ratio']:.1f}x" if r["ratio"] is not None else "-",
                ]
                for r in own["pipeline"]
            ],
        )
    else:
        lines.append("Not measured: the bench has no `pipeline-<node>.json`.")
    lines += verdict(pipeline_t)
    memory = own["memory"]
    if memory:
        head = _memory_head(memory, _code)
        lines += ["", "### A worker's peak memory", "", f"{head[0].upper()}{head[1:]}:", ""]
        lines += _md_table(
            ["photos", "training examples", "test examples", "peak RSS", "examples/s"],
            [
                [
                    str(_images_of(own, run["dataset"]) or "-"),
                    str(run["train_examples"]),
                    str(run.get("test_examples", "-")),
                    _mib(run["peak_rss_bytes"]),
                    f"{run['examples_per_second']:.0f}",
                ]
                for run in memory["runs"]
            ],
        )
        lines += verdict(memory_t)
    staging = own["staging"]
    if staging:
        lines += [
            "",
            "### Bytes staged on each node",
            "",
            f"A worker a node; {_staging_sizes(staging)}:",
            "",
        ]
        lines += _md_table(
            ["nodes", "node", "bytes", "its share", "ratio"],
            [
                [
                    str(n["nodes"]),
                    f"{r['node']} (chief)" if r["node"] == 0 else str(r["node"]),
                    _mb(r["bytes"]),
                    _mb(r["goal"]),
                    f"{r['ratio']:.3f}x",
                ]
                for n in staging["nodes"]
                for r in n["per_node"]
            ],
        )
        lines += verdict(staging_t)
    return lines


#: The headings of the report's sections, shared by :func:`table` and :func:`markdown`.
_SCALING = "Scaling (multi_worker_mirrored against 1 node, same per-worker batch)"
_STRATEGIES = "parameter_server against multi_worker_mirrored on the same nodes"
_FLOAT16 = "float16 all-reduce against float32 on the same nodes"
_LOCAL = "Local workers against one process on the same cores"
_OWN = "Own data"
_ON_A_NODE = "The trained model on a node"


def check_targets(out: dict[str, Any], q: Callable[[str], str] = _plain) -> list[dict[str, Any]]:
    """The benchmark's targets, checked against a report's figures.

    - the all-reduce at 100 Mb/s takes at most 1.5x its ring lower bound,
      for the model of the most gradient bytes (the one the wire limits);
    - 2 nodes at 1 Gb/s scale at an efficiency of 0.8 or more, for the
      compute-bound model (the longest step on 1 node, the image classifier
      left out: it has a target of its own);
    - that model reaches the target accuracy sooner on those 2 nodes than on 1;
    - 2 local workers reach 0.8x or more the examples/s of one process on
      the same cores (a line per model);
    - the image classifier (``pi_mobilenet``) on 2 nodes at 1 Gb/s scales at
      an efficiency of 0.9 or more;
    - and the own-data targets of :func:`own_data_targets`.

    Args:
        out: :func:`report`'s output (or ``bench.json``).
        q: how to quote a model's name (:func:`markdown` makes it code).

    Returns:
        One dict a target: ``target`` and ``measured`` (text) and ``met``:
        True, False, or None when the bench did not measure it.
    """
    target = out["target_accuracy"]
    found: list[dict[str, Any]] = []

    def add(text: str, measured: str, met: bool | None) -> None:
        found.append({"target": text, "measured": measured, "met": met})

    text = (
        f"all-reduce at 100 Mb/s at most {ALL_REDUCE_OVER_BOUND_TARGET}x its ring lower "
        "bound (most gradient bytes)"
    )
    rows = [r for r in out["scaling"] if r["link_mbit"] == 100 and "all_reduce_over_bound" in r]
    if rows:
        r = max(rows, key=lambda r: (r["gradient_bytes"], -r["nodes"]))
        add(
            text,
            f"{r['all_reduce_over_bound']:.2f}x: {1000 * r['all_reduce_seconds_per_step']:.1f} "
            f"against {1000 * r['ring_bound_seconds']:.1f} ms a step ({q(r['model'])}, "
            f"{r['gradient_bytes'] / 1e6:.2f} MB, {r['nodes']} nodes)",
            r["all_reduce_over_bound"] <= ALL_REDUCE_OVER_BOUND_TARGET,
        )
    else:
        add(text, "no 100 Mb/s all-reduce against its bound in this bench", None)

    one_node = {
        c["model"]: c["step_seconds"]
        for c in out["cases"]
        if c["where"] == "nodes"
        and c["nodes"] == 1
        and c["strategy"] == "multi_worker_mirrored"
        and c.get("all_reduce_dtype", "float32") == "float32"
    }
    rows = [
        r
        for r in out["scaling"]
        if r["nodes"] == 2
        and r["link_mbit"] == 1000
        and r["model"] in one_node
        and r["model"] != IMAGE_CLASSIFIER
    ]
    text = f"2-node efficiency at least {EFFICIENCY_TARGET} at 1 Gb/s (compute-bound model)"
    sooner = f"{target:.2f} test accuracy sooner on 2 nodes than on 1 at 1 Gb/s (same model)"
    if rows:
        r = max(rows, key=lambda r: one_node[r["model"]])
        add(
            text,
            f"{r['efficiency']:.2f} ({q(r['model'])}, "
            f"{1000 * one_node[r['model']]:.1f} ms a step on 1 node)",
            r["efficiency"] >= EFFICIENCY_TARGET,
        )
        two, one = r["seconds_to_target"], r["one_node_seconds_to_target"]
        add(
            sooner,
            f"{_reached(two)} on 2 nodes against {_reached(one)} on 1 ({q(r['model'])})",
            two is not None and (one is None or two < one),
        )
    else:
        add(text, "no 2-node case at 1 Gb/s with its 1-node case in this bench", None)
        add(sooner, "no 2-node case at 1 Gb/s with its 1-node case in this bench", None)

    text = f"2 local workers at least {LOCAL_RATIO_TARGET}x one process on the same cores"
    rows = [r for r in out["local"] if r["workers"] == 2]
    for r in rows:
        add(
            text,
            f"{r['ratio']:.2f}x ({q(r['model'])}: {r['examples_per_second']:.0f} against "
            f"{r['one_process_examples_per_second']:.0f} examples/s)",
            r["ratio"] >= LOCAL_RATIO_TARGET,
        )
    if not rows:
        add(text, "no 2 local workers with their one process in this bench", None)

    text = f"image classifier 2-node efficiency at least {IMAGE_EFFICIENCY_TARGET} at 1 Gb/s"
    rows = [
        r
        for r in out["scaling"]
        if r["nodes"] == 2 and r["link_mbit"] == 1000 and r["model"] == IMAGE_CLASSIFIER
    ]
    if rows:
        r = rows[0]
        add(
            text,
            f"{r['efficiency']:.2f} ({q(r['model'])}, {r['one_node_examples_per_second']:.1f} "
            f"examples/s on 1 node, {r['examples_per_second']:.1f} on 2)",
            r["efficiency"] >= IMAGE_EFFICIENCY_TARGET,
        )
    else:
        add(text, f"no 2-node {q(IMAGE_CLASSIFIER)} case at 1 Gb/s with its 1-node case", None)
    found += own_data_targets(out.get("own_data"), q)
    return found


def own_data_targets(
    own: dict[str, Any] | None, q: Callable[[str], str] = _plain
) -> list[dict[str, Any]]:
    """The own-data targets, checked against :func:`own_data`'s figures.

    - the input pipeline alone delivers at least 10x the examples/s that
      training consumes on the same bench node (the lowest node's ratio);
    - a worker's peak RSS on the larger dataset is at most 1.1x that on the
      smaller;
    - no node holds more than 1.05x its share: 1/N of the training split,
      plus the test split on the chief's node, for 1 to 3 nodes.

    Returns:
        One dict a target, as :func:`check_targets` gives them.
    """
    own = own or {}
    found: list[dict[str, Any]] = []

    def add(text: str, measured: str, met: bool | None) -> None:
        found.append({"target": text, "measured": measured, "met": met})

    text = (
        f"input pipeline alone at least {PIPELINE_RATIO_TARGET:g}x the examples/s training "
        "consumes on one bench node"
    )
    rows = [r for r in own.get("pipeline") or [] if r["ratio"] is not None]
    if rows:
        r = min(rows, key=lambda r: r["ratio"])
        add(
            text,
            f"{r['ratio']:.1f}x ({r['host']}: {r['examples_per_second']:.0f} against "
            f"{r['training_examples_per_second']:.1f} examples/s of {q(r['model'])})",
            r["ratio"] >= PIPELINE_RATIO_TARGET,
        )
    else:
        add(text, "no pipeline-<node>.json with its 1-node training case in this bench", None)

    memory = own.get("memory") or {}
    text = (
        f"a worker's peak RSS at {_multiple(memory)}x the dataset at most "
        f"{RSS_RATIO_TARGET:g}x that at 1x"
    )
    if memory.get("ratio") is not None:
        small, large = memory["runs"][0], memory["runs"][-1]
        add(
            text,
            f"{memory['ratio']:.2f}x: {_mib(large['peak_rss_bytes'])} against "
            f"{_mib(small['peak_rss_bytes'])} ({q(small['model'])}, "
            f"{large['train_examples']} and {small['train_examples']} training examples)",
            memory["ratio"] <= RSS_RATIO_TARGET,
        )
    else:
        add(text, "no two memory runs in this bench's data.json", None)

    staging = own.get("staging")
    text = f"bytes staged on each node at most {STAGING_RATIO_TARGET:g}x its share, 1 to 3 nodes"
    if staging:
        n, row = max(
            ((n["nodes"], row) for n in staging["nodes"] for row in n["per_node"]),
            key=lambda nr: nr[1]["ratio"],
        )
        add(
            text,
            f"at most {row['ratio']:.3f}x ({plural(n, 'node')}, node {row['node']}: "
            f"{_mb(row['bytes'])} against {_mb(row['goal'])})",
            staging["ratio"] <= STAGING_RATIO_TARGET,
        )
    else:
        add(text, "no staging figures in this bench's data.json", None)
    return found


def _verdict(met: bool | None) -> str:
    return {True: "met", False: "not met", None: "not measured"}[met]


def table(out: dict[str, Any]) -> str:
    """The report as plain-text tables, 100 columns at most."""
    target = out["target_accuracy"]
    lines = [
        f"{'case':<38} {'ex/s':>7} {'ms/step':>8} {'CPU ms (busy)':>13} {'test acc':>8} "
        f"{f'to {target:.2f}':>12}",
    ]
    for c in out["cases"]:
        rate, ms, cpu, accuracy, reached = _case_cells(c)
        lines.append(f"{c['name']:<38} {rate:>7} {ms:>8} {cpu:>13} {accuracy:>8} {reached:>12}")
    if out["scaling"]:
        lines += ["", f"{_SCALING}:"]
    for r in out["scaling"]:
        lines.append(f"  {_scaling_head(r)}")
        lines += [f"    {line}" for note in _scaling_notes(r) for line in note]
    if out["strategies"]:
        lines += ["", f"{_STRATEGIES}:"]
    lines += [f"  {_strategy_line(r)}" for r in out["strategies"]]
    if out.get("float16"):
        lines += ["", f"{_FLOAT16}:"]
    for r in out.get("float16", []):
        lines.append(f"  {_float16_line(r)}")
        note = _float16_note(r)
        if note:
            lines.append(f"    {note}")
    if out["local"]:
        lines += ["", f"{_LOCAL}:"]
    lines += [f"  {_local_line(r)}" for r in out["local"]]
    own = own_data_lines(out)
    if own:
        lines += ["", *own]
    for r in out.get("on_a_node") or []:
        lines += ["", f"{_ON_A_NODE}, {_on_a_node_head(r)}:"]
        lines += [f"  {form_line(f)}" for f in r["forms"]]
    lines += ["", "Targets:"]
    for t in check_targets(out):
        lines += [f"  {_verdict(t['met']):<13}{t['target']}", f"  {'':<13}{t['measured']}"]
    return "\n".join(lines)


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    def row(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return [row(header), "|" + "---|" * len(header), *(row(r) for r in rows)]


def _size(memory_bytes: int | None) -> str:
    return f"{memory_bytes / 2**30:.1f} GiB" if memory_bytes else "unknown"


def results_name(out: dict[str, Any]) -> str:
    """``<date>-<cpu>.md``: the results file of a report, named by the bench's own date and CPU.

    Raises:
        BenchError: the report has no start time (no case says when it started).
    """
    if not out.get("started"):
        raise BenchError(
            f"cannot date bench {out.get('bench_id', '?')}: no case has a run.json with "
            "'started', a metrics.json with 'finished' or a progress.jsonl; run make bench again"
        )
    machine = out.get("machine") or {}
    return f"{out['started'][:10]}-{cpu_slug(str(machine.get('cpu_model') or ''))}.md"


def _generated_by(out: dict[str, Any]) -> str:
    target = out["target_accuracy"]
    flag = f" --target {target:g}" if target != DEFAULT_TARGET else ""
    return (
        f"python -m training bench --dir runs/{out.get('bench_id', 'bench-<id>')}{flag} "
        f"--docs {DOCS_DIR}"
    )


def markdown(out: dict[str, Any]) -> str:
    """The report as a Markdown results file: machine, targets, then :func:`table`'s figures.

    Args:
        out: :func:`report`'s output (or ``bench.json``), with ``started``.

    Raises:
        BenchError: the report has no start time.
    """
    results_name(out)  # dated, or BenchError
    target = out["target_accuracy"]
    machine = out.get("machine") or {}
    cpu = machine.get("cpu_model") or "an unknown CPU"
    started = dt.datetime.strptime(out["started"], "%Y-%m-%dT%H:%M:%SZ")
    lines = [
        f"# Benchmark of {out['started'][:10]} on {cpu}",
        "",
        f"Generated by `{_generated_by(out)}` from the bench's own files; that command "
        "writes it again, so edit the code, not this file. What the figures mean: "
        "[benchmark](../benchmark.md).",
        "",
        "## Machine",
        "",
        f"- CPU: {cpu}, {machine.get('cores') or '?'} logical cores",
        f"- memory: {_size(machine.get('memory_bytes'))}",
        f"- TensorFlow {machine.get('tensorflow_version') or 'unknown'}, "
        f"Python {machine.get('python_version') or 'unknown'}, "
        f"{machine.get('system') or 'unknown system'} {machine.get('architecture') or ''}".rstrip(),
        f"- bench `{out.get('bench_id', '?')}`, started {started:%Y-%m-%d %H:%M} UTC; "
        f"target accuracy {target:.2f}",
    ]
    if not machine.get("recorded", True):
        lines.append(
            "- the bench folder has no machine.json: these are the facts of the machine "
            "the report ran on"
        )
    lines += ["", "## Targets", ""]
    lines += _md_table(
        ["target", "measured", "verdict"],
        [[t["target"], t["measured"], _verdict(t["met"])] for t in check_targets(out, _code)],
    )
    lines += ["", "## Cases", ""]
    lines += _md_table(
        [
            "case",
            "examples/s",
            "ms a step",
            "chief CPU, ms a step (core busy)",
            "test accuracy",
            f"to {target:.2f}",
        ],
        [[_case_label(c, _code), *_case_cells(c)] for c in out["cases"]],
    )
    if out["scaling"]:
        lines += ["", f"## {_SCALING}", ""]
        lines += _md_table(
            [
                "model, nodes, link",
                "examples/s, 1 node",
                "examples/s",
                "speed-up",
                "efficiency",
                f"to {target:.2f}, 1 node",
                f"to {target:.2f}",
            ],
            [
                [
                    _row_label(r, _code),
                    f"{r['one_node_examples_per_second']:.1f}",
                    f"{r['examples_per_second']:.1f}",
                    f"{r['speedup']:.2f}",
                    f"{r['efficiency']:.2f}",
                    _reached(r["one_node_seconds_to_target"]),
                    _reached(r["seconds_to_target"]),
                ]
                for r in out["scaling"]
            ],
        )
        noted = [r for r in out["scaling"] if _scaling_notes(r)]
        if noted:
            lines += ["", "Where a step's time goes:", ""]
        for r in noted:
            lines.append(f"- {_scaling_head(r, _code)}")
            lines += [f"  - {' '.join(note)}" for note in _scaling_notes(r)]
    bounded = [(r, "float32") for r in out["scaling"] if "all_reduce_over_bound" in r] + [
        (r, "float16") for r in out.get("float16", []) if "all_reduce_over_bound" in r
    ]
    if bounded:
        lines += ["", "## All-reduce against the ring lower bound", ""]
        lines += _md_table(
            [
                "model, nodes, link",
                "gradients",
                "all-reduce, ms a step",
                "ring lower bound, ms",
                "ratio",
                "alone in lockstep, ms",
            ],
            [
                [
                    _row_label(r, _code),
                    f"{r['gradient_bytes'] / 1e6:.2f} MB {dtype}",
                    f"{1000 * r['all_reduce_seconds_per_step']:.1f}",
                    f"{1000 * r['ring_bound_seconds']:.1f}",
                    f"{r['all_reduce_over_bound']:.2f}x",
                    f"{1000 * r['all_reduce_alone_seconds']:.1f}"
                    if "all_reduce_alone_seconds" in r
                    else "-",
                ]
                for r, dtype in bounded
            ],
        )
    if out.get("float16"):
        lines += ["", f"## {_FLOAT16}", ""]
    for r in out.get("float16", []):
        note = _float16_note(r)
        lines.append(f"- {_float16_line(r, _code)}" + (f"; {note}" if note else ""))
    if out["strategies"]:
        lines += ["", f"## {_STRATEGIES}", ""]
    lines += [f"- {_strategy_line(r, _code)}" for r in out["strategies"]]
    if out["local"]:
        lines += ["", f"## {_LOCAL}", ""]
    lines += [f"- {_local_line(r, _code)}" for r in out["local"]]
    lines += own_data_markdown(out)
    lines += on_a_node_markdown(out)
    return "\n".join(lines) + "\n"


def on_a_node_markdown(out: dict[str, Any]) -> list[str]:
    """The trained model on a node: a table a timed case, a row a form (Keras, each variant)."""
    found = out.get("on_a_node") or []
    if not found:
        return []
    lines = ["", f"## {_ON_A_NODE}", ""]
    lines.append(
        "Each form of a 1-node case's model on that node, one input at a time "
        "(`python -m training predict-bench`); the test accuracy is the run's "
        "and its export's, on the test split."
    )
    for r in found:
        lines += ["", f"### {_on_a_node_head(r, _code)}", ""]
        lines += _md_table(
            ["form", "file", "size", "test accuracy", "ms an input (median)", "p90"],
            [
                [
                    f["form"],
                    _code(f["file"]),
                    f"{f['bytes'] / 1000:.0f} KB",
                    _accuracy(f["test_accuracy"]),
                    f"{f['ms_median']:.3f}",
                    f"{f['ms_p90']:.3f}",
                ]
                for f in r["forms"]
            ],
        )
    return lines


def _on_a_node_head(r: dict[str, Any], q: Callable[[str], str] = _plain) -> str:
    threads = "1 thread" if r["threads"] == 1 else f"{r['threads']} threads"
    return f"{q(str(r['model']))} of {q(r['case'])} on {r['host']}, {threads}"


def _accuracy(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def index_markdown(docs_dir: Path) -> str:
    """The index of the results files in ``docs_dir``: newest first, a line each.

    Each line gives the bench's date and CPU, from the file's title (else
    its name), and a link to it.
    """
    found = []
    for path in sorted(docs_dir.glob("*.md")):
        name = _RESULTS_FILE.match(path.name)
        if not name:
            continue
        with path.open(encoding="utf-8") as handle:
            title = _RESULTS_TITLE.match(handle.readline().rstrip("\n"))
        cpu = title["cpu"] if title else name["cpu"]
        found.append((name["date"], cpu, path.name))
    found.sort(key=lambda f: f[0], reverse=True)  # stable: by name within a date
    lines = [
        "# Benchmark results",
        "",
        f"Generated by `python -m training bench --dir runs/bench-<id> --docs {DOCS_DIR}`, "
        "which writes one file a bench and this list of them, newest first. What the "
        "figures mean: [benchmark](../benchmark.md).",
        "",
    ]
    if found:
        lines += _md_table(
            ["date", "CPU", "results"], [[date, cpu, f"[{n}]({n})"] for date, cpu, n in found]
        )
    else:
        lines.append("No results yet: `make bench` writes the first.")
    return "\n".join(lines) + "\n"


def write_docs(out: dict[str, Any], docs_dir: Path) -> list[Path]:
    """Write :func:`markdown` of ``out`` and the index of ``docs_dir`` there.

    Returns:
        The results file (:func:`results_name`) and the index (``README.md``).

    Raises:
        BenchError: the report has no start time.
    """
    path = docs_dir / results_name(out)
    docs_dir.mkdir(parents=True, exist_ok=True)
    _write_atomically(path, markdown(out))
    index = docs_dir / DOCS_INDEX
    _write_atomically(index, index_markdown(docs_dir))
    return [path, index]


def _plot(bench_dir: Path, out: dict[str, Any]) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    rows = out["scaling"]
    if rows:
        fig, ax = plt.subplots(figsize=(6, 4))
        for model, link in sorted({(r["model"], r["link_mbit"]) for r in rows}):
            pts = sorted(
                (r["nodes"], r["speedup"])
                for r in rows
                if (r["model"], r["link_mbit"]) == (model, link)
            )
            ax.plot(
                [1] + [p[0] for p in pts],
                [1.0] + [p[1] for p in pts],
                marker="o",
                label=f"{model}, {link} Mb/s",
            )
        top = max(r["nodes"] for r in rows)
        ax.plot([1, top], [1, top], linestyle="--", color="grey", label="linear")
        ax.set(
            xlabel="nodes (one CPU core each)",
            ylabel="speed-up (examples/s)",
            title="Speed-up against nodes",
        )
        ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(bench_dir / SPEEDUP_PLOT, dpi=100)
        plt.close(fig)
        written.append(bench_dir / SPEEDUP_PLOT)

        fig, ax = plt.subplots(figsize=(6, 4))
        for model in sorted({r["model"] for r in rows}):
            pts = sorted(
                (r["link_mbit"], r["efficiency"])
                for r in rows
                if r["model"] == model and r["nodes"] == 2
            )
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=model)
        ax.set_xscale("log")
        ax.axhline(1.0, linestyle="--", color="grey")
        ax.set(
            xlabel="link rate (Mb/s)",
            ylabel="scaling efficiency, 2 nodes",
            ylim=(0, 1.1),
            title="Efficiency against link rate",
        )
        ax.legend(fontsize="small")
        fig.tight_layout()
        fig.savefig(bench_dir / EFFICIENCY_PLOT, dpi=100)
        plt.close(fig)
        written.append(bench_dir / EFFICIENCY_PLOT)
    return written
