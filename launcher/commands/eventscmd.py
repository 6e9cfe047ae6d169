"""`distlaunch events RUN`: the job's timeline from its run dir, newest first."""

from __future__ import annotations

import argparse
import json

from launcher.errors import UserError
from launcher.rundir import find_run, read_events, read_state
from launcher.telemetry.timeline import Timeline, TimelineEntry, clock_text


def run_events(args: argparse.Namespace) -> int:
    path = find_run(args.run)
    state = read_state(path)
    tasks = state.get("tasks")
    if args.task and isinstance(tasks, dict) and args.task not in tasks:
        known = ", ".join(sorted(tasks)) or "none"
        raise UserError(f"run {path.name} has no task {args.task!r} (its tasks: {known})")
    timeline = Timeline(limit=None)
    start: float | None = None
    for event in read_events(path):
        if start is None:
            start = event.ts
        timeline.add(event)
    entries = timeline.newest_first(kind=args.kind, task=args.task)
    if args.json:
        for entry in entries:
            print(json.dumps(entry.to_dict()))
        return 0
    if not entries:
        what = " matching the filter" if args.kind or args.task else ""
        print(f"no timeline entries{what} in {path}")
        return 0
    width = max(len(e.task or "job") for e in entries)
    for entry in entries:
        print(entry_line(entry, start, width))
    return 0


def entry_line(entry: TimelineEntry, start: float | None, task_width: int) -> str:
    return f"{clock_text(entry.ts, start)}  {(entry.task or 'job').ljust(task_width)}  " \
           f"{entry.kind.ljust(9)}  {entry.text}"
