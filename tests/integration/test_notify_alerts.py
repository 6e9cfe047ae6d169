"""[notify] alerts for real: a job that stalls, gives a NaN loss and writes where the disk is
"low" tells a webhook on 127.0.0.1 (started here) and the notify command once when each
starts and once when it clears, and nothing else; so do a worker that falls behind, the job's
steps/s falling by half, and a disk filled for real (a small tmpfs as the outputs). Host alerts
(unreachable, lost, moved, drained) are checked where hosts are cut and drained for real:
tests/integration/test_multihost.py and test_host_loss.py."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.jobtools import cli, kill_run_processes
from tests.profiles import build_profile
from tests.webhook import Webhook

#: steps 0-4, a 5 s stall, steps 5-9, a NaN at step 10, finite again at 11-14
_SCRIPT = """
import json, time
def say(**m):
    print('@distlaunch ' + json.dumps(dict(kind='metric', **m)), flush=True)
for i in range(5):
    say(step=i, loss=1.0); time.sleep(0.3)
time.sleep(5)
for i in range(5, 10):
    say(step=i, loss=1.0); time.sleep(0.3)
say(step=10, nonfinite_loss='nan'); time.sleep(1.5)
for i in range(11, 15):
    say(step=i, loss=0.5); time.sleep(0.3)
"""


def test_each_alert_tells_the_webhook_and_the_command_once_as_it_starts_and_once_as_it_clears(
        tmp_path: Path, hook: Webhook) -> None:
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    seen = tmp_path / "seen.txt"
    profile = build_profile(
        tmp_path / "p.toml", name="alerts", command=f"{{python}} {script}", hosts=(),
        defaults={"stall_seconds": 2.5, "autolog": False},
        notify={"command": f'echo "$DISTLAUNCH_EVENT $DISTLAUNCH_ALERT $DISTLAUNCH_ACTIVE" >> {seen}',
                "webhook": hook.url,
                "on": ["stall", "nan", "disk_low"], "disk_low": "1000000TiB", "timeout_seconds": 10})
    run_id = "notify-alerts"
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run"), "--run-id", run_id,
                 timeout=120)
    finally:
        kill_run_processes(run_id)
    assert up.returncode == 0, up.stderr[-2000:]
    alerts = hook.alerts()
    assert alerts.count(("stall", "1", "worker:0")) == 1 and alerts.count(("stall", "0", "worker:0")) == 1, alerts
    assert alerts.count(("nan", "1", "worker:0")) == 1 and alerts.count(("nan", "0", "worker:0")) == 1, alerts
    assert [a for a in alerts if a[0] == "disk_low"] == [("disk_low", "1", "local")], alerts
    assert alerts.index(("stall", "1", "worker:0")) < alerts.index(("stall", "0", "worker:0"))
    assert {a[0] for a in alerts} == {"stall", "nan", "disk_low"}
    stall = next(p for p in hook.posts if p.get("alert") == "stall" and p["active"] == "1")
    assert stall["text"].startswith(f"{run_id}: stall started on worker:0: ") and f"distlaunch attach {run_id}" in \
        stall["text"]
    disk = next(p for p in hook.posts if p.get("alert") == "disk_low")
    assert "free on host local" in disk["figure"]
    assert [p["event"] for p in hook.posts].count("job_ended") == 1
    told = sorted(line.strip() for line in seen.read_text().splitlines())
    assert told == sorted([f"alert {a} {act}" for a, act, _ in alerts] + ["job_ended"]), told
    assert "warning" not in up.stderr
    # the readings behind disk_low are the host's: status --json gives its last one
    status = cli("status", str(tmp_path / "run"), "--json")
    machine = json.loads(status.stdout)["hosts"]["local"]["machine"]
    assert machine["outputs_free_bytes"] > 0 and machine["run_dir_free_bytes"] > 0
    assert {"net_rx_bytes_per_s", "net_tx_bytes_per_s", "disk_write_bytes_per_s"} <= set(machine)


#: each worker's pace, (seconds, steps/s) in turn: all three drop to 1 step/s for 3 s (the job's
#: throughput), then worker:2 alone runs at 2 steps/s for 10 s (a straggler) and catches up
_PACED = """
import json, os, sys, time
task = os.environ["DISTLAUNCH_TASK"]
phases = [(5, 10), (3, 1), (5, 10)] + ([(10, 2), (9, 10)] if task == "worker:2" else [(19, 10)])
step, due = 0, time.monotonic()
for seconds, rate in phases:
    end = due + seconds
    while due < end:
        due += 1.0 / rate
        time.sleep(max(0.0, due - time.monotonic()))
        step += 1
        print('@distlaunch ' + json.dumps(dict(kind='metric', step=step, loss=1.0)), flush=True)
"""


def test_a_slow_worker_and_a_throughput_drop_each_alert_once_and_clear_once(tmp_path: Path, hook: Webhook) -> None:
    script = tmp_path / "paced.py"
    script.write_text(_PACED)
    profile = build_profile(
        tmp_path / "p.toml", name="alerts-pace", strategy="custom", command=f"{{python}} {script}", hosts=(),
        top="straggler_seconds = 2\n", defaults={"autolog": False}, roles={"worker": 3},
        notify={"webhook": hook.url, "on": ["straggler", "throughput_drop"], "throughput_window_seconds": 1,
                "throughput_drop_percent": 50, "timeout_seconds": 10})
    run_id = "notify-pace"
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run"), "--run-id", run_id,
                 timeout=120)
    finally:
        kill_run_processes(run_id)
    assert up.returncode == 0, up.stderr[-2000:]
    alerts = hook.alerts()
    assert alerts == [("throughput_drop", "1", "job"), ("throughput_drop", "0", "job"),
                      ("straggler", "1", "worker:2"), ("straggler", "0", "worker:2")], alerts
    drop = next(p for p in hook.posts if p.get("alert") == "throughput_drop" and p["active"] == "1")
    assert "below the run's recent" in drop["figure"], drop
    slow = next(p for p in hook.posts if p.get("alert") == "straggler" and p["active"] == "1")
    assert "median" in slow["figure"] and slow["host"] == "local", slow


#: fills its outputs (a 64 MiB tmpfs) with 48 MiB, waits until disk_low was told, frees it, waits
#: until the clear was told, then exits: the notify command's file is the event awaited (bounded)
_FILLER = """
import os, sys, time
outputs, seen = sys.argv[1], sys.argv[2]
def wait_for(text):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if os.path.exists(seen) and text in open(seen).read():
            return
        time.sleep(0.1)
    sys.exit("never told: " + text)
with open(os.path.join(outputs, "ballast"), "wb") as f:
    f.write(b"x" * (48 << 20))
wait_for("alert disk_low 1")
os.unlink(os.path.join(outputs, "ballast"))
wait_for("alert disk_low 0")
"""


def test_a_disk_filled_in_a_small_tmpfs_alerts_once_and_clears_once_when_freed(tmp_path: Path, hook: Webhook) -> None:
    if os.geteuid() != 0:
        if os.environ.get("DISTLAUNCH_REQUIRE_SSHD") == "1":
            pytest.fail("the disk_low test needs root here (mount -t tmpfs)")
        pytest.skip("needs root to mount a small tmpfs")
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", str(outputs)], check=True, timeout=30)
    script, seen = tmp_path / "fill.py", tmp_path / "seen.txt"
    script.write_text(_FILLER)
    profile = build_profile(
        tmp_path / "p.toml", name="alerts-disk", strategy="custom", outputs=outputs,
        command=f"{{python}} {script} {{outputs}} {seen}", hosts=(), defaults={"autolog": False},
        roles={"worker": 1}, top="sample_interval = 0.2\n",
        notify={"command": f'echo "$DISTLAUNCH_EVENT $DISTLAUNCH_ALERT $DISTLAUNCH_ACTIVE" >> {seen}',
                "webhook": hook.url, "on": ["disk_low"], "disk_low": "32MiB", "timeout_seconds": 10})
    run_id = "notify-disk"
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run"), "--run-id", run_id,
                 timeout=120)
    finally:
        kill_run_processes(run_id)
        subprocess.run(["umount", "-l", str(outputs)], timeout=30)
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    assert hook.alerts() == [("disk_low", "1", "local"), ("disk_low", "0", "local")], hook.posts
    low = next(p for p in hook.posts if p.get("alert") == "disk_low" and p["active"] == "1")
    free_mib = float(low["figure"].split()[0]) * (1 if "MiB" in low["figure"] else 1 / 1024)
    assert 8 <= free_mib < 32, low  # what the tmpfs had left: 64 MiB less the 48 written
