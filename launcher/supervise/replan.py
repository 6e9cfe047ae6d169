"""What the job does when a host is gone for good (lost, or drained on purpose): a pure function.

``decide_host_gone(plan, facts, gone, room)`` reads the profile's ``on_host_lost``,
``max_host_losses``, each role's ``min_count`` and the spares still usable, and returns one
decision: move the host's tasks to a spare, go on without them (shrink), or give up with the cause.
``recovery_set`` says which tasks restart with a new TF_CONFIG afterwards, as TensorFlow needs:

* multi_worker_mirrored: every task of the cluster (the chief and the workers): MWMS reads
  TF_CONFIG once, when the strategy is made, and its collectives need every peer;
* parameter_server: when only workers leave and none moves (a shrink), nothing: the
  ClusterCoordinator puts the closures of a worker that fails back on its queue and the other
  workers take them (TF 2.21 ``cluster_coordinator.py``, ``WorkerPreemptionHandler``); the thread
  of the lost worker waits for it to answer again at its address (up to an hour) without holding
  up the others, and the chief ends as usual once its steps are done. The decision says so
  (``Shrink.in_place``): the lost worker stays in the plan, ``lost``, and no task restarts.
  Otherwise every task of the cluster: the coordinator keeps the server def it was made with, so
  the chief must start again to see a new address; the ps and the workers restart with it so that
  no server keeps a cluster that names a host no longer there (the chief restores from its
  checkpoint). Tried once each: the chief with a moved ps hung (the worker left running kept the
  old cluster);
* custom: the moved tasks only (the script owns its recovery).

It reads no clock, socket or file: the supervisor's host-loss part (hostloss.py) carries it out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from launcher import events as ev
from launcher.model import Plan
from launcher.placement import role_size
from launcher.supervise.decide import GiveUp, JobFacts

#: the fencing margin beyond orphan_grace_seconds + a task's grace (``lost_after``): the stream's
#: silence check (5 s), a ping's freshness at the agent (2.5 s), its housekeeping (0.5 s), slack
FENCE_MARGIN_SECONDS = 10.0


def lost_after(plan: Plan, host: str) -> float:
    """Seconds without contact after which ``host`` is lost: host_lost_seconds, and never before its
    agent's orphan rule has surely stopped its tasks. The agent may have had pings a few seconds
    after the last line the supervisor heard; then it waits orphan_grace_seconds, and a stop takes
    the task's grace before SIGKILL."""
    grace = max((t.grace_seconds for t in plan.tasks if t.host == host), default=0.0)
    profile = plan.profile
    return max(profile.host_lost_seconds, profile.orphan_grace_seconds + grace + FENCE_MARGIN_SECONDS)


@dataclass(frozen=True)
class HostGone:
    """``host`` is out of the job: lost (no contact for ``host_lost_seconds``) or drained."""

    host: str
    why: str  # "no contact for 120 s", "drained: maintenance", "preemption notice"
    drained: bool = False


@dataclass(frozen=True)
class Room:
    """What the run still has to recover with."""

    spares: tuple[str, ...]  # usable spares, in the profile's order (up, unused)
    losses: int  # hosts the run has lost or drained so far (moves and shrinks), this one not counted
    #: tasks still in the plan that the job already goes on without (``Shrink.in_place``)
    left: tuple[str, ...] = ()


@dataclass(frozen=True)
class Move:
    """Place ``tasks`` (those of ``from_host``) on ``to_host``, then restart the recovery set."""

    tasks: tuple[str, ...]
    from_host: str
    to_host: str
    why: str


@dataclass(frozen=True)
class Shrink:
    """Go on without ``tasks`` (those of ``from_host``), then restart the recovery set; or, when
    ``in_place`` (ParameterServerStrategy workers only), keep them in the plan as ``lost`` and
    restart nothing: the coordinator goes on with the other workers."""

    tasks: tuple[str, ...]
    from_host: str
    why: str
    in_place: bool = False


@dataclass(frozen=True)
class Nothing:
    """No task of the job is on the host (a spare, or every task there already ended)."""

    host: str


HostDecision = Move | Shrink | GiveUp | Nothing


def gone_tasks(plan: Plan, facts: JobFacts, host: str) -> tuple[str, ...]:
    """The tasks of ``host`` that the job still needs: those that have not ended on their own
    (a task of the host that succeeded, or failed for good, is not brought back)."""
    ended = (ev.SUCCEEDED, ev.FAILED, ev.STOPPED)
    return tuple(t.task_id for t in plan.tasks if t.host == host
                 and (t.task_id not in facts.tasks or facts.tasks[t.task_id].state not in ended
                      or facts.tasks[t.task_id].restarting or facts.tasks[t.task_id].restart_pending))


def describe_gone(gone: HostGone) -> str:
    """``host b lost (no contact for 120 s)`` / ``host b drained (maintenance)``."""
    if gone.drained:
        return f"host {gone.host} drained ({gone.why})" if gone.why else f"host {gone.host} drained"
    return f"host {gone.host} lost ({gone.why})"


def decide_host_gone(plan: Plan, facts: JobFacts, gone: HostGone, room: Room) -> HostDecision:
    tasks = gone_tasks(plan, facts, gone.host)
    if not tasks or facts.finishing:
        return Nothing(gone.host)
    profile = plan.profile
    what = describe_gone(gone)
    limit = profile.host_loss_limit
    if room.losses >= limit:
        return GiveUp(f"{what}; the run already lost {room.losses} host(s) (max_host_losses = {limit})")
    policy = profile.on_host_lost
    if policy == "fail":
        return GiveUp(f"{what}; on_host_lost = \"fail\"")
    if policy == "replace" and room.spares:
        return Move(tasks, gone.host, room.spares[0], what)
    short = _below_min_count(plan, tasks, room.left)
    if short is None:
        return Shrink(tasks, gone.host, what, in_place=shrinks_in_place(plan, tasks))
    if policy == "replace":
        return GiveUp(f"{what}; no spare host for {', '.join(tasks)}, and {short}")
    return GiveUp(f"{what}; cannot shrink: {short}")


def shrinks_in_place(plan: Plan, tasks: tuple[str, ...]) -> bool:
    """Whether the job goes on without ``tasks`` with no restart at all: ParameterServerStrategy
    workers only (see the module's text)."""
    return plan.profile.strategy == "parameter_server" and all(t.split(":", 1)[0] == "worker" for t in tasks)


def live_size(plan: Plan, role: str, left: tuple[str, ...] = ()) -> int:
    """The tasks of ``role`` the job goes on with: the plan's, less those it went on without in place."""
    return role_size(plan, role) - sum(1 for t in left if t.split(":", 1)[0] == role)


def _below_min_count(plan: Plan, tasks: tuple[str, ...], gone_before: tuple[str, ...] = ()) -> str | None:
    """Why the job cannot go on without ``tasks`` (a role would fall below its min_count), or None."""
    by_role: dict[str, int] = {}
    for task in tasks:
        role = task.split(":", 1)[0]
        by_role[role] = by_role.get(role, 0) + 1
    for role, leaving in by_role.items():
        config = plan.profile.roles[role]
        left = live_size(plan, role, gone_before) - leaving
        if left < max(1, config.fewest):
            return f"{role} may not go below min_count = {config.fewest} (it would have {left})"
    return None


def recovery_set(plan: Plan, changed: tuple[str, ...], states: Mapping[str, str]) -> tuple[str, ...]:
    """The tasks of the new ``plan`` that start again after a move or a shrink (see the module's
    text): ``changed`` are the moved tasks (none for a shrink). A task that already succeeded
    stays ended."""
    strategy = plan.profile.strategy
    if strategy == "custom":
        chosen = [t.task_id for t in plan.tasks if t.task_id in changed]
    else:
        chosen = [t.task_id for t in plan.tasks if t.in_cluster or t.task_id in changed]
    return tuple(t for t in chosen if states.get(t) != ev.SUCCEEDED)
