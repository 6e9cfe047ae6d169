"""Which tasks a profiler capture would crash, and which ended while one ran (issue 46 §2).

TensorFlow's profiler (2.21 at least) kills a MultiWorkerMirrored task other than the collective
leader (chief:0, else worker:0): its collective ops complete their parameters with the leader
over RPC, so each one starts on a thread of the task's and ends on a gRPC thread, and the host
tracer's collection of such split events, as the capture stops, ends in SIGSEGV or SIGABRT
(``free(): invalid size``); the job fails with it. The leader, a parameter server job's tasks and
tasks that run no collectives are captured safely. No tracer option helps but a host tracer that
records nothing (tests/data/steptime/profiler_crash.py has the evidence). So such a task is not
captured: one line says why and what to do instead, and the others are captured.

A task is such a task when the profile says ``strategy = "multi_worker_mirrored"`` and it is a
worker other than the leader, or when autolog saw its strategy configure collectives led by
another task (``profiler_unsafe`` in its metric values, launcher/autolog/profilersafety.py).

A task whose capture failed because it ended meanwhile (for any reason) is said to have ended,
from the ``state`` events the run's events.jsonl gained since the capture began.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

from launcher import events as ev
from launcher.events import EventDecodeError
from launcher.privatedir import open_trusted
from launcher.protocol.metricnames import PROFILER_UNSAFE
from launcher.rundir import EVENTS_FILE
from launcher.runstate import RunState
from launcher.telemetry.eventcheck import decode_checked

#: how long to wait for the state events of tasks whose capture failed (the supervisor writes them
#: once their agent saw the exit)
ENDED_WAIT_S = 3.0
_ENDED = (ev.FAILED, ev.SUCCEEDED, ev.STOPPED, ev.RESTARTING, "lost")
_MARK = f'"{PROFILER_UNSAFE}"'.encode()


def collective_leader(tasks: Iterable[str]) -> str:
    """TensorFlow's collective leader of a cluster of these tasks: chief:0 if there is a chief."""
    return "chief:0" if any(t.startswith("chief:") for t in tasks) else "worker:0"


def refusals(state: RunState, run_dir: Path, chosen: list[str]) -> dict[str, str]:
    """The one-line reason not to capture each of ``chosen`` that a capture would crash."""
    tasks = list(state.tasks)
    leader = collective_leader(tasks)
    declared = state.strategy == "multi_worker_mirrored"
    flagged = flagged_tasks(run_dir, chosen)
    run = state.run_id
    return {task: refusal(task, leader, run) for task in chosen
            if task != leader and (task in flagged or (declared and task.startswith("worker:")))}


def refusal(task: str, leader: str, run: str) -> str:
    return (f"not capturing {task}: TensorFlow's profiler crashes a MultiWorkerMirrored task other than the "
            f"collective leader ({leader}) as a capture ends (SIGSEGV or SIGABRT), and the job with it; "
            f"`distlaunch status {run}` gives {task}'s step time split live, "
            f"`distlaunch profile {run} {leader}` captures the leader")


def flagged_tasks(run_dir: Path, tasks: list[str]) -> set[str]:
    """The tasks among ``tasks`` whose autolog said a capture would crash them."""
    found: set[str] = set()
    for event in _events(run_dir, 0, _MARK):
        if isinstance(event, ev.MetricEvent) and event.task in tasks and event.values.get(PROFILER_UNSAFE) == 1:
            found.add(event.task)
    return found


def events_size(run_dir: Path) -> int:
    """Where the run's events end now (what a capture's later reads start from)."""
    try:
        return (run_dir / EVENTS_FILE).stat().st_size
    except OSError:
        return 0


def ended_since(run_dir: Path, offset: int, tasks: list[str], wait_s: float = ENDED_WAIT_S) -> dict[str, str]:
    """Each of ``tasks`` that ended (or began to restart) since ``offset`` of the events, and how;
    waiting up to ``wait_s`` for the events of those not yet seen to."""
    if not (run_dir / EVENTS_FILE).exists():
        return {}
    deadline = time.monotonic() + wait_s
    while True:
        ended: dict[str, str] = {}
        for event in _events(run_dir, offset, b'"state"'):
            if isinstance(event, ev.StateEvent) and event.task in tasks and event.state in _ENDED:
                ended[str(event.task)] = _how(event)
        if len(ended) == len(tasks) or time.monotonic() >= deadline:
            return ended
        time.sleep(0.2)


def _how(event: ev.StateEvent) -> str:
    state, code = event.state, event.exit_code
    why = " ".join((event.cause or event.reason).split())[:200]
    text = f"it ended while the capture ran ({state}" + (f", exit code {code}" if isinstance(code, int) else "")
    return text + (f": {why})" if why else ")")


def _events(run_dir: Path, offset: int, needle: bytes) -> Iterable[ev.Event]:
    """The run's events from ``offset`` on whose line holds ``needle`` (others are not decoded)."""
    try:
        fh = open_trusted(run_dir / EVENTS_FILE, "the run's events")
    except (FileNotFoundError, OSError):
        return
    with fh:
        fh.seek(offset)
        for raw in fh:
            if needle not in raw or not raw.endswith(b"\n"):  # a line still being written: next time
                continue
            try:
                yield decode_checked(raw.decode("utf-8"))
            except (UnicodeDecodeError, EventDecodeError):
                continue
