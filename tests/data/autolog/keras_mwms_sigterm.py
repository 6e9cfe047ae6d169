"""tf_keras fit under MultiWorkerMirroredStrategy with a BackupAndRestore saving every SAVE_EVERY
batches, as TensorFlow's multi-worker tutorial writes it. With KILL_AT set, the worker whose index
is in KILL_INDEX (a comma list) sends itself SIGTERM (as a drain does) at the end of that global batch. Prints the
step of every batch it trains, so a test counts the steps a second run redoes."""

import json
import os
import signal
import sys
import time

import tensorflow as tf
import tf_keras as keras

backup_dir = os.path.expandvars(sys.argv[1])
kill_at = int(os.environ.get("KILL_AT", "-1"))
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
mine = str(index) in os.environ.get("KILL_INDEX", "0").split(",")
strategy = tf.distribute.MultiWorkerMirroredStrategy()
x = tf.random.stateless_uniform((320, 4), seed=(0, 1))  # 10 global batches of 32 an epoch
options = tf.data.Options()
options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
data = tf.data.Dataset.from_tensor_slices((x, tf.reduce_sum(x, axis=1, keepdims=True)))
data = data.batch(32).repeat().with_options(options)
with strategy.scope():
    hidden = int(os.environ.get("HIDDEN", "0"))  # units of a hidden layer: checkpoints that weigh something
    layers = [keras.layers.Dense(hidden)] if hidden > 0 else []
    model = keras.Sequential([keras.Input((4,)), *layers, keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")


class Steps(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        print(f"trained step {step}", flush=True)
        time.sleep(float(os.environ.get("STEP_SECONDS", "0")))  # pacing, so a drain comes mid-fit
        if step == kill_at and mine:
            os.kill(os.getpid(), signal.SIGTERM)


backup = keras.callbacks.BackupAndRestore(backup_dir, save_freq=int(os.environ.get("SAVE_EVERY", "7")))
model.fit(data, epochs=int(os.environ.get("EPOCHS", "3")), steps_per_epoch=10, verbose=0,
          callbacks=[Steps(), backup])
print(f"finished at step {int(model.optimizer.iterations.numpy())}", flush=True)
