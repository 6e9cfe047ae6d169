"""When and how a job changes size: a pure function of the plan, the room it has and a target.

A role's **target** is its planned ``count`` until ``distlaunch resize`` sets another one
(``min_count`` .. ``max_count``). A role below its target grows onto a host that may take a task:
a spare, or a lost host re-admitted as a spare; one of the role's own hosts still in the job only
when the operator asked (``resize``).
``decide_grow`` says which tasks start where, and whether others restart with them:

* parameter_server, a worker that the job went on without in place (``lost``) and whose own host
  is back: it starts alone at its old address and port, and nothing else restarts. TensorFlow
  2.21's ``ClusterCoordinator`` retries a lost worker's address until a server answers there
  (``WorkerPreemptionHandler``). Tried and refused: declaring more worker slots than run at the
  start (up to ``max_count``), so that a new worker would only have to answer: the chief's
  ``connect_to_cluster`` then waits, before its first step, until every declared worker answers;
  docs/running/host-loss.md says what was measured;
* parameter_server elsewhere (another address), and multi_worker_mirrored: a planned restart of
  the cluster with the bigger TF_CONFIG, from one checkpoint (as a move); ``restart_why`` says
  why in one line;
* custom: the new tasks start alone (the script owns its membership).

``grow`` says when: ``now``; ``at-checkpoint`` (a grow that restarts others waits for a checkpoint
written since the group last started, so no step is redone beyond it); ``never`` (only the
operator's ``resize`` and ``add-host`` grow). ``grow_every_seconds`` spaces grows the policy makes
on its own. A grow is never a failure and never a restart: no counter moves.

``decide_shrink`` picks the tasks a smaller target stops: the highest indices first.
It reads no clock, socket or file: the supervisor's growth part (regrow.py) carries it out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from launcher.model import Plan
from launcher.supervise.replan import live_size


@dataclass(frozen=True)
class GrowRoom:
    """What the job could grow onto, and how it stands."""

    #: hosts that may take a task, in order of preference (the role's own hosts first, then spares)
    hosts: tuple[str, ...]
    #: task -> its host: workers the job goes on without in place (they stay in the plan, ``lost``)
    left: Mapping[str, str]
    #: role -> the count it should have (planned, or the operator's resize)
    targets: Mapping[str, int]
    #: seconds since the last grow (None: none yet)
    since_last: float | None = None
    #: a checkpoint was written since the cluster last started (``at-checkpoint``)
    new_checkpoint: bool = False
    #: the operator asked (resize, add-host): the policy's timing does not apply
    asked: bool = False
    #: hosts that are spares (a task placed there takes the spare out of the spare list)
    spares: tuple[str, ...] = ()


@dataclass(frozen=True)
class Grow:
    """Start ``placements`` (task -> host); ``restart``: the cluster restarts with them (a planned
    restart, not counted), with ``restart_why`` saying why in one line."""

    role: str
    before: int
    after: int
    placements: tuple[tuple[str, str], ...]
    restart: bool
    restart_why: str = ""


@dataclass(frozen=True)
class Hold:
    """A grow is due but waits (``why``: one line), e.g. for a checkpoint."""

    role: str
    why: str


GrowDecision = Grow | Hold | None


def role_index(task: str) -> int:
    return int(task.split(":", 1)[1])


def missing_tasks(plan: Plan, role: str, left: Mapping[str, str], count: int) -> list[str]:
    """The ``count`` tasks a role grows by, lowest index first: those it goes on without in place,
    then indices no task of the plan has, up to ``max_count``."""
    config = plan.profile.roles[role]
    lost = sorted((t for t in left if t.split(":", 1)[0] == role), key=role_index)
    have = {t.index for t in plan.tasks if t.role == role}
    fresh = [f"{role}:{i}" for i in range(config.most) if i not in have]
    return (lost + fresh)[:count]


def decide_grow(plan: Plan, room: GrowRoom) -> GrowDecision:
    """The next grow of the first role below its target, or why it waits, or None (nothing to do)."""
    profile = plan.profile
    if profile.grow == "never" and not room.asked:
        return None
    left = tuple(room.left)
    for role, target in sorted(room.targets.items()):
        now = live_size(plan, role, left)
        if now >= target:
            continue
        if not room.asked and room.since_last is not None and room.since_last < profile.grow_every_seconds:
            wait = profile.grow_every_seconds - room.since_last
            return Hold(role, f"{role} {now} -> {target} waits {wait:.0f} s (grow_every_seconds)")
        placements = _place(plan, role, missing_tasks(plan, role, room.left, target - now), room)
        if not placements:
            continue
        restart, why = _needs_restart(plan, placements, room.left)
        if restart and profile.grow == "at-checkpoint" and not room.asked and not room.new_checkpoint:
            return Hold(role, f"{role} {now} -> {now + len(placements)} waits for a checkpoint "
                              "(grow = \"at-checkpoint\")")
        return Grow(role, now, now + len(placements), tuple(placements), restart, why)
    return None


def _place(plan: Plan, role: str, tasks: list[str], room: GrowRoom) -> list[tuple[str, str]]:
    """Each task on a host: a lost worker on its own host when that is back; else one task per
    spare; the role's own hosts in turn only when the operator asked (``resize``): on its own the
    policy never doubles tasks up on the hosts that are left (a PSS job that went on without a
    worker would restart for it, and a host would run two tasks its plan gave one)."""
    config = plan.profile.roles[role]
    free_spares = [h for h in room.hosts if h in room.spares]
    own = [h for h in room.hosts if h in config.hosts and h not in room.spares] if room.asked else []
    out: list[tuple[str, str]] = []
    for task in tasks:
        home = room.left.get(task)
        if home is not None and home in free_spares:
            free_spares.remove(home)
            out.append((task, home))
        elif free_spares:
            out.append((task, free_spares.pop(0)))
        elif own:
            preferred = config.hosts[role_index(task) % len(config.hosts)]
            out.append((task, preferred if preferred in own else own[0]))
    return out


def _needs_restart(plan: Plan, placements: list[tuple[str, str]], left: Mapping[str, str]) -> tuple[bool, str]:
    strategy = plan.profile.strategy
    if strategy == "custom":
        return False, ""
    if strategy == "parameter_server":
        away = [t for t, host in placements if left.get(t) != host]
        if not away:
            return False, ""
        return True, (f"{', '.join(away)} cannot join the running coordinator at a new address (TensorFlow's "
                      "ClusterCoordinator keeps the cluster it started with): the cluster restarts from the "
                      "chief's checkpoint")
    return True, "MultiWorkerMirroredStrategy reads TF_CONFIG once: the workers restart from one checkpoint"


def decide_shrink(plan: Plan, role: str, target: int, left: Mapping[str, str]) -> tuple[str, ...]:
    """The tasks a target below the role's live size stops: the highest indices first."""
    live = sorted((t.task_id for t in plan.tasks if t.role == role and t.task_id not in left),
                  key=role_index, reverse=True)
    return tuple(live[:max(0, len(live) - target)])


def check_target(plan: Plan, role: str, target: int) -> str | None:
    """Why ``target`` is not a size ``role`` may take (one line), or None."""
    roles = plan.profile.roles
    if role not in roles or roles[role].count <= 0:
        return f"this job has no {role} role; its roles: {', '.join(r for r, c in roles.items() if c.count > 0)}"
    config = roles[role]
    if not config.fewest <= target <= config.most:
        return (f"{role}={target} is outside {config.fewest}..{config.most} (min_count..max_count); "
                f"raise max_count in the profile to grow beyond {config.most}")
    return None


def targets_of(plan: Plan, resized: Mapping[str, int]) -> dict[str, int]:
    """Each role's target: the operator's resize, else its planned count."""
    return {role: resized.get(role, config.count) for role, config in plan.profile.roles.items() if config.count > 0}
