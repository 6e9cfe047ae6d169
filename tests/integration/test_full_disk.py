"""A full disk never freezes a job: real 1 MiB tmpfs mounts under the run dir (the launcher's run
dir and a local host's run dir in it), under an SSH host's launcher run dir only, and under the
outputs. Chatty tasks fill it at once; the job must still end by its policy, say what could not be
written, leave nothing behind, and `down` must work on it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import (
    cli,
    kill_run_processes,
    pids_with_run_id,
    read_events,
    start_cli,
    wait_for,
    wait_for_event,
)
from tests.profiles import Host, build_profile, local_host, ssh_table, sshd_host
from tests.sshd import PrivateSshd

CHATTY = """
import sys, time
for i in range(int(sys.argv[1])):
    print("line %d " % i + "x" * 200, flush=True)
    time.sleep(0.002)
print("done", flush=True)
"""


@pytest.fixture
def small_disk() -> Iterator[Path]:
    """A 1 MiB tmpfs of its own (root only)."""
    if os.geteuid() != 0:
        if os.environ.get("DISTLAUNCH_REQUIRE_SSHD") == "1":
            pytest.fail("the full-disk tests need root here (mount -t tmpfs)")
        pytest.skip("needs root to mount a small tmpfs")
    mount = Path(tempfile.mkdtemp(prefix="distlaunch-full-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs", str(mount)], check=True, timeout=30)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], timeout=30)
        with contextlib.suppress(OSError):
            mount.rmdir()


def chatty_profile(tmp: Path, lines: int = 4000, top: str = "", ssh: dict[str, Any] | None = None,
                   hosts: Sequence[Host] = (local_host(),), role_hosts: bool = False) -> Path:
    (tmp / "chatty.py").write_text(CHATTY)
    return build_profile(tmp / "chatty.toml", name="chatty", strategy="custom", orphan_grace=4,
                         outputs=f"{tmp}/outputs", top=top, command=f"{{python}} chatty.py {lines}", workdir=tmp,
                         defaults={"python": sys.executable}, grace=2, ssh=ssh, hosts=hosts,
                         roles={"worker": 2}, role_hosts=role_hosts)


def _no_internal_error(*texts: str) -> None:
    for text in texts:
        assert "internal error" not in text and "Traceback" not in text, text[-3000:]


def test_a_full_run_dir_does_not_freeze_the_job_and_down_works_on_it(tmp_path: Path, small_disk: Path) -> None:
    run_dir, run_id = small_disk / "run", "it-full-local"
    try:
        up = cli("up", str(chatty_profile(tmp_path)), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id,
                 timeout=120)
        # the tasks' 4000 lines each went through a full disk, and the job still ended by its policy
        assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-3000:]
        assert "job Succeeded: worker:0 exited 0" in up.stdout
        assert "events_unwritten: its host cannot write events to" in up.stdout  # said while it happened
        assert "No space left on device" in up.stdout
        assert "the disk is full" in up.stderr  # the launcher's own run dir, said once
        _no_internal_error(up.stdout, up.stderr)
        assert pids_with_run_id(run_id) == []
        down = cli("down", str(run_dir), timeout=60)
        assert down.returncode == 0, down.stdout + down.stderr
        _no_internal_error(down.stdout, down.stderr)
    finally:
        kill_run_processes(run_id)


def test_the_orphan_rule_and_down_work_on_a_full_disk(tmp_path: Path, small_disk: Path) -> None:
    run_dir, run_id = small_disk / "run", "it-full-orphan"
    profile = chatty_profile(tmp_path, lines=10**9)  # chatty for good: only a stop ends it
    try:
        up = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id, timeout=120)
        assert up.returncode == 0, up.stdout + up.stderr
        wait_for(lambda: os.statvfs(small_disk).f_bavail == 0, 30, "the disk to fill")
        supervisor = int(json.loads((run_dir / "state.json").read_text())["supervisor_pid"])
        os.kill(supervisor, signal.SIGKILL)
        # the agent's orphan rule (4 s) and the tasks' stop grace (2 s): nothing is left, full disk or not
        wait_for(lambda: not pids_with_run_id(run_id), 4 + 2 + 15, "the orphan rule to stop every task")
        down = cli("down", str(run_dir), timeout=60)
        assert down.returncode == 0, down.stdout + down.stderr
        _no_internal_error(down.stdout, down.stderr)
    finally:
        kill_run_processes(run_id)


@pytest.mark.sshd
def test_a_full_launcher_run_dir_with_an_ssh_host_keeps_supervising(tmp_path: Path, small_disk: Path,
                                                                     sshd: PrivateSshd) -> None:
    """The host's run dir has room (its home); the launcher's does not: events wait in memory,
    state.json keeps its last whole version, and the job ends by its policy."""
    profile = chatty_profile(tmp_path, ssh=ssh_table(sshd), hosts=[sshd_host(sshd, "box")], role_hosts=True)
    run_dir, run_id = small_disk / "run", "it-full-ssh"
    try:
        up = start_cli("up", str(profile), "--no-tui",
                       "--run-dir", str(run_dir), "--run-id", run_id, log=tmp_path / "up.log")
        assert up.wait(timeout=120) == 0, (tmp_path / "up.log").read_text()[-3000:]
        told = (tmp_path / "up.log").read_text()
        assert "the disk is full" in told and "job Succeeded" in told
        _no_internal_error(told)
        assert pids_with_run_id(run_id) == []
    finally:
        kill_run_processes(run_id)


def test_full_outputs_fail_the_task_with_its_cause_not_a_frozen_job(tmp_path: Path, small_disk: Path) -> None:
    (tmp_path / "save.py").write_text("import os, sys\n"
                                      "with open(os.path.join(sys.argv[1], 'ckpt.bin'), 'wb') as fh:\n"
                                      "    fh.write(b'x' * (4 << 20))\n")
    profile = build_profile(tmp_path / "save.toml", name="save", strategy="custom", outputs=f"{small_disk}/outputs",
                            command="{python} save.py {outputs}", workdir=tmp_path,
                            defaults={"python": sys.executable}, restart="never", role_hosts=False)
    run_dir, run_id = tmp_path / "run", "it-full-outputs"
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=120)
        assert up.returncode == 1, up.stdout[-3000:] + up.stderr[-2000:]
        failed = wait_for_event(run_dir, lambda e: e["kind"] == "state" and e["state"] == "failed", 10, "the failure")
        assert "No space left on device" in str(failed.get("cause")), failed
        assert [e["state"] for e in read_events(run_dir) if e["kind"] == "job"][-1] == "Failed"
        assert pids_with_run_id(run_id) == []
    finally:
        kill_run_processes(run_id)
