"""`make demo` shows no TensorFlow warnings: cluster_profiles/local.toml's job (examples/ps_mnist.py
under ParameterServerStrategy) run as the demo runs it, shortened, with checkpoints often enough
that TensorFlow's retracing warning would show (from the fifth save on, when every save traced a
function anew), and run again to see it resume from its checkpoint as each `make demo` does."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import REPO, cli, kill_run_processes, read_events
from tests.sshd import free_port

pytestmark = pytest.mark.slow

CHECKPOINT_EVERY = 20
#: a WARNING of TensorFlow's Python logger, plain ("WARNING:tensorflow:...") or absl's format
#: ("W0101 12:00:00.000000 140 polymorphic_function.py:154] ..."); C++ lines name .cc files
PYTHON_WARNING = re.compile(r"^WARNING:tensorflow:|^W\d{4} [\d:.]+\s+\d+ [\w.]+\.py:\d+\]")


def run_demo(tmp: Path, outputs: Path, run: str, seconds: int) -> list[dict[str, Any]]:
    """The demo's `up` with --set overrides (outputs, free ports) and a shorter training time."""
    ports = [f"--set=roles.{role}.port={free_port()}" for role in ("ps", "worker", "chief")]
    try:
        up = cli("up", str(REPO / "cluster_profiles/local.toml"), "--no-tui", "--run-dir", str(tmp / run),
                 "--run-id", f"it-demo-{run}", f"--set=outputs={outputs}", *ports,
                 "--", "--train-seconds", str(seconds), "--checkpoint-every", str(CHECKPOINT_EVERY), timeout=240)
    finally:
        kill_run_processes(f"it-demo-{run}")
    assert up.returncode == 0, up.stdout[-3000:] + up.stderr[-2000:]
    return read_events(tmp / run)


def chief_lines(events: list[dict[str, Any]]) -> list[str]:
    return [str(e["line"]) for e in events if e["kind"] == "log" and e["task"] == "chief:0"]


@pytest.mark.timeout(400)
def test_the_demo_logs_no_tensorflow_warning_and_resumes(tmp_path: Path) -> None:
    outputs = tmp_path / "outputs"
    first = run_demo(tmp_path, outputs, "first", 12)
    steps = [e["step"] for e in first if e["kind"] == "metric" and e["task"] == "chief:0"
             and isinstance(e.get("step"), int)]
    assert steps and max(steps) >= 6 * CHECKPOINT_EVERY, steps  # six saves at least: retracing would show
    second = run_demo(tmp_path, outputs, "second", 3)
    assert f"resumed from step {max(steps)}; training for 3 s (at most to step 1000000)" in chief_lines(second)
    for events in (first, second):
        warnings = [f"{e['task']}: {e['line']}" for e in events
                    if e["kind"] == "log" and PYTHON_WARNING.search(str(e["line"]))]
        assert warnings == []
        assert not any("retracing" in str(e.get("line")) for e in events if e["kind"] == "log")
