"""The profile's ``[metrics]`` regexes: what each gives for one line of task output.

Shared by the agent (on hosts: stdlib-only, Python >= 3.9) and ``distlaunch check
--metrics-sample`` (where the user types), so a regex tried on a saved log behaves exactly as
it will in the job.

How a match becomes a number:

- with a group, the text of group 1; without one, the whole match;
- the text's leading number is taken (``2.533713.`` -> 2.533713, ``12/100`` -> 12); without a
  group, the first number anywhere in the match (``loss: 0.25`` -> 0.25);
- a comma between digit groups of three is a thousands separator (``1,234`` -> 1234,
  ``1,234,567.5`` -> 1234567.5); any other comma ends the number (``1,5`` -> 1);
- a match that gives no number (``nan`` and ``inf`` are numbers) is a *miss*: the caller warns
  once per regex, naming the regex, the captured text and the line.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

_NUMBER = r"[-+]?(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_LEADING = re.compile(r"\s*(" + _NUMBER + r"|[-+]?(?:nan|inf(?:inity)?)\b)", re.IGNORECASE)
_ANYWHERE = re.compile(r"(?<![\w.])(" + _NUMBER + r")")


def _to_number(text: str) -> Optional[float]:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def leading_number(text: str) -> Optional[float]:
    """The number ``text`` starts with (after blanks), or None."""
    match = _LEADING.match(text)
    return _to_number(match.group(1)) if match else None


def first_number(text: str) -> Optional[float]:
    """The first number anywhere in ``text``, or None."""
    match = _ANYWHERE.search(text)
    return _to_number(match.group(1)) if match else None


class Miss:
    """A regex that matched a line but gave no number."""

    def __init__(self, name: str, pattern: str, captured: Optional[str], line: str) -> None:
        self.name = name
        self.pattern = pattern
        self.captured = captured
        self.line = line

    def message(self) -> str:
        what = "captured nothing" if self.captured is None else "captured %r, which is no number" % self.captured
        return ("metrics regex %s = %r matched but %s; line: %s (fix the group, then try it with "
                "`distlaunch check PROFILE --metrics-sample LOGFILE`)" % (self.name, self.pattern, what, self.line))


class LineResult:
    """What the regexes give for one line: step, loss, other values, and the misses."""

    def __init__(self) -> None:
        self.step: Optional[int] = None
        self.loss: Optional[float] = None
        self.values: Dict[str, float] = {}
        self.misses: List[Miss] = []
        self.matched: List[str] = []  # names of regexes that gave a number

    @property
    def any_value(self) -> bool:
        return bool(self.matched)


class MetricRegexes:
    """Compiled ``name -> regex`` pairs; ``invalid`` lists (name, error) of those that did not compile."""

    def __init__(self, patterns: Dict[str, str]) -> None:
        self.patterns: List[Tuple[str, str, "re.Pattern[str]"]] = []
        self.invalid: List[Tuple[str, str]] = []
        for name, pattern in patterns.items():
            try:
                self.patterns.append((name, pattern, re.compile(pattern)))
            except re.error as exc:
                self.invalid.append((name, str(exc)))

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def apply(self, line: str) -> LineResult:
        result = LineResult()
        for name, pattern, regex in self.patterns:
            match = regex.search(line)
            if match is None:
                continue
            if regex.groups:
                captured = match.group(1)
                number = leading_number(captured) if captured is not None else None
            else:
                captured = match.group(0)
                number = first_number(captured)
            if number is None:
                result.misses.append(Miss(name, pattern, captured, line))
                continue
            result.matched.append(name)
            if name == "step":
                if number == number and abs(number) != float("inf"):
                    result.step = int(number)
            elif name == "loss":
                result.loss = number
            else:
                result.values[name] = number
        return result
