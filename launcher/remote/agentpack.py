"""Packs the host agent into one zipapp the launcher uploads to every host.

Hosts need only Python (DESIGN.md section 3): the zipapp carries the stdlib-only modules the
agent and training scripts import (``launcher.agent``, ``launcher.protocol``, ``launcher.events``,
``launcher.report``, ...), and the agent puts the zipapp itself on the task's PYTHONPATH.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import io
import os
import shlex
import stat
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

LAUNCHER_DIR = Path(__file__).resolve().parent.parent
#: what runs on hosts and inside tasks (docs/ARCHITECTURE.md): these packages whole, these modules
SHIPPED_PACKAGES = ("agent", "autolog", "protocol")
SHIPPED_MODULES = ("__init__", "events", "report")
#: left out: ``python -m launcher.agent`` is for the launcher's side (the archive has its own
#: ``__main__``), and autolog's start-up hook goes in as ``SITE_DIR/sitecustomize.py``
NOT_SHIPPED = ("agent/__main__", "autolog/startup")


def _agent_modules() -> tuple[str, ...]:
    found = list(SHIPPED_MODULES)
    for package in SHIPPED_PACKAGES:
        found += sorted(f"{package}/{source.stem}" for source in (LAUNCHER_DIR / package).glob("*.py"))
    return tuple(module for module in found if module not in NOT_SHIPPED)


#: modules that run on hosts, as paths under launcher/ without ``.py``
AGENT_MODULES = _agent_modules()
#: autolog's start-up hook: a directory of its own in the archive, put on a task's path only
#: when autolog is on (``agent.pyz/distlaunch_site``; zipimport reads subdirectories)
SITE_DIR = "distlaunch_site"
SITE_SOURCE = "autolog/startup.py"

_MAIN = b"""import sys

from launcher.agent import main

sys.exit(main())
"""

# A fixed timestamp makes the archive byte-identical for the same sources.
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)


def agent_sources() -> dict[str, bytes]:
    """Archive name -> content of every file the agent zipapp holds."""
    files = {"__main__.py": _MAIN}
    for module in AGENT_MODULES:
        source = LAUNCHER_DIR / (module + ".py")
        if source.is_file():
            files[f"launcher/{module}.py"] = source.read_bytes()
    site = LAUNCHER_DIR / SITE_SOURCE
    if site.is_file():
        files[f"{SITE_DIR}/sitecustomize.py"] = site.read_bytes()
    return files


def unchecked_pyc(source: bytes, filename: str) -> bytes:
    """Bytecode for this interpreter's version, marked "unchecked hash" (PEP 552).

    Without it every agent start compiles agent.py and events.py (~100 ms of CPU each time,
    seconds for a 64-task launch on a small host). zipimport uses it only when the host's
    Python has the same magic number, and reads the source otherwise.
    """
    import marshal

    code = compile(source, filename, "exec", dont_inherit=True)
    header = importlib.util.MAGIC_NUMBER + (0b01).to_bytes(4, "little") + importlib.util.source_hash(source)
    return header + marshal.dumps(code)


def with_bytecode(files: Mapping[str, bytes]) -> dict[str, bytes]:
    out = dict(files)
    for name, data in files.items():
        if name.startswith("launcher/") and name.endswith(".py"):
            out[name + "c"] = unchecked_pyc(data, name)
    return out


def pack_zipapp(files: Mapping[str, bytes]) -> bytes:
    """A deterministic zip archive of ``files`` (sorted names, fixed timestamps)."""
    import zipfile  # here: a launch that finds the archive in the cache never needs it

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=_FIXED_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[name])
    return buffer.getvalue()


@functools.cache
def build_agent_zipapp() -> bytes:
    """The agent zipapp as bytes: ``python agent.pyz VERB ...`` runs ``launcher.agent.main``.

    Built once per process from this source tree, and kept in the state dir under a hash of the
    sources, this packer and this interpreter's bytecode version and optimization level, and its
    own sha256: compiling and packing it cost every `up` ~80 ms of CPU before its first host was
    prepared. A kept archive is used only when it is a regular file of the user's that no one
    else may read or write, in the private state dir, whose bytes have the sha256 its name says
    (written there by this function, from the sources the name's key was made of: reading it
    back whole to compare, as before, cost every `up` ~25 ms): anything else (a crash mid-write,
    a file another user put there, an edit) is built again and replaced, since this archive runs
    as the user on every host."""
    files = agent_sources()
    try:
        folder, key = _cache_key(files)
    except OSError:  # no state dir to keep it in: the cache only saves time
        return pack_zipapp(with_bytecode(files))
    with contextlib.suppress(OSError):
        for kept in folder.glob(f"agent-{key}-*.pyz"):
            data = _read_own(kept)
            if hashlib.sha256(data).hexdigest() == kept.stem.rsplit("-", 1)[-1] and _whole_zip(data):
                return data
    data = pack_zipapp(with_bytecode(files))
    _store(folder / f"agent-{key}-{hashlib.sha256(data).hexdigest()}.pyz", data)
    return data


@functools.cache
def agent_digest() -> str:
    """The agent zipapp's sha256 (hex): its name in each host's cache (launcher/remote/channel.py)."""
    return hashlib.sha256(build_agent_zipapp()).hexdigest()


#: archives kept in the state dir (each checkout or version of distlaunch has its own)
KEEP_ARCHIVES = 8


def _cache_key(files: Mapping[str, bytes]) -> tuple[Path, str]:
    """The folder kept archives are in and the key of these sources' (their name's first part)."""
    digest = hashlib.sha256(importlib.util.MAGIC_NUMBER + b"O%d" % sys.flags.optimize)
    digest.update(Path(__file__).read_bytes())  # how it is packed
    for name in sorted(files):
        digest.update(b"%d:%s\0" % (len(files[name]), name.encode()))
        digest.update(files[name])
    from launcher.paths import private_state_dir

    return private_state_dir("cache"), digest.hexdigest()[:24]


def _read_own(path: Path) -> bytes:
    """``path``'s bytes if it is a regular file of the user's, mode 0600 or tighter, not a link
    (judged on what was opened); OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise OSError(f"{path}: not a private file of yours")
        return fh.read()


def _holds(data: bytes, files: Mapping[str, bytes]) -> bool:
    """Whether the archive ``data`` holds exactly ``files`` and their bytecode, each ``.pyc``
    carrying its source's hash (PEP 552), nothing else: what a kept archive must be (the tests'
    check; a launch trusts the sha256 in the name it kept it under)."""
    import zipfile

    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
            wanted = set(with_bytecode_names(files))
            if names != wanted:
                return False
            for name, source in files.items():
                if archive.read(name) != source:
                    return False
                if name + "c" in wanted and archive.read(name + "c")[8:16] != importlib.util.source_hash(source):
                    return False
    except (zipfile.BadZipFile, KeyError, ValueError, OSError):
        return False
    return True


def with_bytecode_names(files: Mapping[str, bytes]) -> list[str]:
    """The names ``with_bytecode(files)`` has, without compiling anything."""
    return [*files, *(name + "c" for name in files if name.startswith("launcher/") and name.endswith(".py"))]


def _whole_zip(data: bytes) -> bool:
    """Ends with a zip "end of central directory" record (our archives carry no comment)."""
    return len(data) >= 22 and data[-22:-18] == b"PK\x05\x06"


def _store(path: Path, data: bytes) -> None:
    """Write whole or not at all (a rename of a file of this thread's own), never failing: the
    cache only saves time. Older archives beyond KEEP_ARCHIVES go."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "wb", opener=lambda p, f: os.open(p, f | os.O_EXCL | os.O_NOFOLLOW, 0o600)) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        kept = sorted(path.parent.glob("agent-*.pyz"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[KEEP_ARCHIVES:]:
            old.unlink()
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()


def agent_command(python: str, pyz_path: str, *args: str) -> str:
    """A shell command line running one agent verb, every part quoted."""
    return " ".join(shlex.quote(part) for part in (python, pyz_path, *args))
