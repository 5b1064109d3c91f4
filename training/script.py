"""Script mode: a user's own TensorFlow script as every task of a run.

``python -m training train --script train.py`` is what each task's unit (or
the local launcher) starts when ``train.yml`` gets ``-e script=/path/to/train.py``:
the task's checks (TF_CONFIG, the staged dataset's shards) are the same as
for raspi-tf's own training, then :func:`run_script` runs the script in a
child Python with the environment TensorFlow's multi-worker tutorial
expects, plus where the data and the outputs are:

- ``TF_CONFIG``: this task's, rendered from the inventory as for any run;
- ``TF_USE_LEGACY_KERAS=1``: ``tf.keras`` is tf-keras, which
  ``tf.distribute`` strategies train with;
- ``RASPI_TF_DATA_DIR``: the staged dataset's folder on this node,
  ``dataset.json`` (shapes, classes, ``record_bytes``, shard files) and the
  shards this task reads (see ``examples/multi_worker_script.py``);
- ``RASPI_TF_OUTPUT_DIR``: where to write the model, logs and anything else:
  the run folder on the chief, which ``train.yml`` brings back; a temporary
  folder on every other task, removed when it ends (each worker must save
  too, but only the chief's copy is kept, as in TensorFlow's tutorial);
- ``RASPI_TF_RUN_ID``, ``RASPI_TF_TASK`` (``worker-1``), ``RASPI_TF_IS_CHIEF``
  (``1`` or ``0``).

The run takes the script and the modules it imports from its own folder
(:func:`local_modules`); each task runs that copy.

The script's output goes to the task's log line by line. Keras' epochs in it
become ``epoch`` events (:class:`ScriptOutput`) in the task's event log
(:mod:`training.tasklog`), which ``status.yml`` reads, and on the chief in the
run's progress, with each other line a ``log`` event: ``train.yml`` shows
them while the run goes. The task exits with the script's exit code, so systemd (and the
local launcher) restart a failing script up to the run's restart limit. On
the chief a script that exits 0 leaves ``metrics.json``: the script, its
exit code, wall time and the files it wrote.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from training.cluster import parse_tf_config
from training.progress import PROGRESS_FILE, ProgressWriter
from training.tasklog import TASKS_DIR, USAGE_EXIT, open_task_log

#: What ``RASPI_TF_*`` variables a script gets (see the module docstring).
ENV_DATA_DIR = "RASPI_TF_DATA_DIR"
ENV_OUTPUT_DIR = "RASPI_TF_OUTPUT_DIR"
ENV_RUN_ID = "RASPI_TF_RUN_ID"
ENV_TASK = "RASPI_TF_TASK"
ENV_IS_CHIEF = "RASPI_TF_IS_CHIEF"
#: The script's own arguments, one shell-quoted string (``-e script_args=...``).
ENV_SCRIPT_ARGS = "RASPI_TF_SCRIPT_ARGS"
METRICS_FILE = "metrics.json"
#: Longest script line kept in a progress event, in characters.
LINE_CHARS = 300
#: Lines of TensorFlow's own logging (C++ glog and absl, Python's tensorflow and absl
#: loggers) and Python's warnings, which go to the task's log but are not the
#: script's progress.
TF_LOG_LINE = re.compile(
    r"^([IWEF]\d{4} \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] "
    r"|(WARNING|INFO|ERROR):(tensorflow|absl)|WARNING: All log messages before absl"
    r"|To enable the following instructions|oneDNN custom operations|\S+:\d+: \w*Warning: )"
)
#: prctl's option that names the signal a process gets when its parent dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1
#: Keras' line before each epoch's progress (fit with verbose 1 or 2).
EPOCH_HEADER = re.compile(r"^Epoch (\d+)/(\d+)$")
#: Keras' progress-bar line: ``16/16 - 1s - loss: 0.70 - accuracy: 0.50`` (verbose 2, at
#: the epoch's end), ``3/16 [==>...] - ETA: 1s - loss: ...`` (verbose 1, each redraw, which
#: a pipe gets as a line of its own; the last one, at the epoch's end, has no ETA).
KERAS_STEPS = re.compile(r"^\d+/(?:\d+|Unknown)\b")
#: One metric of that line, ``name: value``; not ``ETA: 6s`` or ``571ms/epoch``.
KERAS_METRIC = re.compile(r"\b([A-Za-z_]\w*): (-?(?:\d+(?:\.\d*)?(?:e[-+]?\d+)?|nan|inf))(?=\s|$)")
#: A line that goes on TensorFlow's log line before it: Python's warnings print the
#: source line indented, TensorFlow's deprecations add ``Instructions for updating:``
#: and the instruction on the next line.
LOG_CONTINUATION = re.compile(r"^(\s|Instructions for updating:)")
#: argparse's exit status for arguments a script does not take (``parser.error``).
SCRIPT_USAGE_EXIT = 2


class ScriptError(Exception):
    """A script that cannot run; the message names the file, the line and the fix."""


def split_args(text: str) -> list[str]:
    """A script's arguments: ``text`` split as a POSIX shell would (``shlex.split``).

    Raises:
        ScriptError: unbalanced quotes, naming the text and the fix.
    """
    try:
        return shlex.split(text)
    except ValueError as e:
        raise ScriptError(
            f"script_args={text!r}: {e}; fix: close each quote; a value with spaces "
            "goes inside one pair: --name 'two words'"
        ) from None


def check_script(path: Path) -> None:
    """Refuse a script, or a module it takes along, that does not parse or imports Keras 3.

    Or that imports a module neither beside the script nor installed: it
    would fail at each start of each task, to the restart limit.

    ``import keras`` and ``from keras ...`` give Keras 3, whose models do not
    train under tf.distribute's multi-worker strategies; tf-keras (``import
    tf_keras as keras``, or ``tf.keras`` with ``TF_USE_LEGACY_KERAS=1``,
    which every task sets) does. The modules are those that go with the
    script (:func:`local_modules`).

    Raises:
        ScriptError: a script that is not a file, or naming the file, the
            line and the fix.
    """
    if not path.is_file():
        raise ScriptError(
            f"{path} is not a file; fix: give -e script=<a .py file on the control node>"
        )
    _check_source(path, path.parent)
    for module in local_modules(path):
        _check_source(path.parent / module, path.parent)


def _check_source(path: Path, root: Path) -> None:
    """Refuse a Python file that does not parse, imports Keras 3 or a module not there.

    A module is there beside the script (in ``root``, its folder) or
    installed (:func:`importlib.util.find_spec`); an import inside ``try:``
    is left to the file, as an optional one (:func:`check_script`).
    """
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except SyntaxError as e:
        raise ScriptError(
            f"{path} line {e.lineno}: {e.msg}; fix: run it with python3 once to see it fail"
        ) from None
    except UnicodeDecodeError as e:
        raise ScriptError(f"{path} is not UTF-8 text ({e.reason}); fix: save it as UTF-8") from None
    for line, name, _ in _absolute_imports(tree):
        if name == "keras" or name.startswith("keras."):
            raise ScriptError(
                f"{path} line {line}: imports Keras 3 ({name}), which tf.distribute's "
                "multi-worker strategies do not train; fix: import tf_keras as keras, or use "
                "tf.keras (tasks set TF_USE_LEGACY_KERAS=1)"
            )
    for line, name, optional in _absolute_imports(tree):
        top = name.split(".")[0]
        beside = (root / f"{top}.py").is_file() or (root / top).is_dir()
        if not optional and not beside and importlib.util.find_spec(top) is None:
            raise ScriptError(
                f"{path} line {line}: imports {top}, which is neither beside the "
                f"script ({root / top}.py or the package folder {root / top}/) nor installed; "
                f"fix: put {top}.py beside it, or correct the import (the nodes have the "
                "packages of the project's requirements.txt)"
            )


def _absolute_imports(tree: ast.AST) -> Iterator[tuple[int, str, bool]]:
    """(line, module, optional) of each absolute import, ``a.b`` of ``import a.b``.

    ``from a.b import c`` gives ``a.b`` too; an import inside a ``try:`` body
    is optional (``except ImportError``: a module the file may do without).
    """
    optional = {
        id(node)
        for attempt in ast.walk(tree)
        if isinstance(attempt, ast.Try)
        for statement in attempt.body
        for node in ast.walk(statement)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, id(node) in optional
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module, id(node) in optional


def _imported(path: Path) -> set[str]:
    """The top-level names of the absolute imports in ``path`` (``a`` of ``import a.b``)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError):
        return set()  # a module that does not parse fails as it would on the control node
    return {name.split(".")[0] for _, name, _ in _absolute_imports(tree)}


def local_modules(path: Path) -> list[str]:
    """The modules beside script ``path`` that it imports, as paths relative to its folder.

    A script runs with its folder first on ``sys.path``, so ``import mydata``
    finds ``mydata.py`` beside it, and ``from utils.io import x`` the package
    folder ``utils/``; a model file's folder is on the path as it is imported
    (:mod:`training.models`). Each task runs the run's copy of the script or
    model file, so these go with it: a module file, or every ``.py`` file of a package folder (one
    with ``__init__.py``), and what they import from the same folder in turn.
    Only import statements are read: a module loaded by name as the script
    runs (``importlib.import_module("plugin")``) does not go. Data files do
    not either: a script reads the staged dataset (``RASPI_TF_DATA_DIR``).

    Returns:
        Sorted POSIX paths, e.g. ``["mydata.py", "utils/__init__.py",
        "utils/io.py"]``; [] for a script that imports nothing beside it.
    """
    root = path.parent
    found: set[str] = set()
    todo = [path]
    while todo:
        for name in sorted(_imported(todo.pop())):
            module, package = root / f"{name}.py", root / name
            if module.is_file():
                files = [module]
            elif (package / "__init__.py").is_file():
                files = sorted(f for f in package.rglob("*.py") if "__pycache__" not in f.parts)
            else:
                continue  # installed, or not there: the task's import says which
            for file in files:
                relative = file.relative_to(root).as_posix()
                if relative not in found and file != path:
                    found.add(relative)
                    todo.append(file)
    return sorted(found)


def script_env(
    base: dict[str, str],
    *,
    data_dir: Path,
    output_dir: Path,
    run_id: str,
    task: str,
    is_chief: bool,
) -> dict[str, str]:
    """The environment a script runs with: ``base`` plus the ``RASPI_TF_*`` variables."""
    return {
        **base,
        "TF_USE_LEGACY_KERAS": "1",
        "PYTHONUNBUFFERED": "1",
        ENV_DATA_DIR: str(data_dir),
        ENV_OUTPUT_DIR: str(output_dir),
        ENV_RUN_ID: run_id,
        ENV_TASK: task,
        ENV_IS_CHIEF: "1" if is_chief else "0",
    }


def run_script(
    script: Path,
    args: list[str],
    *,
    data_dir: Path,
    output_dir: Path,
    run_id: str,
) -> int:
    """Run ``script`` as this task (TF_CONFIG from the environment) to its end.

    Args:
        script: the script's path on this node.
        args: the script's own arguments.
        data_dir: the staged dataset's folder on this node (``<data dir>/<id>``).
        output_dir: the run folder; only the chief writes into it.
        run_id: the run's name.

    Returns:
        The script's exit code (128 + the signal's number when a signal ended
        it), but :data:`~training.tasklog.USAGE_EXIT` for its 2, a usage error.

    Raises:
        ScriptError: see :func:`check_script`.
    """
    check_script(script)
    tf_config = parse_tf_config(os.environ.get("TF_CONFIG"))
    is_chief = tf_config is None or tf_config.is_chief
    task = tf_config.task.name if tf_config else "local"
    out = output_dir if is_chief else Path(tempfile.mkdtemp(prefix=f"raspi-tf-{task}-"))
    out.mkdir(parents=True, exist_ok=True)
    writer = ProgressWriter(out / PROGRESS_FILE) if is_chief else None
    task_log, _ = open_task_log(output_dir, task)
    if writer:
        tasks = [t.name for t in tf_config.tasks] if tf_config else ["local"]
        writer.write("start", script=script.name, model=script.name, strategy="script", tasks=tasks)
    before = _files(out) if is_chief else set()
    started = time.time()
    env = script_env(
        dict(os.environ),
        data_dir=data_dir,
        output_dir=out,
        run_id=run_id,
        task=task,
        is_chief=is_chief,
    )
    child = subprocess.Popen(
        [sys.executable, "-u", str(script), *args],
        env=env,
        cwd=out,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        start_new_session=True,
        preexec_fn=_die_with_parent,
    )

    def forward(signum: int, _frame: Any) -> None:
        # systemd and the launcher stop a task with SIGTERM: the script gets it too.
        if child.poll() is None:
            child.send_signal(signum)

    previous = signal.signal(signal.SIGTERM, forward)
    try:
        assert child.stdout is not None
        output = ScriptOutput()
        for line in child.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            for event, fields in output.events(line):
                if event == "epoch":
                    task_log.write(event, **fields)
                if writer:
                    writer.write(event, **fields)
        code = child.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if not is_chief:
            shutil.rmtree(out, ignore_errors=True)
    code = 128 - code if code < 0 else code
    if code == SCRIPT_USAGE_EXIT:
        code = USAGE_EXIT  # not restarted, where a 2 of our own commands is
    if writer and code == 0:
        metrics = {
            "run_id": run_id,
            "script": script.name,
            "strategy": "script",
            "tasks": [t.name for t in tf_config.tasks] if tf_config else ["local"],
            "exit_code": code,
            "wall_seconds": round(time.time() - started, 3),
            "outputs": sorted(_files(out) - before - {METRICS_FILE, PROGRESS_FILE}),
        }
        tmp = out / f".{METRICS_FILE}.tmp"
        tmp.write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
        tmp.replace(out / METRICS_FILE)
        writer.write("end", script=script.name, wall_seconds=metrics["wall_seconds"])
    if code == 0:
        task_log.write("end")
    return code


class ScriptOutput:
    """Turns a script's output, line by line, into the chief's progress events.

    - Keras' ``Epoch 2/4`` and the progress-bar line that ends the epoch
      (``fit`` with verbose 1 or 2) become one ``epoch`` event: ``epoch``,
      ``epochs`` and every metric the line gives (``loss``, ``accuracy``,
      ``val_loss``...), which ``train.yml``, ``status.yml``, the summary and
      the plots read as they read raspi-tf's own epochs.
    - TensorFlow's own logging and Python's warnings (:data:`TF_LOG_LINE`),
      with their continuation lines, are left out.
    - Any other line is a ``log`` event, ``line`` cut to :data:`LINE_CHARS`.
    """

    def __init__(self) -> None:
        self.header: re.Match[str] | None = None
        self.header_shown = False
        self.in_log = False
        self.instruction = False

    def events(self, line: str) -> list[tuple[str, dict[str, Any]]]:
        """The events of one line of output; of a line Keras redrew, its last redraw."""
        raw = line.rstrip("\r\n").rsplit("\r", 1)[-1].replace("\b", "")
        text = raw.strip()
        if TF_LOG_LINE.match(text):
            self.in_log, self.instruction = True, False
            return []
        if self.in_log and (self.instruction or LOG_CONTINUATION.match(raw)):
            self.instruction = raw.startswith("Instructions for updating:")
            return []
        self.in_log = self.instruction = False
        if not text:
            return []
        header = EPOCH_HEADER.match(text)
        if header:
            events = self._unshown_header()
            self.header, self.header_shown = header, False
            return events
        steps = KERAS_STEPS.match(text)
        if steps and "ETA: " in text:
            # A redraw of the bar within the epoch (its last step too, before
            # validation: "100/100 ... ETA: 0s", with the running sums of
            # MultiWorkerMirroredStrategy's replicas, not the epoch's metrics).
            # A warning printed meanwhile ends up at its end, and its
            # continuation on the next lines.
            self.in_log = True
            return []
        if self.header and steps:
            metrics = {
                name: float(value)
                for name, value in KERAS_METRIC.findall(text)
                if name not in ("epoch", "epochs")
            }
            if "loss" in metrics:
                epoch, epochs = (int(n) for n in self.header.groups())
                self.header = None
                return [("epoch", {"epoch": epoch, "epochs": epochs, **metrics})]
        return [*self._unshown_header(), ("log", {"line": text[:LINE_CHARS]})]

    def _unshown_header(self) -> list[tuple[str, dict[str, Any]]]:
        """The pending ``Epoch n/m`` as a ``log`` event, once, when another line comes first.

        It stays pending: the line that ends its epoch still becomes its ``epoch`` event.
        """
        if self.header is None or self.header_shown:
            return []
        self.header_shown = True
        return [("log", {"line": self.header.group(0)})]


def _die_with_parent() -> None:
    """In the script's process: get SIGKILL when the task that started it dies.

    The script runs in a session of its own, so a signal to the task's
    process group misses it, and a script blocked inside TensorFlow (a
    cluster that never forms) does not end on the SIGTERM the task forwards.
    When the launcher then kills the task, the kernel kills the script too
    (``prctl(PR_SET_PDEATHSIG)``, Linux), instead of leaving it holding the
    task's port.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _files(folder: Path) -> set[str]:
    """Every file under ``folder``, relative, with ``/`` separators; raspi-tf's own left out.

    Those are hidden files, such as the follower's ``.follow-cursor``, and the
    tasks' event logs in ``tasks/``, which the other tasks of a local run
    start writing as the chief starts.
    """
    relative = (p.relative_to(folder) for p in folder.rglob("*") if p.is_file())
    return {
        r.as_posix()
        for r in relative
        if r.parts[0] != TASKS_DIR and not any(part.startswith(".") for part in r.parts)
    }
