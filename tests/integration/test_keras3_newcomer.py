"""A newcomer's first own job (issue 56): TensorFlow's multi-worker Keras tutorial, as written, through
`init`, `check` and `up`. Keras 3 cannot fit under MultiWorkerMirroredStrategy with two workers:
`init` writes TF_USE_LEGACY_KERAS = "1" and the job trains; without it `check` and `up` say the fix
in one line before anything starts, and the job ends at the first failure with the cause naming the
fix, rather than after four tries."""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path
from typing import Any

from tests.integration.jobtools import REPO, cli, read_events

TUTORIAL = REPO / "tests" / "data" / "keras3_mwms_tutorial.py"
WARNING = ('train.py:15 calls Keras fit under MultiWorkerMirroredStrategy with 2 workers, which Keras 3 (tf.keras '
           'since TensorFlow 2.16) cannot run: add TF_USE_LEGACY_KERAS = "1" to [defaults] env (tf_keras is '
           'installed on every host)')


def _project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(TUTORIAL, project / "train.py")
    env = {"PYTHONPATH": str(REPO), "DISTLAUNCH_HOME": str(tmp_path / "state"), "HOME": str(tmp_path)}
    made = cli("init", "train.py", cwd=project, env=env, timeout=60)
    assert made.returncode == 0, made.stderr
    return project, env


def _events(tmp_path: Path, run_id: str) -> list[dict[str, Any]]:
    return read_events(tmp_path / "state" / "runs" / run_id)


def test_the_tutorial_trains_with_what_init_writes(tmp_path: Path) -> None:
    project, env = _project(tmp_path)
    text = (project / "train.toml").read_text()
    assert tomllib.loads(text)["defaults"]["env"]["TF_USE_LEGACY_KERAS"] == "1"
    assert "# train.py:15 calls Keras fit, which Keras 3" in text
    checked = cli("check", "train.toml", cwd=project, env=env, timeout=240)
    assert checked.returncode == 0, checked.stderr
    ran = cli("up", "train.toml", "--no-tui", "--run-id", "keras-legacy", cwd=project, env=env, timeout=300)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr
    steps = [e.get("step") for e in _events(tmp_path, "keras-legacy") if e.get("kind") == "metric"]
    assert max((s for s in steps if isinstance(s, int)), default=0) >= 9, steps


def test_without_the_variable_check_says_the_fix_and_up_fails_once_naming_it(tmp_path: Path) -> None:
    project, env = _project(tmp_path)
    profile = project / "train.toml"
    profile.write_text(profile.read_text().replace(', TF_USE_LEGACY_KERAS = "1"', ""))
    warned = f"distlaunch: warning: {WARNING}"
    checked = cli("check", "train.toml", cwd=project, env=env, timeout=240)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr
    assert [line for line in checked.stderr.splitlines() if "Keras" in line] == [warned], checked.stderr
    ran = cli("up", "train.toml", "--no-tui", "--run-id", "keras-told", cwd=project, env=env, timeout=300)
    assert ran.returncode == 1, ran.stdout[-3000:] + ran.stderr
    assert warned in ran.stdout + ran.stderr  # before anything started
    _assert_failed_once(_events(tmp_path, "keras-told"))


def _assert_failed_once(events: list[dict[str, Any]]) -> None:
    starts = [e["task"] for e in events if e.get("kind") == "state" and e.get("state") == "starting"]
    assert sorted(starts) == ["worker:0", "worker:1"], starts  # one try each: no restart spent on it
    (job,) = [e for e in events if e.get("kind") == "job" and e.get("state") == "Failed"]
    assert "not restarted: restarting cannot help: Keras 3 cannot fit under a multi-worker strategy: set " \
           "TF_USE_LEGACY_KERAS=1" in str(job.get("reason")), job
    causes = [e.get("cause") for e in events if e.get("kind") == "state" and e.get("state") == "failed"]
    assert any(str(c).startswith("Keras 3 cannot fit under a multi-worker strategy") for c in causes), causes

