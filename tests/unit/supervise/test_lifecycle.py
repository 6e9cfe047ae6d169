"""The task and job lifecycles: their phases spell the events' states, their moves are one table
each, and the values beside a task's phase change only as the lifecycle says."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher import events as ev
from launcher.supervise.lifecycle import (
    ENDS,
    JOB_MOVES,
    TASK_MOVES,
    JobPhase,
    Lifecycle,
    RestartStage,
    TaskPhase,
    TaskRuntime,
)
from tests.unit.supervise.test_sequence import RUN, _supervisor


def test_the_phases_are_the_states_the_events_carry() -> None:
    assert {p.value for p in TaskPhase} == set(ev.FINAL_TASK_STATES) | {ev.PENDING, ev.STARTING, ev.RUNNING}
    assert {p.value for p in JobPhase} == set(ev.JOB_STATES)
    assert set(TASK_MOVES) == set(TaskPhase) and set(JOB_MOVES) == set(JobPhase)
    assert all(TaskPhase.STARTING in TASK_MOVES[end] for end in ENDS)  # a restart starts an ended task again


def test_an_ended_job_moves_no_more(tmp_path: Path) -> None:
    life = Lifecycle(dict)
    life.job_to(JobPhase.RESTARTING)  # a task failed while the launch still started others
    life.job_to(JobPhase.RUNNING)
    life.job_to(ev.JOB_FAILED, "worker:0 failed")
    with pytest.raises(ValueError, match="from Failed to Restarting"):
        life.job_to(JobPhase.RESTARTING)
    assert (life.job, life.job_reason) == (JobPhase.FAILED, "worker:0 failed")


def test_a_stopped_job_is_an_end_of_its_own_and_moves_no_more(tmp_path: Path) -> None:
    life = Lifecycle(dict)
    life.job_to(JobPhase.RUNNING)
    life.job_to(ev.JOB_STOPPED, "stopped by `distlaunch down`")
    assert (life.job, life.job_reason) == (JobPhase.STOPPED, "stopped by `distlaunch down`")
    for phase in (JobPhase.RUNNING, JobPhase.FAILED, JobPhase.SUCCEEDED):
        with pytest.raises(ValueError, match="from Stopped"):
            life.job_to(phase)


def test_a_restart_runs_its_course_and_a_scheduled_one_outlives_a_running_report(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path, [])
    life, rt = sup.life, sup.tasks["worker:0"]
    life.schedule([rt])
    life.reported(rt, ev.state_event(RUN, "worker:0", ev.RUNNING, host="local", restarts=0, pid=7))
    assert (rt.phase, rt.pid) == (TaskPhase.RUNNING, 7)  # the incarnation before the restart: it still stands
    life.restart_over(rt)
    assert rt.restart is RestartStage.SCHEDULED and rt.restarting
    life.ask_stop(rt, "restart")
    life.carried_out(rt, counted=True)
    assert (rt.restart, rt.restarts, rt.incarnation, rt.stop_asked) == (RestartStage.UNDER_WAY, 1, 1, "restart")
    life.launching(rt)
    assert life.awaiting_launch()
    assert not life.launch_reported(rt, ev.STARTING, 1)  # starting is not the report the end waits for
    assert life.launch_reported(rt, ev.RUNNING, 1) and not life.awaiting_launch()
    life.restart_over(rt)
    assert rt.restart is None and not rt.restarting


def test_an_end_reported_carries_its_exit_code_and_a_count_cancelled_spends_nothing(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path, [])
    life, rt = sup.life, sup.tasks["worker:0"]
    life.reported(rt, ev.state_event(RUN, "worker:0", ev.STARTING, host="local", restarts=0, ts=100.0))
    life.reported(rt, ev.state_event(RUN, "worker:0", ev.FAILED, host="local", restarts=0, exit_code=3))
    assert (rt.phase, rt.started_at, rt.exit_code, rt.final) == (TaskPhase.FAILED, 100.0, 3, True)
    life.restart_counted()
    life.restart_uncounted()
    life.restart_uncounted()
    assert life.job_restarts == 0


def test_a_lost_task_was_not_asked_to_stop_and_an_unreported_one_is_stopped(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path, [])
    life, rt = sup.life, sup.tasks["worker:0"]
    life.ask_stop(rt, "move")
    life.lost(rt)
    assert (rt.phase, rt.stop_asked, rt.final) == (TaskPhase.LOST, None, True)
    with pytest.raises(ValueError, match="worker:0 cannot go from lost to stopped"):
        life.stopped_unreported(rt)  # lost is an end of its own: the teardown has no word on it
    other = TaskRuntime(rt.spec, 1235)
    life.reported(other, ev.state_event(RUN, "worker:0", ev.RUNNING, host="local", restarts=0))
    life.stopped_unreported(other)  # the teardown's word on a task whose end never came
    assert other.phase is TaskPhase.STOPPED


def test_a_state_no_phase_spells_changes_no_phase(tmp_path: Path) -> None:
    sup = _supervisor(tmp_path, [])
    life, rt = sup.life, sup.tasks["worker:0"]
    life.reported(rt, ev.state_event(RUN, "worker:0", ev.FAILED, host="local", restarts=0, exit_code=1))
    life.reported(rt, ev.state_event(RUN, "worker:0", ev.RESTARTING, host="local", restarts=0, pid=9))
    assert (rt.phase, rt.exit_code, rt.pid) == (TaskPhase.FAILED, 1, 9)
