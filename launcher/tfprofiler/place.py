"""Where a capture is kept: ``{outputs}/profile/<run id>/<UTC time>/`` on this machine, made so
that no other user can point it elsewhere (issue 49).

``{outputs}`` is used only if it is the user's and no one else can write it (judged as a run dir
is, launcher/privatedir.py: symlinks before its last component resolved, the folder itself opened
with ``O_NOFOLLOW``); each level under it is made and opened by directory descriptor with
``O_NOFOLLOW``, and must be a directory of the user's that no one else can write, so a link
planted at ``profile/<run id>`` is refused, never followed. The files copied from other hosts are
written the same way, under names checked by the caller, never over a file that is there.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from launcher.privatedir import UnsafePath, ownership_problem, private_group

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_LOG_FLAGS = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
FOLDER_MODE = 0o700
FILE_MODE = 0o600


def _refusal(path: str, why: str) -> UnsafePath:
    return UnsafePath(f"{path}: {why}; distlaunch keeps profiler captures only in folders of yours that no one "
                      "else can write, and never through a symbolic link: remove it, or set the local host's "
                      "`outputs` to a folder of yours")


def _check_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise UnsafePath(f"{name!r}: not a folder name distlaunch can keep a capture under")


def _checked(fd: int, path: str) -> None:
    """The folder open at ``fd`` must be the user's and no one else's to write."""
    st = os.fstat(fd)
    problem = ownership_problem(st)
    if problem == f"writable by group (mode {stat.S_IMODE(st.st_mode):04o})" and private_group(st.st_gid):
        problem = None  # umask 002 under a user private group: the group is the user alone
    if problem is not None:
        if problem.startswith("writable"):
            raise UnsafePath(f"{path}: {problem}; distlaunch keeps profiler captures only in folders of yours "
                             f"that no one else can write (another user could plant a link there): "
                             f"`chmod go-w {path}`, or set the local host's `outputs` to a folder of yours")
        raise _refusal(path, problem)


def open_subdir(parent: int, name: str, parent_path: str) -> int:
    """``name`` in the folder open at ``parent``, made (0700) when missing, as a descriptor; a link,
    a file, or a folder another user owns or may write there is refused (UnsafePath)."""
    _check_name(name)
    path = os.path.join(parent_path, name)
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, FOLDER_MODE, dir_fd=parent)
    try:
        fd = os.open(name, _DIR_FLAGS, dir_fd=parent)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise _refusal(path, _what_is_there(name, parent)) from None
        raise UnsafePath(f"{path}: cannot make a folder for the capture there ({exc.strerror})") from None
    try:
        _checked(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _what_is_there(name: str | Path, parent: int | None = None) -> str:
    """What stands where a folder was wanted (opening it with ``O_DIRECTORY | O_NOFOLLOW`` failed)."""
    try:
        mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
    except OSError as exc:
        return exc.strerror or str(exc)
    return "a symbolic link" if stat.S_ISLNK(mode) else "not a directory"


@contextlib.contextmanager
def opened(path: Path) -> Iterator[int]:
    """The folder ``path`` (its last component not a link) as a descriptor, checked as ``_checked`` does."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError as exc:
        why = _what_is_there(path) if exc.errno in (errno.ELOOP, errno.ENOTDIR) else exc.strerror or str(exc)
        raise _refusal(str(path), why) from None
    try:
        _checked(fd, str(path))
        yield fd
    finally:
        os.close(fd)


def make_capture_folder(outputs: Path, names: list[str]) -> Path:
    """``outputs/<names...>``, each level made 0700 where missing; its path. ``outputs`` is made
    (0700, with its parents) when missing; symlinks before its last component are resolved, as the
    user's choice of place. UnsafePath (one line, exit 2) for anything another user could steer."""
    for name in names:
        _check_name(name)
    real = os.path.realpath(os.path.expanduser(outputs))
    try:
        os.makedirs(real, FOLDER_MODE, exist_ok=True)
    except OSError as exc:
        raise UnsafePath(f"{outputs}: cannot make the outputs folder for the capture ({exc.strerror})") from None
    with opened(Path(real)) as fd:
        path, current = real, os.dup(fd)
        try:
            for name in names:
                nxt = open_subdir(current, name, path)
                os.close(current)
                current, path = nxt, os.path.join(path, name)
        finally:
            os.close(current)
    return Path(path)


def open_new_file(folder: Path, parts: list[str]) -> int | None:
    """``folder/<parts...>`` (its folders made as ``open_subdir`` makes them) as a new 0600 file
    open for writing; None when a file (or anything) is there already: nothing is ever written over."""
    *dirs, leaf = parts
    _check_name(leaf)
    with opened(folder) as top:
        current, path = os.dup(top), str(folder)
        try:
            for name in dirs:
                nxt = open_subdir(current, name, path)
                os.close(current)
                current, path = nxt, os.path.join(path, name)
            try:
                return os.open(leaf, _NEW_FILE_FLAGS, FILE_MODE, dir_fd=current)
            except FileExistsError:
                return None
        finally:
            os.close(current)


def write_new_file(folder: Path, parts: list[str], data: bytes) -> bool:
    """Write ``data`` to ``folder/<parts...>`` as ``open_new_file`` opens it; False when anything is there."""
    out = open_new_file(folder, parts)
    if out is None:
        return False
    with os.fdopen(out, "wb") as fh:
        fh.write(data)
    return True


def remove_file(folder: Path, parts: list[str]) -> None:
    """Remove ``folder/<parts...>`` (a file ``open_new_file`` made), reached as it reached it."""
    *dirs, leaf = parts
    with opened(folder) as top:
        current, path = os.dup(top), str(folder)
        try:
            for name in dirs:
                nxt = open_subdir(current, name, path)
                os.close(current)
                current, path = nxt, os.path.join(path, name)
            os.unlink(leaf, dir_fd=current)
        finally:
            os.close(current)


def open_log(folder: Path, name: str) -> int:
    """``folder/name`` for appending and reading back (made 0600), never through a link; its descriptor."""
    _check_name(name)
    with opened(folder) as fd:
        try:
            out = os.open(name, _LOG_FLAGS, FILE_MODE, dir_fd=fd)  # a FIFO there: ENXIO, never a hang
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _refusal(os.path.join(folder, name), "a symbolic link") from None
            raise UnsafePath(f"{os.path.join(folder, name)}: cannot write the capture's log ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(out).st_mode):
        os.close(out)
        raise _refusal(os.path.join(folder, name), "not a regular file")
    return out
