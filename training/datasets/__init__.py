"""Dataset registry: every module in this package is one kind of source.

A user names a dataset with ``-e dataset=...``: a registered name (``mnist``,
``mnist_5k``: a module with ``NAME``) or a path on the control node, which
the module whose ``claims(path)`` is true takes (a folder of images, a CSV
file, an ``.npz`` file). A module says, in its docstring and its
:class:`Plan`, its input shape, its class names, how the control node
prepares it and how a task loads it (the protocol: :mod:`training.datasets._base`).

The control node prepares a dataset once (:func:`prepare`) into shard files
of fixed-length records (:mod:`training.datasets.shards`) in
``<cache_dir>/<dataset id>/``; each node receives only the shards its tasks
read, and tasks stream them with ``tf.data`` (:mod:`training.datasets.pipeline`).
Importing this package does no work and imports neither TensorFlow nor OpenCV.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import pkgutil
import re
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, overload

from training.datasets._base import (
    DEFAULT_SEED,
    BadExample,
    DatasetError,
    Plan,
    Settings,
    slug,
)
from training.datasets.shards import (
    DTYPES,
    ID_PATTERN,
    MANIFEST_FILE,
    Manifest,
    ShardFile,
    Split,
    dataset_id,
    read_manifest,
    unreadable,
    valid_prepared,
    verify_files,
    write_prepared,
)

__all__ = [
    "DEFAULT_SEED",
    "BadExample",
    "DatasetError",
    "Manifest",
    "Plan",
    "Settings",
    "ShardFile",
    "Split",
    "check_settings",
    "dataset_id",
    "describe",
    "ignored_settings",
    "known_names",
    "prepare",
    "prepared_id",
    "read_manifest",
    "resolve",
    "slug",
    "verify_files",
]

#: Modules of this package that are not kinds of dataset.
_NOT_KINDS = ("shards", "pipeline", "prune")


def _modules() -> list[ModuleType]:
    return [
        importlib.import_module(f"{__name__}.{m.name}")
        for m in pkgutil.iter_modules(__path__)
        if not m.name.startswith("_") and m.name not in _NOT_KINDS
    ]


def known_names() -> list[str]:
    """The registered dataset names (modules with ``NAME``), sorted."""
    return sorted(m.NAME for m in _modules() if hasattr(m, "NAME"))


def resolve(spec: str) -> ModuleType:
    """The module that prepares dataset ``spec``: a registered name or a control-node path.

    Raises:
        DatasetError: an empty spec, a name that is not registered and a path
            that does not exist, or that no module takes; the message lists the
            choices.
    """
    if not spec.strip():
        # Path("") is the current folder: an empty -e dataset= must not prepare it.
        raise DatasetError(
            f"dataset is empty. Fix: -e dataset=mnist_5k ({', '.join(known_names())}), or the "
            "path of a folder of images (one subfolder per class), a .csv or an .npz file"
        )
    modules = _modules()
    for module in modules:
        if getattr(module, "NAME", None) == spec:
            return module
    path = Path(spec).expanduser()
    if "/" not in spec and not path.exists():
        raise DatasetError(
            f"dataset={spec} is unknown: not a dataset name ({', '.join(known_names())}) and no "
            "such file or folder. Fix: -e dataset=mnist_5k, or the path of a folder of images "
            "(one subfolder per class), a .csv or an .npz file on the control node"
        )
    if not path.exists():
        raise DatasetError(
            f"dataset={spec}: no such file or folder on the control node. Fix: give the path "
            "of a folder of images (one subfolder per class), a .csv or an .npz file"
        )
    for module in modules:
        claims = getattr(module, "claims", None)
        if claims is not None and claims(path):
            return module
    raise DatasetError(
        f"dataset={spec}: a {'folder' if path.is_dir() else 'file'} that no kind of dataset "
        "takes. Fix: a folder of images (one subfolder per class), a .csv or an .npz file"
    )


#: The :class:`Settings` fields a kind of dataset may read (its ``SETTINGS``); shards and
#: seed every kind reads.
KIND_SETTINGS = (
    "image_size",
    "color_mode",
    "test_fraction",
    "skip_bad_images",
    "label_column",
    "ignore_columns",
)


def ignored_settings(spec: str, settings: Settings) -> list[str]:
    """Why each setting given a value of its own is ignored by dataset ``spec``, with the fix.

    A setting is given when it differs from :class:`Settings`' default; it is
    ignored when the kind of ``spec`` does not list it in ``SETTINGS``
    (``-e image_size=32`` with ``mnist_5k``, whose digits are 28x28 as shipped), or
    when its module's ``unread_settings(spec)`` names it (``test_fraction`` with a
    folder that has its own ``train/`` and ``test/``).
    Such a value is valid for another kind, so the run goes on; the role warns.

    Returns:
        One sentence (str) per ignored setting, in :data:`KIND_SETTINGS` order; [] when
        none is.

    Raises:
        DatasetError: ``spec`` is no dataset (:func:`resolve`).
    """
    module = resolve(spec)
    unread: dict[str, str] = getattr(module, "unread_settings", lambda _spec: {})(spec)
    reads = set(getattr(module, "SETTINGS", ())) - set(unread)
    default = Settings()
    name = getattr(module, "NAME", None) or f"the {module.KIND} dataset {Path(spec).name}"
    messages = []
    for setting in KIND_SETTINGS:
        value = getattr(settings, setting)
        if setting in reads or value == getattr(default, setting):
            continue
        if setting == "ignore_columns":
            shown = ",".join(value)
        else:
            shown = "x".join(map(str, value)) if isinstance(value, tuple) else str(value).lower()
        if setting in unread:
            messages.append(
                f"{setting}={shown} is ignored: {unread[setting]}. Fix: leave out {setting}"
            )
            continue
        kinds = [m.KIND for m in _modules() if setting in getattr(m, "SETTINGS", ())]
        messages.append(
            f"{setting}={shown} is ignored: {name} does not read it (only "
            f"{' and '.join(kinds)} datasets do). Fix: leave out {setting}, or give a dataset "
            "that reads it"
        )
    return messages


def check_settings(settings: Settings) -> None:
    """Check the settings every kind of dataset uses (shards, seed), all at once.

    Raises:
        DatasetError: naming each bad setting, its value and the fix.
    """
    problems = []
    if isinstance(settings.shards, bool) or not isinstance(settings.shards, int):
        problems.append(f"shards={settings.shards!r} is not a whole number. Fix: shards=12")
    elif not 1 <= settings.shards <= 10_000:
        problems.append(
            f"shards={settings.shards} must be 1 to 10000 (at least the number of workers). "
            "Fix: shards=12"
        )
    if isinstance(settings.seed, bool) or not isinstance(settings.seed, int) or settings.seed < 0:
        problems.append(f"seed={settings.seed!r} is not a whole number 0 or more")
    if not isinstance(settings.skip_bad_images, bool):
        problems.append(
            f"skip_bad_images={settings.skip_bad_images!r} is not true or false. "
            "Fix: -e skip_bad_images=true"
        )
    if problems:
        raise DatasetError("; ".join(problems))


def _check_plan(plan: Plan, module: ModuleType) -> None:
    where = f"{module.__name__}.plan()"
    problems = []
    if not re.fullmatch(r"[a-z0-9_]{1,40}", plan.name):
        problems.append(f"name {plan.name!r} is not [a-z0-9_], 1 to 40 characters")
    if not plan.input_shape or any(
        isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in plan.input_shape
    ):
        problems.append(f"input_shape {plan.input_shape!r} is not a shape of positive sizes")
    if plan.dtype not in DTYPES:
        problems.append(f"dtype {plan.dtype!r} is not one of {', '.join(DTYPES)}")
    if len(plan.classes) < 2 or len(set(plan.classes)) != len(plan.classes):
        problems.append(f"classes {plan.classes!r} are not 2 or more distinct names")
    if problems:
        raise DatasetError(f"{where}: {'; '.join(problems)}")


@overload
def prepare(
    spec: str,
    cache_dir: Path,
    settings: Settings,
    source: Path | None = None,
    check_only: Literal[False] = False,
) -> tuple[Manifest, bool]: ...


@overload
def prepare(
    spec: str,
    cache_dir: Path,
    settings: Settings,
    source: Path | None = None,
    *,
    check_only: Literal[True],
) -> tuple[Manifest | None, bool]: ...


def prepare(
    spec: str,
    cache_dir: Path,
    settings: Settings,
    source: Path | None = None,
    check_only: bool = False,
) -> tuple[Manifest | None, bool]:
    """Prepare dataset ``spec`` into ``<cache_dir>/<id>/`` unless a whole copy is there.

    The module's plan gives the id (:func:`dataset_id`): for an unchanged
    source and settings that is the id of the folder already prepared, which
    is returned as it is; only what the id needs (the source's content
    digest) has been read. Otherwise every example is decoded into shards
    (:func:`training.datasets.shards.write_prepared`).

    Args:
        spec: a registered name or the path of a folder or file on the control node.
        cache_dir: the control node's folder of prepared datasets.
        settings: how to prepare it; ``shards`` is the number of training
            shard files (at least the number of workers).
        source: the downloaded file, for a registered dataset fetched by URL (``mnist``).
        check_only: prepare nothing: validate the spec and the settings (the
            module's ``check``) and return ``(the manifest, False)`` if a
            whole prepared copy is there, else ``(None, False)``.

    Returns:
        The manifest and whether it was written now. A manifest prepared
        before counts the source's files that are not examples as they are
        now (``ignored_files``), since they do not change its id.

    Raises:
        DatasetError: an unknown spec, bad settings (also those of other
            kinds of dataset than ``spec``'s), a source that is not a
            dataset, unreadable examples (unless skipped), each naming the
            file, row or column and the fix.
    """
    check_settings(settings)
    module = resolve(spec)
    named = getattr(module, "NAME", None) == spec
    # Every kind's settings, this one's first: a value no kind could use (image_size=7
    # with mnist_5k) is a typo to refuse, not a setting to ignore.
    for kind in [module, *(m for m in _modules() if m is not module)]:
        validate = getattr(kind, "validate_settings", None)
        if validate is not None:
            validate(settings)
    if check_only:
        check = getattr(module, "check", None)
        if check is not None:
            check(spec, settings, source)
    plan = module.plan(spec, settings, source)
    _check_plan(plan, module)
    if not plan.source:
        plan.source = spec if named else str(Path(spec).expanduser().resolve())
    cache_dir = Path(cache_dir)
    prepared = valid_prepared(cache_dir, dataset_id(plan, settings))
    if prepared is not None and prepared.skipped and not settings.skip_bad_images:
        # Prepared before with skip_bad_images: its files are still unreadable, and
        # leaving them out needs the user's say-so each time, as on the first prepare.
        raise unreadable(plan.source, [(s["file"], s["reason"]) for s in prepared.skipped])
    if prepared is not None:
        if not check_only:
            os.utime(prepared.path)  # used now: prune-data keeps the most recently used
        # Files that are not examples are no part of the id: count them as they are now.
        found = dataclasses.replace(
            prepared, ignored_files=plan.ignored_files, warnings=tuple(plan.warnings)
        )
        return found, False
    if check_only:
        return None, False
    written = write_prepared(plan, settings, cache_dir)
    return dataclasses.replace(written, warnings=tuple(plan.warnings)), True


def describe(spec: str, settings: Settings, source: Path | None = None) -> dict[str, Any]:
    """What dataset ``spec`` would hold, without preparing it.

    The module's plan: its source listed and hashed, nothing decoded. ``train.yml
    --check`` builds the model for this shape, and checks the training split
    against the global batch, before a dataset is prepared.

    Returns:
        The keys of a prepared dataset's ``prepare-data`` output that need no
        decoding: ``input_shape`` (list of int), ``classes`` (list of str),
        ``train_examples`` and ``test_examples`` (int), ``warnings`` (list of
        str), e.g. ``{"input_shape": [64, 64, 3], "classes": ["cat", "dog"],
        "train_examples": 72, "test_examples": 18, "warnings": []}``. The
        counts are upper bounds: a file that does not decode is found only
        when the dataset is prepared.

    Raises:
        DatasetError: as :func:`prepare` (an unknown spec, bad settings, no dataset).
    """
    module = resolve(spec)
    plan = module.plan(spec, settings, source)
    _check_plan(plan, module)
    return {
        "input_shape": list(plan.input_shape),
        "classes": list(plan.classes),
        "train_examples": len(plan.train),
        "test_examples": len(plan.test),
        "warnings": list(plan.warnings),
    }


def prepared_id(data_dir: Path | str, dataset: str) -> str:
    """The prepared dataset that ``--dataset`` names in ``data_dir``.

    A dataset id (a folder with ``dataset.json``) is itself; a registered
    name (``mnist_5k``) is the newest of its prepared folders there, by the
    manifests' ``prepared`` time. Anything else is returned unchanged, for
    :func:`read_manifest` to refuse with its fix.
    """
    folder = Path(data_dir)
    if (folder / dataset / MANIFEST_FILE).is_file() or dataset not in known_names():
        return dataset
    newest: tuple[str, str] | None = None
    for manifest in folder.glob(f"{dataset}-*/{MANIFEST_FILE}"):
        if not ID_PATTERN.fullmatch(manifest.parent.name):
            continue
        try:
            when = str(json.loads(manifest.read_text(encoding="utf-8")).get("prepared", ""))
        except (OSError, ValueError, AttributeError):
            when = ""
        if newest is None or (when, manifest.parent.name) > newest:
            newest = (when, manifest.parent.name)
    return newest[1] if newest else dataset
