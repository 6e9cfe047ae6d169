"""Where tasks run after a host is lost or drained: the plan changed as a value, without side effects.

A task moved to another host keeps its id (``worker:1`` stays ``worker:1`` in every view, log and
event) and is placed there as ``build_plan`` would have placed it (that host's address, python,
workdir and GPUs); its port is picked on its new host at the move (``port`` None here). A role that
shrinks drops tasks; TF_CONFIG then numbers the members that remain 0..n-1 in their order
(``plan.tf_config``), which is all TensorFlow needs of a cluster.

The placement a run has reached is recorded in its state.json (each task's host, address and port);
``recorded_placement`` gives a supervisor that adopts the run (``attach``) the plan it had.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from launcher.model import Plan, TaskSpec
from launcher.plan import place_task, tf_address


def tasks_on(plan: Plan, host: str) -> list[str]:
    """The ids of the tasks ``host`` runs, in start order."""
    return [t.task_id for t in plan.tasks if t.host == host]


def move_tasks(plan: Plan, task_ids: Iterable[str], to_host: str,
               addresses: Mapping[str, str] | None = None) -> Plan:
    """``plan`` with ``task_ids`` placed on ``to_host`` (a host of the profile, a spare), each as
    the plan builder places a task there; their ports are left to be picked (None)."""
    profile = plan.profile
    host = profile.hosts[to_host]
    address = tf_address(host, plan.addresses if addresses is None else addresses)
    moving = set(task_ids)
    on_host = sum(1 for t in plan.tasks if t.host == to_host and t.task_id not in moving)
    gpus_used = sum(len(t.gpus) for t in plan.tasks if t.host == to_host and t.task_id not in moving)
    tasks: list[TaskSpec] = []
    for spec in plan.tasks:
        if spec.task_id not in moving:
            tasks.append(spec)
            continue
        role = profile.roles[spec.role]
        gpus = host.gpus[gpus_used:gpus_used + role.gpus_per_task]
        gpus_used += role.gpus_per_task
        moved = place_task(profile, role, spec.index, host, address, on_host, gpus)
        on_host += 1
        tasks.append(dataclasses.replace(moved, port=None))
    return dataclasses.replace(plan, tasks=tuple(tasks))


#: what a rehearsed task's id carries after its own: the spare it is rehearsed on
REHEARSAL_MARK = "@"


def rehearsal(plan: Plan) -> Plan:
    """``plan`` plus, on each spare, one task of each role placed as a move would place it there
    (ids ``worker:0@gpu9``): the preflight checks a spare's python, TensorFlow, workdir, script,
    ports and reach with these, so that a replacement does not fail at the worst moment. The
    supervisor never sees them (``is_rehearsal``)."""
    extra: list[TaskSpec] = []
    for spare in plan.profile.spares:
        firsts = {t.role: t for t in reversed(plan.tasks)}
        moved = move_tasks(plan, [t.task_id for t in firsts.values()], spare)
        for spec in moved.tasks:
            if spec.host == spare and spec.task_id in {t.task_id for t in firsts.values()}:
                extra.append(dataclasses.replace(spec, task_id=f"{spec.task_id}{REHEARSAL_MARK}{spare}"))
    return dataclasses.replace(plan, tasks=plan.tasks + tuple(extra))


def is_rehearsal(task_id: str) -> bool:
    return REHEARSAL_MARK in task_id


def drop_tasks(plan: Plan, task_ids: Iterable[str]) -> Plan:
    """``plan`` without ``task_ids``: their role goes on with fewer tasks."""
    dropped = set(task_ids)
    return dataclasses.replace(plan, tasks=tuple(t for t in plan.tasks if t.task_id not in dropped))


def role_size(plan: Plan, role: str) -> int:
    return sum(1 for t in plan.tasks if t.role == role)


def recorded_placement(plan: Plan, recorded: Mapping[str, str],
                       addresses: Mapping[str, str] | None = None) -> Plan:
    """The plan a run had reached, from the profile's ``plan`` and each task's host in state.json
    (task -> host, "" for not recorded): tasks it dropped are left out, tasks it moved are on their
    new host, tasks a grow added past the profile's count are placed on their recorded host. A task
    whose recorded host (or role) is not in the profile raises KeyError."""
    kept = drop_tasks(plan, [t.task_id for t in plan.tasks if t.task_id not in recorded])
    for spec in list(kept.tasks):
        host = recorded[spec.task_id] or spec.host
        if host != spec.host:
            kept = move_tasks(kept, [spec.task_id], host, addresses)
    have = {t.task_id for t in kept.tasks}
    grown = [t for t in recorded if t not in have and recorded[t]]
    if grown:  # tasks a grow added beyond the profile's count (up to max_count): placed as it placed them
        profile, order = plan.profile, {t.role: i for i, t in reversed(list(enumerate(plan.tasks)))}
        specs = list(kept.tasks)
        for task_id in grown:
            role, _, index = task_id.partition(":")
            if role not in profile.roles or not index.isdigit():
                raise KeyError(task_id)
            config = profile.hosts[recorded[task_id]]
            specs.append(place_task(profile, profile.roles[role], int(index), config,
                                    tf_address(config, addresses or plan.addresses),
                                    sum(1 for t in specs if t.host == config.name), ()))
        specs.sort(key=lambda t: (order.get(t.role, len(order)), t.index))
        kept = dataclasses.replace(kept, tasks=tuple(specs))
    return kept


def moved_from(before: Plan, after: Plan) -> dict[str, str]:
    """Task -> the host it left, for the tasks ``after`` places elsewhere than ``before``."""
    old = {t.task_id: t.host for t in before.tasks}
    return {t.task_id: old[t.task_id] for t in after.tasks if t.task_id in old and old[t.task_id] != t.host}
