"""Where distlaunch keeps its files on this machine."""

from __future__ import annotations

import os
from pathlib import Path


def state_home() -> Path:
    """The user's state dir: $DISTLAUNCH_HOME, else $XDG_STATE_HOME/distlaunch, else ~/.local/state/distlaunch."""
    explicit = os.environ.get("DISTLAUNCH_HOME")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "distlaunch"


def runs_root() -> Path:
    return state_home() / "runs"


def internal_log_path() -> Path:
    return state_home() / "distlaunch.log"
