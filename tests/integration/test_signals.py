"""Signals to `distlaunch up` and `attach` (clients of the job's supervisor, which they pass a stop
on to) and a supervisor killed outright, with real processes on this machine and over a real
sshd: what stops, what is recorded, and that no process carrying the run id is left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from launcher.commands.follow import result_line
from tests.integration.jobtools import (
    cli,
    kill_run_processes,
    pids_with_run_id,
    read_events,
    start_cli,
    supervisor_pid,
    wait_for,
    wait_for_event,
)
from tests.profiles import build_profile, ssh_table, sshd_host
from tests.sshd import PrivateSshd

pytestmark = pytest.mark.slow

SLEEP = '{python} -c "import time; time.sleep(600)"'


def sleeper_profile(tmp: Path, name: str, orphan_grace: int = 60, sshd: PrivateSshd | None = None, *,
                    command: str = SLEEP, python: str | Path = sys.executable, grace: float = 2) -> Path:
    """Two workers that sleep, on this machine (or on ``sshd``'s host ``box``)."""
    return build_profile(tmp / f"{name}.toml", name=name, orphan_grace=orphan_grace, command=command,
                         defaults={"python": str(python)}, workdir="/tmp", grace=grace,
                         ssh=ssh_table(sshd) if sshd else None, hosts=[sshd_host(sshd, "box")] if sshd else (),
                         roles={"worker": 2})


def start_running(tmp: Path, run_id: str, *extra: str, profile: Path | None = None
                  ) -> tuple[subprocess.Popen[bytes], Path]:
    """`up` in the background, returned once the job is Running (both tasks started)."""
    run_dir = tmp / "run"
    launcher = start_cli("up", str(profile or sleeper_profile(tmp, "sig")), *extra, "--run-dir", str(run_dir),
                         "--run-id", run_id, log=tmp / "up.log")
    wait_for_event(run_dir, lambda e: e["kind"] == "job" and e["state"] == "Running", 120, "the job to run")
    return launcher, run_dir


def job_end(run_dir: Path) -> dict[str, Any]:
    return [e for e in read_events(run_dir) if e["kind"] == "job"][-1]


def actions(run_dir: Path) -> list[tuple[str, str]]:
    return [(e["action"], e.get("origin", "")) for e in read_events(run_dir) if e["kind"] == "action"]


def assert_no_noise(log: Path) -> None:
    """Nothing alarming in a client's output, nor in the supervisor's own log beside its run."""
    logs = [log, *log.parent.glob("run*/supervisor.log")]
    for path in logs:
        told = path.read_text()
        for bad in ("Traceback", "cannot schedule", "internal error", "distlaunch: interrupted\n"):
            assert bad not in told, f"{path}: {told[-3000:]}"


def clients(run_dir: Path) -> int:
    return int(json.loads((run_dir / "state.json").read_text()).get("clients") or 0)


@pytest.mark.parametrize(("signum", "code", "reason"), [
    (signal.SIGTERM, 143, "stopped by SIGTERM"),
    (signal.SIGINT, 130, "stopped by SIGINT (Ctrl-C)"),
])
def test_a_stop_signal_tears_the_job_down_and_names_itself(tmp_path: Path, signum: int, code: int,
                                                           reason: str) -> None:
    run_id = f"sig-{signal.Signals(signum).name.lower()}"
    launcher, run_dir = start_running(tmp_path, run_id, "--no-tui")
    try:
        launcher.send_signal(signum)
        assert launcher.wait(timeout=60) == code
        end = job_end(run_dir)
        assert (end["state"], end["reason"]) == ("Stopped", reason)  # on purpose: no failure
        assert actions(run_dir) == [("teardown", signal.Signals(signum).name)]
        final = {e["task"]: e["state"] for e in read_events(run_dir) if e["kind"] == "state"}
        assert final == {"worker:0": "stopped", "worker:1": "stopped"}
        assert pids_with_run_id(run_id) == []
        assert f"distlaunch: {reason}: tearing the job down" in (tmp_path / "up.log").read_text()
        assert_no_noise(tmp_path / "up.log")
        status = cli("status", str(run_dir), timeout=60)
        assert f"job Stopped: {reason}" in status.stdout, status.stdout
    finally:
        if launcher.poll() is None:
            launcher.kill()
        kill_run_processes(run_id)


@pytest.mark.parametrize("mode", ["--no-tui", "--json"])
def test_sigterm_twice_within_50ms_is_one_stop(tmp_path: Path, mode: str) -> None:
    """`timeout` and systemd signal the process and its group: two SIGTERMs in a few ms."""
    run_id = f"sig-twice{mode.replace('-', '_')}"
    launcher, run_dir = start_running(tmp_path, run_id, mode)
    try:
        launcher.send_signal(signal.SIGTERM)
        time.sleep(0.02)  # the second signal must come while the first one's teardown runs
        os.killpg(launcher.pid, signal.SIGTERM)
        os.kill(supervisor_pid(run_dir), signal.SIGTERM)  # systemd's control group: the supervisor too
        assert launcher.wait(timeout=60) == 143
        end = job_end(run_dir)
        assert (end["state"], end["reason"]) == ("Stopped", "stopped by SIGTERM")
        assert actions(run_dir) == [("teardown", "SIGTERM")]
        final = {e["task"]: e for e in read_events(run_dir) if e["kind"] == "state"}
        assert {t: e["state"] for t, e in final.items()} == {"worker:0": "stopped", "worker:1": "stopped"}
        assert not any("launcher lost" in str(e.get("reason")) for e in final.values())
        assert pids_with_run_id(run_id) == []
        assert_no_noise(tmp_path / "up.log")
    finally:
        if launcher.poll() is None:
            launcher.kill()
        kill_run_processes(run_id)


def test_sighup_ends_the_client_only_and_attach_follows_the_supervised_job(tmp_path: Path) -> None:
    run_id = "sig-hup"
    launcher, run_dir = start_running(tmp_path, run_id, "--no-tui")
    attacher: subprocess.Popen[bytes] | None = None
    try:
        task_pids = {e["task"]: e["pid"] for e in read_events(run_dir)
                     if e["kind"] == "state" and e["state"] == "running"}
        supervisor = supervisor_pid(run_dir)
        launcher.send_signal(signal.SIGHUP)
        assert launcher.wait(timeout=60) == 0
        assert actions(run_dir) == []  # nothing was asked of the job
        assert all(os.path.exists(f"/proc/{pid}") for pid in task_pids.values())  # the job goes on
        assert os.path.exists(f"/proc/{supervisor}")  # ... supervised
        wait_for(lambda: clients(run_dir) == 0, 30, "the supervisor to see its client go")
        state = json.loads((run_dir / "state.json").read_text())
        assert state["outcome"] is None and "detached" not in state
        status = cli("status", str(run_dir), timeout=60)
        assert "supervised: no client" in status.stdout.splitlines()[0], status.stdout
        assert_no_noise(tmp_path / "up.log")

        attacher = start_cli("attach", str(run_dir), "--no-tui", log=tmp_path / "attach.log")
        wait_for(lambda: clients(run_dir) == 1, 60, "attach to follow the supervisor")
        assert supervisor_pid(run_dir) == supervisor  # followed, not taken over
        status = cli("status", str(run_dir), timeout=60)
        assert "a client follows" in status.stdout.splitlines()[0], status.stdout
        assert all(os.path.exists(f"/proc/{pid}") for pid in task_pids.values())  # the same tasks
        down = cli("down", str(run_dir), timeout=120)
        assert down.returncode == 0, down.stdout + down.stderr
        # it followed the job to its end: Stopped on purpose, neither a success (0) nor a failure (1)
        assert attacher.wait(timeout=60) == 143
        assert "job Stopped" in (tmp_path / "attach.log").read_text()
        status_json = json.loads(cli("status", str(run_dir), "--json", timeout=60).stdout)
        assert status_json["job"]["state"] == "Stopped", status_json["job"]
        (listed,) = [r for r in json.loads(cli("runs", "--json", timeout=60).stdout) if r["run"] == run_id]
        assert listed["job_state"] == "Stopped", listed
        line = result_line(run_dir)  # what the dashboard prints on leaving
        assert line is not None and f"run {run_id}: job Stopped: stopped by `distlaunch down`" in line, line
        assert "root cause" not in line
        wait_for(lambda: not pids_with_run_id(run_id), 30, "no process of the run to be left")
    finally:
        for proc in (launcher, attacher):
            if proc is not None and proc.poll() is None:
                proc.kill()
        kill_run_processes(run_id)


# -- the supervisor killed outright: the follow channel must not outlive it --------------------------


def follow_pids(run_id: str) -> list[int]:
    """The per-host follow channels of a run (the bootstrap's `preflight --then-follow` process);
    the host agent forked from it shows the same command line, but its own name."""
    found = []
    for pid in pids_with_run_id(run_id):
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"--then-follow" in cmdline and comm != "distlaunch-host":
            found.append(pid)
    return found


def kill_launcher_and_watch(tmp: Path, run_id: str, profile: Path) -> None:
    orphan_grace, task_grace = 3, 2
    launcher, run_dir = start_running(tmp, run_id, "--no-tui", profile=profile)
    try:
        followers = follow_pids(run_id)
        assert len(followers) == 1, pids_with_run_id(run_id)
        os.kill(supervisor_pid(run_dir), signal.SIGKILL)
        killed = time.monotonic()
        assert launcher.wait(timeout=10) == 137  # its client says the supervisor went away
        assert "was killed (SIGKILL)" in (tmp / "up.log").read_text()
        wait_for(lambda: not any(os.path.exists(f"/proc/{p}") for p in followers), 30, "the follow channel to end")
        assert time.monotonic() - killed < 5.0, "the follow channel outlived its launcher by 5 s or more"
        # the tasks wait out the orphan grace and their stop grace; then nothing of the run is left
        wait_for(lambda: not pids_with_run_id(run_id), 60, "no process of the run to be left")
        gone_after = time.monotonic() - killed
        assert gone_after < orphan_grace + task_grace + 5.0, f"processes of the run lingered {gone_after:.1f} s"
    finally:
        if launcher.poll() is None:
            launcher.kill()
        kill_run_processes(run_id)


def test_attach_leaves_on_sighup_and_stops_the_job_on_sigterm(tmp_path: Path) -> None:
    """`attach` follows signals as `up` does: SIGHUP ends that client only (exit 0, the job stays
    supervised), and SIGTERM to a later attach asks the supervisor to tear the job down with the
    signal named (exit 143), nothing left."""
    run_id = "sig-attach"
    launcher, run_dir = start_running(tmp_path, run_id, "--detach")
    attachers: list[subprocess.Popen[bytes]] = []

    def attach(n: int) -> subprocess.Popen[bytes]:
        proc = start_cli("attach", str(run_dir), "--no-tui", log=tmp_path / f"attach{n}.log")
        attachers.append(proc)
        wait_for(lambda: clients(run_dir) == 1, 60, "attach to follow the supervisor")
        return proc

    try:
        assert launcher.wait(timeout=60) == 0
        supervisor = supervisor_pid(run_dir)
        task_pids = {e["task"]: e["pid"] for e in read_events(run_dir)
                     if e["kind"] == "state" and e["state"] == "running"}
        first = attach(1)
        first.send_signal(signal.SIGHUP)
        assert first.wait(timeout=60) == 0
        assert actions(run_dir) == []
        assert all(os.path.exists(f"/proc/{pid}") for pid in (*task_pids.values(), supervisor))  # the job goes on
        wait_for(lambda: clients(run_dir) == 0, 30, "the supervisor to see its client go")

        second = attach(2)
        second.send_signal(signal.SIGTERM)
        assert second.wait(timeout=60) == 143
        end = job_end(run_dir)
        assert (end["state"], end["reason"]) == ("Stopped", "stopped by SIGTERM")
        assert actions(run_dir)[-1] == ("teardown", "SIGTERM")
        assert pids_with_run_id(run_id) == []
        for n in (1, 2):
            assert_no_noise(tmp_path / f"attach{n}.log")
    finally:
        for proc in (launcher, *attachers):
            if proc.poll() is None:
                proc.kill()
        kill_run_processes(run_id)


def test_a_killed_supervisors_follow_channel_and_agent_end_promptly(tmp_path: Path) -> None:
    kill_launcher_and_watch(tmp_path, "sig-kill9-local", sleeper_profile(tmp_path, "k9", orphan_grace=3))


@pytest.mark.sshd
def test_a_killed_supervisors_follow_channel_over_ssh_ends_promptly(tmp_path: Path, sshd: PrivateSshd) -> None:
    kill_launcher_and_watch(tmp_path, "sig-kill9-ssh", sleeper_profile(tmp_path, "k9s", orphan_grace=3, sshd=sshd))


def test_ctrl_c_again_after_2s_abandons_the_wait_without_noise_and_the_stop_still_ends(tmp_path: Path) -> None:
    """Tasks that ignore SIGTERM keep the teardown in its grace; a second Ctrl-C then leaves at
    once, and the supervisor still finishes the stop (SIGKILL after the grace)."""
    run_id = "sig-abandon"
    profile = sleeper_profile(
        tmp_path, "stubborn", grace=6,
        command='exec {python} -c "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); '
                'print(chr(114) + chr(101) + chr(97) + chr(100) + chr(121), flush=True); time.sleep(600)"')
    launcher, run_dir = start_running(tmp_path, run_id, "--no-tui", profile=profile)
    try:
        # a SIGTERM before the handler is in place would end the tasks at once: wait for each to say so
        wait_for(lambda: len({e["task"] for e in read_events(run_dir)
                              if e["kind"] == "log" and e.get("line") == "ready"}) == 2, 60,
                 "the tasks to ignore SIGTERM")
        launcher.send_signal(signal.SIGINT)
        wait_for(lambda: [a for a in actions(run_dir) if a[0] == "teardown"], 30, "the teardown to start")
        time.sleep(2.5)  # past the 2 s in which a second Ctrl-C is the same stop
        assert launcher.poll() is None, "the teardown ended before the second Ctrl-C"
        launcher.send_signal(signal.SIGINT)
        assert launcher.wait(timeout=10) == 130
        assert "stopped waiting: the supervisor finishes the teardown" in (tmp_path / "up.log").read_text()
        for bad in ("Traceback", "cannot schedule", "internal error"):
            assert bad not in (tmp_path / "up.log").read_text()
        wait_for(lambda: not pids_with_run_id(run_id), 30, "the supervisor to finish the stop")
        assert job_end(run_dir)["reason"] == "stopped by SIGINT (Ctrl-C)"
    finally:
        if launcher.poll() is None:
            launcher.kill()
        kill_run_processes(run_id)


def test_sigterm_during_the_preflight_starts_nothing_and_says_so(tmp_path: Path) -> None:
    run_id = "sig-preflight"
    slow_python = tmp_path / "slowpython"  # the hosts' python answers after 3 s: the preflight is under way
    slow_python.write_text(f"#!/bin/sh\nsleep 3\nexec {sys.executable} \"$@\"\n")
    slow_python.chmod(0o755)
    profile = sleeper_profile(tmp_path, "slow", python=slow_python)
    run_dir = tmp_path / "run"
    launcher = start_cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id,
                         log=tmp_path / "up.log")
    try:
        wait_for(lambda: "checking python" in (tmp_path / "up.log").read_text(), 60, "the preflight to start")
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=60) == 143
        end = job_end(run_dir)
        assert (end["state"], end["reason"]) == ("Stopped", "stopped by SIGTERM before any task started")
        assert not (run_dir / "hosts" / "local" / "agent.pid").exists()  # no host agent was ever started
        wait_for(lambda: not pids_with_run_id(run_id), 10, "no process of the run to be left")
        assert "nothing runs on any host" in (tmp_path / "up.log").read_text()
        assert_no_noise(tmp_path / "up.log")
    finally:
        if launcher.poll() is None:
            launcher.kill()
        kill_run_processes(run_id)
