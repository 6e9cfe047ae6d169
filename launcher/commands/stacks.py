"""``distlaunch stacks [RUN] [TASK...] [--native]``: every live task's stacks and process state.

With a live launcher the CLI asks it over its control socket (the launcher asks the host agents
over its open follow channels: no new SSH exec); without one (its supervisor gone) it connects to the
run's hosts itself and runs the agent's ``stacks`` verb, one exec per host, all in parallel.
Exit 0 when every live task answered, 1 when some did not (named on stderr), 2 for a mistake.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import sys
import time

from launcher.agent.stackmodel import UNKNOWN, TaskStacks, task_sort_key
from launcher.errors import UserError
from launcher.protocol.controllines import Request
from launcher.rundir import RunDir
from launcher.runlookup import find_run
from launcher.runstate import RunState, load_run_state
from launcher.supervise import controlclient
from launcher.supervise.stackcapture import capture_by_verb
from launcher.telemetry.stacktext import render, to_json

#: a task id (``worker:1``), never a run id or a run directory
TASK_ID = re.compile(r"^[A-Za-z_][\w.-]*:\d+$")
#: the launcher's own round trip on top of the hosts' time
CONTROL_MARGIN_SECONDS = 10.0


def split_targets(targets: list[str]) -> tuple[str | None, list[str]]:
    """(RUN, TASKs) of ``stacks [RUN] [TASK...]``: the first word is the run unless it is a task id."""
    if targets and not TASK_ID.match(targets[0]):
        return targets[0], targets[1:]
    return None, targets


def run_stacks(args: argparse.Namespace) -> int:
    run, tasks = split_targets(list(args.targets))
    path = find_run(run)
    state = load_run_state(path)
    run_id = state.run_id
    known = state.tasks
    unknown = [t for t in tasks if t not in known]
    if unknown:
        raise UserError(f"run {run_id} has no task {unknown[0]!r}; its tasks: " + ", ".join(known))
    timeout = float(args.timeout)
    captured_at = time.time()
    captures, saved = _from_launcher(run_id, tasks or list(known), args.native, timeout)
    if captures is None:
        captures = _from_hosts(state, tasks, args.native, timeout)
        with contextlib.suppress(OSError):  # a run dir the user may not write: the output is what counts
            saved = RunDir(path, run_id).write_stacks(captured_at, to_json(captures), render(captures))
    captures.sort(key=lambda c: task_sort_key(c.task))
    sys.stdout.write(to_json(captures) if args.json else render(captures))
    if saved and not args.json:
        print(f"(kept in {path / saved})")
    missing = [c for c in captures if not c.answered]
    if missing:
        for capture in missing:
            print(f"distlaunch: no stacks from {capture.task}: {capture.note or capture.state}", file=sys.stderr)
        return 1
    return 0


def _from_launcher(run_id: str, tasks: list[str], native: bool,
                   timeout: float) -> tuple[list[TaskStacks] | None, str | None]:
    """The live launcher's capture and where it kept it; None when no launcher listens (then the
    CLI asks the hosts)."""
    request = Request("stacks", tasks=tuple(tasks), native=native, timeout_s=timeout)
    answer = controlclient.ask(run_id, request, timeout=timeout + CONTROL_MARGIN_SECONDS)
    if answer is None:
        return None, None
    if not answer.ok:
        why = f"the launcher could not take them: {answer.error}"
        return [TaskStacks(task, "", None, UNKNOWN, note=why) for task in tasks], None
    return [TaskStacks.from_json(item) for item in answer.stacks or []], answer.path


def _from_hosts(state: RunState, tasks: list[str], native: bool, timeout: float) -> list[TaskStacks]:
    from launcher.commands.runhosts import open_sessions  # the transports' modules, only on this path

    placement = {task: info.host for task, info in state.tasks.items()
                 if not tasks or task in tasks}
    sessions, problems = open_sessions(state)
    try:
        reachable = {host: s for host, s in sessions.items() if host not in problems}
        wanted = [t for t, host in placement.items() if host in reachable]
        captures = capture_by_verb(reachable, {t: placement[t] for t in wanted}, wanted, native, timeout)
    finally:
        for session in sessions.values():
            session.host.close()
    for task, host in placement.items():
        if host in problems:
            captures.append(TaskStacks(task, host, None, UNKNOWN, note=f"host unreachable: {problems[host]}"))
    return captures
