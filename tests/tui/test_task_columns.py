# ruff: noqa: E501  (the pinned lines are as long as the rows they pin)
"""The task table's rows, order and header, pinned cell by cell (text and style) for every situation
the fixture's tasks stand in: a column moved, dropped or drawn differently fails here."""

from __future__ import annotations

import pytest

from tests.unit.telemetry.column_fixture import NOW, columns_job
from tui.task_table import SORT_COLUMNS, header_line, ordered_tasks, task_cells

ROWS = {
    'chief:0': (
        ('chief:0', 'bold'),
        ('b', ''),
        ('running', 'bold green'),
        ('', ''),
        ('0', 'dim'),
        ('300', ''),
        ('260 12s', ''),
        ('0.45', ''),
        ('0.0', ''),
        ('▄▄▄▄▄', 'cyan'),
        ('████  123', 'green'),
        ('███▍   85', 'magenta'),
        ('3.0G/16G', ''),
        ('700M', ''),
        ('100', 'dim'),
        ('3s', 'dim'),
        ('iiiiicco input', 'split'),
    ),
    'worker:0': (
        ('worker:0', 'dim'),
        ('a (unreachable)', 'yellow'),
        ('running', 'dim'),
        ('', 'dim'),
        ('0', 'dim'),
        ('50c', 'dim'),
        ('none yet', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('5s', 'bold black on yellow'),
        ('last seen 5s ago', 'yellow'),
    ),
    'worker:1': (
        ('worker:1', 'bold'),
        ('b', ''),
        ('running', 'bold green'),
        ('STALL', 'bold black on dark_orange'),
        ('0', 'dim'),
        ('7', ''),
        ('none yet', 'dim'),
        ('nan', 'bold red'),
        ('—', ''),
        ('', 'cyan'),
        ('—', 'green'),
        ('—', 'dim'),
        ('—', ''),
        ('—', ''),
        ('102', 'dim'),
        ('4s', 'dim'),
        ('—', ''),
    ),
    'worker:2': (
        ('worker:2', 'bold'),
        ('a', ''),
        ('failed', 'bold red'),
        ('', ''),
        ('2', 'yellow'),
        ('—', ''),
        ('—', ''),
        ('—', ''),
        ('—', ''),
        ('', 'cyan'),
        ('—', 'green'),
        ('—', 'dim'),
        ('—', ''),
        ('—', ''),
        ('—', 'dim'),
        ('20s', 'dim'),
        ('—', ''),
    ),
    'worker:3': (
        ('worker:3', 'bold black on yellow'),
        ('b', ''),
        ('running', 'bold green'),
        ('', ''),
        ('0', 'dim'),
        ('55', ''),
        ('none yet', 'dim'),
        ('1.25', ''),
        ('—', ''),
        ('', 'cyan'),
        ('—', 'green'),
        ('—', 'dim'),
        ('—', ''),
        ('—', ''),
        ('104', 'dim'),
        ('25s', 'bold black on yellow'),
        ('- no step timed', 'dim'),
    ),
    'ps:0': (
        ('ps:0', 'dim'),
        ('a (unreachable)', 'yellow'),
        ('running', 'dim'),
        ('', 'dim'),
        ('0', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('30s', 'bold black on yellow'),
        ('last seen 30s ago', 'yellow'),
    ),
    'ps:1': (
        ('ps:1', 'bold black on yellow'),
        ('b', ''),
        ('running', 'bold green'),
        ('', ''),
        ('0', 'dim'),
        ('—', ''),
        ('—', ''),
        ('—', ''),
        ('—', ''),
        ('', 'cyan'),
        ('—', 'green'),
        ('—', 'dim'),
        ('—', ''),
        ('—', ''),
        ('106', 'dim'),
        ('30s', 'bold black on yellow'),
        ('12.5 closures/s', 'split-text'),
    ),
    'evaluator:0': (
        ('evaluator:0', 'bold'),
        ('—', ''),
        ('pending', 'dim'),
        ('', ''),
        ('0', 'dim'),
        ('—', ''),
        ('—', ''),
        ('—', ''),
        ('—', ''),
        ('', 'cyan'),
        ('—', 'green'),
        ('—', 'dim'),
        ('—', ''),
        ('—', ''),
        ('—', 'dim'),
        ('29s', 'dim'),
        ('—', ''),
    ),
    'ps:2': (  # lost: greyed through, with why in the last column (issue 55)
        ('ps:2', 'dim'),
        ('c', 'dim'),
        ('lost', 'dim'),
        ('', 'dim'),
        ('1', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('—', 'dim'),
        ('10s', 'dim'),
        ('lost: host c lost', 'dim'),
    ),
}

ORDERS = {
    ('task', False): ['chief:0', 'ps:0', 'ps:1', 'ps:2', 'worker:0', 'worker:1', 'worker:2', 'worker:3', 'evaluator:0'],
    ('task', True): ['evaluator:0', 'worker:3', 'worker:2', 'worker:1', 'worker:0', 'ps:2', 'ps:1', 'ps:0', 'chief:0'],
    ('host', False): ['ps:0', 'worker:0', 'worker:2', 'chief:0', 'ps:1', 'worker:1', 'worker:3', 'ps:2', 'evaluator:0'],
    ('host', True): ['ps:2', 'chief:0', 'ps:1', 'worker:1', 'worker:3', 'ps:0', 'worker:0', 'worker:2', 'evaluator:0'],
    # a lost task is trouble: beside the failed one, not after every running one (nor first, reversed)
    ('state', False): ['worker:2', 'ps:2', 'evaluator:0', 'chief:0', 'ps:0', 'ps:1', 'worker:0', 'worker:1', 'worker:3'],
    ('state', True): ['chief:0', 'ps:0', 'ps:1', 'worker:0', 'worker:1', 'worker:3', 'evaluator:0', 'ps:2', 'worker:2'],
    ('rate', False): ['chief:0', 'worker:0', 'ps:0', 'ps:1', 'ps:2', 'worker:1', 'worker:2', 'worker:3', 'evaluator:0'],
    ('rate', True): ['chief:0', 'worker:0', 'ps:0', 'ps:1', 'ps:2', 'worker:1', 'worker:2', 'worker:3', 'evaluator:0'],
    ('loss', False): ['chief:0', 'worker:3', 'ps:0', 'ps:1', 'ps:2', 'worker:0', 'worker:1', 'worker:2', 'evaluator:0'],
    ('loss', True): ['worker:3', 'chief:0', 'ps:0', 'ps:1', 'ps:2', 'worker:0', 'worker:1', 'worker:2', 'evaluator:0'],
    ('gpu', False): ['chief:0', 'ps:0', 'ps:1', 'ps:2', 'worker:0', 'worker:1', 'worker:2', 'worker:3', 'evaluator:0'],
    ('gpu', True): ['chief:0', 'ps:0', 'ps:1', 'ps:2', 'worker:0', 'worker:1', 'worker:2', 'worker:3', 'evaluator:0'],
}


@pytest.mark.parametrize("task_id", list(ROWS))
def test_each_row_is_drawn_as_before(task_id: str) -> None:
    view = columns_job()
    assert task_cells(view.tasks[task_id], NOW, view.step_times) == ROWS[task_id]


def test_every_order_of_s_and_S_is_as_before() -> None:
    view = columns_job()
    assert SORT_COLUMNS == ("task", "host", "state", "rate", "loss", "gpu")
    for (column, reverse), expected in ORDERS.items():
        assert ordered_tasks(view, list(view.tasks), column, reverse, NOW) == expected, (column, reverse)


def test_the_header_marks_the_sort_column() -> None:
    assert header_line().plain == ' task▲     host      state      flags       rst    step      ckpt    loss   st/s trend    cpu%      gpu%        gpu mem    rss     pid  age step time              '
    assert header_line("rate", True).plain == ' task      host      state      flags       rst    step      ckpt    loss  st/s▼ trend    cpu%      gpu%        gpu mem    rss     pid  age step time              '
