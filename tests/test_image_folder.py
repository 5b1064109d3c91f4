"""Image folders: layout, classes, stratified split, digest, decoding and refusals."""

from __future__ import annotations

import dataclasses
import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from tests.imagefolder import BAD_REASONS, CLASSES, digit_image, write_image_folder
from training import datasets
from training.datasets import BadExample, DatasetError, Settings, image_folder


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return write_image_folder(tmp_path_factory.mktemp("images") / "My Photos")


def _plan(root: Path, **settings: Any) -> datasets.Plan:
    return image_folder.plan(str(root), Settings(**settings))


def _load(plan: datasets.Plan, rel: str) -> tuple[np.ndarray, int]:
    (item,) = [i for i in plan.train + plan.test if str(i) == rel]
    return plan.load(item)


def test_a_folder_is_an_image_folder(folder: dict[str, Any]) -> None:
    assert image_folder.claims(folder["root"])
    assert not image_folder.claims(folder["notes"])
    assert datasets.resolve(str(folder["root"])) is image_folder


def test_classes_sorted_shape_and_preprocessing(folder: dict[str, Any]) -> None:
    plan = _plan(folder["root"], image_size=(32, 48))
    assert plan.classes == CLASSES == sorted(CLASSES)
    assert plan.kind == "image_folder" and plan.name == "my_photos"
    assert plan.input_shape == (32, 48, 3) and plan.dtype == "uint8"
    assert plan.scale == pytest.approx(1 / 255)
    assert plan.preprocessing == {
        "kind": "image_folder",
        "image_size": [32, 48],
        "color_mode": "rgb",
        "channel_order": "RGB",
        "resize": "cv2.INTER_AREA",
        "scale": 1 / 255,
        "classes": CLASSES,
    }
    assert plan.settings_used == {
        "image_size": [32, 48],
        "color_mode": "rgb",
        "test_fraction": 0.2,
        "seed": datasets.DEFAULT_SEED,
    }
    labels = {str(i): plan.classes[i.label] for i in plan.train + plan.test}
    assert labels == {**folder["images"], **{rel: rel.split("/")[0] for rel in folder["bad"]}}


def test_split_is_stratified_and_deterministic(folder: dict[str, Any]) -> None:
    plan = _plan(folder["root"])
    test = Counter(plan.classes[i.label] for i in plan.test)
    train = Counter(plan.classes[i.label] for i in plan.train)
    for cls, n in folder["counts"].items():
        assert test[cls] == round(n * 0.2) and train[cls] == n - round(n * 0.2)
    assert not {str(i) for i in plan.train} & {str(i) for i in plan.test}
    again = _plan(folder["root"])
    assert (again.train, again.test) == (plan.train, plan.test)
    other_seed = _plan(folder["root"], seed=1)
    assert {str(i) for i in other_seed.test} != {str(i) for i in plan.test}
    assert Counter(i.label for i in other_seed.test) == Counter(i.label for i in plan.test)


def test_small_classes_keep_one_image_in_each_split(tmp_path: Path) -> None:
    for cls, n in (("a", 1), ("b", 2), ("c", 3)):
        for i in range(n):
            (tmp_path / cls).mkdir(exist_ok=True)
            cv2.imwrite(str(tmp_path / cls / f"{i}.png"), digit_image(i, 0))
    plan = _plan(tmp_path, test_fraction=0.1)
    assert Counter(i.label for i in plan.train) == {0: 1, 1: 1, 2: 2}
    assert Counter(i.label for i in plan.test) == {1: 1, 2: 1}
    plan = _plan(tmp_path, test_fraction=0.9)
    assert Counter(i.label for i in plan.train) == {0: 1, 1: 1, 2: 1}


def test_other_files_are_ignored_and_counted(folder: dict[str, Any]) -> None:
    plan = _plan(folder["root"])
    assert plan.ignored_files == folder["ignored"] == 3
    names = {str(i) for i in plan.train + plan.test}
    assert not any("/." in n or n.endswith(".txt") for n in names)
    assert any(n.endswith(".PNG") for n in names) and any(n.endswith(".Jpeg") for n in names)
    assert any(n.endswith(".BMP") for n in names) and any("/more/" in n for n in names)


def test_digest_follows_the_images_only(folder: dict[str, Any], tmp_path: Path) -> None:
    root = tmp_path / "copy"
    shutil.copytree(folder["root"], root)
    digest = _plan(root).digest
    assert digest == _plan(folder["root"]).digest
    (root / "notes.txt").write_text("edited\n")
    (root / "photos" / ".DS_Store").write_bytes(b"other")
    assert _plan(root).digest == digest
    assert _plan(root, image_size=(32, 32), seed=3).digest == digest
    image = root / "zero" / "zero_000.png"
    pixels = cv2.imread(str(image))
    assert pixels is not None
    pixels[0, 0] = 255 - pixels[0, 0]
    cv2.imwrite(str(image), pixels)
    changed = _plan(root).digest
    assert changed != digest
    image.rename(root / "one" / "zero_000.png")
    assert _plan(root).digest not in (digest, changed)


def test_load_decodes_rgb_resized_with_inter_area(folder: dict[str, Any]) -> None:
    plan = _plan(folder["root"], image_size=(24, 32))
    rel = "seven/seven_008.PNG"
    features, label = _load(plan, rel)
    bgr = cv2.imread(str(folder["root"] / rel), cv2.IMREAD_COLOR)
    assert bgr is not None
    expected = cv2.resize(
        cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), (32, 24), interpolation=cv2.INTER_AREA
    )
    assert features.shape == (24, 32, 3) and features.dtype == np.uint8
    np.testing.assert_array_equal(features, expected)
    assert plan.classes[label] == "seven"
    for item in plan.train + plan.test:
        if str(item) not in folder["bad"]:
            assert plan.load(item)[0].shape == (24, 32, 3)


def test_channel_order_is_rgb(tmp_path: Path) -> None:
    red = np.zeros((20, 20, 3), np.uint8)
    red[..., 2] = 255  # BGR: red
    for cls in ("a", "b"):
        (tmp_path / cls).mkdir()
        cv2.imwrite(str(tmp_path / cls / "red.bmp"), red)
    plan = _plan(tmp_path, image_size=(8, 8))
    features, _ = plan.load(plan.train[0])
    assert features[..., 0].min() == 255 and features[..., 1:].max() == 0


def test_grayscale_has_one_channel(folder: dict[str, Any]) -> None:
    plan = _plan(folder["root"], image_size=(28, 28), color_mode="grayscale")
    assert plan.input_shape == (28, 28, 1)
    assert plan.preprocessing["channel_order"] == "grayscale"
    features, _ = _load(plan, "photos/photo_001.jpg")
    assert features.shape == (28, 28, 1) and features.dtype == np.uint8


def test_bad_files_raise_bad_example_with_the_reason(folder: dict[str, Any]) -> None:
    plan = _plan(folder["root"])
    assert folder["bad"] == BAD_REASONS
    for rel, reason in BAD_REASONS.items():
        with pytest.raises(BadExample) as caught:
            _load(plan, rel)
        assert str(caught.value) == reason
    # OpenCV itself decodes the truncated JPEG (greyed), hence the end-marker check.
    assert cv2.imread(str(folder["root"] / "one/broken.jpg")) is not None


def test_truncated_png_padding_and_fake_images(tmp_path: Path) -> None:
    png = cv2.imencode(".png", digit_image(0, 1))[1].tobytes()
    jpg = cv2.imencode(".jpg", digit_image(0, 1))[1].tobytes()
    files = {
        "a/cut.png": (png[: len(png) - 20], "truncated PNG (no IEND chunk)"),
        "a/fake.jpg": (b"not an image\n" * 10, "not a decodable image"),
        "a/png_named.jpg": (png, None),
        "b/padded.jpg": (jpg + b"\x00" * 5000 + b"\r\n", None),
        "b/padded.png": (png + b"\n", None),
    }
    for rel, (content, _) in files.items():
        (tmp_path / rel).parent.mkdir(exist_ok=True)
        (tmp_path / rel).write_bytes(content)
    plan = _plan(tmp_path, test_fraction=0.5)
    for rel, (_, reason) in files.items():
        if reason is None:
            assert _load(plan, rel)[0].shape == (64, 64, 3)
        else:
            with pytest.raises(BadExample, match=reason.replace("(", r"\(").replace(")", r"\)")):
                _load(plan, rel)


def test_non_ascii_paths(tmp_path: Path) -> None:
    root = tmp_path / "Fotos ñandú"
    for cls in ("café", "thé"):
        (root / cls).mkdir(parents=True)
        for i in range(2):
            (root / cls / f"é{i}.JPG").write_bytes(
                cv2.imencode(".jpg", digit_image(i, 7))[1].tobytes()
            )
    plan = _plan(root)
    assert plan.classes == ["café", "thé"] and plan.name == "fotos_and"
    assert plan.load(plan.train[0])[0].shape == (64, 64, 3)


def test_train_and_test_folders_are_used_as_given(tmp_path: Path) -> None:
    info = write_image_folder(tmp_path / "split", split=True, per_class=8, bad=False)
    plan = _plan(info["root"], test_fraction=0.5)
    assert plan.classes == CLASSES
    assert {str(i) for i in plan.test} == {r for r in info["images"] if r.startswith("test/")}
    assert {str(i) for i in plan.train} == {r for r in info["images"] if r.startswith("train/")}
    assert "test_fraction" not in plan.settings_used
    assert plan.ignored_files == info["ignored"]
    shutil.rmtree(info["root"] / "test" / "photos")
    with pytest.raises(DatasetError) as caught:
        _plan(info["root"])
    message = str(caught.value)
    assert "class photos is in" in message and f"{info['root']}/test/photos/" in message
    assert "Fix:" in message


def _refusal(root: Path, **settings: Any) -> str:
    with pytest.raises(DatasetError) as caught:
        _plan(root, **settings)
    message = str(caught.value)
    assert "Fix:" in message
    return message


def test_folders_that_are_not_datasets_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "photos"
    root.mkdir()
    cv2.imwrite(str(root / "loose.jpg"), digit_image(0, 0))
    assert f"{root}/ has no class folders (it holds 1 image directly)" in _refusal(root)
    (root / "cat").mkdir()
    cv2.imwrite(str(root / "cat" / "1.jpg"), digit_image(0, 0))
    assert f"{root}/ has only one class folder (cat/)" in _refusal(root)
    (root / "dog").mkdir()
    (root / "dog" / "notes.txt").write_text("no image here")
    message = _refusal(root)
    assert f"class folder {root}/dog/ (1 other file in it ignored) holds no image" in message
    cv2.imwrite(str(root / "dog" / "1.png"), digit_image(0, 1))
    assert _plan(root).classes == ["cat", "dog"]
    (root / "train").mkdir()
    assert f"{root}/ holds train/ but no test/" in _refusal(root)
    (root / "test").mkdir()
    assert "also cat/, dog/" in _refusal(root)
    assert "no such folder" in _refusal(tmp_path / "missing")


@pytest.mark.parametrize(
    ("settings", "variable"),
    [
        ({"image_size": (7, 64)}, "image_size"),
        ({"image_size": (64, 1025)}, "image_size"),
        ({"image_size": (64,)}, "image_size"),
        ({"color_mode": "rgba"}, "color_mode"),
        ({"test_fraction": 0.0}, "test_fraction"),
        ({"test_fraction": 1.0}, "test_fraction"),
        ({"test_fraction": float("nan")}, "test_fraction"),
    ],
)
def test_bad_settings_name_the_variable(
    folder: dict[str, Any], settings: dict[str, Any], variable: str
) -> None:
    message = _refusal(folder["root"], **settings)
    assert message.startswith(f"{variable}=")
    with pytest.raises(DatasetError, match=variable):
        image_folder.check(str(folder["root"]), Settings(**settings))


def test_bad_settings_are_reported_together() -> None:
    settings = dataclasses.replace(
        Settings(), image_size=(4, 4), color_mode="cmyk", test_fraction=2.0
    )
    with pytest.raises(DatasetError) as caught:
        image_folder.validate_settings(settings)
    assert [p.split("=")[0] for p in str(caught.value).split("; ")] == [
        "image_size",
        "color_mode",
        "test_fraction",
    ]


def test_check_reads_no_image(folder: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object) -> None:
        raise AssertionError("check hashed an image")

    monkeypatch.setattr(image_folder, "_digest", refuse)
    image_folder.check(str(folder["root"]), Settings())


def _records(manifest: datasets.Manifest, files: list[Any]) -> Counter[tuple[int, bytes]]:
    """(label, feature bytes) of every record in ``files``, counted."""
    found: Counter[tuple[int, bytes]] = Counter()
    for shard in files:
        raw = np.fromfile(manifest.path / shard.file, dtype=np.uint8)
        records = raw.reshape(-1, manifest.record_bytes)
        labels = records[:, :4].copy().view("<i4").ravel()
        found.update(zip(labels.tolist(), (r[4:].tobytes() for r in records), strict=True))
    return found


def test_prepare_refuses_bad_images_then_skips_and_names_them(
    folder: dict[str, Any], tmp_path: Path
) -> None:
    spec = str(folder["root"])
    settings = Settings(image_size=(16, 16), shards=4)
    with pytest.raises(DatasetError) as caught:
        datasets.prepare(spec, tmp_path, settings)
    message = str(caught.value)
    for rel, reason in BAD_REASONS.items():
        assert f"{rel} ({reason})" in message
    assert "2 files cannot be read" in message and "skip_bad_images=true" in message
    assert not [p for p in tmp_path.iterdir() if (p / "dataset.json").exists()]

    skipping = dataclasses.replace(settings, skip_bad_images=True)
    manifest, written = datasets.prepare(spec, tmp_path, skipping)
    assert written and manifest.kind == "image_folder"
    assert {s["file"]: s["reason"] for s in manifest.skipped} == BAD_REASONS
    assert manifest.classes == tuple(CLASSES) and manifest.input_shape == (16, 16, 3)
    assert manifest.ignored_files == 3 and manifest.source == str(folder["root"])
    assert manifest.preprocessing["classes"] == CLASSES

    plan = image_folder.plan(spec, skipping)
    for split, files in (("train", manifest.all_train_files()), ("test", manifest.test_files())):
        items = [i for i in getattr(plan, split) if str(i) not in BAD_REASONS]
        expected = Counter((label, x.tobytes()) for x, label in map(plan.load, items))
        assert _records(manifest, files) == expected, split
        counts = Counter(i.label for i in items)
        assert manifest.class_counts[split] == [counts[k] for k in range(len(CLASSES))]

    assert datasets.prepare(spec, tmp_path, skipping) == (manifest, False)
    # Prepared once with the files skipped, the folder is still refused without the setting.
    with pytest.raises(DatasetError, match=r"2 files cannot be read: .*skip_bad_images=true"):
        datasets.prepare(spec, tmp_path, settings)


def test_prepare_again_only_when_an_image_changes(folder: dict[str, Any], tmp_path: Path) -> None:
    root = tmp_path / "photos"
    shutil.copytree(folder["root"], root)
    for rel in BAD_REASONS:
        (root / rel).unlink()
    settings = Settings(image_size=(12, 12), shards=2)
    first, written = datasets.prepare(str(root), tmp_path / "cache", settings)
    assert written and not first.skipped
    (root / "notes.txt").write_text("edited\n")
    assert datasets.prepare(str(root), tmp_path / "cache", settings) == (first, False)
    # Another file that is no image: nothing prepared again, and counted as it is now.
    (root / "zero" / ".thumbnail").write_text("")
    again, written = datasets.prepare(str(root), tmp_path / "cache", settings)
    assert not written and again.id == first.id
    assert again.ignored_files == first.ignored_files + 1
    cv2.imwrite(str(root / "zero" / "zero_000.png"), digit_image(1, 0))
    second, written = datasets.prepare(str(root), tmp_path / "cache", settings)
    assert written and second.id != first.id and second.digest != first.digest
