"""A submitted run's Slurm job, told in the run's files while no supervisor writes them.

Until the batch job claims the run (state.json then names its node), each look at Slurm that
finds a change appends a ``slurm`` event; an end before the supervisor started (cancelled, failed,
a batch script that never started the run) is recorded in state.json and a ``job`` event with
Slurm's words, so a run is never "pending" for ever. `up`, `attach`, `status`, `runs` and `down`
all look through here (``refresh``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path

from launcher import events as ev
from launcher.commands import notice
from launcher.rundir import BATCH_OUTPUT, RunDir
from launcher.runlookup import read_events
from launcher.runstate import RunState, load_run_state
from launcher.transport import slurmqueue
from launcher.transport.slurmqueue import SlurmJobInfo

#: a submitted run's job state until its supervisor runs (a view state: no supervisor told it)
PENDING = "Pending"


def last_slurm_event(path: Path) -> ev.SlurmEvent | None:
    last = None
    for event in read_events(path):
        if isinstance(event, ev.SlurmEvent):
            last = event
    return last


def refresh(path: Path, state: RunState) -> SlurmJobInfo | None:
    """Ask Slurm about a run that waits for its job (``state.awaiting_slurm``); a change is told as a
    ``slurm`` event and an end before the start is recorded. None: Slurm did not answer."""
    assert state.slurm is not None
    info = slurmqueue.query(state.slurm.job_id, cluster=state.slurm.cluster)
    if info is None:
        return None
    now = load_run_state(path)
    if not now.awaiting_slurm:  # the supervisor took the run meanwhile: the files are its own
        return info
    assert now.slurm is not None
    last = last_slurm_event(path)
    if now.slurm.node is not None:  # the batch job claimed the run: its `up` tells the events now
        pass
    elif last is None or (last.state, last.reason, last.start_time, last.node) != (
            info.state, info.reason, info.start_time, info.node):
        _append(path, [ev.slurm_event(state.run_id, info.job_id, info.state or "GONE", info.reason,
                                      info.start_time, info.node)])
    if info.ended and info.state != "COMPLETING":  # a requeued job ends its allocation first: not the run's end
        record_end_before_start(path, now, info)
    return info


def _append(path: Path, events: list[ev.Event]) -> None:
    rundir = RunDir.open(path)
    rundir.on_problem = notice
    try:
        for event in events:
            rundir.append(event)
    finally:
        rundir.close()


def record_end_before_start(path: Path, state: RunState, info: SlurmJobInfo, reason: str = "") -> str:
    """The run ended without a supervisor: Slurm cancelled or failed the job before it started, or
    its batch script ended without starting the run. state.json and a ``job`` event say so with
    Slurm's words; the outcome."""
    assert state.slurm is not None
    job = state.slurm.job_id
    ending = last_job_end(path)
    if ending is not None:  # the batch job's `up` recorded its own end (a profile it refused, say)
        outcome, reason = ending.state, ending.reason
    else:
        said = f"Slurm job {job} " + (f"{info.state}" if info.state else "is no longer known to Slurm")
        said += f" ({info.reason})" if info.reason else ""
        outcome = ev.JOB_STOPPED if info.state == "CANCELLED" or reason else ev.JOB_FAILED
        reason = reason or (f"{said} {waiting_words(state)}" + _batch_words(path))
        _append(path, [ev.job_event(state.run_id, outcome, reason)])
    rundir = RunDir.open(path)
    rundir.on_problem = notice
    try:
        rundir.write_state(dataclasses.replace(state, job_state=outcome, job_reason=reason, outcome=outcome).to_json())
    finally:
        rundir.close()
    return outcome


def waiting_words(state: RunState) -> str:
    """When a run that waits for its job ended: before it ever ran, or between two allocations."""
    requeues = state.slurm.requeues if state.slurm is not None else 0
    if requeues:
        return f"while the run waited to run again (its job requeued {requeues}x)"
    return "before the run started"


def last_job_end(path: Path) -> ev.JobEvent | None:
    ends = [e for e in read_events(path) if isinstance(e, ev.JobEvent) and e.state in ev.JOB_ENDS]
    return ends[-1] if ends else None


def _batch_words(path: Path) -> str:
    """The last line the batch script printed (Slurm's output file in the run dir), if any."""
    with contextlib.suppress(OSError):
        text = (path / BATCH_OUTPUT).read_text(errors="replace")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if lines:
            return f"; its output ended with: {lines[-1][:200]}"
    return ""


def slurm_json(path: Path, state: RunState, info: SlurmJobInfo | None) -> dict[str, object] | None:
    """``status --json``'s ``slurm``: the run's Slurm job as Slurm last showed it (``info``, else
    its last ``slurm`` event); None for a run not submitted."""
    if state.slurm is None:
        return None
    out: dict[str, object] = {"job_id": state.slurm.job_id, "state": None, "reason": "", "start_time": None,
                              "node": state.slurm.node, "submitted": state.slurm.submitted,
                              "requeues": state.slurm.requeues}
    if info is not None:
        out.update(state=info.state or None, reason=info.reason, start_time=info.start_time,
                   node=info.node or state.slurm.node)
    else:
        last = last_slurm_event(path)
        if last is not None:
            out.update(state=last.state, reason=last.reason, start_time=last.start_time,
                       node=last.node or state.slurm.node)
    return out


def pending_words(state: RunState, info: SlurmJobInfo | None) -> str:
    """Why a submitted run waits, in `status`'s and `runs`' words."""
    assert state.slurm is not None
    job = state.slurm.job_id
    if state.slurm.node is not None:
        return f"Slurm job {job} RUNNING on {state.slurm.node}; the run's supervisor is starting"
    again = f" (requeued {state.slurm.requeues}x)" if state.slurm.requeues else ""
    if info is None:
        return f"Slurm job {job}{again}: squeue did not answer"
    return f"Slurm job {job} {info.text()}{again}"
