"""Consumers of the event stream for terminals without the dashboard: `--no-tui` and `--json`."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import TextIO

from launcher import events as ev
from launcher.events import Event
from launcher.telemetry.jobview import FAILURE_TAIL_LINES, JobView
from launcher.telemetry.stepverdict import percent_text
from launcher.telemetry.tfnoise import hidden_note, split_startup
from launcher.telemetry.timeline import stacks_text
from launcher.telemetry.units import human_bytes

PROGRESS_EVERY = 5.0
#: SGR colours of task and job states on a terminal
STATE_COLORS = {
    ev.RUNNING: "36", ev.SUCCEEDED: "32", ev.FAILED: "31", ev.RESTARTING: "33",
    ev.JOB_RUNNING: "1;36", ev.JOB_SUCCEEDED: "1;32", ev.JOB_FAILED: "1;31", ev.JOB_RESTARTING: "1;33",
    ev.JOB_STOPPED: "1;33",
}


def wants_color(out: TextIO) -> bool:
    """Colour only on a terminal, never with NO_COLOR set to anything but "" (no-color.org) or TERM=dumb."""
    if os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(out, "isatty", None)
    return bool(isatty is not None and isatty())


class ProgressPrinter:
    """Human progress lines: every state change, and every few seconds step, loss and rates.

    It reads the same JobView the dashboard draws from, so both show the same numbers. While it
    consumes a stream, a ticker prints the progress line every `every` seconds even when no event
    comes (a hung job), with the rates over the window ending at `clock()` (the events' clock), or
    at the job's end once it ended."""

    def __init__(self, out: TextIO | None = None, every: float = PROGRESS_EVERY, color: bool | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.out = out or sys.stdout
        self.color = wants_color(self.out) if color is None else color
        self.every = every
        self.clock = clock
        self.view = JobView()
        self._last_progress = time.monotonic()
        self._lock = threading.Lock()  # the ticker and the stream's thread both print from the view
        self.final_state: str | None = None

    def paint(self, state: object) -> str:
        code = STATE_COLORS.get(str(state)) if self.color else None
        return f"\033[{code}m{state}\033[0m" if code else str(state)

    def _print(self, text: str) -> None:
        stamp = time.strftime("%H:%M:%S")
        print(f"{stamp} {text}", file=self.out, flush=True)

    def consume(self, stream: Iterable[Event]) -> None:
        done = threading.Event()
        ticker = threading.Thread(target=self._tick, args=(done,), name="progress", daemon=True)
        ticker.start()
        try:
            for event in stream:
                with self._lock:
                    self.on_event(event)
        finally:
            done.set()
            ticker.join()
        self.progress()

    def _tick(self, done: threading.Event) -> None:
        while not done.wait(max(0.05, self._last_progress + self.every - time.monotonic())):
            with self._lock:
                if time.monotonic() - self._last_progress >= self.every:
                    self.progress()

    def on_event(self, event: Event) -> None:
        view = self.view
        view.apply(event)
        view.take_notices()  # the printer says everything itself; keep the view's queues empty
        view.take_dirty()
        if isinstance(event, ev.JobEvent):
            state, reason = event.state, event.reason
            if state in ev.JOB_ENDS:
                self.final_state = state
                self.progress()
            self._print(f"job {self.paint(state)}" + (f": {reason}" if reason else ""))
            if state == ev.JOB_FAILED:
                self.failure_report()
        elif isinstance(event, ev.StateEvent) and event.task:
            self._print(_state_text(event, self.paint))
        elif isinstance(event, ev.HostEvent):
            self._print(f"host {event.host} {event.state}: {event.reason}".rstrip(": "))
        elif isinstance(event, ev.ConditionEvent) and event.task:
            name = event.condition
            self._print(f"{event.task:<12} {name if event.active else 'no longer ' + name}"
                        + (f": {event.reason}" if event.reason else ""))
        elif isinstance(event, ev.StacksEvent):
            self._print(f"{event.task or 'job':<12} {stacks_text(event)}")
        elif isinstance(event, ev.PlacementEvent):
            spread = ", ".join(f"{t} {human_bytes(b)}" for t, b in sorted(view.placement.bytes_per_task().items()))
            self._print(f"{event.task} placed {len(event.variables)} variables: {spread}")
        if time.monotonic() - self._last_progress >= self.every:
            self.progress()

    def failure_report(self) -> None:
        """Why the job failed, once: the first failure (in TF jobs the cause of the others), then for
        each failed task the last lines of its latest failed incarnation, no line twice in a row."""
        view = self.view
        if view.root_cause:
            self._print(f"root cause: {view.root_cause}")
        for task_id in view.failed_tasks():
            lines, hidden = split_startup(view.tasks[task_id].failed_tail)
            if not lines and not hidden:
                continue
            self._print(f"last output of {task_id}:")
            if hidden:
                shows = f"`distlaunch logs {view.run or 'RUN'} {task_id}` shows every line"
                self._print(f"  {task_id} | ({hidden_note(hidden, shows)})")
            for line in failure_excerpt(lines):
                self._print(f"  {task_id} | {line}")

    def progress(self) -> None:
        self._last_progress = time.monotonic()
        now = self.view.rate_clock(self.clock())
        tasks = self.view.tasks
        lead = next((tasks[t] for t in ("chief:0", "worker:0") if t in tasks and tasks[t].step is not None),
                    next((t for t in tasks.values() if t.step is not None), None))
        parts = []
        if lead is not None:
            loss = lead.nonfinite_loss or (f"{lead.loss:.4f}" if lead.loss is not None else "-")
            lead_rate = lead.steps_per_s(now)
            rate = f"{lead_rate:.1f}" if lead_rate is not None else "-"
            parts.append(f"step{' (calls)' if lead.step_is_calls else ''} {lead.step}  loss {loss}  {rate} steps/s")
        per_task = []
        for task_id, task in sorted(tasks.items()):
            if task.host_down and task.state not in ev.FINAL_TASK_STATES:  # its last readings are not live
                age = task.age(now)
                per_task.append(f"{task_id} [host {task.host} {task.host_down}"
                                + (f", last seen {age:.0f} s ago]" if age is not None else "]"))
                continue
            if task.state == ev.LOST:
                continue
            bits = []
            task_rate = task.steps_per_s(now)
            if task_rate is not None:
                bits.append(f"{task_rate:.1f}/s")
            if task.cpu_percent is not None:
                bits.append(f"cpu {task.cpu_percent:.0f}%")
            if task.rss_bytes is not None:
                bits.append(f"rss {human_bytes(task.rss_bytes)}")
            if task.gpu_util is not None:
                bits.append(f"gpu {task.gpu_util:.0f}% {human_bytes(task.gpu_mem_used)}")
            bits.extend(f"[{name}]" for name in sorted(task.conditions))
            why = self._slow_why(task_id, now)
            if why:
                bits.append(why)
            if bits:
                per_task.append(f"{task_id} {' '.join(bits)}")
        if per_task:
            parts.append(" | ".join(per_task))
        if parts:
            self._print("  || ".join(parts))


    def _slow_why(self, task_id: str, now: float) -> str:
        """``[input-bound: input 71% compute 20% peers 0% other 9%]`` for a task not compute-bound;
        why a task that made train calls has no split."""
        times = self.view.step_times
        verdict = times.verdict(task_id, now=now, cpu={t: v.cpu_percent for t, v in self.view.tasks.items()})
        split = times.fresh(task_id, now)
        if verdict is None and times.missing(task_id):
            return f"[step time: {times.missing(task_id)}]"
        if verdict is None or verdict == "compute-bound":
            return ""
        return f"[{verdict}" + (f": {percent_text(split)}]" if split is not None else "]")


def _once(lines: list[str]) -> list[str]:
    """Each line once, where it first appeared (a retry loop's repeated error is one line)."""
    return list(dict.fromkeys(lines))


TRACEBACK_START = "Traceback (most recent call last):"
CHAINED = ("During handling of the above exception, another exception occurred:",
           "The above exception was the direct cause of the following exception:")


def failure_excerpt(lines: list[str]) -> list[str]:
    """What the report shows of a failed incarnation's last lines: its last Python traceback whole
    (with the ones chained to it, and whatever followed), every line as printed; without a
    traceback, the last `FAILURE_TAIL_LINES` distinct lines."""
    starts = [i for i, line in enumerate(lines) if line.rstrip() == TRACEBACK_START]
    if not starts:
        return _once(lines)[-FAILURE_TAIL_LINES:]
    start = starts.pop()
    while starts and any(line.strip() in CHAINED for line in lines[max(0, start - 3):start]):
        start = starts.pop()
    return lines[start:]


def _state_text(event: ev.StateEvent, paint: Callable[[object], str] = str) -> str:
    state = event.state
    text = f"{event.task:<12} {paint(state)}"
    extras = []
    if event.host:
        extras.append(f"on {event.host}")
    if state == ev.RUNNING and event.pid:
        extras.append(f"pid {event.pid}")
    if event.restarts:
        extras.append(f"restarts {event.restarts}")
    if state in (ev.FAILED, ev.SUCCEEDED, ev.STOPPED) and event.exit_code is not None:
        extras.append(f"exit {event.exit_code}")
    if event.reason:
        extras.append(event.reason)
    # the cause, unless it only repeats the reason ("exit code 1 ...: exit code 1")
    cause = f": {event.cause}" if event.cause and event.cause != event.reason else ""
    return text + (f" ({', '.join(extras)})" if extras else "") + cause


class JsonPrinter:
    """The event stream as JSON lines on stdout (`--json`)."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self.final_state: str | None = None

    def consume(self, stream: Iterable[Event]) -> None:
        for event in stream:
            if isinstance(event, ev.JobEvent) and event.state in ev.JOB_ENDS:
                self.final_state = event.state
            self.out.write(event.to_json() + "\n")
            self.out.flush()
