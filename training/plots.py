"""PNG plots of a finished run, next to its summary in ``runs/<run id>/``.

- ``loss_accuracy.png``: training loss and accuracy per epoch (the chief's
  ``progress.jsonl``), with the final test accuracy as a line.
- ``examples_per_second.png``: each worker's examples/s per epoch against
  wall time since the run started (``tasks/<task>.jsonl``); restarts show as
  gaps and a marker. Under parameter_server only the chief runs ``fit``, so
  the one line is the whole cluster's rate as the chief counts it.
- ``confusion_matrix.png``: the final test split's confusion matrix (the
  chief's ``metrics.json``): rows the true class, columns the predicted one,
  each cell's count, shaded by its share of the row.

Uses matplotlib's non-interactive Agg backend: no display needed.
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import Any

from training.progress import PROGRESS_FILE, newest_epochs, read_events
from training.tasklog import TASKS_DIR

LOSS_PLOT = "loss_accuracy.png"
RATE_PLOT = "examples_per_second.png"
CONFUSION_PLOT = "confusion_matrix.png"
#: Most classes whose cells carry their counts; more would not be readable.
ANNOTATED_CLASSES = 20


def plot_run(run_dir: Path) -> list[Path]:
    """Write the run's plots into ``run_dir``.

    Returns:
        The PNG files written; none when the run has no finished epoch.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    written: list[Path] = []
    epochs = newest_epochs(read_events(run_dir / PROGRESS_FILE))
    metrics: dict[str, Any] = {}
    with contextlib.suppress(OSError, json.JSONDecodeError):
        metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    title = f"{metrics.get('model', '')} {metrics.get('strategy', '')} {run_dir.name}".strip()
    if epochs:
        xs = [e["epoch"] for e in epochs]
        fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
        losses = _values(epochs, "loss")
        validated = any("val_loss" in e for e in epochs)
        ax_loss.plot(xs, losses, marker="o", label="training")
        if validated:  # a script's fit with validation data
            ax_loss.plot(xs, _values(epochs, "val_loss"), marker="s", label="validation")
            ax_loss.legend(loc="upper right")
        ax_loss.set(xlabel="epoch", ylabel="loss" if validated else "training loss", title="loss")
        if not any(math.isfinite(v) for v in losses):  # else an empty panel
            ax_loss.text(
                0.5,
                0.5,
                "no finite loss: training diverged\n(NaN or infinite; see the run's reason)",
                transform=ax_loss.transAxes,
                ha="center",
                va="center",
                color="tab:red",
            )
        ax_acc.plot(xs, _values(epochs, "accuracy"), marker="o", label="training")
        if any("test_accuracy" in e for e in epochs):  # the chief's test after each epoch
            ax_acc.plot(
                xs, _values(epochs, "test_accuracy"), marker="s", color="tab:orange", label="test"
            )
        if any("val_accuracy" in e for e in epochs):
            ax_acc.plot(xs, _values(epochs, "val_accuracy"), marker="s", label="validation")
        if "test_accuracy" in metrics:
            ax_acc.axhline(
                metrics["test_accuracy"],
                color="tab:green",
                linestyle="--",
                label=f"test at the end {metrics['test_accuracy']:.3f}",
            )
        ax_acc.set(xlabel="epoch", ylabel="accuracy", title="accuracy")
        ax_acc.legend(loc="lower right")
        for ax in (ax_loss, ax_acc):
            ax.grid(alpha=0.3)
            ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True, min_n_ticks=1))
            ax.set_xlim(min(xs) - 0.5, max(xs) + 0.5)  # one epoch: not -0.045..0.045
        fig.suptitle(title)
        fig.tight_layout()
        path = run_dir / LOSS_PLOT
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)

    task_logs = sorted((run_dir / TASKS_DIR).glob("*.jsonl"))
    series = []
    for log_path in task_logs:
        events = read_events(log_path)
        # A script's epochs (training.script) give no examples/s.
        points = [e for e in events if e.get("event") == "epoch" and "examples_per_second" in e]
        if points:
            starts = [e["time"] for e in events if e.get("event") == "start"]
            series.append((log_path.stem, points, starts))
    if series:
        t0 = min(s[2][0] if s[2] else s[1][0]["time"] for s in series)
        fig, ax = plt.subplots(figsize=(8, 4))
        for name, points, starts in series:
            times: list[float] = []
            ys: list[float] = []
            for point in points:
                if times and any(times[-1] + t0 < s < point["time"] for s in starts):
                    times.append(math.nan)  # a restart: break the line
                    ys.append(math.nan)
                times.append(point["time"] - t0)
                ys.append(point["examples_per_second"])
            line = ax.plot(times, ys, marker="o", label=name)
            for restart in starts[1:]:
                ax.axvline(restart - t0, color=line[0].get_color(), linestyle=":", alpha=0.7)
        ps = metrics.get("strategy") == "parameter_server"
        ax.set(
            xlabel="seconds since the first task started",
            # Under parameter_server only the chief runs fit: it counts every worker's steps.
            ylabel="examples/s, all workers" if ps else "examples/s of this worker",
        )
        ax.set_title(
            ("examples/s of the cluster, counted by the chief" if ps else "examples/s per worker")
            + " (dotted: restarts)\n"
            + title,
            fontsize="medium",
        )
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = run_dir / RATE_PLOT
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)

    if metrics.get("confusion_matrix") and metrics.get("classes"):
        written.append(_plot_confusion(plt, run_dir, metrics, title))
    return written


def _plot_confusion(plt: Any, run_dir: Path, metrics: dict[str, Any], title: str) -> Path:
    """Write ``confusion_matrix.png`` from the metrics' ``confusion_matrix`` and ``classes``."""
    import numpy as np

    counts = np.asarray(metrics["confusion_matrix"], dtype=float)
    classes = [str(c) for c in metrics["classes"]]
    rows = counts.sum(axis=1, keepdims=True)
    share = np.divide(counts, rows, out=np.zeros_like(counts), where=rows > 0)
    side = min(12.0, 3.0 + 0.45 * len(classes))
    fig, ax = plt.subplots(figsize=(side + 1.5, side))
    image = ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0)
    fig.colorbar(image, ax=ax, label="share of the true class")
    ticks = range(len(classes))
    ax.set_xticks(ticks, classes, rotation=90 if len(classes) > 10 else 0)
    ax.set_yticks(ticks, classes)
    ax.set(xlabel="predicted class", ylabel="true class")
    if len(classes) <= ANNOTATED_CLASSES:
        for i in ticks:
            for j in ticks:
                ax.text(
                    j,
                    i,
                    f"{counts[i, j]:.0f}",
                    ha="center",
                    va="center",
                    fontsize="small",
                    color="white" if share[i, j] > 0.5 else "black",
                )
    accuracy = metrics.get("test_accuracy")
    heading = "test split" + (f", accuracy {accuracy:.3f}" if accuracy is not None else "")
    ax.set_title(f"{heading}\n{title}", fontsize="medium")
    fig.tight_layout()
    path = run_dir / CONFUSION_PLOT
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _values(epochs: list[dict[str, Any]], key: str) -> list[float]:
    """Each epoch's ``key`` as a float; NaN (a gap in the line) where it is missing or null."""
    out = []
    for event in epochs:
        value = event.get(key)
        out.append(float(value) if isinstance(value, (int, float)) else math.nan)
    return out
