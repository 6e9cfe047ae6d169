"""MultiWorkerMirroredStrategy with Keras `model.fit`, as the public examples write it; prints
where each variable lives. No distlaunch code: run unmodified under autolog.

Keras 3 needs two changes to fit across several workers at all (keras-team/keras#20585): build
from this worker's part of the first batch, and return each step's logs as vectors so that the
cross-replica mean over axis 0 works. Both are in `Model` below; fit itself is the usual call."""

import json
import os

import tensorflow as tf

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
keras = tf.keras
strategy = tf.distribute.MultiWorkerMirroredStrategy()
WORKERS = len(json.loads(os.environ["TF_CONFIG"])["cluster"].get("worker", []))


class Model(keras.Sequential):
    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if iterator is not None and data_batch is None:
            for _, _, batches in iterator:
                data_batch = keras.tree.map_structure(
                    lambda v: strategy.experimental_local_results(v)[0], next(batches))
                break
        super()._maybe_symbolic_build(data_batch=data_batch)

    def train_step(self, data):
        logs = super().train_step(data)
        return logs if WORKERS < 2 else {k: tf.reshape(v, [1]) for k, v in logs.items()}


with strategy.scope():
    model = Model([keras.Input((16,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")


def batches(index):
    x = tf.random.stateless_normal([32, 16], seed=tf.stack([index, tf.constant(7, tf.int64)]))
    return x, x[:, :1] * 2.0


options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
dataset = tf.data.Dataset.counter().map(batches).with_options(options)
model.fit(dataset, epochs=int(os.environ.get("EPOCHS", "2")), steps_per_epoch=int(os.environ.get("STEPS", "30")),
          verbose=2)
for v in model.variables:
    print("DEVICE %s %s" % (v.path, v.value.device))
