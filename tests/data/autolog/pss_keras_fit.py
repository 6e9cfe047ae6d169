"""ParameterServerStrategy with Keras `model.fit` (tf_keras, TF_USE_LEGACY_KERAS=1), in the shape
of TensorFlow's tutorial: ps and workers sit in `server.join()`, the chief fits from a
DatasetCreator; the embedding is sharded over the ps tasks. Prints where each shard lives and the
last epoch's loss. No distlaunch code: run unmodified under autolog."""

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
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Embedding(64, 32), tf.keras.layers.GlobalAveragePooling1D(),
                                 tf.keras.layers.Dense(2)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.1),
                  loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), steps_per_execution=1)


def dataset_fn(input_context):
    ids = tf.random.uniform([1024, 4], 0, 64, dtype=tf.int64)
    labels = ids[:, 0] % 2
    return tf.data.Dataset.from_tensor_slices((ids, labels)).shuffle(256).batch(16).repeat()


history = model.fit(tf.keras.utils.experimental.DatasetCreator(dataset_fn), epochs=2,
                    steps_per_epoch=int(os.environ.get("STEPS", "40")), verbose=2)
for variable in model.variables:
    for part in getattr(variable, "variables", [variable]):
        print("DEVICE %s %s" % (part.name, part.device))
print("Final loss is %r" % history.history["loss"][-1])
