"""Packs the host agent into one zipapp the launcher uploads to every host.

Hosts need only Python (DESIGN.md section 3): the zipapp carries the stdlib-only modules the
agent and training scripts import (``launcher.agent``, ``launcher.events``, ``launcher.report``,
...), and the agent puts the zipapp itself on the task's PYTHONPATH.
"""

from __future__ import annotations

import functools
import io
import shlex
import zipfile
from collections.abc import Mapping
from pathlib import Path

# Modules that run on hosts; each is packed only if it exists in this source tree.
AGENT_MODULES = ("__init__", "events", "agent", "report", "sampling", "nvml")

_MAIN = b"""import sys

from launcher.agent import main

sys.exit(main())
"""

# A fixed timestamp makes the archive byte-identical for the same sources.
_FIXED_DATE = (1980, 1, 1, 0, 0, 0)


def agent_sources() -> dict[str, bytes]:
    """Archive name -> content of every file the agent zipapp holds."""
    package_dir = Path(__file__).resolve().parent
    files = {"__main__.py": _MAIN}
    for module in AGENT_MODULES:
        source = package_dir / (module + ".py")
        if source.is_file():
            files[f"launcher/{module}.py"] = source.read_bytes()
    return files


def pack_zipapp(files: Mapping[str, bytes]) -> bytes:
    """A deterministic zip archive of ``files`` (sorted names, fixed timestamps)."""
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

    Built once per process from this source tree.
    """
    return pack_zipapp(agent_sources())


def agent_command(python: str, pyz_path: str, *args: str) -> str:
    """A shell command line running one agent verb, every part quoted."""
    return " ".join(shlex.quote(part) for part in (python, pyz_path, *args))
