"""Reachability between hosts, on one host: hold its tasks' ports open, then connect to the others'.

The launch's preflight proves more than each host alone: every host opens TCP to every other
host's task ports at the addresses TF_CONFIG will use, while those hosts hold them open. Phase 1
(``PortHold``): the preflight verb keeps the ports it checked (given and picked) listening and
answers each connection with a line naming its host, so a wrong ``tf_address`` that leads to
another machine's listener is told apart from the right one. Phase 2 (``probe``): on the
launcher's ``ReachRequest`` line (launcher/protocol/agentlines.py) the verb connects to every pair it
was sent, all at once, and answers the failures on one ``ReachAnswer`` line. The ports are let go
on the launcher's next line (or EOF), which comes only once every host answered: the tasks need
them free.

Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).
"""

from __future__ import annotations

import errno
import os
import selectors
import socket
import sys
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

#: how long one connection may take before the pair counts as unreachable
CONNECT_SECONDS = 3.0
#: what a held port says to whoever connects, followed by the token (the host's name in the profile)
GREETING = "distlaunch-reach "


class PortHold:
    """Listening sockets on ``ports`` (or the already bound ``bound`` ones) that greet and keep each
    connection until ``close``: the peer closes first, so the port is left without TIME_WAIT."""

    def __init__(self, addr: str, ports: List[int], token: str, bound: Optional[List[socket.socket]] = None) -> None:
        self.greeting = (GREETING + token + "\n").encode()
        self.ports: List[int] = []
        self.failed: Dict[int, str] = {}
        self._listeners: List[socket.socket] = []
        self._accepted: List[socket.socket] = []
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._stop = False
        for sock in bound or []:
            self._listen(sock)
        for port in ports:
            sock = socket.socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((addr, port))
            except OSError as exc:
                sock.close()
                self.failed[port] = exc.strerror or str(exc)
                continue
            self._listen(sock)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._serve, name="reach-hold", daemon=True)
        self._thread.start()

    def _listen(self, sock: socket.socket, also_v6: bool = True) -> None:
        sock.listen(128)
        sock.setblocking(False)
        self._listeners.append(sock)
        port = sock.getsockname()[1]
        self.ports.append(port)
        self._selector.register(sock, selectors.EVENT_READ)
        if also_v6 and sock.family == socket.AF_INET and sock.getsockname()[0] == "0.0.0.0":
            self._listen_v6(port)

    def _listen_v6(self, port: int) -> None:
        """The same port on every IPv6 address too, as TensorFlow's server listens on both: a
        tf_address that is an IPv6 address is reached (best effort: a host may have no IPv6)."""
        try:
            sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        except OSError:
            return
        try:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("::", port))
            sock.listen(128)
        except OSError:
            sock.close()
            return
        sock.setblocking(False)
        self._listeners.append(sock)
        self._selector.register(sock, selectors.EVENT_READ)

    def _serve(self) -> None:
        while not self._stop:
            for key, _ in self._selector.select():
                sock = key.fileobj
                if sock is self._wake_r or self._stop:
                    return
                try:
                    conn, _ = sock.accept()  # type: ignore[union-attr]
                except OSError:
                    continue
                try:
                    conn.sendall(self.greeting)  # a few bytes into an empty send buffer: never blocks
                except OSError:
                    conn.close()
                    continue
                self._accepted.append(conn)

    def close(self) -> None:
        """Let the ports go (before the tasks start: TensorFlow binds them next)."""
        self._stop = True
        self._wake_w.send(b"x")
        self._thread.join(5.0)
        for sock in self._listeners + self._accepted:
            sock.close()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()


def _error_words(code: int) -> str:
    if code in (errno.ETIMEDOUT, errno.EINPROGRESS):
        return "timed out"
    if code == errno.ECONNREFUSED:
        return "refused"
    return os.strerror(code).lower()


def probe(targets: List[Dict[str, Any]], timeout: float = CONNECT_SECONDS) -> List[Dict[str, Any]]:
    """Connect to every target (``{"address", "port", "token", ...}``) at once; the ones that
    failed, each the target as sent plus ``error`` in a few words. A target reached is one whose
    listener greeted with its ``token``: another listener there is a failure too."""
    failed: List[Dict[str, Any]] = []
    pending: Dict[socket.socket, Tuple[Dict[str, Any], bytearray]] = {}
    selector = selectors.DefaultSelector()
    resolved: Dict[Tuple[str, int], Any] = {}
    for target in targets:
        where = (str(target["address"]), int(target["port"]))
        try:
            if where not in resolved:
                resolved[where] = socket.getaddrinfo(where[0], where[1], 0, socket.SOCK_STREAM)[0]
            family, kind, proto, _, sockaddr = resolved[where]
        except (OSError, IndexError) as exc:
            failed.append(dict(target, error="cannot resolve %s: %s" % (where[0], exc)))
            continue
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        code = sock.connect_ex(sockaddr)
        if code not in (0, errno.EINPROGRESS):
            sock.close()
            failed.append(dict(target, error=_error_words(code)))
            continue
        pending[sock] = (target, bytearray())
        selector.register(sock, selectors.EVENT_WRITE)
    deadline = time.monotonic() + timeout
    while pending:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        for key, events in selector.select(left):
            sock = key.fileobj  # type: ignore[assignment]
            target, got = pending[sock]
            if events & selectors.EVENT_WRITE:
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code:
                    failed.append(dict(target, error=_error_words(code)))
                    _drop(selector, pending, sock)
                else:
                    selector.modify(sock, selectors.EVENT_READ)
                continue
            try:
                chunk = sock.recv(256)
            except OSError as exc:
                failed.append(dict(target, error=_error_words(exc.errno or 0)))
                _drop(selector, pending, sock)
                continue
            got += chunk
            if chunk and b"\n" not in got and len(got) < 256:
                continue
            said = bytes(got).decode("utf-8", "replace").split("\n", 1)[0]
            if said != GREETING + str(target.get("token", "")):
                other = said[len(GREETING):] if said.startswith(GREETING) else ""
                failed.append(dict(target, error=("answered by host %s's port instead" % other) if other
                                   else "something else answers there"))
            _drop(selector, pending, sock)
    for sock, (target, got) in list(pending.items()):
        failed.append(dict(target, error="timed out" if not got else "no answer from the port"))
        _drop(selector, pending, sock)
    selector.close()
    return failed


def _drop(selector: selectors.BaseSelector, pending: Dict[socket.socket, Any], sock: socket.socket) -> None:
    selector.unregister(sock)
    del pending[sock]
    sock.close()


def _read_line(buffer: bytearray) -> Optional[bytes]:
    """One line from stdin (``buffer`` keeps what came after it); None on EOF."""
    while b"\n" not in buffer:
        try:
            chunk = os.read(0, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            return None
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line


def hold_until_released(hold: PortHold) -> bytes:
    """Phase 2 on stdin: answer each ``ReachRequest`` line by probing its targets while the ports stay
    held; any other line lets the ports go and is returned (with whatever came after it) for the
    verb to go on with; EOF lets them go and returns b""."""
    # here, not above: the verb holds its ports, and answers the preflight, before it needs the
    # protocol's typed lines (their dataclasses cost each host ~35 ms of CPU to import)
    from launcher.protocol.agentlines import ReachAnswer, ReachRequest, decode_agent_input
    from launcher.protocol.message import Malformed

    buffer = bytearray()
    try:
        while True:
            line = _read_line(buffer)
            if line is None:
                return b""
            request = decode_agent_input(line)
            if isinstance(request, Malformed) and request.meant is ReachRequest:
                answer = ReachAnswer(error="bad reach request: %s" % request.why)
            elif not isinstance(request, ReachRequest):
                return line + b"\n" + bytes(buffer)
            else:
                try:
                    answer = ReachAnswer(probe(list(request.targets)))
                except (ValueError, TypeError, AttributeError, KeyError) as exc:
                    answer = ReachAnswer(error="bad reach request: %s" % exc)
            sys.stdout.write(answer.line() + "\n")
            sys.stdout.flush()
    finally:
        hold.close()
