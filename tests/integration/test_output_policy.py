"""Policies on what tasks output, with real local jobs: a NaN or Inf loss raises nan_loss (and with
on_nan = "stop" ends the job), and [[log_policies]] lines warn or keep a failed task from restarting.
Plain Python tasks: the loss comes through the [metrics] regexes (worker:0) and report.py (worker:1)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from tests.integration.jobtools import (
    cli,
    kill_run_processes,
    pids_with_run_id,
    read_events,
    start_cli,
    wait_for,
)
from tests.profiles import build_profile

NAN_SCRIPT = """
import os, sys, time
from launcher import report
report.configure(min_interval=0)
then, index = sys.argv[1], sys.argv[2]
losses = [1.0, 0.8, 0.6, 0.5, 0.4, "nan"]
if then == "recover" and index == "0":
    losses += ["nan", 0.3]
for step, loss in enumerate(losses, start=1):
    if index == "0":
        print("step %d loss %s" % (step, loss), flush=True)
    else:
        report.report(step=step, loss=float(loss))
    time.sleep(0.2)
deadline = time.time() + 600
while not os.path.exists("release") and time.time() < deadline:
    time.sleep(0.1)
"""


def nan_profile(tmp_path: Path, on_nan: str, then: str) -> Path:
    (tmp_path / "nan.py").write_text(NAN_SCRIPT)
    return build_profile(tmp_path / "nan.toml", name="nan", strategy="custom", success_policy="all_workers",
                         command=f"{{python}} nan.py {then} {{index}}", workdir=tmp_path,
                         defaults={"on_nan": on_nan, "autolog": False}, grace=2, roles={"worker": 2},
                         role_hosts=False, metrics={"step": r"step (\d+)", "loss": r"loss[ =:]+(\S+)"})


def conditions(run_dir: Path, name: str) -> list[dict[str, Any]]:
    return [e for e in read_events(run_dir) if e["kind"] == "condition" and e.get("condition") == name]


def job_end(run_dir: Path) -> dict[str, Any]:
    return [e for e in read_events(run_dir) if e["kind"] == "job"][-1]


def test_a_nan_loss_raises_a_condition_and_the_job_goes_on(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-nan-warn"
    log = tmp_path / "up.log"
    launcher = start_cli("up", str(nan_profile(tmp_path, "warn", "recover")), "--no-tui", "--run-dir",
                         str(run_dir), "--run-id", run_id, log=log)
    try:
        def nan_events(task: str) -> list[tuple[bool, str]]:
            return [(e["active"], e["reason"]) for e in conditions(run_dir, "nan_loss") if e["task"] == task]

        # worker:0 reads its loss through the [metrics] regex and recovers; worker:1 reports with report.py
        wait_for(lambda: len(nan_events("worker:0")) == 2 and nan_events("worker:1"), 60, "nan_loss conditions")
        assert nan_events("worker:0") == [(True, "loss is NaN since step 6"),
                                          (False, "loss is finite again: recovered at step 8")]
        assert nan_events("worker:1") == [(True, "loss is NaN since step 6")]
        status = cli("status", str(run_dir), timeout=60)
        assert "worker:1 nan_loss: loss is NaN since step 6" in status.stdout, status.stdout
        assert "worker:0 nan_loss" not in status.stdout
        worker1 = next(line for line in status.stdout.splitlines() if line.startswith("worker:1 "))
        assert worker1.split()[6:8] == ["6", "nan"], status.stdout  # STEP, LOSS (then STEP TIME)
        wait_for(lambda: "worker:0     nan_loss: loss is NaN since step 6" in log.read_text(), 30,
                 "the --no-tui nan_loss line")
        (tmp_path / "release").touch()  # the job goes on to its end
        assert launcher.wait(60) == 0, log.read_text()
        assert job_end(run_dir)["state"] == "Succeeded"
    finally:
        if launcher.poll() is None:
            launcher.send_signal(signal.SIGINT)
            launcher.wait(60)
        kill_run_processes(run_id)


def test_on_nan_stop_tears_the_job_down_with_the_reason(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-nan-stop"
    try:
        up = cli("up", str(nan_profile(tmp_path, "stop", "hang")), "--no-tui", "--run-dir", str(run_dir),
                 "--run-id", run_id, timeout=120)
        assert up.returncode != 0, up.stdout + up.stderr
        end = job_end(run_dir)
        assert end["state"] == "Failed"
        assert end["reason"] in ("worker:0 loss is NaN since step 6 (on_nan = stop)",
                                 "worker:1 loss is NaN since step 6 (on_nan = stop)"), end
        assert "(on_nan = stop)" in up.stdout, up.stdout
        assert pids_with_run_id(run_id) == []
    finally:
        kill_run_processes(run_id)


OOM_SCRIPT = """
import os, sys, time
role = sys.argv[1]
marker = os.path.join(os.getcwd(), "failed-once")
if role == "ps" and not os.path.exists(marker):
    open(marker, "w").close()
    print("step 3: CUDA_ERROR_OUT_OF_MEMORY: out of memory allocating 2.0GiB", flush=True)
    sys.exit(1)
time.sleep(600 if role == "ps" else 3)
"""


def oom_profile(tmp_path: Path, action: str) -> Path:
    (tmp_path / "oom.py").write_text(OOM_SCRIPT)
    return build_profile(tmp_path / "oom.toml", name="oom", strategy="parameter_server",
                         command="{python} oom.py {role}", workdir=tmp_path, restart="on-failure", max_restarts=2,
                         grace=2, defaults={"autolog": False}, roles={"ps": 1, "chief": 1}, role_hosts=False,
                         log_policies=[{"pattern": "CUDA_ERROR_OUT_OF_MEMORY", "action": action}])


def test_a_no_retry_line_keeps_the_task_and_its_group_from_restarting(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-no-retry"
    try:
        up = cli("up", str(oom_profile(tmp_path, "no_retry")), "--no-tui", "--run-dir", str(run_dir),
                 "--run-id", run_id, timeout=120)
        assert up.returncode != 0, up.stdout + up.stderr
        end = job_end(run_dir)
        line = "step 3: CUDA_ERROR_OUT_OF_MEMORY: out of memory allocating 2.0GiB"
        assert end["state"] == "Failed"
        assert end["reason"] == ("ps:0 failed (exit code 1); not restarted: output matched log policy 1 "
                                 f"(CUDA_ERROR_OUT_OF_MEMORY): {line}"), end
        assert line in up.stdout  # the failure report names the line
        states = [e["state"] for e in read_events(run_dir) if e["kind"] == "state"]
        assert "restarting" not in states, states  # neither ps:0 nor chief:0 (its restart group)
        assert pids_with_run_id(run_id) == []
    finally:
        kill_run_processes(run_id)


def test_a_warn_line_raises_a_condition_and_the_task_is_restarted(tmp_path: Path) -> None:
    run_dir, run_id = tmp_path / "run", "it-log-warn"
    try:
        up = cli("up", str(oom_profile(tmp_path, "warn")), "--no-tui", "--run-dir", str(run_dir),
                 "--run-id", run_id, timeout=120)
    finally:
        kill_run_processes(run_id)
    raised = conditions(run_dir, "log_policy")
    assert [(e["task"], e["active"]) for e in raised] == [("ps:0", True)], raised
    assert raised[0]["reason"] == ('output matched "CUDA_ERROR_OUT_OF_MEMORY": step 3: CUDA_ERROR_OUT_OF_MEMORY: '
                                   "out of memory allocating 2.0GiB")
    restarted = {e["task"] for e in read_events(run_dir) if e["kind"] == "state" and e["state"] == "restarting"}
    assert restarted == {"ps:0", "chief:0"}
    assert up.returncode == 0, up.stdout + up.stderr
    assert job_end(run_dir)["state"] == "Succeeded"
