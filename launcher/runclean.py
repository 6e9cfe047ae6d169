"""Removing a run dir: only what distlaunch wrote, never through a symlink, never another user's.

`prune` (and `down`, for the host run dirs of local hosts) remove a run dir entry by entry, for
the names distlaunch creates there; anything else (a file the user put there, a checkpoint a task
wrote into ``{run_dir}``) stays, and so does the directory then. A symlink where distlaunch writes
is removed as a link, its target never touched; folders are walked by descriptor
(``O_NOFOLLOW``, ``dir_fd``), so a link swapped in meanwhile leads nowhere. A run dir outside the
state root (``up --run-dir``) is cleaned only when it carries the marker distlaunch wrote when it
made it (``.distlaunch-run``): a folder from before the marker may hold the user's own ``logs/``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from launcher.agent.hostagent import LOCK_NAME, PID_NAME, SOCKET_NAME
from launcher.agent.leaving import RETIRED_NAME
from launcher.agent.netns import NETWORK_FILE
from launcher.errors import UserError
from launcher.privatedir import owner_name
from launcher.rundir import (
    BATCH_OUTPUT,
    BATCH_SCRIPT,
    DOWN_MARKER,
    EVENTS_FILE,
    NOTIFY_LOG,
    RUN_MARKER,
    STACKS_DIR,
    STATE_FILE,
    SUPERVISOR_LOCK,
    SUPERVISOR_LOG,
)
from launcher.runlookup import outside_state_dir
from launcher.runrecord import PROFILE_FILE, RESOLVED_FILE

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class Layout:
    """What distlaunch writes in one folder."""

    #: files (and sockets) it writes: removed
    files: frozenset[str] = frozenset()
    #: names starting so (an atomic write's temporary, left by a kill): removed
    prefixes: tuple[str, ...] = ()
    #: folders it alone fills: removed whole (a link in them as a link)
    trees: frozenset[str] = frozenset()
    #: folders holding more of its own, each laid out so
    dirs: Mapping[str, Layout] = field(default_factory=dict)
    #: the layout of every subfolder not named above (``hosts/<name>/``)
    each: Layout | None = None


#: a host run dir (launcher/remote/session.py, the host agent): on SSH hosts and, for local hosts,
#: under the launcher run dir's hosts/
HOST_FILES = frozenset({"agent.pyz", "agent.pyz.tmp", SOCKET_NAME, LOCK_NAME, PID_NAME, "agent.log", "lease",
                        NETWORK_FILE, RETIRED_NAME, RETIRED_NAME + ".tmp"})
HOST_PREFIXES = (f"{PID_NAME}.tmp.", "agent.pyz.tmp-")  # uploads: agent.pyz.tmp-<writer's pid>
HOST_TREES = frozenset({"tasks"})
HOST_LAYOUT = Layout(files=HOST_FILES, prefixes=HOST_PREFIXES, trees=HOST_TREES)
#: the launcher's run dir (launcher/rundir.py); "ssh": the openssh transport's control sockets
RUN_LAYOUT = Layout(
    files=frozenset({EVENTS_FILE, STATE_FILE, STATE_FILE + ".tmp", PROFILE_FILE, RESOLVED_FILE, RESOLVED_FILE + ".tmp",
                     SUPERVISOR_LOG,
                     SUPERVISOR_LOCK, NOTIFY_LOG, DOWN_MARKER, BATCH_SCRIPT, BATCH_OUTPUT}),
    trees=frozenset({"logs", STACKS_DIR, "ssh"}),
    dirs={"hosts": Layout(each=HOST_LAYOUT)},
)


def remove_run_dir(path: Path, run_id: str) -> list[str]:
    """Remove what distlaunch wrote in the run dir ``path``, then the dir itself if nothing else is
    left in it; the names left (relative to ``path``). UserError for a dir that is not the user's,
    or one outside the state root without the run's marker."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UserError(f"{path}: not removed ({exc.strerror}); remove it yourself") from None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise UserError(f"{path}: owned by {owner_name(st.st_uid)}, not by you; left in place")
        marked = _marked(fd, run_id)
        if not marked and outside_state_dir(path):
            raise UserError(f"{path}: no {RUN_MARKER} of run {run_id} in it (a run dir made before distlaunch "
                            "marked its own); left in place: remove what you do not need yourself")
        left = _remove_entries(fd, RUN_LAYOUT, "", skip=frozenset({RUN_MARKER}) if marked else frozenset())
        if marked:  # last: a removal cut short leaves the run dir recognisable
            os.unlink(RUN_MARKER, dir_fd=fd)
    finally:
        os.close(fd)
    if not left:
        with contextlib.suppress(FileNotFoundError):
            os.rmdir(path)
    return left


def _marked(fd: int, run_id: str) -> bool:
    """Does the run dir open at ``fd`` carry the marker distlaunch wrote when it made it?"""
    try:
        mfd = os.open(RUN_MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
    except OSError:
        return False
    with os.fdopen(mfd, encoding="utf-8", errors="replace") as fh:
        st = os.fstat(fh.fileno())
        return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and fh.read(4096).strip() == run_id


def _remove_entries(fd: int, layout: Layout, prefix: str, skip: frozenset[str] = frozenset()) -> list[str]:
    """Remove the entries of the folder open at ``fd`` that ``layout`` names; the others' names."""
    left: list[str] = []
    for name in sorted(os.listdir(fd)):
        if name in skip:
            continue
        mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
        sub = layout.dirs.get(name, layout.each)
        is_file = name in layout.files or name.startswith(layout.prefixes)
        if stat.S_ISLNK(mode) and (is_file or name in layout.trees or sub is not None):
            os.unlink(name, dir_fd=fd)  # a link where distlaunch writes: the link goes, never its target
        elif is_file and not stat.S_ISDIR(mode):
            os.unlink(name, dir_fd=fd)
        elif name in layout.trees and stat.S_ISDIR(mode):
            shutil.rmtree(name, dir_fd=fd)
        elif sub is not None and stat.S_ISDIR(mode):
            left += _remove_folder(fd, name, sub, prefix + name + "/")
        else:
            left.append(prefix + name)
    return left


def _remove_folder(parent: int, name: str, layout: Layout, prefix: str) -> list[str]:
    fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            return [prefix.rstrip("/")]
        left = _remove_entries(fd, layout, prefix)
    finally:
        os.close(fd)
    if not left:
        os.rmdir(name, dir_fd=parent)
    return left
