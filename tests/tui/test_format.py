"""The small figures drawn inside table cells: bars and sparklines."""

from __future__ import annotations

from tui.format import bar, spark


def test_bar_fills_eighths_of_cells_and_clamps() -> None:
    assert bar(83, 4) == "███▍"  # 83% of 32 eighths = 26.6 -> 27
    assert bar(150, 4) == "████"  # several cores: the bar stops at full
    assert bar(0, 4) == "    " and bar(None, 4) == "    "
    assert bar(50, 1) == "▌"


def test_spark_shows_the_shape_between_its_own_extremes() -> None:
    assert spark([1, 2, 3, 4, 5, 6, 7, 8, 9], 8) == "▁▂▃▄▅▆▇█"  # the last 8 values
    assert spark([10.0, 10.0, 10.0], 8) == "▄▄▄"  # steady: a flat middle line
    assert spark([10, 10, 2, 10], 8) == "██▁█"  # a dip shows
    assert spark([], 8) == ""
