"""Prepared datasets on disk: fixed-length record shards and their manifest, ``dataset.json``.

A prepared dataset is a folder ``<cache_dir>/<dataset id>/``::

    dataset.json                   the manifest (:class:`Manifest`)
    train-00000-of-00012.rec ...   the training split, dealt over the shards
    test-00000-of-00001.rec ...    the test split, one file per at most 64 MiB

Each shard file is a sequence of records of ``record_bytes`` bytes, no
header: the label as a little-endian int32 (4 bytes), then the features of
``input_shape`` in C order, in ``dtype`` (``uint8`` pixels, or
little-endian ``float32``). ``tf.data.FixedLengthRecordDataset`` reads them
as a stream; it is one of the reader datasets that TensorFlow's FILE
auto-sharding recognises, so worker ``i`` of ``N`` reads the train shards
``j`` with ``j % N == i`` and nothing else. NumPy writes them: preparing
needs no TensorFlow on the control node.

The training examples are permuted with the seed and dealt round-robin to
the shards, so each shard is a random mix of the classes and shard sizes
differ by at most one. The id is the dataset's name and a key over the
format, the kind, the source's content digest and the settings that shape
the content (:func:`dataset_id`): an unchanged source is never prepared or
copied again, and one changed example gives a new id.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import math
import re
import shutil
import struct
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from training.datasets._base import BadExample, DatasetError, Plan, Settings, slug

log = logging.getLogger(__name__)

#: Version of the shard format and of ``dataset.json``; part of every dataset id.
FORMAT_VERSION = 1
#: The manifest's file name inside a prepared folder.
MANIFEST_FILE = "dataset.json"
#: Most bytes of one test shard file.
TEST_SHARD_BYTES = 64 << 20
#: Bytes of a record's label: a little-endian int32.
LABEL_BYTES = 4
#: Feature dtypes a record may hold.
DTYPES = ("uint8", "float32")
#: Unreadable examples a refusal lists by name (the count covers them all).
LISTED = 5
#: A dataset id: the name, a dash and 12 hex digits of the key.
ID_PATTERN = re.compile(r"[a-z0-9_]{1,40}-[0-9a-f]{12}")


@dataclass(frozen=True)
class ShardFile:
    """One shard file of a prepared dataset.

    Attributes:
        file: the file's name inside the dataset's folder.
        examples: records it holds.
        bytes: its size: ``examples * record_bytes``.
    """

    file: str
    examples: int
    bytes: int


@dataclass(frozen=True)
class Split:
    """The shards of the training or the test split.

    Attributes:
        examples: records in all its shards.
        shards: its shard files, in order.
    """

    examples: int
    shards: tuple[ShardFile, ...]


@dataclass(frozen=True)
class Manifest:
    """A prepared dataset: ``dataset.json`` as read, and the folder holding it.

    Attributes:
        id: ``<name>-<key>``, the folder's name (:func:`dataset_id`).
        name: the registered name, or a slug of the source folder's or file's name.
        kind: the module that prepared it (``mnist_5k``, ``image_folder``, ``csv``, ...).
        source: where it was prepared from, on the control node.
        digest: hex sha256 of the source's content.
        settings: the settings that shaped the content, by name (``seed``,
            ``shards`` and the module's own).
        input_shape: shape of one example's features.
        dtype: the features' dtype in the records, ``uint8`` or ``float32``.
        scale: a task multiplies the features by this (1/255 for pixels).
        record_bytes: bytes of one record, ``4 + prod(input_shape) * itemsize``.
        classes: class names; label ``i`` is ``classes[i]``.
        train: the training split's shards.
        test: the test split's shards.
        class_counts: ``{"train": [...], "test": [...]}``, examples per class.
        ignored_files: files of the source that are not examples.
        skipped: unreadable examples left out, ``{"file", "reason"}`` each.
        preprocessing: what a prediction must do to raw input.
        prepared: when it was prepared, ISO 8601 in UTC.
        path: the folder holding ``dataset.json`` and the shards.
        warnings: the plan's warnings (:class:`~training.datasets.Plan`),
            given again by each prepare from the source as it is now; not
            written to ``dataset.json``.
    """

    id: str
    name: str
    kind: str
    source: str
    digest: str
    settings: dict[str, Any]
    input_shape: tuple[int, ...]
    dtype: str
    scale: float
    record_bytes: int
    classes: tuple[str, ...]
    train: Split
    test: Split
    class_counts: dict[str, list[int]]
    ignored_files: int
    skipped: tuple[dict[str, str], ...]
    preprocessing: dict[str, Any]
    prepared: str
    path: Path = field(compare=False)
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def train_files(self, worker_index: int, num_workers: int) -> list[ShardFile]:
        """The train shards worker ``worker_index`` of ``num_workers`` reads.

        Those ``j`` with ``j % num_workers == worker_index``: what TensorFlow's
        FILE auto-shard policy gives that worker from the files in order.

        Raises:
            DatasetError: fewer shards than workers (a worker would read
                nothing), or an index outside ``0 .. num_workers - 1``.
        """
        shards = self.train.shards
        if num_workers > len(shards):
            raise DatasetError(
                f"dataset {self.id} has {len(shards)} training shard files for {num_workers} "
                "workers; every worker reads at least one. Fix: prepare it with at least as "
                f"many shards as workers (prepare-data --workers {num_workers}; train.yml does)"
            )
        if not 0 <= worker_index < num_workers:
            raise DatasetError(f"worker index {worker_index} is not in 0..{num_workers - 1}")
        return [s for j, s in enumerate(shards) if j % num_workers == worker_index]

    def all_train_files(self) -> list[ShardFile]:
        """Every train shard, in order."""
        return list(self.train.shards)

    def staged_train_files(self, data_dir: Path | str) -> list[ShardFile]:
        """The train shards this node holds in ``data_dir/<id>/``, in order.

        A node of an N-worker cluster holds only its workers' shards
        (:meth:`worker_train_files`); a process that trains alone on it, as
        ``step-bench`` does, reads those.

        Raises:
            DatasetError: the node holds no train shard of this dataset.
        """
        folder = Path(data_dir) / self.id
        staged = [s for s in self.train.shards if (folder / s.file).is_file()]
        if not staged:
            raise DatasetError(
                f"no training shard of dataset {self.id} is in {folder}. Fix: run site.yml "
                "(it stages each node's shards)"
            )
        return staged

    def test_files(self) -> list[ShardFile]:
        """Every test shard, in order."""
        return list(self.test.shards)

    @property
    def bytes(self) -> int:
        """Bytes of all the shard files."""
        return sum(s.bytes for s in (*self.train.shards, *self.test.shards))

    def spec(self) -> str:
        """The ``-e dataset=`` value that prepares this dataset: its name or its source."""
        from training.datasets import known_names

        return self.name if self.kind == self.name and self.name in known_names() else self.source

    def to_json(self) -> dict[str, Any]:
        """The manifest as ``dataset.json`` holds it."""
        return {
            "format": FORMAT_VERSION,
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "source": self.source,
            "digest": self.digest,
            "settings": self.settings,
            "input_shape": list(self.input_shape),
            "dtype": self.dtype,
            "scale": self.scale,
            "record_bytes": self.record_bytes,
            "classes": list(self.classes),
            "train": _split_json(self.train),
            "test": _split_json(self.test),
            "class_counts": self.class_counts,
            "ignored_files": self.ignored_files,
            "skipped": list(self.skipped),
            "preprocessing": self.preprocessing,
            "prepared": self.prepared,
        }


def _split_json(split: Split) -> dict[str, Any]:
    return {
        "examples": split.examples,
        "shards": [
            {"file": s.file, "examples": s.examples, "bytes": s.bytes} for s in split.shards
        ],
    }


def record_bytes(input_shape: tuple[int, ...], dtype: str) -> int:
    """Bytes of one record: the int32 label and the features."""
    return LABEL_BYTES + math.prod(input_shape) * (1 if dtype == "uint8" else 4)


def content_settings(plan: Plan, settings: Settings) -> dict[str, Any]:
    """The settings that shape a prepared dataset's content: the module's, seed and shards."""
    return {**plan.settings_used, "seed": settings.seed, "shards": settings.shards}


def dataset_id(plan: Plan, settings: Settings) -> str:
    """``<name>-<key>``: the key is the first 12 hex digits of a sha256.

    The sha256 is taken over :data:`FORMAT_VERSION`, the plan's kind, its
    content digest and :func:`content_settings`, as sorted JSON: the same
    source and settings give the same id on any machine, and a changed
    example or setting gives another.
    """
    key = json.dumps(
        {
            "format": FORMAT_VERSION,
            "kind": plan.kind,
            "digest": plan.digest,
            "settings": content_settings(plan, settings),
        },
        sort_keys=True,
        separators=(",", ":"),
    )
    return f"{slug(plan.name)}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def train_shard_name(j: int, count: int) -> str:
    """``train-00003-of-00012.rec``."""
    return f"train-{j:05d}-of-{count:05d}.rec"


def test_shard_name(j: int, count: int) -> str:
    """``test-00000-of-00001.rec``."""
    return f"test-{j:05d}-of-{count:05d}.rec"


class _Writer:
    """Appends records to a split's shard files and counts what it wrote."""

    def __init__(self, plan: Plan, folder: Path, names: list[str], stack: ExitStack) -> None:
        import numpy as np

        self.plan = plan
        self.shape = tuple(plan.input_shape)
        self.dtype = np.dtype(plan.dtype).newbyteorder("<")
        self.names = names
        self.handles = [
            stack.enter_context((folder / name).open("wb", buffering=1 << 20)) for name in names
        ]
        self.examples = [0] * len(names)
        self.class_counts = [0] * len(plan.classes)

    def write(self, shard: int, item: Any, features: Any, label: int) -> None:
        import numpy as np

        array = np.asarray(features)
        if array.shape != self.shape:
            raise DatasetError(
                f"{item}: features of shape {array.shape}; the dataset's input shape is "
                f"{self.shape} (a bug of the {self.plan.kind} module)"
            )
        label = int(label)
        if not 0 <= label < len(self.plan.classes):
            raise DatasetError(
                f"{item}: label {label} is not a class index 0..{len(self.plan.classes) - 1} "
                f"(a bug of the {self.plan.kind} module)"
            )
        self.handles[shard].write(
            struct.pack("<i", label) + np.ascontiguousarray(array, self.dtype).tobytes()
        )
        self.examples[shard] += 1
        self.class_counts[label] += 1

    def split(self, size: int) -> Split:
        return Split(
            sum(self.examples),
            tuple(
                ShardFile(name, n, n * size)
                for name, n in zip(self.names, self.examples, strict=True)
            ),
        )


def unreadable(source: str, bad: list[tuple[str, str]]) -> DatasetError:
    """The refusal of a source with unreadable examples: ``bad`` is ``[(file, reason)]``.

    It lists the first :data:`LISTED` with their reasons, the count, and the fix.
    """
    listed = "; ".join(f"{file} ({reason})" for file, reason in bad[:LISTED])
    more = f"; and {len(bad) - LISTED} more" if len(bad) > LISTED else ""
    them = "them" if len(bad) != 1 else "it"
    return DatasetError(
        f"{source}: {len(bad)} file{'s' if len(bad) != 1 else ''} cannot be read: "
        f"{listed}{more}. Fix: replace or remove {them}, or leave {them} out with "
        "-e skip_bad_images=true (the run names what it skipped)"
    )


def write_prepared(plan: Plan, settings: Settings, cache_dir: Path) -> Manifest:
    """Decode every example of ``plan`` into the shard files of ``<cache_dir>/<id>/``.

    Streams: one example at a time is loaded through ``plan.load`` and
    appended to its shard, so memory does not grow with the dataset. The
    training items are permuted with ``settings.seed`` and the readable ones
    dealt round-robin to ``settings.shards`` files; the test items keep
    their order, in as many files as :data:`TEST_SHARD_BYTES` needs. All is
    written into ``<cache_dir>/.<id>.partial/``, renamed to ``<cache_dir>/<id>/``
    only when complete: a refusal or a crash never leaves a dataset that
    looks prepared.

    Args:
        plan: what the module found in the source.
        settings: ``shards``, ``seed`` and ``skip_bad_images`` are used here.
        cache_dir: the control node's folder of prepared datasets.

    Returns:
        The manifest written to ``dataset.json``.

    Raises:
        DatasetError: unreadable examples (:class:`BadExample`) without
            ``skip_bad_images``, naming the first five with their reasons,
            the count and the fix; a class with no training example, or no
            test example at all, after skipping; fewer training examples
            than shards; an empty split.
    """
    import numpy as np

    if settings.shards < 1:
        raise DatasetError(f"shards={settings.shards} must be 1 or more")
    if not plan.train or not plan.test:
        empty = "training" if not plan.train else "test"
        raise DatasetError(
            f"{plan.source}: the {empty} split is empty. Fix: a source with examples of every "
            "class in both splits"
        )
    if plan.dtype not in DTYPES:
        raise DatasetError(f"dtype {plan.dtype} is not one of {', '.join(DTYPES)}")
    if len(plan.train) < settings.shards:
        raise DatasetError(
            f"{plan.source}: {len(plan.train)} training examples cannot fill {settings.shards} "
            "shard files (one a worker at least). Fix: fewer shards (-e training_data_shards=N, "
            "at least the number of workers), or more examples"
        )
    dataset = dataset_id(plan, settings)
    size = record_bytes(tuple(plan.input_shape), plan.dtype)
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = cache_dir / f".{dataset}.partial"
    final = cache_dir / dataset
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        bad: list[tuple[str, str]] = []  # file, reason
        train_names = [train_shard_name(j, settings.shards) for j in range(settings.shards)]
        test_count = max(1, math.ceil(len(plan.test) * size / TEST_SHARD_BYTES))
        per_test_file = math.ceil(len(plan.test) / test_count)
        test_names = [test_shard_name(j, test_count) for j in range(test_count)]
        with ExitStack() as stack:
            train = _Writer(plan, partial, train_names, stack)
            order = np.random.default_rng(settings.seed).permutation(len(plan.train))
            dealt = 0
            for index in order:
                item = plan.train[int(index)]
                try:
                    features, label = plan.load(item)
                except BadExample as err:
                    bad.append((str(item), str(err)))
                    continue
                train.write(dealt % settings.shards, item, features, label)
                dealt += 1
            test = _Writer(plan, partial, test_names, stack)
            kept = 0
            for item in plan.test:
                try:
                    features, label = plan.load(item)
                except BadExample as err:
                    bad.append((str(item), str(err)))
                    continue
                test.write(min(kept // per_test_file, test_count - 1), item, features, label)
                kept += 1
        bad.sort()  # by file: the training split was read in a random order
        source = plan.source
        if bad and not settings.skip_bad_images:
            raise unreadable(source, bad)
        lost = [c for c, n in zip(plan.classes, train.class_counts, strict=True) if n == 0]
        if lost:
            why = f" after skipping {len(bad)} unreadable file(s)" if bad else ""
            raise DatasetError(
                f"{source}: class{'es' if len(lost) > 1 else ''} {', '.join(map(repr, lost))} "
                f"{'have' if len(lost) > 1 else 'has'} no training example{why}. Fix: give "
                "every class readable examples in the training split"
            )
        if sum(test.examples) == 0:
            raise DatasetError(
                f"{source}: no test example is left after skipping {len(bad)} unreadable "
                "file(s). Fix: replace them with readable ones"
            )
        if min(train.examples) == 0:
            raise DatasetError(
                f"{source}: {sum(train.examples)} readable training examples cannot fill "
                f"{settings.shards} shard files. Fix: fewer shards (-e training_data_shards=N, at "
                "least the number of workers), or more examples"
            )
        manifest = Manifest(
            id=dataset,
            name=slug(plan.name),
            kind=plan.kind,
            source=source,
            digest=plan.digest,
            settings=content_settings(plan, settings),
            input_shape=tuple(int(n) for n in plan.input_shape),
            dtype=plan.dtype,
            scale=float(plan.scale),
            record_bytes=size,
            classes=tuple(plan.classes),
            train=train.split(size),
            test=test.split(size),
            class_counts={"train": train.class_counts, "test": test.class_counts},
            ignored_files=plan.ignored_files,
            skipped=tuple({"file": file, "reason": reason} for file, reason in bad),
            preprocessing=plan.preprocessing,
            prepared=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            path=final,
        )
        (partial / MANIFEST_FILE).write_text(
            json.dumps(manifest.to_json(), indent=1) + "\n", encoding="utf-8"
        )
        if final.exists():  # an invalid earlier copy: valid ones are never prepared again
            shutil.rmtree(final)
        partial.rename(final)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return manifest


def _stage_fix(dataset: str, name: str = "", source: str = "") -> str:
    """How to get dataset ``dataset`` onto a node: the playbook that stages it."""
    from training.datasets import known_names

    if name and name in known_names() and (dataset == name or dataset.startswith(f"{name}-")):
        spec = name
    elif source:
        spec = source
    else:
        spec = "<the folder, .csv or .npz file>"
    return (
        f"stage it: ansible-playbook train.yml -e dataset={spec} (or site.yml), which prepares "
        "it on the control node and copies each node its shards"
    )


def _missing(data_dir: Path | str, dataset: str, path: Path) -> str:
    """Why ``dataset`` is not in ``data_dir``, and how to stage it."""
    from training.datasets import known_names

    if ID_PATTERN.fullmatch(dataset):
        name = dataset.rsplit("-", 1)[0]
        what = f"dataset {dataset} is not in {data_dir}: {path} is missing"
    elif dataset in known_names():
        name = dataset
        what = f"dataset {dataset} is not prepared in {data_dir} (no {dataset}-<key>/ folder)"
    else:
        return (
            f"dataset={dataset} is neither a prepared dataset in {data_dir} (no {path}) nor a "
            f"dataset name ({', '.join(known_names())}). Fix: -e dataset=mnist_5k, or the path "
            "of a folder of images, a .csv or an .npz file on the control node"
        )
    return f"{what}. Fix: {_stage_fix(dataset, name)}"


def _parse(data: Any, folder: Path) -> Manifest:
    """A :class:`Manifest` from ``dataset.json``'s data; ValueError, KeyError or TypeError."""
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("format") != FORMAT_VERSION:
        raise ValueError(f"format {data.get('format')!r}, this code reads {FORMAT_VERSION}")

    def text(key: str) -> str:
        value = data[key]
        if not isinstance(value, str):
            raise TypeError(f"{key} is not a string")
        return value

    def number(value: Any, key: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise TypeError(f"{key} is not a whole number")
        return value

    def split(key: str) -> Split:
        raw = data[key]
        shards = tuple(
            ShardFile(str(s["file"]), number(s["examples"], key), number(s["bytes"], key))
            for s in raw["shards"]
        )
        if not shards or any("/" in s.file or s.file.startswith(".") for s in shards):
            raise ValueError(f"{key}: no shards, or a shard file name that is a path")
        if sum(s.examples for s in shards) != number(raw["examples"], key):
            raise ValueError(f"{key}: examples do not add up over its shards")
        return Split(raw["examples"], shards)

    input_shape = tuple(number(n, "input_shape") for n in data["input_shape"])
    dtype = text("dtype")
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    size = number(data["record_bytes"], "record_bytes")
    if size != record_bytes(input_shape, dtype):
        raise ValueError(f"record_bytes {size} does not fit input_shape {input_shape} of {dtype}")
    train, test = split("train"), split("test")
    for s in (*train.shards, *test.shards):
        if s.bytes != s.examples * size:
            raise ValueError(f"{s.file}: {s.bytes} bytes is not {s.examples} records of {size}")
    classes = tuple(str(c) for c in data["classes"])
    if len(classes) < 2:
        raise ValueError("fewer than 2 classes")
    return Manifest(
        id=text("id"),
        name=text("name"),
        kind=text("kind"),
        source=text("source"),
        digest=text("digest"),
        settings=dict(data["settings"]),
        input_shape=input_shape,
        dtype=dtype,
        scale=float(data["scale"]),
        record_bytes=size,
        classes=classes,
        train=train,
        test=test,
        class_counts={k: [int(n) for n in v] for k, v in data["class_counts"].items()},
        ignored_files=number(data.get("ignored_files", 0), "ignored_files"),
        skipped=tuple(
            {"file": str(s["file"]), "reason": str(s["reason"])} for s in data.get("skipped", [])
        ),
        preprocessing=dict(data["preprocessing"]),
        prepared=text("prepared"),
        path=folder,
    )


def read_manifest(data_dir: Path | str, dataset_id: str) -> Manifest:
    """Read ``<data_dir>/<dataset_id>/dataset.json``; the shard files are not looked at.

    Raises:
        DatasetError: the manifest is missing (the message says how to stage
            it), unreadable, malformed, of another format version, or names
            another id.
    """
    if not dataset_id or "/" in dataset_id or dataset_id.startswith("."):
        raise DatasetError(
            f"dataset={dataset_id!r} is not a dataset name or id. Fix: -e dataset=mnist_5k, or "
            "the path of a folder of images, a .csv or an .npz file on the control node"
        )
    folder = Path(data_dir) / dataset_id
    path = folder / MANIFEST_FILE
    name = dataset_id.rsplit("-", 1)[0]
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DatasetError(_missing(data_dir, dataset_id, path)) from None
    except OSError as err:
        raise DatasetError(f"{path} cannot be read ({err.strerror})") from None
    try:
        manifest = _parse(json.loads(text), folder)
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        reason = f"{type(err).__name__}: {err}" if isinstance(err, KeyError) else str(err)
        raise DatasetError(
            f"{path} is not a valid dataset manifest ({reason}). Fix: remove the folder "
            f"{folder} and " + _stage_fix(dataset_id, name)
        ) from None
    if manifest.id != dataset_id:
        raise DatasetError(
            f"{path} describes dataset {manifest.id}, not {dataset_id}. Fix: remove the folder "
            f"{folder} and " + _stage_fix(dataset_id, name)
        )
    return manifest


def verify_files(manifest: Manifest, files: Iterable[ShardFile]) -> None:
    """Check that shard files are in the manifest's folder with the sizes it gives.

    Raises:
        DatasetError: naming every missing file and every file of another
            size, and the fix (stage the dataset again).
    """
    problems = []
    for shard in files:
        path = manifest.path / shard.file
        try:
            size = path.stat().st_size
        except OSError:
            problems.append(f"{path} is missing")
            continue
        if size != shard.bytes:
            problems.append(f"{path} has {size} bytes, not {shard.bytes}")
    if problems:
        raise DatasetError(
            f"dataset {manifest.id}: {'; '.join(problems)}. Fix: "
            + _stage_fix(manifest.id, manifest.name, manifest.source)
        )


def valid_prepared(cache_dir: Path, dataset_id: str) -> Manifest | None:
    """The manifest of ``<cache_dir>/<dataset_id>/`` if it and all its shards are whole, else None.

    A folder that is there but damaged is logged: it is prepared again.
    """
    if not (cache_dir / dataset_id / MANIFEST_FILE).exists():
        return None
    try:
        manifest = read_manifest(cache_dir, dataset_id)
        verify_files(manifest, (*manifest.train.shards, *manifest.test.shards))
    except DatasetError as err:
        log.warning("%s; preparing it again", err)
        return None
    return manifest
