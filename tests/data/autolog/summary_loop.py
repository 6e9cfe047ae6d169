"""A custom loop that logs to TensorBoard with `tf.summary.scalar` (eager), as TensorBoard's
guide writes it. No distlaunch code: run unmodified under autolog."""

import os
import tempfile

import tensorflow as tf

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
w = tf.Variable(tf.zeros([8, 1]))
x = tf.random.normal([256, 8])
y = tf.matmul(x, tf.ones([8, 1]))
writer = tf.summary.create_file_writer(os.path.join(tempfile.mkdtemp(), "logs"))
with writer.as_default():
    for step in range(int(os.environ.get("STEPS", "200"))):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
        w.assign_sub(0.01 * tape.gradient(loss, w))
        tf.summary.scalar("train_loss", loss, step=step)
        tf.summary.scalar("weight_norm", tf.norm(w), step=step)
print("final loss %f" % float(loss))
