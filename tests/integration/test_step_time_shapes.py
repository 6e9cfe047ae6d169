"""Issue 46 §1 and §4: the step-time split's construction tests on more shapes of real scripts.

The job: tests/data/steptime/no_optimizer.py, a MultiWorkerMirrored custom loop without an
optimizer (``next(iterator)``, ``GradientTape``, ``w.assign_sub(lr * g)``, ``return loss``), whose
input pipeline sleeps in a ``tf.py_function`` on the tasks it is told to. Run for real, two workers
on this machine, through ``distlaunch up --no-tui`` to its end; what ``status`` says afterwards is
what the job ended with (the last reading is sent when the task exits, issue 46 §3). Each job is
shorter than the split's 10 s window, so every split here is said from what was seen.

- slow peer: worker:1's input is slow; worker:0 waits for it in the all-reduce;
- input-bound: every worker's input is slow (a batch every 50 ms), and the job ends before
  autolog's first periodic read (a read a minute): the split comes from the steps it saw, read
  once at the exit;
- too short to time: two calls (the first traces the function, the second its timed twin): no
  split, and ``-`` says why.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import REPO, cli, kill_run_processes, pids_with_run_id, write_profile

pytestmark = pytest.mark.slow

SCRIPT = "tests/data/steptime/no_optimizer.py"
TWO_WORKERS = "[roles.worker]\ncount = 2\nhosts = [\"local\"]"


def run_to_end(tmp: Path, run_id: str, env: str, roles: str = TWO_WORKERS,
               strategy: str = "multi_worker_mirrored") -> tuple[str, dict[str, Any], str]:
    """The job run to its end: `up --no-tui`'s output, `status --json`, `status`'s table."""
    profile = write_profile(tmp / "job.toml", f"""
name = "{run_id}"
strategy = "{strategy}"
success_policy = "all_workers"  # no worker stopped before its own exit sends its last reading
[defaults]
command = "{{python}} {SCRIPT}"
workdir = "{REPO}"
env = {{ TF_CPP_MIN_LOG_LEVEL = "2", {env} }}
restart = "never"
grace_seconds = 5
[hosts.local]
address = "localhost"
transport = "local"
{roles}
""")
    try:
        done = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp / "run"), "--run-id", run_id, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        assert pids_with_run_id(run_id) == []
        status = cli("status", run_id, "--json", timeout=60)
        table = cli("status", run_id, timeout=60)
        assert status.returncode == 0 and table.returncode == 0, status.stderr + table.stderr
    finally:
        kill_run_processes(run_id)
    return done.stdout, json.loads(status.stdout), table.stdout


def printed_loss(tmp: Path, task: str, steps: int) -> float:
    log = (tmp / "run" / "logs" / f"{task.replace(':', '-')}.log").read_text()
    found = re.findall(rf"^{task} steps {steps} loss (\S+)$", log, re.MULTILINE)
    assert found, log[-2000:]
    return float(found[-1])


def assert_steps_are_calls(tmp: Path, tasks: dict[str, Any], table: str, steps: int) -> None:
    """Each worker's step is its calls of the train step, said as such, and its loss the script's."""
    for task in ("worker:0", "worker:1"):
        t = tasks[task]
        assert t["step"] == steps and t["step_is_calls"] is True, t
        assert t["loss"] is not None and math.isclose(t["loss"], printed_loss(tmp, task, steps), rel_tol=1e-5), t
        assert re.search(rf"^{task} .* {steps} \(calls\) ", table, re.MULTILINE), table


def test_no_optimizer_loop_names_the_slow_peer(tmp_path: Path) -> None:
    out, status, table = run_to_end(tmp_path, "st-noopt-peer",
                                    'SLOW_TASKS = "worker:1", SLEEP_MS = "60", STEPS = "100"')
    tasks = status["tasks"]
    assert_steps_are_calls(tmp_path, tasks, table, 100)
    assert "step (calls) 100" in out, out[-3000:]
    waiting, slow = tasks["worker:0"]["step_time"], tasks["worker:1"]["step_time"]
    assert waiting is not None and waiting["verdict"] == "waiting for worker:1", waiting
    assert slow is not None and slow["verdict"] == "input-bound", slow
    assert re.search(r"^worker:0 .*peers \d+% other \d+% \(waiting for worker:1\)$", table, re.MULTILINE), table


def test_no_optimizer_loop_input_bound_ending_before_the_first_read(tmp_path: Path) -> None:
    out, status, table = run_to_end(tmp_path, "st-noopt-input",
                                    'SLOW_TASKS = "all", SLEEP_MS = "50", STEPS = "40", '
                                    'DISTLAUNCH_AUTOLOG_INTERVAL = "60"')
    tasks = status["tasks"]
    assert_steps_are_calls(tmp_path, tasks, table, 40)
    assert "step (calls) 40" in out, out[-3000:]
    splits = {task: tasks[task]["step_time"] for task in ("worker:0", "worker:1")}
    assert all(s is not None for s in splits.values()), splits
    # the input holds the job: a worker is input-bound, and a worker whose pipeline started a batch
    # ahead (they keep the lead: both deliver at the same pace) waits for an input-bound one
    bound = [task for task, s in splits.items() if s["verdict"] == "input-bound"]
    assert bound, splits
    for task, split in splits.items():
        assert split["verdict"] in ("input-bound", *(f"waiting for {b}" for b in bound if b != task)), splits
        assert split["input"] + split["peers"] >= 0.7, splits
        # a batch every 50 ms (the first few quicker: batches the pipeline buffered while the step traced)
        assert 0.03 <= split["seconds_per_step"] <= 0.2, splits


def test_a_job_too_short_to_time_says_why_it_has_no_split(tmp_path: Path) -> None:
    out, status, table = run_to_end(tmp_path, "st-noopt-short", 'SLOW_TASKS = "none", STEPS = "2"',
                                    roles="[roles.worker]\nhosts = [\"local\"]", strategy="custom")
    task = status["tasks"]["worker:0"]
    assert task["step"] == 2 and task["step_is_calls"] is True, task
    assert task["step_time"] is None, task
    why = "no step timed in 2 train calls"
    assert task["step_time_missing"] and task["step_time_missing"].startswith(why), task
    assert re.search(rf"^worker:0 .* 2 \(calls\) .* - \({why}", table, re.MULTILINE), table
    assert f"[step time: {why}" in out, out[-3000:]
