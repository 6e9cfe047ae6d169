"""TF1 between-graph replication: `replica_device_setter` puts the variables on the ps tasks,
each worker runs a MonitoredTrainingSession; ps tasks `server.join()`. Prints each variable's
device. No distlaunch code: run unmodified under autolog."""

import json
import os
import tempfile

import numpy as np
import tensorflow as tf

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
tf.compat.v1.disable_eager_execution()
config = json.loads(os.environ["TF_CONFIG"])
task_type, task_index = config["task"]["type"], config["task"]["index"]
cluster = tf.train.ClusterSpec(config["cluster"])
server = tf.distribute.Server(cluster, job_name=task_type, task_index=task_index)
if task_type == "ps":
    server.join()

with tf.compat.v1.device(tf.compat.v1.train.replica_device_setter(
        worker_device="/job:worker/task:%d" % task_index, cluster=cluster)):
    global_step = tf.compat.v1.train.get_or_create_global_step()
    x = tf.compat.v1.placeholder(tf.float32, [None, 8])
    y = tf.compat.v1.placeholder(tf.float32, [None, 1])
    w1 = tf.compat.v1.get_variable("w1", [8, 16])
    w2 = tf.compat.v1.get_variable("w2", [16, 1])
    loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(tf.matmul(x, w1)), w2) - y), name="loss")
    train_op = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=global_step)
    norm_summary = tf.compat.v1.summary.scalar("train/w1_norm", tf.norm(w1))
writer = tf.compat.v1.summary.FileWriter(os.path.join(tempfile.mkdtemp(), "tb"))

rng = np.random.default_rng(task_index)
# each worker trains this many steps of the shared global step from when it joins
hooks = [tf.compat.v1.train.StopAtStepHook(num_steps=int(os.environ.get("NUM_STEPS", "300")))]
# talk only to the ps tasks and ourselves: a worker that already finished must not block us
config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", "/job:worker/task:%d" % task_index])
with tf.compat.v1.train.MonitoredTrainingSession(master=server.target, is_chief=task_index == 0,
                                                 hooks=hooks, config=config) as sess:
    while not sess.should_stop():
        xs = rng.normal(size=(32, 8)).astype("float32")
        _, value, step = sess.run([train_op, loss, global_step], feed_dict={x: xs, y: xs[:, :1]})
        if step % 50 < 2 and not sess.should_stop():
            writer.add_summary(sess.run(norm_summary), step)
for v in tf.compat.v1.global_variables():
    print("DEVICE %s %s" % (v.name, v.device))
