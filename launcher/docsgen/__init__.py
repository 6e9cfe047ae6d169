"""The documentation's reference pages, generated from the code so they cannot drift from it.

``python -m launcher.docsgen`` (run by ``make docs``) writes ``docs/reference/profile.md`` from the
profile's key table (``launcher/profile/keys.py``, which the JSON Schema and the reader use too) and
``docs/reference/cli.md`` from the argument parser (``launcher/cli.py``); ``--check`` only says
which of them is out of date. Nothing here runs when distlaunch does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from launcher.docsgen.clipage import cli_reference
from launcher.docsgen.keypage import profile_reference

REPO = Path(__file__).resolve().parents[2]

#: each generated page: its path in the repository, and what writes it
PAGES: dict[str, Callable[[], str]] = {
    "docs/reference/profile.md": profile_reference,
    "docs/reference/cli.md": cli_reference,
}


def stale_pages(root: Path = REPO) -> list[str]:
    """The generated pages whose file differs from what the code gives now (missing ones too)."""
    stale = []
    for name, make in PAGES.items():
        path = root / name
        try:
            current = path.read_text(encoding="utf-8")
        except OSError:
            current = None
        if current != make():
            stale.append(name)
    return stale


def write_pages(root: Path = REPO) -> list[str]:
    """Write every generated page that changed; returns the ones written."""
    written = []
    for name in stale_pages(root):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(PAGES[name](), encoding="utf-8")
        written.append(name)
    return written
