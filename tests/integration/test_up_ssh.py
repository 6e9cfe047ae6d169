"""`distlaunch up` through a real OpenSSH server on loopback, with host keys verified; the job and
the host key tests run over both SSH clients (the built-in one and the system ssh, `[ssh] client`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.transport.openssh import control_dir
from tests.integration.jobtools import (
    REPO,
    cli,
    kill_run_processes,
    pids_with_run_id,
    read_events,
    start_cli,
    wait_for,
    wait_for_event,
)
from tests.profiles import build_profile, ps_mnist_command, ssh_table, sshd_host
from tests.sshd import PrivateSshd, free_port

pytestmark = [pytest.mark.slow, pytest.mark.sshd]
CLIENTS = pytest.mark.parametrize("client", ["builtin", "openssh"])


def ssh_profile(tmp: Path, server: PrivateSshd, *, steps: int = 100, known_hosts: Path | None = None,
                policy: str = "reject", name: str = "it-ssh", client: str = "builtin",
                ps_port: int | None = None) -> Path:
    """The small PSS job on the sshd's host ``box``, each role on a free port (ps on ``ps_port`` if given)."""
    ports = {"ps": ps_port or free_port(), "worker": free_port(), "chief": free_port()}
    return build_profile(
        tmp / "ssh.toml", name=name, orphan_grace=30, command=ps_mnist_command(steps),
        defaults={"python": sys.executable}, workdir=REPO, env={"TF_CPP_MIN_LOG_LEVEL": "2"}, grace=5,
        ssh=ssh_table(server, client=client, known_hosts=str(known_hosts or server.known_hosts),
                      host_key_policy=policy),
        hosts=[sshd_host(server, "box")], roles={role: {"port": port} for role, port in ports.items()})


@CLIENTS
def test_job_over_ssh_succeeds_and_leaves_nothing(tmp_path: Path, sshd: PrivateSshd, client: str) -> None:
    run_dir, run_id = tmp_path / "run", f"it-ssh-ok-{client}"
    logins_before = sshd.log_path.read_text().count("Accepted publickey")
    try:
        result = cli("up", str(ssh_profile(tmp_path, sshd, client=client)), "--no-tui", "--run-dir", str(run_dir),
                     "--run-id", run_id, timeout=300)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        events = read_events(run_dir)
        steps = [e["step"] for e in events if e["kind"] == "metric" and e["step"] is not None]
        assert steps and steps[-1] >= 100
        final = {e["task"]: e["state"] for e in events if e["kind"] == "state"}
        assert final == {"chief:0": "succeeded", "ps:0": "stopped", "worker:0": "stopped"}
        assert all(e["host"] == "box" for e in events if e["kind"] == "state" and e["state"] == "running")
        assert pids_with_run_id(run_id) == []
        down = cli("down", run_id, timeout=120)
        assert down.returncode == 0, down.stdout + down.stderr
        logins = sshd.log_path.read_text().count("Accepted publickey") - logins_before
        # openssh: one master per process (up, down), each serving every exec of it
        assert 1 <= logins <= (3 if client == "openssh" else 10), logins
    finally:
        kill_run_processes(run_id)


@CLIENTS
def test_unknown_host_key_is_refused_unless_accept_new(tmp_path: Path, sshd: PrivateSshd, client: str) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    run_dir = tmp_path / "run"
    up = cli("up", str(ssh_profile(tmp_path, sshd, known_hosts=empty, client=client)), "--no-tui",
             "--run-dir", str(run_dir), "--run-id", f"it-ssh-unknown-{client}")
    assert up.returncode == 2
    errors = [ln for ln in up.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and "unknown host key" in errors[0] and "Traceback" not in up.stderr
    assert not [e for e in read_events(run_dir) if e["kind"] == "state"]

    accepted = cli("check", str(ssh_profile(tmp_path, sshd, known_hosts=empty, policy="accept-new", client=client)))
    assert accepted.returncode == 0, accepted.stderr
    # the key itself: ssh may hash the name (HashKnownHosts in /etc/ssh/ssh_config, as on Debian)
    assert sshd.host_key_line.split()[-1] in empty.read_text() and "added" in accepted.stderr.lower()


@CLIENTS
def test_unreachable_host_is_one_line_and_nothing_starts(tmp_path: Path, sshd: PrivateSshd, client: str) -> None:
    profile = ssh_profile(tmp_path, sshd, client=client)
    profile.write_text(profile.read_text().replace(f"ssh_port = {sshd.port}", f"ssh_port = {free_port()}"))
    for verb in ("check", "up"):
        args = [verb, str(profile)] + (["--no-tui", "--run-dir", str(tmp_path / "run")] if verb == "up" else [])
        result = cli(*args, timeout=60)
        assert result.returncode == 2, result.stderr
        errors = [ln for ln in result.stderr.splitlines() if "error" in ln]
        assert len(errors) == 1 and "box" in errors[0] and "Traceback" not in result.stderr


@CLIENTS
def test_down_from_another_terminal_stops_the_job(tmp_path: Path, sshd: PrivateSshd, client: str) -> None:
    run_dir, run_id = tmp_path / "run", f"it-ssh-down-{client}"
    launcher = start_cli("up", str(ssh_profile(tmp_path, sshd, steps=1_000_000, client=client)), "--no-tui",
                         "--run-dir", str(run_dir), "--run-id", run_id, log=tmp_path / "up.log")
    try:
        wait_for_event(run_dir, lambda e: e["kind"] == "metric" and e["task"] == "chief:0", 180,
                       "the chief's first metric")
        down = cli("down", str(run_dir), timeout=120)
        assert down.returncode == 0, down.stdout + down.stderr
        assert "no process of the run is left" in down.stdout
        assert pids_with_run_id(run_id) == []
        assert wait_for(lambda: launcher.poll() is not None, 60, "the launcher to exit") is not None
        assert launcher.returncode == 143  # a stopped job: no success, no failure
        jobs = [e for e in read_events(run_dir) if e["kind"] == "job"]
        assert jobs[-1]["state"] == "Stopped"  # stopped on purpose, not failed
    finally:
        if launcher.poll() is None:
            launcher.kill()
        kill_run_processes(run_id)


@CLIENTS
def test_a_launch_refused_at_preflight_starts_no_host_agent_and_leaves_nothing(tmp_path: Path, sshd: PrivateSshd,
                                                                                client: str) -> None:
    """The preflight's exec stays open to become the host's follow channel; when the launch stops
    there (a busy port), closing it must end that command without a host agent ever starting."""
    import socket

    run_id = f"it-ssh-refused-{client}"
    holder = socket.socket()
    holder.bind(("0.0.0.0", 0))
    holder.listen(1)
    busy = holder.getsockname()[1]
    try:
        profile = ssh_profile(tmp_path, sshd, client=client, ps_port=busy)
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run"), "--run-id", run_id,
                 timeout=120)
        assert up.returncode == 2, up.stderr
        assert str(busy) in up.stderr and "Traceback" not in up.stderr
        wait_for(lambda: pids_with_run_id(run_id) == [], 15, "the preflight's command to end")
        host_run_dir = Path.home() / ".cache" / "distlaunch" / "runs" / run_id
        assert (host_run_dir / "agent.pyz").is_file()  # the preflight ran there
        assert not (host_run_dir / "agent.pid").exists()  # and no host agent ever served
    finally:
        holder.close()
        kill_run_processes(run_id)


def test_a_killed_ssh_master_is_reconnected_and_the_job_goes_on(tmp_path: Path, sshd: PrivateSshd) -> None:
    """The openssh client's master dies under a running job (as on a cut link): the follow channel
    ends, the launcher logs in again with a new master, and the events go on from where they were."""
    run_dir, run_id = tmp_path / "run", "it-openssh-master"
    launcher = start_cli("up", str(ssh_profile(tmp_path, sshd, steps=1_000_000, client="openssh")), "--no-tui",
                         "--run-dir", str(run_dir), "--run-id", run_id, log=tmp_path / "up.log")
    try:
        first = wait_for_event(run_dir, lambda e: e["kind"] == "metric" and e["task"] == "chief:0", 180,
                               "the chief's first metric")
        directory, _ = control_dir(run_id)  # the run's ssh/ dir, or one under /tmp where that is too deep
        sockets = wait_for(lambda: list(Path(directory).iterdir()), 10, "the master's socket")
        check = subprocess.run(["ssh", "-o", f"ControlPath={sockets[0]}", "-O", "check", "box"],
                               capture_output=True, text=True, timeout=30)
        master = int(check.stderr.split("pid=")[1].split(")")[0])
        os.kill(master, signal.SIGKILL)
        wait_for_event(run_dir, lambda e: e["kind"] == "host" and e["state"] == "up", 90, "the host back up")
        wait_for_event(run_dir, lambda e: e["kind"] == "metric" and e["task"] == "chief:0"
                       and e["step"] is not None and e["step"] > (first["step"] or 0) + 40, 120,
                       "metrics after the reconnect")
        states = {e["task"]: e["state"] for e in read_events(run_dir) if e["kind"] == "state"}
        assert set(states.values()) == {"running"}, states  # nothing was restarted or lost
        down = cli("down", str(run_dir), timeout=120)
        assert down.returncode == 0, down.stdout + down.stderr
        assert pids_with_run_id(run_id) == []
    finally:
        if launcher.poll() is None:
            launcher.kill()
        kill_run_processes(run_id)
