"""`export tensorboard` on run dirs written here: what it refuses (one line, exit 2) and how GPU samples map."""

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


def test_gpu_samples_and_reported_values_become_scalars_per_gpu(tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    # No GPU on this machine: the samples an agent would send from NVML are written into the run dir.
    rd = RunDir.create("r-gpu", tmp_path / "r-gpu")
    rd.write_state({"run_id": "r-gpu", "name": "gpu", "tasks": {}})
    rd.append(ev.metric_event("r-gpu", "worker:0", step=100, loss=0.5, values={"lr": 0.01}, ts=10.0))
    gpus = [{"index": 0, "util_percent": 91.0, "mem_used_bytes": 3 * 1024**3, "mem_total_bytes": 16 * 1024**3},
            {"index": 1, "util_percent": 12.0, "mem_used_bytes": 1024**3, "mem_total_bytes": 16 * 1024**3}]
    rd.append(ev.sample_event("r-gpu", "worker:0", cpu_percent=150.0, rss_bytes=2 * 1024**3, gpus=gpus,
                              source="nvml", ts=11.0))
    rd.append(ev.metric_event("r-gpu", "worker:0", step=300, loss=0.25, ts=12.0))
    rd.close()
    assert main(["export", "tensorboard", str(rd.path), str(tmp_path / "tb")]) == 0
    assert "worker:0: 10 scalars" in capsys.readouterr().out

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb" / "r-gpu" / "worker-0"))
    acc.Reload()
    scalars = {tag: [(s.step, s.value, s.wall_time) for s in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    assert scalars["gpu0/util_percent"] == [(100, 91.0, 11.0)]
    assert scalars["gpu1/util_percent"] == [(100, 12.0, 11.0)]
    assert scalars["gpu0/mem_used_bytes"] == [(100, float(3 * 1024**3), 11.0)]
    assert scalars["system/cpu_percent"] == [(100, 150.0, 11.0)]
    assert scalars["values/lr"] == [(100, pytest.approx(0.01), 10.0)]
    assert scalars["loss"] == [(100, 0.5, 10.0), (300, 0.25, 12.0)]
    assert scalars["steps_per_sec"] == [(300, 100.0, 12.0)]  # 200 steps in 2 s


def test_an_unwritable_target_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rd = RunDir.create("r-ro", tmp_path / "r-ro")
    rd.write_state({"run_id": "r-ro", "name": "ro", "tasks": {}})
    rd.append(ev.metric_event("r-ro", "worker:0", step=1, loss=0.5, ts=1.0))
    rd.close()
    (tmp_path / "blocker").write_text("a file where a directory must go")
    assert main(["export", "tensorboard", str(rd.path), str(tmp_path / "blocker" / "tb")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write event files" in err and "Traceback" not in err
