"""Filters building the text of a run's summary.

- ``data | training_run_dataset_text(spec)``: the dataset a run trained on, as
  the summary names it: ``photos (3 classes, 64x64x3; 812 train / 203 test
  images; 2 files skipped)``. ``data`` is what ``prepare-data`` printed (or
  the ``data`` run.json keeps of it); a run recorded without it is named by
  ``spec``, the dataset as it was given.
- ``per_class | training_run_per_class_text``: each class's test accuracy,
  the weakest first: ``owl 0.812, dog 0.905, cat 0.960``; of more than
  :data:`PER_CLASS_SHOWN` classes only the weakest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: A prepared dataset's id is ``<name>-<12 hex digits of its key>``.
_ID_KEY = re.compile(r"-[0-9a-f]{12}$")
#: Classes the summary's per-class line names; metrics.json keeps them all.
PER_CLASS_SHOWN = 4


def _count(count: int, one: str, many: str) -> str:
    return f"{count} {one if count == 1 else many}"


def training_run_dataset_text(data: Mapping[str, Any] | None, spec: str) -> str:
    """The dataset of a run in words: its name, classes, shape, split sizes and skipped files.

    Args:
        data: ``id``, ``input_shape``, ``classes`` (names), ``train_examples``,
            ``test_examples``, ``skipped`` (a list of skipped files, or their count) and
            ``ignored_files`` (files that are not examples); ``name``
            when given, else the id without its key. Empty for a run recorded before datasets
            were prepared with an id.
        spec: the dataset as the user named it, used when ``data`` is empty.

    Returns:
        ``'<name> (<n> classes, <H>x<W>[x<C>]; <train> train / <test> test images[; <k> files
        skipped][; <m> other files ignored])'``; for 1-D features (a CSV's rows) ``<n>
        features`` and "examples".
    """
    if not data or "id" not in data:
        return str(spec)
    name = str(data.get("name") or _ID_KEY.sub("", str(data["id"])))
    shape = [int(n) for n in data.get("input_shape", [])]
    unit = "images" if len(shape) >= 2 else "examples"
    described = [_count(len(data.get("classes", [])), "class", "classes")]
    if len(shape) == 1:
        described.append(_count(shape[0], "feature", "features"))
    elif shape:
        described.append("x".join(str(n) for n in shape))
    parts = [
        ", ".join(described),
        f"{data.get('train_examples', '?')} train / {data.get('test_examples', '?')} test {unit}",
    ]
    skipped = data.get("skipped", [])
    count = skipped if isinstance(skipped, int) else len(skipped or [])
    if count:
        parts.append(f"{_count(count, 'file', 'files')} skipped")
    ignored = int(data.get("ignored_files") or 0)
    if ignored:
        # Files of other types (a .webp, a .heic, notes): the user sees that some were left out.
        parts.append(f"{_count(ignored, 'other file', 'other files')} ignored")
    return f"{name} ({'; '.join(parts)})"


def training_run_per_class_text(per_class: Mapping[str, float | None] | None) -> str:
    """Each class's test accuracy in words, the weakest first, ties in the classes' order.

    Args:
        per_class: ``{class name: accuracy on its test examples}`` as
            metrics.json's ``per_class_accuracy`` holds it; None for a class
            the test split has no example of.

    Returns:
        ``'<class> <accuracy>, ...'`` with 3 decimals, for at most
        :data:`PER_CLASS_SHOWN` classes: ``'weakest 8 0.930, 5 0.941, 3 0.950, 9 0.952 of 10
        classes'`` when there are more; a class without test examples comes last, as
        ``'<class> no test example'``. ``''`` when ``per_class`` is empty or missing.
    """
    if not per_class:
        return ""
    scored = sorted(
        ((name, acc) for name, acc in per_class.items() if acc is not None), key=lambda c: c[1]
    )
    unscored = [name for name, acc in per_class.items() if acc is None]
    named = [f"{name} {acc:.3f}" for name, acc in scored] + [
        f"{name} no test example" for name in unscored
    ]
    if len(named) <= PER_CLASS_SHOWN:
        return ", ".join(named)
    return f"weakest {', '.join(named[:PER_CLASS_SHOWN])} of {len(named)} classes"


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        """Filter name -> function."""
        return {
            "training_run_dataset_text": training_run_dataset_text,
            "training_run_per_class_text": training_run_per_class_text,
        }
