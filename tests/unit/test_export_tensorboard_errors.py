"""`export tensorboard` refuses what it cannot export with one line and exit code 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher import events as ev
from launcher.cli import main
from launcher.rundir import RunDir


def _run_without_metrics(root: Path) -> Path:
    rd = RunDir.create("r-quiet", root / "r-quiet")
    rd.write_state({"run_id": "r-quiet", "name": "quiet", "tasks": {}})
    rd.append(ev.job_event("r-quiet", ev.JOB_RUNNING, ts=1.0))
    rd.append(ev.state_event("r-quiet", "worker:0", ev.SUCCEEDED, host="local", exit_code=0, ts=2.0))
    rd.close()
    return rd.path


def test_a_run_without_metrics_or_samples_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _run_without_metrics(tmp_path)
    assert main(["export", "tensorboard", str(path), str(tmp_path / "tb")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "r-quiet: the run has no metric or sample events" in err
    assert not (tmp_path / "tb" / "r-quiet").exists() or not any((tmp_path / "tb" / "r-quiet").iterdir())


def test_a_file_as_target_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _run_without_metrics(tmp_path)
    (tmp_path / "f").write_text("x")
    assert main(["export", "tensorboard", str(path), str(tmp_path / "f")]) == 2
    assert "exists and is not a directory" in capsys.readouterr().err


def test_an_unknown_run_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "tensorboard", "no-such-run", str(tmp_path / "tb")]) == 2
    assert "no run 'no-such-run'" in capsys.readouterr().err
