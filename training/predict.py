"""Classify images, camera frames or CSV rows with a run's TFLite model, on a Pi or anywhere.

Needs only the run's ``.tflite`` file and ``preprocessing.json``, OpenCV,
NumPy and the LiteRT interpreter (``ai-edge-litert``): no TensorFlow. An
image goes through what the run's dataset did to its training images
(:mod:`training.datasets.image_folder`: OpenCV decode, BGR to RGB or
grayscale, ``cv2.resize`` with ``INTER_AREA``, times ``scale``); a CSV row is
standardised with the training split's mean and standard deviation. Each
input's top classes are printed with their softmax probability and the
interpreter's time for it.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from training.datasets._base import BadExample, input_kind
from training.datasets.csv_file import SNIFF_LINES, decimal_point, sniff_delimiter
from training.datasets.image_folder import IMAGE_SUFFIXES, Item, load_image
from training.progress import plural
from training.tflite import VARIANT_FILES, ExportError, Runner

#: Unreadable inputs a run of predict names on stderr (its last line counts them all),
#: as a training dataset's refusal lists them.
LISTED = 5
PREPROCESSING_FILE = "preprocessing.json"


class PredictError(Exception):
    """Input that cannot be classified; the message names it and the fix."""


@dataclass(frozen=True)
class Prediction:
    """One input's result.

    Attributes:
        name: the file, ``frame <n>`` or ``<file>:<row>``.
        top: (class name, probability) pairs, most probable first; empty
            for an input that could not be read.
        milliseconds: the interpreter's time for this input alone, ms.
        error: why the input could not be read (an image that does not
            decode), naming it and the fix; empty otherwise.
    """

    name: str
    top: list[tuple[str, float]]
    milliseconds: float
    error: str = ""

    def line(self) -> str:
        """``<name>: <class> <probability>, ... (<ms> ms)``."""
        classes = ", ".join(f"{c} {p:.3f}" for c, p in self.top)
        return f"{self.name}: {classes} ({self.milliseconds:.1f} ms)"


@dataclass(frozen=True)
class Model:
    """A run's TFLite model with the preprocessing its inputs need."""

    runner: Runner
    preprocessing: dict[str, Any]
    path: Path

    @property
    def classes(self) -> list[str]:
        """Class names: logit ``i`` is ``classes[i]``."""
        return [str(c) for c in self.preprocessing["classes"]]

    @classmethod
    def load(cls, model_dir: Path, variant: str = "float32", threads: int | None = None) -> Model:
        """The model of ``model_dir``: a run folder, or any folder holding its files.

        A ``.tflite`` file beside its ``preprocessing.json`` is taken too; its
        name (``model-int8.tflite``) then gives the variant.

        Raises:
            PredictError: no such folder, the folder lacks ``preprocessing.json``
                or the variant's file, or the model's input shape is not the one
                the preprocessing makes; each names the path and the fix.
        """
        if model_dir.suffix == ".tflite" and model_dir.is_file():
            by_file = {f: v for v, f in VARIANT_FILES.items()}
            path, model_dir = model_dir, model_dir.parent
            variant = by_file.get(path.name, variant)
        else:
            path = model_dir / variant_file(variant)
        if not model_dir.is_dir():
            raise PredictError(
                f"{model_dir} is not a folder; fix: give the folder of a run "
                "(runs/<id>) or one holding its model*.tflite and preprocessing.json"
            )
        preprocessing = read_preprocessing(model_dir)
        if not path.is_file():
            fix = (
                f"export it: python -m training export --run-dir <the run> --data-dir <its "
                f"datasets> --variants {variant} (train.yml: -e export_int8=true)"
                if variant != "float32"
                else "give a run that ended with its model"
            )
            raise PredictError(f"{path} is missing; fix: {fix}")
        runner = Runner.load(path, threads)
        shape = tuple(int(d) for d in preprocessing["input_shape"])
        if runner.input_shape != shape:
            raise PredictError(
                f"{path} takes inputs of shape {runner.input_shape} but "
                f"{model_dir / PREPROCESSING_FILE} makes {shape}; "
                "fix: use the model and preprocessing.json of the same run"
            )
        return cls(runner, preprocessing, path)

    def predict(self, name: str, x: Any, top: int) -> Prediction:
        """The top classes of one preprocessed input, float32 ``input_shape``."""
        import numpy as np

        started = time.perf_counter()
        logits = self.runner.logits(np.asarray(x, np.float32)[np.newaxis])[0]
        ms = (time.perf_counter() - started) * 1000
        p = np.exp(logits - logits.max())
        p /= p.sum()
        best = np.argsort(-p)[:top]
        return Prediction(name, [(self.classes[i], float(p[i])) for i in best], ms)


def read_preprocessing(model_dir: Path) -> dict[str, Any]:
    """The ``preprocessing.json`` of ``model_dir``, a run's folder or a copy of its model's.

    Raises:
        PredictError: the file is not there, naming it and the fix.
    """
    pre = model_dir / PREPROCESSING_FILE
    if not pre.is_file():
        raise PredictError(
            f"{pre} is missing; fix: copy the run's preprocessing.json beside the model"
        )
    return dict(json.loads(pre.read_text(encoding="utf-8")))


def _run_ref(run_dir: Path, runs_dir: Path) -> str:
    """How ``-e run=`` names ``run_dir``: its id in ``runs_dir``, else its folder."""
    real = run_dir.resolve()
    return real.name if real.parent == runs_dir.resolve() else str(real)


def check_top(top: int) -> None:
    """Refuse a count of classes to print below 1 (more than the model has prints them all).

    Raises:
        PredictError: naming ``top`` and the fix.
    """
    if top < 1:
        raise PredictError(
            f"top={top}: the classes printed an input must be 1 or more; fix: -e top=3"
        )


def check_frames(frames: int, camera: int | str | None) -> None:
    """Refuse a count of camera frames without a camera, or below 1 with one.

    ``frames`` counts camera frames only: beside images or a CSV file it
    would be ignored without a word.

    Raises:
        PredictError: naming ``frames`` and the fix.
    """
    if camera is None and frames != 1:
        raise PredictError(
            f"frames={frames} counts camera frames, and no camera is given; fix: drop -e frames, "
            f"or classify a camera's frames with -e camera=0 -e frames={frames}"
        )
    if frames < 1:
        raise PredictError(
            f"frames={frames}: the camera frames to classify must be 1 or more; fix: -e frames=10"
        )


def variant_file(variant: str) -> str:
    """The file name of TFLite ``variant`` (``model-int8.tflite`` for ``int8``).

    Raises:
        PredictError: ``variant`` is not one of :data:`training.tflite.VARIANT_FILES`.
    """
    if variant not in VARIANT_FILES:
        meant = variant.strip().lower().replace("-", "_")
        fix = f"-e variant={meant}" if meant in VARIANT_FILES else "pick one"
        raise PredictError(
            f"variant {variant!r} is not one of {', '.join(VARIANT_FILES)}; fix: {fix}"
        )
    return VARIANT_FILES[variant]


def _check_variant(run_dir: Path, variant: str) -> None:
    """Refuse a variant the run has not exported, naming those it has and the export command."""
    file = variant_file(variant)
    if (run_dir / file).is_file():
        return
    has = [v for v, f in VARIANT_FILES.items() if (run_dir / f).is_file()]
    real = run_dir.resolve()  # runs/latest moves on with the next run
    raise PredictError(
        f"{real} has no {variant} model ({file}), only "
        f"{', '.join(has)}. Fix: -e variant={has[0]}, or export it on the control node: "
        f"python -m training export --run-dir {real} --data-dir .cache/datasets --variants "
        f"{variant} (train.yml exports int8 with -e export_int8=true)"
    )


def image_input(path: Path, preprocessing: dict[str, Any]) -> Any:
    """float32 ``input_shape`` of one image file, as the run's training images were made.

    Raises:
        PredictError: the file does not decode (naming it and why).
    """
    shape = [int(d) for d in preprocessing["input_shape"]]
    mode = preprocessing.get("color_mode", "grayscale" if len(shape) == 2 else "rgb")
    try:
        image, _ = load_image(Item(path, str(path), 0), size=(shape[0], shape[1]), color_mode=mode)
    except BadExample as e:
        raise PredictError(f"{path}: {e}; fix: give images that open in an image viewer") from e
    return frame_input(image, preprocessing, rgb=True)


def frame_input(image: Any, preprocessing: dict[str, Any], rgb: bool = False) -> Any:
    """float32 ``input_shape`` of one decoded image (a camera frame is BGR unless ``rgb``)."""
    import cv2
    import numpy as np

    shape = [int(d) for d in preprocessing["input_shape"]]
    gray = len(shape) == 2 or shape[-1] == 1
    if image.ndim == 3 and image.shape[-1] == 3:
        if gray:
            code = cv2.COLOR_RGB2GRAY if rgb else cv2.COLOR_BGR2GRAY
            image = cv2.cvtColor(image, code)
        elif not rgb:
            image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    if image.shape[:2] != (shape[0], shape[1]):
        image = cv2.resize(image, (shape[1], shape[0]), interpolation=cv2.INTER_AREA)
    x = np.asarray(image, np.float32) * float(preprocessing.get("scale", 1.0))
    return x.reshape(shape)


def image_files(path: Path) -> list[Path]:
    """The image files of ``path``: the file itself, or a folder's, sorted, searched recursively.

    Raises:
        PredictError: the path does not exist or holds no image.
    """
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise PredictError(f"{path} does not exist; fix: give an image file or a folder of them")
    files = sorted(
        p
        for p in path.rglob("*")
        if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES and not p.name.startswith(".")
    )
    if not files:
        raise PredictError(
            f"{path} holds no {', '.join(IMAGE_SUFFIXES)} file; fix: give a folder of images"
        )
    return files


def csv_inputs(path: Path, preprocessing: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(``<file>:<line>``, standardised float32 (features,)) for each data row of a CSV file.

    The header must hold the training CSV's feature columns (any order, a
    label column or others may be there too). The delimiter is found as
    training finds it (:func:`training.datasets.csv_file.sniff_delimiter`:
    ``,``, ``;`` or tab), whatever the training file's was. A row with an
    empty or non-numeric feature cell comes as a :class:`PredictError`
    naming its line and column, in place of its features, so that the rows
    after it go on.

    Raises:
        PredictError: the file does not exist, a feature column is missing
            from its header, or it has no row under the header.
    """
    import numpy as np

    if not path.is_file():
        where = "is a folder" if path.is_dir() else "does not exist"
        raise PredictError(f"{path} {where}; fix: give a CSV file with the model's columns")
    columns = list(preprocessing["feature_columns"])
    mean = np.asarray(preprocessing["mean"], np.float32)
    std = np.asarray(preprocessing["std"], np.float32)
    with path.open(newline="", encoding="utf-8-sig") as f:  # a byte-order mark, as training
        delimiter = sniff_delimiter("".join(itertools.islice(f, SNIFF_LINES)))
        f.seek(0)
        reader = csv.DictReader(f, delimiter=delimiter)
        header = reader.fieldnames or []
        missing = [c for c in columns if c not in header]
        if missing:
            raise PredictError(
                f"{path} has no column {', '.join(missing)} (its header: "
                f"{', '.join(map(repr, header[:8]))}{', ...' if len(header) > 8 else ''}); "
                f"fix: give the columns the model was trained on: {', '.join(columns)}"
            )
        fix = "one cell per column (quote a value that holds the delimiter)"
        line = 1
        for row in reader:
            line = reader.line_num  # a blank line is skipped, as training skips it
            name = f"{path.name}:{line}"
            short = [c for c in columns if row[c] is None]  # DictReader's fill for a short row
            if short:
                cells = f"fewer cells than the header's {len(header)}, none for {', '.join(short)}"
                yield name, PredictError(f"{path} line {line}: {cells}; fix: {fix}")
                continue
            if row.get(None):  # DictReader's key for the cells past the header's last
                # A decimal comma (5,1 for 5.1) shifts every cell after it: refused, as training.
                cells = f"more cells than the header's {len(header)}"
                yield name, PredictError(f"{path} line {line}: {cells}; fix: {fix}")
                continue
            try:
                values = [_number(row[c], f"{path} line {line}, column {c}") for c in columns]
            except PredictError as e:
                yield name, e
                continue
            yield name, (np.asarray(values, np.float32) - mean) / std
        if line == 1:
            raise PredictError(f"{path} has a header and no row; fix: give rows under its header")


def _number(cell: str, where: str) -> float:
    """The finite number in CSV ``cell``; PredictError naming ``where`` otherwise."""
    try:
        v = float(cell)
    except ValueError:
        v = math.nan
    if not math.isfinite(v):
        what = "empty" if not cell.strip() else f"{cell!r} is not a finite number"
        point = decimal_point(cell)
        if point is not None:
            raise PredictError(f"{where}: {what}; fix: write it with a decimal point ({point})")
        raise PredictError(f"{where}: {what}; fix: put a number there")
    return v


def camera_frames(device: int | str, count: int) -> Iterator[tuple[str, Any]]:
    """(``frame <n>``, BGR uint8 image) for ``count`` frames of a V4L2 camera through OpenCV.

    Raises:
        PredictError: the camera does not open or gives no frame.
    """
    import cv2

    capture = cv2.VideoCapture(device)
    try:
        if not capture.isOpened():
            raise PredictError(
                f"camera {device} does not open; fix: check that /dev/video0 exists and "
                "the user is in the video group"
            )
        for n in range(1, count + 1):
            ok, frame = capture.read()
            if not ok:
                raise PredictError(f"camera {device} gave no frame {n}")
            yield f"frame {n}", frame
    finally:
        capture.release()


def predict(
    model: Model,
    *,
    images: Path | None = None,
    csv_file: Path | None = None,
    camera: int | str | None = None,
    frames: int = 1,
    top: int = 3,
) -> Iterator[Prediction]:
    """The predictions of every input given, one at a time, as it goes.

    Raises:
        PredictError: inputs of another kind than the model's (images or
            camera frames for a model of CSV rows, or the other way round),
            refused before any input is read; see also :func:`image_input`,
            :func:`csv_inputs`, :func:`camera_frames`.
    """
    check_input_kind(model, images=images is not None or camera is not None, rows=csv_file)
    top = max(1, min(top, len(model.classes)))
    if images is not None:
        for path in image_files(images):
            try:
                x = image_input(path, model.preprocessing)
            except PredictError as e:
                # One unreadable photo in a folder does not stop the others.
                yield Prediction(str(path), [], 0.0, str(e))
                continue
            yield model.predict(str(path), x, top)
    if csv_file is not None:
        for name, x in csv_inputs(csv_file, model.preprocessing):
            if isinstance(x, PredictError):
                yield Prediction(name, [], 0.0, str(x))  # as an unreadable photo
                continue
            yield model.predict(name, x, top)
    if camera is not None:
        for name, frame in camera_frames(camera, frames):
            yield model.predict(name, frame_input(frame, model.preprocessing), top)


def check_input_kind(model: Model, *, images: bool, rows: Path | None) -> None:
    """Refuse inputs of another kind than the model's, once, naming its folder.

    Raises:
        PredictError: images (``images``) for a model of CSV rows or of an
            ``.npz``'s features that are not pixels, or a CSV file (``rows``)
            for a model of images.
    """
    _check_kind(model.preprocessing, model.path.parent, images=images, rows=rows)


def _takes_rows(preprocessing: dict[str, Any]) -> bool:
    """Whether the model of ``preprocessing`` classifies CSV rows."""
    return input_kind(preprocessing) == "csv"


def _arrays_refusal(preprocessing: dict[str, Any], folder: Path | str) -> tuple[str, str]:
    """Why images are refused for the model of an ``.npz``'s features, and the fix."""
    shape = "x".join(str(d) for d in preprocessing.get("input_shape", []))
    return (
        f"the model of {folder} was trained on an .npz of {preprocessing.get('dtype')} features "
        f"of shape {shape}, not on pixels, so images would not be what it learned",
        "to classify images, save x_train and x_test as uint8 pixels (0-255) of shape "
        "(n, height, width) or (n, height, width, 3) and train again; to classify arrays, run "
        "its model.tflite with LiteRT on float32 arrays of that shape "
        "(docs/extending.md#an-npz-of-your-own)",
    )


def _check_kind(
    preprocessing: dict[str, Any], folder: Path | str, *, images: bool, rows: Path | None
) -> None:
    takes_rows = _takes_rows(preprocessing)
    if images and input_kind(preprocessing) == "arrays":
        why, fix = _arrays_refusal(preprocessing, folder)
        raise PredictError(f"{why}; fix: {fix}")
    if images and takes_rows:
        raise PredictError(
            f"the model of {folder} takes CSV rows, not images; fix: give a .csv, or the model "
            "of a run trained on images (predict.yml: -e run=<its id>)"
        )
    if rows is not None and not takes_rows:
        raise PredictError(
            f"the model of {folder} takes images, not CSV rows ({rows}); fix: give images, or "
            "the model of a run trained on a CSV file (predict.yml: -e run=<its id>)"
        )


def check_inputs(
    preprocessing: dict[str, Any],
    run: str,
    *,
    images: Path | None = None,
    csv_file: Path | None = None,
    camera: int | str | None = None,
    frames: int = 1,
) -> str:
    """What :func:`predict` would classify, without the model: ``predict.yml --check``'s line.

    Images are found, not decoded; a CSV file's rows are read and checked as
    :func:`csv_inputs` reads them; a camera is not opened.

    Args:
        preprocessing: the run's ``preprocessing.json``, as a dict.
        run: the run's name, for the messages.
        images: an image file or a folder of them, as :func:`predict` takes it.
        csv_file: a CSV file of the model's feature columns.
        camera: a camera's index or device path; not opened.
        frames: camera frames that would be classified.

    Returns:
        One line, e.g. ``"would classify 24 images of /home/pi/photos (found,
        not decoded: check mode reads none)"``, or for a CSV file with rows it
        cannot use, ``"would classify 98 rows of /home/pi/readings.csv; 2 more
        cannot be read, the first: <its line, column and fix>"``.

    Raises:
        PredictError: inputs of another kind than the model's, a path that
            does not exist or holds no image, a CSV header without the model's
            columns; each names the path and the fix.
    """
    _check_kind(
        preprocessing, f"run {run}", images=images is not None or camera is not None, rows=csv_file
    )
    if images is not None:
        found = plural(len(image_files(images)), "image")
        return f"would classify {found} of {images} (found, not decoded: check mode reads none)"
    if csv_file is not None:
        errors = []
        rows = 0
        for _, x in csv_inputs(csv_file, preprocessing):
            if isinstance(x, PredictError):
                errors.append(str(x))
            else:
                rows += 1
        line = f"would classify {plural(rows, 'row')} of {csv_file}"
        if errors:
            line += f"; {len(errors)} more cannot be read, the first: {errors[0]}"
        return line
    return f"would classify {plural(frames, 'frame')} of camera {camera}"


def check_run(run_dir: Path, runs_dir: Path, takes: str, variant: str = "float32") -> None:
    """Refuse a run whose folder predict.yml cannot classify with, naming the fix.

    A run folder is usable when it holds ``model.tflite`` and
    ``preprocessing.json``, as train.yml's export writes them on the control
    node. A refusal names the newest runs of ``runs_dir`` that are usable
    for ``takes`` (:func:`training.status.newest_runs`), and says why a run
    has no model: a script run exports none; a run that finished while
    nothing followed it (its ``model.keras`` is there) is exported by
    ``follow.yml``.

    Args:
        run_dir: the run's folder on the control node.
        runs_dir: the folder of runs (``predict_runs_dir``).
        takes: ``images`` or ``csv``, the input predict.yml was given.
        variant: the TFLite variant predict.yml was asked for (``-e variant``).

    Raises:
        PredictError: the folder of runs itself (an empty ``-e run=``), no
            such folder, a folder without those files, a model that takes
            the other kind of input (CSV rows or images) than ``takes``, an
            unknown ``variant`` or one the run has not exported.
    """
    from training.status import newest_runs

    def newest() -> str:
        ids = newest_runs(runs_dir, 3, "model.tflite", takes)
        return (
            f", e.g. one of the newest: {', '.join(ids)}"
            if ids
            else (" (there is none yet: train.yml makes one)")
        )

    if run_dir.resolve() == runs_dir.resolve():
        raise PredictError(
            f"{run_dir} is the folder of runs, not a run (was -e run= left empty?). Fix: give "
            f"-e run=<the id of a run of {runs_dir}>{newest()}, or its folder; without -e run, "
            "predict.yml takes the newest (latest)."
        )
    if not run_dir.exists():
        raise PredictError(
            f"There is no run {run_dir}. Fix: give -e run=<the id of a run of {runs_dir}>"
            f"{newest()}, or its folder."
        )
    missing = [
        name for name in ("model.tflite", "preprocessing.json") if not (run_dir / name).is_file()
    ]
    if not missing:
        _check_variant(run_dir, variant)
        try:
            preprocessing = read_preprocessing(run_dir)
            takes_rows = _takes_rows(preprocessing)
        except (ValueError, AttributeError):
            return  # a damaged preprocessing.json: predict itself names it
        if takes == "images" and input_kind(preprocessing) == "arrays":
            why, fix = _arrays_refusal(preprocessing, run_dir)
            raise PredictError(f"{why}. Fix: {fix}.")
        if takes_rows != (takes == "csv"):
            model_takes, given, option = (
                ("CSV rows", "images", "csv=<a CSV file on the node>")
                if takes_rows
                else ("images", "CSV rows", "images=<a file or folder on the node>")
            )
            raise PredictError(
                f"the model of {run_dir} takes {model_takes}, not {given}. Fix: give -e "
                f"{option}, or -e run=<a run trained on {given}>{newest()}, its id or its folder."
            )
        return
    try:
        script = json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("script", "")
    except (OSError, ValueError, AttributeError):
        script = ""
    why = (
        f": it is a run of the script {script}, and script runs export no TFLite model (the "
        "script saves its own)"
        if script
        else ""
    )
    follow = (
        f"ansible-playbook follow.yml -e run={_run_ref(run_dir, runs_dir)} exports the model of "
        "a run "
        "that finished while nothing followed it, or "
        if not script and (run_dir / "model.keras").is_file()
        else ""
    )
    raise PredictError(
        f"{run_dir} has no {' and '.join(missing)}{why}. Fix: {follow}give -e run=<a run of "
        f"{runs_dir} that train.yml finished with raspi-tf's training> (it exports "
        f"model.tflite){newest()}, its id or its folder."
    )


def run_check(args: Any) -> int:
    """``python -m training predict --check``: print :func:`check_inputs`'s line; 0, or 2.

    The preprocessing is ``--preprocessing``'s JSON text, else ``--model``'s
    ``preprocessing.json``: in check mode predict.yml has copied no model to
    a node. ``--variant`` is checked by its name only, for the same reason.
    """
    import sys

    model = Path(args.model)
    by_file = model.suffix == ".tflite"  # the file's name gives its variant
    folder = model.parent if by_file else model
    try:
        check_top(args.top)
        check_frames(args.frames, args.camera)
        if not by_file:
            variant_file(args.variant)
        if args.preprocessing:
            preprocessing = json.loads(args.preprocessing)
        else:
            preprocessing = read_preprocessing(folder)
        print(
            check_inputs(
                preprocessing,
                folder.resolve().name,
                images=Path(args.images) if args.images else None,
                csv_file=Path(args.csv) if args.csv else None,
                camera=args.camera,
                frames=args.frames,
            )
        )
    except PredictError as e:
        print(f"predict: {e}", file=sys.stderr)
        return 2
    return 0


def run(args: Any) -> int:
    """``python -m training predict``: print a line an input and a summary; 0, or 2 on bad input.

    An image that does not decode, or a CSV row with a cell that is no number,
    is named on stderr (the first :data:`LISTED`, then a count of them all)
    and the others are classified; the exit status is then 2.
    """
    import sys

    unreadable = 0
    try:
        check_top(args.top)
        check_frames(args.frames, args.camera)
        model = Model.load(Path(args.model), args.variant, args.threads)
        times = []
        for p in predict(
            model,
            images=Path(args.images) if args.images else None,
            csv_file=Path(args.csv) if args.csv else None,
            camera=args.camera,
            frames=args.frames,
            top=args.top,
        ):
            if p.error:
                unreadable += 1
                if unreadable <= LISTED:
                    print(f"predict: {p.error}", file=sys.stderr, flush=True)
                continue
            print(p.line(), flush=True)
            times.append(p.milliseconds)
    except (PredictError, ExportError) as e:
        print(f"predict: {e}", file=sys.stderr)
        return 2
    if times:
        median = sorted(times)[len(times) // 2]
        print(
            f"{plural(len(times), 'input')} with {model.path.name}: "
            f"median {median:.1f} ms an input, first {times[0]:.1f} ms"
        )
    if unreadable:
        named = f" (the first {LISTED} named above)" if unreadable > LISTED else ""
        print(f"predict: {plural(unreadable, 'input')} could not be read{named}", file=sys.stderr)
        return 2
    return 0
