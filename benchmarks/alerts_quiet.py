"""A quiet job tells nobody: every [notify] alert chosen, a healthy job for ``--minutes`` (default 10).

Three workers (custom strategy, no TensorFlow) report steps at about ``--rate`` steps/s each with
the jitter a real step has (each step 0.8-1.2 x its mean) and a checkpoint (a real file, through
``launcher.report.report_checkpoint``) every 30 s, on this machine. The profile chooses every
alert, with thresholds tighter than the defaults so that noise would show: the throughput window
10 s (default 60), checkpoint_old after 1 minute (default 60), stall after 30 s, a straggler after
30 s below 0.7 x the median; disk_low at 1 GiB free. A webhook on 127.0.0.1 receives what
``[notify]`` tells.

Reported: the alerts received (want 0), the job_ended notices (want 1), the job's end state, the
minutes, the machine's load average at the start and the end.

Run: ``.venv/bin/python benchmarks/alerts_quiet.py [--minutes 10] [--rate 5]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from common import PYTHON, REPO, machine

WORKER = '''\
import os, random, sys, time
from launcher import report
minutes, rate, outputs = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
task = os.environ["DISTLAUNCH_TASK"].replace(":", "-")
end = time.monotonic() + minutes * 60
step, next_ckpt = 0, time.monotonic() + 30
while time.monotonic() < end:
    time.sleep(random.uniform(0.8, 1.2) / rate)
    step += 1
    report.report(step=step, loss=1.0 / step)
    if time.monotonic() >= next_ckpt:
        next_ckpt += 30
        folder = os.path.join(outputs, task)
        os.makedirs(folder, exist_ok=True)
        name = "ckpt-%d" % step
        with open(os.path.join(folder, name), "w") as f:
            f.write("%d\\n" % step)
        report.report_checkpoint(folder, [name], step=step)
report.flush()
'''


class _Hook(ThreadingHTTPServer):
    posts: list[dict[str, str]]


class _Handler(BaseHTTPRequestHandler):
    server: _Hook

    def do_POST(self) -> None:
        self.server.posts.append(json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0")))))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=5.0, help="steps/s of each worker")
    args = parser.parse_args()
    hook = _Hook(("127.0.0.1", 0), _Handler)
    hook.posts = []
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    every = ["stall", "straggler", "nan", "host_unreachable", "host_lost", "moved", "drained", "throughput_drop",
             "gpu_idle", "gpu_error", "disk_low", "checkpoint_old"]
    with tempfile.TemporaryDirectory(prefix="alerts-quiet-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "worker.py").write_text(WORKER)
        (tmp / "outputs").mkdir()
        (tmp / "p.toml").write_text(f'''name = "alerts-quiet"
strategy = "custom"
outputs = "{tmp}/outputs"

[defaults]
python = "{PYTHON}"
workdir = "{tmp}"
autolog = false
stall_seconds = 30
command = "{{python}} worker.py {args.minutes} {args.rate} {{outputs}}"

[notify]
webhook = "http://127.0.0.1:{hook.server_address[1]}/hook"
on = {json.dumps(every)}
throughput_window_seconds = 10
checkpoint_old_minutes = 1
disk_low = "1GiB"

[roles.worker]
count = 3
''')
        load_start = os.getloadavg()
        started = time.monotonic()
        up = subprocess.run([PYTHON, "-m", "launcher.cli", "up", str(tmp / "p.toml"), "--no-tui", "--run-dir",
                             str(tmp / "run")], cwd=REPO, capture_output=True, text=True,
                            timeout=args.minutes * 60 + 300, stdin=subprocess.DEVNULL)
        took = (time.monotonic() - started) / 60
        load_end = os.getloadavg()
        hook.shutdown()
        events = tmp / "run" / "events.jsonl"
        if up.returncode != 0 and not events.exists():
            sys.exit(f"up failed (exit {up.returncode}): {up.stderr.strip()[-2000:]}")
        ended = [json.loads(line)["state"] for line in events.read_text().splitlines()
                 if '"kind":"job"' in line.replace(" ", "")]
    alerts = [(p["alert"], p["active"], p["subject"], p.get("figure", "")) for p in hook.posts
              if p.get("event") == "alert"]
    print(f"machine: {machine()}")
    print(f"quiet job: 3 workers x ~{args.rate:g} steps/s, a checkpoint every 30 s, {took:.1f} min "
          f"(exit {up.returncode}, job {ended[-1] if ended else '?'})")
    print(f"load average at the start {load_start[0]:.2f}, at the end {load_end[0]:.2f}")
    print(f"alerts told: {len(alerts)} (want 0)")
    for alert in alerts:
        print("  ", *alert)
    print(f"job_ended notices: {sum(p.get('event') == 'job_ended' for p in hook.posts)} (want 1)")
    if up.returncode != 0:
        print(up.stdout[-2000:], up.stderr[-2000:], file=sys.stderr)


if __name__ == "__main__":
    main()
