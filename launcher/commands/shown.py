"""What a client of a run shows, decided by `up` or `attach` before it follows the supervisor.

Its own module: `up` decides it before the supervisor forks, when nothing of the client
(commands/follow.py, the printers, the dashboard) is imported yet.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Shown:
    """What the client shows: the dashboard (with its title and strategy) or lines."""

    tui: bool
    json: bool = False
    title: str = ""
    strategy: str = ""
    hosts_total: int = 0
    bell: bool = False
