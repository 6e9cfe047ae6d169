"""`distlaunch check PROFILE --metrics-sample LOGFILE`: a regex tried on a saved log."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cli import main

PROFILE = """
[defaults]
command = "run"
[roles.worker]
count = 1
[metrics]
{metrics}
"""

LOG = """Epoch: 0, accuracy: 0.099442, train_loss: 2.533713.
@distlaunch {"kind": "metric", "step": 1}
some other line
Epoch: 1, accuracy: 0.2, train_loss: 1.9.
"""


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], metrics: str, log: str = LOG) -> tuple[int, str, str]:
    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE.format(metrics=metrics), encoding="utf-8")
    log_path = tmp_path / "task.log"
    log_path.write_text(log, encoding="utf-8")
    code = main(["check", str(profile), "--metrics-sample", str(log_path)])
    out, err = capsys.readouterr()
    return code, out, err


def test_each_matching_line_shows_what_each_regex_gives(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(tmp_path, capsys, "step = 'Epoch: (\\d+)'\nloss = 'train_loss: ([-+0-9.eE]+)'")
    assert code == 0
    assert "task.log:1: step=0  loss=2.533713" in out
    assert "task.log:4: step=1  loss=1.9" in out
    assert "task.log:2" not in out  # report lines are not task output
    assert "metrics.loss = 'train_loss: ([-+0-9.eE]+)': ok: a number from 2 of 3 lines" in out


def test_text_capture_and_no_match_fail_with_a_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(tmp_path, capsys, "acc = 'accuracy: (\\w+)x'\nstep = 'global step (\\d+)'\n"
                                         "lr = 'Epoch: \\d+, (accuracy)'")
    assert code == 2
    assert "lr=NO NUMBER (captured 'accuracy')" in out
    assert "metrics.lr = 'Epoch: \\d+, (accuracy)': matched 2 lines but never captured a number" in out
    assert "metrics.step = 'global step (\\d+)': matched none of 3 lines" in out


def test_missing_log_and_missing_metrics_are_one_line_user_errors(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "p.toml"
    profile.write_text(PROFILE.format(metrics="step = 's (\\d+)'"), encoding="utf-8")
    assert main(["check", str(profile), "--metrics-sample", str(tmp_path / "nope.log")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "nope.log" in err and "Traceback" not in err
    profile.write_text(PROFILE.format(metrics=""), encoding="utf-8")
    (tmp_path / "x.log").write_text("a\n")
    assert main(["check", str(profile), "--metrics-sample", str(tmp_path / "x.log")]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "[metrics]" in err
