"""TensorFlow's profiler crashing a MultiWorkerMirrored worker (issue 46 §2), without distlaunch.

    python tests/data/steptime/profiler_crash.py [--captures 8] [--who all|leader|others]
        [--client tf|raw] [--host-level 2] [--input py_function|numpy_function|plain] [--chief]

starts a MultiWorkerMirrored job on this machine (two workers, or ``--chief``: a chief and one
worker), each task with ``tf.profiler.experimental.server.start(port)`` and a custom loop whose
``tf.function`` step reads ``next(iterator)``, takes a gradient and ``assign_sub``s it after an
all-reduce; after a warm-up it captures the chosen tasks (``leader``: the first task, the
collective leader; ``others``: the other one) 2 s at a time, a second apart, and prints a line
``RESULT ...``: each capture's outcome and each task's exit status (-11: SIGSEGV, -6: SIGABRT).
TensorFlow's client prints its own lines too: ``... 2>&1 | grep ^RESULT``.

What it found (issue 46 §2; launcher/autolog/profilersafety.py and launcher/tfprofiler/safety.py act
on it):

TensorFlow 2.21's profiler server kills a MultiWorkerMirrored worker other than the collective
leader (``chief:0``, else ``worker:0``) as a capture stops: SIGSEGV in ``TraceMeRecorder::Consume``
-> ``SplitEventTracker::FindStartAndMerge`` (the core's crashing thread:
``ProfilerServiceImpl::Profile`` -> ``ProfilerSession::CollectData`` -> ``HostTracer::Stop``), or
SIGABRT with ``free(): invalid size``; the job fails with it. As far as found: such a worker
completes each collective's parameters with the leader over RPC, so its
``CollectiveExecutor::CompleteParams`` activity starts on a ``collective_ops`` thread and ends on a
gRPC thread (``tf_GrpcWorkerEnvQueues``; on the leader both ends stay on one thread), and the host
tracer's merging of such cross-thread events at collection corrupts memory. ``tf.py_function`` is no
part of it. This script reproduces it without distlaunch (two workers,
or a chief and a worker, on this 2-core machine; 2 s captures a second apart, up to 8 a run): with
the non-leader captured, 15 of 30 runs lost it (14 of them within 3 captures), whatever the input
(``py_function``, ``numpy_function``, none) and with a chief too; the leader alone: 33 captures in 5
runs, and in every run above, never. No option is safe and useful: TensorFlow 2.21's client drops
every ``ProfilerOptions`` field (its log: ``host_tracer_level expects an i value``, for any Python
type), so the script's ``--client raw`` sends the ``Profile`` request itself: ``host_tracer_level``
1 crashed 3 runs of 4 at the first capture; 0 survived 24 captures but records nothing on a CPU
host.

``--client tf`` captures with ``tf.profiler.experimental.client.trace`` (TensorFlow 2.21 drops
every ``ProfilerOptions`` field it is given: its log says ``host_tracer_level expects an i
value``); ``--client raw`` sends the profiler service's ``Profile`` request itself over gRPC,
with ``ProfileOptions(version=1, host_tracer_level=...)``, which the server does honour.

``--task ROLE:INDEX`` (set by the driver) runs one task of the job.
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
STEPS = 14000
SLEEP_S = 0.005


def run_task(kind: str) -> None:
    import tensorflow as tf

    tf.profiler.experimental.server.start(int(os.environ["PROFILER_PORT"]))
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    with strategy.scope():
        w = tf.Variable(tf.zeros([8, 1]))

    def slow(x):
        time.sleep(SLEEP_S)
        return x

    def dataset_fn(context):
        data = tf.data.Dataset.from_tensors((tf.ones([8, 8]), tf.ones([8, 1]))).repeat()
        wrap = {"py_function": lambda x: tf.py_function(slow, [x], tf.float32),
                "numpy_function": lambda x: tf.numpy_function(slow, [x], tf.float32)}.get(kind)
        return data.map(lambda x, y: (tf.reshape(wrap(x), [8, 8]), y)) if wrap else data

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

    @tf.function
    def step(it):
        def fn(inputs):
            x, y = inputs
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - y))
            grad = tf.distribute.get_replica_context().all_reduce("sum", tape.gradient(loss, w))
            w.assign_sub(0.01 * grad)
            return loss
        return strategy.run(fn, args=(next(it),))

    for _ in range(STEPS):
        step(iterator)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n >> 7 else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def raw_capture(address: str, logdir: str, duration_ms: int, host_level: int) -> None:
    """One ``tensorflow.ProfilerService/Profile`` call (the request as TensorFlow 2.21's
    profiler_service.proto has it: 1 duration_ms, 3 tools, 4 opts, 5 repository_root,
    6 session_id, 7 host_name)."""
    import grpc
    from tensorflow.tsl.profiler.protobuf import profiler_options_pb2

    root = os.path.join(logdir, "plugins", "profile")
    opts = profiler_options_pb2.ProfileOptions(version=1, host_tracer_level=host_level, device_tracer_level=1,
                                               python_tracer_level=0, duration_ms=duration_ms, repository_path=root)
    request = (_varint(1 << 3) + _varint(duration_ms) + _field(3, b"trace_viewer") + _field(4, opts.SerializeToString())
               + _field(5, root.encode()) + _field(6, time.strftime("%Y_%m_%d_%H_%M_%S").encode())
               + _field(7, address.replace(":", "_").encode()))
    with grpc.insecure_channel(address) as channel:
        channel.unary_unary("/tensorflow.ProfilerService/Profile")(request, timeout=duration_ms / 1000 + 10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def finish(procs: dict) -> dict:
    """Each task's exit status once all ended; a task left waiting for a dead peer is killed a
    minute after that peer ended (a leader may wait for ever)."""
    first_death = None
    while any(p.poll() is None for p in procs.values()):
        if first_death is None and any(p.poll() not in (None, 0) for p in procs.values()):
            first_death = time.monotonic()
        if first_death is not None and time.monotonic() - first_death > 60:
            for p in procs.values():
                if p.poll() is None:
                    p.kill()
        time.sleep(0.5)
    return {t: p.returncode for t, p in procs.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--task")
    parser.add_argument("--captures", type=int, default=8)
    parser.add_argument("--who", choices=("all", "leader", "others"), default="all")
    parser.add_argument("--client", choices=("tf", "raw"), default="tf")
    parser.add_argument("--host-level", type=int, default=2)
    parser.add_argument("--input", choices=("py_function", "numpy_function", "plain"), default="py_function")
    parser.add_argument("--chief", action="store_true")
    parser.add_argument("--logdir", default="/tmp/profiler_crash")
    args = parser.parse_args()
    if args.task:
        run_task(args.input)
        return
    tasks = ["chief:0", "worker:0"] if args.chief else ["worker:0", "worker:1"]  # the first: the leader
    cluster: dict = {}
    for task in tasks:
        cluster.setdefault(task.split(":")[0], []).append("localhost:%d" % free_port())
    profiler = {task: free_port() for task in tasks}
    procs = {}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout` ends the tasks too (finally)
    for task in tasks:
        role, index = task.split(":")
        env = dict(os.environ, PROFILER_PORT=str(profiler[task]),
                   TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": role, "index": int(index)}}))
        procs[task] = subprocess.Popen([sys.executable, __file__, "--task", task, "--input", args.input], env=env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    chosen = {"all": tasks, "leader": tasks[:1], "others": tasks[1:]}[args.who]
    addresses = ["localhost:%d" % profiler[t] for t in chosen]
    try:
        time.sleep(12)
        import tensorflow as tf

        outcomes = []
        for _ in range(args.captures):
            if any(p.poll() is not None for p in procs.values()):
                break
            try:
                if args.client == "tf":
                    options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=args.host_level)
                    tf.profiler.experimental.client.trace(",".join("grpc://" + a for a in addresses), args.logdir, 2000,
                                                          num_tracing_attempts=1, options=options)
                else:
                    for address in addresses:
                        raw_capture(address, args.logdir, 2000, args.host_level)
                outcomes.append("ok")
            except Exception as exc:
                outcomes.append(type(exc).__name__)
            time.sleep(1.0)
        codes = finish(procs)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
    print("RESULT client=%s host_level=%d input=%s captured=%s: %s; exit %s" % (
        args.client, args.host_level, args.input, ",".join(chosen), " ".join(outcomes), codes), flush=True)


if __name__ == "__main__":
    main()
