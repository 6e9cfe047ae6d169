"""The task table's column declaration (launcher/telemetry/columns.py): each column one entry with
every part given, every reading a task carries shown by a column or said to be shown elsewhere,
and nothing matched by position."""

from __future__ import annotations

import dataclasses

import pytest

from launcher import events as ev
from launcher.telemetry import columns
from launcher.telemetry.columns import COLUMNS, SORT_CYCLE, STATUS_ORDER, Column, Listed, no_reading, task_cells
from launcher.telemetry.jobview import TaskView
from tests.unit.telemetry.column_fixture import NOW, columns_job

NOT_A_COLUMN = {
    "exit_code": "the timeline and the failure report",
    "reason": "the timeline and the failure report",
    "cause": "the failure report and `status`'s lines under the table",
    "culprit": "the root cause in the header",
    "failed_tail": "the failure report",
    "stall_stacks": "the stacks view",
    "incarnation_log_start": "the log pane (where this incarnation's lines start)",
    "gpus": "the hosts view (each GPU)",
    "moved_from": "a notice and `status`'s lines under the table",
    "last_seq": "bookkeeping: lost events",
    "lost_events": "a notice and `status`'s warning",
    "gpu_history": "the sparklines beside the log",
    "loss_history": "the loss chart",
    "loss_times": "the loss chart's time axis",
    "rate_points": "the steps/s chart",
    "rate_spacing": "the steps/s chart",
}
"""`TaskView` fields no column shows, each with where it is shown instead."""


def test_every_reading_of_a_task_has_a_column_or_says_where_it_is_shown() -> None:
    """A reading folded into `TaskView` (a new autolog value, say) without a column fails here until
    a column shows it or NOT_A_COLUMN says where it goes instead."""
    fields = {f.name for f in dataclasses.fields(TaskView)}
    shown = {name for column in COLUMNS for name in column.shows}
    assert sorted(fields - shown - set(NOT_A_COLUMN)) == []
    assert sorted(set(NOT_A_COLUMN) - fields) == []  # a field that went leaves the list too
    assert sorted(set(NOT_A_COLUMN) & shown) == []


def test_what_a_column_shows_is_there_to_show() -> None:
    task = TaskView("worker:0")
    assert [(c.key, n) for c in COLUMNS for n in c.shows if not hasattr(task, n)] == []


def test_no_part_of_a_column_has_a_default() -> None:
    """A column declared without its sort key, silent-host cell or status column does not load:
    None is said on purpose, never left out."""
    assert [f.name for f in dataclasses.fields(Column)
            if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING] == []


def test_keys_are_unique_and_labels_fit() -> None:
    keys = [c.key for c in COLUMNS]
    assert len(set(keys)) == len(keys)
    # a one-cell gap, the label, and for a column `s` sorts by, its ▲/▼
    assert [c.key for c in COLUMNS if len(c.label) + (c.sort is not None) > c.width - 1] == []


def test_s_cycles_through_exactly_the_columns_with_a_sort_key() -> None:
    assert sorted(SORT_CYCLE) == sorted(c.key for c in COLUMNS if c.sort is not None)
    assert SORT_CYCLE[0] == "task"


def test_status_lists_each_column_with_a_status_entry_once() -> None:
    listed = [c.key for c in COLUMNS if c.status is not None]
    assert sorted(STATUS_ORDER) == sorted([*listed, "address", "risk"])  # status-only: address, steps at risk


def test_a_silent_host_greys_every_column_and_a_live_one_does_not() -> None:
    view = columns_job()
    silent = task_cells(view.tasks["ps:0"], NOW, view.step_times)  # host a does not answer
    assert len(silent) == len(COLUMNS)
    by_key = dict(zip((c.key for c in COLUMNS), silent, strict=True))
    assert by_key["split"] == ("last seen 30s ago", "yellow")
    assert by_key["host"] == ("a (unreachable)", "yellow")
    assert by_key["cpu"] == no_reading(view.tasks["ps:0"], NOW)


def test_a_column_added_after_split_leaves_last_seen_where_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bug a declaration by position had: a column after ``split`` moved the "last seen" text."""
    extra = Column(key="lr", label="lr", width=8, right=True, cell=lambda t, _now, _s: ("0.1", ""),
                   silent=no_reading, sort=None, shows=(), status=None)
    monkeypatch.setattr(columns, "COLUMNS", (*COLUMNS, extra))
    view = columns_job()
    row = task_cells(view.tasks["ps:0"], NOW, view.step_times)
    assert row[-2] == ("last seen 30s ago", "yellow")
    assert row[-1] == ("—", "dim")
    live = task_cells(view.tasks["chief:0"], NOW, view.step_times)
    assert live[-1] == ("0.1", "")


def test_status_rows_follow_the_status_order() -> None:
    rows = columns.status_rows({"worker:0": {"host": None, "address": "h", "port": 1, "state": ev.RUNNING,
                                             "pid": None, "restarts": 0, "step": 3, "loss": None}})
    assert rows == [("TASK", "HOST", "ADDRESS", "STATE", "PID", "RESTARTS", "STEP", "LOSS", "CHECKPOINT",
                     "AT RISK", "STEP TIME"),
                    ("worker:0", "-", "h:1", "running", "-", "0", "3", "-", "none yet", "-", "-")]
    assert isinstance(columns.ADDRESS, Listed)
