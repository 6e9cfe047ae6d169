"""The verbs: one module per family of `distlaunch` commands. Runs on the user's machine.

    up.py          up (launch, the dashboard or progress lines, the outcome)
    attach.py      attach, replay: the dashboard of a running or a finished job
    down.py        down, restart (a live job from another terminal), prune
    status.py      status, logs, runs, events: what a run does or did, from its run dir
    check.py       check (--metrics-sample too), tfconfig: what a profile would do
    init.py        init: a commented profile for the user's script (initguess.py: its strategy)
    stacks.py      stacks: every live task's Python stacks and process state
    completion.py  completion: shell completion from the same parser
"""

from __future__ import annotations

import contextlib
import sys


def notice(msg: str) -> None:
    """How every verb tells the user something beside its output: one line on stderr. A stderr
    that cannot take it (the supervisor's log on a full disk, a closed pipe) loses the line, never
    the caller: the supervisor's loop calls this."""
    with contextlib.suppress(OSError, ValueError):
        print(f"distlaunch: {msg}", file=sys.stderr, flush=True)
