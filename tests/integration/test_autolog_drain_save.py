"""Issue 54 §5: a planned stop loses nothing. SIGTERM (what `drain`, a preemption notice and a
restart's stop send) during tf_keras fit: autolog's callback has BackupAndRestore save that batch
and exits 143; the next run resumes after it and redoes no step. Real TensorFlow, a process of
its own with autolog's import hook installed (as the agent's sitecustomize does)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.jobtools import REPO

pytestmark = pytest.mark.slow

SCRIPT = REPO / "tests" / "data" / "autolog" / "keras_sigterm.py"


def _run(backup: Path, hooked: bool = True, **env: str) -> subprocess.CompletedProcess[str]:
    code = ("import runpy, sys\nfrom launcher.autolog import hook as autolog_hook\nautolog_hook.install()\n"
            if hooked else "import runpy, sys\n")
    code += f"sys.argv = ['{SCRIPT}', '{backup}']\nrunpy.run_path(sys.argv[0], run_name='__main__')\n"
    full = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", "DISTLAUNCH_REPORT_INTERVAL": "0",
            "TF_USE_LEGACY_KERAS": "1", **env}
    full.pop("TF_CONFIG", None)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=180)


def _steps(out: str) -> list[int]:
    return [int(m) for m in re.findall(r"^trained step (\d+)$", out, re.M)]


@pytest.mark.timeout(400)
def test_sigterm_during_keras_fit_saves_that_batch_and_the_next_run_redoes_no_step(tmp_path: Path) -> None:
    stopped = _run(tmp_path / "backup", KILL_AT="12")  # epoch 2, batch 2; the last save was at step 7
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert _steps(stopped.stdout)[-1] == 12
    saves = [json.loads(line[len("@distlaunch "):]) for line in stopped.stdout.splitlines()
             if line.startswith("@distlaunch ") and '"kind":"checkpoint"' in line]
    assert [(s["api"], s["step"]) for s in saves] == [("backup_and_restore", 7), ("backup_and_restore", 12)]
    assert (tmp_path / "backup").is_dir()  # not deleted as at the end of a fit
    resumed = _run(tmp_path / "backup")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = _steps(resumed.stdout)
    assert again[0] == 13 and again[-1] == 30, again  # 0 steps redone, the full 3 epochs x 10
    assert "finished at step 30" in resumed.stdout
    # without autolog, SIGTERM ends the process where it is: the run after it redoes steps 8-12
    plain = _run(tmp_path / "plain", hooked=False, KILL_AT="12")
    assert plain.returncode == -15
    assert _steps(_run(tmp_path / "plain", hooked=False).stdout)[0] == 8
