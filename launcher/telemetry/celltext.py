"""How numbers and states are written in a table cell, the dashboard's and ``status``'s columns alike
(plain functions and style names, no widgets: launcher/telemetry/columns.py draws with them)."""

from __future__ import annotations

from launcher import events as ev
from launcher.telemetry.units import human_bytes as launcher_human_bytes

MISSING = "—"

STATE_STYLES = {
    ev.RUNNING: "bold green",
    ev.FAILED: "bold red",
    ev.RESTARTING: "bold yellow",
    ev.STARTING: "yellow",
    ev.PENDING: "dim",
    ev.SUCCEEDED: "dim blue",
    ev.STOPPED: "dim",
}


def human_bytes(n: int | float | None) -> str:
    """Bytes as the printer shows them, with the dashboard's mark for a missing value."""
    return launcher_human_bytes(n, missing=MISSING)


def duration(seconds: float | None) -> str:
    """Compact elapsed time: 42s, 3m05s, 2h03m, 3d04h."""
    if seconds is None:
        return MISSING
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def number(value: float | None, fmt: str = "{:.1f}") -> str:
    return MISSING if value is None else fmt.format(value)


def loss(value: float | None) -> str:
    if value is None:
        return MISSING
    return f"{value:.4g}"


BAR_EIGHTHS = " ▏▎▍▌▋▊▉█"
SPARK_LEVELS = "▁▂▃▄▅▆▇█"


def bar(percent: float | None, cells: int) -> str:
    """A horizontal bar `cells` wide filled to `percent` (clamped to 0-100), in eighths of a cell."""
    if percent is None:
        return " " * cells
    eighths = round(max(0.0, min(100.0, percent)) / 100 * cells * 8)
    full, part = divmod(eighths, 8)
    text = "█" * full + (BAR_EIGHTHS[part] if part else "")
    return text.ljust(cells)


def spark(values: list[float], cells: int) -> str:
    """The last `cells` values as a one-line sparkline from their own minimum to maximum: it shows the
    shape of the trend (a steady value is a flat middle line, a dip shows as a dip)."""
    values = values[-cells:]
    if not values:
        return ""
    low, high = min(values), max(values)
    middle = SPARK_LEVELS[len(SPARK_LEVELS) // 2 - 1]
    if high - low <= 1e-9 * max(abs(high), 1.0):
        return middle * len(values)
    last = len(SPARK_LEVELS) - 1
    return "".join(SPARK_LEVELS[round((v - low) / (high - low) * last)] for v in values)
