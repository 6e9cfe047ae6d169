"""Sequence numbers: the launcher records each agent event once, and tells and counts a gap."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from launcher import events as ev
from launcher.commands.status import summarize
from launcher.plan import build_plan
from launcher.profile.reader import load_profile
from launcher.remote.session import HostSession
from launcher.rundir import RunDir
from launcher.runlookup import read_events
from launcher.runstate import RunState
from launcher.supervise.supervisor import Supervisor
from launcher.telemetry.jobview import JobView
from launcher.transport import make_host

RUN = "r-seq"


def _supervisor(tmp_path: Path, told: list[str]) -> Supervisor:
    profile = tmp_path / "p.toml"
    profile.write_text(f"""
name = "seq"
strategy = "custom"
[defaults]
command = "true"
workdir = "{tmp_path}"
[hosts.local]
address = "localhost"
transport = "local"
[roles.worker]
hosts = ["local"]
""")
    plan = build_plan(load_profile(profile))
    rundir = RunDir.create(RUN, tmp_path / "run")
    config = plan.profile.hosts["local"]
    session = HostSession(config, make_host(config), RUN, str(tmp_path / "host"), sys.executable)
    # only the supervisor's event intake is used: nothing is launched
    return Supervisor(plan, rundir, {"local": session}, {"worker:0": 1234}, on_notice=told.append)


def _line(seq: int, text: str) -> str:
    event = ev.log_event(RUN, "worker:0", "stdout", text, ts=time.time())
    event.data["seq"] = seq
    return event.to_json()


def test_the_supervisor_drops_resent_events_and_tells_a_gap_once(tmp_path: Path) -> None:
    told: list[str] = []
    sup = _supervisor(tmp_path, told)
    # a resend (1, 0), a gap (3, 4), a late straggler (4); delivered in two batches as a stream does
    seqs = (0, 1, 1, 0, 2, 5, 6, 4)
    batch = [(_line(seq, f"line {seq}"), time.time()) for seq in seqs]
    sup.links.on_lines("local", batch[:3])
    sup.links.on_lines("local", batch[3:])
    sup.rundir.close()
    recorded = [e.get("seq") for e in read_events(sup.rundir.path)]
    assert recorded == [0, 1, 2, 5, 6]
    assert (sup.rundir.path / "logs" / "worker-0.log").read_text().splitlines() == \
        [f"line {seq}" for seq in recorded]
    assert told == ["worker:0: 2 event(s) lost between its agent and the launcher (seq 3..4)"]
    assert sup.lost_events == {"worker:0": 2}
    sup.write_state()
    assert json.loads((sup.rundir.path / "state.json").read_text())["lost_events"] == {"worker:0": 2}


def test_a_state_change_inside_a_batch_is_acted_on_in_its_place(tmp_path: Path) -> None:
    """Logs and metrics are written in runs, but a task's running state and the job state it
    causes land between the lines that came before and after it, and feeds see the same order."""
    sup = _supervisor(tmp_path, [])
    feed = sup.subscribe()
    running = ev.state_event(RUN, "worker:0", ev.RUNNING, host="local", pid=1234, ts=time.time())
    running.data["seq"] = 1
    batch = [(_line(0, "before"), time.time()), (running.to_json(), time.time()), (_line(2, "after"), time.time())]
    sup.links.on_lines("local", batch)
    sup.rundir.close()
    feed.close()

    def shape(e: ev.Event) -> tuple[str, object, object]:
        return e.kind, e.get("state"), e.get("line")

    recorded = [shape(e) for e in read_events(sup.rundir.path)]
    assert recorded == [("log", None, "before"), ("state", "running", None), ("job", "Running", None),
                        ("log", None, "after")]
    assert [shape(e) for e in feed.events()] == recorded
    assert sup.job_state == ev.JOB_RUNNING


def test_the_job_view_warns_of_a_gap_and_status_reports_it(tmp_path: Path) -> None:
    rd = RunDir.create(RUN, tmp_path / "run")
    for seq in (0, 1, 4, 5):
        rd.append(ev.Event.from_json(_line(seq, "x")))
    rd.write_state({"run_id": RUN, "tasks": {}})
    rd.close()
    view = JobView()
    for event in read_events(rd.path):
        view.apply(event)
    assert view.lost_events == {"worker:0": 2}
    notices = [n for n in view.take_notices() if "lost" in n.message]
    assert [(n.message, n.severity) for n in notices] == [("worker:0: 2 event(s) lost on the way (seq 2-3)", "warning")]
    assert summarize(rd.path)["lost_events"] == {"worker:0": 2}


def test_runs_recorded_before_sequence_numbers_still_replay() -> None:
    old = '{"v": 1, "ts": 1.0, "run": "r", "task": "worker:0", "kind": "log", "stream": "stdout", "line": "hi"}'
    event = ev.Event.from_json(old)
    view = JobView()
    view.apply(event)
    assert view.lost_events == {} and view.log("worker:0").lines[-1].line == "hi"
    assert json.loads(ev.log_event("r", "worker:0", "stdout", "x").to_json())["v"] == ev.SCHEMA_VERSION == 2


def test_after_attach_a_moved_tasks_events_from_its_new_host_are_not_taken_for_resends(tmp_path: Path) -> None:
    """The old host numbered worker:0's events up to 40; on its new host they start at 0 again,
    and the history (its first running event there carries moved_from) says so."""
    told: list[str] = []
    sup = _supervisor(tmp_path, told)
    old = [ev.Event.from_json(_line(seq, f"old {seq}")) for seq in range(41)]
    starting = ev.state_event(RUN, "worker:0", ev.STARTING, host="local")
    starting.data["seq"] = 0
    running = ev.state_event(RUN, "worker:0", ev.RUNNING, host="local", pid=7, moved_from="gone")
    running.data["seq"] = 1
    sup.links.resume_from({}, [*old, starting, running], {})
    sup.links.on_lines("local", [(_line(2, "new 2"), time.time()), (_line(3, "new 3"), time.time())])
    sup.rundir.close()
    lines = [e.get("line") for e in read_events(sup.rundir.path) if e.kind == ev.LOG]
    assert lines == ["new 2", "new 3"]
    assert told == []


def test_an_operators_resize_outlives_the_supervisor(tmp_path: Path) -> None:
    """`distlaunch resize RUN worker=3`, then the supervisor is replaced (attach): the target is in
    state.json and the new supervisor grows to it, not back to the profile's count."""
    told: list[str] = []
    sup = _supervisor(tmp_path, told)
    sup.growth.resized["worker"] = 3
    written = sup.run_state().to_json()
    assert written["resize_targets"] == {"worker": 3}
    (tmp_path / "again").mkdir()
    again = _supervisor(tmp_path / "again", told)
    again._resume_tasks(RunState.from_json({**written, "resize_targets": {"worker": 3, "gone_role": 2}}), [])
    assert again.growth.resized == {"worker": 3} and again.growth.targets()["worker"] == 3
    sup.rundir.close()
    again.rundir.close()
