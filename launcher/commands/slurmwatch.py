"""A run submitted to Slurm, seen from the login node: its job while it waits, then the live job.

`up` outside an allocation submits the run (``commands/submit.py``); until the batch job starts
the run's supervisor inside the allocation, no process supervises the run and Slurm alone knows
where it stands. Every client then asks Slurm (``transport/slurmqueue.py``, bounded) and:

- tells each change of the job's state, reason or expected start as a ``slurm`` event, appended
  to the run's events (only while no supervisor writes them);
- records an end before the start (cancelled, failed, or a batch script that never started the
  run) in state.json and a ``job`` event with Slurm's words: a run is never "pending" for ever;
- once the supervisor inside the allocation serves, follows it as `attach` does: over its control
  socket where that is reachable from here (the socket's directory is on the shared filesystem,
  but a unix socket only connects on its own machine), else through a job step on the batch node
  (``srun --overlap --jobid J --nodelist NODE distlaunch attach RUN``), which needs no SSH.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from launcher import events as ev
from launcher.commands import notice
from launcher.commands.follow import follow_supervisor
from launcher.commands.shown import Shown
from launcher.commands.slurmrecord import record_end_before_start, refresh, waiting_words
from launcher.protocol.controllines import job_exit_code
from launcher.runlookup import read_events
from launcher.runstate import RunState, load_run_state
from launcher.supervise import controlclient
from launcher.transport import slurmqueue
from launcher.transport.slurmqueue import SlurmJobInfo

#: seconds between two looks at Slurm while the job waits
POLL_S = 2.0


@dataclass(frozen=True)
class Waiting:
    """What a client shows while the job waits: the words, and why the wait is over (None: not over)."""

    text: str
    over: str | None = None  # "started": the supervisor serves; "ended": the job ended before it did


def look(path: Path) -> Waiting:
    """One look at a submitted run: Slurm's view while it waits, "started" once its supervisor serves."""
    state = load_run_state(path)
    assert state.slurm is not None
    job = state.slurm.job_id
    if state.outcome is not None:
        return Waiting(f"Slurm job {job}: the run ended ({state.outcome}: {state.job_reason})", "ended")
    if not state.awaiting_slurm:
        return Waiting(f"Slurm job {job}: RUNNING on {state.slurm.node or '?'}", "started")
    if state.slurm.node is not None:  # the batch script runs: its supervisor prepares the hosts
        ended = refresh(path, state)
        if load_run_state(path).outcome is not None:
            return look(path)
        words = f"Slurm job {job}: RUNNING on {state.slurm.node}, the run's supervisor is starting"
        return Waiting(words if ended is not None else words + " (squeue did not answer)")
    info = refresh(path, state)
    if info is None:
        return Waiting(f"Slurm job {job}: squeue did not answer; asking again")
    if load_run_state(path).outcome is not None:
        return look(path)
    if info.waiting:
        count = state.slurm.requeues
        again = f" (requeued {_times(count)}; the run goes on when it runs)" if count else ""
        return Waiting(f"Slurm job {job}: {info.text()}{again}")
    return Waiting(f"Slurm job {job}: {info.text()}, starting the run's supervisor")


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


def wait_for_start(path: Path, shown: Shown, on_look: Callable[[Waiting], None] | None = None) -> Waiting:
    """Watch the run until its supervisor serves or its job ended: progress lines (``--no-tui``),
    ``slurm`` events as JSON lines (``--json``) or the waiting screen (the dashboard's first view)."""
    if shown.tui:
        from tui.pending import run_pending_screen

        last = run_pending_screen(shown.title, lambda: look(path))
        return Waiting(last.text, last.over)
    said = ""
    seen = len([e for e in read_events(path) if isinstance(e, ev.SlurmEvent)]) if shown.json else 0
    while True:
        now = look(path)
        if shown.json:
            slurm = [e for e in read_events(path) if isinstance(e, ev.SlurmEvent)]
            for event in slurm[seen:]:
                print(event.to_json(), flush=True)
            seen = len(slurm)
        elif now.text != said:
            print(f"... {now.text}", file=sys.stderr, flush=True)
            said = now.text
        if on_look is not None:
            on_look(now)
        if now.over is not None:
            return now
        time.sleep(POLL_S)


def follow_submitted(path: Path, shown: Shown, own: bool) -> int:
    """Follow a submitted run to its end (``own``: this is the `up` that submitted it, whose Ctrl-C
    cancels the job; an `attach` only leaves it), through the queue and back each time Slurm
    requeues its job."""
    while True:
        code = _follow_allocation(path, shown, own)
        if code is not None:
            return code
        state = load_run_state(path)
        assert state.slurm is not None
        print(f"... run {state.run_id}: {state.job_reason}", file=sys.stderr, flush=True)


#: how long a client waits for the record of an allocation's end (its supervisor writes it last)
SETTLE_S = 30.0


def requeued_meanwhile(path: Path, timeout: float = SETTLE_S) -> bool:
    """After the supervisor of an allocation went away: did Slurm requeue the job (the run waits
    for its next allocation), rather than the run end? Waits for state.json to say either."""
    state = load_run_state(path)
    if state.outcome is not None or state.slurm is None:
        return False
    if state.awaiting_slurm:
        return True
    info = slurmqueue.query(state.slurm.job_id, cluster=state.slurm.cluster)
    if info is None or not (info.state in slurmqueue.REQUEUE_STATES or info.state in ("COMPLETING", "PENDING")):
        return False  # the job runs on (a client that detached) or ended: no requeue to wait for
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = load_run_state(path)
        if state.outcome is not None:
            return False
        if state.awaiting_slurm:
            return True
        time.sleep(0.2)
    return False


def _follow_allocation(path: Path, shown: Shown, own: bool) -> int | None:
    """Follow the run through one allocation of its job: its exit code, or None when Slurm requeued
    the job (the run waits in the queue again)."""
    state = load_run_state(path)
    assert state.slurm is not None
    run_id, job = state.run_id, state.slurm.job_id
    if state.awaiting_slurm:
        try:
            waited = wait_for_start(path, shown)
        except KeyboardInterrupt:
            if not own:
                print(f"left {run_id}: Slurm job {job} stays queued; `distlaunch attach {run_id}` to watch it again",
                      file=sys.stderr)
                return 0
            cancel_waiting(path, f"stopped by Ctrl-C {waiting_words(load_run_state(path))}")
            return 130
        if waited.over == "ended":
            ended = load_run_state(path)
            print(f"run {run_id}: job {ended.outcome}: {ended.job_reason}", file=sys.stderr)
            return job_exit_code(ended.outcome, None)
        if waited.over == "cancel":
            cancel_waiting(path, f"stopped from the dashboard {waiting_words(load_run_state(path))}")
            return 130
        if waited.over == "detach":
            print(f"left {run_id}: Slurm job {job} goes on; `distlaunch attach {run_id}` to watch it again",
                  file=sys.stderr)
            return 0
    state = load_run_state(path)
    if elsewhere(state) and state.slurm is not None and state.slurm.node is not None:
        # srun names Slurm's node (the batch host squeue shows), which need not be its hostname
        info = slurmqueue.query(job, cluster=state.slurm.cluster)
        node = info.node if info is not None and info.node else state.slurm.node
        het = any((r.config or {}).get("slurm_het_group") is not None for r in state.hosts.values())
        code = relay_attach(job, node, run_id, shown, het_group=0 if het else None)
        ended = load_run_state(path)
        if ended.outcome is not None:  # the job's end cancels the step: the run's own end is the answer
            code = job_exit_code(ended.outcome, None)
    else:
        code = follow_supervisor(run_id, path, child=None, shown=shown, attach=not own, log_from=0)
    return None if requeued_meanwhile(path) else code


def elsewhere(state: RunState) -> bool:
    """Does the run's supervisor run inside its Slurm job on another machine, whose control socket
    this one cannot reach (its pid means nothing here either)?"""
    node = state.slurm.node if state.slurm is not None else None
    if node is None or state.outcome is not None or node in {socket.gethostname(), socket.getfqdn()}:
        return False
    sock = controlclient.connect(state.run_id, 1.0)
    if sock is not None:
        sock.close()
        return False
    return True


def relay_attach(job: str, node: str, run_id: str, shown: Shown, het_group: int | None = None) -> int:
    """Follow the supervisor on ``node`` through a step of the job: `attach` runs there, next to
    its control socket, its screen or lines relayed by srun (a pty for the dashboard). In a
    heterogeneous job the step names component 0, where the batch script runs (srun refuses a
    step of such a job that names none)."""
    mode = [] if shown.tui else (["--json"] if shown.json else ["--no-tui"])
    group = [] if het_group is None else [f"--het-group={het_group}"]
    argv = ["srun", "--overlap", f"--jobid={job}", *group, f"--nodelist={node}", "--nodes=1", "--ntasks=1", "--quiet",
            *(["--pty"] if shown.tui else []), sys.executable, "-m", "launcher.cli", "attach", run_id, *mode]
    try:
        return subprocess.run(argv, check=False).returncode
    except OSError as exc:
        notice(f"cannot reach the supervisor of {run_id} on {node} through srun: {exc.strerror or exc}; "
               f"`distlaunch status {run_id}` reads its files")
        return 1


def cancel_waiting(path: Path, reason: str, timeout: float = 60.0) -> SlurmJobInfo | None:
    """scancel a submitted run's job and wait (bounded) for Slurm to end it; a run whose supervisor had
    not started is recorded Stopped with ``reason``. The job as Slurm last showed it."""
    state = load_run_state(path)
    assert state.slurm is not None
    problem = slurmqueue.cancel(state.slurm.job_id, cluster=state.slurm.cluster)
    if problem is not None:
        notice(f"Slurm job {state.slurm.job_id}: {problem}")
    info = slurmqueue.wait_ended(state.slurm.job_id, timeout, cluster=state.slurm.cluster)
    now = load_run_state(path)
    if now.awaiting_slurm and info is not None and info.ended:
        record_end_before_start(path, now, info, reason=f"{reason} (Slurm job {state.slurm.job_id} cancelled)")
    elif now.awaiting_slurm:  # unconfirmed: the job may still be queued, and its run must stay findable
        notice(f"Slurm job {state.slurm.job_id} may still be queued (Slurm did not confirm its end); "
               f"run `distlaunch down {now.run_id}` again")
    return info
