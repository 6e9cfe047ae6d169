"""A run's control socket is a name no other user can take (issue 49): the abstract name distlaunch
once used is bound first by uid 65534 (run ids are visible to every user), and `up --detach`, the
owner's requests and `attach` of a run whose supervisor was killed all work as if it were not there.
Before, `up` hung 40 s and `attach` ran a supervisor no client could reach."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from launcher.supervise import controlclient
from tests.integration.jobtools import cli, kill_run_processes, pids_with_run_id, start_cli, wait_for
from tests.integration.otheruser import OTHER_UID, require_other_user
from tests.integration.test_supervisor import _state, ticker_profile

pytestmark = pytest.mark.slow

_SQUAT = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\\0distlaunch/" + sys.argv[1])
s.listen(64)
print("bound", flush=True)
while True:
    conn, _ = s.accept()
"""


@contextmanager
def squatted(run_id: str) -> Iterator[None]:
    """Another user holds the abstract name ``distlaunch/<run id>`` (and accepts, never answers)."""
    proc = subprocess.Popen(["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups",
                             "/usr/bin/python3", "-c", _SQUAT, run_id], stdout=subprocess.PIPE, cwd="/",
                            env={"PATH": "/usr/bin:/bin"})
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"bound\n"
        yield
    finally:
        proc.kill()
        proc.wait(10)


def test_a_squatted_name_neither_hangs_up_nor_blinds_attach(tmp_path: Path) -> None:
    require_other_user()
    run_dir, run_id = tmp_path / "run", f"fixed-{secrets.token_hex(3)}"
    profile = ticker_profile(tmp_path, "squat", orphan_grace=30)
    attach: subprocess.Popen[bytes] | None = None
    try:
        with squatted(run_id):
            up = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id, timeout=60)
            assert up.returncode == 0, up.stdout + up.stderr
            assert "control socket unavailable" not in up.stderr
            path = controlclient.socket_path(run_id)
            assert path.is_socket() and path.stat().st_uid == os.getuid()
            assert os.stat(path.parent).st_mode & 0o777 == 0o700
            status = json.loads(cli("status", str(run_dir), "--json", timeout=60).stdout)
            assert status["supervision"] in ("supervised", "live"), status
            gone = _state(run_dir)["supervisor_pid"]
            os.kill(gone, signal.SIGKILL)
            attach = start_cli("attach", str(run_dir), "--no-tui", log=tmp_path / "attach.log")
            wait_for(lambda: _state(run_dir).get("supervisor_pid") not in (None, gone)
                     and _state(run_dir).get("clients") == 1, 60, "a new supervisor, followed by attach")
            log = (run_dir / "supervisor.log").read_text()
            assert "control socket unavailable" not in log and "Address already in use" not in log
            attach.send_signal(signal.SIGHUP)
            assert attach.wait(timeout=30) == 0
            down = cli("down", str(run_dir), timeout=60)
            assert down.returncode == 0, down.stdout + down.stderr
        wait_for(lambda: not pids_with_run_id(run_id), 30, "no process of the run to be left")
        assert not controlclient.socket_path(run_id).exists()  # the supervisor took its name with it
    finally:
        if attach is not None and attach.poll() is None:
            attach.kill()
        kill_run_processes(run_id)


def test_a_supervisor_that_cannot_listen_says_so_and_starts_nothing(tmp_path: Path) -> None:
    """Where the run's socket must go under a shared TMPDIR (the state dir too deep for a socket
    path) and another user planted the folder there first, `up` says so in one line, exit 2, and
    no task starts: never a supervisor no client can reach."""
    require_other_user()
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(shared, 0o1777)
    planted = shared / f"distlaunch-{os.getuid()}"
    planted.mkdir()
    os.chown(planted, OTHER_UID, OTHER_UID)
    home = tmp_path / ("deep-" * 20) / "home"
    home.mkdir(parents=True)
    env = {"DISTLAUNCH_HOME": str(home), "TMPDIR": str(shared), "XDG_RUNTIME_DIR": ""}
    run_id = f"blind-{secrets.token_hex(3)}"
    profile = ticker_profile(tmp_path, "blind")
    up = cli("up", str(profile), "--detach", "--run-id", run_id, timeout=60, env=env)
    lines = [line for line in up.stderr.splitlines() if line.startswith("distlaunch: error")]
    assert up.returncode == 2, up.stdout + up.stderr
    assert len(lines) == 1 and str(planted) in lines[0] and "owned by" in lines[0], up.stderr
    assert "Traceback" not in up.stderr
    assert not pids_with_run_id(run_id)
    assert list(planted.iterdir()) == []
