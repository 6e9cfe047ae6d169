"""The capture files of tasks on other hosts, copied here over their transport.

A host's profiler servers wrote ``<logdir>/plugins/profile/<timestamp>/<address>_<port>.xplane.pb``
there, under the same path as here. What a host sends back is not trusted (issue 49): each file
comes as one line, ``<base64 name> <base64 bytes>``, so no name can shift the lines; a name is
taken only when it is exactly ``plugins/profile/<digits and _>/<name of one of that host's own
tasks>``, and is written under the capture folder by directory descriptor (``O_NOFOLLOW``), as a
new file, never over one (launcher/tfprofiler/place.py).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import os
import re
import shlex
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launcher.errors import UserError
from launcher.runstate import RunState
from launcher.tfprofiler.capture import Target
from launcher.tfprofiler.place import open_new_file, remove_file

#: seconds the copy of a host's files may take
FETCH_TIMEOUT_S = 300.0
#: what one host may send of one capture: files, bytes each and in all (a capture is one file per
#: task of the host, a few MiB to a few hundred); the base64 characters of a file on one line
MAX_FILES = 64
MAX_FILE_BYTES = 1 << 30
MAX_HOST_BYTES = 4 << 30
CHUNK_CHARS = 65536
#: TensorFlow's profiler names the folder of one capture by its time: 2026_01_31_12_00_00
_STAMP = re.compile(r"[0-9_]{1,64}")


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200] or "no message"


def remote_script(logdir: Path, wanted: set[str] | None = None) -> str:
    """Shell that prints each capture file under ``logdir`` (regular files of the user's, not links,
    named as one of ``wanted``, at most MAX_FILE_BYTES) as lines ``<base64 name> <base64 part>``,
    one per CHUNK_CHARS of its base64: no line outgrows what a stream keeps; nothing when
    ``logdir`` is not there."""
    q = shlex.quote(str(logdir))
    names = "|".join(shlex.quote(n) for n in sorted(wanted)) if wanted else "*"
    return (f"cd -P -- {q} 2>/dev/null || exit 0; [ -O . ] || {{ echo 'not a folder of yours' >&2; exit 3; }}; "
            "for f in plugins/profile/*/*.xplane.pb; do "
            "[ -f \"$f\" ] && [ ! -L \"$f\" ] && [ -O \"$f\" ] || continue; "
            f"case \"${{f##*/}}\" in {names}) ;; *) continue;; esac; "
            f"[ \"$(wc -c < \"$f\")\" -le {MAX_FILE_BYTES} ] || continue; "
            "n=$(printf '%s' \"$f\" | base64 -w0); "
            f"base64 -w {CHUNK_CHARS} < \"$f\" | sed \"s|^|$n |\"; done")  # base64 holds no |


class Receiver:
    """Writes the files of one host's answer as its lines come (``line``), each under ``logdir``
    when wanted, new, and within the bounds: at most MAX_FILES files (or two per task there), MAX_FILE_BYTES each and
    MAX_HOST_BYTES in all; memory holds one line at most. ``written`` and ``problems`` (one line
    per thing refused) once ``finish`` was called."""

    def __init__(self, host: str, wanted: set[str], logdir: Path) -> None:
        self.host, self.wanted, self.logdir = host, wanted, logdir
        self.written: list[str] = []
        self.problems: list[str] = []
        self.refused = 0
        self.stopped = False  # a bound or a refusal ended this host's copy: the rest is not read
        self._name: str | None = None
        self._fd: int | None = None
        self._size = 0
        self._total = 0

    def line(self, line: str) -> None:
        if self.stopped or not line.strip():
            return
        name64, _, data64 = line.partition(" ")
        try:
            name = base64.b64decode(name64, validate=True).decode("utf-8")
            data = base64.b64decode(data64, validate=True)
        except (binascii.Error, ValueError):
            self.refused += 1
            return
        try:
            if name != self._name:
                self._close()
                self._open(name)
            if self._fd is not None:
                self._append(data)
        except UserError as exc:  # a link or another's folder in the capture folder: nothing more of this host
            self._stop(f"host {self.host}: its files were not copied: {exc}")
        except OSError as exc:  # a full disk
            self._stop(f"host {self.host}: {name} was not copied ({exc.strerror or exc})")

    def _open(self, name: str) -> None:
        self._name, self._size = name, 0
        parts = name.split("/")
        if (len(parts) != 4 or parts[:2] != ["plugins", "profile"] or not _STAMP.fullmatch(parts[2])
                or parts[3] not in self.wanted):
            self.refused += 1
            return
        limit = max(MAX_FILES, 2 * len(self.wanted))
        if len(self.written) >= limit:
            self._stop(f"host {self.host}: sent more than {limit} capture files; the first {limit} "
                       "were copied, the rest left there")
            return
        self._fd = open_new_file(self.logdir, parts)
        if self._fd is not None:
            self.written.append(name)

    def _append(self, data: bytes) -> None:
        self._size += len(data)
        self._total += len(data)
        if self._size > MAX_FILE_BYTES or self._total > MAX_HOST_BYTES:
            name = self._name
            self._close(remove=True)
            self._stop(f"host {self.host}: {name} was not copied: more than "
                       f"{(MAX_FILE_BYTES if self._size > MAX_FILE_BYTES else MAX_HOST_BYTES) >> 20} MiB")
            return
        assert self._fd is not None
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]

    def _close(self, remove: bool = False) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
            if remove and self._name is not None:
                self.written.remove(self._name)
                with contextlib.suppress(OSError, UserError):
                    remove_file(self.logdir, self._name.split("/"))
        self._name = None

    def _stop(self, problem: str) -> None:
        self._close(remove=True)
        self.problems.append(problem)
        self.stopped = True

    def finish(self) -> tuple[list[str], list[str]]:
        self._close()
        if self.refused:
            self.problems.append(f"host {self.host}: {self.refused} file(s) it sent were not taken (not a capture of "
                                 f"its own tasks, or not in the form asked for); only "
                                 f"{', '.join(sorted(self.wanted))} are copied")
            self.refused = 0
        return self.written, self.problems


def store(host: str, output: str, wanted: set[str], logdir: Path) -> tuple[list[str], list[str]]:
    """Write the files of ``host``'s whole answer ``output`` as ``Receiver`` does; the names
    written, and one line per thing refused."""
    receiver = Receiver(host, wanted, logdir)
    for line in output.splitlines():
        receiver.line(line)
    return receiver.finish()


#: opens the sessions of a run's hosts (``commands.runhosts.open_sessions``): the sessions by host
#: name, and why each host that could not be reached was not
SessionOpener = Callable[[RunState], tuple[dict[str, Any], dict[str, str]]]


def fetch_remote(state: RunState, targets: list[Target], logdir: Path,
                 open_sessions: SessionOpener) -> list[str]:
    """Copy the files the servers of tasks on other hosts wrote under ``logdir`` there into
    ``logdir`` here; one line per host whose files could not be had. ``open_sessions`` reaches
    the hosts (the caller's: this package knows no command)."""
    hosts = state.hosts

    def transport(host: str) -> object:
        record = hosts.get(host)
        return (record.config or {}).get("transport") if record is not None else None

    remote = sorted({t.host for t in targets if transport(t.host) != "local"})
    if not remote:
        return []
    sessions, problems = open_sessions(dataclasses.replace(state, hosts={h: hosts[h] for h in remote if h in hosts}))
    lines = [f"host {h}: {why}" for h, why in problems.items()]
    try:
        for name, session in sessions.items():
            if name in problems:
                continue
            wanted = {t.file_name for t in targets if t.host == name}
            lines += _fetch_one(session.host, name, wanted, logdir)
    finally:
        for session in sessions.values():
            session.host.close()
    return lines


def _fetch_one(host: Any, name: str, wanted: set[str], logdir: Path) -> list[str]:
    """One host's capture files, streamed line by line into a ``Receiver`` (never the whole answer
    in memory) within FETCH_TIMEOUT_S; its problem lines."""
    receiver = Receiver(name, wanted, logdir)
    lock = threading.Lock()

    def on_line(line: str) -> None:
        with lock:
            receiver.line(line)

    try:
        stream = host.stream_lines(remote_script(logdir, wanted), on_line)
    except UserError as exc:  # HostError: a transport that failed
        return [f"host {name}: could not read {logdir} ({_one_line(str(exc))})"]
    deadline = time.monotonic() + FETCH_TIMEOUT_S
    code = None
    while code is None and time.monotonic() < deadline and not receiver.stopped:
        code = stream.wait(min(1.0, max(0.0, deadline - time.monotonic())))
    stream.close()
    with lock:
        lines = receiver.finish()[1]
    if code is None and not receiver.stopped:
        lines.append(f"host {name}: could not read {logdir} (no end within {FETCH_TIMEOUT_S:.0f} s)")
    elif code not in (None, 0):
        lines.append(f"host {name}: could not read {logdir} ({_one_line(stream.stderr_tail())})")
    return lines
