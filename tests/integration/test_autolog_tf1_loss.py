"""Issue 40 §3 end to end: TF1 between-graph scripts under `distlaunch up --no-tui` (a ps and
workers on localhost, no [metrics]) get a loss curve from autolog, the script's own output stays
what it was, and no task's log carries a line about the global step.

``tests/data/tf1_between_graph.py`` fetches its loss (an unnamed ``Mean``) with the train op: the
loss comes from its own result. ``tests/data/autolog/tf1_mnist_replica.py`` never fetches it (as
TensorFlow's old mnist_replica.py): autolog fetches it alongside; its validation cross entropy,
fetched alone after training, is a value."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_autolog_tf import FAST_ENV, REPO, SCRIPTS, run_job, steps_of
from tests.profiles import Roles, build_profile

pytestmark = pytest.mark.slow

def roles(workers: int) -> Roles:
    return {"ps": 1, "worker": workers}


def profile(tmp_path: Path, command: str, workdir: Path, workers: int, env: dict[str, str] | None = None) -> Path:
    return build_profile(tmp_path / "job.toml", name="autolog-tf1-loss", strategy="custom",
                         success_policy="all_workers", command=command, workdir=workdir,
                         env={**FAST_ENV, **(env or {})}, restart="never", roles=roles(workers), role_hosts=False)


def log_of(tmp_path: Path, task: str) -> list[str]:
    return (tmp_path / "run" / "logs" / f"{task.replace(':', '-')}.log").read_text().splitlines()


def metrics(events: list[dict[str, Any]], task: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "metric" and e["task"] == task]


def losses(events: list[dict[str, Any]], task: str) -> list[float]:
    found = [e["loss"] for e in metrics(events, task) if e["loss"] is not None]
    assert found and all(math.isfinite(x) for x in found), (task, found)
    return found


def assert_no_global_step_line(tmp_path: Path) -> None:
    for log in (tmp_path / "run" / "logs").glob("*.log"):
        assert "global step" not in "\n".join(line for line in log.read_text().splitlines()
                                              if "distlaunch autolog" in line), log.name


def test_tf1_between_graph_script_that_fetches_its_unnamed_loss_reports_it(tmp_path: Path) -> None:
    """One worker: the script sets no device_filters, so a second worker, whose session polls
    every 30 s for the chief's initialization, hangs for good once worker:0 is done."""
    command = ("{python} tf1_between_graph.py --job_name={role} --task_index={index} --steps 300 "
               f"--train_dir {tmp_path / 'train'}")
    path = profile(tmp_path, command, REPO / "tests" / "data", workers=1)
    events = run_job(tmp_path, path, "it-al-tf1-loss-fetched")
    assert_no_global_step_line(tmp_path)
    for worker in ("worker:0",):
        printed = [re.fullmatch(r"global step: (\d+), loss = (\d+\.\d{4})", line) for line in log_of(tmp_path, worker)
                   if line.startswith("global step:")]
        assert printed and all(printed), worker  # the script's own lines, as it prints them
        printed_losses = {m.group(2) for m in printed if m}
        reported = losses(events, worker)
        # each loss autolog reported is one the script was handed by the same run
        assert {f"{x:.4f}" for x in reported} <= printed_losses, (worker, reported[:5])
        steps = steps_of(events, worker)
        assert steps == sorted(steps) and steps[-1] >= 250, (worker, steps)
        # issue 37: a TF1 Session.run loop's step time is split too (the runs of its train op)
        splits = [e["values"] for e in metrics(events, worker) if "step_time/compute" in e["values"]]
        assert splits, (worker, "no step-time split from a Session.run loop")
        shares = [splits[-1][f"step_time/{part}"] for part in ("input", "compute", "peers", "other")]
        assert abs(sum(shares) - 1.0) < 0.01 and splits[-1]["step_time/seconds_per_step"] > 0, splits[-1]


def test_tf1_mnist_replica_script_that_never_fetches_its_loss_gets_it_and_its_validation_value(
        tmp_path: Path) -> None:
    path = profile(tmp_path, "{python} tf1_mnist_replica.py", SCRIPTS, workers=2, env={"TRAIN_STEPS": "200"})
    events = run_job(tmp_path, path, "it-al-tf1-loss-added")
    assert_no_global_step_line(tmp_path)
    for worker in ("worker:0", "worker:1"):
        lines = log_of(tmp_path, worker)
        fetched = [line for line in lines if line.startswith("fetched ")]
        assert fetched and all(re.fullmatch(r"fetched list of 2: None, global step \d+", line) for line in fetched), \
            (worker, fetched[:3])
        final = [line for line in lines if "validation cross entropy = " in line]
        assert len(final) == 1 and final[0].startswith("After 200 training step(s), "), (worker, lines[-5:])
        validation = float(final[0].rsplit("= ", 1)[1])
        reported = losses(events, worker)
        assert len(reported) >= 3, (worker, reported)
        values = [e["values"]["cross_entropy"] for e in metrics(events, worker) if "cross_entropy" in e["values"]]
        assert len(values) == 1 and math.isclose(values[0], validation, rel_tol=1e-5), (worker, values, validation)
        assert not any(math.isclose(x, validation, rel_tol=1e-5) for x in reported[-1:]), "validation as the loss"
        steps = steps_of(events, worker)
        assert steps == sorted(steps) and steps[-1] >= 150, (worker, steps)
