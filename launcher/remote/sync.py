"""Code to the hosts: ``[sync]`` copies the changed files of a launcher-side folder to each host's workdir.

Before any task starts, every host is asked which files of the source differ (size or mtime) in each
workdir its tasks use; only those travel, as one tar archive per workdir over the host's existing
connection (SSH exec channel, or a local shell), unpacked with their mtimes so the next run sends
nothing that did not change. ``exclude`` takes gitignore-style patterns; ``.git/`` is always left out.
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
import shlex
import tarfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import HostError
from launcher.model import Plan
from launcher.remote.session import HostSession
from launcher.telemetry.progressline import Progress

ALWAYS_EXCLUDED = (".git/",)
#: above this many bytes to one host, a warning says to exclude data folders
WARN_BYTES = 100 * 1024 * 1024
#: one tar archive holds at most this much (it travels in memory)
BATCH_BYTES = 64 * 1024 * 1024

# Runs on the host with its own python: which of the listed files differ from the launcher's copy.
_DIFF_SCRIPT = """
import json, os, sys
root = os.path.expanduser(sys.argv[1])
need = []
for rel, size, mtime in json.load(sys.stdin):
    try:
        st = os.stat(os.path.join(root, rel))
    except OSError:
        need.append(rel)
        continue
    if st.st_size != size or int(st.st_mtime) != mtime:
        need.append(rel)
print(json.dumps(need))
"""


@dataclass(frozen=True)
class SourceFile:
    rel: str  # posix path under the source
    size: int
    mtime: int  # whole seconds, as tar keeps them


class Excludes:
    """gitignore-style patterns: ``dir/`` matches folders, a leading ``/`` anchors at the source's top,
    a pattern without ``/`` matches a name at any depth, ``*``, ``?`` and ``**`` as in gitignore."""

    def __init__(self, patterns: Iterable[str]) -> None:
        self._rules: list[tuple[str, bool, bool]] = []  # (glob, folders only, anchored)
        for raw in [*ALWAYS_EXCLUDED, *patterns]:
            pattern = raw.strip()
            if not pattern or pattern.startswith("#"):
                continue
            folders = pattern.endswith("/")
            pattern = pattern.rstrip("/")
            anchored = "/" in pattern
            self._rules.append((pattern.lstrip("/"), folders, anchored))

    def excluded(self, rel: str, is_dir: bool) -> bool:
        name = rel.rsplit("/", 1)[-1]
        for glob, folders, anchored in self._rules:
            if folders and not is_dir:
                continue
            if anchored:
                if fnmatch.fnmatchcase(rel, glob) or fnmatch.fnmatchcase(rel, glob.replace("**/", "")):
                    return True
            elif fnmatch.fnmatchcase(name, glob):
                return True
        return False


def collect(source: Path, excludes: Excludes) -> list[SourceFile]:
    """Every regular file under ``source`` that no pattern excludes (excluded folders are not entered)."""
    files: list[SourceFile] = []
    for top, dirs, names in os.walk(source):
        rel_top = os.path.relpath(top, source)
        prefix = "" if rel_top == "." else rel_top.replace(os.sep, "/") + "/"
        dirs[:] = sorted(d for d in dirs if not excludes.excluded(prefix + d, True))
        for name in sorted(names):
            rel = prefix + name
            path = os.path.join(top, name)
            if excludes.excluded(rel, False) or not os.path.isfile(path) or os.path.islink(path):
                continue
            st = os.stat(path)
            files.append(SourceFile(rel, st.st_size, int(st.st_mtime)))
    return files


def targets(plan: Plan, source: Path) -> dict[str, list[str]]:
    """host -> the workdirs its tasks run in that need the source (a local host's source itself is skipped)."""
    found: dict[str, list[str]] = {}
    for task in plan.tasks:
        host = plan.profile.hosts[task.host]
        if host.transport == "local" and Path(task.workdir).resolve() == source.resolve():
            continue
        dirs = found.setdefault(task.host, [])
        if task.workdir not in dirs:
            dirs.append(task.workdir)
    return found


def changed(session: HostSession, workdir: str, files: list[SourceFile]) -> list[str]:
    manifest = json.dumps([[f.rel, f.size, f.mtime] for f in files]).encode()
    command = f"{shlex.quote(session.python)} -c {shlex.quote(_DIFF_SCRIPT)} {shlex.quote(workdir)}"
    result = session.host.run(command, timeout=300, stdin=manifest)
    if not result.ok:
        detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise HostError(f"host {session.name}: cannot compare {workdir} with the sync source: {detail}")
    need: list[str] = json.loads(result.stdout.strip().splitlines()[-1])
    return need


def send(session: HostSession, workdir: str, source: Path, files: list[SourceFile]) -> None:
    """The files, in tar archives of at most BATCH_BYTES, unpacked into ``workdir`` (created if missing)."""
    batch: list[SourceFile] = []
    size = 0
    for f in files:
        if batch and size + f.size > BATCH_BYTES:
            _send_batch(session, workdir, source, batch)
            batch, size = [], 0
        batch.append(f)
        size += f.size
    if batch:
        _send_batch(session, workdir, source, batch)


def _send_batch(session: HostSession, workdir: str, source: Path, files: list[SourceFile]) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for f in files:
            info = archive.gettarinfo(str(source / f.rel), arcname=f.rel)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(source / f.rel, "rb") as fh:
                archive.addfile(info, fh)
    target = host_path(workdir)
    result = session.host.run(f"mkdir -p {target} && tar --no-same-owner -xf - -C {target}", timeout=600,
                              stdin=buffer.getvalue())
    if not result.ok:
        detail = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise HostError(f"host {session.name}: cannot write the synced files into {workdir}: {detail}")


def host_path(workdir: str) -> str:
    """``workdir`` quoted for the host's shell, a leading ``~`` being the home there (as the agent has it)."""
    if workdir == "~" or workdir.startswith("~/"):
        return '"$HOME"' + (shlex.quote(workdir[1:]) if len(workdir) > 2 else "")
    return shlex.quote(workdir)


def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def sync_hosts(plan: Plan, sessions: dict[str, HostSession], progress: Callable[[str], None],
               warn: Callable[[str], None]) -> None:
    """Bring every host's workdirs up to date with the profile's [sync] source."""
    config = plan.profile.sync
    if config is None:
        return
    source = config.source_dir(plan.profile.directory)
    if not source.is_dir():
        raise HostError(f"[sync] source {source} is not a folder on this machine; fix sync.source")
    where = targets(plan, source)
    if not where:
        return
    files = collect(source, Excludes(config.exclude))
    total = sum(f.size for f in files)
    progress(f"syncing {source} ({len(files)} files, {human(total)}) to {len(where)} host(s)")
    by_rel = {f.rel: f for f in files}
    with Progress("syncing code", total=sum(len(w) for w in where.values()), unit="workdirs") as line:
        for name, workdirs in where.items():
            session = sessions[name]
            for workdir in workdirs:
                need = [by_rel[rel] for rel in changed(session, workdir, files) if rel in by_rel]
                size = sum(f.size for f in need)
                if size > WARN_BYTES:
                    with line.hold():
                        warn(f"sync sends {human(size)} to {name}:{workdir}; leave data out with [sync] exclude")
                if need:
                    send(session, workdir, source, need)
                line.advance(nbytes=size)
                with line.hold():
                    progress(f"synced {name}:{workdir}: {len(need)} changed file(s), {human(size)}"
                             + ("" if need else " (up to date)"))
