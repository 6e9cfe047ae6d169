"""What the job does next, decided from the plan, the task states and one event: a pure function.

``decide(plan, states, event)`` applies every rule of DESIGN.md section 6 (and the output and
stall policies): a task's end is judged by its role's restart policy, ``max_restarts``, the job's
``backoff_limit`` with exponential back-off, crash loops (``min_uptime``), a ``no_retry`` log
policy and failures no restart can fix; recovery follows the strategy (``restart_group``); the
success policy ends the job, whose teardown then stops the ps and the remaining workers. It reads
no clock, file or socket: whatever it needs (the task's uptime, the ``down`` marker, a log
policy's match) comes in the event, and the supervisor carries out the decisions (restarts.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from launcher import events as ev
from launcher.model import Plan
from launcher.supervise.lifecycle import RestartStage
from launcher.supervise.policy import (
    QuickFailures,
    backoff_delay,
    crash_loop_reason,
    job_succeeded,
    quick_failures_after,
    restart_group,
    wants_restart,
    why_not_restarted,
)


@dataclass(frozen=True)
class TaskFacts:
    """What the policy reads of one task: its phase and the values beside it (lifecycle.py)."""

    state: str = ev.PENDING  # its phase (a TaskPhase)
    restarts: int = 0
    exit_code: int | None = None
    stop_asked: bool = False  # the supervisor asked for this stop: not a failure
    restart: RestartStage | None = None  # the restart of its group it is in, if any
    quick_failures: QuickFailures = field(default_factory=list)

    @property
    def final(self) -> bool:
        return self.state in ev.FINAL_TASK_STATES

    @property
    def restarting(self) -> bool:
        """In a group restart that has not reached running again."""
        return self.restart is not None

    @property
    def restart_pending(self) -> bool:
        """In a group restart scheduled but not yet carried out."""
        return self.restart is RestartStage.SCHEDULED


@dataclass(frozen=True)
class JobFacts:
    """The job as the policy sees it: every task's facts (their state already updated by the
    event) and the job's own counters."""

    tasks: Mapping[str, TaskFacts]
    job_state: str = ev.JOB_RUNNING
    job_restarts: int = 0
    finishing: bool = False  # the job's end is decided: nothing restarts from here on


# -- events -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TaskEnded:
    """A task reached a final state (succeeded, failed, stopped)."""

    task: str
    state: str
    reason: str = ""  # the agent's reason, if it gave one
    permanent: bool = False  # no restart can fix it (the agent says so)
    uptime: float | None = None  # seconds from this incarnation's start; None: started before this supervisor
    no_retry: str | None = None  # why a [[log_policies]] no_retry line forbids a restart
    down_requested: bool = False  # `distlaunch down` left its marker in the run dir


@dataclass(frozen=True)
class Stalled:
    """The watchdog raised a stall on ``task``."""

    task: str
    reason: str


@dataclass(frozen=True)
class RestartRequested:
    """The operator asked to restart ``task``."""

    task: str


@dataclass(frozen=True)
class StopRequested:
    """The operator asked to stop ``task``."""

    task: str


@dataclass(frozen=True)
class OutputStop:
    """An output policy asks the job to stop (a NaN/Inf loss under ``on_nan = "stop"``)."""

    reason: str


PolicyEvent = TaskEnded | Stalled | RestartRequested | StopRequested | OutputStop


# -- decisions ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RestartGroup:
    """Restart ``tasks`` (the trigger's recovery group) after ``delay`` seconds: stop, then start."""

    trigger: str
    tasks: tuple[str, ...]
    delay: float
    why: str  # what happened to the trigger ("failed (exit code 1)")


@dataclass(frozen=True)
class Stop:
    """Stop ``task`` (SIGTERM, grace, SIGKILL); its end is expected, not a failure."""

    task: str


@dataclass(frozen=True)
class Succeed:
    """The job succeeded: end it (the teardown stops the ps and the remaining workers)."""

    reason: str


@dataclass(frozen=True)
class GiveUp:
    """The job failed: end it with this cause."""

    cause: str


@dataclass(frozen=True)
class TrackCrashes:
    """The task failed: its run of quick failures after this failure (for the next crash-loop
    judgement); a restart of it that was under way has ended (it is no longer restarting)."""

    task: str
    quick_failures: QuickFailures


@dataclass(frozen=True)
class ForgetProgress:
    """Drop the task's step record in the watchdog (its stall is being dealt with)."""

    task: str


Decision = RestartGroup | Stop | Succeed | GiveUp | TrackCrashes | ForgetProgress


def decide(plan: Plan, states: JobFacts, event: PolicyEvent) -> list[Decision]:
    """The decisions ``event`` calls for, in the order they are to be carried out."""
    if isinstance(event, TaskEnded):
        return _on_end(plan, states, event)
    if isinstance(event, Stalled):
        return _on_stall(plan, states, event)
    if isinstance(event, RestartRequested):
        facts = states.tasks.get(event.task)
        if facts is None or states.finishing or facts.restarting:
            return []
        return _restart(plan, states, event.task, "restart requested", delay=0.0)
    if isinstance(event, StopRequested):
        facts = states.tasks.get(event.task)
        if facts is None or facts.final or states.finishing:
            return []
        return [Stop(event.task)]
    return [] if states.finishing else [GiveUp(event.reason)]


def _on_end(plan: Plan, states: JobFacts, event: TaskEnded) -> list[Decision]:
    facts = states.tasks[event.task]
    if facts.stop_asked or states.finishing:
        return []
    spec = plan.task(event.task)
    profile = plan.profile
    if event.state == ev.SUCCEEDED:
        if job_succeeded(profile.success_policy, {t: f.state for t, f in states.tasks.items()}):
            decider = "all workers" if profile.success_policy == "all_workers" else event.task
            return [Succeed(f"{decider} exited 0")]
        if wants_restart(spec.restart, 0, True):
            return _restart(plan, states, event.task, f"exited 0 (restart policy {spec.restart})")
        return []
    if event.state == ev.STOPPED and event.down_requested:
        return [GiveUp("stopped by `distlaunch down`")]
    if facts.restart_pending:
        # already in a pending group restart (a chief crashing because its ps died): that restart
        # starts it again; its own policy must not call the consequence a permanent failure
        return []
    reason = event.reason or f"exit code {facts.exit_code}"
    quick: QuickFailures = [] if event.uptime is None else \
        quick_failures_after(facts.quick_failures, facts.exit_code, event.uptime, spec.min_uptime)
    tracked: list[Decision] = [TrackCrashes(event.task, quick)]
    failed = f"{event.task} failed ({reason}); not restarted:"
    if event.permanent:
        return [*tracked, GiveUp(f"{failed} no restart can fix this")]
    if event.no_retry is not None:
        return [*tracked, GiveUp(f"{failed} {event.no_retry}")]
    crash_loop = crash_loop_reason(spec, quick, facts.restarts)
    if crash_loop is not None:
        return [*tracked, GiveUp(crash_loop)]
    if not wants_restart(spec.restart, facts.exit_code, False):
        return [*tracked, GiveUp(f"{failed} {why_not_restarted(spec.restart, facts.exit_code)}")]
    spent = out_of_restarts(plan, states, event.task, f"failed ({reason})")
    if spent is not None:
        return [*tracked, GiveUp(spent)]
    # the failed task's restart, if any, ended here: it counts as not restarting for its group
    return [*tracked, *_restart(plan, states, event.task, f"failed ({reason})", trigger_restarting=False)]


def _on_stall(plan: Plan, states: JobFacts, event: Stalled) -> list[Decision]:
    facts = states.tasks[event.task]
    spec = plan.task(event.task)
    if spec.on_stall != "restart" or facts.restarting or states.job_state != ev.JOB_RUNNING:
        return []
    spent = out_of_restarts(plan, states, event.task, f"stalled ({event.reason})")
    if spent is not None:
        return [GiveUp(spent)]
    return [ForgetProgress(event.task), *_restart(plan, states, event.task, f"stall: {event.reason}", delay=0.0)]


def out_of_restarts(plan: Plan, states: JobFacts, task: str, what: str) -> str | None:
    """Why ``task`` may not restart again (its max_restarts or the job's backoff_limit), else None."""
    spec = plan.task(task)
    restarts = states.tasks[task].restarts
    if restarts >= spec.max_restarts:
        return f"{task} {what} after {restarts} restarts (max_restarts = {spec.max_restarts})"
    limit = plan.profile.backoff_limit
    if states.job_restarts >= limit:
        return f"{task} {what}; the job used all {limit} restarts (backoff_limit)"
    return None


def _restart(plan: Plan, states: JobFacts, trigger: str, why: str, delay: float | None = None,
             trigger_restarting: bool | None = None) -> list[Decision]:
    """The trigger's recovery group less the tasks already restarting, after the back-off (or
    ``delay``); nothing when every member is already restarting."""

    def restarting(task: str) -> bool:
        if task == trigger and trigger_restarting is not None:
            return trigger_restarting
        return states.tasks[task].restarting

    whole = restart_group(plan.profile.strategy, trigger, states.tasks)
    done = [t for t in whole if t != trigger and states.tasks[t].state == ev.SUCCEEDED]
    if done:
        # a task that succeeded is never started again (its work is done, and a second run of it
        # would train again from its checkpoint); the group restarts together because TensorFlow
        # cannot go on with a member missing, so without it the group cannot restart at all
        them = "it" if len(done) == 1 else "them"
        return [GiveUp(f"{trigger} {why}; not restarted: {', '.join(done)} already succeeded, and "
                       f"{plan.profile.strategy} cannot go on without {them} (a task that succeeded "
                       "is never started again)")]
    group = [t for t in whole if not restarting(t)]
    if not group:
        return []
    wait = backoff_delay(states.tasks[trigger].restarts) if delay is None else delay
    return [RestartGroup(trigger, tuple(group), wait, why)]
