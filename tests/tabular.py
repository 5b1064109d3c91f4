"""Tabular test data: real rows that a package ships, written as CSV (no download)."""

from __future__ import annotations

import csv
from pathlib import Path

#: Header of :func:`write_iris_csv`: the four measurements, then the class column.
IRIS_FEATURES = ["sepal_length", "sepal_width", "petal_length", "petal_width"]
IRIS_LABEL = "species"


def write_iris_csv(path: Path, row_numbers: bool = False) -> Path:
    """Write scikit-learn's bundled iris data to ``path`` as CSV; return ``path``.

    150 rows (50 per class, in the dataset's order), a header row of
    :data:`IRIS_FEATURES` and :data:`IRIS_LABEL`, comma-delimited; the label
    is the class name (``setosa``, ``versicolor``, ``virginica``); each
    measurement is written in Python's shortest round-trip form. With
    ``row_numbers``, a first column ``row`` numbers the rows from 1, as a
    spreadsheet's export does.
    """
    from sklearn.datasets import load_iris

    iris = load_iris()
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        first = ["row"] if row_numbers else []
        writer.writerow([*first, *IRIS_FEATURES, IRIS_LABEL])
        rows = zip(iris.data.tolist(), iris.target.tolist(), strict=True)
        for n, (row, target) in enumerate(rows, start=1):
            cells = [str(n)] if row_numbers else []
            cells += [*(repr(float(v)) for v in row), str(iris.target_names[target])]
            writer.writerow(cells)
    return path
