"""``distlaunch logs``: one task's output, or every task's merged in time order.

``logs RUN TASK [-f]`` prints the task's log file (``logs/<task>.log``) as written.
``logs RUN --all [--grep REGEX] [--task T ...] [--stderr | --level warn] [-f]`` reads the run's ``log`` events
(events.jsonl holds every line with its time and stream), so lines of all tasks come in the order
they were printed, each with its time and task: ``12:01:02.345 worker:1  loss 0.3``; lines on
stderr carry ``!`` after the task. ``--task`` takes task ids, role names (``worker``) or globs
(``worker:*``).
``--follow`` goes on reading new lines until the run's supervisor is gone.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from launcher import events as ev
from launcher.commands.status import require_task
from launcher.errors import UserError
from launcher.privatedir import open_trusted
from launcher.rundir import EVENTS_FILE
from launcher.runlookup import find_run, skipped_note
from launcher.runstate import RunState, load_run_state
from launcher.telemetry.eventcheck import decode_checked
from launcher.telemetry.mergedlog import FilterError, LogFilter, TaskSet, clock_ms, compile_regex

FOLLOW_POLL_S = 0.25


def run_logs(args: argparse.Namespace) -> int:
    path = find_run(args.run)
    state = load_run_state(path)
    if args.all or args.grep or args.task_filter or args.stderr or args.level:
        if args.task is not None:
            raise UserError(f"give a task ({args.task}) or --all, not both; --task {args.task} picks one in --all")
        return _merged(path, state, args)
    if args.task is None:
        raise UserError("name a task (e.g. `distlaunch logs RUN worker:1`) or give --all for every task's lines")
    require_task(state, args.task)
    log = path / "logs" / f"{args.task.replace(':', '-')}.log"
    offset = 0
    while True:
        with contextlib.suppress(FileNotFoundError), open_trusted(log, f"the log of {args.task}") as fh:
            fh.seek(offset)
            chunk = fh.read()
            if chunk:
                sys.stdout.write(chunk.decode("utf-8", errors="replace"))
                sys.stdout.flush()
                offset += len(chunk)
        if not args.follow:
            return 0
        if not load_run_state(path).supervisor_alive():
            return 0
        time.sleep(FOLLOW_POLL_S)


def line_filter(state: RunState, tasks: list[str], pattern: str | None,
                level: str = "all") -> Callable[[ev.LogEvent], bool]:
    """Which log events ``--task``, ``--grep`` and ``--level`` (``--stderr``) keep (a mistake:
    UserError); the filter is the dashboard's (`launcher/telemetry/mergedlog.py`)."""
    wanted = TaskSet.parse(tasks)
    unknown = wanted.unmatched(state.tasks)
    if unknown:
        raise UserError(f"run {state.run_id} has no task or role {unknown[0]!r}; its tasks: " + ", ".join(state.tasks))
    try:
        regex = compile_regex(pattern) if pattern else None
    except FilterError as exc:
        raise UserError(f"--grep {exc}; quote it, e.g. --grep 'loss [0-9.]+'") from None
    log_filter = LogFilter(wanted, regex, level)
    return lambda event: log_filter.keeps(event.task, event.stream, event.line)


def merged_line(event: ev.LogEvent, width: int) -> str:
    task = f"{event.task or ''}{'!' if event.stream == 'stderr' else ''}"
    return f"{clock_ms(event.ts)} {task:<{width}}  {event.line}"


def _merged(path: Path, state: RunState, args: argparse.Namespace) -> int:
    if args.stderr and args.level not in (None, "stderr"):
        raise UserError(f"give --stderr or --level {args.level}, not both")
    keep = line_filter(state, args.task_filter or [], args.grep, "stderr" if args.stderr else args.level or "all")
    width = max((len(t) for t in state.tasks), default=8) + 1
    skipped = 0
    # what is there now, sorted by time (hosts' lines reach the launcher a little out of order);
    # then, with --follow, new lines as they come
    now: list[ev.LogEvent] = []
    for event, bad in _log_events(path, follow=False, alive=lambda: False):
        if bad:
            skipped += 1
        elif event is not None and keep(event):
            now.append(event)
    for event in sorted(now, key=lambda e: e.ts):  # stable: lines of one time as they arrived
        sys.stdout.write(merged_line(event, width) + "\n")
    sys.stdout.flush()
    if args.follow:
        seen = len(now) + skipped
        for event, bad in _log_events(path, follow=True, alive=lambda: load_run_state(path).supervisor_alive(),
                                      skip=seen, keep=keep):
            if bad:
                skipped += 1
            elif event is not None:
                sys.stdout.write(merged_line(event, width) + "\n")
                sys.stdout.flush()
    note = skipped_note(skipped, path / EVENTS_FILE)
    if note:
        print(note, file=sys.stderr)
    return 0


def _log_events(path: Path, *, follow: bool, alive: Callable[[], bool], skip: int = 0,
                keep: Callable[[ev.LogEvent], bool] | None = None) -> Iterator[tuple[ev.LogEvent | None, bool]]:
    """(log event, False) for each log line of events.jsonl that ``keep`` takes, (None, True) for a
    bad line, the first ``skip`` of those left out; with ``follow``, new lines as they are appended
    until the supervisor is gone (a torn last line waits for its end)."""
    offset = 0
    rest = b""
    given = 0
    while True:
        with contextlib.suppress(FileNotFoundError), open_trusted(path / EVENTS_FILE, "the run's events") as fh:
            fh.seek(offset)
            chunk = fh.read()
            offset += len(chunk)
            data = rest + chunk
            lines = data.split(b"\n")
            rest = lines.pop()  # b"" after a complete last line
            for raw in lines:
                if not raw.strip() or b'"log"' not in raw:
                    continue
                try:
                    event = decode_checked(raw.decode("utf-8"))
                except (UnicodeDecodeError, ev.EventDecodeError):
                    given += 1
                    if given > skip:
                        yield None, True
                    continue
                if isinstance(event, ev.LogEvent) and (keep is None or keep(event)):
                    given += 1
                    if given > skip:
                        yield event, False
        if not follow or not alive():
            return
        time.sleep(FOLLOW_POLL_S)
