"""ParameterServerStrategy training on synthetic MNIST-shaped data, one script for every role.

The task type in ``TF_CONFIG`` picks what this process does:

* ``ps`` / ``worker``: start a TensorFlow gRPC server and serve until stopped (the launcher
  stops them once the chief is done).
* ``chief``: the coordinator. It builds a small 784-64-10 network whose variables live on the
  ps tasks (big kernels sharded over all of them), schedules training steps on the workers with
  ``ClusterCoordinator``, reports global step and loss, and checkpoints so that a restarted chief
  resumes where the last checkpoint left off instead of starting again at step 0 (``Checkpoints``:
  one save function traced once, as ``tf.train.CheckpointManager`` would retrace at every save).
* ``evaluator``: nothing to do here; it says so and exits 0.

The data is made inside each worker's input pipeline: random 28x28 images whose labels come
from a fixed random linear projection, so there is a real signal and the loss falls. Nothing is
downloaded.

The model and optimizer are plain ``tf.Module``s rather than Keras objects: Keras 3 does not
support ParameterServerStrategy, and a hand-written momentum SGD keeps its slots next to the
shard they belong to.
"""

from __future__ import annotations

import argparse
import glob
import importlib
import json
import math
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

IMAGE_PIXELS = 28 * 28
HIDDEN_UNITS = 64
NUM_CLASSES = 10
# A 784x64 float32 kernel is ~200 KB: with this minimum it is split over up to max_shards ps
# tasks, while biases and the small output kernel stay whole.
MIN_SHARD_BYTES = 64 * 1024


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
    parser.add_argument("--steps", type=int, default=2000, help="total global steps (default 2000)")
    parser.add_argument("--batch-size", type=int, default=64, help="examples per step (default 64)")
    parser.add_argument("--learning-rate", type=float, default=0.05)
    parser.add_argument("--checkpoint-dir", default=None,
                        help="save here and resume from the latest checkpoint here (default: none)")
    parser.add_argument("--checkpoint-every", type=int, default=100, help="steps between checkpoints")
    parser.add_argument("--log-every", type=int, default=20, help="steps between progress reports")
    parser.add_argument("--stop-at", type=float, default=None, metavar="UNIX_TIME",
                        help="end training (checkpoint, exit 0) at this wall-clock time even if steps remain: "
                             "a job of a fixed duration however often its chief restarts (benchmarks/chaos.py)")
    parser.add_argument("--train-seconds", type=float, default=None, metavar="SECONDS",
                        help="train for at most this long from the first step scheduled, then checkpoint and exit 0 "
                             "(default: no limit): with a large --steps, every run trains this long more, "
                             "resuming from the checkpoint (the demo, cluster_profiles/local.toml)")
    args = parser.parse_args(argv)
    for name in ("steps", "batch_size", "checkpoint_every", "log_every", "train_seconds"):
        value = getattr(args, name)
        if value is not None and value <= 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    return args


def emit_progress(step: int, loss: float, steps_per_sec: float | None = None) -> None:
    """One progress line: a ``report`` metric when available, else a regex-friendly plain line."""
    if report is not None:
        values = {} if steps_per_sec is None else {"steps_per_sec": steps_per_sec}
        report.report(step=step, loss=loss, **values)
    else:
        print(f"global step: {step}, loss = {loss:.6f}", flush=True)


def emit_placement(variables: list[Any]) -> None:
    """Say where each variable (each shard) lives: a ``report`` placement line, else plain lines."""
    if report is not None:
        report.report_placement(variables)
        return
    for var in variables:
        for part in getattr(var, "variables", None) or [var]:
            print(f"placement: {part.name} {part.shape.as_list()} on {part.device}", flush=True)


def limit_threads(tf: Any) -> None:
    """A few threads per process: a local cluster runs four TensorFlow processes on few cores."""
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)


def serve_forever(tf: Any, resolver: Any) -> None:
    """Run this ps/worker task's gRPC server until the process is stopped."""
    # Errors talking to this server go back to the coordinator instead of being retried here.
    os.environ["GRPC_FAIL_FAST"] = "use_caller"
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=2)
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        config=config,
        start=True,
    )
    print(f"{resolver.task_type}:{resolver.task_id} serving at {server.target}", flush=True)
    server.join()


def shards_of(variable: Any) -> list[Any]:
    """The plain variables behind ``variable``: the shards of a ShardedVariable, else itself."""
    parts = getattr(variable, "variables", None)
    return list(parts) if parts else [variable]


def build_model(tf: Any) -> Any:
    class Mlp(tf.Module):
        """784 -> 64 (relu) -> 10 logits."""

        def __init__(self) -> None:
            super().__init__(name="mlp")
            self.hidden_kernel = tf.Variable(_glorot(tf, IMAGE_PIXELS, HIDDEN_UNITS, seed=1),
                                             name="hidden/kernel")
            self.hidden_bias = tf.Variable(tf.zeros([HIDDEN_UNITS]), name="hidden/bias")
            self.output_kernel = tf.Variable(_glorot(tf, HIDDEN_UNITS, NUM_CLASSES, seed=2),
                                             name="output/kernel")
            self.output_bias = tf.Variable(tf.zeros([NUM_CLASSES]), name="output/bias")

        def weights(self) -> list[Any]:
            return [self.hidden_kernel, self.hidden_bias, self.output_kernel, self.output_bias]

        def trainable_shards(self) -> list[Any]:
            return [part for var in self.weights() for part in shards_of(var)]

        def __call__(self, images: Any) -> Any:
            # Reading through the shards (not the ShardedVariable) lets gradients reach each shard.
            hidden_kernel = tf.concat(shards_of(self.hidden_kernel), axis=0)
            output_kernel = tf.concat(shards_of(self.output_kernel), axis=0)
            hidden = tf.nn.relu(tf.matmul(images, hidden_kernel) + self.hidden_bias)
            return tf.matmul(hidden, output_kernel) + self.output_bias

    return Mlp()


def _glorot(tf: Any, fan_in: int, fan_out: int, seed: int) -> Any:
    limit = math.sqrt(6.0 / (fan_in + fan_out))
    return tf.random.stateless_uniform([fan_in, fan_out], seed=[seed, 0], minval=-limit, maxval=limit)


def build_optimizer(tf: Any, strategy: Any, shards: list[Any], learning_rate: float) -> Any:
    class MomentumSgd(tf.Module):
        """SGD with momentum; each velocity slot is created on the ps task of its shard."""

        def __init__(self) -> None:
            super().__init__(name="momentum_sgd")
            self.learning_rate = learning_rate
            self.momentum = 0.9
            self.velocities = []
            for shard in shards:
                with strategy.extended.colocate_vars_with(shard):
                    self.velocities.append(tf.Variable(tf.zeros(shard.shape, shard.dtype), trainable=False,
                                                       name=shard.name.split(":")[0] + "/velocity"))

        def apply(self, gradients: list[Any], variables: list[Any]) -> None:
            for gradient, velocity, variable in zip(gradients, self.velocities, variables, strict=True):
                velocity.assign(self.momentum * velocity + gradient)
                variable.assign_sub(self.learning_rate * velocity)

    return MomentumSgd()


class Checkpoints:
    """Numbered checkpoints (``ckpt-<step>``) in a directory, the newest ``max_to_keep`` kept, as
    ``tf.train.CheckpointManager`` keeps them: the same names and ``checkpoint`` state file, so
    ``tf.train.latest_checkpoint`` and checkpoints of earlier runs work alike.

    Why not the manager: with variables on more than one task (the ps tasks, and the chief's own
    ``save_counter``), TensorFlow's eager save wraps each save in a new ``tf.function``, which is
    traced anew every time: from the fifth save on, TensorFlow warns of excessive retracing at every
    save. Here one ``tf.function`` of ``Checkpoint.write``, with the path as a string tensor, is
    traced at the first save and reused (``Checkpoint.read`` is its pair for restoring).
    """

    NAME = "ckpt"

    def __init__(self, tf: Any, checkpoint: Any, directory: str, max_to_keep: int = 2) -> None:
        self.directory = directory
        self.max_to_keep = max_to_keep
        state = tf.train.get_checkpoint_state(directory)
        #: the kept checkpoints' prefixes, oldest first
        saved = state.all_model_checkpoint_paths if state is not None else []
        self.kept: list[str] = [os.path.normpath(path) for path in saved]
        latest = state.model_checkpoint_path if state is not None else None
        self.latest: str | None = latest if latest and tf.io.gfile.glob(latest + ".index") else None

        @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
        def write(prefix: Any) -> Any:
            return checkpoint.write(prefix)

        self._write = write
        self._tf = tf

    def save(self, step: int) -> str:
        """Write the checkpoint of ``step``, record it as the latest, drop those beyond max_to_keep."""
        prefix = os.path.normpath(os.path.join(self.directory, f"{self.NAME}-{step}"))
        self._write(self._tf.constant(prefix))
        self.kept = [path for path in self.kept if path != prefix] + [prefix]
        for old in self.kept[:-self.max_to_keep]:
            for path in glob.glob(glob.escape(old) + ".*"):
                os.remove(path)
        self.kept = self.kept[-self.max_to_keep:]
        self.latest = prefix
        self._record_state()
        if report is not None:
            # written inside a tf.function, which autolog does not see: told to distlaunch, which
            # copies it off a per-host disk and puts it where a moved chief restores from
            files = sorted(os.path.basename(p) for p in glob.glob(glob.escape(prefix) + ".*"))
            report.report_checkpoint(self.directory, [*files, "checkpoint"], step=step,
                                     api="checkpoint_manager")
        return prefix

    def _record_state(self) -> None:
        """The ``checkpoint`` file (a text CheckpointState), replaced whole so a reader never sees half."""
        def quoted(path: str) -> str:
            name = os.path.relpath(path, self.directory)
            return '"' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'

        assert self.latest is not None
        lines = [f"model_checkpoint_path: {quoted(self.latest)}"]
        lines += [f"all_model_checkpoint_paths: {quoted(path)}" for path in self.kept]
        state = os.path.join(self.directory, "checkpoint")
        with open(state + ".tmp", "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(state + ".tmp", state)


def restore_checkpoint(tf: Any, checkpoint: Any, path: str) -> None:
    """Restore everything from ``path``; with another ps count, the weights and step only.

    Sharded weights restore into any number of shards, but the momentum slots are kept one per
    shard, so after the ps count changed they no longer fit and start again from zero.
    """
    velocities = list(checkpoint.optimizer.velocities)
    saved_shapes = dict(tf.train.list_variables(path))
    saved_slots = [saved_shapes.get(f"optimizer/velocities/{i}/.ATTRIBUTES/VARIABLE_VALUE")
                   for i in range(len(velocities) + 1)]
    if saved_slots == [v.shape.as_list() for v in velocities] + [None]:
        checkpoint.read(path).assert_existing_objects_matched()
        return
    print(f"optimizer state in {path} was saved for another ps count; restoring weights and global step only",
          flush=True)
    tf.train.Checkpoint(model=checkpoint.model, global_step=checkpoint.global_step).read(path).expect_partial()


def make_dataset_fn(tf: Any, batch_size: int) -> Any:
    """Endless synthetic batches: centred uniform images, labels from a fixed random projection."""

    def dataset_fn(input_context: Any) -> Any:
        per_replica = input_context.get_per_replica_batch_size(batch_size)
        pipeline = tf.constant(input_context.input_pipeline_id, tf.int64)
        projection = tf.random.stateless_normal([IMAGE_PIXELS, NUM_CLASSES], seed=[42, 42])

        def make_batch(index: Any) -> tuple[Any, Any]:
            # Pixels already centred on zero, as after the usual MNIST normalisation.
            images = tf.random.stateless_uniform([per_replica, IMAGE_PIXELS], minval=-0.5, maxval=0.5,
                                                 seed=tf.stack([index, pipeline]))
            labels = tf.argmax(tf.matmul(images, projection), axis=1, output_type=tf.int32)
            return images, labels

        return tf.data.Dataset.counter().map(make_batch).prefetch(2)

    return dataset_fn


def plan_line(step: int, args: argparse.Namespace) -> str:
    """What this run of the chief will do, said once before the first step: where it starts (a
    checkpoint's step or 0) and where it stops (the step total, and the time limit if one is set)."""
    start = f"resumed from step {step}" if step else "starting at step 0"
    if step >= args.steps:
        return f"{start}: --steps {args.steps} already reached, nothing to train (raise --steps to go on)"
    if args.train_seconds is None:
        return f"{start}; training to step {args.steps}"
    return f"{start}; training for {args.train_seconds:g} s (at most to step {args.steps})"


def train(tf: Any, resolver: Any, args: argparse.Namespace) -> NoReturn:
    limit_threads(tf)
    num_ps = len(resolver.cluster_spec().as_dict().get("ps", []))
    partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=MIN_SHARD_BYTES, max_shards=max(num_ps, 1))
    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=partitioner)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    with strategy.scope():
        model = build_model(tf)
        shards = model.trainable_shards()
        optimizer = build_optimizer(tf, strategy, shards, args.learning_rate)
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")

    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, global_step=global_step)
    manager = None
    if args.checkpoint_dir:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        manager = Checkpoints(tf, checkpoint, args.checkpoint_dir, max_to_keep=2)
        if manager.latest:
            restore_checkpoint(tf, checkpoint, manager.latest)
            restored_step = int(global_step.numpy())
            print(f"restored {manager.latest} at global step {restored_step}", flush=True)
            if report is not None:
                # a metric of its own, so the dashboard (and tests) see where a restarted chief resumed
                report.report(step=restored_step, restored_step=restored_step)
                report.flush()

    emit_placement(model.weights() + list(optimizer.velocities) + [global_step])

    dataset_fn = make_dataset_fn(tf, args.batch_size)
    per_worker_dataset = coordinator.create_per_worker_dataset(
        lambda: strategy.distribute_datasets_from_function(dataset_fn))
    per_worker_iterator = iter(per_worker_dataset)

    @tf.function
    def train_step(iterator: Any) -> Any:
        def replica_step(images: Any, labels: Any) -> Any:
            with tf.GradientTape() as tape:
                logits = model(images)
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits))
            optimizer.apply(tape.gradient(loss, shards), shards)
            global_step.assign_add(1)
            return loss

        images, labels = next(iterator)
        per_replica_loss = strategy.run(replica_step, args=(images, labels))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica_loss, axis=None)

    step = int(global_step.numpy())
    last_saved = step
    print(plan_line(step, args), flush=True)
    started, started_step = time.monotonic(), step
    train_until = started + args.train_seconds if args.train_seconds is not None else math.inf
    while (step < args.steps and time.monotonic() < train_until
           and (args.stop_at is None or time.time() < args.stop_at)):
        last_result = None
        for _ in range(min(args.log_every, args.steps - step)):
            last_result = coordinator.schedule(train_step, args=(per_worker_iterator,))
        coordinator.join()
        step = int(global_step.numpy())
        elapsed = time.monotonic() - started
        rate = (step - started_step) / elapsed if elapsed > 0 else None
        assert last_result is not None
        emit_progress(step, float(last_result.fetch()), rate)
        if manager is not None and step // args.checkpoint_every > last_saved // args.checkpoint_every:
            manager.save(step)
            last_saved = step

    if manager is not None and last_saved != step:
        manager.save(step)
    if report is not None:
        report.flush()
    print("done", flush=True)
    leave_now(0)


def leave_now(code: int) -> NoReturn:
    """Exit at once, before this chief's tf.functions are freed.

    With a cluster, TensorFlow sends each freed function's removal to the workers and ps over gRPC;
    with TF 2.21 that sometimes waited ~38 s on the stream after the work was done and saved (the
    main thread in TFE_ContextRemoveFunction / GrpcEagerClient::StreamingEnqueueAsync under gdb, in
    2 of 5 runs of make demo), the job shown Running meanwhile."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _task_type_named() -> str | None:
    """TF_CONFIG's task type, read without TensorFlow (None where it names none or is no JSON:
    TensorFlow's resolver then says what is wrong)."""
    try:
        task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task", {})
    except (ValueError, AttributeError):
        return None
    return task.get("type") if isinstance(task, dict) else None


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if _task_type_named() == "evaluator":  # said before TensorFlow loads: seconds of CPU for nothing
        print("evaluator: ps_mnist.py has no evaluation loop; exiting", flush=True)
        return 0
    import tensorflow as tf

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    task_type = resolver.task_type
    if task_type in ("ps", "worker"):
        serve_forever(tf, resolver)
        return 0
    if task_type != "chief":
        print(f"ps_mnist.py: TF_CONFIG must name a task of type chief, ps, worker or evaluator "
              f"(got {task_type!r}); see examples/README.md", file=sys.stderr)
        return 2
    train(tf, resolver, args)


if __name__ == "__main__":
    sys.exit(main())
