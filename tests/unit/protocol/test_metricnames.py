"""The names inside a metric's ``values`` (launcher/protocol/metricnames.py): the bytes old runs'
events.jsonl hold (replay and status read them back), and one declaration of each."""

from __future__ import annotations

import re
from pathlib import Path

from launcher.protocol import metricnames as names

ROOT = Path(__file__).resolve().parents[3]


def test_the_names_are_those_old_runs_hold() -> None:
    assert [names.STEP_TIME + part for part in names.PARTS] == [
        "step_time/input", "step_time/compute", "step_time/peers", "step_time/other"]
    assert names.SECONDS_PER_STEP == "step_time/seconds_per_step"
    assert names.UNTIMED_CALLS == "step_time/untimed_calls"
    assert (names.CLOSURES_PER_S, names.CLOSURE_LATENCY_S) == ("closures_per_s/", "closure_latency_s/")
    assert (names.STEP_IS_CALLS, names.PROFILER_UNSAFE) == ("step_is_calls", "profiler_unsafe")


def test_no_other_module_spells_a_name() -> None:
    """A name spelled twice drifts: autolog would send what the launcher no longer reads."""
    spelled = re.compile(r"""["'](step_time/|closures_per_s/|closure_latency_s/|profiler_unsafe)""")
    owner = ROOT / "launcher" / "protocol" / "metricnames.py"
    paths = [path for top in ("launcher", "tui") for path in sorted((ROOT / top).rglob("*.py")) if path != owner]
    found = [f"{path.relative_to(ROOT)}:{n}" for path in paths
             for n, line in enumerate(path.read_text().splitlines(), 1) if spelled.search(line)]
    assert found == []
