"""A custom loop with a Keras 2 legacy optimizer (tf_keras, TF_USE_LEGACY_KERAS=1). No
distlaunch code: run unmodified under autolog."""

import os

import tensorflow as tf

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
optimizer = tf.keras.optimizers.legacy.SGD(0.01)
w = tf.Variable(tf.ones([8, 1]))
x = tf.random.normal([64, 8])
y = tf.matmul(x, tf.fill([8, 1], 0.5))


@tf.function
def train_step():
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
    optimizer.apply_gradients([(tape.gradient(loss, w), w)])
    return loss


for _ in range(int(os.environ.get("STEPS", "300"))):
    loss = train_step()
print("final loss %f" % float(loss))
