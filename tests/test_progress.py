"""Progress lines a user reads while a run goes."""

from __future__ import annotations

from pathlib import Path

from training.progress import ProgressWriter, describe, read_events


def test_progress_lines(tmp_path: Path) -> None:
    w = ProgressWriter(tmp_path / "progress.jsonl")
    w.write(
        "start",
        epochs=8,
        steps_per_epoch=31,
        model="mnist_cnn",
        strategy="mwms",
        tasks=["w0", "w1"],
    )
    w.write("epoch", epoch=1, loss=1.2, accuracy=0.61, seconds=3.0, examples_per_second=1322.4)
    w.write("batch", epoch=2, step=17, loss=0.4567, accuracy=0.88)
    line = describe(read_events(tmp_path / "progress.jsonl"))
    assert line == (
        "epoch 2/8 step 17/31 · loss 0.4567 · accuracy 0.8800 | epoch 1/8: loss 1.2000, "
        "accuracy 0.6100, 1322 examples/s"
    )
    w.write(
        "end", test_loss=0.1, test_accuracy=0.967, train_seconds=30.0, examples_per_second=900.0
    )
    assert describe(read_events(tmp_path / "progress.jsonl")).startswith(
        "finished: test accuracy 0.9670"
    )


def test_half_written_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "progress.jsonl"
    path.write_text('{"event": "start", "epochs": 2}\n{"event": "ep')
    assert [e["event"] for e in read_events(path)] == ["start"]


def test_steady_rate_skips_the_first_epoch() -> None:
    from training.train import steady_rate

    assert steady_rate([10.0, 2.0, 2.0], 1000) == 500.0
    assert steady_rate([4.0], 1000) == 250.0
    assert steady_rate([], 1000) == 0.0


def test_the_startup_watchdog_hears_of_the_first_step_whatever_its_number(
    tmp_path: Path,
) -> None:
    """With steps_per_execution 8 tf_keras reports batch 7 first: the cluster formed then too.

    Otherwise the task's startup watchdog ends a healthy run after
    training_run_startup_timeout.
    """
    from training.progress import make_callback

    told: list[int] = []
    cb = make_callback(
        ProgressWriter(tmp_path / "progress.jsonl"),
        steps_per_epoch=31,
        examples_per_step=128,
        interval=0.0,
        on_formed=lambda: told.append(1),
    )
    cb.on_epoch_begin(0)
    for batch in (7, 15, 23, 30):
        cb.on_train_batch_end(batch, {"loss": 0.5})
    cb.on_epoch_end(0, {"loss": 0.5})
    cb.on_epoch_begin(1)
    cb.on_train_batch_end(7, {"loss": 0.4})
    assert told == [1]
