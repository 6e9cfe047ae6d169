"""The filter across tasks and the merged, time-ordered log that `logs --all` and the dashboard share."""

from __future__ import annotations

import pytest

from launcher import events as ev
from launcher.telemetry.jobview import JobView
from launcher.telemetry.mergedlog import (
    FilterError,
    LogFilter,
    MergedLog,
    MergedSelection,
    TaskSet,
    is_warning,
    parse_filter,
)

TASKS = ["chief:0", "ps:0", "ps:1", "worker:0", "worker:1", "worker:10"]


@pytest.mark.parametrize(("spec", "wanted"), [
    ("worker:*", ["worker:0", "worker:1", "worker:10"]),
    ("chief:0,ps:0", ["chief:0", "ps:0"]),
    ("ps", ["ps:0", "ps:1"]),
    ("worker:1", ["worker:1"]),
    ("worker:1?  chief", ["chief:0", "worker:10"]),
    ("", TASKS),
])
def test_a_task_set_takes_ids_roles_and_globs(spec: str, wanted: list[str]) -> None:
    tasks = TaskSet.parse(spec)
    assert [t for t in TASKS if tasks.matches(t)] == wanted


def test_a_task_set_names_the_items_no_task_answers_to() -> None:
    assert TaskSet.parse("worker:*,evaluator,ps:7").unmatched(TASKS) == ["evaluator", "ps:7"]


@pytest.mark.parametrize(("stream", "line", "warning"), [
    ("stdout", "WARNING:tensorflow:5 out of the last 5 calls", True),
    ("stdout", "ERROR in step 5", True),
    ("stderr", "Traceback (most recent call last):", True),
    ("stderr", "tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM", True),
    ("stderr", "W0000 00:00:1714550400.123 12 gpu.cc:1] no GPU", True),
    ("stderr", "2024-05-01 10:00:00.1: E tensorflow/core/x.cc:1] failed", True),
    ("stdout", "W0000 looks like glog but is stdout", False),
    ("stderr", "I0000 00:00:1714550400.123 12 info.cc:1] cuda found", False),
    ("stdout", "error rate 0.1 (lower case is not a level)", False),
    ("stdout", "step 10 loss 0.5", False),
])
def test_the_warn_level(stream: str, line: str, warning: bool) -> None:
    assert is_warning(stream, line) is warning


def test_one_line_filter_has_tasks_a_level_and_a_regex() -> None:
    parsed = parse_filter("task=worker:* level=stderr  loss [0-9]+ ")
    assert parsed.tasks.items == ("worker:*",)
    assert parsed.level == "stderr"
    assert parsed.regex is not None and parsed.regex.pattern == "loss [0-9]+"
    assert parsed.keeps("worker:1", "stderr", "loss 12")
    assert not parsed.keeps("worker:1", "stdout", "loss 12")
    assert not parsed.keeps("chief:0", "stderr", "loss 12")
    assert not parsed.keeps("worker:1", "stderr", "loss x")
    assert parsed.describe() == "task=worker:* level=stderr loss [0-9]+"
    assert parse_filter("").is_everything
    assert parse_filter("tasks=ps:0 tasks=chief:0").tasks.items == ("ps:0", "chief:0")


@pytest.mark.parametrize(("text", "words"), [("loss (", "no regex"), ("level=debug", "none of all, stderr, warn")])
def test_a_bad_filter_is_one_message(text: str, words: str) -> None:
    with pytest.raises(FilterError, match=words):
        parse_filter(text)
    with pytest.raises(FilterError):
        LogFilter(level="loud")


def test_the_job_view_keeps_every_tasks_lines_together_with_their_place_in_the_tasks_log() -> None:
    view = JobView()
    view.apply(ev.log_event("r", "ps:0", "stdout", "ps up", ts=1.0))
    view.apply(ev.log_event("r", "chief:0", "stdout", "chief up", ts=2.0))
    view.apply(ev.log_event("r", "ps:0", "stderr", "ps warns", ts=3.0))
    assert [(e.task, e.number, e.line) for e in view.merged_log.entries] == [
        ("ps:0", 0, "ps up"), ("chief:0", 0, "chief up"), ("ps:0", 1, "ps warns")]
    assert view.log("ps:0").lines[1].line == "ps warns"


def test_a_selection_is_in_time_order_when_lines_arrive_late() -> None:
    log = MergedLog()
    log.add("worker:0", 0, 10.0, "stdout", "w0 at 10")
    log.add("worker:1", 0, 12.0, "stdout", "w1 at 12")
    selection = MergedSelection()
    selection.rebuild(log)
    log.add("worker:0", 1, 11.0, "stdout", "w0 at 11")  # its host was slower to tell
    log.add("worker:1", 1, 12.0, "stdout", "w1 again at 12")
    added, moved = selection.sync(log)
    assert (added, moved) == (2, True)
    assert [e.line for e in selection.rows] == ["w0 at 10", "w0 at 11", "w1 at 12", "w1 again at 12"]
    log.add("ps:0", 0, 13.0, "stdout", "ps at 13")
    assert selection.sync(log) == (1, False)


def test_a_selection_keeps_what_its_filter_keeps_and_lets_dropped_lines_go() -> None:
    log = MergedLog(max_lines=4)
    for i in range(3):
        log.add(f"worker:{i % 2}", i, float(i), "stderr" if i == 1 else "stdout", f"line {i}")
    selection = MergedSelection()
    selection.rebuild(log, parse_filter("task=worker:0"))
    assert [e.line for e in selection.rows] == ["line 0", "line 2"]
    for i in range(3, 6):
        log.add(f"worker:{i % 2}", i, float(i), "stdout", f"line {i}")
    selection.sync(log)
    assert [e.line for e in selection.rows] == ["line 2", "line 4"]
    assert (selection.kept, selection.dropped) == (4, 2)
