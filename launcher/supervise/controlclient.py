"""A client's end of a run's control socket (the supervisor's end is controlsock.py): where the
socket is, a connection to it, one request and its answer. Imports only the protocol, the paths and
the errors, so `down`, `restart`, `stacks` and every follower (remotejob.py) load none of the
supervisor.

The socket is a file in a 0700 directory of the user's (``socket_path``), so no other user can
reach it; the peer's credentials (SO_PEERCRED) are checked all the same.
"""

from __future__ import annotations

import contextlib
import os
import socket
import stat
import struct
from pathlib import Path

from launcher.paths import state_home
from launcher.protocol import controllines
from launcher.protocol.controllines import Answer, Request


def socket_path(run_id: str) -> Path:
    """The run's control socket (``controllines.socket_path`` under this user's state dir)."""
    return Path(controllines.socket_path(run_id, os.fspath(state_home())))


def peer_uid(conn: socket.socket) -> int:
    """The uid of the process at the other end of a connected unix socket, as the kernel saw it."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


def connect(run_id: str, timeout: float = 5.0) -> socket.socket | None:
    """A connection to the run's supervisor; None when none listens, or when the socket is held
    by a process of another user (it cannot be, in a private directory; checked all the same)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout)
        sock.connect(os.fspath(socket_path(run_id)))
        if peer_uid(sock) != os.getuid():
            sock.close()
            return None
    except OSError:
        sock.close()
        return None
    return sock


def ask(run_id: str, request: Request, timeout: float = 5.0) -> Answer | None:
    """Send one request to the run's supervisor and read its answer; None when no supervisor
    listens (or what came back is no answer)."""
    conn = connect(run_id, timeout)
    if conn is None:
        return None
    try:
        with conn as sock:
            sock.sendall(request.encode())
            line = sock.makefile("rb").readline()
    except OSError:
        return None
    answer = controllines.decode_answer(line)
    return answer if isinstance(answer, Answer) else None


def remove_stale(run_id: str) -> None:
    """Remove the run's socket where no supervisor listens on it any more (one killed outright
    could not remove it); a live one's is left alone."""
    path = socket_path(run_id)
    try:
        st = os.lstat(path)
    except OSError:
        return
    if not stat.S_ISSOCK(st.st_mode) or st.st_uid != os.getuid():
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(2.0)
        try:
            probe.connect(os.fspath(path))
        except ConnectionRefusedError:
            with contextlib.suppress(OSError):
                os.unlink(path)
        except OSError:
            pass
