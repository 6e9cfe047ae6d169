"""The supervisor's links to the hosts: each host's event stream and the requests sent on it.

A follower stream per host delivers the agents' event lines; each is decoded, checked against the
task's sequence numbers (an event resent after an attach is dropped, a gap is told), its time
corrected by the host's clock offset, and handed to the loop in batches. Requests (``start``, ``stop``, ``stacks``) ride
the same channel with an id and wait for their answer (the lines are the agent stream of
launcher/protocol/agentlines.py). A stream that closes or falls silent is reconnected with back-off
and resumed from the offsets already received.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future
from typing import Any, Protocol

from launcher import events as ev
from launcher.errors import HostError, HostGone
from launcher.events import Event, EventDecodeError
from launcher.protocol.agentlines import (
    AgentAnswer,
    AgentOp,
    AgentRequest,
    Heartbeat,
    Note,
    Ping,
    Preempted,
    Unwritten,
    decode_agent,
)
from launcher.remote.hostclock import HostClock
from launcher.remote.session import HostSession
from launcher.supervise.hostworker import HostWorker
from launcher.transport import LineStream

RECONNECT_MAX_DELAY = 10.0
#: a follower sends at least a heartbeat every second; this much silence means the link is dead
#: (a partitioned TCP connection only errors out after minutes of retransmissions)
STREAM_SILENCE_SECONDS = 5.0
#: followers touch their host's lease only while these pings arrive (agent `follow --pinged`)
PING_SECONDS = 1.0
#: how long a start sent on a follow channel may wait for the host agent's answer
AGENT_REQUEST_SECONDS = 60.0
#: a ping's bytes (an empty line), sent every PING_SECONDS
PING = Ping().encode()


class LinkOwner(Protocol):
    """What the links use of the supervisor."""

    @property
    def run_id(self) -> str: ...
    @property
    def sessions(self) -> Mapping[str, HostSession]: ...
    @property
    def workers(self) -> Mapping[str, HostWorker]: ...
    @property
    def finishing(self) -> bool: ...
    def knows(self, task: str) -> bool: ...
    def call(self, fn: Callable[[], None]) -> None: ...
    def publish(self, event: Event, line: str | None = None) -> None: ...
    def notice(self, message: str) -> None: ...
    def finish(self, state: str, reason: str) -> None: ...
    def on_events(self, events: Iterable[tuple[Event, str | None]]) -> None: ...
    def host_link(self, host: str, up: bool, why: str) -> None: ...
    def host_returned(self, host: str) -> None: ...
    def on_preempted(self, host: str, why: str) -> None: ...


class HostLinks:
    """Follow every host's agents, send them requests, and keep the links up."""

    def __init__(self, sup: LinkOwner, hosts: Iterable[str]) -> None:
        self.sup = sup
        hosts = list(hosts)
        self.streams: dict[str, LineStream] = {}
        self.offsets: dict[str, dict[str, int]] = {h: {} for h in hosts}
        self.host_up: dict[str, bool] = dict.fromkeys(hosts, True)
        self._clocks = {h: HostClock() for h in hosts}
        self._send_locks = {h: threading.Lock() for h in hosts}  # pings and requests on a follow channel
        self._requests: dict[int, tuple[str, Future[dict[str, Any] | None]]] = {}
        self._request_ids = itertools.count(1)
        self.last_seq: dict[str, int] = {}  # per task, the last agent event recorded
        self.lost_events: dict[str, int] = {}
        self._last_heard: dict[str, float] = {}  # monotonic time of each host's last stream line
        #: hosts out of the job (lost, drained): never followed again, only retired if they come back
        self.retired: set[str] = set()

    def is_up(self, host: str) -> bool:
        """The host's stream is up (False for a host the links do not know)."""
        return self.host_up.get(host, False)

    def silent_for(self, host: str) -> float | None:
        """Seconds since the host's last line while its link is down (None while it is up)."""
        if self.host_up.get(host, True) and host not in self.retired:
            return None
        heard = self._last_heard.get(host)
        return None if heard is None else time.monotonic() - heard

    def last_contact(self) -> dict[str, float]:
        """Each host's last line, on this machine's monotonic clock (state.json: an attach on the same
        boot counts a host's silence from there, not from its own start)."""
        return dict(self._last_heard)

    def heard_at(self, recorded: Mapping[str, float]) -> None:
        """Attach: the last supervisor's last contact with each host (same boot only)."""
        now = time.monotonic()
        for host, at in recorded.items():
            if host in self.offsets and at <= now:
                self._last_heard[host] = at

    def retire(self, host: str) -> None:
        """On the loop: the host left the job. Its stream is closed (its end is no loss any more),
        and it is only watched for its return, when it is told the run left it."""
        if host in self.retired:
            return
        self.retired.add(host)
        self.host_up[host] = False
        stream = self.streams.pop(host, None)
        if stream is not None:
            self.sup.workers[host].submit(stream.close)
        # a host that was down has its reconnect loop under way: it sees the host retired, and
        # retires it if it comes back

    def add_host(self, host: str) -> None:
        """On the loop, before it is followed: a host added to the running job (add-host)."""
        self.offsets.setdefault(host, {})
        self.host_up.setdefault(host, True)
        self._clocks.setdefault(host, HostClock())
        self._send_locks.setdefault(host, threading.Lock())

    def readmit(self, host: str, offsets: Mapping[str, int]) -> None:
        """On the loop: a host re-admitted as a new incarnation is followed again, from ``offsets``
        (where its old incarnation's events end: none of them is read)."""
        self.retired.discard(host)
        self.offsets[host] = {**self.offsets.get(host, {}), **offsets}
        self._last_heard[host] = time.monotonic()
        try:
            self.start_follower(host)
        except HostError:
            self.sup.workers[host].submit(self.reconnect, host, 1.0)
            return
        self.host_up[host] = True

    def forget_task(self, task: str) -> None:
        """The task left its host: its events start again at seq 0 where it goes."""
        self.last_seq.pop(task, None)

    def resume_from(self, offsets: Mapping[str, Mapping[str, int]], history: Iterable[Event],
                    lost_events: Mapping[str, int]) -> None:
        """Attach: go on from the offsets and sequence numbers the last supervisor had reached."""
        for host, by_slug in offsets.items():
            if host in self.offsets:
                self.offsets[host] = {slug: int(n) for slug, n in by_slug.items()}
        for event in history:
            seq = event.seq
            if event.task is not None and seq is not None:
                if isinstance(event, ev.StateEvent) and event.moved_from:  # its new host numbers from 0
                    self.last_seq[event.task] = seq
                    continue
                self.last_seq[event.task] = max(seq, self.last_seq.get(event.task, -1))
        self.lost_events = dict(lost_events)

    def reconnect_unreachable(self, host: str, why: str) -> None:
        """Attach: a host that did not answer is reconnected in the background."""
        self.host_up[host] = False
        self._last_heard.setdefault(host, time.monotonic())  # lost after host_lost_seconds from here at most
        self.sup.call(functools.partial(self.sup.host_link, host, False, f"{why}; reconnecting"))
        self.sup.call(functools.partial(self.sup.publish, ev.host_event(self.sup.run_id, host, ev.HOST_UNREACHABLE,
                                                                        f"{why}; reconnecting")))
        self.sup.workers[host].submit(self.reconnect, host, 1.0)

    def close_streams(self) -> None:
        for stream in self.streams.values():
            stream.close()

    def ask_agent(self, host: str, request: AgentOp,
                  timeout: float = AGENT_REQUEST_SECONDS) -> dict[str, Any] | None:
        """Send ``request`` on the host's follow channel (an ``AgentRequest``) and wait for its
        ``AgentAnswer``; None when there is no live channel to send it on, or it ended before the
        answer came (the caller uses the verb then; a live agent refuses to start a task twice)."""
        stream = self.streams.get(host)
        if stream is None or not self.host_up.get(host):
            return None
        request_id = next(self._request_ids)
        answer: Future[dict[str, Any] | None] = Future()
        self._requests[request_id] = (host, answer)
        line = AgentRequest(request, request_id).encode()
        with self._send_locks[host]:
            sent = stream.send(line, timeout)
        if not sent:
            self._requests.pop(request_id, None)
            return None
        try:
            return answer.result(timeout)  # None: the channel ended; the caller uses the verb
        except TimeoutError:
            raise HostError(f"host {host}: its agent did not answer within {timeout:g} s") from None
        finally:
            self._requests.pop(request_id, None)

    def _on_answer(self, answer: AgentAnswer) -> None:
        waiting = self._requests.get(answer.id) if answer.id is not None else None
        if waiting is not None and not waiting[1].done():
            waiting[1].set_result(answer.body)

    def _fail_requests(self, host: str) -> None:
        """The host's follow channel ended: requests waiting on it go by the `start` verb instead."""
        for where, waiting in list(self._requests.values()):
            if where == host and not waiting.done():
                waiting.set_result(None)

    def start_follower(self, host: str) -> None:
        session = self.sup.sessions[host]
        offsets = dict(self.offsets[host])

        pending: list[tuple[str, float]] = []
        pending_lock = threading.Lock()

        def drain() -> None:
            with pending_lock:
                batch = pending[:]
                pending.clear()
            self.on_lines(host, batch)

        def on_line(line: str) -> None:
            self._last_heard[host] = time.monotonic()  # here, not on the loop: a busy loop is no silence
            message = decode_agent(line)
            if isinstance(message, AgentAnswer):  # to ask_agent, whose caller waits on a host thread
                self._on_answer(message)
                return
            with pending_lock:  # lines that arrive while the loop is busy go to it in one call
                pending.append((line, time.time()))
                first = len(pending) == 1
            if first:
                self.sup.call(drain)

        def on_close(code: int | None) -> None:
            self._fail_requests(host)
            self.sup.call(lambda: self._on_stream_closed(host, stream))

        self._last_heard[host] = time.monotonic()
        channel = session.take_channel()  # the preflight's channel, waiting to become this stream
        stream: LineStream
        if channel is not None:
            stream = self.streams[host] = channel  # before attach: a channel that ended is told at once
            channel.attach(on_line, on_close)
            return
        stream = session.follow(offsets, on_line, on_close)
        self.streams[host] = stream

    def on_lines(self, host: str, batch: list[tuple[str, float]]) -> None:
        """The lines a host's stream delivered while the loop was busy, in order, handed to the
        supervisor as events, each decoded as it is taken (so the offsets and sequence numbers
        advance with what was handled)."""
        self.sup.on_events(self._events(host, batch))

    def _events(self, host: str, batch: list[tuple[str, float]]) -> Iterator[tuple[Event, str | None]]:
        for line, received in batch:
            decoded = self._decode(host, line, received)
            if decoded is not None:
                yield decoded

    def _decode(self, host: str, line: str, received: float) -> tuple[Event, str | None] | None:
        """The event a stream line carries and the text to store for it (None: encode it again),
        or None for a heartbeat, an undecodable line or an event already recorded."""
        message = decode_agent(line)
        if isinstance(message, str):
            return self._decode_event(host, message, received, in_file=True)
        if isinstance(message, Heartbeat):
            self._observe_clock(host, message.ts, received)
        elif isinstance(message, Note):
            return self._note(host, message)
        elif isinstance(message, Unwritten):  # an event its host could not write (a full disk)
            return self._decode_event(host, message.event, received, in_file=False)
        elif isinstance(message, Preempted):
            self.sup.on_preempted(host, message.reason)
        return None  # anything else: an answer no one waits for any more, a marker of a newer agent

    def _decode_event(self, host: str, line: str, received: float, in_file: bool) -> tuple[Event, str | None] | None:
        """``in_file``: the line is in the task's event file on the host, and moves the offset a
        later follower resumes from."""
        try:
            event = Event.from_json(line)
        except EventDecodeError:
            return None
        if event.task is not None:
            if in_file:
                slug = event.task.replace(":", "-")
                offsets = self.offsets[host]
                size = len(line) if line.isascii() else len(line.encode())
                offsets[slug] = offsets.get(slug, 0) + size + 1
            if not self._in_sequence(event):
                return None
        ts = self._clocks[host].correct(event.ts, received)
        if ts == event.ts:
            return event, line
        # a host whose clock is off: its times moved onto ours
        data = dict(event.data)
        if isinstance(event, ev.StateEvent) and event.exited_at is not None:  # the task's end, for the root cause
            data["exited_at"] = self._clocks[host].correct(float(event.exited_at), received)
        return dataclasses.replace(event, ts=ts, data=data), None

    def _note(self, host: str, note: Note) -> tuple[Event, str | None] | None:
        """An agent's word that is in no event file (its disk is full): a task's condition."""
        if not self.sup.knows(note.task):
            return None
        return ev.condition_event(self.sup.run_id, note.task, note.condition, note.active,
                                  f"{note.reason} (host {host})" if note.reason else ""), None

    def _in_sequence(self, event: Event) -> bool:
        """False for an event already recorded (a resend after attach from older offsets);
        a gap in the task's ``seq`` is told and kept in state.json."""
        seq = event.seq
        task = str(event.task)
        if seq is None:
            return True
        last = self.last_seq.get(task, -1)
        if seq <= last:
            return False
        if seq > last + 1:
            missing = seq - last - 1
            self.lost_events[task] = self.lost_events.get(task, 0) + missing
            self.sup.notice(f"{task}: {missing} event(s) lost between its agent and the launcher "
                         f"(seq {last + 1}..{seq - 1})")
        self.last_seq[task] = seq
        return True

    def _observe_clock(self, host: str, host_ts: float, received: float) -> None:
        clock = self._clocks[host]
        was_off = clock.offset != 0.0
        clock.observe(host_ts, received)
        if clock.offset != 0.0 and not was_off:
            self.sup.notice(f"host {host}: {clock.describe()}; its event times are corrected by the launcher "
                         "(sync its clock with NTP)")

    def _on_stream_closed(self, host: str, stream: LineStream, why: str = "event stream lost") -> None:
        if self.sup.finishing or self.streams.get(host) is not stream or host in self.retired:
            return
        self.host_up[host] = False
        del self.streams[host]  # its late on_close must not count as a second loss
        self.sup.host_link(host, False, f"{why}; reconnecting")
        self.sup.publish(ev.host_event(self.sup.run_id, host, ev.HOST_UNREACHABLE, f"{why}; reconnecting"))
        self.sup.workers[host].submit(stream.close)  # off the loop: closing may wait for its reader
        self.sup.workers[host].submit(self.reconnect, host, 1.0)

    def ping_streams(self, done: threading.Event) -> None:
        """Tell every follower the launcher still reads it; on its own thread, as a send into a
        dead link may block. Without pings a partitioned host's follower would keep the lease fresh."""
        while not done.wait(PING_SECONDS):
            for host, stream in list(self.streams.items()):
                with self._send_locks[host]:  # never inside a request line
                    stream.send(PING)

    def check_silence(self) -> None:
        """Treat a stream that sent nothing, not even a heartbeat, for STREAM_SILENCE_SECONDS as lost."""
        if self.sup.finishing:
            return
        now = time.monotonic()
        for host, stream in list(self.streams.items()):
            silent = now - self._last_heard.get(host, now)
            if self.host_up[host] and silent > STREAM_SILENCE_SECONDS and host not in self.retired:
                self._on_stream_closed(host, stream, f"no heartbeat for {silent:.0f}s")

    def reconnect(self, host: str, delay: float) -> None:
        """On the host's thread: reconnect with back-off; the loop then resumes the stream."""
        session = self.sup.sessions[host]
        while not self.sup.finishing:
            time.sleep(delay)
            try:
                session.host.close()
                session.host.connect()
                if host in self.retired:  # back after the run left it: it runs nothing of the run again
                    self.sup.host_returned(host)
                    return
            except HostGone as exc:  # e.g. the Slurm allocation ended: the job cannot go on
                self.sup.call(functools.partial(self.sup.finish, ev.JOB_FAILED, str(exc)))
                return
            except HostError:
                delay = min(delay * 2, RECONNECT_MAX_DELAY)
                continue
            self.sup.call(functools.partial(self._resume_stream, host, delay))
            return

    def _resume_stream(self, host: str, delay: float) -> None:
        """On the loop: follow the host's agents again from the offsets already received."""
        if self.sup.finishing:
            return
        if host in self.retired:  # lost meanwhile: only told the run left it
            self.sup.workers[host].submit(self.sup.host_returned, host)
            return
        try:
            self.start_follower(host)
        except HostError:
            self.sup.workers[host].submit(self.reconnect, host, min(delay * 2, RECONNECT_MAX_DELAY))
            return
        self.host_up[host] = True
        self.sup.host_link(host, True, "reconnected")
        self.sup.publish(ev.host_event(self.sup.run_id, host, ev.HOST_UP, "reconnected"))
