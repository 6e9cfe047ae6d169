"""Keras model.fit whose data turns to NaN half-way: the loss autolog reads becomes NaN."""

import numpy as np
import tensorflow as tf

x = np.random.default_rng(0).random((640, 4), dtype=np.float32)
y = x.sum(axis=1, keepdims=True)
x[320:] = np.nan  # batch 11 on (batch_size 32): the running loss is NaN from there
model = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
model.fit(x, y, batch_size=32, epochs=2, shuffle=False, verbose=0)
print("fit done", flush=True)
