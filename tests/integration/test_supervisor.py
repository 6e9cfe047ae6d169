"""Supervision that no terminal owns: the job's supervisor is a process of its own, and every rule
(the job's end stopping ps and workers, restarts, stall captures, [notify]) holds while no client
follows it. Real processes: `up --detach`, `up` in tmux with the session killed, several `attach`
clients, the supervisor killed outright."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from launcher.agent.procs import pid_alive
from tests.integration.jobtools import (
    REPO,
    cli,
    kill_run_processes,
    local_ps_profile,
    pids_with_run_id,
    read_events,
    start_cli,
    supervisor_pids,
    wait_for,
    wait_for_event,
    write_profile,
)
from tests.profiles import build_profile

pytestmark = pytest.mark.slow


def _state(run_dir: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((run_dir / "state.json").read_text())
    except (OSError, ValueError):
        return {}
    return data


def _running_pid(run_dir: Path, task: str, restarts: int = 0) -> int:
    event = wait_for_event(run_dir, lambda e: e["kind"] == "state" and e["task"] == task
                           and e["state"] == "running" and e.get("restarts", 0) == restarts, 120,
                           f"{task} running (restarts={restarts})")
    return int(event["pid"])


def _job_end(run_dir: Path, timeout: float) -> dict[str, Any]:
    return wait_for_event(run_dir, lambda e: e["kind"] == "job" and e["state"] in ("Succeeded", "Failed", "Stopped"),
                          timeout, "the job's end")


def test_a_detached_ps_job_ends_and_leaves_nothing_when_its_chief_is_done(tmp_path: Path) -> None:
    """TensorFlow issue 4713: the parameter server outlived its job once the launcher detached."""
    run_dir, run_id = tmp_path / "run", f"sup-ps-{secrets.token_hex(2)}"
    profile = local_ps_profile(tmp_path, steps=1_000_000, name="sup-ps")
    profile.write_text(profile.read_text().replace("--steps 1000000", "--steps 1000000 --train-seconds 15"))
    try:
        up = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id, timeout=240)
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"distlaunch attach {run_id}" in up.stdout
        supervisor = _state(run_dir)["supervisor_pid"]
        assert pid_alive(supervisor) and Path(f"/proc/{supervisor}/comm").read_text().strip() == "distlaunch-sup"
        chief = wait_for_event(run_dir, lambda e: e["kind"] == "state" and e["task"] == "chief:0"
                               and e["state"] in ("succeeded", "failed"), 180, "the chief's end")
        assert chief["state"] == "succeeded", chief
        ended_at = float(chief.get("exited_at") or chief["ts"])
        wait_for(lambda: not pids_with_run_id(run_id), 15 + ended_at - time.time(),
                 "no process of the run within 15 s of the chief's exit")
        status = cli("status", str(run_dir), "--json", timeout=60)
        summary = json.loads(status.stdout)
        assert summary["job"]["state"] == "Succeeded" and summary["supervision"] is None
        assert summary["supervisor_pid"] == supervisor and not summary["supervisor_alive"]
        last = {e["task"]: e["state"] for e in read_events(run_dir) if e["kind"] == "state"}
        assert last == {"ps:0": "stopped", "worker:0": "stopped", "chief:0": "succeeded"}
    finally:
        kill_run_processes(run_id)


TICKER = """
import os, sys, time
from launcher import report
report.configure(min_interval=0)
finish = sys.argv[1]
step = 0
while not os.path.exists(finish):
    step += 1
    report.report(step=step, loss=1.0 / step)
    time.sleep(0.2)
print("finished", flush=True)
"""


def ticker_profile(tmp: Path, name: str, notify: str = "", workers: int = 2, orphan_grace: int = 60) -> Path:
    (tmp / "ticker.py").write_text(TICKER)
    return build_profile(tmp / f"{name}.toml", name=name, strategy="custom", orphan_grace=orphan_grace,
                         command=f"{{python}} ticker.py {tmp / 'finish'}", workdir=tmp, restart="on-failure",
                         max_restarts=3, grace=2, roles={"worker": workers},
                         notify={"command": notify} if notify else None)


def _tmux(socket: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=20)


def test_up_in_tmux_killed_the_job_still_restarts_ends_and_notifies(tmp_path: Path) -> None:
    if shutil.which("tmux") is None:
        if os.environ.get("DISTLAUNCH_REQUIRE_SSHD") == "1":
            pytest.fail("tmux is required here (apt-get install tmux)")
        pytest.skip("tmux not installed")
    run_dir, run_id = tmp_path / "run", f"sup-tmux-{secrets.token_hex(2)}"
    seen = tmp_path / "notified.log"
    profile = ticker_profile(tmp_path, "tmuxjob", notify=f'echo "$DISTLAUNCH_EVENT $DISTLAUNCH_JOB_STATE" >> {seen}')
    socket = f"dl-{secrets.token_hex(4)}"
    command = (f"cd {shlex.quote(str(REPO))} && {shlex.quote(sys.executable)} -m launcher.cli up "
               f"{shlex.quote(str(profile))} --run-id {run_id} --run-dir {shlex.quote(str(run_dir))}")
    _tmux(socket, "new-session", "-d", "-s", "job", "-x", "120", "-y", "36", command)
    try:
        _running_pid(run_dir, "worker:1")
        wait_for(lambda: "worker:1" in _tmux(socket, "capture-pane", "-p", "-t", "job").stdout, 60, "the dashboard")
        wait_for(lambda: _state(run_dir).get("clients") == 1, 30, "the dashboard to follow the supervisor")
        _tmux(socket, "kill-server")  # the terminal is gone, and `up` with it
        wait_for(lambda: _state(run_dir).get("clients") == 0, 30, "the supervisor to see its client go")
        assert pid_alive(_state(run_dir)["supervisor_pid"])

        os.kill(_running_pid(run_dir, "worker:1"), signal.SIGKILL)
        _running_pid(run_dir, "worker:1", restarts=1)  # restarted by its policy with nobody watching
        (tmp_path / "finish").touch()
        end = _job_end(run_dir, 60)
        assert end["state"] == "Succeeded", end
        wait_for(lambda: not pids_with_run_id(run_id), 30, "no process of the run to be left")
        assert seen.read_text().splitlines()[-1] == "job_ended Succeeded"
        assert "task_failed Running" in seen.read_text().splitlines()
    finally:
        _tmux(socket, "kill-server")
        kill_run_processes(run_id)


def test_a_detached_mirrored_job_restarts_its_worker_group_and_succeeds(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", f"sup-mwms-{secrets.token_hex(2)}"
    profile = write_profile(tmp_path / "mwms.toml", (REPO / "cluster_profiles/mwms.toml").read_text()
                            .replace('workdir = ".."', f'workdir = "{REPO}"')
                            .replace("--epochs 2 --steps-per-epoch 20", "--epochs 6 --steps-per-epoch 50"))
    try:
        up = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id, timeout=240)
        assert up.returncode == 0, up.stdout + up.stderr
        wait_for_event(run_dir, lambda e: e["kind"] == "metric" and e["task"] == "worker:1"
                       and (e.get("step") or 0) >= 20, 180, "worker:1 training")
        first0 = _running_pid(run_dir, "worker:0")
        os.kill(_running_pid(run_dir, "worker:1"), signal.SIGKILL)
        assert _running_pid(run_dir, "worker:0", restarts=1) != first0  # the whole group restarted
        _running_pid(run_dir, "worker:1", restarts=1)
        end = _job_end(run_dir, 400)
        assert end["state"] == "Succeeded", end
        restarting = [e for e in read_events(run_dir) if e["kind"] == "job" and e["state"] == "Restarting"]
        assert len(restarting) == 1 and "worker:0" in restarting[0]["reason"]
        wait_for(lambda: not pids_with_run_id(run_id), 30, "no process of the run to be left")
    finally:
        kill_run_processes(run_id)


STALLING = """
import time
from launcher import report
report.configure(min_interval=0)
def wait_for_peer():
    time.sleep(600)
for step in range(1, 6):
    report.report(step=step, loss=1.0 / step)
    time.sleep(0.1)
wait_for_peer()
"""


def test_a_stall_while_detached_is_captured_and_attach_shows_it(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", f"sup-stall-{secrets.token_hex(2)}"
    (tmp_path / "hang.py").write_text(STALLING)
    profile = build_profile(tmp_path / "stall.toml", name="stall", strategy="custom", command="{python} hang.py",
                            workdir=tmp_path, defaults={"stall_seconds": 3}, grace=2, role_hosts=False)
    attach: subprocess.Popen[bytes] | None = None
    try:
        up = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id, timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        taken = wait_for_event(run_dir, lambda e: e["kind"] == "stacks", 60, "the stall's stacks capture")
        assert list((run_dir / "stacks").glob("*.json")), "no capture kept in the run dir"
        assert "wait_for_peer" in str(taken.get("frame")), taken
        attach = start_cli("attach", str(run_dir), "--no-tui", log=tmp_path / "attach.log")
        wait_for(lambda: "stalled" in (tmp_path / "attach.log").read_text()
                 and "wait_for_peer (hang.py:" in (tmp_path / "attach.log").read_text(), 30,
                 "attach to show the stall line")
    finally:
        cli("down", str(run_dir), timeout=120)
        if attach is not None:
            attach.wait(timeout=30)
        kill_run_processes(run_id)


def _metric_lines(log: Path) -> list[tuple[str, int]]:
    out = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            event = json.loads(line)
            if event["kind"] == "metric":
                out.append((event["task"], event["step"]))
    return out


def test_two_attach_clients_see_the_same_events_and_one_leaving_does_not_disturb_the_other(
        tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", f"sup-two-{secrets.token_hex(2)}"
    profile = ticker_profile(tmp_path, "two", workers=1)
    clients: list[subprocess.Popen[bytes]] = []
    try:
        up = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id, timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        for n in (1, 2):
            clients.append(start_cli("attach", str(run_dir), "--json", log=tmp_path / f"attach{n}.log"))
        wait_for(lambda: _state(run_dir).get("clients") == 2, 30, "two clients")
        first, second = tmp_path / "attach1.log", tmp_path / "attach2.log"
        wait_for(lambda: len(_metric_lines(first)) >= 10 and len(_metric_lines(second)) >= 10, 30, "metrics")
        clients[0].send_signal(signal.SIGINT)  # Ctrl-C in attach: that client leaves, the job goes on
        assert clients[0].wait(timeout=30) == 0
        wait_for(lambda: _state(run_dir).get("clients") == 1, 30, "the supervisor to count one client")
        left_with = _metric_lines(first)
        wait_for(lambda: len(_metric_lines(second)) >= len(left_with) + 10, 30, "the other client to go on")
        (tmp_path / "finish").touch()
        assert clients[1].wait(timeout=60) == 0  # it followed the job to its end: Succeeded
        kept = _metric_lines(second)
        assert kept[:len(left_with)] == left_with  # the same events, in the same order
        assert kept == [e for e in ((ev["task"], ev["step"]) for ev in read_events(run_dir)
                                    if ev["kind"] == "metric")]  # every one, once
    finally:
        for proc in clients:
            if proc.poll() is None:
                proc.kill()
        kill_run_processes(run_id)


def test_a_killed_supervisor_leaves_nothing_after_the_orphan_grace(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", f"sup-k9-{secrets.token_hex(2)}"
    profile = ticker_profile(tmp_path, "orphans", orphan_grace=4)
    try:
        up = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id, timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        os.kill(_state(run_dir)["supervisor_pid"], signal.SIGKILL)
        killed = time.monotonic()
        runs = json.loads(cli("runs", "--json", timeout=60).stdout)
        assert [r["live"] for r in runs if r["run"] == run_id] == ["lost"]
        wait_for(lambda: not pids_with_run_id(run_id), 4 + 2 + 10, "no process of the run after the orphan grace")
        assert time.monotonic() - killed > 3.0  # the tasks waited for a supervisor to come back first
        for slug in ("worker-0", "worker-1"):  # the agent's own record of why it stopped them
            told = [e for e in read_events(run_dir / "hosts" / "local" / "tasks" / slug) if e["kind"] == "state"]
            assert told[-1]["state"] == "stopped" and "launcher lost for 4 s" in told[-1]["reason"], told[-1]
    finally:
        kill_run_processes(run_id)


def test_attach_within_the_grace_adopts_a_run_whose_supervisor_was_killed(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", f"sup-adopt-{secrets.token_hex(2)}"
    profile = ticker_profile(tmp_path, "adopt", orphan_grace=30)
    attach: subprocess.Popen[bytes] | None = None
    try:
        up = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id, timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        pids = {t: _running_pid(run_dir, t) for t in ("worker:0", "worker:1")}
        gone = _state(run_dir)["supervisor_pid"]
        os.kill(gone, signal.SIGKILL)
        attach = start_cli("attach", str(run_dir), "--no-tui", log=tmp_path / "attach.log")
        wait_for(lambda: _state(run_dir).get("supervisor_pid") not in (None, gone)
                 and _state(run_dir).get("clients") == 1, 60, "a new supervisor, followed by attach")
        assert all(pid_alive(pid) for pid in pids.values())  # the same tasks, adopted
        attach.send_signal(signal.SIGHUP)  # the new supervisor is no more the client's than the first
        assert attach.wait(timeout=30) == 0
        os.kill(pids["worker:1"], signal.SIGKILL)
        _running_pid(run_dir, "worker:1", restarts=1)  # the adopting supervisor applies the policy
        (tmp_path / "finish").touch()
        assert _job_end(run_dir, 60)["state"] == "Succeeded"
        wait_for(lambda: not pids_with_run_id(run_id), 30, "no process of the run to be left")
    finally:
        if attach is not None and attach.poll() is None:
            attach.kill()
        kill_run_processes(run_id)


def test_two_attaches_of_a_lost_run_start_one_supervisor(tmp_path: Path) -> None:
    """Both may find the run lost and adopt it (double restarts, two writers of its files): the
    supervisor's lock lets one in and the other attach says so; or the second finds the first's
    supervisor already serving and follows it. Either way the run has one supervisor."""
    run_dir, run_id = tmp_path / "run", f"sup-twice-{secrets.token_hex(2)}"
    profile = ticker_profile(tmp_path, "twice", orphan_grace=30)
    attaches: list[subprocess.Popen[bytes]] = []
    try:
        up = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id, timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        gone = _state(run_dir)["supervisor_pid"]
        os.kill(gone, signal.SIGKILL)
        wait_for(lambda: not pid_alive(gone), 10, "the supervisor to die")
        attaches = [start_cli("attach", str(run_dir), "--no-tui", log=tmp_path / f"attach{n}.log") for n in (1, 2)]
        wait_for(lambda: _state(run_dir).get("supervisor_pid") not in (None, gone), 60, "a new supervisor")

        def settled() -> bool:
            gave_way = [p for p in attaches if p.poll() is not None]
            return len(gave_way) == 1 or _state(run_dir).get("clients") == 2

        wait_for(settled, 60, "one attach to give way, or both to follow one supervisor")
        for n, proc in enumerate(attaches, 1):
            if proc.poll() is not None:
                told = (tmp_path / f"attach{n}.log").read_text()
                assert proc.returncode == 2 and "another supervisor already supervises this run" in told, told
        assert len(supervisor_pids(run_id)) == 1
    finally:
        cli("down", str(run_dir), timeout=60)
        for proc in attaches:
            if proc.poll() is None:
                proc.kill()
        kill_run_processes(run_id)


def test_a_second_supervisor_of_a_run_gives_way_at_once(tmp_path: Path) -> None:
    """The lock itself, without a race to win: while one supervisor of a run dir lives, a second
    forked for it exits 2 and says why in the run's supervisor.log."""
    from launcher.rundir import SUPERVISOR_LOG
    from launcher.supervise import daemon

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    release = tmp_path / "release"
    running = tmp_path / "running"
    first = daemon.spawn(run_dir, "lock-test", lambda: (running.touch(), _wait_for_file(release))[1])
    try:
        wait_for(running.exists, 10, "the first supervisor to run (its body runs once it holds the lock)")
        second = daemon.spawn(run_dir, "lock-test", lambda: 0)
        daemon.unblock_signals()
        _, status = os.waitpid(second, 0)
        assert os.waitstatus_to_exitcode(status) == 2
        assert "another supervisor already supervises this run" in (run_dir / SUPERVISOR_LOG).read_text()
    finally:
        release.touch()
        _, status = os.waitpid(first, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def _wait_for_file(path: Path) -> int:
    deadline = time.monotonic() + 30
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return 0


def test_a_quiet_client_keeps_its_stream_past_the_send_timeout(tmp_path: Path) -> None:
    """Clients send nothing after their request: that silence must not end their stream. With
    the send timeout at 1 s, `up --json` still gets every event of a 4 s job, and its end."""
    (tmp_path / "tick.py").write_text("import time\nfrom launcher import report\nreport.configure(min_interval=0)\n"
                                      "for step in range(1, 21):\n    report.report(step=step, loss=1.0)\n"
                                      "    time.sleep(0.2)\n")
    profile = build_profile(tmp_path / "quiet.toml", name="quiet", strategy="custom", command="{python} tick.py",
                            workdir=tmp_path, role_hosts=False)
    run_dir, run_id = tmp_path / "run", f"sup-quiet-{secrets.token_hex(2)}"
    try:
        up = cli("up", str(profile), "--json", "--run-dir", str(run_dir), "--run-id", run_id, timeout=120,
                 env={"DISTLAUNCH_CLIENT_SEND_TIMEOUT": "1"})
        assert up.returncode == 0, up.stderr[-2000:]
        shown = [json.loads(line) for line in up.stdout.splitlines() if line.startswith("{")]
        assert [e["step"] for e in shown if e["kind"] == "metric"] == list(range(1, 21))
        assert shown[-1]["kind"] == "job" and shown[-1]["state"] == "Succeeded", shown[-3:]
    finally:
        kill_run_processes(run_id)
