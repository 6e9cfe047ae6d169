"""The supervisor's parts that every other part uses: the one loop, and the publishing of events
to the run dir and to the consumers' feeds.

One loop thread owns all state. Agents' events arrive from per-host follower streams and
commands from the CLI/TUI arrive as callables, both through one inbox queue (``Loop``); blocking
host operations run on one worker thread per host, so a slow host never stalls the others.

The supervisor is composed of parts, each an object of its own module with a narrow interface
(a ``Protocol`` of what it uses of the coordinator, never the coordinator's class):

    lifecycle.py   start here: a task's and the job's phases, their moves, the restarts under way
                   as values, TaskRuntime, and Lifecycle, the one writer of all of it
    core.py        this: Loop (inbox, timers), Publisher (run dir, feeds)
    links.py       HostLinks: the hosts' event streams and agent requests (follow, decode, seq,
                   clock, reconnect with back-off)
    decide.py      the restart policy, a pure function: (plan, task states, event) -> decisions
    restarts.py    Restarts: the executor of decide()'s decisions (task events in; back-off
                   timers, group stop and start, stalls, the operator's restart and stop)
    teardown.py    Teardown: the job's end: finish, teardown, sweep
    stackcapture.py, notify.py, controlsock.py: stacks, notify commands, the control server
    supervisor.py  Supervisor, the coordinator: owns the plan (a value it may replace) and the
                   parts; launch, resume (attach), the operator's actions, state.json
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable, Iterator

from launcher.events import Event
from launcher.paths import log_internal_error
from launcher.rundir import RunDir


class Feed:
    """An EventSource for one consumer: every event published after it subscribed."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[Event | list[Event] | None] = queue.SimpleQueue()
        self._closed = False

    def put(self, event: Event | None) -> None:
        if not self._closed:
            self._queue.put(event)

    def put_many(self, batch: list[Event]) -> None:
        """A run of events in one queue item: the consumer wakes once for the lot."""
        if not self._closed and batch:
            self._queue.put(batch)

    def events(self) -> Iterator[Event]:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, list):
                yield from item
            else:
                yield item

    def close(self) -> None:
        self._closed = True
        self._queue.put(None)


#: unread batches after which a client's line feed is dropped (it reattaches from the history)
MAX_BACKLOG = 20_000


class LineFeed:
    """What a client of the supervisor reads (the follow socket, controlsock.py): every event
    published after it subscribed as its JSON line, and the ``Launched`` marker line
    (protocol/controllines.py), in batches."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[list[str] | None] = queue.SimpleQueue()
        self._closed = False
        self.dropped = False  # let go for falling behind

    def put_lines(self, lines: list[str]) -> None:
        """Queue a batch; a client that has left this many unread (it stopped reading: Ctrl-Z,
        a pager) is dropped here, so its backlog cannot grow the supervisor without bound."""
        if self._closed or not lines:
            return
        if self._queue.qsize() >= MAX_BACKLOG:
            self.dropped = True
            self.close()
            return
        self._queue.put(lines)

    def batches(self) -> Iterator[list[str]]:
        while True:
            item = self._queue.get()
            if item is None:
                return
            yield item

    def close(self) -> None:
        self._closed = True
        self._queue.put(None)


class Loop:
    """The supervisor's one thread: callables from the inbox, due timers, then a tick, until done.

    An error in one item is told and logged, and the loop goes on: a loop that died (an OSError
    of a full disk, once) left the job with nobody to end it, restart its tasks or answer a stop
    signal."""

    def __init__(self, run_id: str, notice: Callable[[str], None]) -> None:
        self.run_id = run_id
        self._notice = notice
        self._inbox: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._timers: list[tuple[float, Callable[[], None]]] = []
        self.done = threading.Event()  # set once the job has ended and everything is closed
        self.thread: threading.Thread | None = None

    def call(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop (from any thread)."""
        self._inbox.put(fn)

    def after(self, delay: float, fn: Callable[[], None]) -> None:
        """Run ``fn`` on the loop in ``delay`` seconds (on the loop only)."""
        self._timers.append((time.time() + delay, fn))

    def start(self, begins: Callable[[], None], tick: Callable[[], None]) -> None:
        """Start the loop's thread: ``begins`` once, then ``tick`` after every item and due timer
        (about 5 times a second)."""
        self.thread = threading.Thread(target=self._run, args=(begins, tick), name="supervisor", daemon=True)
        self.thread.start()

    def _run(self, begins: Callable[[], None], tick: Callable[[], None]) -> None:
        begins()
        while not self.done.is_set():
            timeout = 0.2
            if self._timers:
                timeout = max(0.0, min(timeout, min(t for t, _ in self._timers) - time.time()))
            try:
                fn = self._inbox.get(timeout=timeout)
            except queue.Empty:
                fn = None
            if fn is not None:
                self._guarded(fn)
            now = time.time()
            due = [f for t, f in self._timers if t <= now]
            self._timers = [(t, f) for t, f in self._timers if t > now]
            for f in due:
                self._guarded(f)
            self._guarded(tick)

    def _guarded(self, fn: Callable[[], None]) -> None:
        try:
            fn()
        except Exception as exc:
            log = log_internal_error(f"--- supervisor {os.getpid()} of {self.run_id}: loop item failed")
            self._notice(f"internal error in the supervisor ({type(exc).__name__}: {exc}); it goes on "
                         f"(details in {log})")


class Publisher:
    """Every event of the job goes here once: into the run dir, then to every consumer's feed
    (``Feed``: the in-process ones, notify; ``LineFeed``: the control socket's clients)."""

    def __init__(self, rundir: RunDir) -> None:
        self.rundir = rundir
        self.feeds: list[Feed] = []
        self.line_feeds: list[LineFeed] = []

    def subscribe(self) -> Feed:
        feed = Feed()
        self.feeds.append(feed)
        return feed

    def publish(self, event: Event, line: str | None = None) -> None:
        if self.line_feeds and line is None:
            line = event.to_json()
        self.rundir.append(event, line)
        for feed in self.feeds:
            feed.put(event)
        for line_feed in self.line_feeds:
            line_feed.put_lines([line])  # type: ignore[list-item]  # set above whenever there are line feeds

    def publish_many(self, batch: list[tuple[Event, str | None]]) -> None:
        """Publish a run of events with one write per file and one queue item per feed."""
        if not batch:
            return
        if self.line_feeds:
            batch = [(event, line if line is not None else event.to_json()) for event, line in batch]
        self.rundir.append_many(batch)
        events = [event for event, _ in batch]
        for feed in self.feeds:
            feed.put_many(events)
        if self.line_feeds:
            lines = [line for _, line in batch if line is not None]
            for line_feed in self.line_feeds:
                line_feed.put_lines(lines)

    def close(self) -> None:
        for feed in self.feeds:
            feed.close()
        for line_feed in self.line_feeds:
            line_feed.close()
