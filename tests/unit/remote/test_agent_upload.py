"""The agent's upload into a host run dir never leaves a temporary file behind: the bootstrap of a
launch's one exec (channel.BOOTSTRAP) and the shell upload (HostSession.prepare) each write through
a file of their own, remove it when the write fails or is cut short, install only a whole agent,
and the next upload removes one that a killed writer left. Real processes: the bootstrap's Python,
the upload's /bin/sh and cat."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

from launcher.agent.procs import default_signals
from launcher.model import HostConfig
from launcher.remote.agentpack import agent_digest, build_agent_zipapp
from launcher.remote.channel import BOOTSTRAP
from launcher.remote.session import HostSession
from launcher.transport import make_host
from tests.integration.jobtools import wait_for


def session(base: Path) -> HostSession:
    config = HostConfig(name="local", address="localhost", transport="local")
    return HostSession(config, make_host(config), "upload-run", str(base), sys.executable)


def leftovers(base: Path) -> list[str]:
    return sorted(p.name for p in base.glob("agent.pyz*"))


def _small_file_limit() -> None:
    """In the bootstrap's process: writes past 4 KiB fail with EFBIG (as on a full disk)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))


def test_the_bootstrap_removes_its_file_when_the_write_fails(tmp_path: Path) -> None:
    base = tmp_path / "host"
    base.mkdir(mode=0o700)
    pyz = build_agent_zipapp()
    proc = subprocess.run([sys.executable, "-c", BOOTSTRAP, str(len(pyz)), agent_digest(),
                           str(base / "agent.pyz"), "", "", "preflight"],
                          input=pyz, capture_output=True, timeout=60, preexec_fn=_small_file_limit)
    assert proc.returncode == 98 and b"cannot write" in proc.stderr, proc.stderr
    assert leftovers(base) == []


def test_the_bootstrap_installs_the_agent_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    base = tmp_path / "host"
    base.mkdir(mode=0o700)
    pyz = build_agent_zipapp()
    proc = subprocess.run([sys.executable, "-c", BOOTSTRAP, str(len(pyz)), agent_digest(),
                           str(base / "agent.pyz"), "", "", "preflight"],
                          input=pyz, capture_output=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert leftovers(base) == ["agent.pyz"] and (base / "agent.pyz").read_bytes() == pyz


def test_an_upload_cut_short_installs_nothing_and_leaves_nothing(tmp_path: Path) -> None:
    base = tmp_path / "host"
    pyz = build_agent_zipapp()
    upload = subprocess.Popen(["/bin/sh", "-c", session(base)._prepare_script()], stdin=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    assert upload.stdin is not None
    upload.stdin.write(pyz[: len(pyz) // 2])
    upload.stdin.close()  # the link dropped mid-upload: cat sees the end of its input
    assert upload.wait(30) != 0
    assert leftovers(base) == []  # before: a truncated agent.pyz was installed


def test_an_upload_hung_up_on_removes_its_file(tmp_path: Path) -> None:
    base = tmp_path / "host"
    pyz = build_agent_zipapp()
    # as sshd starts a session's shell: SIGHUP at its default, even where pytest runs with it
    # ignored (`nohup`, a script's background job), which the shell could not undo
    upload = subprocess.Popen(["/bin/sh", "-c", session(base)._prepare_script()], stdin=subprocess.PIPE,
                              stderr=subprocess.PIPE, start_new_session=True, preexec_fn=default_signals)
    assert upload.stdin is not None
    try:
        upload.stdin.write(pyz[: len(pyz) // 2])
        upload.stdin.flush()
        wait_for(lambda: any(p.stat().st_size >= len(pyz) // 2 for p in base.glob("agent.pyz.tmp-*")), 20,
                 "half the upload written")
        os.killpg(upload.pid, signal.SIGHUP)  # as a dropped SSH session: the shell and its cat
        assert upload.wait(30) == 129
    finally:
        upload.stdin.close()
        if upload.poll() is None:
            upload.kill()
            upload.wait(10)
    assert leftovers(base) == []


def test_the_next_upload_removes_what_a_killed_writer_left(tmp_path: Path) -> None:
    base = tmp_path / "host"
    base.mkdir(mode=0o700)
    dead = subprocess.Popen(["true"])
    dead.wait(10)
    (base / "agent.pyz.tmp").write_bytes(b"PK partial")  # the fixed name older versions used
    (base / f"agent.pyz.tmp-{dead.pid}").write_bytes(b"PK partial")
    live = base / f"agent.pyz.tmp-{os.getpid()}"  # an upload under way (this process lives): kept
    live.write_bytes(b"PK partial")
    session(base).prepare()
    assert leftovers(base) == ["agent.pyz", live.name]
    assert (base / "agent.pyz").read_bytes() == build_agent_zipapp()
