"""The host agent: one daemon per (run, host) supervising all of that host's tasks.

It runs ON each host from the uploaded zipapp (``python agent.pyz VERB ...``), so it is
stdlib-only and must work on any Python >= 3.9. The launcher never owns a task process: the
host agent does, detached from any SSH channel, and the launcher *follows* it, which is why a
dropped SSH link, ``--detach`` and ``attach`` all behave the same.

One concept per module: ``procs`` (process groups, signals, reaping), ``spec`` (what a task is
and how it starts), ``output`` (event file writer, task output to events), ``runner`` (one task
from start or adoption to its final event), ``stream`` (events pushed to followers),
``hostagent`` (the daemon), ``clients`` (the verbs that talk to it), ``netcheck`` (ports,
preflight), ``verbs`` (the command line).
"""

from __future__ import annotations

# typing only for the type checker: a launch's preflight on each host imports this module,
# and `typing` cost ~10 ms of CPU there (annotations are strings here, never evaluated)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, List, Optional

__all__ = ["main", "pid_alive"]


def __getattr__(name: str) -> Any:
    """``pid_alive`` for the launcher, imported on use: an agent verb on a host (a launch's
    preflight first of all) imports only the modules it runs."""
    if name == "pid_alive":
        from launcher.agent.procs import pid_alive

        return pid_alive
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


def main(argv: Optional[List[str]] = None) -> int:
    """The command line (``launcher.agent.verbs``), imported on use: the launcher imports this
    package for ``pid_alive`` and needs none of the daemon's modules."""
    from launcher.agent.verbs import main as verbs_main

    return verbs_main(argv)
