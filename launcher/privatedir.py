"""Directories and files distlaunch trusts only when they are the user's own (DESIGN.md section 8).

Another local user must never steer distlaunch: a directory it keeps sockets in, a run dir it
reads back, a state or profile file whose ``python`` and commands it runs. Each is used only
when the user owns it and no one else can write it, judged on what was actually opened or
``lstat``-ed, so a symlink planted (or swapped in) at the last component is never followed.
Every file of a run read back is opened here (``open_trusted``): never through a link, and never
so as to block (a FIFO or device there is refused, not waited on); one that is not UTF-8 text or
JSON is ``DamagedFile``. A refusal is one line naming the path, what is wrong, and the fix (exit
code 2).
"""

from __future__ import annotations

import errno
import grp
import json
import os
import pwd
import stat
from pathlib import Path
from typing import Any, BinaryIO

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


def private_group(gid: int) -> bool:
    """Whether ``gid`` is the user's own group (a "user private group", as Debian and Red Hat make
    for each user: the group named after the user, no other member): group write permission on
    a folder of that group gives no one else anything. OpenSSH as Debian patches it judges so."""
    try:
        group = grp.getgrgid(gid)
        user = pwd.getpwuid(os.geteuid())
    except KeyError:
        return False
    return group.gr_name == user.pw_name and gid == user.pw_gid and set(group.gr_mem) <= {user.pw_name}


def ancestry_problem(path: str | os.PathLike[str]) -> tuple[str, str] | None:
    """The first folder above ``path`` (resolved) that another user could use to swap ``path``
    away, and what is wrong with it, as OpenSSH's StrictModes judges a home: each must be a
    folder of the user's or root's that no one else may write, unless it is root's or the user's
    and sticky (``/tmp``: others may add names but never rename or remove the user's). Group
    write is accepted on a group that is the user's alone. None when the whole chain is safe."""
    real = os.path.realpath(os.fspath(path))
    parent = os.path.dirname(real)
    while True:
        try:
            st = os.lstat(parent)
        except FileNotFoundError:  # made later, 0700, under the first folder that is there
            parent = os.path.dirname(parent)
            continue
        except OSError as exc:
            return parent, f"not to be checked ({exc.strerror})"
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid not in (0, os.geteuid()):
            return parent, f"owned by {owner_name(st.st_uid)}, who could swap what is in it"
        writers = mode & 0o022
        if writers == 0o020 and private_group(st.st_gid):
            writers = 0
        if writers and not mode & stat.S_ISVTX:
            who = "group and others" if writers == 0o022 else ("group" if writers & 0o020 else "others")
            return parent, f"writable by {who} (mode {mode:04o}, not sticky), who could swap what is in it"
        if parent == "/":
            return None
        parent = os.path.dirname(parent)


def check_ancestry(path: str | os.PathLike[str], what: str) -> None:
    """``path``'s folders judged as ``ancestry_problem`` does; one line (UnsafePath) naming the
    culprit folder and the fix when another user could swap ``path`` (``what``: "run dir")."""
    found = ancestry_problem(path)
    if found is not None:
        folder, problem = found
        raise UnsafePath(f"{path}: the folder {folder} above it is {problem}; distlaunch keeps a {what} only "
                         "where every folder above it is yours or root's and no one else can write it: choose a folder "
                         "under your home, or leave the run dir out (the state root is private)")


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


def open_trusted(path: Path, what: str, runs: bool = False) -> BinaryIO:
    """``path`` opened for reading (binary), if it is a regular file of the user's that no one else
    can write and not a symlink, judged on what was opened: ``O_NOFOLLOW``, and ``O_NONBLOCK`` so
    that a FIFO or device planted or left there is refused instead of blocking the open. ``what``
    names it in a refusal ("the run's events"); ``runs``: distlaunch runs the ``python`` and
    commands it names (said in the refusal). FileNotFoundError when it is missing."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        why = "a symbolic link" if exc.errno == errno.ELOOP else exc.strerror
        raise UnsafePath(f"{path}: cannot read {what} ({why}); distlaunch reads it only from a file of "
                         "yours") from None
    try:
        st = os.fstat(fd)
        problem = "not a regular file" if not stat.S_ISREG(st.st_mode) else ownership_problem(st)
        if problem is not None:
            use = f"runs what {what} names" if runs else f"reads {what}"
            raise UnsafePath(f"{path}: {problem}; distlaunch {use} only from a regular file of yours "
                             f"that no one else can write: {_fix(problem, str(path), 'go-w')}")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class DamagedFile(UserError):
    """A file of a run that is the user's and safe to read, but not what distlaunch wrote there:
    not UTF-8 text, not JSON. ``reason`` says what is wrong with it without the path."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def read_trusted_text(path: Path, what: str, fix: str = "restore it or remove it", runs: bool = True) -> str:
    """The text of ``path`` as ``open_trusted`` opens it (by default for a file whose ``python``
    and commands distlaunch runs). FileNotFoundError when it is missing, UnsafePath when it is not
    a file of the user's alone, DamagedFile (saying ``fix``) when it is not UTF-8 text."""
    with open_trusted(path, what, runs=runs) as fh:
        data = fh.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        reason = f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}"
        raise DamagedFile(f"{path}: {what} is {reason} (damaged, or not distlaunch's); {fix}", reason) from None


def read_trusted_json(path: Path, what: str, fix: str = "restore it or remove it", runs: bool = True) -> Any:
    """The JSON value in ``path``, read as ``read_trusted_text`` reads it; DamagedFile (saying
    ``fix``) when it is not UTF-8 text or not JSON."""
    text = read_trusted_text(path, what, fix, runs)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: 100,000 "[" in a row
        reason = f"not JSON: {exc}"
        raise DamagedFile(f"{path}: {what} is {reason} (damaged, or not distlaunch's); {fix}", reason) from None
