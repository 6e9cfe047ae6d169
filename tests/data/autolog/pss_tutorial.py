"""The shape of TensorFlow's ParameterServerStrategy tutorial (custom training loop), short as
published: a Keras model and optimizer made under the strategy's scope, 4 epochs of 5 scheduled
steps with a join at each epoch's end, then one more step whose loss it fetches and prints
(``Final loss is ...``), and the script ends. The whole job takes about a second: it ends between
two of autolog's reads; its optimizer ends at step EPOCHS * STEPS_PER_EPOCH + 1. No distlaunch
code: run unmodified under autolog."""

import os

import tensorflow as tf

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
if resolver.task_type in ("worker", "ps"):
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol="grpc", start=True)
    server.join()

strategy = tf.distribute.ParameterServerStrategy(resolver)
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.Input(shape=(4,)), tf.keras.layers.Dense(1, activation="sigmoid")])
    optimizer = tf.keras.optimizers.RMSprop(learning_rate=0.1)
    accuracy = tf.keras.metrics.Accuracy()


def dataset_fn(_):
    features = tf.random.stateless_uniform([64, 4], seed=(1, 2))
    labels = tf.cast(tf.reduce_sum(features, axis=1, keepdims=True) > 2.0, tf.int64)
    return tf.data.Dataset.from_tensor_slices((features, labels)).shuffle(64).batch(8).repeat()


@tf.function
def per_worker_dataset_fn():
    return strategy.distribute_datasets_from_function(dataset_fn)


@tf.function
def step_fn(iterator):
    def replica_fn(batch_data, labels):
        with tf.GradientTape() as tape:
            pred = model(batch_data, training=True)
            per_example_loss = tf.keras.losses.BinaryCrossentropy(reduction="none")(labels, pred)
            loss = tf.nn.compute_average_loss(per_example_loss)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        accuracy.update_state(labels, tf.cast(tf.greater(pred, 0.5), tf.int64))
        return loss

    batch_data, labels = next(iterator)
    losses = strategy.run(replica_fn, args=(batch_data, labels))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
per_worker_iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))

num_epochs = int(os.environ.get("EPOCHS", "4"))
steps_per_epoch = int(os.environ.get("STEPS_PER_EPOCH", "5"))
for i in range(num_epochs):
    accuracy.reset_state()
    for _ in range(steps_per_epoch):
        coordinator.schedule(step_fn, args=(per_worker_iterator,))
    # Wait at epoch boundaries.
    coordinator.join()
    print("Finished epoch %d, accuracy is %f." % (i, accuracy.result().numpy()))

loss = coordinator.schedule(step_fn, args=(per_worker_iterator,))
print("Final loss is %f" % loss.fetch())
