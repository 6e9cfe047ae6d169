"""Where distlaunch keeps its files on this machine."""

from __future__ import annotations

import os
import traceback
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


def log_internal_error(header: str) -> Path:
    """Append ``header`` and the traceback being handled to the internal log (0600 in a 0700
    directory: it may name paths and arguments); its path, for the one line that points at it.
    A log that cannot be written loses the entry, never the caller."""
    log = internal_log_path()
    try:
        log.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(log.parent, 0o700)
        with open(log, "a", encoding="utf-8", opener=lambda p, f: os.open(p, f, 0o600)) as fh:
            os.fchmod(fh.fileno(), 0o600)
            fh.write(header.rstrip("\n") + "\n")
            traceback.print_exc(file=fh)
    except OSError:
        pass
    return log
