"""Progress of a run: the chief appends events to ``progress.jsonl``; followers read them.

One JSON object per line, each with ``event`` and ``time`` (Unix seconds):

- ``start``: ``epochs``, ``steps_per_epoch``, ``model``, ``strategy``, ``tasks``
- ``batch``: ``epoch`` (1-based), ``step`` (1-based), ``loss``, ``accuracy``;
  written at most every ``interval`` seconds, so a long epoch on a slow node
  still shows movement
- ``epoch``: ``epoch``, ``loss``, ``accuracy``, ``seconds``, ``examples_per_second``
- ``end``: ``test_loss``, ``test_accuracy``, ``train_seconds``, ``examples_per_second``

This module has no TensorFlow import; :func:`make_callback` imports tf_keras
when it is called.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

PROGRESS_FILE = "progress.jsonl"


class ProgressWriter:
    """Appends progress events to a JSON-lines file, one flushed line per event."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, event: str, **fields: Any) -> None:
        """Append ``{"event": event, "time": now, **fields}`` as one line."""
        record = {"event": event, "time": round(time.time(), 3), **fields}
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, default=_jsonable) + "\n")


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
    done = (
        f"epoch {last_epoch['epoch']}/{epochs}: loss {_fmt(last_epoch.get('loss'))}, "
        f"accuracy {_fmt(last_epoch.get('accuracy'))}, "
        f"{_fmt(last_epoch.get('examples_per_second'), '.0f')} examples/s"
        if last_epoch
        else ""
    )
    if last["event"] == "start":
        return (
            f"training started: {start.get('model')} with {start.get('strategy')} on "
            f"{len(start.get('tasks', []))} task(s), {epochs} epochs of {steps} steps"
        )
    if last["event"] == "batch":
        now = (
            f"epoch {last['epoch']}/{epochs} step {last['step']}/{steps} · "
            f"loss {_fmt(last.get('loss'))} · accuracy {_fmt(last.get('accuracy'))}"
        )
        return f"{now} | {done}" if done else now
    if last["event"] == "end":
        return (
            f"finished: test accuracy {_fmt(last.get('test_accuracy'))}, "
            f"test loss {_fmt(last.get('test_loss'))}, "
            f"{_fmt(last.get('examples_per_second'), '.0f')} examples/s"
        )
    return done


def make_callback(
    writer: ProgressWriter,
    steps_per_epoch: int,
    examples_per_step: int,
    interval: float,
    batch_events: bool = True,
) -> Any:
    """A tf_keras callback writing ``batch`` and ``epoch`` events to ``writer``.

    Args:
        writer: where events go (the chief's real output folder).
        steps_per_epoch: steps in one epoch.
        examples_per_step: training examples one step consumes over the whole
            cluster (the global batch), for examples/s.
        interval: least seconds between two ``batch`` events.
        batch_events: write ``batch`` events; tf_keras refuses batch-level
            callbacks under ParameterServerStrategy, so those runs report
            per epoch only.
    """
    import tf_keras as keras

    class ProgressCallback(keras.callbacks.Callback):
        def __init__(self) -> None:
            super().__init__()
            self.epoch = 0
            self.epoch_start = 0.0
            self.last_batch = 0.0
            self.epoch_seconds: list[float] = []

        def on_epoch_begin(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            self.epoch = epoch + 1
            self.epoch_start = self.last_batch = time.monotonic()

        def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
            seconds = time.monotonic() - self.epoch_start
            self.epoch_seconds.append(seconds)
            writer.write(
                "epoch",
                epoch=epoch + 1,
                seconds=round(seconds, 3),
                examples_per_second=round(steps_per_epoch * examples_per_step / seconds, 1),
                **_floats(logs),
            )

    class BatchProgressCallback(ProgressCallback):
        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            now = time.monotonic()
            if now - self.last_batch < interval:
                return
            self.last_batch = now
            writer.write("batch", epoch=self.epoch, step=batch + 1, **_floats(logs))

    return BatchProgressCallback() if batch_events else ProgressCallback()


def _floats(logs: dict[str, Any] | None) -> dict[str, float]:
    out = {}
    for key, value in (logs or {}).items():
        try:
            out[key] = float(value.fetch() if hasattr(value, "fetch") else value)
        except (TypeError, ValueError):
            continue
    return out
