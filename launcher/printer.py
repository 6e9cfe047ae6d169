"""Consumers of the event stream for terminals without the dashboard: `--no-tui` and `--json`."""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TextIO

from launcher import events as ev
from launcher.events import Event

PROGRESS_EVERY = 5.0
TAIL_LINES = 8


def human_bytes(n: float | None) -> str:
    if n is None:
        return "-"
    value = float(n)
    for unit in ("B", "K", "M", "G", "T"):
        if value < 1024 or unit == "T":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}T"


@dataclass
class TaskLine:
    """What the progress line needs of one task."""

    step: int | None = None
    loss: float | None = None
    rate: float | None = None
    cpu: float | None = None
    rss: int | None = None
    gpu_util: float | None = None
    gpu_mem: int | None = None
    _last: tuple[float, int] | None = None
    tail: deque[str] = field(default_factory=lambda: deque(maxlen=TAIL_LINES))

    def on_metric(self, event: Event) -> None:
        step = event.get("step")
        if event.get("loss") is not None:
            self.loss = float(event.get("loss"))
        if step is None:
            return
        step = int(step)
        if self._last is not None and step > self._last[1] and event.ts > self._last[0]:
            self.rate = (step - self._last[1]) / (event.ts - self._last[0])
        if self._last is None or event.ts - self._last[0] >= 1.0 or step < self._last[1]:
            self._last = (event.ts, step)
        self.step = step

    def on_sample(self, event: Event) -> None:
        self.cpu = event.get("cpu_percent")
        self.rss = event.get("rss_bytes")
        gpus = event.get("gpus") or []
        utils = [g.get("util_percent") for g in gpus if g.get("util_percent") is not None]
        mems = [g.get("mem_used_bytes") for g in gpus if g.get("mem_used_bytes") is not None]
        self.gpu_util = sum(utils) / len(utils) if utils else None
        self.gpu_mem = sum(mems) if mems else None


class ProgressPrinter:
    """Human progress lines: every state change, and every few seconds step, loss and rates."""

    def __init__(self, out: TextIO | None = None, every: float = PROGRESS_EVERY) -> None:
        self.out = out or sys.stdout
        self.every = every
        self.tasks: dict[str, TaskLine] = {}
        self._last_progress = time.monotonic()
        self.final_state: str | None = None

    def _print(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} {text}", file=self.out, flush=True)

    def consume(self, stream: Iterable[Event]) -> None:
        for event in stream:
            self.on_event(event)
        self.progress()

    def on_event(self, event: Event) -> None:
        task = self.tasks.setdefault(event.task, TaskLine()) if event.task else None
        if event.kind == ev.JOB:
            state, reason = event.get("state"), event.get("reason") or ""
            if state in (ev.JOB_SUCCEEDED, ev.JOB_FAILED):
                self.final_state = state
                self.progress()
            self._print(f"job {state}" + (f": {reason}" if reason else ""))
        elif event.kind == ev.STATE and task is not None:
            self._print(_state_text(event))
            if event.get("state") == ev.FAILED and task.tail:
                for line in task.tail:
                    self._print(f"  {event.task} | {line}")
        elif event.kind == ev.HOST:
            self._print(f"host {event.get('host')} {event.get('state')}: {event.get('reason') or ''}".rstrip(": "))
        elif event.kind == ev.METRIC and task is not None:
            task.on_metric(event)
        elif event.kind == ev.SAMPLE and task is not None:
            task.on_sample(event)
        elif event.kind == ev.PLACEMENT:
            variables = event.get("variables") or []
            per_task: dict[str, int] = {}
            for var in variables:
                per_task[var.get("task") or "?"] = per_task.get(var.get("task") or "?", 0) + int(var.get("bytes") or 0)
            spread = ", ".join(f"{t} {human_bytes(b)}" for t, b in sorted(per_task.items()))
            self._print(f"{event.task} placed {len(variables)} variables: {spread}")
        elif event.kind == ev.LOG and task is not None:
            task.tail.append(str(event.get("line", "")))
        if time.monotonic() - self._last_progress >= self.every:
            self.progress()

    def progress(self) -> None:
        self._last_progress = time.monotonic()
        with_steps = {t: line for t, line in self.tasks.items() if line.step is not None}
        if not with_steps and not any(line.cpu is not None for line in self.tasks.values()):
            return
        lead = with_steps.get("chief:0") or with_steps.get("worker:0") or next(iter(with_steps.values()), None)
        parts = []
        if lead is not None:
            loss = f"{lead.loss:.4f}" if lead.loss is not None else "-"
            rate = f"{lead.rate:.1f}" if lead.rate is not None else "-"
            parts.append(f"step {lead.step}  loss {loss}  {rate} steps/s")
        per_task = []
        for task_id, line in sorted(self.tasks.items()):
            bits = []
            if line.rate is not None and task_id in with_steps:
                bits.append(f"{line.rate:.1f}/s")
            if line.cpu is not None:
                bits.append(f"cpu {line.cpu:.0f}%")
            if line.rss is not None:
                bits.append(f"rss {human_bytes(line.rss)}")
            if line.gpu_util is not None:
                bits.append(f"gpu {line.gpu_util:.0f}% {human_bytes(line.gpu_mem)}")
            if bits:
                per_task.append(f"{task_id} {' '.join(bits)}")
        if per_task:
            parts.append(" | ".join(per_task))
        if parts:
            self._print("  ".join(parts[:1]) + ("  || " + parts[1] if len(parts) > 1 else ""))


def _state_text(event: Event) -> str:
    state = event.get("state")
    text = f"{event.task:<12} {state}"
    extras = []
    if event.get("host"):
        extras.append(f"on {event.get('host')}")
    if state == ev.RUNNING and event.get("pid"):
        extras.append(f"pid {event.get('pid')}")
    if event.get("restarts"):
        extras.append(f"restarts {event.get('restarts')}")
    if state in (ev.FAILED, ev.SUCCEEDED, ev.STOPPED) and event.get("exit_code") is not None:
        extras.append(f"exit {event.get('exit_code')}")
    if event.get("reason"):
        extras.append(str(event.get("reason")))
    return text + (f" ({', '.join(extras)})" if extras else "")


class JsonPrinter:
    """The event stream as JSON lines on stdout (`--json`)."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.final_state: str | None = None

    def consume(self, stream: Iterable[Event]) -> None:
        for event in stream:
            if event.kind == ev.JOB and event.get("state") in (ev.JOB_SUCCEEDED, ev.JOB_FAILED):
                self.final_state = event.get("state")
            self.out.write(event.to_json() + "\n")
            self.out.flush()
