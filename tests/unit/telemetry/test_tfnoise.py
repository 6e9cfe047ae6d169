"""TensorFlow's start-up lines: each row of the table against its examples and real captured output."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.telemetry.tfnoise import STARTUP_LINES, StartupFilter, hidden_note, split_startup

CAPTURED = Path(__file__).resolve().parents[2] / "data" / "tf_startup"


def _captured(name: str) -> list[str]:
    return (CAPTURED / name).read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize("row", STARTUP_LINES, ids=lambda row: row.name)
def test_every_example_of_a_row_is_hidden_after_its_head(row) -> None:
    heads = [line for line in row.examples if row.pattern().match(line)]
    assert heads, f"{row.name}: no example matches its own pattern"
    for line in row.examples:
        startup = StartupFilter()
        if line not in heads:  # a continuation: hidden only right after its head
            assert not startup.hides(line)
            assert startup.hides(heads[0])
        assert startup.hides(line), line


def test_every_line_of_a_real_tensorflow_start_is_hidden() -> None:
    lines = _captured("tf-2.21-cpu-default.txt")
    assert len(lines) >= 8
    assert split_startup(lines) == ([], len(lines))


def test_a_real_failure_keeps_its_own_lines_and_whole_traceback() -> None:
    lines = _captured("tf-2.21-cpu-failing.txt")
    kept, hidden = split_startup(lines)
    assert hidden == 7
    start = lines.index("Traceback (most recent call last):")
    assert kept == ["reshaping", *lines[start:]]
    assert kept[-1].startswith("tensorflow.python.framework.errors_impl.InvalidArgumentError")


@pytest.mark.parametrize("line", [
    # a fatal check in the same file is what the task dies from
    "F0000 00:00:1795531818.913117     845 port.cc:153] oneDNN custom operations are on. Check failed",
    # the same words in a Python exception or a traceback line
    "RuntimeError: Could not find cuda drivers on your machine, GPU will not be used.",
    "    raise RuntimeError('failed call to cuInit: no device')",
    "tensorflow.python.framework.errors_impl.InternalError: failed call to cuInit: CUDA_ERROR_NO_DEVICE",
    # another message from a file of the table
    "E0000 00:00:1795531821.424901     845 cuda_platform.cc:52] could not open device 0",
    "I0000 00:00:1795531818.913117     845 other.cc:153] oneDNN custom operations are on. ",
    # cpu_feature_guard's second line alone
    "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow with the "
    "appropriate compiler flags.",
    "Traceback (most recent call last):",
])
def test_errors_and_tracebacks_are_never_hidden(line: str) -> None:
    assert not StartupFilter().hides(line)


def test_the_continuation_is_hidden_only_right_after_its_head() -> None:
    head, tail = _captured("tf-2.21-cpu-default.txt")[3:5]
    assert "cpu_feature_guard.cc" in head and tail.startswith("To enable")
    startup = StartupFilter()
    assert [startup.hides(line) for line in (head, "my own line", tail)] == [True, False, False]


def test_hidden_note() -> None:
    assert hidden_note(1, "press v to show") == "1 TensorFlow start-up line hidden; press v to show"
    assert hidden_note(5, "press v to show") == "5 TensorFlow start-up lines hidden; press v to show"
