"""ParameterServerStrategy custom training loop in the shape of TensorFlow's tutorial: workers and
parameter servers only serve; the chief coordinates, schedules `step_fn` and joins per epoch; the
embedding is sharded over the two ps tasks. No distlaunch code: run unmodified under autolog."""

import os

import tensorflow as tf

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
if resolver.task_type in ("worker", "ps"):
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol="grpc", start=True)
    server.join()

partitioner = tf.distribute.experimental.partitioners.MaxSizePartitioner(max_shard_bytes=4096, max_shards=2)
strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)

VOCAB, DIM, BATCH = 64, 32, 16
with strategy.scope():
    embedding = tf.Variable(tf.random.uniform([VOCAB, DIM]), name="embedding")
    dense = tf.Variable(tf.random.uniform([DIM, 2]), name="dense")
    optimizer = tf.keras.optimizers.SGD(learning_rate=0.1)
    accuracy = tf.keras.metrics.Accuracy()


def dataset_fn(_):
    ids = tf.random.uniform([1024], 0, VOCAB, dtype=tf.int64)
    labels = tf.cast(ids % 2, tf.int64)
    return tf.data.Dataset.from_tensor_slices((ids, labels)).shuffle(256).batch(BATCH).repeat()


@tf.function
def step_fn(iterator):
    def replica_fn(ids, labels):
        with tf.GradientTape() as tape:
            logits = tf.matmul(tf.nn.embedding_lookup(embedding, ids), dense)
            per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
            loss = tf.nn.compute_average_loss(per_example)
        trainable = list(embedding.variables) + [dense]  # a sharded variable trains shard by shard
        grads = tape.gradient(loss, trainable)
        optimizer.apply_gradients(zip(grads, trainable))
        accuracy.update_state(labels, tf.argmax(logits, axis=1))
        return loss

    ids, labels = next(iterator)
    losses = strategy.run(replica_fn, args=(ids, labels))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)


@tf.function
def per_worker_dataset_fn():
    return strategy.distribute_datasets_from_function(dataset_fn)


per_worker_iterator = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))
for epoch in range(3):
    accuracy.reset_state()
    for _ in range(40):
        coordinator.schedule(step_fn, args=(per_worker_iterator,))
    coordinator.join()
    print("Finished epoch %d, accuracy is %f." % (epoch, accuracy.result().numpy()))
for shard in embedding.variables:
    print("DEVICE %s %s" % (shard.name, shard.device))
print("DEVICE %s %s" % (dense.name, dense.device))
