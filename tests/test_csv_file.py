"""CSV datasets: parsing, the stratified split, train-only statistics and every refusal."""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_iris

from tests.tabular import IRIS_FEATURES, IRIS_LABEL, write_iris_csv
from training import datasets
from training.datasets import DatasetError, Settings, csv_file

IRIS = Settings(label_column=IRIS_LABEL)


@pytest.fixture
def iris_csv(tmp_path: Path) -> Path:
    return write_iris_csv(tmp_path / "Iris Flowers.csv")


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _refusal(path: Path, settings: Settings = IRIS) -> str:
    with pytest.raises(DatasetError) as err:
        csv_file.plan(path, settings)
    return str(err.value)


def test_claims_csv_and_tsv_files_in_any_letter_case(tmp_path: Path) -> None:
    for name in ("a.csv", "b.CSV", "c.Csv", "e.tsv", "f.TSV"):
        assert csv_file.claims(_write(tmp_path / name, "x,label\n"))
    assert not csv_file.claims(_write(tmp_path / "d.txt", "x,label\n"))
    assert not csv_file.claims(tmp_path / "missing.csv")
    (tmp_path / "folder.csv").mkdir()
    assert not csv_file.claims(tmp_path / "folder.csv")


def test_the_registry_resolves_a_csv_path_to_this_module(iris_csv: Path) -> None:
    assert datasets.resolve(str(iris_csv)) is csv_file


def test_plan_of_iris(iris_csv: Path) -> None:
    plan = csv_file.plan(iris_csv, IRIS)
    assert plan.name == "iris_flowers"
    assert plan.kind == "csv"
    assert plan.classes == ["setosa", "versicolor", "virginica"]
    assert plan.input_shape == (4,)
    assert (plan.dtype, plan.scale) == ("float32", 1.0)
    assert plan.settings_used == {
        "label_column": "species",
        "test_fraction": 0.2,
        "seed": IRIS.seed,
    }
    assert plan.digest == hashlib.sha256(iris_csv.read_bytes()).hexdigest()
    assert plan.preprocessing["kind"] == "csv"
    assert plan.preprocessing["feature_columns"] == IRIS_FEATURES
    assert plan.preprocessing["label_column"] == "species"
    assert plan.preprocessing["classes"] == plan.classes
    x, label = plan.load(plan.train[0])
    assert x.shape == (4,) and x.dtype == np.float32
    assert isinstance(label, int)


def test_split_is_stratified_disjoint_and_deterministic(iris_csv: Path) -> None:
    plan = csv_file.plan(iris_csv, IRIS)
    assert len(plan.train) == 120 and len(plan.test) == 30
    assert sorted(plan.train + plan.test) == list(range(150))
    train_labels = [plan.load(i)[1] for i in plan.train]
    test_labels = [plan.load(i)[1] for i in plan.test]
    assert np.bincount(train_labels).tolist() == [40, 40, 40]
    assert np.bincount(test_labels).tolist() == [10, 10, 10]
    again = csv_file.plan(iris_csv, IRIS)
    assert (again.train, again.test) == (plan.train, plan.test)
    assert again.preprocessing == plan.preprocessing
    other = csv_file.plan(iris_csv, Settings(label_column=IRIS_LABEL, seed=1))
    assert other.test != plan.test


def test_statistics_come_from_the_training_split_only(iris_csv: Path) -> None:
    plan = csv_file.plan(iris_csv, IRIS)
    data = load_iris().data
    np.testing.assert_allclose(plan.preprocessing["mean"], data[plan.train].mean(axis=0))
    np.testing.assert_allclose(plan.preprocessing["std"], data[plan.train].std(axis=0))
    assert not np.allclose(plan.preprocessing["mean"], data.mean(axis=0))
    train = np.stack([plan.load(i)[0] for i in plan.train])
    np.testing.assert_allclose(train.mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(train.std(axis=0), 1, atol=1e-5)
    row = plan.test[0]
    expected = (data[row] - plan.preprocessing["mean"]) / plan.preprocessing["std"]
    np.testing.assert_allclose(plan.load(row)[0], expected, rtol=1e-6)
    assert load_iris().target_names[load_iris().target[row]] == plan.classes[plan.load(row)[1]]


def test_integer_labels_sort_numerically(tmp_path: Path) -> None:
    rows = "".join(f"{i},{i * 2},{label}\n" for i, label in enumerate([10, 2, 1, "007"] * 3))
    plan = csv_file.plan(_write(tmp_path / "ints.csv", "a,b,label\n" + rows), Settings())
    assert plan.classes == ["1", "2", "7", "10"]
    assert [plan.load(i)[1] for i in range(4)] == [3, 1, 0, 2]


def test_string_labels_sort_as_strings_and_a_constant_column_keeps_std_1(tmp_path: Path) -> None:
    rows = "".join(f"{i};5;{label}\n" for i, label in enumerate(["b", "a", "10", "B"] * 2))
    plan = csv_file.plan(_write(tmp_path / "s.csv", "x;const;label\n" + rows), Settings())
    assert plan.classes == ["10", "B", "a", "b"]
    assert plan.preprocessing["std"][1] == 1.0
    assert all(plan.load(i)[0][1] == 0.0 for i in range(8))


def test_tab_delimiter_bom_and_blank_lines(tmp_path: Path) -> None:
    text = "\ufeffx\ty\tlabel\n1\t2\tup\n\n3\t4\tdown\n5\t6\tup\n7\t8\tdown\n\n"
    plan = csv_file.plan(_write(tmp_path / "t.csv", text), Settings())
    assert plan.preprocessing["feature_columns"] == ["x", "y"]
    assert plan.classes == ["down", "up"]
    assert len(plan.train) == 2 and len(plan.test) == 2


def test_a_class_of_two_rows_is_in_both_splits(tmp_path: Path) -> None:
    rows = "1,a\n2,a\n" + "".join(f"{i},b\n" for i in range(20)) + "9,c\n"
    plan = csv_file.plan(_write(tmp_path / "few.csv", "x,label\n" + rows), Settings())
    test_labels = [plan.load(i)[1] for i in plan.test]
    train_labels = [plan.load(i)[1] for i in plan.train]
    assert np.bincount(test_labels, minlength=3).tolist() == [1, 4, 0]
    assert np.bincount(train_labels, minlength=3).tolist() == [1, 16, 1]


def test_an_empty_cell_is_refused_naming_line_and_column(iris_csv: Path) -> None:
    lines = iris_csv.read_text().splitlines()
    lines[6] = lines[6].replace("3.9", "", 1)  # line 7: 5.4,3.9,1.7,0.4,setosa
    message = _refusal(_write(iris_csv, "\n".join(lines) + "\n"))
    assert str(iris_csv) in message
    assert "1 cell(s)" in message
    assert "line 7, column 'sepal_width': empty" in message
    assert "Fix:" in message


def test_non_numeric_and_non_finite_cells_are_listed_first_five(tmp_path: Path) -> None:
    bad = ["abc", "nan", "inf", "-Infinity", "1,5", "x", "y"]
    rows = "".join(f'"{value}",1,a\n1,2,b\n' for value in bad)
    message = _refusal(_write(tmp_path / "bad.csv", "v,w,label\n" + rows), Settings())
    assert "7 cell(s)" in message
    assert "line 2, column 'v': 'abc' is not a finite number" in message
    assert "line 4, column 'v': 'nan'" in message
    assert "line 10, column 'v': '1,5'" in message
    assert "'x'" not in message and "and 2 more" in message


def test_a_label_column_on_a_feature_points_at_the_column_of_words(iris_csv: Path) -> None:
    message = _refusal(iris_csv, Settings(label_column="petal_width"))
    assert "line 2, column 'species': 'setosa' is not a finite number" in message
    assert message.endswith(
        "Column 'species' holds words in every row: if it is no feature, -e "
        "ignore_columns=species; if it holds the class, -e label_column=species"
    )
    # Words in some rows only are damaged cells: no hint.
    assert "holds words" not in _refusal(
        _write(iris_csv.with_name("some.csv"), "v,label\nabc,a\n1,b\n"), Settings()
    )


def test_decimal_commas_are_named_as_such_not_as_words(iris_csv: Path) -> None:
    # A spreadsheet of a decimal-comma locale saves "5,1;3,5;1,4;0,2;setosa".
    text = iris_csv.read_text().replace(",", ";")
    for number in ("5.1", "3.5", "1.4", "0.2"):
        text = text.replace(number, number.replace(".", ","))
    message = _refusal(_write(iris_csv.with_name("semicolons.csv"), text))
    assert "line 2, column 'sepal_length': '5,1' is not a finite number (a decimal comma: 5.1)" in (
        message
    )
    assert "holds words" not in message  # no label_column=sepal_length advice
    assert message.endswith(
        "cell(s) are numbers with a decimal comma: save the CSV with a decimal point (5.1), as "
        "Python's float() and training read numbers."
    )


def test_a_label_column_of_decimal_numbers_is_refused_as_a_measurement(iris_csv: Path) -> None:
    numbers = iris_csv.with_name("measurements.csv")
    _write(numbers, "".join(line.rsplit(",", 1)[0] + "\n" for line in iris_csv.open()))
    message = _refusal(numbers, Settings(label_column="petal_width"))
    # The other columns are measurements too: none is offered as the class.
    assert message == (
        f"{numbers}: column 'petal_width' (label_column) holds decimal numbers ('0.2' on line 2), "
        "a measurement rather than a class: each of its 22 distinct values would be a class. "
        "Fix: add a column holding each row's class (no other column holds names or whole "
        "numbers) and give it with -e label_column; a label is a class name or a whole number"
    )
    # A column of whole numbers beside it is the one offered.
    grades = _write(numbers, "a,b,grade\n1.5,2.5,3\n2.5,3.5,4\n")
    assert "one of grade>; a label is" in _refusal(grades, Settings(label_column="a"))
    # Whole numbers written as decimals ("2.0", as pandas writes integers) are classes,
    # sorted as numbers: 10 after 2.
    text = "x,label\n1,2.0\n2,10.0\n3,2.0\n4,10.0\n"
    assert csv_file.plan(_write(numbers, text), Settings()).classes == ["2", "10"]


def test_an_empty_label_is_refused(tmp_path: Path) -> None:
    message = _refusal(_write(tmp_path / "l.csv", "x,label\n1,a\n2,\n3,b\n"), Settings())
    assert "line 3, column 'label': empty label" in message


def test_a_missing_label_column_lists_the_columns(iris_csv: Path) -> None:
    message = _refusal(iris_csv, Settings())
    assert f"{iris_csv} has no column 'label'" in message
    assert "sepal_length, sepal_width, petal_length, petal_width, species" in message
    assert "-e label_column=<one of them>" in message


def test_one_class_is_refused(tmp_path: Path) -> None:
    message = _refusal(_write(tmp_path / "one.csv", "x,label\n1,a\n2,a\n3,a\n"), Settings())
    assert "holds one class (a)" in message and "at least 2" in message


@pytest.mark.parametrize("delimiter", [",", ";", "\t"])
def test_a_ragged_row_is_refused_naming_its_line(tmp_path: Path, delimiter: str) -> None:
    # Among so few lines the short row leaves the sniffer no consistent delimiter.
    text = "x,y,label\n1,2,a\n3,4,b\n5,b\n6,7,a,extra\n".replace(",", delimiter)
    message = _refusal(_write(tmp_path / "r.csv", text), Settings())
    assert "2 row(s)" in message
    assert "line 4 has 2 cells; line 5 has 4 cells" in message
    # The other rows' bad cells come in the same refusal, not after the rows are fixed.
    text = text.replace(f"3{delimiter}4", f"3{delimiter}")
    message = _refusal(_write(tmp_path / "r.csv", text), Settings())
    assert "(quote a value that holds the delimiter). Also, 1 cell(s) cannot be used: " in message
    assert "line 3, column 'y': empty" in message


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "is empty"),
        ("x,label\n", "no rows"),
        ("label\na\nb\n", "no feature column"),
        ("x,,label\n1,2,a\n", "column 2 has no name"),
        ("x,x,label\n1,2,a\n", "used twice: x"),
        ("x,label\n1,a\n\xff", "Fix:"),
    ],
)
def test_malformed_files_are_refused(tmp_path: Path, text: str, words: str) -> None:
    path = tmp_path / "m.csv"
    path.write_bytes(text.encode("latin-1"))
    assert words in _refusal(path, Settings())


def test_bad_settings_are_refused(iris_csv: Path) -> None:
    message = _refusal(iris_csv, Settings(label_column=IRIS_LABEL, test_fraction=1.0))
    assert "test_fraction=1.0 is not strictly between 0 and 1" in message
    assert "label_column=' ' is not a column name" in _refusal(iris_csv, Settings(label_column=" "))


def test_check_refuses_what_plan_refuses(iris_csv: Path, tmp_path: Path) -> None:
    csv_file.check(str(iris_csv), IRIS)
    with pytest.raises(DatasetError, match="no column 'label'"):
        csv_file.check(str(iris_csv), Settings())
    with pytest.raises(DatasetError, match="cannot be read"):
        csv_file.check(str(tmp_path / "gone.csv"), IRIS)


def test_one_changed_cell_changes_the_digest(iris_csv: Path) -> None:
    before = csv_file.plan(iris_csv, IRIS).digest
    data = iris_csv.read_bytes()
    iris_csv.write_bytes(data.replace(b"5.1", b"5.2", 1))
    assert csv_file.plan(iris_csv, IRIS).digest != before
    iris_csv.write_bytes(data)
    assert csv_file.plan(iris_csv, IRIS).digest == before


def test_prepare_writes_records_that_decode_to_the_standardised_rows(
    iris_csv: Path, tmp_path: Path
) -> None:
    settings = Settings(label_column=IRIS_LABEL, shards=3)
    manifest, written = datasets.prepare(str(iris_csv), tmp_path / "cache", settings)
    assert written and manifest.kind == "csv" and manifest.name == "iris_flowers"
    assert manifest.source == str(iris_csv)
    assert (manifest.input_shape, manifest.dtype, manifest.record_bytes) == ((4,), "float32", 20)
    assert manifest.classes == ("setosa", "versicolor", "virginica")
    assert manifest.class_counts == {"train": [40, 40, 40], "test": [10, 10, 10]}
    assert manifest.preprocessing["feature_columns"] == IRIS_FEATURES
    plan = csv_file.plan(iris_csv, IRIS)
    assert manifest.preprocessing == plan.preprocessing
    mean = np.array(plan.preprocessing["mean"])
    std = np.array(plan.preprocessing["std"])
    iris = load_iris()
    for split, files, rows in (
        ("train", manifest.all_train_files(), plan.train),
        ("test", manifest.test_files(), plan.test),
    ):
        raw = np.concatenate([np.fromfile(manifest.path / f.file, np.uint8) for f in files])
        records = raw.reshape(-1, manifest.record_bytes)
        labels = records[:, :4].copy().view("<i4").ravel()
        features = records[:, 4:].copy().view("<f4")
        expected = ((iris.data[rows] - mean) / std).astype(np.float32)
        got = sorted(zip(labels.tolist(), map(tuple, features.tolist()), strict=True))
        want = sorted(zip(iris.target[rows].tolist(), map(tuple, expected.tolist()), strict=True))
        assert got == want, split
    assert datasets.prepare(str(iris_csv), tmp_path / "cache", settings) == (manifest, False)
    # --check describes a dataset prepared already (Ansible's check mode stages from it).
    assert datasets.prepare(str(iris_csv), tmp_path / "cache", settings, check_only=True) == (
        manifest,
        False,
    )


def _iris_with(tmp_path: Path, **extra: list[str]) -> Path:
    """Iris as CSV with ``extra`` columns first (name -> a cell per row), sorted by class."""
    lines = write_iris_csv(tmp_path / "iris.csv").read_text().splitlines()
    names = list(extra)
    cells = [",".join(extra[n][i] for n in names) for i in range(len(lines) - 1)]
    rows = [f"{c},{line}" for c, line in zip(cells, lines[1:], strict=True)]
    return _write(tmp_path / "iris_more.csv", "\n".join([",".join([*names, lines[0]]), *rows]))


def test_a_row_number_and_a_constant_column_are_warned_of_and_ignored_on_request(
    tmp_path: Path, iris_csv: Path
) -> None:
    assert csv_file.plan(iris_csv, IRIS).warnings == []  # real measurements: nothing to say
    ids = [str(100_000 + i) for i in range(150)]  # rises with the class: rows sorted by class
    path = _iris_with(tmp_path, patient_id=ids, site=["3"] * 150, note=["seen"] * 150)
    # A column of words is refused as a feature ...
    assert "column 'note'" in _refusal(path)
    # ... and goes with ignore_columns, its cells unread.
    plan = csv_file.plan(path, Settings(label_column=IRIS_LABEL, ignore_columns=("note",)))
    assert plan.input_shape == (6,)
    assert plan.warnings == [
        f"{path}: column 'patient_id' holds a different whole number in every row, as a row "
        "number or an id does; a model can learn it by heart (rows sorted by class make it the "
        "best feature), and it tells nothing of a new row. Fix: -e ignore_columns=note,patient_id "
        "if it is one",  # the columns ignored already stay in each fix
        f"{path}: column 'site' holds 3 in every training row; it tells the classes nothing. "
        "Fix: -e ignore_columns=note,site",
    ]
    ignore = ("note", "patient_id", "site")
    plan = csv_file.plan(path, Settings(label_column=IRIS_LABEL, ignore_columns=ignore))
    assert plan.warnings == [] and plan.input_shape == (4,)
    assert plan.preprocessing["feature_columns"] == IRIS_FEATURES
    assert plan.settings_used["ignore_columns"] == list(ignore)  # a dataset id of its own
    # The same set in another order, or with a name twice, is the same dataset.
    again = Settings(label_column=IRIS_LABEL, ignore_columns=("site", "note", "patient_id", "site"))
    assert csv_file.plan(path, again).settings_used == plan.settings_used
    # A fix is given as a shell takes it, a name with a space quoted.
    assert csv_file.ignore_flag(("site",), "row id") == "-e 'ignore_columns=site,row id'"
    assert "ignore_columns" not in csv_file.plan(iris_csv, IRIS).settings_used  # ids kept


def test_ignore_columns_that_name_no_feature_are_refused(iris_csv: Path) -> None:
    def refused(*names: str) -> str:
        return _refusal(iris_csv, Settings(label_column=IRIS_LABEL, ignore_columns=names))

    assert refused("sepal_lenght") == (
        f"{iris_csv} has no column 'sepal_lenght' (ignore_columns); its columns: sepal_length, "
        "sepal_width, petal_length, petal_width, species. Fix: -e ignore_columns=<some of them, "
        "comma-separated>"
    )
    assert "names 'species', the label column of" in refused("species")
    assert "ignore_columns leaves no feature column" in refused(*IRIS_FEATURES)
    bad = Settings(label_column=IRIS_LABEL, ignore_columns=("",))
    assert "ignore_columns=('',) is not a list of column names" in _refusal(iris_csv, bad)


def test_prepare_data_takes_ignore_columns_and_prints_the_warnings(tmp_path: Path) -> None:
    from training.cli import main

    path = _iris_with(tmp_path, row=[str(i) for i in range(150)])
    argv = ["prepare-data", "--dataset", str(path), "--cache-dir", str(tmp_path / "cache")]
    argv += ["--label-column", IRIS_LABEL, "--shards", "2"]
    for extra, warned in (([], ["row"]), (["--ignore-columns", " row , "], [])):
        out = tmp_path / "out.json"
        with out.open("w") as handle, contextlib.redirect_stdout(handle):
            assert main([*argv, *extra]) == 0
        result = json.loads(out.read_text())
        assert [w.split("'")[1] for w in result["warnings"]] == warned
        assert result["input_shape"] == [5 - len(extra) // 2]
    # A photo folder does not read it: the usual warning that a setting is ignored.
    message = datasets.ignored_settings("mnist_5k", Settings(ignore_columns=("row", "id")))
    assert message == [
        "ignore_columns=row,id is ignored: mnist_5k does not read it (only csv datasets do). "
        "Fix: leave out ignore_columns, or give a dataset that reads it"
    ]


def test_a_test_fraction_in_percent_is_refused_with_the_fix(
    iris_csv: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from training.cli import main

    argv = ["prepare-data", "--dataset", str(iris_csv), "--cache-dir", str(tmp_path)]
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--test-fraction", "20%"])
    assert exit_.value.code == 2
    assert (
        "test_fraction=20% is not a number, and a share is written as a fraction here, not a "
        "percentage. Fix: -e test_fraction=0.2"
    ) in capsys.readouterr().err
