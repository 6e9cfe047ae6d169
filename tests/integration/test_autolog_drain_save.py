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
from tests.sshd import free_port

pytestmark = pytest.mark.slow

SCRIPT = REPO / "tests" / "data" / "autolog" / "keras_sigterm.py"
MWMS_SCRIPT = REPO / "tests" / "data" / "autolog" / "keras_mwms_sigterm.py"


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


def _run_group(backup: Path, **env: str) -> list[subprocess.CompletedProcess[str]]:
    """Two MultiWorkerMirrored workers of tests/data/autolog/keras_mwms_sigterm.py, hooked."""
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    code = ("import runpy, sys\nfrom launcher.autolog import hook as autolog_hook\nautolog_hook.install()\n"
            f"sys.argv = ['{MWMS_SCRIPT}', '{backup}']\nrunpy.run_path(sys.argv[0], run_name='__main__')\n")
    procs = []
    for index in range(2):
        full = {**os.environ, "PYTHONPATH": str(REPO), "TF_CPP_MIN_LOG_LEVEL": "2", "DISTLAUNCH_REPORT_INTERVAL": "0",
                "TF_USE_LEGACY_KERAS": "1", "TF_CONFIG": json.dumps({"cluster": cluster,
                                                                    "task": {"type": "worker", "index": index}}),
                **env}
        procs.append(subprocess.Popen([sys.executable, "-c", code], env=full, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


@pytest.mark.timeout(400)
@pytest.mark.parametrize("signalled", ["1", "0,1"])
def test_sigterm_to_mwms_workers_saves_one_agreed_batch_and_the_group_redoes_none(
        tmp_path: Path, signalled: str) -> None:
    """A MultiWorkerMirrored save is collective: worker:1 alone (an MWMS peer's drain) or both
    workers (a drained host with both), SIGTERM at step 12. The workers agree through the
    coordination service on the batch after the first signalled one's, both save it and exit 143;
    the next run of the group starts at the step after it."""
    stopped = _run_group(tmp_path / "backup", KILL_AT="12", KILL_INDEX=signalled, STEP_SECONDS="0.05")
    assert [p.returncode for p in stopped] == [143, 143], [p.stderr[-2000:] for p in stopped]
    last = [_steps(p.stdout)[-1] for p in stopped]
    assert last == [13, 13], last
    saves = [json.loads(line[len("@distlaunch "):]) for line in stopped[0].stdout.splitlines()
             if line.startswith("@distlaunch ") and '"kind":"checkpoint"' in line]
    assert [s["step"] for s in saves] == [7, 13]
    resumed = _run_group(tmp_path / "backup")
    assert [p.returncode for p in resumed] == [0, 0], [p.stderr[-2000:] for p in resumed]
    for p in resumed:
        again = _steps(p.stdout)
        assert again[0] == 14 and again[-1] == 30, again
