"""The host agent's own warnings, on its stderr (agent.log in the host run dir).

Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).

A warning never stops the agent: on a full disk (or with agent.log gone) the write fails and the
warning is dropped. A reader thread that died of its own warning once left a task blocked on a
full pipe for good, and a waiter thread that died before the task's final event kept the host
agent, and its orphan rule, from ever ending.
"""

from __future__ import annotations

import contextlib
import os


def warn(text: str) -> None:
    """One line on the agent's stderr, or nothing if it cannot be written."""
    data = (text.rstrip("\n") + "\n").encode("utf-8", "replace")
    with contextlib.suppress(OSError, ValueError):
        os.write(2, data)
