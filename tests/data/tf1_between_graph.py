"""A legacy TF1 between-graph script, as many still run: the role from --job_name/--task_index,
the cluster from TF_CONFIG, variables on the ps tasks through replica_device_setter.

Written for the tests of `distlaunch init` (which reads it, never runs it); it runs as it stands
with tf.compat.v1 when each task gets its TF_CONFIG.
"""

import argparse
import json
import os

import tensorflow.compat.v1 as tf


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--job_name", required=True, choices=["ps", "worker"])
    parser.add_argument("--task_index", type=int, default=0)
    parser.add_argument("--train_dir", default="/tmp/tf1_between_graph")
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    tf.disable_eager_execution()
    cluster = tf.train.ClusterSpec(json.loads(os.environ["TF_CONFIG"])["cluster"])
    server = tf.train.Server(cluster, job_name=args.job_name, task_index=args.task_index)
    if args.job_name == "ps":
        server.join()
        return
    device = f"/job:worker/task:{args.task_index}"
    with tf.device(tf.train.replica_device_setter(worker_device=device, cluster=cluster)):
        step = tf.train.get_or_create_global_step()
        weight = tf.Variable(tf.zeros([4, 1]))
        features = tf.random.normal([32, 4])
        loss = tf.reduce_mean(tf.square(tf.matmul(features, weight) - 1.0))
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=step)
    hooks = [tf.train.StopAtStepHook(last_step=args.steps)]
    with tf.train.MonitoredTrainingSession(master=server.target, is_chief=args.task_index == 0,
                                           checkpoint_dir=args.train_dir, hooks=hooks) as session:
        while not session.should_stop():
            _, value, at = session.run([train, loss, step])
            print(f"global step: {at}, loss = {value:.4f}", flush=True)


if __name__ == "__main__":
    main()
