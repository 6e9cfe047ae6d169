"""A submitted run's Slurm job ends its allocation without ending the run: requeue and time limit.

Inside the allocation of a job `up` submitted (``commands/submit.py``), Slurm may take the job back:
a preemption whose mode is REQUEUE, ``scontrol requeue``, or the job's own time limit near with
``time_limit_action = "requeue"``. Slurm then sends SIGTERM to the job's processes (the
supervisor's or the batch script's `up`, which passes it on) and, after its KillWait, SIGKILL.
A SIGTERM is asked about (``requeue_reason``): squeue shows a requeued job COMPLETING like any
other end, but ``scontrol show job`` counts one restart more than the run knows of: no stop of
the run. The supervisor then stops the tasks with their grace, as at any end (their SIGTERM is
the checkpoint before the stop autolog and the scripts already know), says so in a ``requeued``
event and a ``job`` event ``Restarting``, and leaves state.json waiting for Slurm again: no
supervisor, no node, one requeue more. The clients on the login node go back to the queue view;
the requeued batch script's `up` finds the run waiting for its job and continues it, the same run
(its id, events, restart counts and checkpoints: ``Supervisor.carry_over``).

``TimeLimit`` watches the job's end time (squeue's ``%e``): ``time_limit_margin_seconds`` before it,
``time_limit_action = "requeue"`` requeues the job itself (the same path), ``"stop"`` ends the run
``Stopped: time limit``, instead of Slurm killing the tasks mid-step at the limit.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from launcher import events as ev
from launcher.model import Profile
from launcher.profile.slurm_env import current_allocation, restart_count
from launcher.runstate import RunState, SlurmJobRecord
from launcher.supervise.core import Loop
from launcher.transport import slurmqueue

#: how long the SIGTERM's question to Slurm may take (Slurm's KillWait is 30 s by default)
ASK_TIMEOUT_S = 5.0
#: how often the watch asks Slurm for the job's end (an `scontrol update` may move it)
LIMIT_POLL_S = 60.0
#: and, for a submitted run, whether Slurm is requeueing the job: the SIGTERM is the first word of a
#: requeue, but a supervisor outside the job's process tracking may never get it
REQUEUE_POLL_S = 15.0


@dataclass(frozen=True)
class SlurmJob:
    """The allocation the supervisor runs in: its job, and whether `up` submitted the run as it (a
    requeued job then continues the run; a job started by hand would start a new one)."""

    job_id: str
    cluster: str | None = None
    submitted: bool = False


@dataclass(frozen=True)
class Requeue:
    """Slurm takes the job back and the run goes on: ``words`` say why. ``preempted``: in a
    preemption's grace time, Slurm requeues the job only at its end, and a job whose batch script
    ends sooner (the tasks stopped) would be recorded ended, not requeued; the supervisor asks
    Slurm for the requeue itself once the tasks have stopped, which also frees the nodes sooner."""

    words: str
    preempted: bool = False


def requeue_reason(job: SlurmJob, known: int,
                   ask: Callable[..., slurmqueue.JobRestarts | None] = slurmqueue.restarts) -> Requeue | None:
    """Why the job's allocation is ending while its run goes on (Slurm's words), when Slurm counts
    more requeues of the job than the run knows of (``known``), or preempts it to requeue it; None
    for any other end (a cancel, the time limit, no answer)."""
    if not job.submitted:
        return None
    info = ask(job.job_id, timeout=ASK_TIMEOUT_S, cluster=job.cluster)
    if info is None or info.state == "CANCELLED":
        return None
    if info.preempted and info.restarts <= known:  # its grace time: the requeue comes at its end
        return Requeue(f"Slurm preempted job {job.job_id} to requeue it", preempted=True)
    if info.restarts <= known or info.state == "RUNNING":
        return None
    return Requeue(f"Slurm requeued job {job.job_id}" + (f" ({info.reason})" if info.reason else ""))


class TimeLimit:
    """Acts ``margin`` seconds before Slurm's end time for the job: ``on_limit(words)`` once (None:
    no time limit action; a limit no longer than the margin: ``on_notice`` says so, nothing acts);
    for a submitted run, ``on_requeue(requeue)`` once ``requeued()`` sees Slurm take the job back."""

    def __init__(self, job: SlurmJob, margin: float | None, on_limit: Callable[[str], None], done: threading.Event,
                 ask: Callable[..., slurmqueue.SlurmJobInfo | None] = slurmqueue.query,
                 clock: Callable[[], float] = time.time,
                 on_requeue: Callable[[Requeue], None] | None = None,
                 requeued: Callable[[], Requeue | None] | None = None,
                 on_notice: Callable[[str], None] = lambda _line: None) -> None:
        self.job = job
        self.margin = margin
        self.on_limit = on_limit
        self.on_requeue = on_requeue
        self.requeued = requeued
        self.on_notice = on_notice
        self.done = done
        self.ask = ask
        self.clock = clock

    def start(self) -> threading.Thread:
        thread = threading.Thread(target=self.watch, name="slurm-time-limit", daemon=True)
        thread.start()
        return thread

    def watch(self) -> None:
        poll = REQUEUE_POLL_S if self.on_requeue is not None else LIMIT_POLL_S
        while not self.done.is_set():
            why = self.requeued() if self.requeued is not None and self.on_requeue is not None else None
            if why is not None and self.on_requeue is not None:
                self.on_requeue(why)
                return
            left = self._left() if self.margin is not None else None
            if left is not None and left <= 0:
                return
            self.done.wait(poll if left is None else min(left, poll))

    def _left(self) -> float | None:
        """Seconds until the action (<= 0: it was taken, or the limit is too short for it); None:
        no answer, or no limit (UNLIMITED)."""
        assert self.margin is not None
        info = self.ask(self.job.job_id, cluster=self.job.cluster)
        end = info.end_time if info is not None else None
        if info is None or end is None:
            return None
        if info.start_time is not None and end - info.start_time <= self.margin:
            self.on_notice(f"time_limit_margin_seconds ({self.margin:g}) is not less than job {self.job.job_id}'s "
                           f"whole time limit ({end - info.start_time:.0f} s): nothing acts before the limit")
            self.margin = None
            return None
        left = end - self.margin - self.clock()
        if left <= 0:
            ends = time.strftime("%H:%M:%S", time.localtime(end))
            self.on_limit(f"time limit: Slurm ends job {self.job.job_id} at {ends}, "
                          f"{max(0.0, end - self.clock()):.0f} s from now")
        return left


class SlurmOwner(Protocol):
    """What SlurmLife uses of the supervisor."""

    @property
    def run_id(self) -> str: ...
    @property
    def slurm_job(self) -> SlurmJobRecord | None: ...
    @property
    def outcome(self) -> str | None: ...
    @property
    def profile(self) -> Profile: ...
    @property
    def loop(self) -> Loop: ...
    @property
    def finishing(self) -> bool: ...
    def call(self, fn: Callable[[], None]) -> None: ...
    def publish(self, event: ev.Event, line: str | None = None) -> None: ...
    def finish(self, state: str, reason: str) -> None: ...
    def ended(self, state: str, reason: str) -> None: ...
    def notice(self, message: str) -> None: ...
    def stop_job(self, reason: str, origin: str = "") -> None: ...


class SlurmLife:
    """The supervisor's side of a Slurm job that may be requeued or reach its time limit. Any end of
    a submitted run but its success is held while Slurm is asked whether it requeued the job: a
    SIGTERM, the agents' steps ending with the allocation, a task failing as it is killed, all
    come at once when Slurm takes the job back, and the first must not decide the run's end."""

    def __init__(self, sup: SlurmOwner) -> None:
        self.sup = sup
        #: why the allocation ends while the run goes on (set once the requeue is decided)
        self.requeued: str | None = None
        self._by_us = False  # the time limit's requeue, a preemption's: `scontrol requeue` at close
        self._preempted = False
        self.asking = False  # Slurm is being asked (on the loop): no restart starts meanwhile
        self._asked = False  # an end was held and Slurm said no requeue: ends go through from now on
        self._held: tuple[str, str] | None = None  # the end that waits for Slurm's word
        self._judges: list[Callable[[], None]] = []  # task failures that wait for it

    def known_requeues(self) -> int:
        """The requeues of this allocation's job so far: Slurm's own count for the allocation
        (SLURM_RESTART_COUNT), else the run's record."""
        recorded = self.sup.slurm_job.requeues if self.sup.slurm_job is not None else 0
        return max(recorded, restart_count())

    def job(self) -> SlurmJob | None:
        record = self.sup.slurm_job
        if record is not None:
            return SlurmJob(record.job_id, record.cluster, submitted=True)
        allocation = current_allocation()
        return SlurmJob(allocation.job_id) if allocation is not None else None

    def holds(self, state: str, reason: str) -> bool:
        """On the loop, for ``finish``: True when this end waits for Slurm's word on a requeue (it
        is carried out, or the requeue instead, once the word came)."""
        job = self.job()
        if job is None or not job.submitted or state in (ev.JOB_SUCCEEDED, ev.JOB_RESTARTING) or self._asked:
            return False
        if self._held is None:  # a later end comes of the same cause: the first is carried out
            self._held = (state, reason)
        self._ask(job)
        return True

    def holds_failure(self, judge: Callable[[], None]) -> bool:
        """On the loop: a task of a submitted run failed. Slurm's SIGTERM when it preempts the job
        reaches the tasks' steps, often before (or instead of) the supervisor: Slurm is asked, and
        the failure is judged (``judge``: a restart, the job's end) only once it said no requeue.
        A requeue stops the run's tasks as a drain instead, never counted as the task's failure.
        False: judge it now (no submitted run, or Slurm's word was had already)."""
        job = self.job()
        if job is None or not job.submitted or self._asked or self.requeued is not None:
            return False
        self._judges.append(judge)
        self._ask(job)
        return True

    def _ask(self, job: SlurmJob) -> None:
        if self.asking:
            return
        self.asking = True

        def ask() -> None:
            why = requeue_reason(job, self.known_requeues())
            self.sup.call(lambda: self._answered(why))

        threading.Thread(target=ask, name="slurm-requeue?", daemon=True).start()

    def _answered(self, why: Requeue | None) -> None:
        self.asking = False
        held, self._held = self._held, None
        judges, self._judges = self._judges, []
        if why is not None:
            self.requeue(why.words, preempted=why.preempted)
            return
        for judge in judges:  # Slurm keeps the job: the failures are the tasks' own
            judge()
        if held is not None:
            self._asked = True  # this end was Slurm's no: the ends after it go through
            self.sup.finish(*held)

    def requeue(self, why: str, by_us: bool = False, preempted: bool = False) -> None:
        """On the loop: the allocation ends, the run goes on when Slurm runs the job again
        (``by_us``, and in a preemption's grace: the supervisor asks Slurm for the requeue once the
        tasks stopped)."""
        if self.sup.finishing or self.requeued is not None:
            return
        self.requeued, self._by_us, self._preempted, self._asked = why, by_us or preempted, preempted, True
        if not self._by_us:  # the time limit's and a preemption's are told once Slurm took it (``closing``)
            self._tell()
        self.sup.finish(ev.JOB_RESTARTING, f"{why}: the run goes on when the job runs again")

    def _tell(self) -> None:
        record = self.sup.slurm_job
        assert record is not None and self.requeued is not None
        self.sup.publish(ev.requeued_event(self.sup.run_id, record.job_id, self.requeued, self.known_requeues() + 1,
                                           record.node))

    def closing(self, outcome: str) -> str:
        """At close: the time limit's requeue is asked of Slurm now (the tasks have stopped, the
        job still runs); where Slurm refuses, the run ends Stopped instead, saying why."""
        if self.requeued is None or not self._by_us:
            return outcome
        record = self.sup.slurm_job
        assert record is not None
        problem = slurmqueue.requeue(record.job_id, cluster=record.cluster)
        job = self.job()
        again = requeue_reason(job, self.known_requeues()) if problem is not None and self._preempted and job else None
        if problem is None or again is not None:
            # a preemption's grace ended first and Slurm requeued the job itself, or is still in it and
            # requeues the job at its end: either way the run waits for the job to run again
            self._tell()
            return outcome
        reason = f"{self.requeued}, but Slurm did not requeue it ({problem})"
        self.requeued = None
        self.sup.ended(ev.JOB_STOPPED, reason)
        self.sup.publish(ev.job_event(self.sup.run_id, ev.JOB_STOPPED, reason))
        return ev.JOB_STOPPED

    def recorded(self, state: RunState) -> RunState:
        """state.json of a run whose allocation ended by a requeue, once its supervisor closes (not
        before: the next allocation's `up` takes the run as soon as it says so): waiting for Slurm."""
        if self.requeued is None or state.slurm is None or self.sup.outcome is None:
            return state
        return dataclasses.replace(state, outcome=None, supervisor_pid=None, clients=0,
                                   job_reason=f"{self.requeued}; waiting in Slurm's queue to run again",
                                   slurm=dataclasses.replace(state.slurm, node=None,
                                                             requeues=self.known_requeues() + 1))

    def watch_time_limit(self) -> None:
        """From the launch (or a take-over) on: ``time_limit_action`` before the job's time limit,
        and a submitted run's requeue seen in Slurm's count."""
        config = self.sup.profile.slurm
        job = self.job()
        if config is None or job is None or not (config.time_limit_action or job.submitted):
            return
        action = config.time_limit_action
        if action == "requeue" and not job.submitted:
            self.sup.notice(f"time_limit_action = \"requeue\": this run was not submitted by `distlaunch up` "
                            f"(job {job.job_id} would start a new run), so it stops before the time limit instead")
            action = "stop"

        def on_limit(words: str) -> None:
            if action == "requeue":
                self.sup.call(lambda: self.requeue(f"{words}: requeued before it", by_us=True))
            else:
                self.sup.call(lambda: self.sup.stop_job(f"{words}: stopped before it", "time limit"))

        def on_requeue(why: Requeue) -> None:
            self.sup.call(lambda: self.requeue(why.words, preempted=why.preempted))

        margin = config.time_limit_margin_seconds if action else None
        TimeLimit(job, margin, on_limit, self.sup.loop.done, on_requeue=on_requeue if job.submitted else None,
                  requeued=lambda: requeue_reason(job, self.known_requeues()), on_notice=self.sup.notice).start()
