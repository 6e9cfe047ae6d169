"""`agent follow --pinged`: the lease stays fresh only while the launcher's pings arrive.

A partitioned launcher cannot close its SSH session, so the follower on the host lives on; if
it touched the lease by itself, the tasks there would never notice the launcher is gone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.remote import agentpack
from tests.integration.jobtools import wait_for


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    pyz = tmp_path / "agent.pyz"
    pyz.write_bytes(agentpack.build_agent_zipapp())
    proc = subprocess.Popen([sys.executable, str(pyz), "follow", "--run-dir", str(tmp_path), "--pinged"],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    yield proc
    assert proc.stdin is not None
    proc.stdin.close()
    proc.wait(10)
    subprocess.run([sys.executable, str(pyz), "stop", "--run-dir", str(tmp_path), "--exit"], capture_output=True,
                   timeout=60, check=False)  # the host agent the follower started


def lease_age(run_dir: Path) -> float:
    try:
        return time.time() - (run_dir / "lease").stat().st_mtime
    except OSError:
        return float("inf")


def test_lease_follows_the_pings(tmp_path: Path, follower: subprocess.Popen[bytes]) -> None:
    assert follower.stdin is not None
    fd = follower.stdin.fileno()
    wait_for(lambda: lease_age(tmp_path) < 1.5, 10, "the first lease touch")

    def ping_and_check() -> bool:
        os.write(fd, b"\n")
        return lease_age(tmp_path) < 1.5

    # pinged every 0.2 s for 3 s: fresh all along
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:
        assert ping_and_check(), f"lease {lease_age(tmp_path):.1f}s old while pinged"
        time.sleep(0.2)  # the ping rhythm itself
    # no pings: the lease ages although the follower still runs
    wait_for(lambda: lease_age(tmp_path) > 3.5, 10, "the lease to age without pings")
    assert follower.poll() is None
    # pings again: fresh again
    wait_for(ping_and_check, 5, "the lease to be touched once pings resume", interval=0.2)
