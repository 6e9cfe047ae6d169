"""The bad-line corpus (tests/data/badlines/) against the event readers: every bad line is refused by
the checked decoder that reads a run's files, every good one read; the corpus has a wrong type for
every field a kind's class declares; and a live stream's decoder is the same checked one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from launcher import events as ev
from launcher.runlookup import EventLines
from launcher.telemetry import eventcheck
from launcher.telemetry.jobview import JobView
from launcher.telemetry.timeline import Timeline, clock_text

CORPUS = Path(__file__).resolve().parents[1] / "data" / "badlines"
BAD = [raw for raw in (CORPUS / "events.bad.jsonl").read_bytes().split(b"\n") if raw.strip()]
GOOD = [raw for raw in (CORPUS / "events.good.jsonl").read_bytes().split(b"\n") if raw.strip()]


@pytest.mark.parametrize("raw", BAD, ids=[str(n) for n in range(1, len(BAD) + 1)])
def test_each_bad_line_is_refused_by_the_checked_decoder(raw: bytes) -> None:
    with pytest.raises((UnicodeDecodeError, ev.EventDecodeError)):
        eventcheck.decode_checked(raw.decode("utf-8"))


def test_each_good_line_is_read() -> None:
    assert [eventcheck.decode_checked(raw.decode("utf-8")).kind for raw in GOOD][:2] == [ev.JOB, ev.JOB]


def _json_lines() -> list[dict[str, Any]]:
    out = []
    for raw in BAD:
        try:
            value = json.loads(raw)
        except ValueError:
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def _wrong(value: object, types: tuple[type, ...]) -> bool:
    return type(value) not in types or (type(value) is int and abs(value) >= 2 ** 63)


def test_the_corpus_has_a_wrong_type_for_every_field_the_readers_use() -> None:
    lines = _json_lines()
    missing = []
    specs = {kind: {name: spec for name, spec in vars(cls).items() if isinstance(spec, ev._Field)}
             for kind, cls in ev.KIND_CLASSES.items()}
    for kind, fields in specs.items():
        for name, spec in fields.items():
            if not any(line.get("kind") == kind and name in line and _wrong(line[name], spec.types) for line in lines):
                missing.append(f"{kind}.{name}")
    items = {(kind, name): spec.items for kind, fields in specs.items() for name, spec in fields.items() if spec.items}
    for (kind, name), item_fields in items.items():
        for key, types in item_fields.items():
            def wrong_item(line: dict[str, Any], name: str = name, key: str = key,
                           types: tuple[type, ...] = types) -> bool:
                items = line.get(name)
                items = items if isinstance(items, list) else [items]
                return any(isinstance(i, dict) and key in i and _wrong(i[key], types) for i in items)
            if not any(line.get("kind") == kind and wrong_item(line) for line in lines):
                missing.append(f"{kind}.{name}[].{key}")
    assert not missing, f"add a line with a wrong type for each to tests/data/badlines/events.bad.jsonl: {missing}"


def test_a_run_dir_of_good_and_bad_lines_reads_the_good_ones_and_counts_the_bad(tmp_path: Path) -> None:
    mixed = [line for pair in zip(GOOD, BAD, strict=False) for line in pair] + GOOD[len(BAD):] + BAD[len(GOOD):]
    torn = (CORPUS / "torn-last-line").read_bytes()
    (tmp_path / "events.jsonl").write_bytes(b"\n".join(mixed) + b"\n\n" + torn)
    lines = EventLines(tmp_path)
    assert [e.to_json() for e in lines] == [raw.decode() for raw in GOOD]
    assert lines.skipped == len(BAD) + 1
    note = lines.note()
    assert note is not None and f"skipped {len(BAD) + 1} bad lines" in note and "\n" not in note


def test_a_live_stream_refuses_what_a_run_dir_refuses() -> None:
    """A live stream decodes with ``Event.from_json``: the same check, so no wrong type reaches a fold."""
    for raw in BAD:
        with pytest.raises((UnicodeDecodeError, ev.EventDecodeError)):
            ev.Event.from_json(raw.decode("utf-8"))


def test_the_job_view_and_timeline_fold_the_good_lines() -> None:
    view, timeline = JobView(), Timeline(limit=None)
    for raw in GOOD:
        event = ev.Event.from_json(raw.decode("utf-8"))
        view.apply(event)
        timeline.add(event)
    assert view.tasks["worker:0"].restarts == 0 and view.tasks["chief:0"].host == "local"
    assert view.placement.bytes_per_task()
    entries = timeline.newest_first()
    assert entries and all(clock_text(e.ts, view.start_ts) for e in entries)
    assert clock_text(1e300, None) == clock_text(float("nan"), 0.0) == "--:--:--"
