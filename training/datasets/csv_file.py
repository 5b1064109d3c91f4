"""A CSV file on the control node: numeric feature columns and one class column.

``-e dataset=/path/to/readings.csv`` (the suffix ``.csv``, or ``.tsv`` for a
file of tab-separated values, in any letter case).

Source: a text file in UTF-8 (a byte-order mark is accepted) with a header
row. The delimiter is the one of ``,``, ``;`` and tab that
:class:`csv.Sniffer` finds in the first lines; when it finds none, ``,``.
Quoting follows Python's default ``excel`` dialect. Header names are stripped
of surrounding spaces; blank lines are skipped.

Columns: ``label_column`` (``-e label_column=...``, default ``label``) holds
the class of each row, as class names or as integers; ``ignore_columns``
(``-e ignore_columns=row_id,site``) are no features and their cells are not
read; every other column is a numeric feature. Each feature cell must be a
finite number (``float`` syntax: ``3``, ``-0.5``, ``1e-3``); an empty cell,
text, ``nan`` or ``inf`` is refused, naming the file, the line (1-based, the
header is line 1) and the column.

Input shape: ``(n_features,)`` float32, the features in the file's column
order without the label column and the ignored ones. Class names: the
distinct labels sorted, numerically when every label is a whole number
(``"2"`` or ``"2.0"``, named ``"2"``, before ``"10"``), as strings
otherwise; label ``i`` is ``classes[i]``.

Warnings (the run goes on): a feature column holding a different whole
number in every row of at least :data:`ID_ROWS` rows reads as a row number
or an id, which a model can learn by heart (rows sorted by class make it
the best feature) while it tells nothing of a new row; a column with one
value in every training row tells the classes nothing.

Preparing (control node): :func:`plan` reads and checks the whole file once
into memory (a CSV of sensor readings fits in the control node's RAM; the
nodes never hold it, they stream the prepared shards). The split is
stratified per class (:func:`split`). Each feature is standardised with the
mean and the standard deviation of the training split only, so nothing of the
test split leaks into training; a constant column (standard deviation 0)
is divided by 1 instead. The statistics go into ``preprocessing``, which is
saved beside the trained model, so a prediction standardises raw readings
the same way.

Loading (tasks): as every dataset, through the shard pipeline
(:mod:`training.datasets.pipeline`); the records hold the standardised
float32 features, so a task applies ``scale`` 1.0 and nothing else.
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import re
import shlex
from pathlib import Path
from typing import Any

import numpy as np

from training.datasets import DatasetError, Plan, Settings, slug
from training.datasets._base import test_fraction_problem

KIND = "csv"
#: The settings this kind reads (the protocol in :mod:`training.datasets._base`).
SETTINGS = ("label_column", "ignore_columns", "test_fraction")

#: Delimiters the sniffer chooses among.
DELIMITERS = ",;\t"
#: Lines of the file the sniffer looks at.
SNIFF_LINES = 20
#: Bad cells or lines a refusal lists (the count covers all of them).
LISTED = 5
#: Rows from which a column with a different whole number in each reads as a row number or id.
ID_ROWS = 20
#: A number written with a decimal comma (``5,1``), as spreadsheets of many locales save it.
DECIMAL_COMMA = re.compile(r"[+-]?\d+,\d+")


def decimal_point(cell: str) -> str | None:
    """``cell`` with its decimal comma as a point (``"5,1"`` -> ``"5.1"``), or None."""
    cell = cell.strip()
    return cell.replace(",", ".") if DECIMAL_COMMA.fullmatch(cell) else None


def claims(path: Path) -> bool:
    """True for a file whose suffix is ``.csv`` or ``.tsv`` in any letter case."""
    return path.is_file() and path.suffix.lower() in (".csv", ".tsv")


def sniff_delimiter(text: str) -> str:
    """The delimiter of CSV ``text``: ``,``, ``;`` or tab, by :class:`csv.Sniffer`.

    The sniffer sees the first :data:`SNIFF_LINES` lines. When it cannot
    decide (a short row among few lines makes no delimiter consistent), the
    header line's most frequent one is the answer, so that the short row is
    refused by its line; with none of them in the header (one column), ``,``.
    """
    lines = text.splitlines(keepends=True)[:SNIFF_LINES]
    try:
        return csv.Sniffer().sniff("".join(lines), delimiters=DELIMITERS).delimiter
    except csv.Error:
        header = lines[0] if lines else ""
        return max(DELIMITERS, key=header.count) if any(d in header for d in DELIMITERS) else ","


def split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """A deterministic train/test split of row indices, stratified per class.

    The rule of the image folders (:mod:`training.datasets.image_folder`):
    each class's rows, in file order, are permuted with
    ``numpy.random.default_rng(seed)`` and ``round(n * test_fraction)`` of
    them go to the test split, but at least one to each split; a class of
    one row goes to the training split.

    Args:
        labels: int labels, shape (n,).
        test_fraction: share of each class held out, 0 < f < 1.
        seed: seed of the permutation.

    Returns:
        ``(train, test)``: row indices, each sorted ascending.
    """
    train: list[int] = []
    test: list[int] = []
    for label in np.unique(labels):
        rows = np.flatnonzero(labels == label)
        n = len(rows)
        n_test = min(max(round(n * test_fraction), 1), n - 1) if n >= 2 else 0
        order = np.random.default_rng(seed).permutation(n)
        test.extend(int(i) for i in rows[order[:n_test]])
        train.extend(int(i) for i in rows[order[n_test:]])
    return sorted(train), sorted(test)


def _listing(problems: list[str]) -> str:
    more = f"; and {len(problems) - LISTED} more" if len(problems) > LISTED else ""
    return "; ".join(problems[:LISTED]) + more


def _read_rows(path: Path, data: bytes) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header and the (line number, cells) of every non-blank row."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DatasetError(
            f"{path}: not UTF-8 text (byte {err.start}: {err.reason}). "
            "Fix: save the file as UTF-8 CSV"
        ) from None
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=sniff_delimiter(text))
    header: list[str] | None = None
    rows: list[tuple[int, list[str]]] = []
    try:
        for cells in reader:
            if len(cells) <= 1 and not "".join(cells).strip():  # a blank line
                continue
            if header is None:
                header = [c.strip() for c in cells]
            else:
                rows.append((reader.line_num, cells))
    except csv.Error as err:
        raise DatasetError(
            f"{path} line {reader.line_num}: not valid CSV ({err}). "
            "Fix: close the quoted field or remove the stray quote"
        ) from None
    if header is None:
        raise DatasetError(f"{path} is empty. Fix: a header row, then one row per example")
    return header, rows


def _check_header(
    path: Path, header: list[str], label_column: str, ignore_columns: tuple[str, ...]
) -> None:
    columns = ", ".join(header)
    unnamed = [str(i + 1) for i, name in enumerate(header) if not name]
    if unnamed:
        raise DatasetError(
            f"{path} line 1: column {', '.join(unnamed)} has no name (columns: {columns}). "
            "Fix: name every column in the header row, or remove the unnamed ones"
        )
    doubled = sorted({name for name in header if header.count(name) > 1})
    if doubled:
        raise DatasetError(
            f"{path} line 1: column names used twice: {', '.join(doubled)}. "
            "Fix: give every column a name of its own"
        )
    if label_column not in header:
        raise DatasetError(
            f"{path} has no column {label_column!r} (label_column); its columns: {columns}. "
            "Fix: -e label_column=<one of them>"
        )
    unknown = [name for name in ignore_columns if name not in header]
    if unknown:
        raise DatasetError(
            f"{path} has no column {', '.join(map(repr, unknown))} (ignore_columns); its "
            f"columns: {columns}. Fix: -e ignore_columns=<some of them, comma-separated>"
        )
    if label_column in ignore_columns:
        raise DatasetError(
            f"ignore_columns names {label_column!r}, the label column of {path}: its classes "
            "are what the model learns. Fix: leave it out of ignore_columns"
        )
    if len(header) < 2:
        raise DatasetError(
            f"{path} has only the label column {label_column!r}; no feature column. "
            "Fix: add numeric feature columns, or point label_column at the class column"
        )
    if len(header) - 1 - len(set(ignore_columns)) < 1:
        raise DatasetError(
            f"{path}: ignore_columns leaves no feature column (columns: {columns}). "
            "Fix: leave the numeric feature columns out of ignore_columns"
        )


def _parse(
    path: Path,
    header: list[str],
    rows: list[tuple[int, list[str]]],
    label_column: str,
    ignore_columns: tuple[str, ...],
) -> tuple[np.ndarray, list[str]]:
    """The float64 features (n, n_features) and the raw label of every row.

    The cells of ``ignore_columns`` are not read.

    Raises:
        DatasetError: ragged rows (listed by line), and cells of the other rows
            that are not finite numbers or empty labels (listed by line and
            column), in one message.
    """
    ragged = [
        f"line {line} has {len(cells)} cells" for line, cells in rows if len(cells) != len(header)
    ]
    problems = []  # each with its fix, all in one refusal
    if ragged:
        problems.append(
            f"{len(ragged)} row(s) do not have the header's {len(header)} cells: "
            f"{_listing(ragged)}. Fix: one cell per column in every row (quote a value that "
            "holds the delimiter)."
        )
        rows = [(line, cells) for line, cells in rows if len(cells) == len(header)]
    label_at = header.index(label_column)
    feature_at = [
        i for i, name in enumerate(header) if i != label_at and name not in ignore_columns
    ]
    x = np.empty((len(rows), len(feature_at)), dtype=np.float64)
    labels: list[str] = []
    bad: list[str] = []
    text_cells = dict.fromkeys(feature_at, 0)  # per column: cells that are words, not numbers
    decimal_commas = 0
    for r, (line, cells) in enumerate(rows):
        label = cells[label_at].strip()
        if not label:
            bad.append(f"line {line}, column {label_column!r}: empty label")
        labels.append(label)
        for j, i in enumerate(feature_at):
            cell = cells[i].strip()
            point = None
            try:
                value = float(cell)
            except ValueError:
                value = math.nan
                point = decimal_point(cell)
                decimal_commas += point is not None
                text_cells[i] += bool(cell) and point is None
            if not math.isfinite(value):
                what = "empty" if not cell else f"{cell!r} is not a finite number"
                if point is not None:
                    what += f" (a decimal comma: {point})"
                bad.append(f"line {line}, column {header[i]!r}: {what}")
            x[r, j] = value
    if bad:
        # A column of words in every row is a class column, not a damaged feature.
        words = [header[i] for i, n in text_cells.items() if rows and n == len(rows)]
        hint = (
            f" Column {words[0]!r} holds words in every row: if it is no feature, "
            f"{ignore_flag(ignore_columns, *words)}; if it holds the class, "
            f"-e label_column={words[0]}"
            if words
            else ""
        )
        if decimal_commas:
            hint += (
                f" {decimal_commas} cell(s) are numbers with a decimal comma: save the CSV with "
                "a decimal point (5.1), as Python's float() and training read numbers."
            )
        problems.append(
            f"{len(bad)} cell(s) cannot be used: {_listing(bad)}. Fix: every cell of a feature "
            f"column must be a finite number and every {label_column!r} cell a class; fill in "
            f"or correct those cells, or remove their rows.{hint}"
        )
    if problems:
        raise DatasetError(f"{path}: {' Also, '.join(problems)}")
    return x, labels


def _check_labels(
    path: Path,
    header: list[str],
    rows: list[tuple[int, list[str]]],
    labels: list[str],
    label_column: str,
) -> None:
    """Refuse a label column of decimal numbers: a measurement, not a class.

    Every label a number and one of them with a fraction (``1.04``) reads as a
    feature picked by mistake: each distinct value would become a class.
    Whole numbers, ``3`` or ``3.0``, stay classes.

    Raises:
        DatasetError: naming the column, the first such line and the fix.
    """
    try:
        values = [float(label) for label in labels]
    except ValueError:
        return  # class names
    fractions = [i for i, v in enumerate(values) if math.isfinite(v) and not v.is_integer()]
    if not fractions:
        return
    line = rows[fractions[0]][0]
    others = [
        name
        for j, name in enumerate(header)
        if name != label_column
        and _could_be_labels([cells[j] for _, cells in rows if j < len(cells)])
    ]
    shown = ", ".join(others[:8]) + (", ..." if len(others) > 8 else "")
    fix = (
        f"-e label_column=<the column that holds the class: one of {shown}>"
        if others
        else "add a column holding each row's class (no other column holds names or whole "
        "numbers) and give it with -e label_column"
    )
    raise DatasetError(
        f"{path}: column {label_column!r} (label_column) holds decimal numbers "
        f"({labels[fractions[0]]!r} on line {line}), a measurement rather than a class: each "
        f"of its {len(set(labels))} distinct values would be a class. Fix: {fix}; a label is a "
        "class name or a whole number"
    )


def _could_be_labels(cells: list[str]) -> bool:
    """Whether a column could hold classes: a name in some cell, or whole numbers in all."""
    try:
        values = [float(cell) for cell in cells]
    except ValueError:
        return True
    return all(math.isfinite(v) and v.is_integer() for v in values)


def _whole_number(label: str) -> int:
    """``label`` as an int: ``"7"``, ``"007"`` and ``"7.0"`` are 7.

    Raises:
        ValueError: not a whole number (``"7.5"``, ``"seven"``, ``"nan"``).
    """
    try:
        return int(label)
    except ValueError:
        value = float(label)
        if not value.is_integer():
            raise
        return int(value)


def _classes(labels: list[str]) -> tuple[list[str], np.ndarray]:
    """Sorted class names and each row's int label.

    Whole-number labels are sorted numerically and named by their decimal
    form: ``"007"`` is class ``"7"``, and ``"2.0"`` (how pandas writes an
    integer column that has a gap) is class ``"2"``, so ``"10"`` comes after
    ``"9"``. Any other labels are sorted as strings.
    """
    try:
        numbers = [_whole_number(label) for label in labels]
    except ValueError:
        names = sorted(set(labels))
        index = {name: i for i, name in enumerate(names)}
        return names, np.array([index[label] for label in labels], dtype=np.int64)
    values = sorted(set(numbers))
    index_of = {value: i for i, value in enumerate(values)}
    return [str(v) for v in values], np.array([index_of[n] for n in numbers], dtype=np.int64)


def ignore_flag(ignore_columns: tuple[str, ...], *more: str) -> str:
    """``-e ignore_columns=...`` naming the columns ignored already and ``more``, for a shell.

    ``ignore_flag(("site",), "row id")`` -> ``-e 'ignore_columns=site,row id'``.
    """
    names = ",".join(dict.fromkeys([*ignore_columns, *more]))
    return f"-e {shlex.quote(f'ignore_columns={names}')}"


def column_warnings(
    path: Path,
    feature_columns: list[str],
    x: np.ndarray,
    train: list[int],
    ignore_columns: tuple[str, ...] = (),
) -> list[str]:
    """Feature columns a model learns nothing true from, each with the fix.

    Args:
        path: the CSV file, for the messages.
        feature_columns: the names of ``x``'s columns.
        x: float64 features, shape (rows, len(feature_columns)).
        train: the training split's row indices.
        ignore_columns: the columns ignored already, which each fix keeps.

    Returns:
        One sentence per column holding a different whole number in every row
        (at least :data:`ID_ROWS` rows), as a row number or an id does, and
        per column with one value in every training row.
    """
    found = []
    for j, name in enumerate(feature_columns):
        column = x[:, j]
        if (
            len(column) >= ID_ROWS
            and np.array_equal(column, np.round(column))
            and len(np.unique(column)) == len(column)
        ):
            found.append(
                f"{path}: column {name!r} holds a different whole number in every row, as a row "
                "number or an id does; a model can learn it by heart (rows sorted by class make "
                "it the best feature), and it tells nothing of a new row. Fix: "
                f"{ignore_flag(ignore_columns, name)} if it is one"
            )
        elif train and np.ptp(column[train]) == 0:
            found.append(
                f"{path}: column {name!r} holds {column[train[0]]:g} in every training row; it "
                f"tells the classes nothing. Fix: {ignore_flag(ignore_columns, name)}"
            )
    return found


def validate_settings(settings: Settings) -> None:
    """Check the settings this kind of dataset uses, all at once.

    Raises:
        DatasetError: naming each bad variable (``label_column``,
            ``ignore_columns``, ``test_fraction``), its value and the fix.
    """
    problems = []
    if not isinstance(settings.label_column, str) or not settings.label_column.strip():
        problems.append(
            f"label_column={settings.label_column!r} is not a column name. "
            "Fix: -e label_column=<the CSV column that holds the class>"
        )
    ignore = settings.ignore_columns
    if not isinstance(ignore, tuple) or not all(isinstance(c, str) and c.strip() for c in ignore):
        problems.append(
            f"ignore_columns={ignore!r} is not a list of column names. "
            "Fix: -e ignore_columns=row_id,site (names of the CSV's header, comma-separated)"
        )
    fraction = test_fraction_problem(settings.test_fraction)
    if fraction:
        problems.append(fraction)
    if problems:
        raise DatasetError("; ".join(problems))


def check(spec: str, settings: Settings, source: Path | None = None) -> None:
    """Validate the settings and the whole file (reading a CSV is cheap).

    Raises:
        DatasetError: everything :func:`plan` refuses.
    """
    plan(spec, settings, source)


def plan(spec: str | Path, settings: Settings, source: Path | None = None) -> Plan:
    """Read and check the CSV ``spec`` once, split it and compute its statistics.

    Items are row indices (0-based, data rows in file order) into the
    standardised features; ``load(i)`` returns the float32 row of shape
    ``(n_features,)`` and its int label, and never raises
    :class:`~training.datasets.BadExample` (every cell is checked here).

    Args:
        spec: the CSV file's path on the control node.
        settings: ``label_column``, ``test_fraction`` and ``seed`` are used.
        source: not used (the file is its own source).

    Raises:
        DatasetError: a bad setting, a file that cannot be read or is not
            UTF-8, bad CSV quoting, a missing label column, unnamed or
            repeated column names, ragged rows, empty or non-numeric cells,
            or fewer than 2 classes; each names the file, line or column and
            the fix.
    """
    validate_settings(settings)
    path = Path(spec).expanduser().resolve()
    try:
        data = path.read_bytes()
    except OSError as err:
        raise DatasetError(
            f"{path}: cannot be read ({err.strerror}). Fix: the path of a readable CSV file "
            "on the control node"
        ) from None
    header, rows = _read_rows(path, data)
    label_column = settings.label_column
    ignore_columns = settings.ignore_columns
    _check_header(path, header, label_column, ignore_columns)
    if not rows:
        raise DatasetError(f"{path} has a header and no rows. Fix: one row per example")
    x, raw_labels = _parse(path, header, rows, label_column, ignore_columns)
    _check_labels(path, header, rows, raw_labels, label_column)
    classes, labels = _classes(raw_labels)
    if len(classes) < 2:
        raise DatasetError(
            f"{path}: column {label_column!r} holds one class ({', '.join(classes)}); a "
            "classifier needs at least 2. Fix: add rows of other classes, or -e "
            "label_column=<the column that holds the class>"
        )
    train, test = split(labels, settings.test_fraction, settings.seed)
    feature_columns = [
        name for name in header if name != label_column and name not in ignore_columns
    ]
    warnings = column_warnings(path, feature_columns, x, train, ignore_columns)
    mean = x[train].mean(axis=0)
    std = x[train].std(axis=0)
    std[std == 0] = 1.0
    features = ((x - mean) / std).astype(np.float32)
    del x

    def load(item: Any) -> tuple[np.ndarray, int]:
        return features[item], int(labels[item])

    settings_used: dict[str, Any] = {"label_column": label_column}
    if ignore_columns:  # only then: the ids of datasets prepared without it stay as they are
        # The set of columns shapes the content, not the order they were given in.
        settings_used["ignore_columns"] = sorted(set(ignore_columns))
    return Plan(
        name=slug(path.stem),
        kind=KIND,
        digest=hashlib.sha256(data).hexdigest(),
        settings_used={
            **settings_used,
            "test_fraction": settings.test_fraction,
            "seed": settings.seed,
        },
        input_shape=(len(feature_columns),),
        dtype="float32",
        scale=1.0,
        classes=classes,
        train=train,
        test=test,
        load=load,
        preprocessing={
            "kind": KIND,
            "feature_columns": feature_columns,
            "label_column": label_column,
            "mean": mean.tolist(),
            "std": std.tolist(),
            "classes": classes,
        },
        warnings=warnings,
    )
