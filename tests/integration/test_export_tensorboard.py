"""`distlaunch export tensorboard` on a real run, read back with tensorboard's own event reader."""

from __future__ import annotations

import struct
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from tests.integration.jobtools import REPO, cli, kill_run_processes, read_events
from tests.profiles import profile_toml

SCRIPT = """
import time
from launcher import report
report.configure(min_interval=0)
for step in range(1, 31):
    report.report(step=step * 10, loss=1.0 / (step + 0.123456789), accuracy=step / 30)
    time.sleep(0.05)
"""

PROFILE = profile_toml(name="tb", top="sample_interval = 0.2", command="{python} train.py", restart="never",
                       hosts=(), roles={"worker": 2})


def as_float32(x: float) -> float:
    value: float = struct.unpack("f", struct.pack("f", x))[0]
    return value


def test_export_reads_back_with_tensorboard_loss_per_step_equal_to_the_metric_events(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(SCRIPT, encoding="utf-8")
    (tmp_path / "p.toml").write_text(PROFILE, encoding="utf-8")
    run_dir, run_id = tmp_path / "run", "tb-export"
    try:
        up = cli("up", str(tmp_path / "p.toml"), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id)
        assert up.returncode == 0, up.stderr[-2000:]
    finally:
        kill_run_processes(run_id)
    logdir = tmp_path / "tb"
    # The export itself must not need TensorFlow: run it in a process that checks it was never imported.
    code = ("import sys; from launcher.cli import main; rc = main(['export', 'tensorboard', sys.argv[1], "
            "sys.argv[2]]); assert 'tensorflow' not in sys.modules, 'imported TensorFlow'; sys.exit(rc)")
    export = subprocess.run([sys.executable, "-c", code, str(run_dir), str(logdir)], capture_output=True,
                            text=True, timeout=120, cwd=REPO)
    assert export.returncode == 0, export.stderr
    assert f"wrote {logdir / run_id}" in export.stdout

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    expected: dict[str, dict[int, float]] = defaultdict(dict)
    for e in read_events(run_dir):
        if e["kind"] == "metric" and e.get("loss") is not None:
            expected[e["task"]][e["step"]] = e["loss"]
    assert set(expected) == {"worker:0", "worker:1"}
    for task, losses in expected.items():
        assert len(losses) == 30
        acc = EventAccumulator(str(logdir / run_id / task.replace(":", "-")), size_guidance={"scalars": 0})
        acc.Reload()
        tags = set(acc.Tags()["scalars"])
        assert {"loss", "values/accuracy", "steps_per_sec", "system/cpu_percent", "system/rss_bytes"} <= tags
        read_back = {s.step: s.value for s in acc.Scalars("loss")}
        assert read_back == {step: as_float32(loss) for step, loss in losses.items()}
        accuracy = {s.step: s.value for s in acc.Scalars("values/accuracy")}
        assert accuracy[300] == 1.0 and accuracy[10] == as_float32(1 / 30)
        assert all(s.value > 0 for s in acc.Scalars("steps_per_sec"))
        rss = [e["rss_bytes"] for e in read_events(run_dir)
               if e["kind"] == "sample" and e["task"] == task and e.get("rss_bytes") is not None]
        assert [s.value for s in acc.Scalars("system/rss_bytes")] == [as_float32(float(b)) for b in rss]
        assert max(rss) > 0
    # each host as a run of its own, from its agent's whole-machine readings
    [host_dir] = sorted((logdir / run_id).glob("host-*"))
    acc = EventAccumulator(str(host_dir), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"host/cpu_percent", "host/mem_used_bytes", "host/outputs_free_bytes", "host/run_dir_free_bytes"} <= tags
    assert all(s.value > 0 for s in acc.Scalars("host/run_dir_free_bytes"))
