"""The profile key reference (``docs/reference/profile.md``), written from ``launcher/profile/keys.py``.

Every key is one row: its type, its default, every table it may appear in, and its one line of
meaning (``Key.doc``). A key shared by several tables (the task keys of ``[defaults]`` and
``[roles.ROLE]``, the SSH keys of ``[ssh]`` and ``[hosts.NAME]``) is one row, in the first table that
declares it, and the later tables point at it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from launcher.docsgen.markdown import cell, slug
from launcher.profile.keys import TOP_KEYS, Key, Table

TOP = "top level"
ROLE = "ROLE"
NAME = "NAME"


@dataclass
class Section:
    """One table of the profile as the page shows it: where it is written and the keys it declares."""

    header: str  # "[defaults]", "[[log_policies]]", or TOP
    table: Table
    keys: list[Key] = field(default_factory=list)
    shared_from: list[str] = field(default_factory=list)  # headers of sections whose keys it takes too


def _child_path(path: str, key: Key) -> str:
    joined = f"{path}.{key.name}" if path else key.name
    if key.kind == "tables":
        return f"{joined}.{ROLE if key.names else NAME}"
    return joined


def _header(path: str, array: bool) -> str:
    if not path:
        return TOP
    return f"[[{path}]]" if array else f"[{path}]"


def collect() -> tuple[list[Section], dict[int, list[str]]]:
    """The sections in the order a reader meets them, and for every key (by identity) the headers of
    every table it may appear in."""
    sections: list[Section] = []
    by_table: dict[int, Section] = {}
    owner: dict[int, Section] = {}
    where: dict[int, list[str]] = {}

    def walk(table: Table, path: str, array: bool) -> None:
        header = _header(path, array)
        section = by_table.get(id(table))
        fresh = section is None
        if section is None:
            section = Section(header, table)
            by_table[id(table)] = section
            sections.append(section)
        for key in table.keys:
            where.setdefault(id(key), [])
            if header not in where[id(key)]:
                where[id(key)].append(header)
            if fresh:
                if id(key) in owner:
                    if owner[id(key)].header not in section.shared_from:
                        section.shared_from.append(owner[id(key)].header)
                else:
                    owner[id(key)] = section
                    section.keys.append(key)
            if key.table is not None:
                walk(key.table, _child_path(path, key), key.kind == "table_list")

    walk(TOP_KEYS, "", False)
    return sections, where


def _choices(key: Key) -> str:
    return "one of " + ", ".join(f'`"{c}"`' for c in key.choices)


def type_text(key: Key) -> str:
    """What a value must be, in words."""
    kind = key.kind
    if kind == "choice":
        return _choices(key)
    if kind == "integer":
        low, high = key.minimum, key.maximum
        if low is not None and high is not None:
            return f"integer, {low} to {high}"
        if low is not None:
            return f"integer ≥ {low}"
        return "integer"
    if kind == "number":
        return "number > 0" if key.positive else "number ≥ 0"
    words = {
        "string": "non-empty string" if key.nonblank or key.pattern else "string",
        "boolean": "boolean",
        "path_or_false": "path, or `false`",
        "string_list": "list of strings",
        "index_list": "list of distinct integers ≥ 0",
        "env": "table of NAME = string",
        "regex_map": "table of name = regex",
        "size": 'size: bytes, or a string with a unit (`"1GiB"`)',
        "rate": 'rate: bytes per second, or a string with a unit (`"50MiB/s"`)',
        "table": "table",
        "table_or_false": "table, or `false`",
        "tables": "tables, one per name",
        "table_list": "array of tables",
    }
    return words[kind]


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def default_text(key: Key) -> str:
    """The default as a profile would write it; "required" or "—" (none, or derived: the meaning says)."""
    value = key.default
    if key.required:
        return "required"
    if value is None:
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, int | float):
        return f"`{_number(value)}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, list | tuple) and not value:
        return "`[]`"
    return f"`{value}`"


def _code(header: str) -> str:
    return header if header == TOP else f"`{header}`"


def _link(header: str) -> str:
    return f"[{_code(header)}](#{slug(header)})"


def _meaning(key: Key, sections: dict[int, Section]) -> str:
    if key.table is not None and id(key.table) in sections:
        target = sections[id(key.table)]
        if key.kind in ("table", "table_or_false", "tables", "table_list"):
            return cell(f"{key.doc} Its keys: {_link(target.header)}.")
    return cell(key.doc)


def _but(section: Section, header: str, sections: list[Section]) -> str:
    """`` but `x`, `y` `` naming the keys of the section at ``header`` that ``section`` does not take."""
    shared = next(s for s in sections if s.header == header)
    left = [name for name in shared.table.names if name not in section.table.names]
    return " but " + ", ".join(f"`{name}`" for name in left) if left else ""


def profile_reference() -> str:
    """The whole page."""
    sections, where = collect()
    by_table = {id(s.table): s for s in sections}
    out = [
        "<!-- Generated by `python -m launcher.docsgen` from launcher/profile/keys.py: edit the keys there, "
        "then run `make docs`. -->",
        "",
        "# Profile key reference",
        "",
        "Every key a profile may hold, generated from the one declaration of the keys "
        "(`launcher/profile/keys.py`) that `distlaunch check` validates against and that `distlaunch schema` "
        "turns into the JSON Schema for editors. For the keys at work, see "
        "[the profile, by example](../profiles.md).",
        "",
        f"In the tables, {ROLE} is a role (`chief`, `ps`, `worker` or `evaluator`; chief and evaluator have "
        f"at most one task) and {NAME} a host's name. A default of — means there is none, or that it "
        "comes from other keys, as the meaning says. Any string may say `${env:VAR}` "
        "(see [variants and secrets](../running.md#variants-secrets-and-the-record-of-a-run)).",
        "",
        "Tables: " + ", ".join(_link(s.header) for s in sections) + ".",
    ]
    for section in sections:
        out += ["", f"## {_code(section.header)}", "", cell(section.table.doc)]
        if section.shared_from:
            also = ", ".join(_link(h) + _but(section, h, sections) for h in section.shared_from)
            out += ["", f"It also takes every key of {also}; one set here wins over the value there."]
        out += ["", "| key | type | default | where | meaning |", "| --- | --- | --- | --- | --- |"]
        for key in section.keys:
            places = ", ".join(_code(h) for h in where[id(key)])
            out.append(f"| `{key.name}` | {type_text(key)} | {default_text(key)} | {places} | "
                       f"{_meaning(key, by_table)} |")
    return "\n".join(out) + "\n"
