"""`distlaunch export tensorboard RUN DIR`: a run's metrics and samples as TensorBoard event files.

Each task becomes one TensorBoard run, ``DIR/<run id>/<task slug>/``, so tasks of one job and
tasks of different jobs exported into the same DIR can be compared. Written with tensorboard's
own record writer and protos; TensorFlow is never imported.

Scalars per task, at the task's global step and the event's wall time:

    loss, values/<name>        from metric events (every reported value)
    steps_per_sec              from successive metric steps of the task
    system/cpu_percent, system/rss_bytes, gpu<i>/util_percent, gpu<i>/mem_used_bytes   from samples

Scalars per host, as a run of its own, ``DIR/<run id>/host-<name>/``, from its agent's
whole-machine readings (issue 58: the signals behind a slow job), at the job's newest step:

    host/cpu_percent, host/mem_used_bytes, host/net_rx_bytes_per_s, host/net_tx_bytes_per_s,
    host/disk_write_bytes_per_s, host/outputs_free_bytes, host/run_dir_free_bytes

and, in the same run, each GPU its tasks hold, from NVML where the agent has it:

    gpu<i>/temp_c, gpu<i>/power_w, gpu<i>/power_limit_w, gpu<i>/sm_clock_mhz, gpu<i>/ecc_corrected,
    gpu<i>/ecc_uncorrected, gpu<i>/xid_count, gpu<i>/throttle_reasons (how many reasons hold it back)

Samples carry no step of their own: they are put at the last step the task reported (0 before
its first), so TensorBoard's "Wall" or "Relative" x-axis shows them over time.
"""

from __future__ import annotations

import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from launcher import events as ev
from launcher.errors import UserError
from launcher.runlookup import EventLines, find_run
from launcher.runstate import load_run_state
from launcher.telemetry.progressline import Progress

#: what a host's reading gives, as ``host/<name>`` scalars
HOST_FIELDS = ("cpu_percent", "mem_used_bytes", "net_rx_bytes_per_s", "net_tx_bytes_per_s", "disk_write_bytes_per_s",
               "outputs_free_bytes", "run_dir_free_bytes")
#: what a GPU's entry gives of its health, as ``gpu<i>/<name>`` scalars of its host
GPU_HEALTH_FIELDS = ("temp_c", "power_w", "power_limit_w", "sm_clock_mhz", "ecc_corrected", "ecc_uncorrected",
                     "xid_count")
#: one reading of a host per this many seconds (each of its tasks' samples carries the same one)
HOST_EVERY_S = 0.5


@dataclass
class _TaskStream:
    """What is needed to turn one task's events into scalars."""

    step: int = 0
    last_metric: tuple[float, int] | None = None  # (ts, step) of the previous metric with a step
    scalars: int = 0


@dataclass
class ExportResult:
    directory: Path
    scalars_per_task: dict[str, int] = field(default_factory=dict)
    skipped_note: str | None = None  # how many bad lines of events.jsonl were skipped, if any


class _EventFile:
    """One tfevents file, written with tensorboard's RecordWriter over a plain file."""

    def __init__(self, directory: Path) -> None:
        from tensorboard.compat.proto import event_pb2
        from tensorboard.summary.writer.record_writer import RecordWriter

        self._event_pb2 = event_pb2
        directory.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{int(time.time()):010d}.{socket.gethostname()}.distlaunch"
        self._file: IO[bytes] = (directory / name).open("wb")
        self._writer = RecordWriter(self._file)
        self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2"))

    def _write(self, event: Any) -> None:
        self._writer.write(event.SerializeToString())

    def scalar(self, tag: str, value: float, step: int, wall_time: float) -> None:
        from tensorboard.compat.proto import summary_pb2

        summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
        self._write(self._event_pb2.Event(wall_time=wall_time, step=step, summary=summary))

    def close(self) -> None:
        self._writer.flush()
        self._writer.close()


def export_tensorboard(run_dir: Path, target: Path, progress: Progress | None = None) -> ExportResult:
    """Write every task's scalars of the run at ``run_dir`` under ``target/<run id>/``; ``progress``
    counts the events read."""
    state = load_run_state(run_dir)
    run_id = state.run_id
    out = target.expanduser() / run_id
    host_of = {task: info.host for task, info in state.tasks.items() if info.host}
    host_seen: dict[str, float] = {}
    gpu_seen: dict[tuple[str, int], float] = {}
    streams: dict[str, _TaskStream] = {}
    files: dict[str, _EventFile] = {}

    def file_for(task: str) -> _EventFile:
        if task not in files:
            files[task] = _EventFile(out / task.replace(":", "-"))
        return files[task]

    def put(task: str, tag: str, value: object, step: int, ts: float) -> None:
        number = ev.finite(value)
        if number is None:
            return
        file_for(task).scalar(tag, number, step, ts)
        streams[task].scalars += 1

    lines = EventLines(run_dir)
    try:
        for event in lines:
            if progress is not None:
                progress.advance()
            if event.task is None or not isinstance(event, (ev.MetricEvent, ev.SampleEvent)):
                continue
            task = event.task
            stream = streams.setdefault(task, _TaskStream())
            if isinstance(event, ev.MetricEvent):
                step = event.step
                if step is not None:
                    if stream.last_metric is not None:
                        prev_ts, prev_step = stream.last_metric
                        if event.ts > prev_ts and step > prev_step:
                            put(task, "steps_per_sec", (step - prev_step) / (event.ts - prev_ts), step, event.ts)
                    stream.last_metric = (event.ts, step)
                    stream.step = step
                put(task, "loss", event.loss, stream.step, event.ts)
                for name, value in event.values.items():
                    put(task, f"values/{name}", value, stream.step, event.ts)
            else:
                host = host_of.get(task)
                if event.host and host and event.ts - host_seen.get(host, -HOST_EVERY_S) >= HOST_EVERY_S:
                    host_seen[host] = event.ts
                    job_step = max((s.step for s in streams.values()), default=0)
                    streams.setdefault(f"host:{host}", _TaskStream())
                    for name in HOST_FIELDS:
                        put(f"host:{host}", f"host/{name}", event.host.get(name), job_step, event.ts)
                if host:
                    for gpu in event.gpus:
                        index = gpu.get("index")
                        if type(index) is not int or event.ts - gpu_seen.get((host, index), -1e9) < HOST_EVERY_S:
                            continue
                        gpu_seen[(host, index)] = event.ts
                        job_step = max((s.step for s in streams.values()), default=0)
                        streams.setdefault(f"host:{host}", _TaskStream())
                        for name in GPU_HEALTH_FIELDS:
                            put(f"host:{host}", f"gpu{index}/{name}", gpu.get(name), job_step, event.ts)
                        reasons = gpu.get("throttle")
                        if isinstance(reasons, list):
                            put(f"host:{host}", f"gpu{index}/throttle_reasons", len(reasons), job_step, event.ts)
                put(task, "system/cpu_percent", event.cpu_percent, stream.step, event.ts)
                put(task, "system/rss_bytes", event.rss_bytes, stream.step, event.ts)
                for gpu in event.gpus:
                    if isinstance(gpu.get("index"), int):
                        for field_name in ("util_percent", "mem_used_bytes"):
                            put(task, f"gpu{gpu['index']}/{field_name}", gpu.get(field_name), stream.step,
                                event.ts)
    finally:
        for f in files.values():
            f.close()
    return ExportResult(out, {t: s.scalars for t, s in streams.items() if s.scalars}, lines.note())


def run_export_tensorboard(run: str | None, target: Path) -> int:
    if target.exists() and not target.is_dir():
        raise UserError(f"{target}: exists and is not a directory; give a directory for the event files")
    try:
        with Progress("exporting", unit="events") as progress:
            result = export_tensorboard(find_run(run), target, progress)
    except OSError as exc:
        where = exc.filename or target
        raise UserError(f"{where}: cannot write event files: {exc.strerror or exc}; "
                        "give a writable directory") from None
    if result.skipped_note is not None:
        print(result.skipped_note, file=sys.stderr)
    if not result.scalars_per_task:
        raise UserError(f"{result.directory.name}: the run has no metric or sample events to export")
    for task, count in sorted(result.scalars_per_task.items()):
        print(f"{task}: {count} scalars")
    print(f"wrote {result.directory}; view with `tensorboard --logdir {target}`")
    return 0

