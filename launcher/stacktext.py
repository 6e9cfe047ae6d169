"""A capture of every task's stacks as text: what ``distlaunch stacks`` prints and the run dir's
``stacks/<time>.txt`` holds. Identical stacks are shown once for their whole group, the suspect's
group first and named; frames newest last, as Python prints a traceback."""

from __future__ import annotations

import json
from collections.abc import Sequence

from launcher.stackmodel import Frame, TaskStacks, ThreadStack, group, suspect


def header(capture: TaskStacks) -> str:
    """``worker:1 on hostA pid 1234 (sleeping, wchan futex_wait_queue) via py-spy``."""
    where = f"{capture.task} on {capture.host or '?'}"
    if capture.pid is not None:
        where += f" pid {capture.pid}"
    state = capture.state + (f", wchan {capture.wchan}" if capture.wchan else "")
    text = f"{where} ({state})"
    if capture.method:
        text += f" via {capture.method}"
    if capture.note:
        text += f": {capture.note}"
    return text


def frame_line(frame: Frame) -> str:
    if frame.native:
        return f"    [native] {frame.function} ({frame.file})"
    line = "?" if frame.line is None else frame.line
    return f'    File "{frame.file}", line {line}, in {frame.function}'


def thread_lines(capture: TaskStacks) -> list[str]:
    """Every thread of ``capture``, its main thread first."""
    main = capture.main_thread()
    threads: list[ThreadStack] = ([main] if main is not None else []) + [t for t in capture.threads if t is not main]
    lines: list[str] = []
    for thread in threads:
        name = f' "{thread.name}"' if thread.name else ""
        lines.append(f"  Thread {thread.ident}{name} (most recent call last):")
        lines.extend(frame_line(f) for f in thread.frames)
        if not thread.frames:
            lines.append("    (no Python frame)")
    return lines


def render(captures: Sequence[TaskStacks]) -> str:
    found = suspect(captures)
    by_task = {c.task: c for c in captures}
    lines: list[str] = []
    if found is not None:
        lines.append(f"suspect: {found[0]}: {found[1]}")
    for grouped in group(captures):
        if lines:
            lines.append("")
        if len(grouped.tasks) > 1:
            same = "the same stack" if grouped.sample.threads else "the same state"
            lines.append(f"{grouped.label}: {same}" + (" (suspect)" if grouped.suspect else ""))
        elif grouped.suspect:
            lines.append(f"{grouped.label} (suspect)")
        lines.extend(header(by_task[task]) for task in grouped.tasks)
        lines.extend(thread_lines(grouped.sample))
    return "\n".join(lines) + "\n"


def to_json(captures: Sequence[TaskStacks]) -> str:
    """The capture as ``--json`` prints it and the run dir keeps it: a list of TaskStacks objects."""
    return json.dumps([c.to_json() for c in captures], indent=1) + "\n"
