"""`runs` reads each run from state.json and the ends of events.jsonl, and skips what it cannot read."""

from __future__ import annotations

from pathlib import Path

from launcher import events as ev
from launcher.rundir import RunDir
from launcher.runlookup import human_duration, list_runs


def _run(root: Path, run_id: str, *, start: float, end: float | None, state: str) -> RunDir:
    rd = RunDir.create(run_id, root / run_id)
    rd.write_state({"run_id": run_id, "name": "demo", "job_state": ev.JOB_RUNNING, "launcher_pid": None,
                    "hosts": {"b": {}, "a": {}},
                    "tasks": {"worker:0": {"restarts": 2}, "worker:1": {"restarts": 1}}})
    rd.append(ev.job_event(run_id, ev.JOB_CREATED, ts=start))
    for i in range(2000):  # more than the tail that is read
        rd.append(ev.log_event(run_id, "worker:0", "stdout", f"line {i} " + "x" * 60, ts=start + 1))
    if end is not None:
        rd.append(ev.job_event(run_id, state, "worker:0 failed", ts=end))
    return rd


def test_runs_come_newest_first_with_times_from_the_first_and_last_events(tmp_path: Path) -> None:
    _run(tmp_path, "old", start=1000.0, end=1090.0, state=ev.JOB_FAILED).close()
    _run(tmp_path, "new", start=2000.0, end=None, state="").close()
    runs = list_runs(tmp_path, now=2030.0)
    assert [r.run for r in runs] == ["new", "old"]
    old, new = runs[1], runs[0]
    assert (old.job_state, old.job_reason, old.started, old.duration_s) == \
        (ev.JOB_FAILED, "worker:0 failed", 1000.0, 90.0)
    assert (old.hosts, old.tasks, old.restarts, old.live) == (["a", "b"], 2, 3, None)
    assert (new.job_state, new.duration_s, new.live) == (ev.JOB_RUNNING, 30.0, "lost")  # no supervisor answers


def test_a_torn_last_line_and_unreadable_run_dirs_are_tolerated(tmp_path: Path) -> None:
    rd = _run(tmp_path, "torn", start=1000.0, end=1010.0, state=ev.JOB_SUCCEEDED)
    rd.close()
    with (rd.path / "events.jsonl").open("a") as fh:
        fh.write('{"v": 1, "ts": 1020.0, "kind": "jo')  # a launcher killed mid-write
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "state.json").write_text("{not json")
    (tmp_path / "empty").mkdir()
    runs = {r.run: r for r in list_runs(tmp_path, now=5000.0)}
    assert sorted(runs) == ["garbage", "torn"]  # a dir without state.json is no run
    assert (runs["torn"].job_state, runs["torn"].duration_s, runs["torn"].skipped_lines) == (ev.JOB_SUCCEEDED, 10.0, 1)
    assert runs["garbage"].job_state == "unreadable" and runs["garbage"].job_reason.startswith("state.json: ")


def test_no_state_root_means_no_runs(tmp_path: Path) -> None:
    assert list_runs(tmp_path / "missing") == []


def test_human_duration() -> None:
    assert [human_duration(s) for s in (None, 5, 65, 3600 + 120)] == ["-", "5s", "1m05s", "1h02m"]


def test_a_run_kept_elsewhere_is_listed_once_and_found_by_its_id(tmp_path: Path) -> None:
    from launcher.paths import runs_root
    from launcher.runlookup import find_run

    _run(runs_root(), "here", start=1000.0, end=1001.0, state=ev.JOB_SUCCEEDED).close()
    elsewhere = RunDir.create("there", tmp_path / "my-runs" / "there")
    elsewhere.write_state({"run_id": "there", "name": "demo", "tasks": {}})
    elsewhere.append(ev.job_event("there", ev.JOB_CREATED, ts=2000.0))
    elsewhere.close()
    runs = list_runs(now=2001.0)
    assert [(r.run, r.dir) for r in runs] == [("there", str(elsewhere.path)), ("here", str(runs_root() / "here"))]
    assert find_run("there") == elsewhere.path


def test_the_last_job_event_in_the_tail_beats_an_older_state_json(tmp_path: Path) -> None:
    rd = RunDir.create("r", tmp_path / "r")
    rd.write_state({"run_id": "r", "name": "demo", "job_state": ev.JOB_CREATED, "tasks": {}})
    rd.append(ev.job_event("r", ev.JOB_CREATED, ts=1.0))
    rd.append(ev.job_event("r", ev.JOB_RESTARTING, "worker:0 failed", ts=2.0))
    for i in range(100):
        rd.append(ev.log_event("r", "worker:0", "stdout", f"line {i}", ts=3.0))
    rd.close()
    [run] = list_runs(tmp_path, now=10.0)
    assert (run.job_state, run.job_reason, run.duration_s) == (ev.JOB_RESTARTING, "worker:0 failed", 9.0)
