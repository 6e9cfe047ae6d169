"""MultiWorkerMirroredStrategy with Keras ``model.fit`` on synthetic data.

Every worker runs this same script with its own ``TF_CONFIG``; they train one replicated model
together, all-reducing gradients over gRPC (ring collectives, which work on CPU). Each worker
reports step and loss through ``launcher.report`` when it can be imported, or prints plain
``global step: N, loss = X`` lines that the profile's ``[metrics]`` regexes pick up.

With ``--checkpoint-dir`` each worker keeps a Keras BackupAndRestore backup in its own
sub-directory, so a restarted worker group resumes from the last finished epoch.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

IMAGE_PIXELS = 28 * 28
NUM_CLASSES = 10


def _load_report() -> ModuleType | None:
    """``launcher.report`` when it can be imported (the agent puts it on PYTHONPATH), else None."""
    try:
        import launcher  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    try:
        module = importlib.import_module("launcher.report")
    except ImportError:
        return None
    return module


report = _load_report()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps-per-epoch", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size over all workers")
    parser.add_argument("--checkpoint-dir", default=None,
                        help="keep per-worker BackupAndRestore backups here (default: none)")
    parser.add_argument("--log-every", type=int, default=1, help="batches between progress reports")
    args = parser.parse_args(argv)
    for name in ("epochs", "steps_per_epoch", "batch_size", "log_every"):
        if getattr(args, name) <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    return args


def task_of_tf_config() -> tuple[str, int]:
    """(task type, index) from TF_CONFIG; a lone process without TF_CONFIG is worker 0."""
    raw = os.environ.get("TF_CONFIG")
    if not raw:
        return "worker", 0
    task = json.loads(raw).get("task", {})
    return str(task.get("type", "worker")), int(task.get("index", 0))


def plain_progress_callback(keras: Any, every_n_batches: int) -> Any:
    """Prints ``global step: N, loss = X`` for scripts run without ``launcher.report``."""

    class PlainProgress(keras.callbacks.Callback):
        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            step = int(self.model.optimizer.iterations.numpy())
            loss = (logs or {}).get("loss")
            if loss is not None and step % every_n_batches == 0:
                print(f"global step: {step}, loss = {float(loss):.6f}", flush=True)

    return PlainProgress()


def training_processes() -> int:
    """How many processes train together: the chief and workers in TF_CONFIG (1 without it)."""
    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    return max(1, len(cluster.get("chief", [])) + len(cluster.get("worker", [])))


def multi_worker_sequential(keras: Any, tf: Any, strategy: Any, layers: list[Any]) -> Any:
    """A ``keras.Sequential`` that ``model.fit`` can train under MultiWorkerMirroredStrategy.

    Keras 3 trips twice over a strategy with more than one worker (keras-team/keras#20585):
    it builds the model by ``strategy.reduce``-ing the whole first ``(images, labels)`` batch,
    which the strategy refuses for a tuple, and it averages each step's logs with
    ``reduce(MEAN, axis=0)``, which fails on scalars. Here the model builds from this worker's
    own part of the batch (only shapes matter), and each step's logs are returned as
    one-element vectors, so the mean over axis 0 is the mean over all replicas.
    """

    class MultiWorkerSequential(keras.Sequential):
        def _maybe_symbolic_build(self, iterator: Any = None, data_batch: Any = None) -> None:
            if iterator is not None and data_batch is None:
                for _, _, batches in iterator:
                    data_batch = keras.tree.map_structure(
                        lambda value: strategy.experimental_local_results(value)[0], next(batches))
                    break
            super()._maybe_symbolic_build(data_batch=data_batch)

        def train_step(self, data: Any) -> dict[str, Any]:
            logs = super().train_step(data)
            if training_processes() == 1:
                return logs  # a lone worker's logs are not reduced over axis 0
            return {name: tf.reshape(value, [1]) for name, value in logs.items()}

    return MultiWorkerSequential(layers)


def make_dataset(tf: Any, global_batch_size: int, worker_seed: int) -> Any:
    """Endless synthetic batches: centred uniform images, labels by a fixed random projection.

    Each worker draws its own images (seeded by its index) and auto-sharding is off, so the
    workers train on different examples without reading any files.
    """
    projection = tf.random.stateless_normal([IMAGE_PIXELS, NUM_CLASSES], seed=[42, 42])
    seed = tf.constant(worker_seed, tf.int64)

    def make_batch(index: Any) -> tuple[Any, Any]:
        images = tf.random.stateless_uniform([global_batch_size, IMAGE_PIXELS], minval=-0.5, maxval=0.5,
                                             seed=tf.stack([index, seed]))
        labels = tf.argmax(tf.matmul(images, projection), axis=1, output_type=tf.int32)
        return images, labels

    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return tf.data.Dataset.counter().map(make_batch).prefetch(2).with_options(options)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    task_type, task_index = task_of_tf_config()
    if task_type not in ("worker", "chief"):
        print(f"mwms_keras.py: nothing to do for a {task_type} task with MultiWorkerMirroredStrategy; "
              "exiting", flush=True)
        return 0

    import keras
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)

    with strategy.scope():
        model = multi_worker_sequential(keras, tf, strategy, [
            keras.Input(shape=(IMAGE_PIXELS,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(NUM_CLASSES),
        ])
        model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))

    seed = task_index + (1000 if task_type == "chief" else 0)
    dataset = make_dataset(tf, args.batch_size, seed)

    callbacks: list[Any] = []
    if report is not None:
        callbacks.append(report.keras_callback(every_n_batches=args.log_every))
    else:
        callbacks.append(plain_progress_callback(keras, args.log_every))
    if args.checkpoint_dir:
        backup_dir = Path(args.checkpoint_dir) / f"backup-{task_type}-{task_index}"
        callbacks.append(keras.callbacks.BackupAndRestore(str(backup_dir)))

    model.fit(dataset, epochs=args.epochs, steps_per_epoch=args.steps_per_epoch, callbacks=callbacks,
              verbose=0)
    if report is not None:
        report.flush()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
