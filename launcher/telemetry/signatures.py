"""Known failure signatures in a task's output, as data: what a line says, in plain words.

Each row is a regex searched in a task's output lines (newest first, the exception's own line
before the rest), the cause it means (a template over the regex's named groups and ``{culprit}``,
``{host}``), whether the failure lies with a peer (``peer``: the task that went wrong is named in the
text as an address:port or ``/job:J/task:N``, and the cause names it as the culprit), and real lines
it must match: TensorFlow's own output where this machine could produce it, its source text where
it needs a GPU. tests/unit/telemetry/test_signatures.py checks every row against every example.

A row marked ``repeats`` is a failure that every restart would repeat (the program cannot run as
configured): the supervisor does not restart the incarnation that printed it, and the job ends at the
first failure with the row's cause, which names the fix (launcher/supervise/outputpolicy.py).

Two flags rank peer rows against each other (launcher/telemetry/causes.py): ``generic`` marks a row
that says only that contact was lost (any UnavailableError matches it), so a specific peer row in
the same failure's output wins over it; ``listed`` marks a row whose culprits are the list that
follows the match (the text before it names who reported the error, not who failed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Signature:
    name: str
    pattern: re.Pattern[str]
    #: the cause; placeholders: the pattern's named groups, {culprit} (peer rows), {host}
    template: str
    #: the failure lies with the peer the text names, not with the task that printed it
    peer: bool = False
    #: for peer rows: what the cause says when no peer can be named
    fallback: str = ""
    examples: tuple[str, ...] = ()
    #: a peer row that says nothing but "contact lost": a specific peer row found beside it wins
    generic: bool = False
    #: the culprits are listed after the match (rest of its line, then one task name a line)
    listed: bool = False
    #: every restart would fail the same way: the incarnation that printed it is not restarted
    repeats: bool = False


def _sig(name: str, pattern: str, template: str, *examples: str, peer: bool = False,
         fallback: str = "", generic: bool = False, listed: bool = False, repeats: bool = False) -> Signature:
    return Signature(name, re.compile(pattern), template, peer, fallback, examples, generic, listed, repeats)


#: "/job:ps/replica:0/task:1" or "/job:worker/task:1": a task of the cluster as TensorFlow names it
TASK_NAME = re.compile(r"/job:(?P<job>[A-Za-z_][\w-]*)(?:/replica:\d+)?/task:(?P<index>\d+)")
#: "127.0.0.1:2222", "ipv4:10.0.0.5:2222", "[::1]:2222", "localhost:2222": a peer's address
ADDRESS = re.compile(r"(?:ipv[46]:)?(?P<host>\[[0-9a-fA-F:]+\]|[A-Za-z0-9][\w.-]*):(?P<port>\d{2,5})\b")

#: what the Keras 3 row tells the user to do (launcher/remote/kerasfit.py says it before a launch)
KERAS3_FIX = "set TF_USE_LEGACY_KERAS=1 in the tasks' env (tf_keras installed on every host)"

SIGNATURES: tuple[Signature, ...] = (
    # Keras 3 (tf.keras since TensorFlow 2.16) under MultiWorkerMirroredStrategy with 2 workers or
    # more, TF 2.21 / Keras 3.15: Model.fit's first step (keras-team/keras#20585); tf_keras can fit
    _sig("keras3_multi_worker", r"Attempt to convert a value \(PerReplica:",
         "Keras 3 cannot fit under a multi-worker strategy: " + KERAS3_FIX,
         "ValueError: Attempt to convert a value (PerReplica:{",
         "ValueError: Attempt to convert a value (PerReplica:{\n  0: <tf.Tensor: shape=(32, 8), dtype=float32, "
         "numpy=>\n}) with an unsupported type (<class 'tensorflow.python.distribute.values.PerReplica'>) "
         "to a Tensor.",
         repeats=True),
    _sig("heartbeats", r"tasks are unhealthy \(stopped sending heartbeats\)|stopped sending heartbeats",
         "lost contact with {culprit}: it stopped sending heartbeats",
         "The following tasks are unhealthy (stopped sending heartbeats):\n/job:worker/replica:0/task:1",
         "tensorflow.python.framework.errors_impl.UnavailableError: The following tasks are unhealthy "
         "(stopped sending heartbeats): /job:worker/task:1",
         # TF 2.21, MultiWorkerMirroredStrategy, worker:1 frozen by SIGSTOP: worker:0's log line. The
         # task named first reported the error; the unhealthy ones follow, one a line (a `listed` row)
         "E0000 00:00:1795674610.057146    7613 base_collective_executor.cc:252] BaseCollectiveExecutor::"
         "StartAbort UNAVAILABLE: Error reported from /job:worker/task:1: The following tasks are unhealthy "
         "(stopped sending heartbeats):\n/job:worker/replica:0/task:1",
         peer=True, listed=True, fallback="lost contact with a peer: it stopped sending heartbeats"),
    _sig("cpu_oom", r"OOM when allocating tensor .* on \S*device:CPU:\d+",
         "out of host memory (a tensor too large for the CPU allocator)",
         "tensorflow.python.framework.errors_impl.ResourceExhaustedError: {{function_node "
         "__wrapped__Fill_device_/job:localhost/replica:0/task:0/device:CPU:0}} OOM when allocating tensor with "
         "shape[1048576,1048576,64] and type float on /job:localhost/replica:0/task:0/device:CPU:0 by allocator "
         "mklcpu [Op:Fill] name: "),
    _sig("gpu_oom", r"CUDA_ERROR_OUT_OF_MEMORY|ResourceExhaustedError|OOM when allocating|"
         r"CUDA error: out of memory|CUDA out of memory|failed to allocate .* from device|"
         r"cudaErrorMemoryAllocation|OutOfMemoryError: Out of memory allocating",
         "GPU out of memory",
         "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when allocating tensor with "
         "shape[32768,32768] and type float on /job:worker/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
         "E external/local_xla/xla/stream_executor/cuda/cuda_driver.cc:1234] failed to allocate 15.75G "
         "(16911433728 bytes) from device: CUDA_ERROR_OUT_OF_MEMORY: out of memory",
         "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of "
         "79.19 GiB of which 3.44 GiB is free.",
         "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 85,899,345,920 bytes (allocated so far: "
         "0 bytes)."),
    _sig("nan", r"Tensor had (?P<what>NaN|Inf|NaN and Inf|Inf and NaN) values",
         "{what} values caught by check_numerics",
         "tensorflow.python.framework.errors_impl.InvalidArgumentError: {{function_node "
         "__wrapped__CheckNumerics_device_/job:localhost/replica:0/task:0/device:CPU:0}} loss : Tensor had NaN "
         "values [Op:CheckNumerics] name: "),
    _sig("container_start", r"^(?:docker|podman): Error response from daemon: (?P<why>.+?)\.?$",
         "container did not start: {why}",
         # docker 20.10, `docker run --pull never` of an image the host lacks, and of one it cannot pull
         "docker: Error response from daemon: No such image: nosuch/image:1",
         'docker: Error response from daemon: Get "https://registry-1.docker.io/v2/": dial tcp: lookup '
         "registry-1.docker.io on 10.255.255.53:53: no such host"),
    _sig("module", r"ModuleNotFoundError: No module named '(?P<module>[\w.]+)'",
         "package {module} missing on host {host}",
         "ModuleNotFoundError: No module named 'tensorflow_datasets'"),
    _sig("port", r"Address already in use|Could not start gRPC server|No address added out of total \d+ "
         r"resolved for '[^']*?:(?P<port>\d+)'",
         "could not listen on its port: already in use on host {host}",
         "E0000 00:00:1795534415.041907    8384 add_port.cc:83] Failed to add port to server: No address added "
         "out of total 1 resolved for '0.0.0.0:36777'",
         "tensorflow.python.framework.errors_impl.UnknownError: Could not start gRPC server",
         "OSError: [Errno 98] Address already in use"),
    _sig("nccl", r"NCCL (?:error|failure|WARN)|nccl\w*Error|ncclSystemError|ncclInternalError|"
         r"ncclUnhandledCudaError|NCCL operation",
         "NCCL collective failed",
         "NCCL failure: unhandled system error",
         "tensorflow.python.framework.errors_impl.InternalError: NCCL: ncclSystemError: System call (e.g. "
         "socket, malloc) or external library call failed or device error."),
    _sig("lost_peer", r"UnavailableError|Socket closed|Connection reset|DEADLINE_EXCEEDED|DeadlineExceededError|"
         r"Failed to connect to remote host|failed to connect to all addresses",
         "lost contact with {culprit}",
         "tensorflow.python.framework.errors_impl.UnavailableError: Socket closed",
         "UNAVAILABLE: Connection reset by peer",
         "tensorflow.python.framework.errors_impl.DeadlineExceededError: DEADLINE_EXCEEDED",
         "tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:",
         "  (0) UNAVAILABLE:  failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:60515: Failed "
         "to connect to remote host: Connection refused",
         peer=True, generic=True, fallback="lost contact with a peer"),
)
