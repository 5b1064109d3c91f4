"""A folder of images on the control node, one subfolder per class.

The layout is that of Keras' ``image_dataset_from_directory``::

    photos/                      photos/
      cat/  1.jpg 2.png ...        train/  cat/ ...  dog/ ...
      dog/  a/3.JPG b.bmp ...      test/   cat/ ...  dog/ ...

Class names are the class folders' names, sorted; label ``i`` is
``classes[i]``. Images (``.jpg``, ``.jpeg``, ``.png``, ``.bmp`` in any letter
case) are found recursively inside each class folder. Hidden files and
folders (names starting with ``.``) and files of other extensions are not
examples: they are ignored and counted (``ignored_files``), and they are not
part of the digest, so editing a ``notes.txt`` prepares nothing again.

Split: a folder with its own ``train/`` and ``test/`` folders (the same class
folders in both) is used as given. Otherwise each class is split on its own
(stratified): its files sorted by relative path, permuted with
``numpy.random.default_rng(seed)``, ``round(n * test_fraction)`` of them to
the test split but at least one to each split; a class of one image goes to
the training split.

Input shape: ``(height, width, 3)`` for ``color_mode=rgb`` (RGB order) or
``(height, width, 1)`` for ``grayscale``, uint8, scale 1/255.

The control node prepares it: :func:`plan` walks the folder and hashes the
images, then ``training.datasets.prepare`` decodes each one through
:func:`load_image` (OpenCV: decode, BGR to RGB or grayscale, ``cv2.resize``
with ``INTER_AREA``, the filters a prediction applies with ``cv2.imread``)
into shard records. A file that does not decode is a
:class:`~training.datasets.BadExample` with its reason. Tasks load the
shards, never the images.
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training.datasets import BadExample, DatasetError, Plan, Settings, slug
from training.datasets._base import test_fraction_problem
from training.progress import plural

if TYPE_CHECKING:
    import numpy as np

KIND = "image_folder"
#: The settings this kind reads (the protocol in :mod:`training.datasets._base`).
SETTINGS = ("image_size", "color_mode", "test_fraction", "skip_bad_images")

#: File suffixes (compared in lower case) that are images.
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp")
#: Smallest and largest side, in pixels, that ``image_size`` accepts.
MIN_SIDE, MAX_SIDE = 8, 1024
COLOR_MODES = ("rgb", "grayscale")

_JPEG_START = b"\xff\xd8\xff"
_JPEG_END = b"\xff\xd9"
_PNG_START = b"\x89PNG\r\n\x1a\n"
#: The IEND chunk that ends every PNG: type and its fixed CRC (PNG spec, 11.2.5).
_PNG_END = b"IEND\xaeB`\x82"
#: Byte values that may pad a file after its end marker (some cameras and tools add them).
_PADDING = (0x00, 0x09, 0x0A, 0x0D, 0x20)


@dataclass(frozen=True)
class Item:
    """One image of the folder.

    Attributes:
        path: the file's absolute path.
        rel: its path relative to the dataset folder, with ``/`` separators;
            ``str(item)`` is this, which names the file in messages.
        label: index of its class in the plan's ``classes``.
    """

    path: Path
    rel: str
    label: int

    def __str__(self) -> str:
        return self.rel


@dataclass
class _Class:
    name: str
    files: list[Path]


def claims(path: Path) -> bool:
    """True for a directory: every folder given as a dataset is an image folder."""
    return path.is_dir()


def unread_settings(spec: str) -> dict[str, str]:
    """The settings of :data:`SETTINGS` this folder does not read, each with why.

    A folder with its own ``train/`` and ``test/`` keeps its split: ``test_fraction``
    does not apply (the protocol in :mod:`training.datasets._base`).
    """
    root = Path(spec).expanduser()
    if (root / "train").is_dir() and (root / "test").is_dir():
        return {"test_fraction": f"{root.name}/ has its own train/ and test/ splits"}
    return {}


def validate_settings(settings: Settings) -> None:
    """Check the settings this kind of dataset uses, all at once.

    Raises:
        DatasetError: naming each bad variable (``image_size``, ``color_mode``,
            ``test_fraction``), its value and the fix.
    """
    problems = []
    size = settings.image_size
    if not (
        isinstance(size, tuple | list)
        and len(size) == 2
        and all(isinstance(s, int) and not isinstance(s, bool) for s in size)
        and all(MIN_SIDE <= s <= MAX_SIDE for s in size)
    ):
        shown = "x".join(map(str, size)) if isinstance(size, tuple | list) else repr(size)
        problems.append(
            f"image_size={shown} is not (height, width) with each side {MIN_SIDE} to "
            f"{MAX_SIDE} pixels. Fix: -e image_size=64 (a square) or -e image_size=96x128 "
            "(height x width)"
        )
    if settings.color_mode not in COLOR_MODES:
        problems.append(
            f"color_mode={settings.color_mode!r} is not one of {', '.join(COLOR_MODES)}. "
            "Fix: -e color_mode=rgb or -e color_mode=grayscale"
        )
    fraction = test_fraction_problem(settings.test_fraction)
    if fraction:
        problems.append(fraction)
    if problems:
        raise DatasetError("; ".join(problems))


def check(spec: str, settings: Settings, source: Path | None = None) -> None:
    """Validate the settings and the folder's layout without reading any image.

    Raises:
        DatasetError: a bad setting, or a folder that is not a dataset (see :func:`plan`).
    """
    validate_settings(settings)
    _layout(_root(spec))


def plan(spec: str, settings: Settings, source: Path | None = None) -> Plan:
    """Find the images of folder ``spec``, split them and hash them; nothing is decoded.

    Args:
        spec: the folder's path on the control node.
        settings: ``image_size``, ``color_mode``, ``test_fraction`` and ``seed``
            are used.
        source: not used (a folder is its own source).

    Returns:
        The plan: items are :class:`Item`, ``load`` is :func:`load_image`
        bound to the image size and colour mode.

    Raises:
        DatasetError: a bad setting; a folder with no class folders, with only
            one, with a class folder holding no image, or with ``train/`` and
            ``test/`` whose classes differ; each names the folder and the fix.
    """
    validate_settings(settings)
    root = _root(spec)
    splits, ignored = _layout(root)
    height, width = settings.image_size
    channels = 3 if settings.color_mode == "rgb" else 1
    if len(splits) == 2:
        train_classes, test_classes = splits
        classes = [c.name for c in train_classes]
        train = _items(root, train_classes)
        test = _items(root, test_classes)
    else:
        (all_classes,) = splits
        classes = [c.name for c in all_classes]
        train, test = _split(root, all_classes, settings.test_fraction, settings.seed)
    settings_used: dict[str, Any] = {
        "image_size": [height, width],
        "color_mode": settings.color_mode,
    }
    if len(splits) == 1:
        settings_used["test_fraction"] = settings.test_fraction
    settings_used["seed"] = settings.seed
    scale = 1 / 255
    return Plan(
        name=slug(root.name),
        kind=KIND,
        digest=_digest(sorted(train + test, key=lambda item: item.rel)),
        settings_used=settings_used,
        input_shape=(height, width, channels),
        dtype="uint8",
        scale=scale,
        classes=classes,
        train=train,
        test=test,
        load=functools.partial(load_image, size=(height, width), color_mode=settings.color_mode),
        preprocessing={
            "kind": KIND,
            "image_size": [height, width],
            "color_mode": settings.color_mode,
            "channel_order": "RGB" if channels == 3 else "grayscale",
            "resize": "cv2.INTER_AREA",
            "scale": scale,
            "classes": classes,
        },
        ignored_files=ignored,
        source=str(root),
    )


def load_image(item: Item, *, size: tuple[int, int], color_mode: str) -> tuple[np.ndarray, int]:
    """Decode and resize one image with OpenCV.

    Args:
        item: the image.
        size: (height, width) in pixels.
        color_mode: ``rgb`` or ``grayscale``.

    Returns:
        (uint8 array of shape (height, width, 3) in RGB order, or
        (height, width, 1) for grayscale; the item's label).

    Raises:
        BadExample: "empty file", "truncated JPEG (no end-of-image marker)",
            "truncated PNG (no IEND chunk)", "not a decodable image", or the
            OS error of a file that cannot be read.
    """
    import cv2
    import numpy as np

    try:
        # np.fromfile + imdecode rather than imread: imread fails on non-ASCII
        # paths on some platforms, and the bytes are needed for the checks anyway.
        data = np.fromfile(item.path, dtype=np.uint8)
    except OSError as exc:
        raise BadExample(f"cannot be read ({exc.strerror or exc})") from exc
    _check_complete(data)
    flag = cv2.IMREAD_COLOR if color_mode == "rgb" else cv2.IMREAD_GRAYSCALE
    image = cv2.imdecode(data, flag)
    if image is None:
        raise BadExample("not a decodable image")
    if color_mode == "rgb":
        image = cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
    height, width = size
    image = cv2.resize(image, (width, height), interpolation=cv2.INTER_AREA)
    if image.ndim == 2:
        image = image[:, :, np.newaxis]
    return np.ascontiguousarray(image, dtype=np.uint8), item.label


def _check_complete(data: np.ndarray) -> None:
    """Refuse an empty file, or a JPEG or PNG whose end marker is missing.

    OpenCV decodes a truncated JPEG partially, filling the rest grey with only
    a libjpeg warning on stderr, so the end marker is checked here.
    """
    import numpy as np

    if data.size == 0:
        raise BadExample("empty file")
    head = data[:8].tobytes()
    content = np.flatnonzero(~np.isin(data, _PADDING))
    tail = data[: content[-1] + 1][-8:].tobytes() if content.size else b""
    if head.startswith(_JPEG_START) and not tail.endswith(_JPEG_END):
        raise BadExample("truncated JPEG (no end-of-image marker)")
    if head.startswith(_PNG_START) and not tail.endswith(_PNG_END):
        raise BadExample("truncated PNG (no IEND chunk)")


def _root(spec: str) -> Path:
    root = Path(spec).expanduser().resolve()
    if not root.is_dir():
        raise DatasetError(
            f"dataset={spec}: no such folder on the control node. Fix: give the path of a "
            "folder with one subfolder of images per class"
        )
    return root


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_SUFFIXES)


def _subfolders(folder: Path) -> tuple[list[Path], int]:
    """Visible subfolders of ``folder``, sorted, and the count of other entries there."""
    folders, others = [], 0
    with os.scandir(folder) as entries:
        for entry in entries:
            if not entry.name.startswith(".") and entry.is_dir():
                folders.append(Path(entry.path))
            else:
                others += 1
    return sorted(folders, key=lambda p: p.name), others


def _images(folder: Path) -> tuple[list[Path], int]:
    """Image files under ``folder``, recursively, sorted; and the count of ignored entries.

    Hidden files and folders are not entered and count one each, as do files
    of other extensions. Symbolic links to folders are not followed (as in Keras).
    """
    images, ignored = [], 0
    for dirpath, dirnames, filenames in os.walk(folder):
        hidden = [d for d in dirnames if d.startswith(".")]
        ignored += len(hidden)
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if name.startswith(".") or not _is_image(name):
                ignored += 1
            else:
                images.append(Path(dirpath) / name)
    return sorted(images), ignored


def _classes(folder: Path) -> tuple[list[_Class], int]:
    """The class folders of ``folder`` with their images; refuses an empty class folder."""
    subfolders, ignored = _subfolders(folder)
    classes = []
    ignored_in: dict[str, int] = {}
    for sub in subfolders:
        files, skipped = _images(sub)
        ignored += skipped
        ignored_in[sub.name] = skipped
        classes.append(_Class(sub.name, files))
    empty = [c.name for c in classes if not c.files]
    if empty:
        shown = ", ".join(
            f"{folder / name}/"
            + (
                f" ({plural(ignored_in[name], 'other file')} in it ignored)"
                if ignored_in[name]
                else ""
            )
            for name in empty
        )
        raise DatasetError(
            f"class folder{'s' if len(empty) > 1 else ''} {shown} "
            f"hold{'' if len(empty) > 1 else 's'} no image ({', '.join(IMAGE_SUFFIXES)} in any "
            "letter case; hidden files and other extensions are ignored). Fix: add images of "
            "that class, or remove the folder"
        )
    if not classes:
        loose = sum(1 for p in folder.iterdir() if p.is_file() and _is_image(p.name))
        found = f" (it holds {loose} image{'s' * (loose != 1)} directly)" if loose else ""
        raise DatasetError(
            f"{folder}/ has no class folders{found}. Fix: put each class's images in a "
            f"subfolder named after the class, e.g. {folder}/cat/1.jpg and {folder}/dog/2.jpg"
        )
    if len(classes) == 1:
        raise DatasetError(
            f"{folder}/ has only one class folder ({classes[0].name}/): a classifier needs at "
            f"least two. Fix: add a folder of images for each other class beside "
            f"{folder / classes[0].name}/"
        )
    return classes, ignored


def _layout(root: Path) -> tuple[list[list[_Class]], int]:
    """([classes]) for a folder of class folders, or ([train classes], [test classes]).

    Returns the classes of each split, sorted by name, and the count of ignored entries.
    """
    folders, top_ignored = _subfolders(root)
    names = {p.name for p in folders}
    if len(names & {"train", "test"}) == 1:
        (only,) = names & {"train", "test"}
        other = "test" if only == "train" else "train"
        raise DatasetError(
            f"{root}/ holds {only}/ but no {other}/. Fix: add {root}/{other}/ with the same "
            f"class folders, or put the class folders directly in {root}/ (then test_fraction "
            "of each class is held out)"
        )
    if {"train", "test"} <= names:
        others = sorted(names - {"train", "test"})
        if others:
            shown = ", ".join(f"{o}/" for o in others)
            raise DatasetError(
                f"{root}/ holds train/ and test/ and also {shown}: with train/ and test/ every "
                f"class folder is inside them. Fix: move {shown} out of {root}/, or into "
                "train/ and test/"
            )
        train, train_ignored = _classes(root / "train")
        test, test_ignored = _classes(root / "test")
        train_names = {c.name for c in train}
        test_names = {c.name for c in test}
        missing = [
            (name, "train", "test") if name in train_names else (name, "test", "train")
            for name in sorted(train_names ^ test_names)
        ]
        if missing:
            raise DatasetError(
                "; ".join(
                    f"class {name} is in {root}/{has}/ but not in {root}/{lacks}/"
                    for name, has, lacks in missing
                )
                + ": both splits need the same class folders. Fix: "
                + "; ".join(
                    f"add {root}/{lacks}/{name}/ with images of it, or remove {root}/{has}/{name}/"
                    for name, has, lacks in missing
                )
            )
        return [train, test], top_ignored + train_ignored + test_ignored
    classes, ignored = _classes(root)
    return [classes], ignored


def _item(root: Path, path: Path, label: int) -> Item:
    return Item(path=path, rel=path.relative_to(root).as_posix(), label=label)


def _items(root: Path, classes: list[_Class]) -> list[Item]:
    return [_item(root, f, label) for label, c in enumerate(classes) for f in c.files]


def _split(
    root: Path, classes: list[_Class], test_fraction: float, seed: int
) -> tuple[list[Item], list[Item]]:
    """Stratified split: per class, a seeded permutation of its files sorted by path."""
    import numpy as np

    train: list[Item] = []
    test: list[Item] = []
    for label, c in enumerate(classes):
        items = sorted((_item(root, f, label) for f in c.files), key=lambda item: item.rel)
        n = len(items)
        n_test = min(max(round(n * test_fraction), 1), n - 1) if n >= 2 else 0
        order = np.random.default_rng(seed).permutation(n)
        test.extend(items[i] for i in sorted(order[:n_test]))
        train.extend(items[i] for i in sorted(order[n_test:]))
    return train, test


def _digest(items: list[Item]) -> str:
    """sha256 over each image's relative path and the sha256 of its bytes, in path order."""
    total = hashlib.sha256()
    for item in items:
        with item.path.open("rb") as handle:
            content = hashlib.file_digest(handle, "sha256").hexdigest()
        total.update(f"{item.rel}\0{content}\n".encode("utf-8", "surrogateescape"))
    return total.hexdigest()
