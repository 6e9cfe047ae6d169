"""Slurm/pdsh hostlist expressions: ``gpu[01-16].lab``, ``n[1-3,7]``, ``r[1-2]n[1-4]``, ``a,b[1-2]``.

Expanded as Slurm's ``scontrol show hostnames`` does: a top-level comma separates items, each
bracket holds numbers and ``lo-hi`` ranges, a range keeps the zero padding of its lower bound,
and several brackets in one item multiply (the leftmost varies slowest). Stdlib only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from itertools import product

from launcher.profile.names import MAX_HOSTS  # more names from one expression: a typo (gpu[1-100000])

_RANGE_RE = re.compile(r"^(\d+)(?:-(\d+))?$")


class HostlistError(ValueError):
    """A malformed expression; the message says what is wrong and where."""


@dataclass(frozen=True)
class ExpandedHost:
    """One name of an expression, with the bracket values that made it (as written: ``"01"``)."""

    name: str
    values: tuple[str, ...]


def has_ranges(expression: str) -> bool:
    """Whether ``expression`` is a hostlist (brackets or a top-level list), not one plain name."""
    return "[" in expression or "]" in expression or "," in expression


def expand(expression: str) -> list[str]:
    """Every host name of ``expression``, in Slurm's order (duplicates kept, as Slurm does)."""
    return [host.name for host in expand_detailed(expression)]


def expand_detailed(expression: str) -> list[ExpandedHost]:
    items = _split_items(expression)
    total = 0
    for item in items:  # counted before anything is expanded: r[1-5000]n[1-5000] costs nothing
        count = 1
        for inside in re.findall(r"\[([^\]]*)\]", item):
            count *= _bracket_count(inside, expression)
        total += count
        if total > MAX_HOSTS:
            raise HostlistError(f"{expression!r} names more than {MAX_HOSTS} hosts; check the ranges")
    hosts: list[ExpandedHost] = []
    for item in items:
        hosts.extend(_expand_item(item, expression))
    return hosts


def _bracket_count(inside: str, expression: str) -> int:
    """How many names one bracket's list makes (its syntax checked as ``_bracket_values`` does)."""
    if not inside:
        return 1  # _bracket_values words it
    count = 0
    for piece in inside.split(","):
        match = _RANGE_RE.match(piece)
        if not match:
            raise HostlistError(f"{expression!r}: {piece!r} in [...] is not a number or a range "
                                "like 01-16")
        low, high = match.group(1), match.group(2)
        count += 1 if high is None else max(0, int(high) - int(low) + 1)
    return count


def _split_items(expression: str) -> list[str]:
    items: list[str] = []
    depth = 0
    current = ""
    for char in expression.strip():
        if char == "[":
            if depth:
                raise HostlistError(f"{expression!r}: nested '[' ; brackets cannot nest")
            depth = 1
        elif char == "]":
            if not depth:
                raise HostlistError(f"{expression!r}: ']' without '['")
            depth = 0
        elif char == "," and not depth:
            items.append(current)
            current = ""
            continue
        elif char.isspace():
            raise HostlistError(f"{expression!r}: contains a space; separate names with ',' only")
        current += char
    if depth:
        raise HostlistError(f"{expression!r}: '[' is never closed; add ']'")
    items.append(current)
    if any(not item for item in items):
        raise HostlistError(f"{expression!r}: an empty name between commas; remove the extra ','")
    return items


def _expand_item(item: str, expression: str) -> list[ExpandedHost]:
    parts = re.split(r"(\[[^\]]*\])", item)  # odd indices are the bracket groups
    choices: list[list[str]] = []
    for index, part in enumerate(parts):
        if index % 2:
            choices.append(_bracket_values(part[1:-1], expression))
    hosts = []
    for values in product(*choices):
        name = "".join(parts[i] if i % 2 == 0 else values[i // 2] for i in range(len(parts)))
        hosts.append(ExpandedHost(name=name, values=tuple(values)))
    return hosts


def _bracket_values(inside: str, expression: str) -> list[str]:
    if not inside:
        raise HostlistError(f"{expression!r}: empty '[]'; write a range like [1-4]")
    values: list[str] = []
    for piece in inside.split(","):
        match = _RANGE_RE.match(piece)
        if not match:
            raise HostlistError(f"{expression!r}: {piece!r} in [...] is not a number or a range "
                                "like 01-16")
        low, high = match.group(1), match.group(2)
        if high is None:
            values.append(low)
            continue
        if int(high) < int(low):
            raise HostlistError(f"{expression!r}: range {piece} runs backwards; write {high}-{low}")
        width = len(low)
        values.extend(str(n).zfill(width) for n in range(int(low), int(high) + 1))
    return values
