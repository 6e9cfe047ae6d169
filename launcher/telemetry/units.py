"""Quantities as a terminal shows them; a module of its own so that the progress lines `up`
prints before its supervisor forks need none of the printer's imports."""

from __future__ import annotations


def human_bytes(n: float | None, missing: str = "-") -> str:
    """1536 -> '1.5K', 3 GiB -> '3.0G', 700 MiB -> '700M': powers of 1024, one decimal below 10."""
    if n is None:
        return missing
    value = float(n)
    for unit in ("B", "K", "M", "G"):
        if abs(value) < 1024:
            if unit == "B":
                return f"{int(value)}B"
            return f"{value:.1f}{unit}" if abs(value) < 10 else f"{value:.0f}{unit}"
        value /= 1024
    return f"{value:.1f}T" if abs(value) < 10 else f"{value:.0f}T"
