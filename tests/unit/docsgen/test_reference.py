"""The generated reference pages: up to date with the code, and the key reference complete against the
JSON Schema (both come from launcher/profile/keys.py, but the schema is what editors see)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.cli import build_parser
from launcher.docsgen import PAGES, REPO, stale_pages, write_pages
from launcher.docsgen.clipage import cli_reference, synopsis
from launcher.docsgen.keypage import profile_reference
from launcher.docsgen.markdown import cell, slug
from launcher.profile.schema import profile_schema

ROW = re.compile(r"^\| `(?P<key>[^`]+)` \| (?P<type>[^|]*(?:\\\|[^|]*)*) \| (?P<default>.*?) \| (?P<where>.*?) \| ")


def test_the_generated_pages_are_up_to_date() -> None:
    assert stale_pages() == [], "run `python -m launcher.docsgen` (or `make docs`) and commit docs/reference/"


def test_a_stale_or_missing_page_is_found_and_rewritten(tmp_path: Path) -> None:
    (tmp_path / "docs" / "reference").mkdir(parents=True)
    (tmp_path / "docs" / "reference" / "cli.md").write_text("old\n")
    assert stale_pages(tmp_path) == list(PAGES)
    assert write_pages(tmp_path) == list(PAGES)
    assert stale_pages(tmp_path) == [] and write_pages(tmp_path) == []
    assert (tmp_path / "docs" / "reference" / "profile.md").read_text() == profile_reference()


def _schema_keys(schema: dict[str, Any], where: str) -> Iterator[tuple[str, str]]:
    """(table, key) for every property of the schema, tables written as a profile writes them."""
    for name, sub in schema.get("properties", {}).items():
        yield where, name
        path = name if where == "top level" else f"{where.strip('[]')}.{name}"
        if name == "roles":  # one table per role name, each the same: written [roles.ROLE]
            for role in sub["properties"].values():
                yield from _schema_keys(role, "[roles.ROLE]")
            continue
        for form in [sub, *sub.get("anyOf", [])]:
            if "properties" in form:
                yield from _schema_keys(form, f"[{path}]")
            items = form.get("items", {})
            if "properties" in items:
                yield from _schema_keys(items, f"[[{path}]]")
            if isinstance(form.get("additionalProperties"), dict) and "properties" in form["additionalProperties"]:
                yield from _schema_keys(form["additionalProperties"], f"[{path}.NAME]")


def _reference_rows() -> dict[str, list[set[str]]]:
    """key -> the set of tables of each row of the key reference that documents it."""
    rows: dict[str, list[set[str]]] = {}
    for line in (REPO / "docs" / "reference" / "profile.md").read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            where = {w.strip().strip("`") for w in match["where"].split(",")}
            rows.setdefault(match["key"], []).append(where)
    return rows


def test_every_key_of_the_schema_is_in_the_reference_with_where_it_may_appear() -> None:
    rows = _reference_rows()
    wanted = sorted(set(_schema_keys(profile_schema(), "top level")))
    assert len(wanted) > 60  # the walk reached every table (a wrong walk would find a handful)
    missing = [f"{where} {key}" for where, key in wanted
               if not any(where in places for places in rows.get(key, []))]
    assert missing == [], "keys of the schema not in docs/reference/profile.md"
    assert {"[roles.ROLE.container]", "[hosts.NAME]", "[[log_policies]]"} <= {w for w, _ in wanted}


def test_each_key_row_has_a_type_a_default_and_a_meaning() -> None:
    text = profile_reference()
    rows = [line for line in text.splitlines() if ROW.match(line)]
    assert rows
    for line in rows:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        assert len(cells) == 5 and all(cells), line
    assert '| `restart` | one of `"never"`, `"on-failure"`, `"always"`, `"exit-code"` | `"on-failure"` |' in text
    assert '| `address` | non-empty string | required | `[hosts.NAME]` |' in text


def test_every_verb_and_option_of_the_parser_is_in_the_cli_reference() -> None:
    text = cli_reference()
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "verb")
    for verb, verb_parser in sub.choices.items():  # type: ignore[union-attr]
        heading = f"## distlaunch {verb}"
        assert heading in text, verb
        for action in verb_parser._actions:
            if action.help == argparse.SUPPRESS:  # an internal flag (the batch script's): no user's option
                assert not any(f"`{option}" in text for option in action.option_strings), (verb, action)
                continue
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in text, (verb, option)
    assert "    distlaunch up PROFILE [--no-tui | --json] [--detach]" in text
    assert "## distlaunch export tfjob" in text and "## distlaunch export tensorboard" in text


def test_the_synopsis_marks_optional_words_and_alternatives() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "verb")
    init = sub.choices["init"]  # type: ignore[index]
    assert synopsis("distlaunch init", init).startswith(
        "distlaunch init [SCRIPT] [--hosts H1,H2|RANGE] [--ps N] [--workers N] [--[no-]chief] [--output FILE]")


def test_cells_are_one_line_and_hold_no_raw_html_or_loose_pipe() -> None:
    assert cell("a  <run id>\n| b `x <y>`") == "a &lt;run id&gt; \\| b `x <y>`"
    with pytest.raises(ValueError):
        cell("`bash|zsh`")


@pytest.mark.parametrize(("heading", "anchor"), [
    ("`[defaults.container]`", "defaultscontainer"), ("`[[log_policies]]`", "log_policies"),
    ("Who supervises the job: detach, a closed laptop, a dropped SSH session",
     "who-supervises-the-job-detach-a-closed-laptop-a-dropped-ssh-session"),
    ("distlaunch export tfjob", "distlaunch-export-tfjob")])
def test_anchors_are_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor
