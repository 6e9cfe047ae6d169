"""Every task's log lines as one, in time order, and the filter across tasks: the one implementation
behind `distlaunch logs RUN --all` and the dashboard's merged log (`L`).

A filter keeps a line when it passes all of its parts (`LogFilter`):

- a task set (`TaskSet`): task ids (``chief:0``), roles (``worker``) and globs (``worker:*``),
  separated by commas or spaces;
- a regex searched in the line (Python's `re`);
- a level: ``all``; ``stderr`` (what the task wrote to stderr); ``warn``, warnings and errors:
  a line from stderr that TensorFlow's C++ logging marks ``W``/``E``/``F``, or any line that holds
  one of the words WARNING, WARN, ERROR, CRITICAL, FATAL (upper case), ``Traceback`` or a Python
  exception's name followed by a colon (``ValueError:``, ``OutOfRangeException:``).

The dashboard types all three in one line (`parse_filter`): ``task=worker:*,chief:0``,
``level=warn`` and, for the rest of the line, the regex.

`MergedLog` keeps the last `MERGED_LOG_LINES` lines of all tasks as they arrive (hosts' lines
reach the launcher a little out of order); `MergedSelection` is one reader's filtered view of it,
kept in time order as lines come and go.
"""

from __future__ import annotations

import re
import time
from bisect import insort
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

MERGED_LOG_LINES = 20_000
"""Lines of all tasks kept together; older ones are dropped (and counted)."""

LEVELS = ("all", "stderr", "warn")

WARN_WORDS = re.compile(
    r"\b(?:WARNING|WARN|ERROR|CRITICAL|FATAL)\b|\bTraceback\b|\b[A-Z]\w*(?:Error|Exception):")
"""What makes a line a warning or an error for the ``warn`` level, from either stream."""

TF_LOG_MARK = re.compile(r"^(?:\S+ \S+: )?[WEF](?:\d{4} | tensorflow/)")
"""TensorFlow's C++ logging of a warning, error or fatal (``W0000 00:00:...``, ``2024-05-01
10:00:00.1: E tensorflow/...``): only on stderr, where it writes."""


class FilterError(ValueError):
    """A filter that cannot be used, in words a user can act on."""


@dataclass(frozen=True)
class TaskSet:
    """Task ids, roles and globs (``chief:0``, ``worker``, ``worker:*``); empty: every task."""

    items: tuple[str, ...] = ()

    @classmethod
    def parse(cls, specs: str | Iterable[str]) -> TaskSet:
        """From ``"chief:0,worker:*"`` or several such strings (commas or spaces between items)."""
        texts = [specs] if isinstance(specs, str) else list(specs)
        items = tuple(item for text in texts for item in re.split(r"[,\s]+", text) if item)
        return cls(items)

    def __bool__(self) -> bool:
        return bool(self.items)

    @staticmethod
    def _item_matches(item: str, task: str) -> bool:
        if ":" not in item and not any(c in item for c in "*?["):
            return task.split(":")[0] == item
        return fnmatchcase(task, item)

    def matches(self, task: str | None) -> bool:
        if not self.items:
            return True
        return task is not None and any(self._item_matches(item, task) for item in self.items)

    def unmatched(self, known: Iterable[str]) -> list[str]:
        """The items no task of ``known`` answers to (a typo, most likely)."""
        tasks = list(known)
        return [item for item in self.items if not any(self._item_matches(item, t) for t in tasks)]


def is_warning(stream: str, line: str) -> bool:
    """The ``warn`` level: see the module's docstring."""
    return WARN_WORDS.search(line) is not None or (stream == "stderr" and TF_LOG_MARK.match(line) is not None)


def compile_regex(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise FilterError(f"{pattern!r} is no regex ({exc})") from None


@dataclass(frozen=True)
class LogFilter:
    """Which lines to keep: those of `tasks`, that `regex` finds, at `level` (see the module)."""

    tasks: TaskSet = field(default_factory=TaskSet)
    regex: re.Pattern[str] | None = None
    level: str = "all"

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise FilterError(f"level {self.level!r} is none of {', '.join(LEVELS)}")

    @property
    def is_everything(self) -> bool:
        return not self.tasks and self.regex is None and self.level == "all"

    def keeps(self, task: str | None, stream: str, line: str) -> bool:
        if self.tasks and not self.tasks.matches(task):
            return False
        if self.level == "stderr" and stream != "stderr":
            return False
        if self.level == "warn" and not is_warning(stream, line):
            return False
        return self.regex is None or self.regex.search(line) is not None

    def describe(self) -> str:
        """The filter as typed back (``task=worker:* level=warn loss``); empty for none."""
        parts = []
        if self.tasks:
            parts.append("task=" + ",".join(self.tasks.items))
        if self.level != "all":
            parts.append(f"level={self.level}")
        if self.regex is not None:
            parts.append(self.regex.pattern)
        return " ".join(parts)


_KEYWORD = re.compile(r"(?:^|\s)(tasks?|level)=(\S*)")


def parse_filter(text: str) -> LogFilter:
    """The dashboard's one-line filter: ``task=SET`` and ``level=stderr|warn`` anywhere, the rest
    of the line (trimmed) a regex. Raises `FilterError`."""
    tasks: list[str] = []
    level = "all"
    for match in _KEYWORD.finditer(text):
        name, value = match.group(1), match.group(2)
        if name == "level":
            if value not in LEVELS:
                raise FilterError(f"level={value} is none of {', '.join(LEVELS)}")
            level = value
        else:
            tasks.append(value)
    rest = _KEYWORD.sub(" ", text).strip()
    return LogFilter(TaskSet.parse(tasks), compile_regex(rest) if rest else None, level)


def clock_ms(ts: float) -> str:
    """``12:01:02.345``: a line's local time of day to the millisecond."""
    try:
        return time.strftime("%H:%M:%S", time.localtime(ts)) + f".{int(ts * 1000) % 1000:03d}"
    except (OverflowError, OSError, ValueError):
        return "--:--:--.---"


@dataclass(frozen=True, slots=True)
class MergedEntry:
    """One line of one task: ``number`` is its place in that task's own log (`TaskLog.total`
    before it was added), ``serial`` its place among all tasks' lines as they arrived."""

    serial: int
    task: str
    number: int
    ts: float
    stream: str
    line: str

    @property
    def order(self) -> tuple[float, int]:
        """Time order; lines of the same time in the order they arrived."""
        return (self.ts, self.serial)


def in_time_order(entries: Iterable[MergedEntry]) -> list[MergedEntry]:
    return sorted(entries, key=lambda e: e.order)


class MergedLog:
    """The last `MERGED_LOG_LINES` lines of all tasks in the order they arrived; ``total`` counts
    every line ever added, ``dropped`` those no longer kept."""

    def __init__(self, max_lines: int = MERGED_LOG_LINES) -> None:
        self.entries: deque[MergedEntry] = deque(maxlen=max_lines)
        self.total = 0

    def add(self, task: str, number: int, ts: float, stream: str, line: str) -> MergedEntry:
        entry = MergedEntry(self.total, task, number, ts, stream, line)
        self.entries.append(entry)
        self.total += 1
        return entry

    @property
    def dropped(self) -> int:
        return self.total - len(self.entries)

    def since(self, seen_total: int) -> list[MergedEntry]:
        """Lines added after a reader saw ``seen_total`` (only those still kept)."""
        new = min(self.total - seen_total, len(self.entries))
        return list(self.entries)[-new:] if new > 0 else []


class MergedSelection:
    """The lines of a `MergedLog` that a `LogFilter` keeps, in time order (``rows``), kept up to
    date by `sync`: new lines go in at their time, dropped ones leave."""

    def __init__(self, log_filter: LogFilter | None = None) -> None:
        self.filter = log_filter or LogFilter()
        self.rows: list[MergedEntry] = []
        self.kept = 0  # lines of the log kept when last synced, matching or not
        self.dropped = 0
        self._seen_total = 0

    def rebuild(self, log: MergedLog, log_filter: LogFilter | None = None) -> None:
        if log_filter is not None:
            self.filter = log_filter
        keeps = self.filter.keeps
        self.rows = in_time_order(e for e in log.entries if keeps(e.task, e.stream, e.line))
        self._seen_total, self.kept, self.dropped = log.total, len(log.entries), log.dropped

    def sync(self, log: MergedLog) -> tuple[int, bool]:
        """Take the lines added since the last call; returns how many matched, and whether any
        went in before the last row (a late line) or rows were dropped: the shown lines moved."""
        if log.total < self._seen_total:  # another log: start over
            self.rebuild(log)
            return len(self.rows), True
        moved = False
        added = 0
        keeps = self.filter.keeps
        for entry in log.since(self._seen_total):
            if keeps(entry.task, entry.stream, entry.line):
                if self.rows and entry.order < self.rows[-1].order:
                    insort(self.rows, entry, key=lambda e: e.order)
                    moved = True
                else:
                    self.rows.append(entry)
                added += 1
        self._seen_total = log.total
        if log.dropped != self.dropped:
            first = log.entries[0].serial if log.entries else log.total
            before = len(self.rows)
            self.rows = [e for e in self.rows if e.serial >= first]
            moved = moved or len(self.rows) != before
        self.kept, self.dropped = len(log.entries), log.dropped
        return added, moved
