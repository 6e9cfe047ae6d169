"""Issue 46 §3: a short job's last reading is not lost. Real short TensorFlow jobs under `distlaunch
up --no-tui` (no [metrics], no distlaunch code in the scripts) that end well inside one of
autolog's read intervals: the interval is a minute here (``DISTLAUNCH_AUTOLOG_INTERVAL``, the
documented knob), so no periodic read happens at all and only the reads at the end of training
and at the interpreter's exit can give the numbers. The task's last metric event must carry the
step the script ended at and the loss it printed."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_autolog_tf import REPO, SCRIPTS, run_job
from tests.profiles import Roles, build_profile

pytestmark = pytest.mark.slow

#: longer than any of these jobs: the reader's periodic read never comes
ONE_READ_A_MINUTE = {"TF_CPP_MIN_LOG_LEVEL": "2", "DISTLAUNCH_AUTOLOG_INTERVAL": "60"}
PSS_ROLES: Roles = {"chief": {}, "ps": 1, "worker": 1}


def profile(tmp_path: Path, command: str, workdir: Path, roles: Roles, strategy: str,
            env: dict[str, str] | None = None, top: str = "") -> Path:
    return build_profile(tmp_path / "job.toml", name="autolog-last-reading", strategy=strategy, top=top,
                         command=command, workdir=workdir, env={**ONE_READ_A_MINUTE, **(env or {})},
                         restart="never", roles=roles, role_hosts=False)


def log_lines(tmp_path: Path, task: str) -> list[str]:
    return (tmp_path / "run" / "logs" / f"{task.replace(':', '-')}.log").read_text().splitlines()


def last_metric(events: list[dict[str, Any]], task: str) -> dict[str, Any]:
    """The task's last metric event that carries a step (what the dashboard shows at the end)."""
    found = [e for e in events if e["kind"] == "metric" and e["task"] == task and e["step"] is not None]
    assert found, f"no step from {task}"
    return found[-1]


def printed(lines: list[str], pattern: str) -> re.Match[str]:
    matches = [m for m in (re.search(pattern, line) for line in lines) if m]
    assert matches, (pattern, lines[-10:])
    return matches[-1]


def test_pss_tutorial_as_published_ends_at_its_last_step_and_printed_loss(tmp_path: Path) -> None:
    """4 epochs of 5 scheduled steps, a join each, then one more step whose loss the script
    fetches and prints: the dashboard showed `step 0 loss -`."""
    path = profile(tmp_path, "{python} pss_tutorial.py", SCRIPTS, PSS_ROLES, "parameter_server")
    events = run_job(tmp_path, path, "it-al-last-pss-tutorial")
    final = float(printed(log_lines(tmp_path, "chief:0"), r"^Final loss is (\S+)$").group(1))
    last = last_metric(events, "chief:0")
    assert last["step"] == 4 * 5 + 1, last
    assert last["loss"] is not None and math.isclose(last["loss"], final, abs_tol=5e-7), (last, final)


def test_pss_keras_fit_of_a_few_steps_ends_at_its_last_step_and_loss(tmp_path: Path) -> None:
    """Under ParameterServerStrategy fit's logs are RemoteValues, read by the reader only: a fit of
    10 steps is over long before its first read."""
    pytest.importorskip("tf_keras", reason="tf-keras (a test dependency) is needed for fit under PSS")
    path = profile(tmp_path, "{python} pss_keras_fit.py", SCRIPTS, PSS_ROLES, "parameter_server",
                   {"TF_USE_LEGACY_KERAS": "1", "STEPS": "5"})
    events = run_job(tmp_path, path, "it-al-last-pss-fit")
    final = float(printed(log_lines(tmp_path, "chief:0"), r"^Final loss is (\S+)$").group(1))
    last = last_metric(events, "chief:0")
    assert last["step"] == 2 * 5, last
    assert last["loss"] is not None and math.isclose(last["loss"], final, rel_tol=1e-6), (last, final)


def test_tf1_monitored_session_ends_at_its_last_global_step_and_printed_loss(tmp_path: Path) -> None:
    """The seed's TF1 between-graph script (it prints `global step: N, loss = X` each step), one
    worker: the session's close reads the global step and takes the loss of its last run."""
    command = ("{python} tf1_between_graph.py --job_name={role} --task_index={index} --steps 300 "
               f"--train_dir {tmp_path / 'train'}")
    roles: Roles = {"ps": 1, "worker": 1}
    path = profile(tmp_path, command, REPO / "tests" / "data", roles, "custom", top='success_policy = "all_workers"')
    events = run_job(tmp_path, path, "it-al-last-tf1")
    loss = printed(log_lines(tmp_path, "worker:0"), r"^global step: \d+, loss = (\d+\.\d{4})$").group(1)
    last = last_metric(events, "worker:0")
    assert last["step"] == 300, last  # StopAtStepHook(last_step=300): one worker stops there exactly
    assert last["loss"] is not None and f"{last['loss']:.4f}" == loss, (last, loss)
