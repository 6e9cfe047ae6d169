"""TF1 between-graph replication: `replica_device_setter` puts the variables on the ps tasks,
each worker runs a MonitoredTrainingSession; ps tasks `server.join()`. Prints each variable's
device. No distlaunch code: run unmodified under autolog."""

import json
import os

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

rng = np.random.default_rng(task_index)
hooks = [tf.compat.v1.train.StopAtStepHook(last_step=int(os.environ.get("LAST_STEP", "400")))]
with tf.compat.v1.train.MonitoredTrainingSession(master=server.target, is_chief=task_index == 0,
                                                 hooks=hooks) as sess:
    while not sess.should_stop():
        xs = rng.normal(size=(32, 8)).astype("float32")
        _, value, step = sess.run([train_op, loss, global_step], feed_dict={x: xs, y: xs[:, :1]})
for v in tf.compat.v1.global_variables():
    print("DEVICE %s %s" % (v.name, v.device))
