"""What TensorFlow's own analysis says of one task's capture (an ``.xplane.pb``).

TensorFlow 2.21 carries the converter of its profiler's tools
(``_pywrap_profiler_plugin.xspace_to_tools_data``); three of its tools are read:

- ``input_pipeline_analyzer`` (an ``InputPipelineAnalysisResult``): the steps (the ``train``
  step markers autolog adds while a capture runs, or the script's own), their average time, and
  per step the time waiting for input, computing on the host and on devices, in collectives;
  with TensorFlow's own bottleneck classification and statement;
- ``overview_page`` (an ``OverviewPage``): the bottleneck and recommendation TensorBoard shows;
- ``framework_op_stats`` (a JSON table): the operations by self time; the collective ones give the
  communication share on hosts where TensorFlow counts them as host compute (CPU clusters).

The shares here are percentages of the average step, like TensorBoard's.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from launcher.tfprofiler import wire

#: operation types that wait for peers (all-reduce, gathers, send / receive between tasks)
COMMUNICATION_OPS = ("CollectiveReduceV2", "CollectiveGatherV2", "CollectiveReduce", "CollectiveGather",
                     "CollectiveBcastSend", "CollectiveBcastRecv", "NcclAllReduce", "_Recv", "_HostRecv",
                     "RecvTensor", "CollectiveReduceScatterV2", "CollectiveAllToAllV2")
TOP_OPS = 5
NO_STEPS = ("no step markers in this capture: TensorFlow's step analysis needs them. Autolog adds "
            "them to the train steps it finds (Keras fit, a tf.function that applies gradients, a "
            "ParameterServerStrategy schedule); for a loop it does not find, wrap each step in "
            "`with tf.profiler.experimental.Trace(\"train\", step_num=step, _r=1):`")
NO_STEPS_COORDINATOR = ("a ParameterServerStrategy coordinator runs its steps on the workers: its capture "
                        "holds the scheduling, the workers' captures hold the steps")
NO_STEPS_PS = ("a parameter server runs no steps of its own: what it shows is the work it served "
               "(variable reads and updates below)")


@dataclass
class TopOp:
    name: str
    type: str
    occurrences: int
    self_time_ms: float
    share: float  # percent of all operations' self time


@dataclass
class TaskProfile:
    task: str
    path: str
    steps: int = 0
    step_ms: float | None = None
    input: float | None = None  # percent of the average step
    compute: float | None = None
    communication: float | None = None
    other: float | None = None
    bottleneck: str = ""  # TensorFlow's classification (e.g. "host" for input-bound on the host)
    statement: str = ""  # TensorFlow's words
    top_ops: list[TopOp] = field(default_factory=list)
    note: str = ""

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _converter() -> Any:
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin

    return _pywrap_profiler_plugin


def tool_data(path: Path, tool: str) -> bytes:
    """One tool's data of ``path``, which must be alone in its folder: the converter leaves a cache
    (``ALL_HOSTS.op_stats.pb``) beside it and reads it back for any other file of that folder."""
    data, ok = _converter().xspace_to_tools_data([str(path)], tool, {})
    if not ok:
        raise RuntimeError(f"TensorFlow could not convert {path.name} for {tool}")
    return data if isinstance(data, bytes) else str(data).encode()


def analyze(task: str, path: Path, strategy: str = "") -> TaskProfile:
    """TensorFlow's analysis of one task's capture, converted from a private copy (the capture
    folder stays as the profiler wrote it, for TensorBoard to convert all tasks together)."""
    with tempfile.TemporaryDirectory(prefix="distlaunch-profile-") as scratch:
        copy = Path(scratch) / path.name
        shutil.copyfile(path, copy)
        return _analyze(task, path, copy, strategy)


def _analyze(task: str, path: Path, copy: Path, strategy: str) -> TaskProfile:
    profile = TaskProfile(task=task, path=str(path))
    path = copy
    pipeline = wire.fields(tool_data(path, "input_pipeline_analyzer"))
    steps = [wire.any_value(m) for m in wire.messages(pipeline, 4)]
    profile.steps = len(steps)
    profile.top_ops, comm_us = top_operations(tool_data(path, "framework_op_stats"))
    if not steps:
        if task.startswith("ps:"):
            profile.note = NO_STEPS_PS
        elif strategy == "parameter_server" and task.startswith("chief:"):
            profile.note = NO_STEPS_COORDINATOR
        else:
            profile.note = NO_STEPS
        return profile
    total_ms = sum(wire.double(s, 2) for s in steps)
    profile.step_ms = total_ms / len(steps)
    wait_input = sum(wire.double(s, 11) + wire.double(s, 12) for s in steps)  # host wait input, host to device
    collectives = sum(wire.double(s, 13) + wire.double(s, 7) for s in steps)  # device collectives, device to device
    other = sum(wire.double(s, 3) + wire.double(s, 5) + wire.double(s, 9) + wire.double(s, 10) for s in steps)
    if total_ms > 0:
        room = max(0.0, total_ms - wait_input - other)  # the shares never pass 100 %
        communication = min(room, max(collectives, comm_us / 1000.0))
        profile.input = 100.0 * wait_input / total_ms
        profile.communication = 100.0 * communication / total_ms
        profile.other = 100.0 * other / total_ms
        profile.compute = max(0.0, 100.0 - profile.input - profile.communication - profile.other)
    recommendation = wire.message(pipeline, 7)
    analysis = wire.any_value(wire.message(recommendation, 2))
    profile.bottleneck = wire.text(analysis, 1)
    profile.statement = wire.text(analysis, 2)
    overview = wire.fields(tool_data(path, "overview_page"))
    words = wire.message(overview, 4)
    if wire.text(words, 2):
        profile.bottleneck = wire.text(words, 1) or profile.bottleneck
        profile.statement = wire.text(words, 2)
    return profile


def top_operations(data: bytes, count: int = TOP_OPS) -> tuple[list[TopOp], float]:
    """The operations by self time (framework_op_stats' table), and the communication ops' total
    self time in microseconds."""
    try:
        tables = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        return [], 0.0
    table = tables[0] if isinstance(tables, list) and tables else tables
    if not isinstance(table, dict):
        return [], 0.0
    columns = [c.get("id") for c in table.get("cols", [])]
    rows: list[dict[str, Any]] = []
    for row in table.get("rows", []):
        cells = [c.get("v") if isinstance(c, dict) else None for c in row.get("c", [])]
        rows.append(dict(zip(columns, cells, strict=False)))
    ops = [r for r in rows if str(r.get("type")) != "IDLE"]
    total = sum(float(r.get("total_self_time") or 0) for r in ops)
    comm_us = sum(float(r.get("total_self_time") or 0) for r in ops if str(r.get("type")) in COMMUNICATION_OPS)
    ops.sort(key=lambda r: float(r.get("total_self_time") or 0), reverse=True)
    top = [TopOp(name=str(r.get("operation")), type=str(r.get("type")), occurrences=int(r.get("occurrences") or 0),
                 self_time_ms=float(r.get("total_self_time") or 0) / 1000.0,
                 share=100.0 * float(r.get("total_self_time") or 0) / total if total else 0.0)
           for r in ops[:count]]
    return top, comm_us


def summary_lines(profile: TaskProfile) -> list[str]:
    """What `distlaunch profile` prints for a task."""
    lines = [f"{profile.task}: {profile.steps} step(s) captured"
             + (f", {profile.step_ms:.1f} ms per step" if profile.step_ms is not None else "")]
    if profile.input is not None:
        lines.append(f"  input {profile.input:.0f}%  compute {profile.compute or 0:.0f}%  "
                     f"communication {profile.communication or 0:.0f}%  other {profile.other or 0:.0f}%")
    if profile.statement:
        lines.append(f"  TensorFlow: {profile.statement}")
    if profile.note:
        lines.append(f"  {profile.note}")
    for op in profile.top_ops:
        lines.append(f"  {op.share:5.1f}%  {op.self_time_ms:9.1f} ms  {op.type}  {op.name}")
    return lines
