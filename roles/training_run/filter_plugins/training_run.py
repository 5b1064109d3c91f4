"""Filters building the text of a run's summary.

- ``data | training_run_dataset_text(spec)``: the dataset a run trained on, as
  the summary names it: ``photos (3 classes, 64x64x3; 812 train / 203 test
  images; 2 files skipped)``. ``data`` is what ``prepare-data`` printed (or
  the ``data`` run.json keeps of it); a run recorded without it is named by
  ``spec``, the dataset as it was given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: A prepared dataset's id is ``<name>-<12 hex digits of its key>``.
_ID_KEY = re.compile(r"-[0-9a-f]{12}$")


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


class FilterModule:
    """Ansible entry point."""

    def filters(self) -> dict[str, Any]:
        """Filter name -> function."""
        return {"training_run_dataset_text": training_run_dataset_text}
