"""A Session-era between-graph script in the style of TensorFlow's old ``mnist_replica.py``: a
``Supervisor`` session, ``global_step = tf.Variable(0, name="global_step")`` (a resource variable
that ``get_global_step()`` rejects), ``sess.run([train_step, global_step], feed_dict=...)`` that
never fetches the loss, and the validation cross entropy fetched alone after training.
MNIST-shaped synthetic data (no download). Each step prints what the fetch returned, so a test
sees that the script got exactly what it asked for. No distlaunch code: run unmodified under
autolog.
"""

import json
import os
import tempfile

import numpy as np
import tensorflow as tf

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
v1 = tf.compat.v1
v1.disable_eager_execution()
config = json.loads(os.environ["TF_CONFIG"])
task_type, task_index = config["task"]["type"], config["task"]["index"]
cluster = tf.train.ClusterSpec(config["cluster"])
server = tf.distribute.Server(cluster, job_name=task_type, task_index=task_index)
if task_type == "ps":
    server.join()

TRAIN_STEPS = int(os.environ.get("TRAIN_STEPS", "200"))
centres = np.random.default_rng(0).normal(size=(10, 784)).astype("float32")


def batch(rng, n):
    labels = rng.integers(0, 10, n)
    images = centres[labels] + rng.normal(scale=3.0, size=(n, 784)).astype("float32")
    return images, np.eye(10, dtype="float32")[labels]


with v1.device(v1.train.replica_device_setter(worker_device="/job:worker/task:%d" % task_index,
                                              cluster=cluster)):
    global_step = tf.Variable(0, name="global_step", trainable=False)
    x = v1.placeholder(tf.float32, [None, 784])
    y_ = v1.placeholder(tf.float32, [None, 10])
    hid_w = tf.Variable(v1.truncated_normal([784, 100], stddev=1.0 / 28))
    hid_b = tf.Variable(tf.zeros([100]))
    sm_w = tf.Variable(v1.truncated_normal([100, 10], stddev=0.1))
    sm_b = tf.Variable(tf.zeros([10]))
    hid = tf.nn.relu(v1.nn.xw_plus_b(x, hid_w, hid_b))
    y = tf.nn.softmax(v1.nn.xw_plus_b(hid, sm_w, sm_b))
    cross_entropy = tf.negative(tf.reduce_sum(y_ * tf.math.log(tf.clip_by_value(y, 1e-10, 1.0))),
                                name="cross_entropy")
    train_step = v1.train.AdamOptimizer(0.01).minimize(cross_entropy, global_step=global_step)
    init_op = v1.global_variables_initializer()

sv = v1.train.Supervisor(is_chief=task_index == 0, logdir=tempfile.mkdtemp(), init_op=init_op,
                         recovery_wait_secs=1, global_step=global_step)
# talk only to the ps tasks and ourselves: a worker that already finished must not block us
sess_config = v1.ConfigProto(device_filters=["/job:ps", "/job:worker/task:%d" % task_index])
sess = sv.prepare_or_wait_for_session(server.target, config=sess_config)
rng = np.random.default_rng(task_index + 1)
step = 0
while step < TRAIN_STEPS:
    xs, ys = batch(rng, 100)
    out = sess.run([train_step, global_step], feed_dict={x: xs, y_: ys})
    step = out[1]
    print("fetched %s of %d: %r, global step %d" % (type(out).__name__, len(out), out[0], step), flush=True)
val_xs, val_ys = batch(np.random.default_rng(99), 1000)
val_xent = sess.run(cross_entropy, feed_dict={x: val_xs, y_: val_ys})
print("After %d training step(s), validation cross entropy = %g" % (TRAIN_STEPS, val_xent), flush=True)
