"""The job's supervisor as a process of its own, owned by no terminal.

`up` (and `attach` of a run whose supervisor died) forks the supervisor before anything else
starts a thread: the child leaves the session (``setsid``: no controlling terminal, so no SIGHUP
when the terminal or the SSH session goes), points its standard streams at the run dir's
``supervisor.log`` (stdin at /dev/null), closes every other inherited descriptor, names itself
``distlaunch-sup`` (``ps -o comm``; its command line reads ``distlaunch supervisor RUN``) and runs
the job to its end. What it prints there (progress, warnings, the one-line errors) is what `up`
relays to its own stderr, so a user's mistake found during the preflight still reads as one line
and exit code 2.

The parent only follows it (commands/follow.py); killing the parent, closing its terminal or
quitting its dashboard leaves the job supervised.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path

from launcher.errors import UserError
from launcher.paths import log_internal_error
from launcher.rundir import SUPERVISOR_LOCK, SUPERVISOR_LOG

#: the signals held back across the fork (see ``spawn``)
HELD_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
#: the supervisor's name in `ps -o comm` and /proc/PID/comm (15 characters at most)
PROCESS_NAME = "distlaunch-sup"


def spawn(run_dir: Path, run_id: str, body: Callable[[], int]) -> int:
    """Fork the supervisor of the run in ``run_dir``; it runs ``body`` and exits with its code.
    Returns the child's pid. Call it while this process has one thread: a fork keeps only the
    calling thread, and a lock another thread held would stay held in the child."""
    log = run_dir / SUPERVISOR_LOG
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    # a stop signal between the fork and the handlers on either side waits, blocked, for them:
    # the parent unblocks once its client handlers are in place (follow.py), the child below
    signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
    pid = os.fork()
    if pid:
        os.close(fd)
        return pid
    code = 1
    try:
        os.setsid()
        signal.signal(signal.SIGHUP, signal.SIG_IGN)  # no terminal: a hang-up is nobody's to send
        signal.signal(signal.SIGINT, signal.default_int_handler)  # the parent's client handlers are not ours
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _own_streams(fd)
        _name_process(f"distlaunch supervisor {run_id}")
        if not _only_supervisor(run_dir):
            code = 2
        else:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)
            code = _guarded(body)
    except BaseException:  # never back into the parent's code: a child only ever leaves by _exit
        code = 1
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)


def _own_streams(log_fd: int) -> None:
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    keep = {0, 1, 2}
    soft = os.sysconf("SC_OPEN_MAX") if hasattr(os, "sysconf") else 1024
    for extra in (null, log_fd):
        if extra not in keep:
            os.close(extra)
    # nothing of the parent's (its terminal, a pipe a test reads to its end) stays open here
    os.closerange(3, max(4, min(int(soft), 1 << 20)))
    sys.stdout = os.fdopen(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stdin = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - for the process's life


def unblock_signals() -> None:
    """The parent's half of ``spawn``'s signal hold, once its own handlers are installed."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, HELD_SIGNALS)


def _only_supervisor(run_dir: Path) -> bool:
    """Take the run's supervisor lock for this process's life; False (said) when another
    supervisor holds it: two `attach` of one lost run must not both adopt it."""
    try:
        fd = os.open(run_dir / SUPERVISOR_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        print("distlaunch: error: another supervisor already supervises this run; "
              "`distlaunch attach` follows it", file=sys.stderr, flush=True)
        return False
    return True  # the descriptor stays open, and the lock held, until the process exits


def _name_process(title: str) -> None:
    """``distlaunch-sup`` in /proc/PID/comm, and ``title`` in place of the command line the fork
    inherited from `up`: that one can hold a `--set` secret, and every user can read a process's
    command line for as long as it runs (hours, for a supervisor)."""
    with contextlib.suppress(OSError), open("/proc/self/comm", "w", encoding="ascii") as fh:
        fh.write(PROCESS_NAME)
    with contextlib.suppress(OSError, ValueError, IndexError):
        raw = Path("/proc/self/stat").read_text()
        fields = raw[raw.rindex(")") + 2:].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end: proc(5) fields 48 and 49
        room = end - start
        if room > 1:
            text = title.encode("utf-8", "replace")[:room - 1]
            ctypes.memmove(start, text + b"\0" * (room - len(text)), room)


def _guarded(body: Callable[[], int]) -> int:
    """``body``'s exit code; a user's mistake as cli.main says it (one line, its code), anything
    else as a short line with the details in the internal log."""
    try:
        return body()
    except UserError as exc:
        print(f"distlaunch: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("distlaunch: supervisor interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        log = log_internal_error(f"--- distlaunch supervisor {os.getpid()}")
        print(f"distlaunch: internal error in the supervisor: {type(exc).__name__}: {exc} (details in {log})",
              file=sys.stderr)
        return 1
