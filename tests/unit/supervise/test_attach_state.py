"""Attach takes each task's state from its events, not only from a state.json written at its last end."""

from __future__ import annotations

import time
from pathlib import Path

from launcher import events as ev
from launcher.supervise.attachstate import fold_task_states
from launcher.supervise.lifecycle import TaskPhase
from tests.unit.supervise.test_sequence import RUN, _supervisor


def _state(state: str, restarts: int, **fields: object) -> ev.Event:
    return ev.state_event(RUN, "worker:0", state, host="local", restarts=restarts, ts=time.time(), **fields)


def test_a_task_that_ran_again_after_its_last_recorded_end_is_running(tmp_path: Path) -> None:
    """state.json said failed (written when the old incarnation ended); the restarted task's
    starting/running came after it. A late `failed` of the old incarnation changes nothing."""
    sup = _supervisor(tmp_path, [])
    rt = sup.tasks["worker:0"]
    rt.phase, rt.restarts, rt.incarnation = TaskPhase.FAILED, 2, 2  # as state.json had them
    history = [
        _state(ev.RUNNING, 1, pid=100),
        _state(ev.RESTARTING, 1),
        _state(ev.STARTING, 2),
        _state(ev.FAILED, 1, exit_code=1),  # the old incarnation's end, told late
        _state(ev.RUNNING, 2, pid=200),
    ]
    fold_task_states(sup.life, sup.tasks, history)
    assert (rt.phase, rt.restarts, rt.pid) == (ev.RUNNING, 2, 200)


def test_a_launcher_restarting_mark_keeps_the_tasks_state(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path, [])
    rt = sup.tasks["worker:0"]
    fold_task_states(sup.life, sup.tasks, [_state(ev.RUNNING, 0, pid=100), _state(ev.FAILED, 0, exit_code=3),
                                           _state(ev.RESTARTING, 0)])
    assert (rt.phase, rt.restarts, rt.pid) == (ev.FAILED, 0, 100)
