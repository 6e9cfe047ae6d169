"""`distlaunch stacks` and the stall capture with real hung processes (issue 28, sections 1 and 3).

Plain Python tasks hung in a function of their own (`wait_for_peer`); py-spy from distlaunch's
own dependencies, or autolog's faulthandler when py-spy is hidden (DISTLAUNCH_PYSPY=/nonexistent).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from launcher.agent.procs import pid_alive
from tests.integration.jobtools import cli, kill_run_processes, read_events, start_cli, wait_for, wait_for_event
from tests.profiles import Host, Roles, build_profile, local_host, ssh_table, sshd_host
from tests.sshd import PrivateSshd

HANG = """\
import time
from launcher import report
report.configure(min_interval=0)


def wait_for_peer():
    while True:
        time.sleep(1)


for step in range(1, 6):
    report.report(step=step, loss=1.0 / step)
    time.sleep(0.05)
print("hanging now", flush=True)
wait_for_peer()
"""
#: the line the hung tasks wait on
HANG_LINE = HANG.splitlines().index("        time.sleep(1)") + 1
FRAME = f"wait_for_peer (hang.py:{HANG_LINE})"
NO_PYSPY = {"DISTLAUNCH_PYSPY": "/nonexistent"}


def profile(tmp: Path, *, workers: int, stall_seconds: float = 0, roles: Roles | None = None,
            ssh: dict[str, Any] | None = None, hosts: Sequence[Host] = (local_host(),)) -> Path:
    (tmp / "hang.py").write_text(HANG)
    return build_profile(tmp / "job.toml", name="stacks", strategy="custom", command="{python} hang.py",
                         defaults={"python": sys.executable, "stall_seconds": stall_seconds}, workdir=tmp, grace=2,
                         ssh=ssh, hosts=hosts, roles={"worker": workers, **(roles or {})}, role_hosts=False)


def stacks(run: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    done = cli("stacks", run, *args, timeout=90, env=env)
    return done.returncode, done.stdout, done.stderr


def captures(run: str, env: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    code, out, err = stacks(run, "--json", env=env)
    assert code in (0, 1), err
    return {c["task"]: c for c in json.loads(out)}


def end(run_dir: Path, run_id: str, launcher: subprocess.Popen[bytes] | None = None) -> None:
    """`down`, then the launcher's own end; nothing of the run may be left."""
    cli("down", str(run_dir), timeout=120)
    if launcher is not None:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGINT)
        launcher.wait(60)
    kill_run_processes(run_id)


def wait_until_hung(run_dir: Path, tasks: int) -> None:
    """Every task printed "hanging now" (a live launcher records it; for a detached run, read
    the local host's event files)."""

    def hung() -> int:
        recorded = sum(e["kind"] == "log" and e.get("line") == "hanging now" for e in read_events(run_dir))
        on_host = sum("hanging now" in p.read_text(errors="replace")
                      for p in run_dir.glob("hosts/*/tasks/*/events.jsonl"))
        return max(recorded, on_host)

    wait_for(lambda: hung() >= tasks, 60, f"{tasks} tasks to hang")


def test_a_stall_captures_stacks_once_and_names_the_frame_then_stacks_shows_it(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-stacks-live"
    log = tmp_path / "up.log"
    launcher = start_cli("up", str(profile(tmp_path, workers=3, stall_seconds=2)), "--no-tui",
                         "--run-dir", str(run_dir), "--run-id", run_id, log=log)
    try:
        taken = wait_for_event(run_dir, lambda e: e["kind"] == "stacks", 60, "the stall's stacks event")
        assert taken["frame"] == FRAME and taken["suspect"] in ("worker:0", "worker:1", "worker:2")
        assert taken["task"] == taken["suspect"]  # all hang alike: the suspect is the task that stalled
        saved = run_dir / taken["path"]
        assert saved.is_file() and saved.with_suffix(".txt").is_file()
        assert stat.S_IMODE(saved.stat().st_mode) == 0o600 and stat.S_IMODE(saved.parent.stat().st_mode) == 0o700
        assert {c["task"] for c in json.loads(saved.read_text())} == {"worker:0", "worker:1", "worker:2"}
        assert f'line {HANG_LINE}, in wait_for_peer' in saved.with_suffix(".txt").read_text()
        # every stalled task's condition then says where it hangs: events, --no-tui, status
        named = wait_for(lambda: [e for e in read_events(run_dir) if e["kind"] == "condition"
                                  and e["active"] and f"in {FRAME}" in e["reason"]], 30, "the conditions' frame")
        assert "step 5 has not advanced" in named[0]["reason"] and taken["path"] in named[0]["reason"]
        wait_for(lambda: "stalled: step 5 has not advanced" in log.read_text()
                 and f"in {FRAME}" in log.read_text(), 30, "the --no-tui line with the frame")
        status = cli("status", str(run_dir), timeout=60)
        assert "worker:0 stalled: step 5 has not advanced" in status.stdout and f"in {FRAME}" in status.stdout

        code, out, err = stacks(str(run_dir))
        assert code == 0, err
        assert "worker:0-2 (3): the same stack" in out
        assert f'File "{tmp_path / "hang.py"}", line {HANG_LINE}, in wait_for_peer' in out
        assert "via py-spy" in out and "(sleeping" in out
        kept = out.strip().splitlines()[-1]
        assert kept.startswith(f"(kept in {run_dir}/stacks/") and Path(kept[len("(kept in "):-1]).is_file()
        code, out, err = stacks(str(run_dir), "worker:0", "--native")
        assert code == 0 and "via py-spy --native" in out and "    [native] " in out, err
        assert "worker:1" not in out

        # a task frozen with SIGSTOP: reported stopped, named the suspect, read by py-spy anyway
        pid = captures(str(run_dir))["worker:1"]["pid"]
        os.kill(pid, signal.SIGSTOP)
        try:
            code, out, err = stacks(str(run_dir))
            assert code == 0, err
            assert out.startswith("suspect: worker:1: it is stopped"), out
            assert f"worker:1 on local pid {pid} (stopped, wchan" in out
            assert captures(str(run_dir))["worker:1"]["state"] == "stopped"
        finally:
            os.kill(pid, signal.SIGCONT)
        # one capture per stall episode; each request's capture is kept too, as a stacks event of no task
        taken_events = [e for e in read_events(run_dir) if e["kind"] == "stacks"]
        assert [e["task"] for e in taken_events].count(None) >= 4 and len(taken_events) - 1 == sum(
            e["task"] is None for e in taken_events), taken_events
        assert any(e["suspect"] == "worker:1" and e["reason"].startswith("it is stopped") for e in taken_events)
        # user mistakes: one line, exit 2
        code, out, err = stacks(str(run_dir), "worker:9")
        assert code == 2 and "no task 'worker:9'" in err and len(err.strip().splitlines()) == 1
        code, out, err = stacks("no-such-run")
        assert code == 2 and "no run 'no-such-run'" in err
    finally:
        end(run_dir, run_id, launcher)


def test_without_py_spy_faulthandler_answers_and_without_autolog_one_line_says_what_would(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-stacks-fh"
    job = profile(tmp_path, workers=1, roles={"ps": {"count": 1, "autolog": False}})
    try:
        up = cli("up", str(job), "--detach", "--run-dir", str(run_dir), "--run-id", run_id, env=NO_PYSPY)
        assert up.returncode == 0, up.stderr
        wait_until_hung(run_dir, 2)
        # its supervisor killed (the tasks run on for the orphan grace), no supervisor answers: the CLI
        # runs the agent's `stacks` verb on the host
        supervisor = json.loads((run_dir / "state.json").read_text())["supervisor_pid"]
        os.kill(supervisor, signal.SIGKILL)
        wait_for(lambda: not pid_alive(supervisor), 10, "the supervisor to die")
        code, out, err = stacks(str(run_dir), env=NO_PYSPY)
        assert code == 1, out
        assert "worker:0 on local pid" in out and "via faulthandler" in out
        assert f'line {HANG_LINE}, in wait_for_peer' in out
        assert "autolog is off, so faulthandler is not set up; install py-spy on local" in out
        assert "or keep autolog on" in out
        assert err.strip() == ("distlaunch: no stacks from ps:0: autolog is off, so faulthandler is not set up; "
                               "install py-spy on local (pip install py-spy beside the task's Python) "
                               "or keep autolog on")
        code, out, err = stacks(str(run_dir), "worker:0", env=NO_PYSPY)
        assert code == 0 and "ps:0" not in out, err
        assert f"(kept in {run_dir}/stacks/" in out  # no supervisor: the CLI keeps it in the run dir itself
        # a stopped process cannot run the handler: its state is the answer
        pid = captures(str(run_dir), env=NO_PYSPY)["worker:0"]["pid"]
        os.kill(pid, signal.SIGSTOP)
        try:
            code, out, err = stacks(str(run_dir), "worker:0", env=NO_PYSPY)
            assert code == 0, err
            assert f"worker:0 on local pid {pid} (stopped, wchan" in out
            assert "a stopped process cannot run faulthandler's handler; install py-spy on local" in out
        finally:
            os.kill(pid, signal.SIGCONT)
    finally:
        end(run_dir, run_id)


@pytest.mark.sshd
def test_over_ssh_the_request_rides_the_follow_channel(tmp_path: Path, sshd: PrivateSshd) -> None:
    run_dir, run_id = tmp_path / "run", "it-stacks-ssh"
    log = tmp_path / "up.log"
    job = profile(tmp_path, workers=2, ssh=ssh_table(sshd), hosts=[sshd_host(sshd, "box")])
    launcher = start_cli("up", str(job), "--no-tui", "--run-dir", str(run_dir),
                         "--run-id", run_id, log=log)

    def execs() -> int:
        return sshd.log_path.read_text(errors="replace").count("Starting session: command")

    try:
        wait_until_hung(run_dir, 2)
        before = execs()
        assert before > 0, sshd.log_tail()
        code, out, err = stacks(str(run_dir))
        assert code == 0, err
        assert "worker:0-1 (2): the same stack" in out and "worker:0 on box pid" in out
        assert f'line {HANG_LINE}, in wait_for_peer' in out
        assert execs() == before, "distlaunch stacks opened a new SSH exec"
    finally:
        end(run_dir, run_id, launcher)
