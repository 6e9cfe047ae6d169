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
import dataclasses
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from launcher.errors import UserError
from launcher.runstate import RunState
from launcher.tfprofiler.capture import Target
from launcher.tfprofiler.place import write_new_file

#: seconds the copy of a host's files may take
FETCH_TIMEOUT_S = 300.0
#: TensorFlow's profiler names the folder of one capture by its time: 2026_01_31_12_00_00
_STAMP = re.compile(r"[0-9_]{1,64}")


def _one_line(text: str) -> str:
    return " ".join(text.split())[:200] or "no message"


def remote_script(logdir: Path) -> str:
    """Shell that prints each capture file under ``logdir`` (regular files of the user's, not links)
    as one line: its name and its bytes, both base64; nothing when ``logdir`` is not there."""
    q = shlex.quote(str(logdir))
    return (f"cd -P -- {q} 2>/dev/null || exit 0; [ -O . ] || {{ echo 'not a folder of yours' >&2; exit 3; }}; "
            "for f in plugins/profile/*/*.xplane.pb; do "
            "[ -f \"$f\" ] && [ ! -L \"$f\" ] && [ -O \"$f\" ] || continue; "
            "printf '%s' \"$f\" | base64 -w0; printf ' '; base64 -w0 < \"$f\"; echo; done")


def store(host: str, output: str, wanted: set[str], logdir: Path) -> tuple[list[str], list[str]]:
    """Write the files of ``host``'s answer ``output`` that are wanted under ``logdir``; the
    names written, and one line per thing refused."""
    written: list[str] = []
    problems: list[str] = []
    refused = 0
    for line in output.splitlines():
        if not line.strip():
            continue
        name64, _, data64 = line.partition(" ")
        try:
            name = base64.b64decode(name64, validate=True).decode("utf-8")
            data = base64.b64decode(data64, validate=True)
        except (binascii.Error, ValueError):
            refused += 1
            continue
        parts = name.split("/")
        if (len(parts) != 4 or parts[:2] != ["plugins", "profile"] or not _STAMP.fullmatch(parts[2])
                or parts[3] not in wanted):
            refused += 1
            continue
        try:
            if write_new_file(logdir, parts, data):
                written.append(name)
        except UserError as exc:  # a link or another's folder in the capture folder: nothing more of this host
            problems.append(f"host {host}: its files were not copied: {exc}")
            break
        except OSError as exc:  # a full disk
            problems.append(f"host {host}: {name} was not copied ({exc.strerror or exc})")
            break
    if refused:
        problems.append(f"host {host}: {refused} file(s) it sent were not taken (not a capture of its own tasks, "
                        f"or not in the form asked for); only {', '.join(sorted(wanted))} are copied")
    return written, problems


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
    script = remote_script(logdir)
    try:
        for name, session in sessions.items():
            if name in problems:
                continue
            try:
                result = session.host.run(script, timeout=FETCH_TIMEOUT_S)
            except UserError as exc:  # HostError: a transport that failed or timed out
                lines.append(f"host {name}: could not read {logdir} ({_one_line(str(exc))})")
                continue
            if not result.ok:
                lines.append(f"host {name}: could not read {logdir} ({_one_line(result.stderr)})")
                continue
            wanted = {t.file_name for t in targets if t.host == name}
            lines += store(name, result.stdout, wanted, logdir)[1]
    finally:
        for session in sessions.values():
            session.host.close()
    return lines
