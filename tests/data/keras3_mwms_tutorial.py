"""TensorFlow's multi-worker Keras tutorial as a newcomer writes it (issue 56): tf.keras, a Sequential
compiled in strategy.scope(), model.fit. Under Keras 3 (TensorFlow 2.16+) with two workers it fails at
fit's first step; with TF_USE_LEGACY_KERAS=1 (tf_keras) it trains."""
import numpy as np
import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = np.random.rand(256, 8).astype("float32")
y = np.random.rand(256, 1).astype("float32")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(32).repeat()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((8,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(1)])
    model.compile(optimizer="adam", loss="mse")
model.fit(dataset, epochs=2, steps_per_epoch=5)
