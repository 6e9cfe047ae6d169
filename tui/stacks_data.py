"""What the stacks view shows and where it comes from: a live capture through `JobControl`, or the
last capture kept in the run dir (taken at a stall or by `distlaunch stacks`: all a replay has).

Also the dashboard's stall line: "stalled at step 5 in wait_for_peer (hang.py:4)", from the
`stacks` event of the capture taken when the task stalled.
"""

from __future__ import annotations

import calendar
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher import events as ev
from launcher.agent.stackmodel import TaskStacks
from launcher.events import StacksEvent
from launcher.rundir import STACKS_DIR
from launcher.supervise.control import JobControl
from launcher.telemetry.jobview import TaskView

NO_CAPTURE = "no capture in the run dir (one is kept when a task stalls, and by `distlaunch stacks`)"


@dataclass(frozen=True)
class Capture:
    """One set of stacks: the tasks' captures, when they were taken and whether live."""

    stacks: list[TaskStacks]
    taken: float
    live: bool
    path: Path | None = None

    def only(self, task_id: str | None) -> Capture:
        """This capture narrowed to one task (None: all of it)."""
        if task_id is None:
            return self
        return Capture([s for s in self.stacks if s.task == task_id], self.taken, self.live, self.path)

    def source_line(self, job_live: bool) -> str:
        """Where the stacks come from, for the view's header (empty: a live capture)."""
        if self.live:
            return ""
        if job_live:
            return f"the last capture kept in the run dir, taken {clock_time(self.taken)}"
        return f"no live job: showing the capture of {clock_time(self.taken)}"


class NoCapture(Exception):
    """There is no capture stored to show."""


def clock_time(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts))


def _stacks_of(items: Any) -> list[TaskStacks]:
    if not isinstance(items, list):
        raise ValueError("not a list of task captures")
    return [TaskStacks.from_json(item) for item in items]


def _time_of(path: Path) -> float:
    """When a capture was taken: its file's name says (``20231114T221345.123Z.json``, UTC, as
    `RunDir.write_stacks` names it), else the file's time."""
    try:
        stamp, _, millis = path.stem.removesuffix("Z").partition(".")
        return calendar.timegm(time.strptime(stamp, "%Y%m%dT%H%M%S")) + int(millis or 0) / 1000
    except ValueError:
        return path.stat().st_mtime


def read_capture(path: Path) -> Capture:
    """A capture file of the run dir: a list of TaskStacks objects (`launcher/stacktext.to_json`)."""
    return Capture(_stacks_of(json.loads(path.read_text(encoding="utf-8"))), _time_of(path), live=False,
                   path=path)


def stored_capture(run_dir: Path | None, event: StacksEvent | None) -> Capture:
    """The capture a `stacks` event names (the latest one the dashboard has seen), else the newest
    file in the run dir's stacks folder. Raises `NoCapture` when there is none."""
    candidates: list[Path] = []
    if event is not None and event.path:
        named = Path(event.path)
        candidates.append(named if named.is_absolute() or run_dir is None else run_dir / named)
    if run_dir is not None and (run_dir / STACKS_DIR).is_dir():
        candidates += sorted((run_dir / STACKS_DIR).glob("*.json"), key=lambda p: p.name, reverse=True)
    for path in candidates:
        try:
            return read_capture(path)
        except (OSError, ValueError, KeyError, TypeError):
            continue  # cut off mid-write or not a capture: try the next one
    raise NoCapture(NO_CAPTURE)


Fetch = Callable[[list[str] | None, bool], Capture]
"""Takes (tasks or None for all, native frames?) and returns a capture; may block for seconds."""


def live_fetch(control: JobControl, clock: Callable[[], float] = time.time) -> Fetch:
    def fetch(tasks: list[str] | None, native: bool) -> Capture:
        return Capture(control.capture_stacks(tasks, native=native), clock(), live=True)

    return fetch


def stored_fetch(run_dir: Path | None, event: Callable[[], StacksEvent | None]) -> Fetch:
    """Replay: no job to ask, the last stored capture narrowed to the tasks asked for."""

    def fetch(tasks: list[str] | None, native: bool) -> Capture:
        capture = stored_capture(run_dir, event())
        return capture.only(tasks[0]) if tasks and len(tasks) == 1 else capture

    return fetch


def stall_line(task: TaskView) -> str:
    """"stalled at step 5 in wait_for_peer (hang.py:4)"; the condition's reason while no capture says
    where; empty when the task is not stalled. A suspect other than the task is named as such."""
    if ev.STALLED not in task.conditions:
        return ""
    stacks = task.stall_stacks
    step = f" at step {task.step}" if task.step is not None else ""
    if stacks is None:
        return f"stalled: {task.conditions[ev.STALLED]}"
    where = stacks.frame or ""
    suspect = stacks.suspect
    if suspect and suspect != task.task_id:
        return f"stalled{step}; suspect {suspect}" + (f" in {where}" if where else "")
    return f"stalled{step}" + (f" in {where}" if where else "")


def job_stall_line(tasks: list[TaskView]) -> str:
    """The header's line: the first stalled task's stall line, and how many more stalled."""
    stalled = [(t.task_id, line) for t in tasks if (line := stall_line(t))]
    if not stalled:
        return ""
    task_id, line = stalled[0]
    more = f" (+{len(stalled) - 1} more)" if len(stalled) > 1 else ""
    return f"{task_id} {line}{more}"
