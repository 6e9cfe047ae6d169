"""Policies on what a task outputs: ``[[log_policies]]`` on its lines, ``on_nan`` on its loss.

The launcher decides restarts, so the launcher matches: every ``log`` and ``metric`` event of a task
passes through ``OutputPolicy.on_event`` on the supervisor's loop, in the order the task wrote them.

- A line matching a ``warn`` policy raises the ``log_policy`` condition, once per policy and
  incarnation. A line matching a ``no_retry`` policy is remembered for the incarnation: when that
  incarnation fails, ``no_retry`` says why it must not be restarted (the supervisor then ends the job
  instead of restarting the task or its group).
- A metric event whose loss is NaN or Inf (``nonfinite_loss``) raises ``nan_loss`` ("loss is NaN
  since step 6"); a finite loss clears it ("recovered at step 9"). Under ``on_nan = "stop"`` the
  raise also gives ``stop_reason``, and the supervisor tears the job down with it.

- A line matching a signature row marked ``repeats`` (launcher/telemetry/signatures.py: a failure
  that every restart would repeat, such as Keras 3's ``fit`` under MultiWorkerMirroredStrategy) is
  remembered like a ``no_retry`` match, with the row's cause, which names the fix: the job ends at
  the first failure instead of spending its restarts on the same error.

A task's ``starting`` state begins a new incarnation and forgets what the last one matched.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from launcher import events as ev
from launcher.events import Event
from launcher.model import LogPolicy, OnNan
from launcher.telemetry.signatures import SIGNATURES, Signature

#: the longest part of a matching line repeated in a condition or a failure reason
MAX_LINE_CHARS = 300


@dataclass(frozen=True)
class LogMatch:
    """A line of a task's output that matched log policy ``number`` (1-based, as written)."""

    number: int
    pattern: str
    line: str

    def no_retry_reason(self) -> str:
        return f"output matched log policy {self.number} ({self.pattern}): {self.line}"

    def warn_reason(self) -> str:
        return f"output matched {_quoted(self.pattern)}: {self.line}"


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '\\"') + '"'


def _clip(line: str) -> str:
    line = line.strip()
    return line if len(line) <= MAX_LINE_CHARS else line[:MAX_LINE_CHARS - 3] + "..."


class LogPolicies:
    """The compiled ``[[log_policies]]`` and what each task's current incarnation matched."""

    def __init__(self, policies: Iterable[LogPolicy]) -> None:
        self.policies = list(policies)
        self._compiled = [(number, policy, re.compile(policy.pattern))
                          for number, policy in enumerate(self.policies, start=1)]
        self._done: dict[str, set[int]] = {}  # task -> policies already matched this incarnation
        self._no_retry: dict[str, LogMatch] = {}

    def __bool__(self) -> bool:
        return bool(self._compiled)

    def forget(self, task: str) -> None:
        self._done.pop(task, None)
        self._no_retry.pop(task, None)

    def on_line(self, task: str, line: str) -> list[LogMatch]:
        """The ``warn`` policies this line is the first match of (this incarnation); a first
        ``no_retry`` match is kept for ``no_retry``."""
        done = self._done.setdefault(task, set())
        if len(done) == len(self._compiled):
            return []
        warned: list[LogMatch] = []
        for number, policy, regex in self._compiled:
            if number in done or regex.search(line) is None:
                continue
            done.add(number)
            match = LogMatch(number, policy.pattern, _clip(line))
            if policy.action == "warn":
                warned.append(match)
            else:
                self._no_retry.setdefault(task, match)
        return warned

    def no_retry(self, task: str) -> LogMatch | None:
        """The no_retry match of the task's current incarnation, if any."""
        return self._no_retry.get(task)


#: the signature rows whose failure every restart would repeat
REPEATING: tuple[Signature, ...] = tuple(sig for sig in SIGNATURES if sig.repeats)


class RepeatingFailures:
    """Which tasks' current incarnation printed a line of a ``repeats`` signature row."""

    def __init__(self) -> None:
        self._found: dict[str, str] = {}  # task -> the row's cause

    def forget(self, task: str) -> None:
        self._found.pop(task, None)

    def on_line(self, task: str, line: str) -> None:
        if task in self._found:
            return
        for sig in REPEATING:
            match = sig.pattern.search(line)
            if match is not None:
                fields = {k: v or "" for k, v in match.groupdict().items()}
                self._found[task] = sig.template.format(culprit="", host="?", **fields)
                return

    def reason(self, task: str) -> str | None:
        cause = self._found.get(task)
        return None if cause is None else f"restarting cannot help: {cause}"


class NanLoss:
    """Which tasks' loss is NaN or Inf now, and since which step."""

    def __init__(self) -> None:
        self._last_step: dict[str, int] = {}
        self._bad: dict[str, str] = {}  # task -> the raised reason

    def forget(self, task: str) -> None:
        self._last_step.pop(task, None)
        self._bad.pop(task, None)

    def on_metric(self, task: str, event: ev.MetricEvent) -> tuple[bool, str] | None:
        """(active, reason) when the task's nan_loss condition changes with this metric event."""
        step = event.step
        if step is not None:
            self._last_step[task] = step
        known = self._last_step.get(task)
        label = ev.nonfinite_label(event.nonfinite_loss)
        if label is not None and task not in self._bad:
            name = {"nan": "NaN", "inf": "Inf", "-inf": "-Inf"}[label]
            reason = f"loss is {name}" + (f" since step {known}" if known is not None else "")
            self._bad[task] = reason
            return True, reason
        if label is None and event.loss is not None and task in self._bad:
            del self._bad[task]
            return False, "loss is finite again: recovered" + (f" at step {known}" if known is not None else "")
        return None


class OutputPolicy:
    """Both policies for every task of a job; the supervisor's one hook on task events."""

    def __init__(self, run_id: str, policies: Iterable[LogPolicy], on_nan: Mapping[str, OnNan]) -> None:
        self.run_id = run_id
        self.logs = LogPolicies(policies)
        self.repeating = RepeatingFailures()
        self.nan = NanLoss()
        self._on_nan = dict(on_nan)
        self._stop: str | None = None

    def configure(self, policies: Iterable[LogPolicy], on_nan: Mapping[str, OnNan]) -> None:
        """The policies of a plan that replaced the last one: each task's ``on_nan``; the log
        policies compiled again only where they changed (what the running incarnations matched
        is kept otherwise)."""
        self._on_nan = dict(on_nan)
        policies = list(policies)
        if policies != self.logs.policies:
            self.logs = LogPolicies(policies)

    def on_event(self, event: Event) -> list[Event]:
        """The condition events that ``event`` (a task's) raises or clears."""
        task = event.task
        if task is None:
            return []
        if isinstance(event, ev.LogEvent):
            self.repeating.on_line(task, event.line)
            if not self.logs:
                return []
            return [ev.condition_event(self.run_id, task, ev.LOG_POLICY, True, m.warn_reason(), ts=event.ts)
                    for m in self.logs.on_line(task, event.line)]
        if isinstance(event, ev.MetricEvent):
            change = self.nan.on_metric(task, event)
            if change is None:
                return []
            active, reason = change
            if active and self._on_nan.get(task) == "stop" and self._stop is None:
                self._stop = f"{task} {reason} (on_nan = stop)"
            return [ev.condition_event(self.run_id, task, ev.NAN_LOSS, active, reason, ts=event.ts)]
        if isinstance(event, ev.StateEvent) and event.state == ev.STARTING:
            self.logs.forget(task)
            self.repeating.forget(task)
            self.nan.forget(task)
        return []

    def replay(self, history: Iterable[Event]) -> None:
        """Rebuild what the running incarnations matched from the recorded events (attach)."""
        for event in history:
            self.on_event(event)
        self._stop = None

    def stop_reason(self) -> str | None:
        """Once: why the job must stop (a NaN/Inf loss of a task with on_nan = "stop")."""
        reason, self._stop = self._stop, None
        return reason

    def no_retry(self, task: str) -> str | None:
        """Why the failed incarnation of ``task`` must not be restarted, or None."""
        match = self.logs.no_retry(task)
        return match.no_retry_reason() if match is not None else self.repeating.reason(task)
