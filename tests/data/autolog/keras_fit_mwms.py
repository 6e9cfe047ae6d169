"""MultiWorkerMirroredStrategy with Keras `model.fit`, as the public examples write it; prints
where each variable lives. No distlaunch code: run unmodified under autolog."""

import os

import numpy as np
import tensorflow as tf

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.01), loss="mse")
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 16)).astype("float32")
y = x[:, :1] * 2.0
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(32)
model.fit(dataset, epochs=int(os.environ.get("EPOCHS", "2")), steps_per_epoch=int(os.environ.get("STEPS", "30")),
          verbose=2)
for v in model.variables:
    print("DEVICE %s %s" % (v.path, v.value.device))
