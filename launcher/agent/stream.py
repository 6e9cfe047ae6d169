"""Events to followers: every written event line pushed as it happens, after a catch-up from files.

The host agent's ``EventWriter``s publish each line they append, under the lock they share with
``EventHub.follow``. A follower that joins reads each task's file from its byte offset up to
the size the file had when it joined, then gets every later line pushed: each line exactly
once, in file order per task, with no file polling. A ``Heartbeat`` (the host's time) goes out
every second, busy or not (the launcher estimates the host's clock from it and tells a dead link
by its absence). Any bytes a follower sends are pings: the launcher still reads it. The lines
are the agent stream of ``launcher/protocol/agentlines.py``.

All of the host agent's ``EventWriter``s share one lock with the ``EventHub``. A follower
(``follow`` verb, run over SSH or locally by the launcher) connects to ``agent.sock`` and sends its
per-task byte offsets; under the lock the hub notes each file's size and registers it, then sends
each file from its offset to that size (catch-up) and afterwards every line a writer appends, at
most one send per follower every 20 ms (lines that come meanwhile go out together: one SSH packet
and one wake-up of the launcher for many lines), plus ``#hb <host time>`` every second. On the
launcher, lines that arrive while the supervisor loop is busy reach it in one call
(``HostLinks.on_lines``, which hands them to ``Restarts.on_events`` decoded); it publishes runs of
metric and log events together (one write per run-dir file, one item per subscriber feed) and
publishes and acts on a task's state change in its place, so the run dir and every feed keep the
stream's order. Each line reaches a follower exactly once, in file order per task, with no file
polling. What the follow verb reads on stdin goes to the agent as is: an empty line is a ping (the
launcher sends one every second), a JSON line is a request (the launcher's ``start``, with the specs
and secrets, or ``stacks``), answered with a ``#re <json>`` line on the same stream; so a
start costs no SSH exec and no Python boot. The launcher sends both under one lock per host, so a
ping never lands inside a request, and falls back to the ``start`` verb when the host has no live
stream or it ends before the answer; while a fresh ping came (or an unpinged follower is connected)
the agent touches ``lease``.

Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Union

from launcher.protocol.agentlines import AgentAnswer, AgentOp, AgentRequest, Heartbeat, decode_agent_input
from launcher.protocol.message import Malformed

HEARTBEAT_SECONDS = 1.0
#: a ping this recent means the launcher still reads its follower (it pings every second)
PING_FRESH_SECONDS = 2.5
#: catch-up is sent in pieces of this size, so a long history never sits in memory at once
CATCHUP_CHUNK = 1024 * 1024
#: at most one send per follower in this time: lines that come meanwhile go out together
COALESCE_SECONDS = 0.02
#: an answer's key (removed before it is sent) for a callable run once the answer is queued
THEN_KEY = "_then"
#: how long an ending agent waits for each follower's last lines to be sent
FLUSH_SECONDS = 2.0


class Follower:
    """One connected follower: its queue of pushed lines and when it last pinged."""

    def __init__(self, sock: socket.socket, pinged: bool) -> None:
        self.sock = sock
        self.pinged = pinged
        self.last_ping = time.monotonic()
        self.pending: List[bytes] = []
        self.cond = threading.Condition(threading.Lock())
        self.closed = False
        self.flush_on_close = False
        self.sender: Optional[threading.Thread] = None

    def push(self, data: bytes) -> None:
        with self.cond:
            self.pending.append(data)
            if len(self.pending) == 1:
                self.cond.notify()

    def close(self, flush: bool = False) -> None:
        with self.cond:
            self.closed = True
            self.flush_on_close = flush
            self.cond.notify()
        if self.sender is not None and flush:
            self.sender.join(FLUSH_SECONDS)
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)

    def fresh(self, now: float) -> bool:
        return not self.pinged or now - self.last_ping <= PING_FRESH_SECONDS


class EventHub:
    def __init__(self, tasks_dir: str, lock: Any,
                 on_request: Optional[Callable[[AgentOp], Dict[str, Any]]] = None) -> None:
        self.tasks_dir = tasks_dir
        self.lock = lock  # shared with every EventWriter of the host agent
        self.on_request = on_request  # a follower's requests: each answered (AgentAnswer) on its stream
        self._followers: List[Follower] = []
        self.last_follower_left = time.monotonic()

    # called by EventWriter._append under self.lock
    def publish(self, slug: str, data: bytes) -> None:
        for follower in self._followers:
            follower.push(data)

    def launcher_present(self, now: float) -> bool:
        return any(f.fresh(now) for f in list(self._followers))

    @property
    def followers(self) -> int:
        return len(self._followers)

    def close_all(self) -> None:
        """The agent ends: every follower gets what is queued for it, then its connection closes."""
        for follower in list(self._followers):
            follower.close(flush=True)

    def follow(self, sock: socket.socket, offsets: Dict[str, int], pinged: bool, first: bytes = b"") -> None:
        """Serve one follower on this (its connection's) thread until it goes away; ``first`` is
        what it sent after its follow request in the same read."""
        follower = Follower(sock, pinged)
        with self.lock:
            sizes = self._sizes()
            self._followers.append(follower)
        sender = threading.Thread(target=self._send, args=(follower, offsets, sizes), name="send", daemon=True)
        follower.sender = sender
        sender.start()
        pending = b""
        data = first
        try:
            while True:
                if not data:
                    data = sock.recv(65536)
                    if not data:
                        break
                follower.last_ping = time.monotonic()
                pending += data
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    request = decode_agent_input(line) if self.on_request is not None else None
                    if isinstance(request, AgentRequest) or (isinstance(request, Malformed)
                                                             and request.meant is AgentRequest):
                        threading.Thread(target=self._answer, args=(follower, request), name="request",
                                         daemon=True).start()
                data = b""
        except OSError:
            pass
        finally:
            with self.lock:
                if follower in self._followers:
                    self._followers.remove(follower)
                if not self._followers:
                    self.last_follower_left = time.monotonic()
            follower.close()
            sender.join(5.0)
            with contextlib.suppress(OSError):
                sock.close()

    def _answer(self, follower: Follower, request: Union[AgentRequest, Malformed]) -> None:
        asked = request.request if isinstance(request, AgentRequest) else request
        if isinstance(asked, Malformed):  # a bad request is answered, never fatal to the stream
            answer: Dict[str, Any] = {"error": asked.why}
        else:
            try:
                assert self.on_request is not None
                answer = self.on_request(asked)
            except Exception as exc:
                answer = {"error": "%s: %s" % (type(exc).__name__, exc)}
        then = answer.pop(THEN_KEY, None)  # what to do once the answer is queued (the agent's end)
        follower.push(AgentAnswer(answer, request.id if isinstance(request, AgentRequest) else None).encode())
        if callable(then):
            then()

    def _sizes(self) -> Dict[str, int]:
        sizes: Dict[str, int] = {}
        try:
            slugs = os.listdir(self.tasks_dir)
        except OSError:
            return sizes
        for slug in slugs:
            with contextlib.suppress(OSError):
                sizes[slug] = _whole_lines_end(os.path.join(self.tasks_dir, slug, "events.jsonl"))
        return sizes

    def _catch_up(self, follower: Follower, offsets: Dict[str, int], sizes: Dict[str, int]) -> None:
        for slug in sorted(sizes):
            start, end = offsets.get(slug, 0), sizes[slug]
            if start >= end:
                continue
            with open(os.path.join(self.tasks_dir, slug, "events.jsonl"), "rb") as f:
                f.seek(start)
                while start < end and not follower.closed:
                    data = f.read(min(CATCHUP_CHUNK, end - start))
                    if not data:
                        break
                    start += len(data)
                    follower.sock.sendall(data)

    def _send(self, follower: Follower, offsets: Dict[str, int], sizes: Dict[str, int]) -> None:
        try:
            self._catch_up(follower, offsets, sizes)
            next_hb = 0.0
            last_send = 0.0
            while True:
                with follower.cond:
                    if not follower.pending and not follower.closed:
                        follower.cond.wait(max(0.0, next_hb - time.monotonic()))
                    early = COALESCE_SECONDS - (time.monotonic() - last_send)
                    if early > 0 and follower.pending and not follower.closed:
                        # a send went out moments ago: let more lines join this one (one SSH packet
                        # and one wake-up of the launcher's reader for many lines)
                        follower.cond.wait(early)
                    batch, follower.pending = follower.pending, []
                    closed = follower.closed
                if closed:
                    if batch and follower.flush_on_close:  # the agent is ending: its last lines still go
                        follower.sock.sendall(b"".join(batch))
                    return
                now = time.monotonic()
                if now >= next_hb:
                    batch.append(Heartbeat(time.time()).encode())
                    next_hb = now + HEARTBEAT_SECONDS
                if batch:
                    follower.sock.sendall(b"".join(batch))
                    last_send = time.monotonic()
        except OSError:
            follower.close()


def _whole_lines_end(path: str) -> int:
    """The file's size, less a partial last line (a writer killed mid-line): never sent as a line."""
    size = os.stat(path).st_size
    if size == 0:
        return 0
    with open(path, "rb") as f:
        back = min(size, 64 * 1024)
        f.seek(size - back)
        tail = f.read(back)
    cut = tail.rfind(b"\n")
    return size - back + cut + 1 if cut >= 0 else size - back


def parse_offsets(items: List[str]) -> Dict[str, int]:
    offsets: Dict[str, int] = {}
    for item in items:
        slug, sep, value = item.partition("=")
        if not sep:
            raise ValueError("--offset wants SLUG=BYTES, got %r" % item)
        offsets[slug] = int(value)
    return offsets

