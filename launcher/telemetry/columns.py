"""The task table's columns, each declared once: the dashboard's table (tui/task_table.py) and the
text table of `distlaunch status` are drawn from `COLUMNS`, as nvitop declares its process panel's
orders as data.

A `Column` says everything about one column, so that nothing is matched by position elsewhere:

- ``key``, ``label``, ``width`` (cells, its one-cell gap included) and ``right`` (aligned right);
- ``cell``: the (text, style) it shows for a task at a time (the job's step times beside it);
- ``silent``: what it shows while the task's host does not answer (or was lost): the last value
  kept, greyed, or no live reading at all;
- ``sort``: the value ``s`` sorts by (None sorts last either way), or None where ``s`` skips it;
  `SORT_CYCLE` is the order ``s`` goes through them;
- ``shows``: the `TaskView` attributes it reads (tests/unit/telemetry/test_columns.py checks
  that every field of `TaskView` is shown by a column or named in its ``NOT_A_COLUMN``);
- ``status``: its column in ``status``'s text table (a label and the text of a task's
  ``status --json`` entry), or None; `STATUS_ORDER` places them, with ``address``, the one
  column only ``status`` has.

Every field is required: a column declared without a sort key or silent-host text does not load.
Adding a column: docs/contributing/add-a-column.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from launcher import events as ev
from launcher.protocol.metricnames import PARTS
from launcher.telemetry import celltext as fmt
from launcher.telemetry.jobview import TaskView, task_sort_key
from launcher.telemetry.stepverdict import StepTimes, bar

Cell = tuple[str, str]
"""(text, style): compared as plain tuples, no Text built to compare."""

CellOf = Callable[[TaskView, float, "StepTimes | None"], Cell]
SilentCellOf = Callable[[TaskView, float], Cell]
SortOf = Callable[[TaskView, float], object]
TaskJson = dict[str, Any]
"""A task's entry in ``status --json`` (launcher/commands/status.py `summarize`)."""


@dataclass(frozen=True)
class Listed:
    """A column of ``status``'s text table: its header and a task's text (task id, its JSON entry)."""

    label: str
    text: Callable[[str, TaskJson], str]


@dataclass(frozen=True, kw_only=True)
class Column:
    """One column of the task table (see the module's docstring for each field)."""

    key: str
    label: str
    width: int
    right: bool
    cell: CellOf
    silent: SilentCellOf
    sort: SortOf | None
    shows: tuple[str, ...]
    status: Listed | None


BAR_CELLS = 4
TREND_CELLS = 8
SPLIT_CELLS = 8
STALE_STYLE = "bold black on yellow"
NO_CHECKPOINT = "none yet"
GREY = "dim"
FLAG_NAMES = {ev.STALLED: "STALL", ev.STRAGGLER: "SLOW", ev.NAN_LOSS: "NAN", ev.LOG_POLICY: "LOG",
              ev.GPU_ERROR: "GPU"}
#: the stacked bar's letters (one a cell); the dashboard draws each as a coloured block
SPLIT_LETTERS = {"input": "i", "compute": "c", "peers": "p", "other": "o"}
SHORT_VERDICT = {"input-bound": "input", "compute-bound": "compute", "other-bound": "other", "balanced": "balanced",
                 "slowest worker": "slowest"}

STATE_ORDER = {state: i for i, state in enumerate(
    (ev.FAILED, ev.LOST, ev.RESTARTING, ev.STARTING, ev.PENDING, ev.RUNNING, ev.STOPPED, ev.SUCCEEDED))}
"""How ``s`` orders states: trouble first."""


def flags_text(task: TaskView) -> str:
    return " ".join(FLAG_NAMES.get(name, name.upper()) for name in sorted(task.conditions))


def percent_cell(value: float | None) -> str:
    """A small bar and the number: ``███▍  85``; CPU may pass 100% (several cores), the bar stops there."""
    if value is None:
        return fmt.MISSING
    return f"{fmt.bar(value, BAR_CELLS)}{value:>5.0f}"


def step_cell(task: TaskView) -> Cell:
    """The step; ``150c`` where it counts train calls (the header says ``step (calls)``)."""
    if task.step is None:
        return fmt.MISSING, ""
    return (f"{task.step}c", "italic") if task.step_is_calls else (str(task.step), "")


def split_cell(task: TaskView, times: StepTimes | None, now: float) -> Cell:
    """The step time's stacked bar (letters a cell each, drawn as coloured blocks) and the verdict
    in a word; a ParameterServerStrategy worker's closures per second as the coordinator sees them."""
    if times is None:
        return fmt.MISSING, ""
    split = times.fresh(task.task_id, now)
    verdict = times.verdict(task.task_id, now=now) or ""
    short = SHORT_VERDICT.get(verdict, verdict.replace("waiting for ", "wait "))
    if split is None:
        closures = times.closures.get(task.task_id)
        if closures is not None:
            return f"{closures.per_s:.1f} closures/s" + (f" {short}" if short else ""), "split-text"
        return ("- no step timed", "dim") if times.missing(task.task_id) else (fmt.MISSING, "")
    cells = "".join(SPLIT_LETTERS[part] * n for part, n in bar(split, SPLIT_CELLS))
    return f"{cells} {short}", "split"


def shown_pid(task: TaskView) -> int | None:
    """The program's pid where a sample said it, else the task's (its wrapper shell's)."""
    return task.main_pid if task.main_pid is not None else task.pid


def gpu_mem_text(task: TaskView) -> str:
    if task.has_gpu and task.gpu_mem_used is not None:
        return f"{fmt.human_bytes(task.gpu_mem_used)}/{fmt.human_bytes(task.gpu_mem_total)}"
    return fmt.MISSING


def trend_text(task: TaskView) -> str:
    rates = task.rate_history
    return fmt.spark(list(rates)[-TREND_CELLS:], TREND_CELLS) if rates and task.state == ev.RUNNING else ""


def age_text(task: TaskView, now: float) -> str:
    age = task.age(now)
    return fmt.duration(age) if age is not None else fmt.MISSING


def last_seen(task: TaskView, now: float) -> str:
    age = task.age(now)
    return f"last seen {fmt.duration(age)} ago" if age is not None else "not heard of"


def stale_or(task: TaskView, now: float, style: str) -> str:
    return STALE_STYLE if task.is_stale(now) else style


def no_reading(_task: TaskView, _now: float) -> Cell:
    """A silent host's task: no live reading to show."""
    return fmt.MISSING, GREY


# -- the text of `status`'s table, from a task's `status --json` entry --------------------------


def step_text(task: TaskJson) -> str:
    """``1200``, ``150 (calls)`` where the step counts train calls, ``-`` for none."""
    if task.get("step") is None:
        return "-"
    return f"{task['step']} (calls)" if task.get("step_is_calls") else str(task["step"])


def step_time_text(task: TaskJson) -> str:
    """``input 71% compute 20% peers 0% other 9% (input-bound)``, or a PSS worker's closures."""
    split = task.get("step_time")
    if isinstance(split, dict):
        text = " ".join(f"{p} {float(split.get(p) or 0) * 100:.0f}%" for p in PARTS)
        return text + (f" ({split['verdict']})" if split.get("verdict") else "")
    if isinstance(task.get("closures_per_s"), (int, float)):
        latency = task.get("closure_latency_s")
        return f"{task['closures_per_s']:.1f} closures/s" + (
            f", {latency * 1000:.0f} ms each" if isinstance(latency, (int, float)) else "")
    return f"- ({task['step_time_missing']})" if task.get("step_time_missing") else "-"


def checkpoint_cell(task: TaskView, now: float) -> Cell:
    """The last checkpoint's step and age (``300 2m05s``), ``none yet`` before the first (a task
    with no step, a parameter server, shows none)."""
    point = task.checkpoint
    if point is None:
        return (NO_CHECKPOINT, "dim") if task.step is not None else (fmt.MISSING, "")
    step = "?" if point.step is None else str(point.step)
    return f"{step} {fmt.duration(max(0.0, now - point.ts))}", ""


def checkpoint_text(task: TaskJson) -> str:
    """``300 12s ago a:/data/ckpt`` (and its copies), ``none yet`` before the first (``-`` for a
    task with no step)."""
    point = task.get("checkpoint")
    if not isinstance(point, dict):
        return NO_CHECKPOINT if task.get("step") is not None else "-"
    where = f"{point['host']}:{point['directory']}" if point.get("host") else str(point.get("directory"))
    step = "?" if point.get("step") is None else str(point["step"])
    text = f"{step} {fmt.duration(point.get('age_s'))} ago {where}"
    copies = point.get("copies") or []
    return text + (f" (copies: {', '.join(copies)})" if copies else "")


def risk_text(task: TaskJson) -> str:
    return "-" if task.get("steps_at_risk") is None else str(task["steps_at_risk"])


def loss_text(task: TaskJson) -> str:
    return task.get("nonfinite_loss") or (f"{task['loss']:.4f}" if isinstance(task["loss"], float) else "-")


# -- the columns --------------------------------------------------------------------------------

COLUMNS: tuple[Column, ...] = (
    Column(key="task", label="task", width=10, right=False,
           cell=lambda t, now, _s: (t.task_id, stale_or(t, now, "bold")),
           silent=lambda t, _now: (t.task_id, GREY),
           sort=lambda t, _now: task_sort_key(t.task_id), shows=("task_id",),
           status=Listed("TASK", lambda task_id, _j: task_id)),
    Column(key="host", label="host", width=10, right=False,
           cell=lambda t, _now, _s: (t.host or fmt.MISSING, ""),
           silent=lambda t, _now: (f"{t.host} ({t.host_down})", "yellow"),
           sort=lambda t, _now: t.host, shows=("host", "host_down"),
           status=Listed("HOST", lambda _id, j: str(j["host"] or "-"))),
    Column(key="state", label="state", width=11, right=False,
           cell=lambda t, _now, _s: (t.state, fmt.STATE_STYLES.get(t.state, "")),
           silent=lambda t, _now: (t.state, GREY),
           sort=lambda t, _now: STATE_ORDER.get(t.state, len(STATE_ORDER)), shows=("state",),
           status=Listed("STATE", lambda _id, j: str(j["state"]))),
    Column(key="flags", label="flags", width=12, right=False,
           cell=lambda t, _now, _s: (flags_text(t), "bold black on dark_orange" if t.conditions else ""),
           silent=lambda t, _now: (flags_text(t), GREY),
           sort=None, shows=("conditions",), status=None),
    Column(key="restarts", label="rst", width=4, right=True,
           cell=lambda t, _now, _s: (str(t.restarts), "yellow" if t.restarts else "dim"),
           silent=lambda t, _now: (str(t.restarts), GREY),
           sort=None, shows=("restarts",),
           status=Listed("RESTARTS", lambda _id, j: str(j["restarts"]))),
    Column(key="step", label="step", width=8, right=True,
           cell=lambda t, _now, _s: step_cell(t),
           silent=lambda t, _now: (step_cell(t)[0], GREY),
           sort=None, shows=("step", "step_is_calls"),
           status=Listed("STEP", lambda _id, j: step_text(j))),
    Column(key="checkpoint", label="ckpt", width=10, right=True,
           cell=lambda t, now, _s: checkpoint_cell(t, now),
           silent=lambda t, now: (checkpoint_cell(t, now)[0], GREY),
           sort=None, shows=("checkpoint", "checkpoint_copies"),
           status=Listed("CHECKPOINT", lambda _id, j: checkpoint_text(j))),
    Column(key="loss", label="loss", width=8, right=True,
           cell=lambda t, _now, _s: (t.nonfinite_loss or fmt.loss(t.loss), "bold red" if t.nonfinite_loss else ""),
           silent=lambda t, _now: (fmt.loss(t.loss), GREY),
           sort=lambda t, _now: t.loss, shows=("loss", "nonfinite_loss"),
           status=Listed("LOSS", lambda _id, j: loss_text(j))),
    Column(key="rate", label="st/s", width=7, right=True,
           cell=lambda t, now, _s: (fmt.number(t.steps_per_s(now)), ""),
           silent=no_reading, sort=lambda t, now: t.steps_per_s(now), shows=("step_rate",), status=None),
    Column(key="trend", label="trend", width=9, right=False,
           cell=lambda t, _now, _s: (trend_text(t), "cyan"),
           silent=no_reading, sort=None, shows=("rate_history",), status=None),
    Column(key="cpu", label="cpu%", width=10, right=False,
           cell=lambda t, _now, _s: (percent_cell(t.cpu_percent), "green"),
           silent=no_reading, sort=None, shows=("cpu_percent",), status=None),
    Column(key="gpu", label="gpu%", width=10, right=False,
           # no GPU: a dim dash, not a magenta one (under the cursor it read as a red block)
           cell=lambda t, _now, _s: (percent_cell(t.gpu_util), "magenta") if t.has_gpu else (fmt.MISSING, "dim"),
           silent=no_reading, sort=lambda t, _now: t.gpu_util if t.has_gpu else None,
           shows=("gpu_util", "has_gpu"), status=None),
    Column(key="gpu_mem", label="gpu mem", width=10, right=True,
           cell=lambda t, _now, _s: (gpu_mem_text(t), ""),
           silent=no_reading, sort=None, shows=("gpu_mem_used", "gpu_mem_total"), status=None),
    Column(key="rss", label="rss", width=7, right=True,
           cell=lambda t, _now, _s: (fmt.human_bytes(t.rss_bytes), ""),
           silent=no_reading, sort=None, shows=("rss_bytes",), status=None),
    Column(key="pid", label="pid", width=8, right=True,
           cell=lambda t, _now, _s: (str(shown_pid(t)) if shown_pid(t) is not None else fmt.MISSING, "dim"),
           silent=no_reading, sort=None, shows=("pid", "main_pid"),
           status=Listed("PID", lambda _id, j: str(j.get("main_pid") or j["pid"] or "-"))),
    Column(key="age", label="age", width=5, right=True,
           cell=lambda t, now, _s: (age_text(t, now), stale_or(t, now, "dim")),
           silent=lambda t, now: (age_text(t, now), STALE_STYLE),
           sort=None, shows=("last_event_ts",), status=None),
    Column(key="split", label="step time", width=24, right=False,
           cell=lambda t, now, times: split_cell(t, times, now),
           silent=lambda t, now: (last_seen(t, now), "yellow"),
           sort=None, shows=(), status=Listed("STEP TIME", lambda _id, j: step_time_text(j))),
)

BY_KEY = {column.key: column for column in COLUMNS}
COLUMN_INDEX = {column.key: i for i, column in enumerate(COLUMNS)}
TABLE_WIDTH = sum(column.width for column in COLUMNS)

SORT_CYCLE = ("task", "host", "state", "rate", "loss", "gpu")
"""What ``s`` cycles through (each a column with a sort key); ``S`` reverses the order."""

ADDRESS = Listed("ADDRESS", lambda _id, j: f"{j['address']}:{j['port']}")
"""A column only ``status`` has: where the task listens."""

RISK = Listed("AT RISK", lambda _id, j: risk_text(j))
"""A column only ``status`` has: the steps a loss now would redo (the table shows step and ckpt side by side)."""

STATUS_ORDER = ("task", "host", "address", "state", "pid", "restarts", "step", "loss", "checkpoint", "risk",
                "split")
"""The columns of ``status``'s text table, in order."""


def status_columns() -> list[Listed]:
    """``status``'s text table's columns, in `STATUS_ORDER`."""
    listed = {column.key: column.status for column in COLUMNS if column.status is not None}
    listed.update(address=ADDRESS, risk=RISK)
    return [listed[key] for key in STATUS_ORDER]


def task_cells(task: TaskView, now: float, times: StepTimes | None = None) -> tuple[Cell, ...]:
    """The row for one task, a cell for each of `COLUMNS`; greyed, with what was last seen of it,
    while its host does not answer (or was lost)."""
    if task.state == ev.LOST:  # the job went on without it (or moves it): greyed, with why in the last column
        cells = [(column.silent(task, now)[0], GREY) for column in COLUMNS]
        cells[COLUMN_INDEX["host"]] = (task.host or fmt.MISSING, GREY)
        cells[COLUMN_INDEX["split"]] = (f"lost: {task.reason}" if task.reason else "lost", GREY)
        return tuple(cells)
    if task.host_down and task.state not in ev.FINAL_TASK_STATES:
        return tuple(column.silent(task, now) for column in COLUMNS)
    return tuple(column.cell(task, now, times) for column in COLUMNS)


def status_rows(tasks: dict[str, TaskJson]) -> list[tuple[str, ...]]:
    """``status``'s text table: the header, then a row for each task of its ``status --json`` entries."""
    columns = status_columns()
    rows = [tuple(listed.label for listed in columns)]
    rows += [tuple(listed.text(task_id, task) for listed in columns) for task_id, task in tasks.items()]
    return rows
