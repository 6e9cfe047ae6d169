"""[notify] alerts for real: a job that stalls, gives a NaN loss and writes where the disk is
"low" tells a webhook on 127.0.0.1 (started here) and the notify command once when each
starts and once when it clears, and nothing else."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.integration.jobtools import cli, kill_run_processes
from tests.profiles import build_profile

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


class _Hook(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.posts: list[dict[str, str]] = []


class _Handler(BaseHTTPRequestHandler):
    server: _Hook

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.server.posts.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def hook() -> Iterator[_Hook]:
    server = _Hook()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_each_alert_tells_the_webhook_and_the_command_once_as_it_starts_and_once_as_it_clears(
        tmp_path: Path, hook: _Hook) -> None:
    script = tmp_path / "train.py"
    script.write_text(_SCRIPT)
    seen = tmp_path / "seen.txt"
    profile = build_profile(
        tmp_path / "p.toml", name="alerts", command=f"{{python}} {script}", hosts=(),
        defaults={"stall_seconds": 2.5, "autolog": False},
        notify={"command": f'echo "$DISTLAUNCH_EVENT $DISTLAUNCH_ALERT $DISTLAUNCH_ACTIVE" >> {seen}',
                "webhook": f"http://127.0.0.1:{hook.server_address[1]}/hook",
                "on": ["stall", "nan", "disk_low"], "disk_low": "1000000TiB", "timeout_seconds": 10})
    run_id = "notify-alerts"
    try:
        up = cli("up", str(profile), "--no-tui", "--run-dir", str(tmp_path / "run"), "--run-id", run_id,
                 timeout=120)
    finally:
        kill_run_processes(run_id)
    assert up.returncode == 0, up.stderr[-2000:]
    alerts = [(p["alert"], p["active"], p["subject"]) for p in hook.posts if p["event"] == "alert"]
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
