"""JobView folds events into what the dashboard shows, without Textual."""

from __future__ import annotations

from launcher import events as ev
from launcher.telemetry.jobview import LOG_LINES, JobView, task_sort_key
from tests.tui.tui_support import RUN, T0, recorded_job
from tui import format as fmt


def folded(events: list[ev.Event]) -> JobView:
    view = JobView()
    for event in events:
        view.apply(event)
    return view


def test_tasks_states_hosts_and_metrics_follow_the_events() -> None:
    view = folded(recorded_job(steps=10))
    assert sorted(view.tasks, key=task_sort_key) == ["chief:0", "ps:0", "ps:1", "worker:0", "worker:1"]
    chief = view.tasks["chief:0"]
    assert (chief.state, chief.host, chief.pid, chief.step) == (ev.RUNNING, "gpu1", 101, 100)
    assert chief.loss == 0.2
    now = T0 + 11  # the last metric's time
    assert chief.steps_per_s(now) == 10.0  # 10 steps per second of event time
    assert view.global_step == 100
    assert view.global_steps_per_s(now) == 10.0
    failed = view.tasks["worker:1"]
    assert failed.state == ev.FAILED and failed.exit_code == 1 and failed.pid is None
    assert failed.steps_per_s(now) is None
    assert view.hosts_up() == {"gpu1", "cpu1"}


def test_steps_per_second_uses_a_recent_window_and_survives_a_restart() -> None:
    view = JobView()
    for i in range(30):  # 5 steps/s for 30 s, then 20 steps/s
        view.apply(ev.metric_event(RUN, "worker:0", step=i * 5, ts=T0 + i))
    for i in range(1, 20):
        view.apply(ev.metric_event(RUN, "worker:0", step=145 + i * 20, ts=T0 + 29 + i))
    assert view.tasks["worker:0"].steps_per_s(T0 + 48) == 20.0
    view.apply(ev.metric_event(RUN, "worker:0", step=10, ts=T0 + 60))  # back from a checkpoint
    view.apply(ev.metric_event(RUN, "worker:0", step=40, ts=T0 + 62))
    assert view.tasks["worker:0"].steps_per_s(T0 + 62) == 15.0


def test_global_step_is_the_chiefs_else_the_highest_worker() -> None:
    view = JobView()
    view.apply(ev.metric_event(RUN, "worker:0", step=7, ts=T0))
    view.apply(ev.metric_event(RUN, "worker:1", step=9, ts=T0))
    assert view.global_step == 9
    view.apply(ev.metric_event(RUN, "chief:0", step=3, ts=T0))
    assert view.global_step == 3


def test_samples_with_and_without_gpu() -> None:
    view = folded(recorded_job(steps=3))
    gpu_task, cpu_task = view.tasks["worker:0"], view.tasks["ps:0"]
    assert gpu_task.has_gpu and gpu_task.gpu_util == 83.0 and gpu_task.gpu_mem_total == 16 * 2**30
    assert list(gpu_task.gpu_history) == [81.0, 82.0, 83.0]
    assert not cpu_task.has_gpu and cpu_task.gpu_util is None and cpu_task.rss_bytes == 300_000_000


def test_placement_sums_bytes_per_ps_and_flags_imbalance() -> None:
    view = folded(recorded_job(steps=1))
    assert view.placement.bytes_per_task() == {"ps:0": 12_005_120, "ps:1": 51_712}
    task, ratio = view.placement.imbalance() or ("", 0.0)
    assert task == "ps:0" and ratio > 1.5
    balanced = JobView()
    balanced.apply(ev.placement_event(RUN, "chief:0", [
        {"name": "a", "bytes": 100, "task": "ps:0"}, {"name": "b", "bytes": 120, "task": "ps:1"}]))
    assert balanced.placement.imbalance() is None


def test_notices_for_failure_restart_and_job_end_are_given_once() -> None:
    view = folded(recorded_job(steps=2))
    messages = [n.message for n in view.take_notices()]
    assert any("worker:1 failed, exit code 1" in m for m in messages)
    assert view.take_notices() == []
    view.apply(ev.state_event(RUN, "worker:1", ev.RESTARTING, host="cpu1", restarts=1, ts=T0 + 20))
    view.apply(ev.job_event(RUN, ev.JOB_FAILED, reason="backoff limit reached", ts=T0 + 30))
    view.apply(ev.job_event(RUN, ev.JOB_FAILED, reason="backoff limit reached", ts=T0 + 31))
    notices = view.take_notices()
    assert [n.severity for n in notices] == ["warning", "error"]
    assert "Job Failed: backoff limit reached" in notices[1].message
    assert view.ended and view.elapsed(now=T0 + 999) == 30.0
    assert view.total_restarts == 1


def test_hosts_go_down_when_unreachable_or_marked_by_the_job() -> None:
    view = folded(recorded_job(steps=1, fail_worker=False))
    view.apply(ev.state_event(RUN, "ps:1", ev.FAILED, host="cpu1", reason="host unreachable", ts=T0 + 5))
    assert view.hosts_up() == {"gpu1"}
    view.apply(ev.Event(ev.JOB, RUN, None, T0 + 6, {"state": ev.JOB_RUNNING, "reason": "",
                                                    "host_state": {"gpu1": "down"}}))
    assert view.hosts_up() == set()


def test_logs_are_bounded_and_readers_get_only_new_lines() -> None:
    view = JobView()
    for i in range(LOG_LINES + 10):
        view.apply(ev.log_event(RUN, "chief:0", "stdout", f"line {i}", ts=T0 + i))
    log = view.log("chief:0")
    assert len(log.lines) == LOG_LINES and log.total == LOG_LINES + 10
    view.apply(ev.log_event(RUN, "chief:0", "stderr", "boom", ts=T0 + 99999))
    new = log.since(LOG_LINES + 10)
    assert [(line.stream, line.line) for line in new] == [("stderr", "boom")]


def test_staleness_and_dirty_tracking() -> None:
    view = folded(recorded_job(steps=2))
    assert view.take_dirty() == set(view.tasks)
    assert view.take_dirty() == set()
    ps1 = view.tasks["ps:1"]
    assert not ps1.is_stale(now=ps1.last_event_ts + 5)  # type: ignore[operator]
    assert ps1.is_stale(now=ps1.last_event_ts + 11)  # type: ignore[operator]
    assert not view.tasks["worker:1"].is_stale(now=T0 + 1000)  # failed tasks are not "stale"


def test_formatting() -> None:
    assert fmt.human_bytes(512) == "512B"
    assert fmt.human_bytes(1536) == "1.5K"
    assert fmt.human_bytes(3 * 2**30) == "3.0G"
    assert fmt.human_bytes(None) == fmt.MISSING
    assert fmt.duration(65) == "1m05s" and fmt.duration(7300) == "2h01m"
    assert task_sort_key("worker:10") > task_sort_key("worker:9") > task_sort_key("ps:3")


def test_chart_points_are_thinned_keeping_the_latest() -> None:
    from tui.charts import thin

    points = [(i, float(i)) for i in range(1000)]
    thinned = thin(points, limit=100)
    assert len(thinned) <= 100 and thinned[-1] == (999, 999.0) and thinned == sorted(thinned)
    assert thin(points[:50], limit=100) == points[:50]


def test_conditions_are_raised_cleared_and_forgotten_on_restart() -> None:
    view = JobView()
    view.apply(ev.state_event(RUN, "worker:0", ev.RUNNING, host="h", pid=1, ts=T0))
    view.apply(ev.condition_event(RUN, "worker:0", ev.STALLED, True, "no step for 60 s", ts=T0 + 1))
    view.apply(ev.condition_event(RUN, "worker:0", ev.STRAGGLER, True, "0.4x median", ts=T0 + 2))
    assert view.tasks["worker:0"].conditions == {"stalled": "no step for 60 s", "straggler": "0.4x median"}
    view.apply(ev.condition_event(RUN, "worker:0", ev.STRAGGLER, False, ts=T0 + 3))
    assert view.tasks["worker:0"].conditions == {"stalled": "no step for 60 s"}
    view.apply(ev.state_event(RUN, "worker:0", ev.RESTARTING, host="h", restarts=1, ts=T0 + 4))
    assert view.tasks["worker:0"].conditions == {}


def test_action_events_round_trip_through_the_codec() -> None:
    event = ev.action_event(RUN, "restart", target="worker:1", origin="dashboard", ts=T0)
    back = ev.Event.from_json(event.to_json())
    assert back.kind == ev.ACTION and back.task is None
    assert back.data == {"action": "restart", "target": "worker:1", "origin": "dashboard"}


def test_root_cause_is_the_first_task_failure_and_shown_once_the_job_failed() -> None:
    view = JobView()
    view.apply(ev.state_event("r", "worker:0", ev.RUNNING, host="h", ts=1.0))
    view.apply(ev.state_event("r", "ps:0", ev.FAILED, host="h", exit_code=1, reason="exit code 1", ts=2.0))
    view.apply(ev.state_event("r", "worker:0", ev.FAILED, host="h", exit_code=1, reason="exit code 1", ts=3.0))
    assert view.root_cause == "ps:0 failed first (exit code 1)"
    assert view.failure_cause == ""  # the job has not failed (yet): a restart may still fix it
    view.apply(ev.job_event("r", ev.JOB_FAILED, "worker:0 failed", ts=4.0))
    assert view.failure_cause == "ps:0 failed first (exit code 1)"
    assert view.failed_tasks() == ["ps:0", "worker:0"]


def test_loss_history_stays_a_function_of_the_step_across_restarts() -> None:
    """A restart from an older checkpoint redoes steps: the curve is cut back, not drawn backwards."""
    view = JobView()
    for step, loss, ts in ((10, 1.0, 1.0), (20, 0.8, 2.0), (30, 0.6, 3.0), (20, 0.9, 4.0), (20, 0.85, 5.0),
                           (30, 0.7, 6.0)):
        view.apply(ev.metric_event("r", "worker:0", step=step, loss=loss, ts=ts))
    task = view.tasks["worker:0"]
    assert list(task.loss_history) == [(10, 1.0), (20, 0.85), (30, 0.7)]
    assert list(task.loss_times) == [1.0, 5.0, 6.0]


def test_rate_points_cover_the_whole_run_with_bounded_memory() -> None:
    from launcher.telemetry.jobview import RATE_POINTS

    view = JobView()
    for i in range(20_000):  # 100 steps/s for 200 s
        view.apply(ev.metric_event("r", "worker:0", step=i, ts=i / 100))
    points = view.tasks["worker:0"].rate_points
    assert len(points) <= RATE_POINTS
    assert points[0][0] < 5 and points[-1][0] > 195  # from the start to now
    assert all(abs(rate - 100) < 1 for _ts, rate in points)


def test_the_pid_shown_is_the_program_below_the_wrapper_once_a_sample_says_it() -> None:
    from launcher.telemetry.columns import BY_KEY, shown_pid

    view = JobView()
    view.apply(ev.state_event("r", "worker:0", ev.RUNNING, host="h", pid=100))
    task = view.tasks["worker:0"]
    assert shown_pid(task) == 100  # the wrapper's, until a sample names the program
    view.apply(ev.sample_event("r", "worker:0", cpu_percent=1.0, rss_bytes=1, main_pid=102))
    assert shown_pid(task) == 102
    assert BY_KEY["pid"].cell(task, 0.0, None)[0] == "102"
    view.apply(ev.state_event("r", "worker:0", ev.RUNNING, host="h", pid=200, restarts=1))  # restarted
    assert shown_pid(task) == 200
