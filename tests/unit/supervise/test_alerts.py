"""Alerts from a job's events (launcher/supervise/alerts.py), and the notifier's limits on them:
each starts once and clears once, flapping and floods are held back, and nothing is told twice."""

from __future__ import annotations

from pathlib import Path

from launcher import events as ev
from launcher.model import NotifyConfig
from launcher.supervise.alerts import Alert, AlertWatch, Thresholds
from launcher.supervise.notify import BURST, Notifier

RUN = "r1"
ALL = ("stall", "straggler", "nan", "host_unreachable", "host_lost", "moved", "drained", "throughput_drop",
       "gpu_idle", "gpu_error", "disk_low", "checkpoint_old")


def feed(watch: AlertWatch, events: list[ev.Event]) -> list[tuple[str, str, bool]]:
    return [(a.name, a.subject, a.active) for e in events for a in watch.feed(e)]


def running(task: str, ts: float, host: str = "a", **fields: object) -> ev.StateEvent:
    return ev.state_event(RUN, task, ev.RUNNING, host=host, ts=ts, **fields)  # type: ignore[arg-type]


def steps(task: str, start: float, end: float, rate: float, first: int = 0, every: float = 1.0) -> list[ev.Event]:
    out: list[ev.Event] = []
    t, step = start, float(first)
    while t <= end:
        out.append(ev.metric_event(RUN, task, step=int(step), ts=t))
        t += every
        step += rate * every
    return out


def test_watchdog_conditions_start_and_clear_once_each_and_unchosen_ones_are_silent() -> None:
    watch = AlertWatch(("stall",))
    got = feed(watch, [
        ev.condition_event(RUN, "worker:1", ev.STALLED, True, "no step for 60 s", ts=10),
        ev.condition_event(RUN, "worker:1", ev.STALLED, True, "no step for 90 s", ts=40),
        ev.condition_event(RUN, "worker:1", ev.STRAGGLER, True, "3x slower", ts=41),
        ev.condition_event(RUN, "worker:1", ev.STALLED, False, "steps again", ts=50),
    ])
    assert got == [("stall", "worker:1", True), ("stall", "worker:1", False)]


def test_a_gpu_error_is_told_once_with_its_words_and_clears_when_the_task_restarts() -> None:
    watch = AlertWatch(NotifyConfig().on)  # told with no `on` key
    fault = "GPU 0 on b: Xid 79 (fell off the bus)"
    alerts = [a for e in [running("worker:1", 1, host="b"),
                          ev.condition_event(RUN, "worker:1", ev.GPU_ERROR, True, fault, ts=2),
                          ev.condition_event(RUN, "worker:1", ev.GPU_ERROR, True, fault, ts=3),
                          ev.state_event(RUN, "worker:1", ev.RESTARTING, ts=4)] for a in watch.feed(e)]
    assert [(a.name, a.subject, a.active) for a in alerts] == [("gpu_error", "worker:1", True),
                                                               ("gpu_error", "worker:1", False)]
    assert alerts[0].figure == fault and alerts[0].host == "b"


def test_hosts_unreachable_lost_and_back_and_a_move_is_one_shot() -> None:
    watch = AlertWatch(ALL)
    got = feed(watch, [
        ev.host_event(RUN, "b", ev.HOST_UNREACHABLE, ts=1),
        ev.host_event(RUN, "b", ev.HOST_LOST, "silent 120 s", ts=2),
        running("worker:1", 3, host="c", moved_from="b"),
        ev.host_event(RUN, "b", ev.HOST_UP, ts=4),
        ev.host_event(RUN, "d", ev.HOST_DRAINED, "preemption notice", ts=5),
    ])
    assert got == [("host_unreachable", "b", True), ("host_unreachable", "b", False), ("host_lost", "b", True),
                   ("moved", "worker:1", True), ("host_lost", "b", False), ("drained", "d", True)]


def test_a_throughput_drop_against_the_runs_own_rate_starts_and_clears() -> None:
    watch = AlertWatch(("throughput_drop",), Thresholds(throughput_drop_percent=40, throughput_window_seconds=10))
    fast = steps("worker:0", 0, 60, rate=10)
    assert feed(watch, fast) == []  # 6 windows at 10 steps/s: the reference
    slow = steps("worker:0", 61, 90, rate=4, first=600)
    got = feed(watch, slow)
    assert got == [("throughput_drop", "job", True)]
    alert = [a for e in steps("worker:0", 91, 92, rate=4, first=720) for a in watch.feed(e)]
    assert alert == []  # told once while it lasts
    back = steps("worker:0", 93, 120, rate=10, first=730)
    assert feed(watch, back) == [("throughput_drop", "job", False)]


def test_a_task_behind_the_others_or_a_restart_from_a_checkpoint_is_no_drop() -> None:
    watch = AlertWatch(("throughput_drop",), Thresholds(throughput_window_seconds=10))
    events = steps("worker:0", 0, 60, rate=10) + steps("worker:1", 0, 60, rate=9)
    events.sort(key=lambda e: e.ts)
    assert feed(watch, events) == []
    # everyone restarts from step 300 and goes on at the same speed: history starts again, no alert
    again = steps("worker:0", 61, 120, rate=10, first=300)
    assert feed(watch, again) == []


def test_gpu_idle_for_minutes_while_running_and_busy_again() -> None:
    watch = AlertWatch(("gpu_idle",), Thresholds(gpu_idle_minutes=2))

    def sample(ts: float, util: float) -> ev.Event:
        return ev.sample_event(RUN, "worker:0", cpu_percent=1.0, rss_bytes=1, ts=ts,
                               gpus=[{"index": 0, "util_percent": util}, {"index": 1, "util_percent": util / 2}])

    got = feed(watch, [running("worker:0", 0)] + [sample(t, 1.0) for t in range(0, 125, 5)])
    assert got == [("gpu_idle", "worker:0", True)]
    assert feed(watch, [sample(130, 80.0), sample(135, 2.0)]) == [("gpu_idle", "worker:0", False)]


def test_disk_low_on_a_host_and_clear_only_well_above_it() -> None:
    watch = AlertWatch(("disk_low",), Thresholds(disk_low_bytes=100))

    def sample(ts: float, free: int) -> ev.Event:
        return ev.sample_event(RUN, "ps:0", cpu_percent=1.0, rss_bytes=1, ts=ts,
                               host={"outputs_free_bytes": free, "run_dir_free_bytes": 10_000})

    got = feed(watch, [running("ps:0", 0, host="b"), sample(1, 90), sample(2, 110), sample(3, 130)])
    assert got == [("disk_low", "b", True), ("disk_low", "b", False)]


def test_checkpoint_old_counts_from_the_start_then_from_each_checkpoint() -> None:
    watch = AlertWatch(("checkpoint_old",), Thresholds(checkpoint_old_minutes=1))

    def sample(ts: float) -> ev.Event:
        return ev.sample_event(RUN, "chief:0", cpu_percent=1.0, rss_bytes=1, ts=ts)

    got = feed(watch, [running("chief:0", 0), sample(30), sample(61), sample(70)])
    assert got == [("checkpoint_old", "chief:0", True)]
    got = feed(watch, [ev.checkpoint_event(RUN, "chief:0", "/c", step=100, ts=75), sample(100), sample(136)])
    assert got == [("checkpoint_old", "chief:0", False), ("checkpoint_old", "chief:0", True)]


def _notifier(tmp_path: Path, **config: object) -> Notifier:
    cfg = NotifyConfig(command="true", on=ALL, **config)  # type: ignore[arg-type]
    notifier = Notifier(cfg, run_id=RUN, run_dir=tmp_path, profile_name="p", cwd=tmp_path, on_warning=print)
    notifier.fire_async = lambda what, **d: notifier.fired.append({"what": what, **d})  # type: ignore[method-assign]
    return notifier


def test_an_alert_that_flaps_is_told_once_until_repeat_minutes_passed(tmp_path: Path) -> None:
    notifier = _notifier(tmp_path, repeat_minutes=5)
    for ts, active in ((0, True), (10, False), (20, True), (30, False), (400, True)):
        notifier._alert(Alert("stall", "worker:0", active, "x", ts))
    assert [(f["alert"], f["active"]) for f in notifier.fired] == [("stall", "1"), ("stall", "0"), ("stall", "1")]
    assert "held back" in (tmp_path / "notify.log").read_text()


def test_a_flood_is_held_back_and_counted_in_the_next_one_told(tmp_path: Path) -> None:
    notifier = _notifier(tmp_path)
    for i in range(BURST + 3):
        notifier._alert(Alert("stall", f"worker:{i}", True, "x", float(i)))
    assert len(notifier.fired) == BURST
    notifier._alert(Alert("nan", "worker:0", True, "x", 10_000.0))
    assert "3 more alert(s) held back" in notifier.fired[-1]["message"]
