"""Ports that do not speak TensorFlow's profiler, on 127.0.0.1, for `distlaunch profile`'s tests
(issue 49): real sockets, each served by a thread of the test.

- ``garbage``: answers a connection with a line of HTTP/1.0;
- ``big``: answers with up to 100 MB of bytes (as many as the peer reads);
- ``silent``: accepts and never says anything;
- ``close``: accepts and closes at once;
- ``h2silent``: greets as an HTTP/2 (gRPC) server does (an empty SETTINGS frame), then says nothing
  more: a client's call waits for an answer that never comes;
- ``closed``: a port nothing listens on.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

BIG_BYTES = 100 * 1024 * 1024
_SETTINGS = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _serve(conn: socket.socket, mode: str, stop: threading.Event) -> None:
    with conn, contextlib.suppress(OSError):
        if mode == "garbage":
            conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nnot a profiler\n")
        elif mode == "big":
            chunk = b"x" * (1 << 16)
            for _ in range(BIG_BYTES // len(chunk)):
                if stop.is_set():
                    break
                conn.sendall(chunk)
        elif mode == "h2silent":
            conn.sendall(_SETTINGS)
        conn.settimeout(0.2)
        while not stop.is_set():  # keep it open, read and drop what comes, until the peer goes
            try:
                if not conn.recv(65536):
                    return
            except TimeoutError:
                continue


@contextlib.contextmanager
def bad_port(mode: str) -> Iterator[int]:
    """A port on 127.0.0.1 that behaves as ``mode`` says, for as long as the block runs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    if mode == "closed":
        listener.close()  # the port was free a moment ago: nothing listens on it now
        yield port
        return
    listener.listen(16)
    listener.settimeout(0.2)
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except (TimeoutError, OSError):
                continue
            if mode == "close":
                conn.close()
                continue
            thread = threading.Thread(target=_serve, args=(conn, mode, stop), daemon=True)
            thread.start()
            threads.append(thread)

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    try:
        yield port
    finally:
        stop.set()
        acceptor.join(5)
        for thread in threads:
            thread.join(5)
        listener.close()
