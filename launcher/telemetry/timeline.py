"""The job's history as a user reads it after a failure: what changed, when, and why.

One `Timeline` is folded from the same events as the `JobView` (the dashboard's `e` view) and
from a run dir's events.jsonl (`distlaunch events`), so both show the same entries worded the
same way. Only events that change something are kept: job and task state changes (with exit
code, restart count and reason), hosts lost or back, conditions raised or cleared, operator
actions. Metrics, samples and log lines are not history: they are skipped at the first test.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from launcher import events as ev
from launcher.events import Event

TIMELINE_ENTRIES = 5000
"""Entries kept by a live view; the oldest go first (events.jsonl keeps them all)."""

TIMELINE_KINDS = (ev.JOB, ev.STATE, ev.HOST, ev.CONDITION, ev.STACKS, ev.ACTION, ev.REQUEUED)
"""The event kinds that make timeline entries (what `--kind` accepts)."""


@dataclass(frozen=True)
class TimelineEntry:
    ts: float
    kind: str
    task: str | None
    text: str
    severity: str  # "info" | "warning" | "error": the colour the dashboard gives the line

    def to_dict(self) -> dict[str, Any]:
        return {"ts": self.ts, "kind": self.kind, "task": self.task, "text": self.text,
                "severity": self.severity}


class Timeline:
    """Bounded, ordered as received; `newest_first` reads it the way the user wants it."""

    def __init__(self, limit: int | None = TIMELINE_ENTRIES) -> None:
        self.entries: deque[TimelineEntry] = deque(maxlen=limit)
        self.total = 0
        """Entries ever added: a reader that remembers it knows whether anything is new."""
        self._task_state: dict[str, tuple[str, int]] = {}
        self._job_state: str | None = None
        self._raised: set[tuple[str | None, str | None]] = set()  # (task, condition) raised, not cleared

    def add(self, event: Event) -> TimelineEntry | None:
        """Fold one event; returns the entry it made, or None when it changed nothing."""
        if event.kind not in TIMELINE_KINDS:
            return None
        if isinstance(event, ev.JobEvent):
            entry = self._job(event)
        elif isinstance(event, ev.StateEvent):
            entry = self._state(event)
        elif isinstance(event, ev.HostEvent):
            entry = _host(event)
        elif isinstance(event, ev.ConditionEvent):
            key = (event.task, event.condition)
            entry = _condition(event, again=bool(event.active) and key in self._raised)
            (self._raised.add if event.active else self._raised.discard)(key)
        elif isinstance(event, ev.StacksEvent):
            entry = TimelineEntry(event.ts, ev.STACKS, event.task, stacks_text(event), "warning")
        elif isinstance(event, ev.ActionEvent):
            entry = _action(event)
        elif isinstance(event, ev.RequeuedEvent):
            entry = TimelineEntry(event.ts, ev.REQUEUED, None, f"requeue {event.requeues}: {event.reason}", "warning")
        else:
            return None
        if entry is not None:
            self.entries.append(entry)
            self.total += 1
        return entry

    def newest_first(self, kind: str | None = None, task: str | None = None) -> list[TimelineEntry]:
        return [e for e in reversed(self.entries)
                if (kind is None or e.kind == kind) and (task is None or e.task == task)]

    def _job(self, event: ev.JobEvent) -> TimelineEntry | None:
        state = event.state
        if not state or state == self._job_state:
            return None
        self._job_state = state
        reason = event.reason
        severity = "error" if state == ev.JOB_FAILED else \
            "warning" if state in (ev.JOB_RESTARTING, ev.JOB_STOPPED) else "info"
        return TimelineEntry(event.ts, ev.JOB, None, f"job {state}" + (f": {reason}" if reason else ""),
                             severity)

    def _state(self, event: ev.StateEvent) -> TimelineEntry | None:
        task = event.task or "?"
        state, restarts = event.state, event.restarts or 0
        if (state, restarts) == self._task_state.get(task):
            return None  # a repeat (attach replays the last state): nothing happened
        self._task_state[task] = (state, restarts)
        return TimelineEntry(event.ts, ev.STATE, task, state_text(event), _state_severity(state))


def state_text(event: ev.StateEvent) -> str:
    """One task state change in words: where, which process, how it ended and why."""
    state, reason = event.state or "?", event.reason
    host, pid, code = event.host, event.pid, event.exit_code
    parts = [f"{state} on {host}" if state in (ev.STARTING, ev.RUNNING) and host else state]
    if state == ev.RUNNING and pid is not None:
        parts.append(f"pid {pid}")
    if code is not None and state in (*ev.FINAL_TASK_STATES, ev.RESTARTING):
        parts.append(f"exit code {code}")
    if state == ev.RESTARTING:
        parts.append(f"restart {event.restarts or 0}")
    text = ", ".join(parts)
    # a failure says its cause, as the header and --no-tui do (the reason is only how it exited);
    # never "exit code 1: exit code 1"
    why = (event.cause or reason) if state == ev.FAILED else reason
    if why and code is not None and why == f"exit code {code}":
        why = ""
    return f"{text}: {why}" if why else text


def _state_severity(state: str) -> str:
    if state == ev.FAILED:
        return "error"
    if state in (ev.RESTARTING, ev.STOPPED):
        return "warning"
    return "info"


def _host(event: ev.HostEvent) -> TimelineEntry:
    host, state, reason = event.host or "?", event.state or "?", event.reason
    return TimelineEntry(event.ts, ev.HOST, None, f"host {host} {state}" + (f": {reason}" if reason else ""),
                         "info" if state == "up" else "error")


def stacks_text(event: ev.StacksEvent) -> str:
    """``stacks taken: suspect worker:1 in wait_for_peer (hang.py:4) (it is stopped); stacks/<time>.json``."""
    text = "stacks taken"
    if event.suspect:
        text += f": suspect {event.suspect}"
        if event.frame:
            text += f" in {event.frame}"
        if event.reason:
            text += f" ({event.reason})"
    return text + f"; {event.path}"


def _condition(event: ev.ConditionEvent, again: bool = False) -> TimelineEntry:
    """A condition raised or cleared; ``again``: raised while it already was (a stall's second word,
    once its stacks are taken, says where), said as more about it, not as a second raise."""
    name, active, reason = event.condition or "condition", event.active, event.reason
    verb = "still raised" if again else "raised" if active else "cleared"
    text = f"{name} {verb}" + (f": {reason}" if reason else "")
    return TimelineEntry(event.ts, ev.CONDITION, event.task, text, "warning" if active else "info")


def _action(event: ev.ActionEvent) -> TimelineEntry:
    action, target, origin = event.action or "?", event.target, event.origin
    text = f"operator: {action}" + (f" {target}" if target else "") + (f" (from {origin})" if origin else "")
    return TimelineEntry(event.ts, ev.ACTION, target or None, text, "warning")


def clock_text(ts: float, start: float | None) -> str:
    """Wall time of day, then the offset from the job's start: ``10:41:07 +1m02s``."""
    try:  # a time no calendar has (a damaged line of a live stream) is shown as none
        wall = time.strftime("%H:%M:%S", time.localtime(ts))
        offset = max(0, int(ts - start)) if start is not None else 0
    except (OverflowError, OSError, ValueError):
        return "--:--:--"
    if start is None:
        return wall
    minutes, seconds = divmod(offset, 60)
    hours, minutes = divmod(minutes, 60)
    rel = f"+{hours}h{minutes:02d}m" if hours else f"+{minutes}m{seconds:02d}s"
    return f"{wall} {rel:>7}"
