"""Host run dirs are private to their user: 0700, specs and the agent 0600, events 0600."""

from __future__ import annotations

import secrets
import shutil
import stat
import sys
from pathlib import Path

import pytest

from launcher.remote.session import HostSession, remote_base_dir
from launcher.transport import make_host
from tests.sshd import PrivateSshd

pytestmark = pytest.mark.sshd


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_an_ssh_host_run_dir_and_its_files_are_private(private_sshd: PrivateSshd) -> None:
    config = private_sshd.host_config("ssh1")
    host = make_host(config)
    host.connect()
    run_id = f"it-private-{secrets.token_hex(3)}"
    base = remote_base_dir(host, config, run_id, None)
    session = HostSession(config, host, run_id, base, sys.executable)
    try:
        session.prepare()
        session.write_specs({"worker-0": {"run": run_id, "task": "worker:0", "command": "true"}})
        answer = session.agent("preflight")
        assert answer["python"]
        root = Path(base)  # the sshd runs on this machine: its user's files are ours to look at
        assert _mode(root) == 0o700
        assert _mode(root / "agent.pyz") == 0o600
        assert _mode(root / "tasks" / "worker-0" / "spec.json") == 0o600
    finally:
        host.close()
        shutil.rmtree(base, ignore_errors=True)
