"""How numbers and states are written in the dashboard: the cell texts launcher/telemetry/celltext.py
shares with `status`, and the styles only the dashboard draws."""

from __future__ import annotations

from rich.text import Text

from launcher import events as ev
from launcher.telemetry.celltext import (
    MISSING,
    SPARK_LEVELS,
    STATE_STYLES,
    bar,
    duration,
    human_bytes,
    loss,
    number,
    spark,
)

__all__ = ["JOB_STATE_STYLES", "MISSING", "SPARK_LEVELS", "STATE_STYLES", "bar", "duration", "human_bytes", "loss",
           "number", "spark", "styled_state"]

JOB_STATE_STYLES = {
    ev.JOB_CREATED: "dim",
    ev.JOB_RUNNING: "bold green",
    ev.JOB_RESTARTING: "bold yellow",
    ev.JOB_SUCCEEDED: "bold blue",
    ev.JOB_FAILED: "bold red",
    ev.JOB_STOPPED: "bold yellow",
}


def styled_state(state: str) -> Text:
    return Text(state, style=STATE_STYLES.get(state, ""))
