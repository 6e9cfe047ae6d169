"""A task's life and the job's, in one place: the phases, the moves between them, the restarts
under way as values, and the one writer of all of it.

Start reading here. A task's phase is what its agent last reported (or, for ``LOST`` and a
teardown's ``STOPPED``, what the supervisor concluded); what the supervisor means to do with the
task is not a phase but a value beside it: the restart it is in (``RestartStage``), why the
supervisor asked it to stop (its end is then no failure), and the incarnation a restart launched
that has not reported yet. A group restart not yet carried out is a ``PendingRestart``.

Only this module's ``Lifecycle`` assigns a task's phase, these values and the job's phase: the
other parts (restarts.py, hostloss.py, teardown.py, the supervisor) ask it to. The policy
(decide.py, replan.py) reads them as ``TaskFacts``, pure values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from launcher import events as ev
from launcher.model import TaskSpec


class TaskPhase(StrEnum):
    """A task's phase, spelled as its ``state`` events spell it::

        PENDING -> STARTING -> RUNNING -> SUCCEEDED | FAILED | STOPPED    (the ends)
        PENDING | STARTING | RUNNING -> LOST                              (its host lost for good)
        an end | LOST -> STARTING -> ...                                  (a restart or a move: a new incarnation)

    A task may end from any live phase (a start that fails, a stop before it ran), and a task
    ended while its restart was under way is lost with its host. A report may skip a phase (a
    line lost on the way: ``seq`` tells it), so RUNNING may follow any phase but RUNNING itself.
    The ``restarting`` state event a scheduled restart publishes is no phase: the task keeps its
    phase, and its ``TaskRuntime.restart`` says ``SCHEDULED``."""

    PENDING = ev.PENDING
    STARTING = ev.STARTING
    RUNNING = ev.RUNNING
    SUCCEEDED = ev.SUCCEEDED
    FAILED = ev.FAILED
    STOPPED = ev.STOPPED
    LOST = ev.LOST


TASK_PHASES = frozenset(p.value for p in TaskPhase)
ENDS = frozenset({TaskPhase.SUCCEEDED, TaskPhase.FAILED, TaskPhase.STOPPED})
#: no incarnation runs: an end, or lost with its host (ev.FINAL_TASK_STATES)
FINAL = ENDS | {TaskPhase.LOST}

#: the moves a task's phase makes (the same phase again is no move); the supervisor's own
#: conclusions (LOST, a teardown's STOPPED) are checked against it, an agent's report is the truth
TASK_MOVES: Mapping[TaskPhase, frozenset[TaskPhase]] = {
    TaskPhase.PENDING: frozenset({TaskPhase.STARTING, TaskPhase.RUNNING, *ENDS, TaskPhase.LOST}),
    TaskPhase.STARTING: frozenset({TaskPhase.RUNNING, *ENDS, TaskPhase.LOST}),
    TaskPhase.RUNNING: frozenset({*ENDS, TaskPhase.LOST}),
    **{end: frozenset({TaskPhase.STARTING, TaskPhase.RUNNING, TaskPhase.LOST}) for end in ENDS},
    TaskPhase.LOST: frozenset({TaskPhase.STARTING, TaskPhase.RUNNING}),
}


class JobPhase(StrEnum):
    """The job's phase, as its ``job`` events spell it::

        CREATED -> RUNNING <-> RESTARTING
        CREATED -> RESTARTING                (a task failed while the launch still started others)
        any but an end -> SUCCEEDED | FAILED | STOPPED  (once: the job's end)

    STOPPED is an end asked for (``down``, the dashboard's teardown, a stop signal): no failure.
    """

    CREATED = ev.JOB_CREATED
    RUNNING = ev.JOB_RUNNING
    RESTARTING = ev.JOB_RESTARTING
    SUCCEEDED = ev.JOB_SUCCEEDED
    FAILED = ev.JOB_FAILED
    STOPPED = ev.JOB_STOPPED


JOB_PHASES = frozenset(p.value for p in JobPhase)
JOB_ENDS = frozenset({JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.STOPPED})

#: the moves the job's phase makes (RESTARTING again: another restart scheduled meanwhile)
JOB_MOVES: Mapping[JobPhase, frozenset[JobPhase]] = {
    JobPhase.CREATED: frozenset({JobPhase.RUNNING, JobPhase.RESTARTING, *JOB_ENDS}),
    JobPhase.RUNNING: frozenset({JobPhase.RESTARTING, *JOB_ENDS}),
    JobPhase.RESTARTING: frozenset({JobPhase.RUNNING, JobPhase.RESTARTING, *JOB_ENDS}),
    JobPhase.SUCCEEDED: frozenset(),
    JobPhase.FAILED: frozenset(),
    JobPhase.STOPPED: frozenset(),
}


class RestartStage(StrEnum):
    """Where a task stands in a restart of its group."""

    SCHEDULED = "scheduled"  # in a group restart not carried out yet (its back-off, a host, the launch)
    UNDER_WAY = "under way"  # carried out (or dropped for a re-plan's own): until it runs or fails again


@dataclass(eq=False)
class PendingRestart:
    """A group restart scheduled and not yet carried out: what restarts, when, whether it counts
    against ``max_restarts`` and ``backoff_limit`` (a restart after a host left does not), and
    what it waits for: hosts that do not answer, or the end of the launch. Each is one object,
    found by identity: a group may be scheduled twice."""

    tasks: list[str]
    due: float
    counted: bool = True
    waiting_for: tuple[str, ...] = ()  # hosts that do not answer: it goes once they do (or are lost)
    after_launch: bool = False  # fell due while `launch` still started tasks: it goes after


@dataclass
class TaskRuntime:
    """One task as the supervisor knows it; its phase and the values beside it are written by
    ``Lifecycle`` only."""

    spec: TaskSpec
    port: int
    phase: TaskPhase = TaskPhase.PENDING
    restarts: int = 0
    incarnation: int = 0
    pid: int | None = None
    exit_code: int | None = None
    restart: RestartStage | None = None  # the restart of its group it is in, if any
    stop_asked: str | None = None  # why the supervisor stopped it: its end is then no failure
    launched: int | None = None  # the incarnation (restarts) a restart launched that has not reported yet
    started_at: float | None = None  # the agent's time of this incarnation's `starting`
    quick_failures: list[tuple[int | None, float]] = field(default_factory=list)  # (exit, uptime) in a row

    @property
    def final(self) -> bool:
        return self.phase in FINAL

    @property
    def restarting(self) -> bool:
        return self.restart is not None


class Lifecycle:
    """The one writer of the tasks' phases (and the values beside them) and of the job's phase."""

    def __init__(self, tasks: Callable[[], Mapping[str, TaskRuntime]]) -> None:
        self._tasks = tasks
        self.job = JobPhase.CREATED
        self.job_reason = ""
        self.job_restarts = 0  # restarts scheduled that count against backoff_limit

    # -- the job --------------------------------------------------------------------------------------

    def job_to(self, phase: JobPhase | str, reason: str | None = None) -> None:
        """Move the job to ``phase``; a move the lifecycle does not have is refused (ValueError)."""
        new = JobPhase(phase)
        if new != self.job and new not in JOB_MOVES[self.job]:
            raise ValueError(f"the job cannot go from {self.job} to {new}")
        self.job = new
        if reason is not None:
            self.job_reason = reason

    def restart_counted(self) -> None:
        """A group restart that counts against backoff_limit is scheduled."""
        self.job_restarts += 1

    def restart_uncounted(self) -> None:
        """A counted restart was cancelled before it was carried out: it spent nothing."""
        self.job_restarts = max(0, self.job_restarts - 1)

    def restore_job(self, phase: str | None, restarts: int, reason: str | None = None) -> None:
        """Attach: the phase the last supervisor had reached (Running where it recorded none)."""
        self.job_restarts = restarts
        self.job = JobPhase(phase) if phase is not None and phase in JOB_PHASES else JobPhase.RUNNING
        if reason is not None:
            self.job_reason = reason

    # -- a task's phase -------------------------------------------------------------------------------

    def reported(self, rt: TaskRuntime, event: ev.StateEvent) -> None:
        """The task's agent reported its state: the task's phase from now on (an agent's word is the
        truth of its task, even where it skips a phase), with its pid, and when this incarnation
        started or how it ended. A state no task phase spells (``restarting`` is the supervisor's
        word, not an agent's) changes no phase."""
        if event.state in TASK_PHASES:
            rt.phase = TaskPhase(event.state)
        if event.pid is not None:
            rt.pid = event.pid
        if event.state == TaskPhase.STARTING:
            rt.started_at = event.ts
        elif event.state in FINAL:
            rt.exit_code = event.exit_code

    def restore(self, rt: TaskRuntime, state: str | None, restarts: int, incarnation: int | None,
                pid: int | None) -> None:
        """Attach: a task as state.json or the history last told it."""
        rt.phase = TaskPhase(state) if state is not None and state in TASK_PHASES else TaskPhase.PENDING
        rt.restarts = restarts
        rt.incarnation = incarnation if incarnation is not None else rt.restarts
        if pid is not None:
            rt.pid = pid

    def lost(self, rt: TaskRuntime) -> None:
        """Its host is lost for good: whatever it did there is over, asked or not."""
        self._move(rt, TaskPhase.LOST)
        rt.stop_asked = None

    def stopped_unreported(self, rt: TaskRuntime) -> None:
        """The teardown is over and its agent never reported the task's end."""
        self._move(rt, TaskPhase.STOPPED)

    def _move(self, rt: TaskRuntime, phase: TaskPhase) -> None:
        if phase != rt.phase and phase not in TASK_MOVES[rt.phase]:
            raise ValueError(f"{rt.spec.task_id} cannot go from {rt.phase} to {phase}")
        rt.phase = phase

    # -- the values beside it -------------------------------------------------------------------------

    def ask_stop(self, rt: TaskRuntime, why: str) -> None:
        """The supervisor stops the task: its end is planned, not a failure."""
        rt.stop_asked = why

    def end_taken(self, rt: TaskRuntime) -> None:
        """The task's end has been judged: a stop asked before it is spent."""
        rt.stop_asked = None

    def schedule(self, tasks: Iterable[TaskRuntime]) -> None:
        """The tasks are in a group restart scheduled and not yet carried out."""
        for rt in tasks:
            rt.restart = RestartStage.SCHEDULED

    def dropped(self, rt: TaskRuntime) -> None:
        """The scheduled restart of the task was cancelled (a re-plan restarts it instead): it counts
        as restarting still, until it runs or fails again."""
        if rt.restart is RestartStage.SCHEDULED:
            rt.restart = RestartStage.UNDER_WAY

    def carried_out(self, rt: TaskRuntime, counted: bool) -> None:
        """The group restart is carried out now: a new incarnation of the task starts."""
        if counted:
            rt.restarts += 1
        rt.incarnation += 1
        rt.restart = RestartStage.UNDER_WAY

    def restart_over(self, rt: TaskRuntime) -> None:
        """The task runs again, or its restart ended in a failure (then judged by the policy). A
        restart of its group scheduled meanwhile still stands."""
        if rt.restart is RestartStage.UNDER_WAY:
            rt.restart = None

    def launching(self, rt: TaskRuntime) -> None:
        """A restart starts the task's agent: the job's end waits for its first report."""
        rt.launched = rt.restarts

    def launch_reported(self, rt: TaskRuntime, state: str, restarts: int | None) -> bool:
        """The task reported ``state`` for the incarnation ``restarts``: True when that was the
        first report of the incarnation a restart launched (running, or already ended)."""
        if rt.launched is None or state == ev.STARTING or restarts != rt.restarts:
            return False
        rt.launched = None
        return True

    def launch_failed(self, rt: TaskRuntime) -> None:
        rt.launched = None

    def awaiting_launch(self) -> bool:
        """Some restart launched an agent whose task has not reported yet."""
        return any(rt.launched is not None for rt in self._tasks().values())

    def track_crashes(self, rt: TaskRuntime, quick: Iterable[tuple[int | None, float]]) -> None:
        rt.quick_failures = list(quick)
