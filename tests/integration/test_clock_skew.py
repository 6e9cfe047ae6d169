"""A host whose clock is minutes off: the launcher's record and the dashboard's ages stay sane."""

from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import pytest

from launcher import events as ev
from launcher.runlookup import read_events
from launcher.telemetry.jobview import JobView
from tests.integration.jobtools import cli, kill_run_processes
from tests.profiles import build_profile

SKEW_S = 300

needs_faketime = pytest.mark.skipif(shutil.which("faketime") is None and not os.environ.get("CI"),
                                    reason="needs faketime (apt-get install faketime)")

# timed waits, not time.sleep: libfaketime breaks Python's sleep (EINVAL)
TASK = """
import json, threading
pause = threading.Event().wait
pause(2.5)  # idle: the follower sends heartbeats with the host's time
for step in range(1, 11):
    print("@distlaunch " + json.dumps({"kind": "metric", "step": step * 10, "loss": 1.0 / step}), flush=True)
    pause(0.1)
"""


@needs_faketime
def test_a_host_five_minutes_ahead_is_corrected_and_told(tmp_path: Path) -> None:
    skewed = tmp_path / "python-ahead"
    # only the wall clock: a faked monotonic clock hangs Python's timed waits
    skewed.write_text("#!/bin/sh\nFAKETIME_DONT_FAKE_MONOTONIC=1 "
                      f"exec faketime -f +{SKEW_S}s {sys.executable} \"$@\"\n")
    skewed.chmod(0o755)
    (tmp_path / "task.py").write_text(TASK)
    profile = build_profile(tmp_path / "skew.toml", name="skew", strategy="custom",
                            command=f"{sys.executable} task.py",  # under the agent: its faked clock is inherited
                            defaults={"python": str(skewed)}, workdir=tmp_path, restart="never",
                            roles={"worker": {}})
    run_dir, run_id = tmp_path / "run", "it-clock-skew"
    started = time.time()
    try:
        result = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=120)
    finally:
        kill_run_processes(run_id)
    ended = time.time()
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"host local: clock is {SKEW_S} s ahead" in result.stderr
    events = list(read_events(run_dir))
    agent_events = [e for e in events if e.task == "worker:0" and e.kind in (ev.METRIC, ev.STATE)]
    assert len([e for e in agent_events if e.kind == ev.METRIC]) == 10
    assert all(started - 1 <= e.ts <= ended + 1 for e in events), [e.ts - started for e in events]
    view = JobView()
    for event in events:
        view.apply(event)
    age = view.tasks["worker:0"].age(ended)
    assert age is not None and age < 10
    assert view.elapsed(ended) < ended - started + 1
