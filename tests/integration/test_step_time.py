"""Issue 37's ground truth: jobs whose bottleneck is known by construction
(tests/data/steptime/bottleneck.py), run for real; the live split in `status --json` and the
verdict must say it, and agree with `distlaunch profile`'s capture of the same run within 15 points
(of the tasks a capture does not crash: not a MultiWorkerMirrored worker other than the leader).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import REPO, cli, kill_run_processes, wait_for, write_profile

pytestmark = pytest.mark.slow

AGREE_POINTS = 15.0
#: the live window is ten seconds of steps: wait until this many seconds of splits came in
WARM_SPLITS = 8


def profile_text(tmp: Path, mode: str, roles: str, strategy: str, seconds: int = 90) -> Path:
    return write_profile(tmp / f"{mode}.toml", f"""
name = "st-{mode}"
strategy = "{strategy}"
[defaults]
command = "{{python}} tests/data/steptime/bottleneck.py"
workdir = "{REPO}"
env = {{ TF_CPP_MIN_LOG_LEVEL = "2", MODE = "{mode}", SECONDS = "{seconds}", SLOW_TASK = "worker:1" }}
grace_seconds = 5
[hosts.local]
address = "localhost"
transport = "local"
{roles}
""")


def status(run_id: str) -> dict[str, Any]:
    result = cli("status", run_id, "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def splits_seen(run_dir: Path, task: str) -> int:
    lines = (run_dir / "events.jsonl").read_text().splitlines()
    return sum(1 for line in lines if task in line and "step_time/input" in line)


def run_job(tmp: Path, profile: Path, run_id: str, watch: str,
            check: Callable[[dict[str, Any], dict[str, Any]], None], tasks: list[str]) -> None:
    run_dir = tmp / "run"
    try:
        started = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id, timeout=240)
        assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
        wait_for(lambda: splits_seen(run_dir, watch) >= WARM_SPLITS, 150,
                 f"{WARM_SPLITS} step-time readings of {watch}", interval=0.5)
        captured = cli("profile", run_id, *tasks, "--seconds", "2", "--json", timeout=120)
        assert captured.returncode == 0, captured.stdout[-2000:] + captured.stderr[-2000:]
        analysis = {t["task"]: t for t in json.loads(captured.stdout)["tasks"]}
        logdir = Path(json.loads(captured.stdout)["logdir"])
        assert list(logdir.glob("plugins/profile/*/*.xplane.pb")), "no capture kept for TensorBoard"
        check(status(run_id)["tasks"], analysis)
    finally:
        cli("down", run_id, timeout=120)
        kill_run_processes(run_id)


def close(live: float, profiled: float | None, what: str) -> None:
    assert profiled is not None, what
    assert abs(100 * live - profiled) <= AGREE_POINTS, f"{what}: live {100 * live:.0f}% vs profile {profiled:.0f}%"


def test_input_bound_keras_fit(tmp_path: Path) -> None:
    def check(tasks: dict[str, Any], analysis: dict[str, Any]) -> None:
        split = tasks["worker:0"]["step_time"]
        assert split["input"] >= 0.6 and split["verdict"] == "input-bound", split
        close(split["input"], analysis["worker:0"]["input"], "worker:0 input")

    profile = profile_text(tmp_path, "input", "[roles.worker]\nhosts = [\"local\"]", "custom")
    run_job(tmp_path, profile, "st-input", "worker:0", check, ["worker:0"])


def test_compute_bound_custom_loop(tmp_path: Path) -> None:
    def check(tasks: dict[str, Any], analysis: dict[str, Any]) -> None:
        split = tasks["worker:0"]["step_time"]
        assert split["input"] <= 0.15 and split["verdict"] == "compute-bound", split
        assert analysis["worker:0"]["input"] <= AGREE_POINTS
        close(split["input"], analysis["worker:0"]["input"], "worker:0 input")

    profile = profile_text(tmp_path, "compute", "[roles.worker]\nhosts = [\"local\"]", "custom")
    run_job(tmp_path, profile, "st-compute", "worker:0", check, ["worker:0"])


def test_mwms_waits_for_the_slowed_worker(tmp_path: Path) -> None:
    def check(tasks: dict[str, Any], analysis: dict[str, Any]) -> None:
        waiting, slow = tasks["worker:0"]["step_time"], tasks["worker:1"]["step_time"]
        assert waiting["peers"] >= 0.5 and waiting["verdict"] == "waiting for worker:1", waiting
        assert slow["verdict"] == "input-bound", slow
        close(waiting["peers"], analysis["worker:0"]["communication"], "worker:0 peers")

    # worker:0 only: a capture crashes a MultiWorkerMirrored worker other than the collective leader
    # (issue 46 §2, tests/integration/test_profile_mwms.py), so `profile` does not capture worker:1
    profile = profile_text(tmp_path, "mwms", "[roles.worker]\ncount = 2\nhosts = [\"local\"]", "multi_worker_mirrored")
    run_job(tmp_path, profile, "st-mwms", "worker:0", check, ["worker:0"])


def test_pss_names_the_slowed_worker(tmp_path: Path) -> None:
    def check(tasks: dict[str, Any], analysis: dict[str, Any]) -> None:
        rates = {w: tasks[w]["closures_per_s"] for w in ("worker:0", "worker:1")}
        assert all(isinstance(r, float) for r in rates.values()), rates
        assert rates["worker:1"] < rates["worker:0"], rates
        assert tasks["worker:1"]["closure_latency_s"] > tasks["worker:0"]["closure_latency_s"]
        assert tasks["chief:0"]["step_time"]["verdict"] == "waiting for worker:1", tasks["chief:0"]
        # the capture of the same moment: the slowed worker ran fewer of the coordinator's steps
        assert analysis["worker:1"]["steps"] < analysis["worker:0"]["steps"], analysis
        assert "ps:0" in analysis  # a ps is captured too: its analysis says what it served

    roles = ("[roles.ps]\nhosts = [\"local\"]\n[roles.worker]\ncount = 2\nhosts = [\"local\"]\n"
             "[roles.chief]\nhosts = [\"local\"]")
    profile = profile_text(tmp_path, "pss", roles, "parameter_server")
    run_job(tmp_path, profile, "st-pss", "chief:0", check, ["chief:0", "ps:0", "worker:0", "worker:1"])
