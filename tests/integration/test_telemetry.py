"""Telemetry of a real job: metrics, samples (checked against the process tree) and placement."""

from __future__ import annotations

import contextlib
import math
import time
from pathlib import Path

import psutil
import pytest

from tests.integration.jobtools import (
    REPO,
    cli,
    kill_run_processes,
    read_events,
    start_cli,
    wait_for,
    wait_for_event,
)
from tests.profiles import build_profile, ps_mnist_command

pytestmark = pytest.mark.slow

INTERVAL = 0.5


def two_ps_profile(tmp: Path, steps: int) -> Path:
    return build_profile(
        tmp / "two-ps.toml", name="it-telemetry", top=f"sample_interval = {INTERVAL}",
        command=ps_mnist_command(steps),
        workdir=REPO, env={"TF_CPP_MIN_LOG_LEVEL": "2"}, grace=5, hosts=(), roles={"ps": 2, "worker": 1, "chief": {}})


def _tree_rss(pid: int) -> int:
    root = psutil.Process(pid)
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += proc.memory_info().rss
    return total


def test_metrics_samples_and_placement_of_a_two_ps_job(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-telemetry"
    launcher = start_cli("up", str(two_ps_profile(tmp_path, steps=400)), "--json", "--run-dir", str(run_dir),
                         "--run-id", run_id, log=tmp_path / "up.jsonl")
    try:
        running = wait_for_event(run_dir, lambda e: e["kind"] == "state" and e["task"] == "worker:0"
                                 and e["state"] == "running", 180, "worker:0 running")
        wait_for_event(run_dir, lambda e: e["kind"] == "metric" and e["task"] == "chief:0", 180, "first metric")
        # the sample of the task's process tree agrees with what psutil sees for the same pid
        ours = _tree_rss(int(running["pid"]))
        since = time.time()
        sample = wait_for_event(run_dir, lambda e: e["kind"] == "sample" and e["task"] == "worker:0"
                                and e["ts"] > since, 30, "a fresh sample of worker:0")
        assert 0.5 * ours < sample["rss_bytes"] < 2 * ours, (sample, ours)
        assert sample["cpu_percent"] is not None and sample["source"].startswith("psutil")
        assert sample["gpus"] == []
        wait_for(lambda: launcher.poll() is not None, 300, "the job to end")
        assert launcher.returncode == 0, (tmp_path / "up.jsonl").read_text()[-3000:]
    finally:
        if launcher.poll() is None:
            launcher.kill()
        kill_run_processes(run_id)

    events = read_events(run_dir)
    # the same stream went to --json on stdout
    assert len((tmp_path / "up.jsonl").read_text().splitlines()) >= len(events) - 1

    metrics = [e for e in events if e["kind"] == "metric" and e["task"] == "chief:0" and e["step"] is not None]
    steps = [e["step"] for e in metrics]
    assert steps == sorted(steps) and steps[-1] >= 400 and len(set(steps)) >= 3
    assert all(math.isfinite(e["loss"]) for e in metrics if e["loss"] is not None)

    for task in ("ps:0", "ps:1", "worker:0", "chief:0"):
        mine = [e for e in events if e["kind"] == "sample" and e["task"] == task]
        start = next(e["ts"] for e in events if e["kind"] == "state" and e["task"] == task
                     and e["state"] == "running")
        end = max(e["ts"] for e in mine)
        expected = (end - start) / INTERVAL
        assert len(mine) >= 0.5 * expected, (task, len(mine), expected)
        # while the task runs (a sample racing its teardown may find the tree gone)
        ended = next(e["ts"] for e in events if e["kind"] == "state" and e["task"] == task
                     and e["state"] in ("succeeded", "stopped", "failed"))
        assert all(e["rss_bytes"] and e["rss_bytes"] > 10_000_000 for e in mine[1:] if e["ts"] < ended - 1.0)

    placement = next(e for e in events if e["kind"] == "placement")
    variables = placement["variables"]
    assert {v["task"] for v in variables} == {"ps:0", "ps:1"}
    for v in variables:
        assert v["bytes"] == math.prod(v["shape"]) * (8 if v["dtype"] == "int64" else 4)
    kernel_rows = sum(v["shape"][0] for v in variables if v["name"].startswith("hidden/kernel")
                      and "velocity" not in v["name"])
    assert kernel_rows == 784  # the shards of the big kernel add up to the whole matrix


def test_unmodified_script_gets_metrics_through_profile_regexes(tmp_path: Path) -> None:
    profile = build_profile(tmp_path / "legacy.toml", name="it-legacy", strategy="custom",
                            command='for i in 1 2 3 4 5; do echo "INFO: train (global step: $i) loss = 0.$i"; done',
                            workdir=REPO, hosts=(), roles={"worker": {}},
                            metrics={"step": r"global step: (\d+)", "loss": r"loss[ =:]+([-+0-9.eE]+)"})
    run_dir = tmp_path / "run"
    result = cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), timeout=120)
    assert result.returncode == 0, result.stderr
    metrics = [e for e in read_events(run_dir) if e["kind"] == "metric"]
    assert [e["step"] for e in metrics] == [1, 2, 3, 4, 5]
    assert [e["loss"] for e in metrics] == [0.1, 0.2, 0.3, 0.4, 0.5]
    logs = [e["line"] for e in read_events(run_dir) if e["kind"] == "log"]
    assert len(logs) == 5  # the lines are still in the log
