"""Every file or folder of the repository that docs/ARCHITECTURE.md and docs/contributing.md name
exists: a map that sends a newcomer to a file that is gone is worse than none.

A name is a backquoted word with a ``/`` or ending in ``.py`` (``launcher/agent/runner.py``,
``commands/up.py``, ``reader.py``). With a ``/`` it is looked up from the repository's root, then
from ``launcher/``; a bare ``x.py`` must be one file of ``launcher/`` or ``tui/`` (a name two
packages share would not say which). Paths on hosts and in run dirs (``<run id>``, ``~``) are not
the repository's and are left out.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = ("docs/ARCHITECTURE.md", "docs/contributing.md")
CODE = re.compile(r"`([^`\s]+)`")


def cited(text: str) -> list[str]:
    """The repository paths a page names, in order, each once."""
    names = []
    for word in CODE.findall(text):
        word = word.rstrip(".,:;")
        if any(c in word for c in "<>~$*{}()=\"'") or word.startswith(("-", "/", "#")):
            continue
        if ("/" in word or word.endswith(".py")) and word not in names:
            names.append(word)
    return names


def problem(name: str) -> str | None:
    """Why ``name`` does not send a reader to one file or folder of the repository, else None."""
    if "/" in name:
        if (REPO / name).exists() or (REPO / "launcher" / name).exists():
            return None
        return f"{name}: no such file or folder (from the root, nor from launcher/)"
    found = [p for top in ("launcher", "tui") for p in (REPO / top).rglob(name)]
    if len(found) == 1:
        return None
    return f"{name}: {'no such file' if not found else 'several: ' + ', '.join(map(str, found))}"


@pytest.mark.parametrize("page", PAGES)
def test_every_path_a_page_names_exists(page: str) -> None:
    names = cited((REPO / page).read_text(encoding="utf-8"))
    assert names, f"{page} names no path: the pattern no longer finds them"
    assert [p for p in map(problem, names) if p] == []


def test_the_check_finds_paths_and_refuses_a_missing_or_ambiguous_one() -> None:
    text = "See `launcher/agent/runner.py`, `commands/up.py`, `<state root>/runs/` and `--set`."
    assert cited(text) == ["launcher/agent/runner.py", "commands/up.py"]
    assert problem("launcher/agent/runner.py") is None and problem("commands/up.py") is None
    assert problem("launcher/agent/nothere.py") is not None
    assert problem("__init__.py") is not None  # one in every package: it says nothing
