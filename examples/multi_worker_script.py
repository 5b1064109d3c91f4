"""A plain multi-worker Keras script, in the shape of TensorFlow's tutorial, for script mode.

TensorFlow's "Multi-worker training with Keras" tutorial
(https://www.tensorflow.org/tutorials/distribute/multi_worker_with_keras):
the strategy first, the dataset sharded by file, the model built and
compiled in the strategy's scope, ``fit`` with ``BackupAndRestore``, and
every worker saving, the chief into the folder that is kept. raspi-tf
gives every task TF_CONFIG and the ``RASPI_TF_*`` variables:

    ansible-playbook train.yml -e script=examples/multi_worker_script.py \
        -e "script_args='--epochs 4'"

The staged dataset (``-e dataset=...``, ``mnist_5k`` by default) is in
``RASPI_TF_DATA_DIR``: ``dataset.json`` says each record's bytes (an int32
little-endian label, then the features, uint8 or float32, in
``input_shape``), the classes and the shard files. Each node holds the
train shards its worker reads; FILE sharding picks the same ones.
"""

import argparse
import json
import os
from pathlib import Path

import tensorflow as tf  # tasks set TF_USE_LEGACY_KERAS=1: tf.keras is tf-keras

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--batch-size", type=int, default=64, help="examples per worker a step")
args = parser.parse_args()

# This example is for synchronous all-reduce (the default strategy). A cluster with ps tasks
# (-e strategy=parameter_server) needs a script in the shape of TensorFlow's parameter server
# tutorial instead: stop here with the fix, not deep inside TensorFlow.
# parser.error exits with 2, a usage error, which raspi-tf does not restart.
if "ps" in json.loads(os.environ.get("TF_CONFIG", "{}")).get("cluster", {}):
    parser.error(
        "multi_worker_script.py trains with MultiWorkerMirroredStrategy, not parameter servers; "
        "fix: leave out -e strategy=parameter_server, or write a parameter server script "
        "(https://www.tensorflow.org/tutorials/distribute/parameter_server_training)"
    )

# The strategy first: it reads TF_CONFIG and joins the cluster.
strategy = tf.distribute.MultiWorkerMirroredStrategy()
workers = strategy.num_replicas_in_sync

data_dir = Path(os.environ["RASPI_TF_DATA_DIR"])
out = Path(os.environ.get("RASPI_TF_OUTPUT_DIR", "."))
info = json.loads((data_dir / "dataset.json").read_text())
shape, classes = info["input_shape"], info["classes"]
feature_dtype = tf.uint8 if info["dtype"] == "uint8" else tf.float32


def decode(records):
    """A batch of records to (float32 features, int32 labels)."""
    labels = tf.io.decode_raw(tf.strings.substr(records, 0, 4), tf.int32)
    body = tf.strings.substr(records, 4, info["record_bytes"] - 4)
    features = tf.io.decode_raw(body, feature_dtype)
    x = tf.reshape(tf.cast(features, tf.float32) * info["scale"], [-1, *shape])
    return x, tf.reshape(labels, [-1])


def records(split):
    """Every shard file of a split, in the order dataset.json lists them."""
    names = [str(data_dir / s["file"]) for s in info[split]["shards"]]
    return tf.data.FixedLengthRecordDataset(names, info["record_bytes"])


global_batch = args.batch_size * workers
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.FILE
train = (
    records("train")
    .shuffle(10_000)
    .repeat()
    .batch(global_batch, drop_remainder=True)
    .map(decode)
    .with_options(options)
)

with strategy.scope():
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Input(shape),
            # A grayscale image of (height, width) gets its channel axis.
            tf.keras.layers.Reshape((*shape[:2], -1)),
            tf.keras.layers.Conv2D(32, 3, activation="relu"),
            tf.keras.layers.MaxPooling2D(),
            tf.keras.layers.Flatten(),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(len(classes)),
        ]
    )
    model.compile(
        optimizer=tf.keras.optimizers.Adam(1e-3),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )

model.fit(
    train,
    epochs=args.epochs,
    steps_per_epoch=info["train"]["examples"] // global_batch,
    callbacks=[tf.keras.callbacks.BackupAndRestore(str(out / "backup"))],
    verbose=2,
)

# Every worker saves (saving is a collective); only the chief's folder is kept.
model.save(out / "model.keras")

if os.environ.get("RASPI_TF_IS_CHIEF") == "1":
    # Outside the strategy, on the chief alone: the test split is staged only here.
    test = records("test").batch(500).map(decode)
    restored = tf.keras.models.load_model(out / "model.keras")
    loss, accuracy = restored.evaluate(test, verbose=0)
    (out / "test.json").write_text(json.dumps({"test_loss": loss, "test_accuracy": accuracy}))
    print(f"test accuracy {accuracy:.4f}")
