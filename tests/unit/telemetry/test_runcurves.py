"""A run's loss and steps/s against the step, read back from its events.jsonl for the compare view:
the reporting task chosen, restarts folded, long files kept to a bounded number of points, and a
live file followed from where the last read stopped."""

from __future__ import annotations

from pathlib import Path

from launcher import events as ev
from launcher.telemetry.runcurves import MAX_POINTS, RunCurves, SpreadPoints

RUN = "r-curves"
T0 = 1_700_000_000.0


def _write(path: Path, events: list[ev.Event], mode: str = "w") -> None:
    path.mkdir(mode=0o700, exist_ok=True)
    with open(path / "events.jsonl", mode) as fh:
        fh.writelines(e.to_json() + "\n" for e in events)
    (path / "events.jsonl").chmod(0o600)


def _steps(task: str, steps: range, *, loss: bool = True, t0: float = T0, per_step_s: float = 0.5) -> list[ev.Event]:
    return [ev.metric_event(RUN, task, step=s, loss=(10.0 / s if loss else None), ts=t0 + s * per_step_s)
            for s in steps]


def test_loss_and_steps_per_s_are_the_chiefs_against_its_step(tmp_path: Path) -> None:
    events: list[ev.Event] = [ev.job_event(RUN, ev.JOB_RUNNING, ts=T0)]
    for s in range(1, 41):
        events += [ev.metric_event(RUN, "worker:0", step=s, loss=99.0, ts=T0 + s * 0.5),
                   ev.metric_event(RUN, "chief:0", step=s, loss=10.0 / s, ts=T0 + s * 0.5),
                   ev.log_event(RUN, "chief:0", "stdout", f"step {s}", ts=T0 + s * 0.5)]
    _write(tmp_path, events)
    curves = RunCurves(tmp_path)
    curves.read_all()
    assert curves.task is not None and curves.task.task_id == "chief:0"
    assert curves.loss_points[0] == (1, 10.0) and curves.loss_points[-1] == (40, 0.25)
    assert all(loss != 99.0 for _step, loss in curves.loss_points)
    # two steps a second, as StepRate tells it once it has two reports
    assert curves.rate_points[-1][0] == 40 and abs(curves.rate_points[-1][1] - 2.0) < 1e-6
    assert curves.step_range == (1, 40)


def test_without_a_chief_the_first_worker_reports(tmp_path: Path) -> None:
    _write(tmp_path, _steps("worker:1", range(1, 5)) + _steps("worker:0", range(1, 5)) + _steps("ps:0", range(1, 5)))
    curves = RunCurves(tmp_path)
    curves.read_all()
    assert curves.task is not None and curves.task.task_id == "worker:0"


def test_a_run_without_loss_has_steps_per_s_and_no_loss(tmp_path: Path) -> None:
    _write(tmp_path, _steps("chief:0", range(1, 20), loss=False))
    curves = RunCurves(tmp_path)
    curves.read_all()
    assert curves.loss_points == []
    assert len(curves.rate_points) > 10


def test_a_restart_from_an_older_checkpoint_keeps_the_curve_a_function_of_the_step(tmp_path: Path) -> None:
    _write(tmp_path, _steps("chief:0", range(1, 31)) + _steps("chief:0", range(20, 41), t0=T0 + 100))
    curves = RunCurves(tmp_path)
    curves.read_all()
    steps = [step for step, _loss in curves.loss_points]
    assert steps == sorted(set(steps)) and steps[-1] == 40
    rate_steps = [step for step, _rate in curves.rate_points]
    assert rate_steps == sorted(set(rate_steps))


def test_a_long_file_keeps_a_bounded_number_of_points_over_the_whole_run(tmp_path: Path) -> None:
    steps = 50 * MAX_POINTS
    _write(tmp_path, _steps("chief:0", range(1, steps + 1), per_step_s=0.01))
    curves = RunCurves(tmp_path)
    while curves.read_more(limit=256 * 1024):  # small reads: each keeps to its limit
        assert curves.offset <= (tmp_path / "events.jsonl").stat().st_size
    assert curves.at_end
    for points in (curves.loss_points, curves.rate_points):
        assert MAX_POINTS // 2 <= len(points) <= MAX_POINTS + 1
        assert points[0][0] <= steps // 100 and points[-1][0] == steps  # spread from start to the end


def test_a_live_file_is_followed_and_a_torn_line_waits_for_its_end(tmp_path: Path) -> None:
    _write(tmp_path, _steps("chief:0", range(1, 11)))
    curves = RunCurves(tmp_path)
    curves.read_all()
    assert curves.step_range == (1, 10)
    line = ev.metric_event(RUN, "chief:0", step=11, loss=0.5, ts=T0 + 11).to_json().encode() + b"\n"
    with open(tmp_path / "events.jsonl", "ab") as fh:
        fh.write(line[:20])
    curves.read_all()
    assert curves.step_range == (1, 10) and curves.skipped == 0
    with open(tmp_path / "events.jsonl", "ab") as fh:
        fh.write(line[20:])
    _write(tmp_path, _steps("chief:0", range(12, 15)), mode="a")
    curves.read_all()
    assert curves.step_range == (1, 14) and (11, 0.5) in curves.loss_points


def test_a_run_dir_without_events_has_no_curves(tmp_path: Path) -> None:
    curves = RunCurves(tmp_path)
    curves.read_all()
    assert curves.at_end and curves.task is None and curves.step_range is None


def test_spread_points_halve_and_keep_the_latest() -> None:
    spread = SpreadPoints(limit=10)
    for i in range(1000):
        spread.add(i, -i)
    points = spread.points
    assert len(points) <= 11 and points[0] == (0, 0) and points[-1] == (999, -999)
    xs = [x for x, _y in points]
    assert xs == sorted(xs)
