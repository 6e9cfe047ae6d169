"""tf_keras fit with a BackupAndRestore saving every SAVE_EVERY batches; with KILL_AT set, the
process sends itself SIGTERM (as a drain does) at the end of that global batch. Prints the step
of every batch it trains, so a test counts the steps a second run redoes."""

import os
import signal
import sys
import time

import numpy as np
import tf_keras as keras

backup_dir, kill_at = os.path.expandvars(sys.argv[1]), int(os.environ.get("KILL_AT", "-1"))
x = np.random.default_rng(0).random((320, 4), dtype=np.float32)  # 10 batches of 32 an epoch
y = x.sum(axis=1, keepdims=True)
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")


class Steps(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        print(f"trained step {step}", flush=True)
        time.sleep(float(os.environ.get("STEP_SECONDS", "0")))  # pacing, so a drain comes mid-fit
        if step == kill_at:
            os.kill(os.getpid(), signal.SIGTERM)


backup = keras.callbacks.BackupAndRestore(backup_dir, save_freq=int(os.environ.get("SAVE_EVERY", "7")))
model.fit(x, y, batch_size=32, epochs=3, shuffle=False, verbose=0, callbacks=[Steps(), backup])
print(f"finished at step {int(model.optimizer.iterations.numpy())}", flush=True)
