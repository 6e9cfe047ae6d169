"""Where distlaunch keeps its files on this machine."""

from __future__ import annotations

import contextlib
import os
import re
import traceback
from pathlib import Path

from launcher.errors import UserError

#: a run id names its run dir under the state root (and its sockets, its tasks' DISTLAUNCH_RUN_ID):
#: ASCII letters, digits, ``-``, ``_`` and ``.``, starting with a letter or digit (so never ``..``,
#: a hidden name or an option), at most 100 characters; ids that distlaunch makes fit the rule
RUN_ID_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
#: the name in the state root that links to the newest run, never a run id
LATEST_LINK = "latest"


def state_home() -> Path:
    """The user's state dir: $DISTLAUNCH_HOME, else $XDG_STATE_HOME/distlaunch, else ~/.local/state/distlaunch."""
    explicit = os.environ.get("DISTLAUNCH_HOME")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_STATE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "state"
    return base / "distlaunch"


def private_state_dir(*parts: str) -> Path:
    """``state_home()/parts...``, the state dir and each level under it made 0700 whatever the
    umask (a umask of 002 under a group shared with others once left them 0775, and the agent
    archive cached there open to the group); an existing level of the user's that is not a link is
    made 0700 again. Folders above the state dir are the user's to choose and left as they are."""
    home = state_home()
    home.parent.mkdir(parents=True, exist_ok=True)
    level = home
    for part in ("", *parts):
        level = level / part if part else level
        with contextlib.suppress(FileExistsError):
            os.mkdir(level, 0o700)
        fd = os.open(level, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            if os.fstat(fd).st_uid == os.geteuid():
                os.fchmod(fd, 0o700)
        finally:
            os.close(fd)
    return level


def runs_root() -> Path:
    return state_home() / "runs"


def check_run_id(run_id: str) -> str:
    """``run_id`` if it fits ``RUN_ID_RULE`` (an id given to ``up --run-id``), else one line saying why."""
    if RUN_ID_RULE.fullmatch(run_id) and run_id != LATEST_LINK:
        return run_id
    why = f"{LATEST_LINK!r} names the newest run" if run_id == LATEST_LINK else (
        "letters, digits, '-', '_' and '.' only, starting with a letter or digit, at most 100 characters; "
        "never a path")
    raise UserError(f"--run-id {run_id!r}: not a run id ({why}); give e.g. --run-id my-run-1, or --run-dir "
                    "DIR for a run dir elsewhere")


def internal_log_path() -> Path:
    return state_home() / "distlaunch.log"


def log_internal_error(header: str) -> Path:
    """Append ``header`` and the traceback being handled to the internal log (0600 in a 0700
    directory: it may name paths and arguments); its path, for the one line that points at it.
    A log that cannot be written loses the entry, never the caller."""
    log = internal_log_path()
    try:
        private_state_dir()
        with open(log, "a", encoding="utf-8", opener=lambda p, f: os.open(p, f, 0o600)) as fh:
            os.fchmod(fh.fileno(), 0o600)
            fh.write(header.rstrip("\n") + "\n")
            traceback.print_exc(file=fh)
    except OSError:
        pass
    return log
