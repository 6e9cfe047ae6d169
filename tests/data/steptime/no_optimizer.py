"""A MultiWorkerMirrored custom loop without an optimizer (issue 46 §1), with no distlaunch code.

The shape of TensorFlow's "basic training loops" guide put under MultiWorkerMirroredStrategy, as
research code writes it: a ``tf.function`` step reads ``next(iterator)``, takes gradients with
``GradientTape`` and updates with ``w.assign_sub(lr * g)`` (the variables aggregate by MEAN, so
the update is an all-reduce across the workers), and returns the loss. No Keras, no optimizer, no
step variable: the steps are the step function's calls.

The input pipeline of the tasks in ``SLOW_TASKS`` (comma-separated task ids, or ``all``) gives a
batch every ``SLEEP_MS`` (30) from a ``tf.py_function`` that sleeps: ``all`` makes every worker
input-bound, ``worker:1`` makes worker:0 wait for worker:1 in the all-reduce. Trains ``STEPS``
steps (every worker the same number: a collective waits for all), then prints
``worker:0 steps N loss X``. Where ``STOP_AT_FILE`` names a file, every tenth step reads it: a
step number written there (by a test done with the job) becomes the last step, for every worker
alike as long as each reads it before that step.
"""

import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

STEPS = int(os.environ.get("STEPS", "100"))
SLEEP_S = float(os.environ.get("SLEEP_MS", "30")) / 1000.0
SLOW_TASKS = os.environ.get("SLOW_TASKS", "worker:1").split(",")
STOP_AT_FILE = os.environ.get("STOP_AT_FILE", "")
LEARNING_RATE = 0.05
task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
ME = "%s:%s" % (task.get("type", "worker"), task.get("index", 0))


def sleepy(x):
    """A batch at each multiple of SLEEP_S of the wall clock, as a sensor or a stream delivers them:
    two slow pipelines on one machine deliver together (sleeping SLEEP_S each, they drift apart,
    and the worker ahead waits for the other part of each step: true, but not input-bound by
    construction)."""
    time.sleep(SLEEP_S - time.time() % SLEEP_S)
    return x


strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    w = tf.Variable(tf.zeros([8, 1]), aggregation=tf.VariableAggregation.MEAN)
    b = tf.Variable(tf.zeros([1]), aggregation=tf.VariableAggregation.MEAN)


def dataset_fn(context):
    x = tf.random.stateless_normal([64, 8], seed=[1, 2])
    y = tf.sin(tf.reduce_sum(x, axis=1, keepdims=True))  # no line fits it: the loss stays above 0
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8)
    if ME in SLOW_TASKS or "all" in SLOW_TASKS:
        data = data.map(lambda x, y: (tf.py_function(sleepy, [x], tf.float32), y))
    return data


iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))


@tf.function
def train_step(it):
    def step_fn(inputs):
        x, y = inputs
        x = tf.ensure_shape(x, [None, 8])
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
        dw, db = tape.gradient(loss, [w, b])
        w.assign_sub(LEARNING_RATE * dw)
        b.assign_sub(LEARNING_RATE * db)
        return loss

    losses = strategy.run(step_fn, args=(next(it),))
    return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)


def stop_at(step, limit):
    """The last step: STOP_AT_FILE's number, once it is there (never below this step)."""
    try:
        with open(STOP_AT_FILE) as f:
            return max(step, min(limit, int(f.read())))
    except (OSError, ValueError):
        return limit


loss = None
step, last = 0, STEPS
while step < last:
    loss = train_step(iterator)
    step += 1
    if STOP_AT_FILE and step % 10 == 0 and last == STEPS:
        last = stop_at(step, STEPS)
print("%s steps %d loss %.6f" % (ME, step, float(loss)), flush=True)
