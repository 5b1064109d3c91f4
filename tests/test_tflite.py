"""A trained model exported as TFLite, and predict with the LiteRT interpreter.

One module-scoped run of mnist_cnn (one process, 2 epochs of mnist_5k,
about 20 s) gives the model that every test exports or predicts with.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from tests.conftest import ROOT, run_playbook, run_tensorflow_script
from training import datasets


def _python(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_USE_LEGACY_KERAS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "training", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a finished run's folder, the folder holding its prepared dataset)."""
    base = tmp_path_factory.mktemp("tflite")
    data = base / "datasets"
    datasets.prepare("mnist_5k", data, datasets.Settings())
    out = base / "run"
    done = _python(
        "train", "--model", "mnist_cnn", "--epochs", "2", "--data-dir", str(data),
        "--output-dir", str(out), "--run-id", "r1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out, data


@pytest.fixture(scope="module")
def exported(run: tuple[Path, Path]) -> dict:
    out, data = run
    done = _python(
        "export", "--run-dir", str(out), "--data-dir", str(data), "--variants", "int8,dynamic_int8"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "metrics.json").read_text())


def test_exporting_one_more_variant_keeps_the_others(
    exported: dict, run: tuple[Path, Path], tmp_path
):
    out, data = run
    copy = tmp_path / "run"
    shutil.copytree(out, copy)
    (copy / "model-int8.tflite").unlink()  # gone: its entry goes too
    done = _python(
        "export", "--run-dir", str(copy), "--data-dir", str(data), "--variants", "float32"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    export = json.loads((copy / "metrics.json").read_text())["export"]
    assert list(export) == ["float32", "dynamic_int8"]
    assert export["dynamic_int8"] == exported["export"]["dynamic_int8"]
    # Its dataset removed (prune-data): the fix prepares it again, under the same id.
    empty = tmp_path / "datasets"
    empty.mkdir()
    done = _python("export", "--run-dir", str(copy), "--data-dir", str(empty))
    assert done.returncode == 2
    assert (
        "Fix: prepare it again, which trains nothing: ansible-playbook site.yml --tags data "
        in (done.stderr)
    )
    ident = json.loads((copy / "metrics.json").read_text())["dataset_id"]
    assert f"python -m training prepare-data --dataset mnist_5k --cache-dir {empty}" in done.stderr
    assert (
        _python("prepare-data", "--dataset", "mnist_5k", "--cache-dir", str(empty)).returncode == 0
    )
    assert (empty / ident / "dataset.json").is_file()


def test_every_variant_scores_close_to_the_keras_model(exported: dict, run: tuple[Path, Path]):
    out, _ = run
    keras = exported["test_accuracy"]
    assert keras > 0.9
    export = exported["export"]
    assert list(export) == ["float32", "dynamic_int8", "int8"]
    assert abs(export["float32"]["test_accuracy"] - keras) <= 0.01
    assert abs(export["int8"]["test_accuracy"] - keras) <= 0.02
    assert abs(export["dynamic_int8"]["test_accuracy"] - keras) <= 0.02
    for variant, r in export.items():
        assert (out / r["file"]).stat().st_size == r["bytes"], variant
        assert r["too_lossy"] is False
    # int8 weights: about a quarter of float32's bytes.
    assert export["int8"]["bytes"] < export["float32"]["bytes"] / 2


def test_predict_gives_the_keras_model_s_classes(exported: dict, run: tuple[Path, Path], tmp_path):
    out, data = run
    manifest = datasets.read_manifest(data, exported["dataset_id"])
    # 40 test digits of mnist_5k as PNG files, as a Pi camera's pipeline would save them.
    record = manifest.record_bytes
    raw = b"".join((data / manifest.id / s.file).read_bytes() for s in manifest.test_files())
    digits = []
    for i in range(40):
        rec = raw[i * record : (i + 1) * record]
        image = np.frombuffer(rec[4:], np.uint8).reshape(28, 28)
        path = tmp_path / f"{i:02d}.png"
        cv2.imwrite(str(path), image)
        digits.append(image)
    done = _python("predict", "--model", str(out), "--images", str(tmp_path), "--top", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith(str(tmp_path))]
    tflite_classes = [ln.split(": ")[1].split()[0] for ln in lines]
    keras_classes = run_tensorflow_script(
        "import sys, numpy as np, tf_keras as keras\n"
        "m = keras.models.load_model(sys.argv[1])\n"
        "x = np.load(sys.argv[2]).astype('float32') / 255\n"
        "print(','.join(str(c) for c in m.predict(x, verbose=0).argmax(axis=1)))",
        str(out / "model.keras"),
        _save(tmp_path / "x.npy", np.stack(digits)),
    ).split(",")
    assert tflite_classes == keras_classes
    assert "40 inputs with model.tflite" in done.stdout


def _save(path: Path, array: np.ndarray) -> str:
    np.save(path, array)
    return str(path)


def test_predict_names_what_it_cannot_read(exported: dict, run: tuple[Path, Path], tmp_path):
    out, _ = run
    (tmp_path / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    cv2.imwrite(str(tmp_path / "good.png"), np.zeros((28, 28), np.uint8))
    done = _python("predict", "--model", str(out), "--images", str(tmp_path))
    assert done.returncode == 2
    assert f"{tmp_path / 'broken.jpg'}: " in done.stderr and "fix:" in done.stderr
    assert "predict: 1 input could not be read" in done.stderr
    assert f"{tmp_path / 'good.png'}: " in done.stdout  # after the broken one, still classified
    # No class to print is no answer: refused, not shown as one class.
    done = _python("predict", "--model", str(out), "--images", str(tmp_path), "--top", "0")
    assert done.returncode == 2 and done.stdout == ""
    assert "top=0: the classes printed an input must be 1 or more; fix: -e top=3" in done.stderr

    done = _python("predict", "--model", str(tmp_path), "--images", str(tmp_path))
    assert done.returncode == 2
    assert f"{tmp_path / 'preprocessing.json'} is missing" in done.stderr

    # The model file itself, as one names it on a Pi: its folder holds the preprocessing.
    done = _python("predict", "--model", str(out / "model-int8.tflite"), "--images", str(tmp_path))
    assert f"{tmp_path / 'good.png'}: " in done.stdout and "with model-int8.tflite" in done.stdout
    done = _python("predict", "--model", str(tmp_path / "nosuch"), "--images", str(tmp_path))
    assert f"{tmp_path / 'nosuch'} is not a folder; fix: give the folder of a run" in done.stderr

    other = tmp_path / "other"
    other.mkdir()
    (other / "model.tflite").write_bytes((out / "model.tflite").read_bytes())
    pre = json.loads((out / "preprocessing.json").read_text())
    (other / "preprocessing.json").write_text(json.dumps({**pre, "input_shape": [64, 64, 3]}))
    done = _python("predict", "--model", str(other), "--images", str(tmp_path))
    assert done.returncode == 2
    assert "takes inputs of shape (28, 28)" in done.stderr and "(64, 64, 3)" in done.stderr
    # Many bad inputs (a CSV written with decimal commas): the first five, then a count.
    many = tmp_path / "many"
    many.mkdir()
    for i in range(7):
        (many / f"broken{i}.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    done = _python("predict", "--model", str(out), "--images", str(many))
    assert done.returncode == 2
    assert done.stderr.count(".jpg: ") == 5
    assert "predict: 7 inputs could not be read (the first 5 named above)" in done.stderr


def test_export_refuses_an_unknown_variant_and_an_unfinished_run(run, tmp_path):
    _, data = run
    done = _python("export", "--run-dir", str(tmp_path), "--data-dir", str(data))
    assert done.returncode == 2 and "model.keras is missing" in done.stderr
    done = _python(
        "export", "--run-dir", str(tmp_path), "--data-dir", str(data), "--variants", "int4"
    )
    assert done.returncode == 2
    assert "int4 is not one of float32, dynamic_int8, int8" in done.stderr


def test_predict_bench_times_every_form_of_the_run(
    exported: dict, run: tuple[Path, Path], tmp_path
):
    out, _ = run
    figures = tmp_path / "predict.json"
    done = _python(
        "predict-bench", "--run-dir", str(out), "--inputs", "20", "--host", "bench1",
        "--output", str(figures),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(figures.read_text())
    forms = {f["form"]: f for f in result["forms"]}
    assert list(forms) == ["keras", "float32", "dynamic_int8", "int8"]
    assert forms["keras"]["test_accuracy"] == exported["test_accuracy"]
    assert forms["int8"]["bytes"] == exported["export"]["int8"]["bytes"]
    assert all(0 < f["ms_median"] <= f["ms_p90"] for f in forms.values())
    assert result["host"] == "bench1" and result["inputs"] == 20
    assert "int8" in done.stdout and "ms an input" in done.stdout


def test_predict_bench_refuses_a_run_that_was_not_exported(tmp_path):
    (tmp_path / "model.keras").write_bytes(b"")
    (tmp_path / "metrics.json").write_text("{}")
    done = _python("predict-bench", "--run-dir", str(tmp_path))
    assert done.returncode == 2
    assert "lists no TFLite variant; fix: export the run first" in done.stderr


def test_a_script_run_is_not_exported_and_says_why(run, tmp_path):
    _, data = run
    (tmp_path / "model.keras").write_text("the script's")
    (tmp_path / "metrics.json").write_text(json.dumps({"script": "train.py", "exit_code": 0}))
    for argv in (
        ("export", "--run-dir", str(tmp_path), "--data-dir", str(data)),
        ("predict-bench", "--run-dir", str(tmp_path)),
    ):
        done = _python(*argv)
        assert done.returncode == 2, done.stderr[-2000:]
        assert "is a run of the script train.py: raspi-tf exports only" in done.stderr


def test_predict_refuses_inputs_of_another_kind_once_naming_the_model(
    exported: dict, run: tuple[Path, Path], tmp_path
):
    out, _ = run
    for i in range(3):
        cv2.imwrite(str(tmp_path / f"{i}.png"), np.zeros((28, 28), np.uint8))
    rows = tmp_path / "rows.csv"
    rows.write_text("a,b\n1,2\n")
    done = _python("predict", "--model", str(out), "--csv", str(rows))
    assert done.returncode == 2
    assert f"the model of {out} takes images, not CSV rows ({rows}); fix: give images" in (
        done.stderr
    )
    # A CSV model given photos: one refusal before any photo is read, not one a photo.
    csv_model = tmp_path / "csv_model"
    csv_model.mkdir()
    (csv_model / "model.tflite").write_bytes((out / "model.tflite").read_bytes())
    pre = json.loads((out / "preprocessing.json").read_text())
    (csv_model / "preprocessing.json").write_text(json.dumps({**pre, "kind": "csv"}))
    done = _python("predict", "--model", str(csv_model), "--images", str(tmp_path))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("takes CSV rows, not images") == 1, done.stderr
    assert f"the model of {csv_model} takes CSV rows" in done.stderr
    assert "predict.yml: -e run=<its id>" in done.stderr


def test_a_run_predict_cannot_use_is_refused_with_why_and_the_newest_usable(tmp_path):
    from training.predict import PredictError, check_run

    runs = tmp_path / "runs"
    usable = runs / "20261207T040000Z-pi_mobilenet-mwms"
    usable.mkdir(parents=True)
    for name in ("run.json", "model.tflite"):
        (usable / name).write_text("{}")
    (usable / "preprocessing.json").write_text('{"kind": "image_folder"}')
    check_run(usable, runs, "images")
    # A script run exports no TFLite model: follow.yml would not help.
    script = runs / "scripted"
    script.mkdir()
    (script / "run.json").write_text('{"script": "/home/pi/train_my_model.py"}')
    (script / "model.keras").write_text("")
    with pytest.raises(PredictError) as err:
        check_run(script, runs, "images")
    assert str(err.value) == (
        f"{script} has no model.tflite and preprocessing.json: it is a run of the script "
        "/home/pi/train_my_model.py, and script runs export no TFLite model (the script saves "
        f"its own). Fix: give -e run=<a run of {runs} that train.yml finished with raspi-tf's "
        f"training> (it exports model.tflite), e.g. one of the newest: {usable.name}, its id or "
        "its folder."
    )
    # One that finished while nothing followed it, kept outside the runs folder: follow.yml
    # is given its folder, not a run id it would look for in runs/.
    elsewhere = tmp_path / "archive" / "stopped"
    elsewhere.mkdir(parents=True)
    (elsewhere / "model.keras").write_text("")
    with pytest.raises(PredictError, match=f"Fix: ansible-playbook follow.yml -e run={elsewhere} "):
        check_run(elsewhere, runs, "images")
    # For CSV rows no run fits: say that train.yml makes one.
    with pytest.raises(PredictError, match=r"nosuch\. Fix: .* \(there is none yet: train\.yml"):
        check_run(runs / "nosuch", runs, "csv")
    # -e run= (empty) names the folder of runs: not read as a run without a model.
    with pytest.raises(PredictError) as err:
        check_run(Path(f"{runs}/"), runs, "images")
    assert str(err.value).startswith(
        f"{runs} is the folder of runs, not a run (was -e run= left empty?). Fix: give -e "
        f"run=<the id of a run of {runs}>, e.g. one of the newest: {usable.name}, or its folder;"
    )
    # A model of images given CSV rows: refused on the control node, naming runs of rows.
    rows_run = runs / "20261207T050000Z-tabular_mlp-mwms"
    rows_run.mkdir()
    for name in ("run.json", "model.tflite"):
        (rows_run / name).write_text("{}")
    (rows_run / "preprocessing.json").write_text('{"kind": "csv"}')
    with pytest.raises(PredictError) as err:
        check_run(usable, runs, "csv")
    assert str(err.value) == (
        f"the model of {usable} takes images, not CSV rows. Fix: give -e images=<a file or "
        f"folder on the node>, or -e run=<a run trained on CSV rows>, e.g. one of the newest: "
        f"{rows_run.name}, its id or its folder."
    )
    with pytest.raises(PredictError, match=r"takes CSV rows, not images\. Fix: give -e csv="):
        check_run(rows_run, runs, "images")
    check_run(rows_run, runs, "csv")
    # A variant the run has not exported: refused before any copy, with the export command.
    (usable / "model-dynamic-int8.tflite").write_text("")
    check_run(usable, runs, "images", "dynamic_int8")
    with pytest.raises(PredictError) as err:
        check_run(usable, runs, "images", "int8")
    assert str(err.value) == (
        f"{usable} has no int8 model (model-int8.tflite), only float32, dynamic_int8. Fix: -e "
        f"variant=float32, or export it on the control node: python -m training export --run-dir "
        f"{usable} --data-dir .cache/datasets --variants int8 (train.yml exports int8 with -e "
        "export_int8=true)"
    )
    with pytest.raises(PredictError, match="variant 'int16' is not one of float32, dynamic_int8"):
        check_run(usable, runs, "images", "int16")


def test_predict_yml_names_the_run_and_refuses_a_missing_one_or_two_inputs(
    exported: dict, run: tuple[Path, Path], tmp_path
):
    out, _ = run
    runs = out.parent
    cv2.imwrite(str(tmp_path / "digit.png"), np.zeros((28, 28), np.uint8))
    given = ["-e", f"predict_runs_dir={runs}", "-e", f"images={tmp_path}"]
    done = run_playbook("predict.yml", *given, "-e", f"run={out.name}", timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    assert f"model of run {out.name}:" in done.stdout
    assert "1 input with model.tflite" in done.stdout
    # --check loads no model: it says what would be classified.
    done = run_playbook("predict.yml", "--check", *given, "-e", f"run={out.name}", timeout=300)
    assert done.returncode == 0, done.stdout[-3000:]
    text = " ".join(done.stdout.split())  # the YAML callback folds a long line
    assert f"would classify 1 image of {tmp_path} (found, not decoded" in text
    assert "with model.tflite" not in text
    # A count of frames beside images is refused by the node's check, before any copy.
    done = run_playbook("predict.yml", *given, "-e", f"run={out.name}", "-e", "frames=5")
    text = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0
    assert f"localhost, model of run {out.name}: frames=5 counts camera frames, and no" in text
    assert "TASK [predict : Classify]" not in text
    done = run_playbook(
        "predict.yml", "--check", *given, "-e", f"run={out.name}", "-e", "variant=int9"
    )
    text = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0
    assert "variant 'int9' is not one of float32, dynamic_int8, int8; fix: pick one" in text
    # A variant the run did not export: refused on the control node, before any copy.
    float32 = runs / "float32-only"
    float32.mkdir(exist_ok=True)
    for name in ("model.tflite", "preprocessing.json"):
        shutil.copy(out / name, float32 / name)
    done = run_playbook("predict.yml", *given, "-e", "run=float32-only", "-e", "variant=int8")
    text = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0 and "model of run" not in text
    assert "has no int8 model (model-int8.tflite), only float32. Fix: -e variant=float32" in text
    assert f"python -m training export --run-dir {float32} --data-dir" in text, text[-2000:]
    shutil.rmtree(float32)  # not one of the newest runs the refusals below name

    done = run_playbook("predict.yml", *given, "-e", "run=nosuch", timeout=300)
    assert done.returncode != 0
    text = " ".join((done.stdout + done.stderr).split())
    assert f"There is no run {runs}/nosuch." in text, text[-2000:]
    assert f"e.g. one of the newest: {out.name}" in text
    # A run without a TFLite model is answered with runs that have one; one that finished
    # while nothing followed it (its model.keras is there) with follow.yml, which exports it.
    stopped = runs / "stopped"
    stopped.mkdir(exist_ok=True)
    for name in ("run.json", "model.keras", "preprocessing.json"):
        (stopped / name).write_text("{}")
    done = run_playbook("predict.yml", *given, "-e", "run=stopped", timeout=300)
    text = " ".join((done.stdout + done.stderr).split())
    assert done.returncode != 0
    assert f"{stopped} has no model.tflite. Fix: ansible-playbook follow.yml -e run=stopped" in text
    assert f"e.g. one of the newest: {out.name}," in text

    done = run_playbook("predict.yml", *given, "-e", f"csv={tmp_path / 'x.csv'}", timeout=300)
    assert done.returncode != 0
    text = " ".join((done.stdout + done.stderr).split())
    assert "One kind of input at a time: images and csv were given" in text, text[-2000:]

    # A host pattern that matches nothing would skip the play with a warning and exit 0.
    done = run_playbook("predict.yml", *given, "-e", "predict_hosts=pi1", timeout=300)
    assert done.returncode != 0
    text = " ".join((done.stdout + done.stderr).split())
    assert "-e predict_hosts=pi1 matches no host of the inventory" in text, text[-2000:]
    assert "(its groups: chief, cluster, local, ps, worker; its hosts: localhost)" in text


def test_a_csv_row_that_is_no_number_is_named_and_the_rows_after_it_go_on(tmp_path):
    from training.predict import PredictError, csv_inputs

    pre = {"feature_columns": ["hum", "temp"], "mean": [60.0, 21.0], "std": [10.0, 1.0]}
    for delimiter in (",", ";", "\t"):  # whatever the training CSV's delimiter was
        rows = tmp_path / "readings.csv"
        text = "temp,label,hum\n20,a,50\n21,b,\n22,c,70\n23,d,x\n24,e\n"
        rows.write_text(text.replace(",", delimiter))
        got = dict(csv_inputs(rows, pre))
        assert list(got) == [f"readings.csv:{line}" for line in (2, 3, 4, 5, 6)]
        np.testing.assert_allclose(got["readings.csv:2"], [-1.0, -1.0])
        np.testing.assert_allclose(got["readings.csv:4"], [1.0, 1.0])
        assert isinstance(got["readings.csv:3"], PredictError)
        assert str(got["readings.csv:3"]) == (
            f"{rows} line 3, column hum: empty; fix: put a number there"
        )
        assert str(got["readings.csv:5"]).endswith(
            "'x' is not a finite number; fix: put a number there"
        )
        assert str(got["readings.csv:6"]) == (
            f"{rows} line 6: fewer cells than the header's 3, none for hum; fix: one cell per "
            "column (quote a value that holds the delimiter)"
        )

    rows.write_text("temp,humidity\n20,50\n")
    with pytest.raises(PredictError, match=r"has no column hum \(its header: 'temp', 'humidity'\)"):
        list(csv_inputs(rows, pre))
    # A decimal comma makes a row longer than the header: refused, not read shifted.
    rows.write_text("\ufefftemp,hum\n20,50\n5,1,50\n")  # a byte-order mark, as training takes
    got = dict(csv_inputs(rows, pre))
    np.testing.assert_allclose(got["readings.csv:2"], [-1.0, -1.0])
    assert str(got["readings.csv:3"]) == (
        f"{rows} line 3: more cells than the header's 2; fix: one cell per column (quote a "
        "value that holds the delimiter)"
    )
    rows.write_text("temp;hum\n20,5;50\n")  # a decimal comma, with ';' between cells
    assert str(dict(csv_inputs(rows, pre))["readings.csv:2"]) == (
        f"{rows} line 2, column temp: '20,5' is not a finite number; fix: write it with a "
        "decimal point (20.5)"
    )
    rows.write_text("temp,hum\n")
    with pytest.raises(PredictError, match="has a header and no row; fix: give rows under its"):
        list(csv_inputs(rows, pre))
    for missing, where in ((tmp_path / "readngs.csv", "does not exist"), (tmp_path, "is a folder")):
        with pytest.raises(PredictError, match=f"{missing} {where}; fix: give a CSV file"):
            list(csv_inputs(missing, pre))


def test_check_mode_says_what_would_be_classified_and_refuses_what_predict_would(tmp_path):
    from training.predict import PredictError, check_inputs

    pre = {"kind": "csv", "feature_columns": ["hum"], "mean": [60.0], "std": [10.0]}
    rows = tmp_path / "readings.csv"
    rows.write_text("hum\n50\nx\n70\n")
    assert check_inputs(pre, "r1", csv_file=rows) == (
        f"would classify 2 rows of {rows}; 1 more cannot be read, the first: {rows} line 3, "
        "column hum: 'x' is not a finite number; fix: put a number there"
    )
    with pytest.raises(PredictError, match="the model of run r1 takes CSV rows, not images"):
        check_inputs(pre, "r1", images=tmp_path)
    # An .npz's features that are not pixels: images are not what its model learned.
    features = {"kind": "npz", "input_shape": [8, 8], "dtype": "float32", "scale": 1.0}
    with pytest.raises(
        PredictError, match=r"an \.npz of float32 features of shape 8x8, not on pix"
    ):
        check_inputs(features, "r1", images=tmp_path)
    pixels = {**features, "dtype": "uint8", "scale": 1 / 255}
    assert check_inputs(pixels, "r1", camera=0) == "would classify 1 frame of camera 0"
    images = {"kind": "image_folder", "classes": ["a", "b"]}
    cv2.imwrite(str(tmp_path / "a.JPG"), np.zeros((8, 8, 3), np.uint8))
    (tmp_path / "notes.txt").write_text("not an image")
    assert check_inputs(images, "r1", images=tmp_path) == (
        f"would classify 1 image of {tmp_path} (found, not decoded: check mode reads none)"
    )
    assert check_inputs(images, "r1", camera=0, frames=5) == "would classify 5 frames of camera 0"


def test_a_variant_in_other_letters_is_refused_with_its_spelling():
    from training.predict import PredictError, variant_file

    assert variant_file("int8") == "model-int8.tflite"
    for given, meant in (("INT8", "int8"), ("dynamic-int8", "dynamic_int8")):
        with pytest.raises(PredictError, match=rf"fix: -e variant={meant}$"):
            variant_file(given)
    with pytest.raises(PredictError, match=r"fix: pick one$"):
        variant_file("int16")


def test_a_count_of_frames_without_a_camera_is_refused_not_ignored():
    from training.predict import PredictError, check_frames

    check_frames(1, None)  # the default, with images or a CSV file
    check_frames(10, "0")
    with pytest.raises(PredictError, match="frames=10 counts camera frames, and no camera is giv"):
        check_frames(10, None)
    with pytest.raises(PredictError, match="frames=0: the camera frames to classify must be 1 or"):
        check_frames(0, "/dev/video0")
