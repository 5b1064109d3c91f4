"""The types every dataset module and the shard writer share (re-exported by the package).

A dataset module is one kind of source. It defines:

- ``NAME`` (a registered dataset such as ``mnist_5k``) or ``KIND`` and
  ``claims(path) -> bool`` (a path on the control node: a folder, a file);
- ``plan(spec, settings, source=None) -> Plan``: what the source holds,
  cheaply, nothing decoded yet; ``spec`` is the user's ``-e dataset=`` value,
  ``source`` a downloaded file for a registered name fetched by URL;
- ``check(spec, settings, source=None) -> None``: the early check of
  ``site.yml``, validating the spec and the settings without preparing;
- ``validate_settings(settings) -> None`` (optional): the settings it uses,
  every bad one reported at once;
- ``SETTINGS`` (optional, empty if absent): the :class:`Settings` fields it
  reads besides ``shards`` and ``seed``; another field given a value of its
  own is reported as ignored (:func:`training.datasets.ignored_settings`);
- ``unread_settings(spec) -> dict[str, str]`` (optional): those of ``SETTINGS``
  that this source does not read, each with why (a folder with its own test
  split does not read ``test_fraction``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


class DatasetError(RuntimeError):
    """A dataset that is unknown, unreadable, malformed, or not prepared or staged.

    The message names the file, row or column at fault and the fix.
    """


class BadExample(ValueError):
    """One example that cannot be read (an image that does not decode); the message is why."""


#: Seed of every deterministic split and shard assignment.
DEFAULT_SEED = 20261130
#: Longest dataset name in an id: the id is a folder name on every node.
NAME_MAX = 40


@dataclass(frozen=True)
class Settings:
    """How to prepare a dataset; one field per ``training_data_*`` role variable.

    Attributes:
        image_size: (height, width) in pixels that images are resized to.
        color_mode: ``rgb`` (3 channels, RGB order) or ``grayscale`` (1 channel).
        test_fraction: share of each class held out for the test split, when
            the source has no test split of its own; 0 < f < 1.
        skip_bad_images: leave out images that do not decode (counted and
            named in the manifest) instead of refusing the dataset.
        label_column: the CSV column that holds the class.
        ignore_columns: CSV columns that are no features (a row number, an
            id, a timestamp): left out of the model's input, their cells
            not read.
        shards: number of training shard files, at least the number of workers.
        seed: seed of the split and of the shard assignment.
    """

    image_size: tuple[int, int] = (64, 64)
    color_mode: str = "rgb"
    test_fraction: float = 0.2
    skip_bad_images: bool = False
    label_column: str = "label"
    ignore_columns: tuple[str, ...] = ()
    shards: int = 12
    seed: int = DEFAULT_SEED


@dataclass
class Plan:
    """What a dataset module finds in its source, before anything is decoded.

    Attributes:
        name: the dataset's name in its id (a registered name, or a slug of
            the folder's or file's name: ``[a-z0-9_]``, at most 40 characters).
        kind: the module's kind (``mnist``, ``image_folder``, ``csv``, ...).
        digest: hex sha256 of the source's content: a changed file changes it.
        settings_used: the settings that shape the prepared content, by name.
        input_shape: shape of one example's features, e.g. (64, 64, 3).
        dtype: features' dtype in the shard records: ``uint8`` or ``float32``.
        scale: factor a task multiplies the features by (1/255 for uint8 pixels).
        classes: class names; label ``i`` is ``classes[i]``.
        train: the training split's items, opaque to everything but ``load``;
            ``str(item)`` names the item in messages (a file of the source).
        test: the test split's items.
        load: one item -> (features of ``input_shape`` in ``dtype``, label);
            raises :class:`BadExample` for an item that cannot be read.
        preprocessing: what a prediction must do to raw input, saved beside
            the trained model (``preprocessing.json``).
        ignored_files: files in the source that are not examples (a ``.txt``,
            hidden files), counted.
        source: where the dataset comes from, for the manifest and messages
            (empty: the user's spec).
        warnings: what the user should look at before trusting the model,
            each with its fix (a CSV column that reads as a row number).
    """

    name: str
    kind: str
    digest: str
    settings_used: dict[str, Any]
    input_shape: tuple[int, ...]
    dtype: str
    scale: float
    classes: list[str]
    train: list[Any]
    test: list[Any]
    load: Callable[[Any], tuple[np.ndarray, int]]
    preprocessing: dict[str, Any]
    ignored_files: int = 0
    source: str = ""
    warnings: list[str] = field(default_factory=list)


def test_fraction_problem(fraction: object) -> str | None:
    """Why ``test_fraction`` is refused, with the fix; None for a number strictly between 0 and 1.

    A bool is refused: ``-e test_fraction=true`` is a typo, not the fraction 1.
    """
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction < 1:
        return (
            f"test_fraction={fraction!r} is not strictly between 0 and 1. "
            "Fix: -e test_fraction=0.2 (a fifth of each class held out for the test)"
        )
    return None


def slug(text: str) -> str:
    """A dataset name from a folder's or file's name: ``[a-z0-9_]``, at most 40 characters.

    Letters are lower-cased, every run of other characters becomes one
    ``_``; an empty result is ``data``. ``"My Photos (2026)"`` -> ``my_photos_2026``.
    """
    name = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:NAME_MAX].strip("_")
    return name or "data"


def input_kind(preprocessing: dict[str, Any]) -> str:
    """What a run's model takes, from its ``preprocessing.json`` (as a dict).

    Returns:
        ``csv``: a CSV's rows; ``images``: images read as pixels (an image
        folder's model, MNIST's, an ``.npz``'s of ``uint8`` pixels of an
        image's shape: ``(height, width)`` or 1 or 3 channels); ``arrays``:
        an ``.npz``'s other features, float32 numbers whose range images do
        not have.
    """
    kind = preprocessing.get("kind")
    if kind == "csv":
        return "csv"
    if kind != "npz":
        return "images"
    shape = list(preprocessing.get("input_shape", []))
    image_shaped = len(shape) == 2 or (len(shape) == 3 and shape[-1] in (1, 3))
    return "images" if preprocessing.get("dtype") == "uint8" and image_shaped else "arrays"
