"""The MultiWorkerMirroredStrategy example under the launcher: both workers report step and loss."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.integration.jobtools import REPO, cli, kill_run_processes, pids_with_run_id, read_events

pytestmark = pytest.mark.slow


def test_mwms_keras_job_reports_from_both_workers(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-mwms"
    try:
        result = cli("up", str(REPO / "cluster_profiles/mwms.toml"), "--no-tui", "--run-dir", str(run_dir),
                     "--run-id", run_id, timeout=300)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
        events = read_events(run_dir)
        for worker in ("worker:0", "worker:1"):
            metrics = [e for e in events if e["kind"] == "metric" and e["task"] == worker and e["step"] is not None]
            steps = [e["step"] for e in metrics]
            assert len(set(steps)) >= 2 and steps == sorted(steps), (worker, steps)
            assert any(e["loss"] is not None and math.isfinite(e["loss"]) for e in metrics)
        assert any(e["kind"] == "placement" for e in events)
        assert [e["state"] for e in events if e["kind"] == "job"][-1] == "Succeeded"
        assert pids_with_run_id(run_id) == []
    finally:
        kill_run_processes(run_id)
