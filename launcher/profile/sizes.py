"""Sizes in bytes as people write them ("1GiB", "500 MB", 4096) and as people read them."""

from __future__ import annotations

import re

_UNITS = {"": 1, "B": 1, "K": 1024, "KB": 1000, "KIB": 1024, "M": 1024**2, "MB": 1000**2, "MIB": 1024**2,
          "G": 1024**3, "GB": 1000**3, "GIB": 1024**3, "T": 1024**4, "TB": 1000**4, "TIB": 1024**4}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]i?B|[KMGT]|B)?\s*$")


def parse_size(value: int | str) -> int | None:
    """Bytes from an integer or a string with a unit (K, M, G, T are binary; KB, MB... decimal;
    KiB, MiB... binary); None when the text is no size."""
    if isinstance(value, int):
        return value if value >= 0 else None
    match = _SIZE.match(value)
    if match is None:
        return None
    return int(float(match.group(1)) * _UNITS[(match.group(2) or "").upper()])


def parse_rate(value: int | str) -> int | None:
    """Bytes per second from a size, written with or without "/s" ("50MiB/s", "50MiB", 1000000)."""
    if isinstance(value, str):
        value = re.sub(r"\s*/\s*s\s*$", "", value)
    return parse_size(value)


def show_size(n: int | None) -> str:
    """``n`` bytes in binary units with three significant digits: "912 MiB", "1.50 GiB"; "?" for None."""
    if n is None:
        return "?"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" or size >= 100 else f"{size:.3g} {unit}"
        size /= 1024
    return f"{n} B"
