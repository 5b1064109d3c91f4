"""Script mode: what a user's script gets, what is refused, and what the chief leaves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, check_mode_says
from training import datasets
from training.progress import describe, read_events
from training.script import (
    ScriptError,
    ScriptOutput,
    check_script,
    local_modules,
    run_script,
    split_args,
)
from training.tasklog import USAGE_EXIT, summarise, task_log_path

SHOW_ENV = """
import json, os, pathlib, sys
out = pathlib.Path(os.environ["RASPI_TF_OUTPUT_DIR"])
names = ["RASPI_TF_DATA_DIR", "RASPI_TF_RUN_ID", "RASPI_TF_TASK", "RASPI_TF_IS_CHIEF",
         "TF_USE_LEGACY_KERAS"]
(out / "model.keras").write_text("weights")
(out / ".follow-cursor").write_text("0")  # as the follower writes into a local run's folder
(out / "tasks").mkdir(exist_ok=True)
(out / "tasks" / "worker-1.jsonl").write_text("")  # as another task of a local run starts
env = {n: os.environ[n] for n in names} | {"args": sys.argv[1:]}
(out / "env.json").write_text(json.dumps(env))
print("Epoch 1/1")
print("I0000 00:00:1796548656.128988   14624 cpu_feature_guard.cc:211] TensorFlow's own log")
print("31/31 - 1s - loss: 0.5000 - accuracy: 0.8500")
sys.exit(int(os.environ.get("EXIT", "0")))
"""


def _script(tmp_path: Path, text: str, name: str = "train.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("import keras\n", "line 1: imports Keras 3 (keras)"),
        ("import os\nfrom keras.layers import Dense\n", "line 2: imports Keras 3 (keras.layers)"),
        ("def f(:\n", "line 1: "),
        (
            "import os\nimport myhelper\n",
            "line 2: imports myhelper, which is neither beside the script",
        ),
    ],
)
def test_a_script_that_cannot_train_is_refused_naming_its_line(tmp_path, text, expected):
    path = _script(tmp_path, text)
    with pytest.raises(ScriptError, match="fix:") as e:
        check_script(path)
    assert f"{path} {expected}" in str(e.value)


def test_an_optional_import_and_the_modules_beside_the_script_are_taken(tmp_path):
    (tmp_path / "myhelper.py").write_text("import numpy\n")
    (tmp_path / "pkg").mkdir()
    text = "import myhelper, pkg.io, tensorflow\n"
    text += "try:\n    import picamera2\nexcept ImportError:\n    picamera2 = None\n"
    check_script(_script(tmp_path, text))


def test_a_missing_script_is_refused(tmp_path):
    with pytest.raises(ScriptError, match=r"nope\.py is not a file; fix: give -e script="):
        check_script(tmp_path / "nope.py")


@pytest.mark.parametrize(
    "text",
    [
        "import tf_keras as keras\n",
        "from tensorflow import keras\n",
        "import tensorflow as tf\nmodel = tf.keras.Sequential()\n",
        "from .keras import x\n",
    ],
)
def test_tf_keras_in_any_spelling_is_taken(tmp_path, text):
    check_script(_script(tmp_path, text))


def test_the_chief_runs_the_script_with_its_folders_and_keeps_what_it_wrote(tmp_path, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    out, data = tmp_path / "run", tmp_path / "datasets" / "mnist_5k-abc"
    code = run_script(
        _script(tmp_path, SHOW_ENV), ["--epochs", "2"], data_dir=data, output_dir=out, run_id="r1"
    )
    assert code == 0
    env = json.loads((out / "env.json").read_text())
    assert env == {
        "RASPI_TF_DATA_DIR": str(data),
        "RASPI_TF_RUN_ID": "r1",
        "RASPI_TF_TASK": "local",
        "RASPI_TF_IS_CHIEF": "1",
        "TF_USE_LEGACY_KERAS": "1",
        "args": ["--epochs", "2"],
    }
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["script"] == "train.py" and metrics["exit_code"] == 0
    # Not .follow-cursor, nor the task logs the other tasks of a local run write.
    assert metrics["outputs"] == ["env.json", "model.keras"]
    events = read_events(out / "progress.jsonl")
    # Keras' epoch header and the epoch's line are one epoch; TensorFlow's own log lines
    # stay in the log.
    assert [e["event"] for e in events] == ["start", "epoch", "end"]
    assert describe(events[:2]) == "epoch 1/1: loss 0.5000, accuracy 0.8500"
    assert describe(events).startswith("finished: train.py exited 0 after ")
    # status.yml reads the task's own log.
    assert summarise(task_log_path(out, "local"))["loss"] == 0.5


def test_another_task_writes_to_a_folder_removed_at_its_end_and_gives_the_exit_code(
    tmp_path, monkeypatch
):
    tf_config = {
        "cluster": {"worker": ["127.0.0.1:2222", "127.0.0.1:2223"]},
        "task": {"type": "worker", "index": 1},
    }
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
    monkeypatch.setenv("EXIT", "3")
    out = tmp_path / "run"
    script = _script(
        tmp_path,
        SHOW_ENV.replace("sys.exit(", 'print("OUT", out)\nsys.exit('),
    )
    code = run_script(script, [], data_dir=tmp_path, output_dir=out, run_id="r1")
    assert code == 3
    # Only the chief writes the run folder; each task keeps its own event log there.
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == [
        "tasks",
        "tasks/worker-1.jsonl",
    ]
    assert summarise(out / "tasks" / "worker-1.jsonl")["epoch"] == 1
    # argparse's usage error: a code no supervisor restarts (our own commands' 2 is restarted).
    monkeypatch.setenv("EXIT", "2")
    assert run_script(script, [], data_dir=tmp_path, output_dir=out, run_id="r1") == USAGE_EXIT


def test_a_stopped_task_stops_its_script(tmp_path):
    script = _script(tmp_path, "import time\nprint('ready', flush=True)\ntime.sleep(60)\n")
    data = tmp_path / "datasets"
    datasets.prepare("mnist_5k", data, datasets.Settings())
    argv = [sys.executable, "-m", "training", "train", "--script", str(script)]
    argv += ["--data-dir", str(data), "--output-dir", str(tmp_path / "run")]
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    task = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert task.stdout is not None and task.stdout.readline().strip() == "ready"
    started = time.monotonic()
    task.send_signal(signal.SIGTERM)
    assert task.wait(timeout=30) == 128 + signal.SIGTERM
    assert time.monotonic() - started < 10
    assert not (tmp_path / "run" / "metrics.json").exists()


def test_the_check_refuses_keras_3_with_exit_status_2(tmp_path):
    script = _script(tmp_path, "import keras\n")
    argv = [sys.executable, "-m", "training", "check", "--no-data", "--script", str(script)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    assert done.returncode == 2
    assert "line 1: imports Keras 3 (keras)" in done.stderr


def test_script_args_split_as_a_shell_would_and_an_open_quote_is_refused():
    assert split_args("--name 'two words' --epochs 4") == ["--name", "two words", "--epochs", "4"]
    with pytest.raises(ScriptError, match="No closing quotation; fix: close each quote"):
        split_args("--name 'two words")


def test_a_script_that_ignores_sigterm_dies_with_its_killed_task(tmp_path):
    # A script blocked inside TensorFlow does not end on SIGTERM; when the launcher then
    # kills the task, the script must not live on in its own session, holding the port.
    pid_file = tmp_path / "pid"
    _script(
        tmp_path,
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
        "time.sleep(120)\n",
    )
    runner = (
        "import sys, pathlib\n"
        "from training.script import run_script\n"
        "p = pathlib.Path(sys.argv[1])\n"
        "run_script(p / 'train.py', [], data_dir=p, output_dir=p / 'run', run_id='r1')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
    task = subprocess.Popen([sys.executable, "-c", runner, str(tmp_path)], cwd=ROOT, env=env)
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the script did not start"
        time.sleep(0.1)
    script_pid = int(pid_file.read_text())
    task.kill()
    task.wait(timeout=10)
    deadline = time.monotonic() + 10
    while Path(f"/proc/{script_pid}").exists() and "zombie" not in _state(script_pid):
        assert time.monotonic() < deadline, "the script outlived its killed task"
        time.sleep(0.1)


def _state(pid: int) -> str:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return "zombie"
    return "zombie" if "\nState:\tZ" in status else "alive"


def test_check_mode_says_the_script_would_run_not_a_model(tmp_path):
    # The script chooses its own model, epochs and batch: check mode names the script.
    text = check_mode_says(tmp_path / "runs", "script=examples/multi_worker_script.py")
    assert (
        "Check mode: every check passed; a run would run the script "
        "examples/multi_worker_script.py on mnist_5k, multi_worker_mirrored over worker-0, "
        "worker-1." in text
    ), text[-2000:]


def test_the_modules_beside_a_script_that_it_imports_go_with_it(tmp_path):
    (tmp_path / "mydata.py").write_text("import numpy\nfrom shapes import SHAPE\n")
    (tmp_path / "shapes.py").write_text("SHAPE = (28, 28)\n")
    (tmp_path / "utils" / "sub").mkdir(parents=True)
    for name in ("__init__.py", "io.py", "sub/__init__.py"):
        (tmp_path / "utils" / name).write_text("from . import io\n")
    (tmp_path / "utils" / "__pycache__").mkdir()
    (tmp_path / "utils" / "__pycache__" / "io.cpython-311.py").write_text("")
    (tmp_path / "unused.py").write_text("")
    (tmp_path / "notes").mkdir()  # a folder of that name, but no package
    script = _script(tmp_path, "import os, mydata\nfrom utils.io import x\nimport notes\n")
    assert local_modules(script) == [
        "mydata.py",
        "shapes.py",  # imported by mydata.py
        "utils/__init__.py",
        "utils/io.py",
        "utils/sub/__init__.py",
    ]
    # What goes along is checked as the script is, naming the module's line.
    (tmp_path / "shapes.py").write_text("import keras\n")
    with pytest.raises(ScriptError, match=r"shapes.py line 1: imports Keras 3 \(keras\)"):
        check_script(script)
    (tmp_path / "shapes.py").write_text("def f(:\n")
    with pytest.raises(ScriptError, match=r"shapes.py line 1: invalid syntax"):
        check_script(script)
    alone = tmp_path / "alone"
    alone.mkdir()
    assert local_modules(_script(alone, "import tensorflow, mydata\n")) == []


KERAS_FIT = """
import warnings
import numpy as np
import tensorflow as tf

rng = np.random.default_rng(0)
x, y = rng.random((96, 3)), rng.integers(0, 2, 96)
model = tf.keras.Sequential([tf.keras.Input((3,)), tf.keras.layers.Dense(2, "softmax")])
model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])


class Note(tf.keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch == 1 and batch == 2:  # within the bar's redraws
            warnings.warn("an old argument")  # two lines on stderr
            print("checkpoint written")


model.fit(x, y, epochs=2, batch_size=16, validation_split=0.25, verbose=VERBOSE, callbacks=[Note()])
"""


@pytest.mark.parametrize("verbose", [1, 2])
def test_keras_epochs_become_epochs_of_the_run_and_warnings_stay_in_the_log(
    tmp_path, monkeypatch, verbose
):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    out = tmp_path / "run"
    script = _script(tmp_path, KERAS_FIT.replace("VERBOSE", str(verbose)))
    assert run_script(script, [], data_dir=tmp_path, output_dir=out, run_id="r1") == 0
    events = read_events(out / "progress.jsonl")
    shown = [describe(events[: i + 1]) for i in range(1, len(events) - 1)]
    assert len(shown) == 4, shown
    assert shown[0].startswith("epoch 1/2: loss ")
    # A line between the header and the epoch's end: the header shows first.
    assert shown[1:3] == ["train.py: Epoch 2/2", "train.py: checkpoint written"]
    assert shown[3].startswith("epoch 2/2: loss ")
    assert (
        ", accuracy 0." in shown[3] and ", val_loss " in shown[3] and ", val_accuracy " in shown[3]
    )
    assert [e["epoch"] for e in read_events(task_log_path(out, "local")) if "loss" in e] == [1, 2]
    assert "UserWarning: an old argument" not in json.dumps(events)


def test_the_last_redraw_of_an_epoch_is_not_its_end():
    # fit(verbose=1, validation_split=0.2) under MultiWorkerMirroredStrategy: the bar's
    # last redraw comes before validation, with Keras' running sums of the replicas.
    output = ScriptOutput()
    lines = [
        "Epoch 4/6\n",
        "100/100 [==============================] - ETA: 0s - loss: 0.3500 - accuracy: 1.9019\n",
        "100/100 [==============================] - 4s 43ms/step - loss: 0.1750 - "
        "accuracy: 0.9509 - val_loss: 0.2223 - val_accuracy: 0.9375\n",
    ]
    events = [event for line in lines for event in output.events(line)]
    assert events == [
        (
            "epoch",
            {
                "epoch": 4,
                "epochs": 6,
                "loss": 0.175,
                "accuracy": 0.9509,
                "val_loss": 0.2223,
                "val_accuracy": 0.9375,
            },
        )
    ]


def test_an_epoch_header_with_no_keras_line_after_it_shows_as_it_was():
    output = ScriptOutput()
    lines = ["Epoch 1/3\n", "my loss 0.3\n", "Epoch 2/3\n", "Epoch 3/3\n"]
    events = [event for line in lines for event in output.events(line)]
    assert events == [
        ("log", {"line": "Epoch 1/3"}),
        ("log", {"line": "my loss 0.3"}),
        ("log", {"line": "Epoch 2/3"}),
    ]
