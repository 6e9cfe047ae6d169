"""Two runs must never write one job's outputs at once: the check `up` makes before any task starts.

A job's ``{outputs}`` outlive its runs (each run resumes from the last one's checkpoint), so two
runs of one profile at once, by one user (two people sharing an account, two terminals), would
write the same checkpoints over each other. ``up`` refuses, naming the live run, when another run
of the user that its supervisor still supervises has the same outputs folder on the same host.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from pathlib import Path

from launcher.errors import UserError
from launcher.paths import runs_root
from launcher.rundir import read_state
from launcher.runstate import RunState

#: the name of the link to the newest run in the state root (never a run of its own)
_LATEST = "latest"


def where(config: Mapping[str, object] | None) -> str:
    """The machine a host record names: every local host is this machine."""
    if not config:
        return ""
    if config.get("transport") == "local":
        return "<this machine>"
    return str(config.get("address") or "")


def outputs_in_use(run_id: str, ours: Mapping[str, tuple[str, str]], root: Path | None = None) -> list[str]:
    """One line per host of ours whose outputs a live run of the user's (another run id, its
    supervisor alive) uses too. ``ours``: host name -> (its machine as ``where`` says, outputs dir)."""
    root = runs_root() if root is None else root
    wanted = {(where, posixpath.normpath(out)): host for host, (where, out) in ours.items() if out}
    if not wanted or not root.is_dir():
        return []
    problems: list[str] = []
    seen: set[Path] = set()
    for entry in sorted(root.iterdir()):
        if entry.name == _LATEST or not os.path.lexists(entry / "state.json"):
            continue
        path = entry.resolve()
        if path in seen:
            continue
        seen.add(path)
        try:
            data = read_state(path)
            if data.get("outcome") is not None or data.get("supervisor_pid", data.get("launcher_pid")) is None:
                continue  # ended, or never supervised: read whole only a run that may still be live (a
                # user's hundreds of old runs would cost every `up` a second)
            state = RunState.from_json(data)
        except (UserError, OSError, ValueError):
            continue  # a run that cannot be read is no live run of ours
        if state.run_id == run_id or not state.supervisor_alive():
            continue
        for record in state.hosts.values():
            key = (where(record.config), posixpath.normpath(record.outputs_dir) if record.outputs_dir else "")
            host = wanted.get(key)
            if host is not None:
                problems.append(f"host {host}: the outputs {record.outputs_dir} are in use by run {state.run_id}, "
                                f"which is running: wait for it, `distlaunch down {state.run_id}`, or give this "
                                "run its own with `--set outputs=...`")
    return problems

