"""Progress of a run: the chief appends events to ``progress.jsonl``; followers read them.

One JSON object per line, each with ``event`` and ``time`` (Unix seconds):

- ``start``: ``epochs``, ``steps_per_epoch``, ``model``, ``strategy``, ``tasks``
- ``batch``: ``epoch`` (1-based), ``step`` (1-based), ``loss``, ``accuracy``;
  written at most every ``interval`` seconds, so a long epoch on a slow node
  still shows movement
- ``epoch``: ``epoch``, ``loss``, ``accuracy``, ``seconds``, ``examples_per_second``;
  a script's: ``epoch``, ``epochs`` and the metrics Keras printed (``loss``, ``val_loss``...)
- ``resume``: ``from_epoch``, the epochs the restored backup had finished
- ``end``: ``test_loss``, ``test_accuracy``, ``train_seconds``, ``examples_per_second``;
  a script's (:mod:`training.script`): ``script``, ``wall_seconds``
- ``log``: ``line``, a line a script printed (script mode; its ``start`` has ``script``)

This module has no TensorFlow import; :func:`make_callback` imports tf_keras
when it is called.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROGRESS_FILE = "progress.jsonl"


def plural(count: int | str, noun: str) -> str:
    """``"1 epoch"``, ``"2 epochs"``: a count and its English noun (regular plurals only)."""
    return f"{count} {noun}" if str(count) == "1" else f"{count} {noun}s"


class ProgressWriter:
    """Appends progress events to a JSON-lines file, one flushed line per event."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, event: str, **fields: Any) -> None:
        """Append ``{"event": event, "time": now, **fields}`` as one line.

        A NaN or infinite float (a diverged loss) is written as null: the
        line stays strict JSON (RFC 8259 has no NaN).
        """
        record = {"event": event, "time": round(time.time(), 3), **fields}
        for key, value in record.items():
            if isinstance(value, float) and not math.isfinite(value):
                record[key] = None
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, default=_jsonable, allow_nan=False) + "\n")


def _jsonable(value: Any) -> Any:
    try:
        return float(value)
    except (TypeError, ValueError):
        return str(value)


def read_events(path: Path) -> list[dict[str, Any]]:
    """All complete events of a progress file; a half-written last line is skipped."""
    if not path.exists():
        return []
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events


def newest_epochs(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest ``epoch`` event of each epoch, in epoch order.

    A restarted chief repeats the epochs after its backup; the later event wins.
    """
    newest: dict[int, dict[str, Any]] = {}
    for event in events:
        if event.get("event") == "epoch":
            newest[int(event["epoch"])] = event
    return [newest[e] for e in sorted(newest)]


def _fmt(value: Any, spec: str = ".4f") -> str:
    if isinstance(value, (int, float)) and math.isfinite(value):
        return format(value, spec)
    return "n/a"


def describe(events: list[dict[str, Any]]) -> str:
    """One human line for the newest state of a run, e.g.

    ``epoch 3/8 step 20/31 · loss 0.2134 · accuracy 0.9361 | epoch 2: loss 0.31, 1204 ex/s``.
    """
    if not events:
        return "waiting for the chief to start training (the cluster is forming)"
    start = next((e for e in events if e["event"] == "start"), {})
    epochs = start.get("epochs", "?")
    steps = start.get("steps_per_epoch", "?")
    last = events[-1]
    last_epoch = next((e for e in reversed(events) if e["event"] == "epoch"), None)
    done = epoch_line(last_epoch, epochs) if last_epoch else ""
    if last["event"] == "resume":
        return (
            f"resumed from the backup made after epoch {last.get('from_epoch')}/{epochs} "
            "(a task had died; the cluster restarted)"
        )
    starts = sum(1 for e in events if e["event"] == "start")
    if last["event"] == "start" and starts > 1:
        return f"the chief restarted (start {starts}); the cluster is forming again"
    if last["event"] == "start" and "script" in start:
        return f"{start['script']} started on {plural(len(start.get('tasks', [])), 'task')}"
    if last["event"] == "start":
        model = str(start.get("model"))
        return (
            # A model file's copy in the run folder: its name says which.
            f"training started: {Path(model).name if '/' in model else model} with "
            f"{start.get('strategy')} on "
            f"{plural(len(start.get('tasks', [])), 'task')}, "
            f"{plural(epochs, 'epoch')} of {plural(steps, 'step')}"
        )
    if last["event"] == "batch":
        now = (
            f"epoch {last['epoch']}/{epochs} step {last['step']}/{steps} · "
            f"loss {_fmt(last.get('loss'))} · accuracy {_fmt(last.get('accuracy'))}"
        )
        return f"{now} | {done}" if done else now
    if last["event"] == "log":
        return f"{start.get('script', 'script')}: {last.get('line', '')}"
    if last["event"] == "end" and "script" in last:
        seconds = _fmt(last.get("wall_seconds"), ".0f")
        return f"finished: {last['script']} exited 0 after {seconds} s"
    if last["event"] == "end":
        return (
            f"finished: test accuracy {_fmt(last.get('test_accuracy'))}, "
            f"test loss {_fmt(last.get('test_loss'))}, "
            f"{_fmt(last.get('examples_per_second'), '.0f')} examples/s"
        )
    return done


def epoch_line(event: dict[str, Any], total: Any = "?") -> str:
    """One human line for an ``epoch`` event, e.g.

    ``epoch 2/8: loss 0.3100, accuracy 0.9120, 1204 examples/s, test accuracy 0.9410``;
    a script's epoch (:mod:`training.script`) gives its total and Keras'
    metrics: ``epoch 2/4: loss 0.7030, accuracy 0.5020, val_loss 0.7088``.
    """
    parts = [f"loss {_fmt(event.get('loss'))}"]
    if "accuracy" in event:
        parts.append(f"accuracy {_fmt(event['accuracy'])}")
    if "examples_per_second" in event:
        parts.append(f"{_fmt(event['examples_per_second'], '.0f')} examples/s")
    if "test_accuracy" in event:
        parts.append(f"test accuracy {_fmt(event['test_accuracy'])}")
    parts += [f"{key} {_fmt(value)}" for key, value in event.items() if key.startswith("val_")]
    return f"epoch {event['epoch']}/{event.get('epochs', total)}: " + ", ".join(parts)


def describe_epochs(epochs: list[dict[str, Any]], total: Any) -> str:
    """One human line for several epoch events, e.g.

    ``epochs 3-7/8: loss 0.3770 -> 0.1875, accuracy 0.8914 -> 0.9430, test
    accuracy 0.9410 -> 0.9610``.
    """
    first, last = epochs[0], epochs[-1]
    line = (
        f"epochs {first['epoch']}-{last['epoch']}/{last.get('epochs', total)}: "
        f"loss {_fmt(first.get('loss'))} -> {_fmt(last.get('loss'))}, "
        f"accuracy {_fmt(first.get('accuracy'))} -> {_fmt(last.get('accuracy'))}"
    )
    if "test_accuracy" in last:
        line += (
            f", test accuracy {_fmt(first.get('test_accuracy'))} -> "
            f"{_fmt(last.get('test_accuracy'))}"
        )
    return line


def make_callback(
    writer: ProgressWriter,
    steps_per_epoch: int,
    examples_per_step: int,
    interval: float,
    batch_events: bool = True,
    task_writer: ProgressWriter | None = None,
    worker_examples_per_step: int | None = None,
    exporter: Any = None,
    on_formed: Callable[[], None] | None = None,
    evaluate: Callable[[], dict[str, float]] | None = None,
) -> Any:
    """A tf_keras callback writing ``batch`` and ``epoch`` events to ``writer``.

    Args:
        writer: where run events go (the chief's real output folder).
        steps_per_epoch: steps in one epoch.
        examples_per_step: training examples one step consumes over the whole
            cluster (the global batch), for examples/s.
        interval: least seconds between two ``batch`` events.
        batch_events: write ``batch`` events; tf_keras refuses batch-level
            callbacks under ParameterServerStrategy, so those runs report
            per epoch only.
        task_writer: this task's own log (:mod:`training.tasklog`): gets
            ``resume`` and ``epoch`` events with this worker's examples/s and
            ``cpu_seconds``, the CPU time (user and system, every thread) the
            process spent in the epoch (:func:`time.process_time`).
        worker_examples_per_step: examples one step consumes on this worker
            (the per-worker batch); defaults to ``examples_per_step``.
        exporter: a :class:`training.exporter.Exporter` to update, or None.
        on_formed: called once training runs (first step, or first epoch
            without batch events): the cluster has formed.
        evaluate: called after every epoch, outside the epoch's time; the
            metrics it returns (``test_accuracy``...) join the epoch's logs, so
            the epoch event, TensorBoard and the history get them.
    """
    import tf_keras as keras

    per_worker = worker_examples_per_step or examples_per_step

    class ProgressCallback(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            # Tensors in logs are fine (_floats reads them when it writes):
            # tf_keras then does not copy every step's logs to NumPy, a
            # synchronisation per step.
            self._supports_tf_logs = True
            self.epoch = 0
            self.epoch_start = 0.0
            self.epoch_cpu = 0.0
            self.last_batch = 0.0
            self.last_step = 0
            self.epoch_seconds: list[float] = []
            self.first_epoch: int | None = None
            self.told_formed = False

        def _formed(self) -> None:
            if on_formed is not None and not self.told_formed:
                self.told_formed = True
                on_formed()

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            if self.first_epoch is None:
                self.first_epoch = epoch
                if epoch > 0:
                    # BackupAndRestore restored the state after `epoch` epochs.
                    for out in (writer, task_writer):
                        if out is not None:
                            out.write("resume", from_epoch=epoch)
                if not batch_events:
                    self._formed()
            self.epoch = epoch + 1
            self.epoch_start = self.last_batch = time.monotonic()
            self.epoch_cpu = time.process_time()
            self.last_step = 0
            if exporter is not None:
                exporter.record(epoch=self.epoch)

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            seconds = time.monotonic() - self.epoch_start
            cpu_seconds = time.process_time() - self.epoch_cpu
            self.epoch_seconds.append(seconds)
            if evaluate is not None and logs is not None:
                logs.update(evaluate())
            values = _floats(logs)
            # The run's log counts the cluster's examples, the task's log this
            # worker's, and the CPU time this process spent in the epoch.
            for out, per_step, own in (
                (writer, examples_per_step, {}),
                (task_writer, per_worker, {"cpu_seconds": round(cpu_seconds, 3)}),
            ):
                if out is not None:
                    out.write(
                        "epoch",
                        epoch=epoch + 1,
                        seconds=round(seconds, 3),
                        examples_per_second=round(steps_per_epoch * per_step / seconds, 1),
                        **own,
                        **values,
                    )
            if exporter is not None:
                steps = steps_per_epoch - self.last_step
                exporter.record(
                    steps=steps,
                    seconds=time.monotonic() - self.last_batch,
                    examples=steps * per_worker,
                    logs=values,
                )

    class BatchProgressCallback(ProgressCallback):
        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            # The first step this process ran (batch is the last step of each
            # call of the train function: steps_per_execution - 1 at first).
            self._formed()
            now = time.monotonic()
            if now - self.last_batch < interval:
                return
            values = _floats(logs)
            if exporter is not None:
                steps = batch + 1 - self.last_step
                exporter.record(
                    steps=steps,
                    seconds=now - self.last_batch,
                    examples=steps * per_worker,
                    logs=values,
                )
            self.last_batch, self.last_step = now, batch + 1
            writer.write("batch", epoch=self.epoch, step=batch + 1, **values)

    return BatchProgressCallback() if batch_events else ProgressCallback()


def _floats(logs: dict[str, Any] | None) -> dict[str, float]:
    out = {}
    for key, value in (logs or {}).items():
        try:
            out[key] = float(value.fetch() if hasattr(value, "fetch") else value)
        except (TypeError, ValueError):
            continue
    return out
