"""ParameterServerStrategy in a container, unmodified (no distlaunch import: autolog reports its
step, loss and placement). ps and workers serve; the chief trains ``--steps`` steps, waits in
``wait_for_release`` until the file ``--release`` exists (the test takes stacks and kills a worker
meanwhile), trains ``--steps`` more, prints the step its optimizer ended at, and exits 0."""

import argparse
import os
import time

import tensorflow as tf

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
parser.add_argument("--release", required=True)
args = parser.parse_args()

resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
if resolver.task_type in ("worker", "ps"):
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol="grpc", start=True)
    server.join()

strategy = tf.distribute.ParameterServerStrategy(resolver)
with strategy.scope():
    weights = tf.Variable(tf.random.uniform([8, 2]), name="weights")
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.1)


def dataset_fn(_):
    x = tf.random.uniform([256, 8])
    y = tf.cast(tf.reduce_sum(x, axis=1) > 4.0, tf.int64)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat()


@tf.function
def step_fn(iterator):
    def replica_fn(x, y):
        with tf.GradientTape() as tape:
            logits = tf.matmul(x, weights)
            loss = tf.nn.compute_average_loss(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        optimizer.apply_gradients([(tape.gradient(loss, weights), weights)])
        return loss

    x, y = next(iterator)
    return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_fn, args=(x, y)), axis=None)


coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
iterator = iter(coordinator.create_per_worker_dataset(
    lambda: strategy.distribute_datasets_from_function(dataset_fn)))


def train(steps):
    for _ in range(steps):
        coordinator.schedule(step_fn, args=(iterator,))
    coordinator.join()


def wait_for_release(path):
    while not os.path.exists(path):
        time.sleep(0.1)


train(args.steps)
print(f"waiting for {args.release}", flush=True)
wait_for_release(args.release)
train(args.steps)
# the step it ended at, as the script sees it: Keras 3 counts iterations by read-then-assign, so
# two workers' increments may overwrite each other and it is not 2 * steps
print(f"done at step {int(optimizer.iterations)}", flush=True)
