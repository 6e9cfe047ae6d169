"""What signals do to a job's supervisor and to the clients that follow it (`up`, `attach`).

SIGINT and SIGTERM stop the job: the same teardown as the dashboard's `D` (tasks stopped with
their grace, the sweep, the report), with a reason that names the signal, and exit code 130 /
143. `timeout`, systemd and a terminal's Ctrl-C signal the whole process group, so one stop
often arrives twice within milliseconds: a second stop signal within ``SAME_STOP_SECONDS`` of
the first is the same stop. A later second Ctrl-C abandons the wait (the hosts' agents then stop
what is left after the orphan grace); a later SIGTERM is still the same stop.

SIGHUP (the terminal or the SSH session to the login node went away) ends only the client that
had the terminal: the job's supervisor is a process of its own, without a terminal, and goes on.

A handler runs on the main thread between two bytecodes, wherever that thread was: it only puts
requests on the supervisor's queue, writes with ``os.write`` and swaps file descriptors.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from launcher.supervise.supervisor import Supervisor

#: a second stop signal this soon after the first is the same stop (a process group signalled)
SAME_STOP_SECONDS = 2.0

STOP_REASONS: dict[int, str] = {signal.SIGINT: "stopped by SIGINT (Ctrl-C)", signal.SIGTERM: "stopped by SIGTERM"}


def say(text: str) -> None:
    """A raw write to stderr: a handler may have interrupted a print there, whose buffer it must
    not enter again."""
    with contextlib.suppress(OSError, ValueError):  # no real stderr (a test's capture), or gone
        os.write(sys.stderr.fileno(), f"distlaunch: {text}\n".encode())


def terminal_fds() -> list[int]:
    """The standard streams that are terminals (asked before a hang-up: after it, isatty says no)."""
    return [fd for fd in (0, 1, 2) if os.isatty(fd)]


def release_terminal(fds: list[int]) -> None:
    """Point ``fds`` (the streams that were terminals) at /dev/null: after a hang-up, writing to
    the terminal fails (EIO) and a dashboard must not draw on it."""
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in fds:
            with contextlib.suppress(OSError):
                os.dup2(null, fd)
    finally:
        os.close(null)


class StopSignals:
    """Installs the handlers for as long as it is entered (main thread only).

    ``on_stop(reason, origin)`` tears the job down; ``on_hangup()`` detaches it. ``leave``, set by
    a dashboard while it runs, asks it to quit (signal-safe)."""

    def __init__(self, on_stop: Callable[[str, str], None], on_hangup: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic,
                 signums: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)) -> None:
        """``signums``: the signals handled (`attach` leaves SIGINT to its own detach on Ctrl-C)."""
        self.signums = signums
        self.on_stop = on_stop
        self.on_hangup = on_hangup
        self.leave: Callable[[], None] | None = None
        #: say the stop on stderr (a client whose supervisor says it itself does not)
        self.announce = True
        #: a later Ctrl-C abandons the wait (a client; a supervisor, whose wait is the teardown, never)
        self.may_abandon = True
        #: what a later Ctrl-C that abandons the wait says
        self.abandon_text = ("abandoned the wait: the hosts' agents finish the stop they were asked for, or stop "
                             "what is left after the orphan grace")
        self.clock = clock
        self.signum: int | None = None  # the stop signal, once one came
        self.hung_up = False
        self._first_at = 0.0
        self._old: dict[int, Any] = {}
        self._terminal_fds: list[int] = []

    @property
    def exit_code(self) -> int | None:
        """128 + the stop signal's number (130 for SIGINT, 143 for SIGTERM); None: no stop signal."""
        return 128 + self.signum if self.signum is not None else None

    def __enter__(self) -> StopSignals:
        self._terminal_fds = terminal_fds()
        for signum in self.signums:
            self._old[signum] = signal.signal(signum, self._on_signal)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for signum, old in self._old.items():
            signal.signal(signum, old)
        self._old.clear()

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if signum == signal.SIGHUP:
            self._on_hangup()
            return
        now = self.clock()
        if self.signum is None and not self.hung_up:
            self.signum, self._first_at = signum, now
            name = signal.Signals(signum).name
            later = " (Ctrl-C again after 2 s abandons the wait)" if signum == signal.SIGINT else ""
            if self.announce:
                say(f"{STOP_REASONS[signum]}: tearing the job down{later}")
            self.on_stop(STOP_REASONS[signum], name)
            self._leave()
            return
        if signum == signal.SIGINT and self.signum is not None and now - self._first_at >= SAME_STOP_SECONDS \
                and self.may_abandon:
            say(self.abandon_text)
            raise KeyboardInterrupt  # the user does not want to wait for the teardown any more
        # otherwise: the same stop, signalled again (the process group, or impatience)

    def _on_hangup(self) -> None:
        if self.hung_up:
            return
        self.hung_up = True
        release_terminal(self._terminal_fds)
        if self.signum is not None:
            return  # a stop is under way: it goes on, only the terminal is gone
        self.on_hangup()
        self._leave()

    def _leave(self) -> None:
        if self.leave is not None:
            self.leave()


class StoppedBeforeStart(BaseException):
    """A stop signal came while the hosts were prepared, before any task started. Raised in the
    main thread wherever it was, so (like KeyboardInterrupt) no ``except Exception`` on the way
    may take it for a host's error and go on with the launch."""


class JobSignals(StopSignals):
    """The stop signals of a job's supervisor, from before the preflight on. Until ``bind`` gives
    the job's supervisor, a stop signal raises ``StoppedBeforeStart`` in the main thread (the
    preflight closes every host's channel on its way out: no host agent was started). The
    supervisor has no terminal: a SIGHUP someone sends it is ignored (supervise/daemon.py)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(self._stop, lambda: None, signums=(signal.SIGINT, signal.SIGTERM))
        self.may_abandon = False  # nobody is waiting on a supervisor: its teardown always finishes
        self.run_id = run_id
        self.sup: Supervisor | None = None

    def bind(self, sup: Supervisor) -> None:
        """From here on a stop tears ``sup``'s job down. A stop that came before and was lost on
        its way up (raised where something caught it) stops the launch here."""
        if self.signum is not None:
            raise StoppedBeforeStart(STOP_REASONS[self.signum])
        self.sup = sup

    def _stop(self, reason: str, origin: str) -> None:
        if self.sup is None:
            raise StoppedBeforeStart(reason)
        self.sup.teardown(reason, origin)
