"""MultiWorkerMirroredStrategy custom training loop in the shape of TensorFlow's tutorial:
`strategy.run` inside a `tf.function`, a few epochs of a fixed number of steps, one print per
epoch. No distlaunch code: run unmodified under autolog."""

import os

import tensorflow as tf

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
strategy = tf.distribute.MultiWorkerMirroredStrategy()
GLOBAL_BATCH = 32

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input((16,)), tf.keras.layers.Dense(16, activation="relu"),
                                 tf.keras.layers.Dense(4)])
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.05)
    train_accuracy = tf.keras.metrics.SparseCategoricalAccuracy()


def dataset_fn(context):
    x = tf.random.normal([512, 16])
    y = tf.cast(tf.reduce_sum(x[:, :2], axis=1) > 0, tf.int64)
    batch = context.get_per_replica_batch_size(GLOBAL_BATCH)
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch)


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
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        train_accuracy.update_state(y, logits)
        return loss

    per_replica_losses = strategy.run(step_fn, args=(next(iterator),))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)


iterator = iter(dist_dataset)
STEPS = int(os.environ.get("STEPS_PER_EPOCH", "70"))
for epoch in range(3):
    total_loss = 0.0
    for _ in range(STEPS):
        total_loss += train_step(iterator)
    print("Epoch: %d, accuracy: %f, train_loss: %f." % (epoch, train_accuracy.result(), total_loss / STEPS))
    train_accuracy.reset_state()
