"""Directories and files distlaunch trusts only when they are the user's own (DESIGN.md section 8).

Another local user must never steer distlaunch: a directory it keeps sockets in, a run dir it
reads back, a state or profile file whose ``python`` and commands it runs. Each is used only
when the user owns it and no one else can write it, judged on what was actually opened or
``lstat``-ed, so a symlink planted (or swapped in) at the last component is never followed.
A refusal is one line naming the path, what is wrong, and the fix (exit code 2).
"""

from __future__ import annotations

import errno
import os
import pwd
import stat
from pathlib import Path

from launcher.errors import UserError

PRIVATE_DIR_MODE = 0o700
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class UnsafePath(UserError):
    """A path another user owns or may write, or a symlink where distlaunch wants its own file."""


def owner_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def ownership_problem(st: os.stat_result, exact_mode: int | None = None) -> str | None:
    """What makes ``st`` untrustworthy: another owner, a mode other than ``exact_mode``, or (without
    one) group or others' write permission; None when it is the user's alone to change."""
    mode = stat.S_IMODE(st.st_mode)
    if st.st_uid != os.geteuid():
        return f"owned by {owner_name(st.st_uid)}, not by you"
    if exact_mode is not None and mode != exact_mode:
        return f"mode {mode:04o}, not {exact_mode:04o}"
    if mode & 0o022:
        who = "group and others" if mode & 0o022 == 0o022 else ("group" if mode & 0o020 else "others")
        return f"writable by {who} (mode {mode:04o})"
    return None


def _fix(problem: str, path: str, chmod: str) -> str:
    if problem.startswith("owned by"):
        return "remove it (its owner or root can)"
    if problem == "not a regular file":
        return "remove it"
    return f"`chmod {chmod} {path}` if you trust what is in it, else remove it"


def check_private_dir(path: str | os.PathLike[str], hint: str = "") -> None:
    """``path`` must be a directory (not a symlink) of the user's with mode exactly 0700."""
    name = os.fspath(path)
    try:
        st = os.lstat(name)
    except FileNotFoundError:
        raise UnsafePath(f"{name}: missing; distlaunch keeps private files there{hint}") from None
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{name}: a symbolic link, not a private directory of yours; remove it{hint}")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{name}: not a directory; remove it{hint}")
    problem = ownership_problem(st, PRIVATE_DIR_MODE)
    if problem is not None:
        raise UnsafePath(f"{name}: {problem}; distlaunch keeps private files only in a 0700 directory of "
                         f"yours: {_fix(problem, name, '700')}{hint}")


def ensure_private_dir(path: str | os.PathLike[str], hint: str = "") -> Path:
    """``path`` as a private directory: created 0700 when missing (its parent must exist), else
    verified as it is (never repaired: another user may have put things in it). ``hint``: more
    of the fix, appended to a refusal (``"; or set TMPDIR to a folder of yours"``)."""
    name = os.fspath(path)
    try:
        os.mkdir(name, PRIVATE_DIR_MODE)
    except FileExistsError:
        pass
    else:  # ours, new: 0700 whatever the umask took away
        fd = os.open(name, _DIR_FLAGS)
        try:
            if os.fstat(fd).st_uid == os.geteuid():
                os.fchmod(fd, PRIVATE_DIR_MODE)
        finally:
            os.close(fd)
    check_private_dir(name, hint)
    return Path(name)


def trusted_dir(path: Path, what: str) -> Path:
    """``path`` (symlinks before its last component resolved) as a directory of the user's that no
    one else can write; its resolved path. ``what`` names it in a refusal ("run directory")."""
    real = os.path.realpath(path)
    try:
        fd = os.open(real, _DIR_FLAGS)  # a link swapped in at the last component since is not followed
    except OSError as exc:
        raise UnsafePath(f"{path}: not a {what} distlaunch can use ({exc.strerror})") from None
    try:
        problem = ownership_problem(os.fstat(fd))
    finally:
        os.close(fd)
    if problem is not None:
        raise UnsafePath(f"{path}: {problem}; distlaunch uses a {what} only if it is yours and no one "
                         f"else can write it: {_fix(problem, real, 'go-w')}")
    return Path(real)


def read_trusted_text(path: Path, what: str) -> str:
    """The text of ``path``, a regular file of the user's that no one else can write and not a
    symlink: distlaunch runs the ``python`` and commands such files name. FileNotFoundError when
    it is missing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO never blocks
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise UnsafePath(f"{path}: cannot read {what} ({why}); distlaunch reads it only from a file of "
                         "yours") from None
    with os.fdopen(fd, encoding="utf-8") as fh:
        st = os.fstat(fh.fileno())
        problem = "not a regular file" if not stat.S_ISREG(st.st_mode) else ownership_problem(st)
        if problem is not None:
            raise UnsafePath(f"{path}: {problem}; distlaunch runs what {what} names only from a file of yours "
                             f"that no one else can write: {_fix(problem, str(path), 'go-w')}")
        return fh.read()
