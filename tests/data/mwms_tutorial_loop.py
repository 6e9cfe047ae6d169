"""MultiWorkerMirroredStrategy custom training loop in the shape of TensorFlow's multi-worker
tutorial (`strategy.run` inside a `tf.function`, epochs of a fixed number of steps, one print per
epoch), with a tiny model; no distlaunch code, so it runs as an unmodified script would.

It trains for ``EPOCHS`` epochs (default: practically endless), so a test can freeze one worker
mid-training (tests/integration/test_frozen_peer.py) and see what the other one says.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

strategy = tf.distribute.MultiWorkerMirroredStrategy()
GLOBAL_BATCH = 16
STEPS = int(os.environ.get("STEPS_PER_EPOCH", "10"))
EPOCHS = int(os.environ.get("EPOCHS", "1000000"))

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((8,)), tf.keras.layers.Dense(8, activation="relu"),
                                 tf.keras.layers.Dense(2)])
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)


def dataset_fn(context):
    x = tf.random.normal([256, 8])
    y = tf.cast(x[:, 0] > 0, tf.int64)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(context.get_per_replica_batch_size(GLOBAL_BATCH))


dist_dataset = strategy.distribute_datasets_from_function(dataset_fn)


@tf.function
def train_step(iterator):
    def step_fn(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            per_example = tf.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return loss

    per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


iterator = iter(dist_dataset)
for epoch in range(EPOCHS):
    total_loss = 0.0
    for _ in range(STEPS):
        total_loss += train_step(iterator)
    print(f"Epoch: {epoch}, train_loss: {float(total_loss / STEPS):f}.", flush=True)
