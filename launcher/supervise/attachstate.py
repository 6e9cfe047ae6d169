"""Attach: what a run's recorded history says of its tasks, for the supervisor that takes it over."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from launcher import events as ev
from launcher.events import Event
from launcher.supervise.lifecycle import Lifecycle, TaskRuntime
from launcher.telemetry.watchdog import Watchdog


def fold_task_states(life: Lifecycle, tasks: Mapping[str, TaskRuntime], history: Iterable[Event]) -> None:
    """Each task's state, pid and restarts as its events last told them. state.json is written on
    a task's end, not on every start, so after a restart it can still say ``failed`` for a task
    that runs again: a chief taken for failed was never watched for a stall, and the job waited
    for it for good. The supervisor's own ``restarting`` marks are left out, as the supervisor
    that published them kept the task's state meanwhile."""
    for event in history:
        if not isinstance(event, ev.StateEvent) or not event.task:
            continue
        rt = tasks.get(event.task)
        state = event.state
        if rt is None or state == ev.RESTARTING:
            continue
        restarts = event.restarts
        if restarts is not None and restarts < rt.restarts:
            continue  # an earlier incarnation's late word
        count = rt.restarts if restarts is None else restarts
        life.restore(rt, state, count, max(rt.incarnation, count) if restarts is not None else rt.incarnation,
                     event.pid)


def arm_watchdog(tasks: Mapping[str, TaskRuntime], watchdog: Watchdog, history: Iterable[Event]) -> None:
    """Each running task's last step of its current incarnation counts as reached now, so a task
    that stalled while no supervisor watched is flagged ``stall_seconds`` after the attach (it
    sends no new step that would start its record otherwise)."""
    last_step: dict[str, int] = {}
    for event in history:
        if event.task is None:
            continue
        if isinstance(event, ev.StateEvent) and event.state == ev.STARTING:
            last_step.pop(event.task, None)  # a new incarnation starts counting again
        elif isinstance(event, ev.MetricEvent) and event.step is not None:
            last_step[event.task] = event.step
    now = time.monotonic()
    for task_id, step in last_step.items():
        rt = tasks.get(task_id)
        if rt is not None and rt.phase == ev.RUNNING:
            watchdog.on_step(task_id, step, now)
