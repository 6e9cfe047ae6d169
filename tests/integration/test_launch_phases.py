"""`up` keeps when each phase of its launch ended, per host, as state.json's ``launch`` record
(launcher/remote/launchclock.py): what benchmarks/launch_fanout.py splits a launch's time by. The
second launch of the same agent takes it from the host's cache instead of sending it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.remote.launchclock import HOST_PHASES
from tests.integration.jobtools import cli, kill_run_processes
from tests.profiles import build_profile

pytestmark = pytest.mark.slow


def test_up_records_each_hosts_launch_phases_in_order_and_the_agent_is_sent_once(tmp_path: Path) -> None:
    profile = build_profile(tmp_path / "phases.toml", name="phases", strategy="custom", success_policy="all_workers",
                            command="true", workdir=tmp_path, restart="never", roles={"worker": {"count": 2}})
    froms = []
    for n in range(2):
        run_dir, run_id = tmp_path / f"run{n}", f"it-phases-{n}"
        try:
            result = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, timeout=120)
        finally:
            kill_run_processes(run_id)
        assert result.returncode == 0, result.stderr[-2000:]
        launch = json.loads((run_dir / "state.json").read_text())["launch"]
        assert launch["process_start"] in ("proc", "clock")
        assert 0 <= launch["imports"] <= launch["forked"]
        stamps = launch["hosts"]["local"]
        assert set(stamps) == set(HOST_PHASES)
        in_order = [stamps[p] for p in ("connected", "agent", "preflight", "start_sent", "spawned")]
        assert in_order == sorted(in_order) and in_order[0] >= launch["forked"]
        # a task's `running` may come before the start's answer is read: both follow the request
        assert stamps["first_running"] >= stamps["start_sent"]
        froms.append(launch["agent_from"]["local"])
    assert froms == ["sent", "cached"]
