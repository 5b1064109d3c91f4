"""Model registry: names, unknown models, adding a model by adding one module or a file.

Built-in models on any image shape and class count, their refusals, and the check
before the start that a model fits the dataset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import ROOT
from training import models

#: A model module as docs/extending.md describes it; {params} is build()'s parameter
#: list, {spe} what it passes on to compile_model.
LINEAR_MODULE = (
    "import tf_keras\n"
    "from training.models import compile_model\n\n"
    "def build({params}):\n"
    "    model = tf_keras.Sequential([tf_keras.layers.Input((28, 28)),\n"
    "        tf_keras.layers.Flatten(), tf_keras.layers.Dense(10)])\n"
    "    return compile_model(model, learning_rate{spe})\n"
)


def add_model_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str
) -> None:
    """Drop ``<name>.py`` with ``source`` where the registry looks for models."""
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.setattr(models, "__path__", [*models.__path__, str(tmp_path)])


#: The models this repository ships.
BUILT_IN = [
    "mnist_cnn",
    "mnist_lstm",
    "mnist_mlp",
    "mnist_vgg",
    "mnist_wide_mlp",
    "pi_mobilenet",
    "tabular_mlp",
]
#: The built-in models that take images.
IMAGE_MODELS = ["mnist_cnn", "mnist_lstm", "mnist_mlp", "mnist_vgg", "mnist_wide_mlp"]


def test_known_models() -> None:
    assert set(BUILT_IN) <= set(models.available())
    assert not any(name.startswith("_") for name in models.available())


def test_unknown_model_lists_the_known_ones() -> None:
    with pytest.raises(
        models.UnknownModelError,
        match=f"known models: {', '.join(BUILT_IN)}",
    ):
        models.get("resnet50")


def test_a_mistyped_model_name_is_refused_with_the_closest_model_as_the_fix(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from training.cli import main

    assert main(["models", "--check", "pi_mobilnet"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("error: model=pi_mobilnet is unknown (did you mean pi_mobilenet?).")
    assert "Fix: -e model=pi_mobilenet, or add training/models/pi_mobilnet.py" in err
    with pytest.raises(models.UnknownModelError, match=r"\(did you mean mnist_cnn\?\)"):
        models.get("mnist_cnm")
    with pytest.raises(models.UnknownModelError, match=r"did you mean mnist_cnn\?.*=mnist_cnn,"):
        models.check_name("MNIST_CNN")


def test_the_model_check_passes_known_models_and_model_files_silently(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from training.cli import main

    assert main(["models", "--check", "mnist_cnn"]) == 0
    assert main(["models", "--check", "./my_model.py"]) == 0  # the file is checked later
    assert capsys.readouterr() == ("", "")
    with pytest.raises(models.UnknownModelError, match="Fix: -e model=mnist_cnn, or add a model"):
        models.check_name("resnet-50")  # no close model, and no module name
    with pytest.raises(models.UnknownModelError, match=r"Fix: -e model=\./my_model\.py "):
        models.check_name("my_model.py")  # a file in the current folder, named without ./


def test_a_new_module_is_a_new_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = "def build(learning_rate):\n    return ('tiny', learning_rate)\n"
    add_model_module(tmp_path, monkeypatch, "tiny_linear", source)
    assert "tiny_linear" in models.available()
    assert models.get("tiny_linear")(0.5) == ("tiny", 0.5)


@pytest.mark.parametrize(
    ("name", "weights"),
    [
        ("mnist_mlp", 79_510),
        ("mnist_cnn", 34_826),
        ("mnist_lstm", 81_674),
        ("mnist_wide_mlp", 669_706),
        ("mnist_vgg", 81_002),
    ],
)
def test_models_map_images_to_ten_logits(name: str, weights: int) -> None:
    model = models.get(name)(0.001)
    out = model(np.zeros((3, 28, 28), dtype=np.float32))
    assert tuple(out.shape) == (3, 10)
    assert model.count_params() == weights
    assert model.optimizer.learning_rate.numpy() == pytest.approx(0.001)


def test_steps_per_execution_reaches_compile() -> None:
    model = models.build("mnist_mlp", 0.001, steps_per_execution=4)
    assert int(model._steps_per_execution.numpy()) == 4


def test_a_model_without_steps_per_execution_says_how_to_add_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = LINEAR_MODULE.format(params="learning_rate", spe="")
    add_model_module(tmp_path, monkeypatch, "old_style", source)
    assert models.build("old_style", 0.1).optimizer is not None
    with pytest.raises(models.UnknownModelError, match=r"takes no steps_per_execution\. Fix"):
        models.build("old_style", 0.1, steps_per_execution=8)
    # Left to choose, such a model trains one step per call instead of failing.
    assert models.resolve_steps_per_execution("old_style", 0, "multi_worker_mirrored") == 1


@pytest.mark.parametrize(
    ("requested", "strategy", "expected"),
    [
        (0, "multi_worker_mirrored", models.AUTO_STEPS_PER_EXECUTION),
        (0, "parameter_server", 1),
        (1, "multi_worker_mirrored", 1),
        (3, "parameter_server", 3),
    ],
)
def test_steps_per_execution_left_at_0_is_chosen_by_strategy(
    requested: int, strategy: str, expected: int
) -> None:
    assert models.resolve_steps_per_execution("mnist_cnn", requested, strategy) == expected


def test_a_model_added_as_the_readme_says_trains_with_steps_per_execution(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/extending.md: build(learning_rate, steps_per_execution=1) compiled by compile_model."""
    source = LINEAR_MODULE.format(
        params="learning_rate, steps_per_execution=1", spe=", steps_per_execution"
    )
    add_model_module(tmp_path, monkeypatch, "my_model", source)
    spe = models.resolve_steps_per_execution("my_model", 0, "multi_worker_mirrored")
    model = models.build("my_model", 0.01, spe)
    assert int(model._steps_per_execution.numpy()) == models.AUTO_STEPS_PER_EXECUTION


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("    return None\n", "build() returned NoneType, not a compiled model. Fix: end build()"),
        ("    raise ValueError('no such layer')\n", "build() failed: ValueError: no such layer"),
    ],
)
def test_a_broken_model_module_is_named_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, message: str
) -> None:
    name = f"broken_{len(body)}"  # one module per case: imports are cached
    source = "def build(learning_rate, steps_per_execution=1):\n" + body
    add_model_module(tmp_path, monkeypatch, name, source)
    with pytest.raises(models.ModelError, match=f"training/models/{name}.py: ") as err:
        models.build(name, 0.01)
    assert message in str(err.value)


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def build(learning_rate)\n    pass\n", "broken_import_0.py, line 1 cannot be imported: "),
        ("import os\n\nx = undefined_name\n", "broken_import_1.py, line 3 cannot be imported: "),
    ],
)
def test_a_model_module_that_cannot_be_imported_is_named_with_its_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, message: str
) -> None:
    # A syntax error is named by its line, not as Python's whole traceback with no fix.
    name = f"broken_import_{'undefined' in source:d}"
    add_model_module(tmp_path, monkeypatch, name, source)
    with pytest.raises(models.ModelError, match="cannot be imported") as err:
        models.get(name)
    assert message in str(err.value) and "Fix: correct the module there" in str(err.value)


def test_a_model_module_without_build_says_what_to_add(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    add_model_module(tmp_path, monkeypatch, "no_build", "def make(learning_rate):\n    pass\n")
    with pytest.raises(models.UnknownModelError, match="defines no build") as err:
        models.get("no_build")
    assert "Fix: add def build(learning_rate, steps_per_execution=1, *, input_shape" in str(
        err.value
    )


@pytest.mark.parametrize(
    ("scaling", "replicas", "expected"),
    [("sqrt", 4, 0.002), ("sqrt", 1, 0.001), ("linear", 3, 0.003), ("none", 8, 0.001)],
)
def test_the_step_size_grows_with_the_global_batch_by_the_chosen_rule(
    scaling: str, replicas: int, expected: float
) -> None:
    assert models.scaled_learning_rate(0.001, replicas, scaling) == pytest.approx(expected)


def test_an_unknown_scaling_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="cube is unknown; choose one of sqrt, linear, none"):
        models.scaled_learning_rate(0.001, 2, "cube")


ASYNC = "not scaled under parameter_server, where each step is one worker batch"


@pytest.mark.parametrize(
    ("scaling", "replicas", "asynchronous", "rule"),
    [
        ("sqrt", 2, False, "0.001 x sqrt(2), learning_rate_scaling=sqrt"),
        ("none", 3, False, "0.001 x 1, learning_rate_scaling=none"),
        ("sqrt", 1, False, ""),
        ("sqrt", 1, True, f"0.001, {ASYNC}"),
    ],
)
def test_the_summary_says_how_the_step_size_was_scaled_or_why_not(
    scaling: str, replicas: int, asynchronous: bool, rule: str
) -> None:
    assert models.learning_rate_rule(0.001, replicas, scaling, asynchronous) == rule


def test_the_models_train_yml_does_not_build_first_take_mnist() -> None:
    # train.yml skips the control node's build check for these models on MNIST-shaped data:
    # each must be shipped and must take (28, 28) images in 10 classes.
    import yaml

    role_vars = yaml.safe_load((ROOT / "roles/training_run/vars/main.yml").read_text())
    listed = role_vars["__training_run_bundled_models"]
    assert set(listed) <= set(models.available())
    for name in listed:
        models.check_model(name, (28, 28), 10, 0.001)


def zeros(shape: tuple[int, ...], batch: int = 2) -> np.ndarray:
    """A batch of blank examples, float32 as the input pipeline gives them."""
    return np.zeros((batch, *shape), dtype=np.float32)


def test_mnist_cnn_keeps_its_layers_on_mnist() -> None:
    # Its 0.973 on mnist_5k is this network: the same layers in the same order, so the
    # same seed draws the same initial weights.
    model = models.build("mnist_cnn", 0.001, input_shape=(28, 28), num_classes=10)
    assert [type(layer).__name__ for layer in model.layers] == [
        "Reshape",
        "Conv2D",
        "MaxPooling2D",
        "Conv2D",
        "MaxPooling2D",
        "Flatten",
        "Dropout",
        "Dense",
    ]
    assert model.count_params() == 34_826


@pytest.mark.parametrize("name", IMAGE_MODELS)
@pytest.mark.parametrize(("shape", "classes"), [((28, 28), 10), ((32, 32, 3), 5), ((40, 24, 1), 2)])
def test_image_models_take_any_size_and_channels(
    name: str, shape: tuple[int, ...], classes: int
) -> None:
    model = models.build(name, 0.001, input_shape=shape, num_classes=classes)
    assert tuple(model(zeros(shape)).shape) == (2, classes)


@pytest.mark.parametrize("name", ["mnist_cnn", "mnist_vgg", "mnist_lstm", "pi_mobilenet"])
def test_image_models_refuse_a_feature_vector_with_the_fix(name: str) -> None:
    with pytest.raises(models.ModelError) as err:
        models.build(name, 0.001, input_shape=(13,), num_classes=3)
    assert f"training/models/{name}.py: {name} cannot take inputs of shape (13,)" in str(err.value)
    assert "(height, width[, channels])" in str(err.value)
    assert str(err.value).endswith("Fix: for tabular data use model=tabular_mlp")


@pytest.mark.parametrize(("name", "smallest"), [("mnist_cnn", 10), ("pi_mobilenet", 32)])
def test_an_image_too_small_for_the_pools_is_refused_naming_the_minimum(
    name: str, smallest: int
) -> None:
    too_small = (smallest - 1, smallest + 5, 3)
    with pytest.raises(models.ModelError) as err:
        models.build(name, 0.001, input_shape=too_small, num_classes=2)
    assert f"at least {smallest}x{smallest} pixels" in str(err.value)
    assert f"prepare them at least that large (-e image_size={smallest})" in str(err.value)
    model = models.build(name, 0.001, input_shape=(smallest, smallest, 3), num_classes=2)
    assert tuple(model(zeros((smallest, smallest, 3))).shape) == (2, 2)


def multiply_adds(model: Any) -> int:
    """Multiply-adds of one example's forward pass, counted layer by layer."""
    import tf_keras as keras

    total = 0
    for layer in model.layers:
        if isinstance(layer, keras.layers.DepthwiseConv2D):
            total += int(np.prod(layer.output_shape[1:])) * int(np.prod(layer.kernel_size))
        elif isinstance(layer, keras.layers.Conv2D):
            kernel = int(np.prod(layer.kernel_size)) * layer.input_shape[-1]
            total += int(np.prod(layer.output_shape[1:])) * kernel
        elif isinstance(layer, keras.layers.Dense):
            total += layer.input_shape[-1] * layer.units
    return total


def test_the_mnist_models_multiply_adds_are_their_docstrings() -> None:
    # mnist_vgg's docstring compares it with mnist_cnn by these counts.
    assert multiply_adds(models.build("mnist_vgg", 0.001)) == 14_047_360
    assert multiply_adds(models.build("mnist_cnn", 0.001)) == 2_440_960


def test_pi_mobilenet_is_as_small_as_its_docstring_says() -> None:
    from training.models import pi_mobilenet

    model = models.build("pi_mobilenet", 0.001, input_shape=(64, 64, 3), num_classes=4)
    assert tuple(model(zeros((64, 64, 3))).shape) == (2, 4)
    trained = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    assert (model.count_params(), trained, multiply_adds(model)) == (143_716, 140_452, 6_220_800)
    doc = " ".join((pi_mobilenet.__doc__ or "").split())
    assert "143,716 weights (140,452 trained" in doc and "6,220,800 multiply-adds" in doc
    kinds = {type(layer).__name__ for layer in model.layers}
    assert {"DepthwiseConv2D", "BatchNormalization", "ReLU", "GlobalAveragePooling2D"} <= kinds


@pytest.mark.parametrize("shape", [(32, 32), (32, 32, 1), (48, 64, 3)])
def test_pi_mobilenet_takes_grey_and_colour_images(shape: tuple[int, ...]) -> None:
    model = models.build("pi_mobilenet", 0.001, input_shape=shape, num_classes=3)
    assert tuple(model(zeros(shape)).shape) == (2, 3)


def test_pi_mobilenet_shifts_photos_in_training_and_predicts_them_as_they_are() -> None:
    from training.models import pi_mobilenet

    model = models.build("pi_mobilenet", 0.001, input_shape=(32, 32, 3), num_classes=2)
    shift = model.layers[0]
    assert (type(shift).__name__, shift.height_factor, shift.width_factor) == (
        "RandomTranslation",
        pi_mobilenet.TRANSLATION,
        pi_mobilenet.TRANSLATION,
    )
    x = np.random.default_rng(0).random((4, 32, 32, 3), dtype=np.float32)
    assert not np.allclose(shift(x, training=True), x)
    np.testing.assert_array_equal(shift(x, training=False), x)
    np.testing.assert_array_equal(model(x, training=False), model(x, training=False))


def test_pi_mobilenet_takes_a_training_step() -> None:
    # Batch normalisation's training mode (batch statistics, moving averages) in fit.
    model = models.build("pi_mobilenet", 0.001, input_shape=(32, 32, 3), num_classes=2)
    model.run_eagerly = True  # no graph to trace: the test stays short
    x = np.random.default_rng(0).random((8, 32, 32, 3), dtype=np.float32)
    history = model.fit(x, np.arange(8) % 2, batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_tabular_mlp_maps_features_to_classes() -> None:
    model = models.build("tabular_mlp", 0.001, input_shape=(13,), num_classes=3)
    assert tuple(model(zeros((13,))).shape) == (2, 3)
    assert model.count_params() == (13 * 64 + 64) + (64 * 32 + 32) + (32 * 3 + 3)


def test_tabular_mlp_refuses_images_with_the_fix() -> None:
    with pytest.raises(models.ModelError) as err:
        models.build("tabular_mlp", 0.001, input_shape=(28, 28), num_classes=10)
    assert "tabular_mlp cannot take inputs of shape (28, 28): it takes a feature vector" in str(
        err.value
    )
    assert "Fix: for images use model=mnist_cnn or model=pi_mobilenet" in str(err.value)


#: A model file as docs/extending.md describes it: it takes the dataset's shape.
MODEL_FILE = (
    "import tf_keras as keras\n"
    "from training.models import compile_model\n\n"
    "LEARNING_RATE = 0.01\n\n\n"
    "def build(learning_rate, steps_per_execution=1, *, input_shape=(28, 28), num_classes=10):\n"
    "    model = keras.Sequential([keras.Input(shape=input_shape), keras.layers.Flatten(),\n"
    "        keras.layers.Dense(num_classes)])\n"
    "    return compile_model(model, learning_rate, steps_per_execution)\n"
)


def test_a_model_file_from_anywhere_builds_through_its_path(tmp_path: Path) -> None:
    path = tmp_path / "elsewhere" / "my-model.py"
    path.parent.mkdir()
    path.write_text(MODEL_FILE)
    assert not path.is_relative_to(ROOT)
    name = str(path)
    assert models.is_model_file(name) and not models.is_model_file("mnist_cnn")
    assert callable(models.get(name))
    assert models.learning_rate(name) == 0.01
    assert models.takes_steps_per_execution(name)
    assert models.resolve_steps_per_execution(name, 0, "multi_worker_mirrored") == 8
    model = models.build(name, 0.01, 4, input_shape=(13,), num_classes=3)
    assert tuple(model(zeros((13,))).shape) == (2, 3)
    assert int(model._steps_per_execution.numpy()) == 4
    models.check_model(name, (64, 64, 3), 4, 0.01)
    assert not any("my" in known for known in models.available())


def test_a_model_file_imports_the_modules_beside_it_which_go_with_it(tmp_path: Path) -> None:
    from training.script import local_modules

    folder = tmp_path / "my-models"
    folder.mkdir()
    (folder / "heads.py").write_text(
        "import tf_keras as keras\n\ndef head(n):\n    return keras.layers.Dense(n)\n"
    )
    path = folder / "with_head.py"
    path.write_text(MODEL_FILE.replace("keras.layers.Dense(num_classes)", "head(num_classes)"))
    path.write_text("from heads import head\n" + path.read_text())
    model = models.build(str(path), 0.01, input_shape=(8,), num_classes=3)
    assert tuple(model(zeros((8,))).shape) == (2, 3)
    assert local_modules(path) == ["heads.py"]


def test_a_build_with_another_signature_is_refused_with_the_one_to_define(tmp_path: Path) -> None:
    path = tmp_path / "positional.py"
    path.write_text(
        "def build(input_shape, num_classes):\n    raise AssertionError('not called')\n"
    )
    with pytest.raises(models.ModelError) as refused:
        models.build(str(path), 0.01, input_shape=(8, 8), num_classes=2)
    assert "build() cannot be called as build(learning_rate, input_shape=..., num_classes=...)" in (
        str(refused.value)
    )
    assert "Fix: define it as def build(learning_rate, steps_per_execution=1, *, " in str(
        refused.value
    )


def test_a_relative_model_path_is_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_model.py").write_text(MODEL_FILE)
    monkeypatch.chdir(tmp_path)
    model = models.build("./my_model.py", 0.01, input_shape=(8, 8), num_classes=2)
    assert tuple(model(zeros((8, 8))).shape) == (2, 2)
    # Without a "/" it is a registered name, and the refusal says how to name the file.
    with pytest.raises(models.UnknownModelError, match=r"named by its path: \./my_model\.py"):
        models.get("my_model.py")


@pytest.mark.parametrize(
    ("source", "error", "message"),
    [
        (None, models.UnknownModelError, "{path} does not exist. Fix: give the path of"),
        (
            "def build(learning_rate)\n    pass\n",
            models.ModelError,
            "{path}, line 1 cannot be imported: SyntaxError",
        ),
        (
            "import os\n\nx = undefined_name\n",
            models.ModelError,
            "{path}, line 3 cannot be imported: NameError",
        ),
        (
            "def make(learning_rate):\n    pass\n",
            models.UnknownModelError,
            "{path} defines no build() function. Fix: add def build(",
        ),
    ],
)
def test_a_broken_model_file_is_named_with_the_fix(
    tmp_path: Path, source: str | None, error: type[Exception], message: str
) -> None:
    path = tmp_path / "mine.py"
    if source is not None:
        path.write_text(source)
    with pytest.raises(error) as err:
        models.get(str(path))
    assert message.format(path=path) in str(err.value)


def test_a_model_files_helper_that_is_missing_or_broken_is_named(tmp_path: Path) -> None:
    path = tmp_path / "uses_blocks.py"
    path.write_text("import os\nfrom blocks import cnn\n")
    with pytest.raises(models.ModelError) as missing:
        models.get(str(path))
    assert f"{path}, line 2 cannot be imported: ModuleNotFoundError" in str(missing.value)
    assert "Fix: put blocks.py (or the package folder blocks/) beside uses_blocks.py" in str(
        missing.value
    )
    (tmp_path / "blocks.py").write_text("def cnn(:\n")
    with pytest.raises(models.ModelError) as broken:
        models.get(str(path))
    assert str(broken.value).startswith(
        f"{tmp_path / 'blocks.py'}, line 1, imported by {path} (line 2): SyntaxError: "
    )


def test_a_model_file_that_is_no_python_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "model.txt").write_text("")
    with pytest.raises(models.UnknownModelError, match=r"model\.txt is not a \.py file\. Fix"):
        models.get(str(tmp_path / "model.txt"))
    with pytest.raises(models.UnknownModelError, match=r" is a folder\. Fix"):
        models.get(f"{tmp_path}/")


#: A model of a fixed shape whose build() takes only the learning rate: {layers} are its layers.
FIXED_MODEL = (
    "import tf_keras as keras\n"
    "from training.models import compile_model\n\n\n"
    "def build(learning_rate):\n"
    "    return compile_model(keras.Sequential([{layers}]), learning_rate)\n"
)


def test_a_build_without_the_shape_parameters_still_builds(tmp_path: Path) -> None:
    path = tmp_path / "fixed.py"
    layers = "keras.Input(shape=(28, 28)), keras.layers.Flatten(), keras.layers.Dense(10)"
    path.write_text(FIXED_MODEL.format(layers=layers))
    model = models.build(str(path), 0.01, input_shape=(28, 28), num_classes=10)
    assert model.count_params() == 7_850
    models.check_model(str(path), (28, 28), 10, 0.01)  # it fits MNIST as it is


@pytest.mark.parametrize(
    ("layers", "dataset", "message", "fix"),
    [
        (
            "keras.Input(shape=(28, 28)), keras.layers.Flatten(), keras.layers.Dense(10)",
            ((64, 64, 3), 10),
            "the model takes no example of the dataset's shape: the dataset has examples of "
            "shape (64, 64, 3) in 10 classes, the model takes inputs of shape (28, 28) and "
            "gives 10 outputs (ValueError: ",
            "Fix: start it with keras.Input(shape=input_shape), and let build() receive both: "
            "def build(learning_rate, steps_per_execution=1, *, input_shape=(28, 28), "
            "num_classes=10)",
        ),
        (
            "keras.Input(shape=(13,)), keras.layers.Dense(7)",
            ((13,), 3),
            "the model gives outputs of shape (1, 7) for one example, not one logit per class: "
            "the dataset has examples of shape (13,) in 3 classes, the model takes inputs of "
            "shape (13,) and gives 7 outputs.",
            "Fix: end it with keras.layers.Dense(num_classes) (logits), and let build() receive",
        ),
        (
            "keras.Input(shape=(13,)), keras.layers.Dense(3, activation='softmax')",
            ((13,), 3),
            "the model's last layer (dense",
            "applies softmax, but a model gives logits: compile_model's loss takes logits, and "
            "predict and the export apply softmax themselves. Fix: end it with "
            "keras.layers.Dense(num_classes) (logits), without activation='softmax'",
        ),
    ],
)
def test_check_model_refuses_a_model_the_data_does_not_fit_naming_both(
    tmp_path: Path,
    layers: str,
    dataset: tuple[tuple[int, ...], int],
    message: str,
    fix: str,
) -> None:
    # Found only in each task's first step, it would crash-loop every worker to the
    # restart limit; on the control node it stops the run before any task starts.
    path = tmp_path / "misfit.py"
    path.write_text(FIXED_MODEL.format(layers=layers))
    with pytest.raises(models.ModelError) as err:
        models.check_model(str(path), *dataset, 0.01)
    text = str(err.value)
    assert text.startswith(f"{path}: {message}"), text
    assert fix in text, text


def test_check_model_refuses_what_a_built_in_model_cannot_take() -> None:
    with pytest.raises(models.ModelError, match=r"mnist_vgg\.py: mnist_vgg cannot take inputs"):
        models.check_model("mnist_vgg", (4,), 3, 0.001)


@pytest.mark.parametrize(
    ("name", "shape", "classes"),
    [
        ("mnist_cnn", (28, 28), 10),
        ("mnist_lstm", (32, 32, 3), 5),
        ("pi_mobilenet", (64, 64, 3), 4),
        ("tabular_mlp", (13,), 3),
        ("mnist_mlp", (13,), 3),
    ],
)
def test_check_model_passes_a_model_that_fits(
    name: str, shape: tuple[int, ...], classes: int
) -> None:
    models.check_model(name, shape, classes, models.learning_rate(name), 2)


def test_a_keras_3_model_file_is_refused_with_the_import_to_use(tmp_path: Path) -> None:
    # Keras 3's fit fails under both distribution strategies, after the run has started.
    keras_3_build = (
        "def build(learning_rate, steps_per_execution=1, *, input_shape, num_classes):\n"
        "    model = keras.Sequential([keras.Input(input_shape), keras.layers.Flatten(),\n"
        "                              keras.layers.Dense(num_classes)])\n"
    )
    path = tmp_path / "keras3_model.py"
    path.write_text(
        f"import keras\n\n\n{keras_3_build}"
        "    model.compile(optimizer='adam', loss='sparse_categorical_crossentropy')\n"
        "    return model\n"
    )
    with pytest.raises(models.ModelError) as err:
        models.check_model(str(path), (8, 8, 3), 2, 0.001)
    assert f"{path}: build() returned a keras." in str(err.value)
    assert "not a tf-keras model" in str(err.value)
    assert "Fix: import tf_keras as keras, not import keras" in str(err.value)
    # The example of docs/extending.md with import keras: compile_model fails inside build().
    path = tmp_path / "keras3_compiled.py"
    path.write_text(
        f"import keras\n\nfrom training.models import compile_model\n\n\n{keras_3_build}"
        "    return compile_model(model, learning_rate, steps_per_execution)\n"
    )
    with pytest.raises(models.ModelError) as err:
        models.check_model(str(path), (8, 8, 3), 2, 0.001)
    assert f"{path}: build() failed: " in str(err.value)
    assert str(err.value).endswith(
        "The model file uses Keras 3 (keras), which tf-keras' compile_model and training do "
        "not take. Fix: import tf_keras as keras, not import keras, in the model file"
    )
