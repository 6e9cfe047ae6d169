"""The [metrics] number rules shared by the agent and `check --metrics-sample`."""

from __future__ import annotations

import math

import pytest

from launcher.agent.metricregex import MetricRegexes, first_number, leading_number


@pytest.mark.parametrize(("text", "number"), [
    ("2.533713.", 2.533713),       # trailing punctuation of a sentence
    ("2.533713,", 2.533713),
    ("1,234", 1234.0),             # thousands separators in groups of three
    ("1,234,567.5", 1234567.5),
    ("1,5", 1.0),                  # any other comma ends the number
    ("12,3456", 12.0),
    ("  -3e-2)", -0.03),
    ("12/100", 12.0),
    (".5s", 0.5),
])
def test_leading_number(text: str, number: float) -> None:
    assert leading_number(text) == number


def test_leading_number_reads_nan_but_not_words() -> None:
    value = leading_number("nan")
    assert value is not None and math.isnan(value)
    assert leading_number("nanoseconds") is None
    assert leading_number("abc") is None


def test_first_number_skips_digits_glued_to_words() -> None:
    assert first_number("loss: 0.25") == 0.25
    assert first_number("step1: 3") == 3.0


def test_trailing_punctuation_gives_the_value() -> None:
    result = MetricRegexes({"loss": r"train_loss: ([-+0-9.eE]+)"}).apply(
        "Epoch: 0, accuracy: 0.099442, train_loss: 2.533713.")
    assert result.loss == 2.533713 and result.misses == []


def test_pattern_without_group_takes_the_first_number_of_the_match() -> None:
    result = MetricRegexes({"step": r"step \d+"}).apply("global step 42 done")
    assert result.step == 42 and result.misses == []


def test_group_that_captures_text_is_a_miss_naming_regex_text_and_line() -> None:
    result = MetricRegexes({"lr": r"lr=(\w+)"}).apply("epoch 1 lr=high")
    assert result.values == {} and not result.any_value
    [miss] = result.misses
    message = miss.message()
    assert "lr" in message and "'high'" in message and "epoch 1 lr=high" in message
    assert "--metrics-sample" in message


def test_optional_group_that_did_not_take_part_is_a_miss() -> None:
    [miss] = MetricRegexes({"loss": r"loss(?:=(\d+))?"}).apply("loss").misses
    assert miss.captured is None and "captured nothing" in miss.message()


def test_pattern_that_never_matches_gives_nothing() -> None:
    result = MetricRegexes({"step": r"zzz (\d+)"}).apply("step 5")
    assert not result.any_value and result.misses == []


def test_invalid_pattern_is_listed_not_raised() -> None:
    regexes = MetricRegexes({"bad": "(unclosed", "step": r"s (\d+)"})
    assert [name for name, _ in regexes.invalid] == ["bad"]
    assert regexes.apply("s 3").step == 3
