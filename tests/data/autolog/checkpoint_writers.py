"""Writes a few checkpoints with one API, named by argv[1] (or its index in APIS), into ./ckpt-<api>
(or $CKPT_DIR):
unmodified TensorFlow / Keras code, no distlaunch import. Prints ``WROTE <step>`` after each
checkpoint whose step it knows. Used by tests/integration/test_autolog_checkpoints.py."""

import os
import sys

#: the API of each worker index in tests/integration/test_autolog_checkpoints.py's job
APIS = ["checkpoint_manager", "keras3_backup", "tf_keras_backup", "saver", "keras3_model_checkpoint"]
api = APIS[int(sys.argv[1])] if sys.argv[1].isdigit() else sys.argv[1]
where = os.path.abspath(os.environ.get("CKPT_DIR") or "ckpt-" + api)
os.makedirs(where, exist_ok=True)
if api in ("tf_keras_backup", "mwms_tf_keras_backup"):
    os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

x = np.random.RandomState(0).rand(64, 4).astype("float32")
y = x.sum(axis=1, keepdims=True)


def keras_model(keras):
    model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
    return model


if api in ("keras3_backup", "keras3_model_checkpoint"):
    import keras

    model = keras_model(keras)
    if api == "keras3_backup":
        callback = keras.callbacks.BackupAndRestore(backup_dir=where, delete_checkpoint=False)
    else:
        callback = keras.callbacks.ModelCheckpoint(os.path.join(where, "w{epoch:02d}.weights.h5"),
                                                   save_weights_only=True)
    model.fit(x, y, batch_size=16, epochs=3, verbose=0, callbacks=[callback])
elif api == "mwms_tf_keras_backup":  # TensorFlow's multi-worker Keras tutorial: one backup_dir for all
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    keras = tf.keras
    assert "tf_keras" in keras.__name__, keras.__name__
    with strategy.scope():
        model = keras_model(keras)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat().with_options(options)
    model.fit(dataset, epochs=2, steps_per_epoch=4, verbose=0,
              callbacks=[keras.callbacks.BackupAndRestore(backup_dir=where, delete_checkpoint=False)])
elif api == "tf_keras_backup":
    keras = tf.keras
    assert "tf_keras" in keras.__name__, keras.__name__
    model = keras_model(keras)
    model.fit(x, y, batch_size=16, epochs=3, verbose=0,
              callbacks=[keras.callbacks.BackupAndRestore(backup_dir=where, delete_checkpoint=False)])
elif api == "checkpoint_manager":
    w = tf.Variable(tf.zeros([4, 1]))
    optimizer = tf.keras.optimizers.SGD(0.01)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(w=w, optimizer=optimizer), where, max_to_keep=2)
    for step in range(1, 31):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        optimizer.apply_gradients([(tape.gradient(loss, w), w)])
        if step % 10 == 0:
            manager.save()
            print("WROTE %d" % step, flush=True)
elif api in ("checkpoint_save", "checkpoint_write"):
    w = tf.Variable(tf.zeros([4, 1]))
    optimizer = tf.keras.optimizers.SGD(0.01)
    checkpoint = tf.train.Checkpoint(w=w, optimizer=optimizer)
    for step in range(1, 21):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
        optimizer.apply_gradients([(tape.gradient(loss, w), w)])
        if step % 10 == 0:
            if api == "checkpoint_save":
                checkpoint.save(os.path.join(where, "ckpt"))
            else:
                checkpoint.write(os.path.join(where, "step-%d" % step))
            print("WROTE %d" % step, flush=True)
elif api == "preemption":  # a preemption notice (the watcher fn) after step 20: the handler saves
    import time

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        w = tf.Variable(tf.zeros([4, 1]))
        optimizer = tf.keras.optimizers.SGD(0.01)
    noticed = [False]
    config = tf.distribute.experimental.TerminationConfig(
        termination_watcher_fn=lambda: noticed[0], exit_fn=lambda: None, grace_period=0)
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, tf.train.Checkpoint(w=w, optimizer=optimizer), where, config)

    @tf.function
    def train_step():
        def one():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
            optimizer.apply_gradients([(tape.gradient(loss, w), w)])
        strategy.run(one)

    deadline = time.monotonic() + 60  # the watcher thread polls once a second
    steps = 0
    while tf.train.latest_checkpoint(where) is None and time.monotonic() < deadline:
        handler.run(train_step)
        steps += 1
        noticed[0] = steps >= 20
    print("WROTE %d" % steps, flush=True)
elif api == "monitored_session":
    tf.compat.v1.disable_eager_execution()
    step_var = tf.compat.v1.train.get_or_create_global_step()
    w = tf.compat.v1.get_variable("w", [4, 1])
    loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
    train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=step_var)
    hooks = [tf.compat.v1.train.StopAtStepHook(last_step=30)]
    with tf.compat.v1.train.MonitoredTrainingSession(checkpoint_dir=where, save_checkpoint_steps=10,
                                                     save_checkpoint_secs=None, save_summaries_steps=None,
                                                     hooks=hooks) as sess:
        while not sess.should_stop():
            sess.run(train)
elif api == "saver":
    tf.compat.v1.disable_eager_execution()
    step_var = tf.compat.v1.train.get_or_create_global_step()
    w = tf.compat.v1.get_variable("w", [4, 1])
    loss = tf.reduce_mean((tf.matmul(x, w) - y) ** 2)
    train = tf.compat.v1.train.GradientDescentOptimizer(0.01).minimize(loss, global_step=step_var)
    saver = tf.compat.v1.train.Saver()
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        for _ in range(30):
            sess.run(train)
            step = sess.run(step_var)
            if step % 10 == 0:
                saver.save(sess, os.path.join(where, "model.ckpt"), global_step=step_var)
                print("WROTE %d" % step, flush=True)
elif api == "own_files":  # a format autolog does not know: the profile's checkpoint_dir is watched
    for step in (10, 20):
        part = os.path.join(where, "state-%d.npz" % step)
        np.savez(part + ".tmp.npz", x=x)
        os.replace(part + ".tmp.npz", part)
        print("WROTE %d" % step, flush=True)
else:
    raise SystemExit("unknown api " + api)

# Side by side in one job, the first to finish would end it (the chief's success stops the rest):
# with $DONE_EVENTS (the run's events.jsonl), the chief (argv[1] == "0") leaves last, once the
# launcher recorded $DONE_COUNT other tasks as succeeded (a mark left before exit was not enough: a
# loaded machine took seconds to tear tf_keras down after it, and the chief's success stopped it)
done_events = os.environ.get("DONE_EVENTS")
if done_events and sys.argv[1] == "0":
    import json
    import time

    deadline = time.monotonic() + 240
    ended: set = set()
    while len(ended) < int(os.environ["DONE_COUNT"]):
        if time.monotonic() > deadline:
            raise SystemExit("the other writers did not end in 240 s; ended: %s" % sorted(ended))
        time.sleep(0.2)
        if not os.path.exists(done_events):
            continue
        with open(done_events) as f:
            for line in f:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if event.get("kind") == "state" and event.get("state") == "succeeded":
                    ended.add(event["task"])
