"""The state a task's process tree is sampled in: a stopped member makes the task stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from launcher.agent.readings import scan_stats
from launcher.agent.sampling import tree_state


def test_tree_state_ranks_stopped_over_disk_wait_over_running() -> None:
    assert tree_state({1, 2}, {1: "S", 2: "T"}) == "T"
    assert tree_state({1, 2}, {1: "t", 2: "R"}) == "T"
    assert tree_state({1, 2}, {1: "D", 2: "R"}) == "D"
    assert tree_state({1, 2}, {1: "S", 2: "R"}) == "R"
    assert tree_state({1}, {1: "S"}) == "S"
    assert tree_state(set(), {}) is None


def test_a_real_stopped_child_reads_as_stopped() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(child.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        states: dict[int, str] = {}
        while time.monotonic() < deadline:
            states = {}
            scan_stats(states)
            if states.get(child.pid) == "T":
                break
            time.sleep(0.05)  # the kernel stops the child asynchronously; no event to await
        assert tree_state({os.getpid(), child.pid}, states) == "T"
    finally:
        child.kill()
        child.wait(10)
