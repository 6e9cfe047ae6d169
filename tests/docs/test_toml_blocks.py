"""Every TOML block of the README and the docs is a profile, or a piece of one, that distlaunch reads
as written (issue 56: a block that put a top-level key under [defaults] failed when pasted).

A piece is checked in its context: merged into a small profile that has what every profile needs
(a name, a command, one local host, two workers), with a local host table for each host it names
and does not define; then read by the real profile reader."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from launcher.profile.reader import load_profile
from tests.docs.test_examples import REPO, pages
from tests.profiles import toml_value

BLOCK = re.compile(r"^```toml\n(.*?)^```", re.M | re.S)
CONTEXT: dict[str, Any] = {
    "name": "docs-block",
    "defaults": {"command": "{python} train.py"},
    "hosts": {"local": {"address": "localhost", "transport": "local"}},
    "roles": {"worker": {"count": 2, "hosts": ["local"]}},
}


def toml_blocks() -> list[tuple[str, str]]:
    found = []
    for page in pages():
        text = page.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 2
            found.append((f"{page.relative_to(REPO)}:{line}", match.group(1)))
    return found


def _merged(base: Mapping[str, Any], piece: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in piece.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def _with_named_hosts(profile: dict[str, Any]) -> dict[str, Any]:
    """A local host table for every host a role or ``spares`` names without defining it, and an
    address for a defined host that the piece gave only other keys."""
    named = list(profile.get("spares", []))
    for role in profile.get("roles", {}).values():
        named += role.get("hosts", []) if isinstance(role, Mapping) else []
    hosts = profile.setdefault("hosts", {})
    for name in named:
        hosts.setdefault(name, {"address": "localhost", "transport": "local"})
    for table in hosts.values():
        table.setdefault("address", "localhost")
    return profile


def _toml(table: Mapping[str, Any], prefix: str = "") -> str:
    scalars = [f"{k} = {toml_value(v)}\n" for k, v in table.items()
               if not isinstance(v, Mapping) and not (isinstance(v, list) and v and isinstance(v[0], Mapping))]
    out = "".join(scalars)
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out += f"[{name}]\n" + _toml(value, f"{name}.")
        elif isinstance(value, list) and value and isinstance(value[0], Mapping):
            for item in value:
                out += f"[[{name}]]\n" + _toml(item, f"{name}.")
    return out


@pytest.mark.parametrize(("where", "block"), toml_blocks(), ids=[w for w, _ in toml_blocks()])
def test_each_toml_block_reads_in_its_context(where: str, block: str, tmp_path: Path) -> None:
    piece = tomllib.loads(block)  # TOML itself: a paste that does not parse fails here
    context = CONTEXT
    if "slurm" in piece:  # a [slurm] piece takes its hosts from the allocation: none in its context
        context = {**CONTEXT, "roles": {"worker": {"count": 2}}}
        context.pop("hosts")
    profile = _with_named_hosts(_merged(context, piece))
    if "slurm" in piece and not profile["hosts"]:
        profile.pop("hosts")
    path = tmp_path / "profile.toml"
    path.write_text(_toml(profile), encoding="utf-8")
    load_profile(path)  # a ProfileError names the block's mistake


def test_there_are_blocks_to_check() -> None:
    assert len(toml_blocks()) >= 9
