"""all_reduce_dtype: gradients cross the all-reduce in float16 and the model still learns."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.conftest import run_tensorflow_script
from training.strategy import all_reduce_in

# Two replicas in one process (two logical CPUs, MirroredStrategy): the same
# replica-context all-reduce that multi_worker_mirrored runs between workers.
SCRIPT = """
import json, sys
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import tf_keras as keras
from training.strategy import all_reduce_in

strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    v = tf.Variable([0.0, 0.0, 0.0])
    sgd = keras.optimizers.SGD(1.0)
    all_reduce_in(sgd, sys.argv[1])

@tf.function
def step():
    strategy.run(lambda: sgd.apply_gradients([(tf.constant([1 / 3, 1e-9, 1.0]), v)]))

step()

x = np.random.default_rng(0).random((256, 4), dtype=np.float32)
y = (x.sum(axis=1) > 2).astype("int32")
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.Adam(0.05),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    all_reduce_in(model.optimizer, sys.argv[1])
losses = model.fit(x, y, batch_size=32, epochs=5, verbose=0).history["loss"]
print(json.dumps({"step": [float(a) for a in v.numpy()], "dtype": v.dtype.name, "losses": losses}))
"""


def run(dtype: str) -> dict:
    return json.loads(run_tensorflow_script(SCRIPT, dtype))


def test_float16_halves_the_precision_of_the_summed_gradients_not_of_the_weights() -> None:
    full, half = run("float32"), run("float16")
    # SGD at rate 1: the step is minus the sum of the two replicas' gradients.
    assert full["step"] == pytest.approx([-2 / 3, -2e-9, -2.0], rel=1e-6)
    assert half["step"][0] == pytest.approx(-2 * float(np.float16(1 / 3)), rel=1e-6)
    assert half["step"][0] != pytest.approx(full["step"][0], rel=1e-5)  # it went as float16
    assert half["step"][1] == 0.0  # below float16's smallest subnormal (6e-8)
    assert half["step"][2] == -2.0
    assert half["dtype"] == "float32"  # the weights and the update stay float32
    assert half["losses"][-1] < half["losses"][0] * 0.8, half["losses"]


def test_an_unknown_dtype_or_a_legacy_optimizer_is_refused() -> None:
    class Legacy:
        pass

    with pytest.raises(ValueError, match="bfloat16"):
        all_reduce_in(Legacy(), "bfloat16")
    with pytest.raises(TypeError, match="legacy"):
        all_reduce_in(Legacy(), "float16")
