"""Issue 54 §1: the other checkpoint writers autolog reports, each in a process of its own with
autolog's import hook installed (as the agent's sitecustomize does), its `@distlaunch` checkpoint
lines read from stdout: Checkpoint.save and .write, Keras 3 ModelCheckpoint, MonitoredTrainingSession's
saver and PreemptionCheckpointHandler's save on a preemption notice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import REPO

pytestmark = pytest.mark.slow

SCRIPT = REPO / "tests" / "data" / "autolog" / "checkpoint_writers.py"


def _run(api: str, cwd: Path) -> list[dict[str, Any]]:
    hooked = ("import runpy, sys\nfrom launcher.autolog import hook as autolog_hook\nautolog_hook.install()\n"
              f"sys.argv = ['{SCRIPT}', '{api}']\nrunpy.run_path(sys.argv[0], run_name='__main__')\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", "DISTLAUNCH_REPORT_INTERVAL": "0"}
    env.pop("TF_CONFIG", None)
    done = subprocess.run([sys.executable, "-c", hooked], env=env, capture_output=True, text=True, timeout=120,
                          cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "distlaunch autolog:" not in done.stderr, done.stderr[-3000:]
    lines = [json.loads(line[len("@distlaunch "):]) for line in done.stdout.splitlines()
             if line.startswith("@distlaunch ") and '"kind":"checkpoint"' in line]
    for line in lines:
        for name in line["files"]:
            assert (Path(line["directory"]) / name).is_file(), (line, name)
    return lines


def test_checkpoint_save_is_reported_with_the_step_not_the_save_counter(tmp_path: Path) -> None:
    lines = _run("checkpoint_save", tmp_path)
    assert [(x["api"], x["step"]) for x in lines] == [("checkpoint", 10), ("checkpoint", 20)]
    assert lines[-1]["directory"] == str(tmp_path / "ckpt-checkpoint_save")
    assert set(lines[-1]["files"]) == {"checkpoint", "ckpt-2.index", "ckpt-2.data-00000-of-00001"}


def test_checkpoint_write_leaves_the_state_file_out(tmp_path: Path) -> None:
    lines = _run("checkpoint_write", tmp_path)
    assert [(x["api"], x["step"]) for x in lines] == [("checkpoint", 10), ("checkpoint", 20)]
    assert lines[-1]["files"] == ["step-20.data-00000-of-00001", "step-20.index"]


def test_keras3_model_checkpoint_names_the_file_it_wrote_each_epoch(tmp_path: Path) -> None:
    lines = _run("keras3_model_checkpoint", tmp_path)
    assert [(x["api"], x["epoch"], x["step"], x["files"]) for x in lines] == [
        ("model_checkpoint", e, 4 * e, [f"w{e:02d}.weights.h5"]) for e in (1, 2, 3)]


def test_monitored_training_session_saver_is_reported_with_the_global_step(tmp_path: Path) -> None:
    lines = _run("monitored_session", tmp_path)
    assert [(x["api"], x["step"]) for x in lines] == [("saver", s) for s in (0, 10, 20, 30)]
    assert "model.ckpt-30.meta" in lines[-1]["files"]


def test_preemption_checkpoint_handler_save_is_reported(tmp_path: Path) -> None:
    lines = _run("preemption", tmp_path)
    assert [x["api"] for x in lines] == ["preemption"]
    assert lines[0]["directory"] == str(tmp_path / "ckpt-preemption") and lines[0]["step"] >= 20
