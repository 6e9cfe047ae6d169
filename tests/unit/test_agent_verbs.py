"""The agent's helper verbs (follow, ports, sweep, preflight), run from the real zipapp."""

from __future__ import annotations

import json
import os
import platform
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from launcher import agentpack


@pytest.fixture(scope="module")
def pyz(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("agent") / "agent.pyz"
    path.write_bytes(agentpack.build_agent_zipapp())
    return path


def agent_json(pyz: Path, *args: str) -> dict:
    out = subprocess.run([sys.executable, str(pyz), *args], capture_output=True, text=True, timeout=30,
                         check=True)
    return json.loads(out.stdout)


class Follower:
    """A running `follow` verb with its stdout lines in a queue."""

    def __init__(self, pyz: Path, run_dir: Path, *offsets: str) -> None:
        args = [sys.executable, str(pyz), "follow", "--run-dir", str(run_dir)]
        for offset in offsets:
            args += ["--offset", offset]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put((time.monotonic(), raw.decode().rstrip("\n")))

    def events(self, count: int, timeout: float = 5.0) -> list[str]:
        """The next ``count`` non-heartbeat lines."""
        got: list[str] = []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            _, line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if not line.startswith("#hb "):
                got.append(line)
        return got

    def no_events_for(self, seconds: float) -> list[str]:
        """Every line that arrives within ``seconds`` (expected: heartbeats only)."""
        got: list[str] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                got.append(self.lines.get(timeout=max(0.01, deadline - time.monotonic()))[1])
            except queue.Empty:
                break
        return got

    def close(self) -> int:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            return self.proc.wait(5)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(5)


def line(task: str, n: int) -> str:
    return json.dumps({"v": 1, "ts": 1.0, "run": "r", "task": task, "kind": "log", "stream": "stdout",
                       "line": f"line {n}"}, separators=(",", ":"))


def append(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(text)


def test_follow_streams_from_offsets_completes_partial_lines_and_finds_new_tasks(tmp_path, pyz):
    worker = tmp_path / "tasks" / "worker-0" / "events.jsonl"
    ps = tmp_path / "tasks" / "ps-0" / "events.jsonl"
    append(worker, line("worker:0", 1) + "\n" + line("worker:0", 2) + "\n" + line("worker:0", 3) + "\n")
    partial = line("worker:0", 4)
    append(worker, partial[:10])
    append(ps, line("ps:0", 1) + "\n" + line("ps:0", 2) + "\n")
    resume_at = len(line("worker:0", 1)) + 1

    follower = Follower(pyz, tmp_path, f"worker-0={resume_at}")
    try:
        first = follower.events(4)
        assert sorted(first) == sorted([line("worker:0", 2), line("worker:0", 3),
                                        line("ps:0", 1), line("ps:0", 2)])
        append(worker, partial[10:] + "\n")
        assert follower.events(1) == [partial]

        chief = tmp_path / "tasks" / "chief-0" / "events.jsonl"
        append(chief, line("chief:0", 1) + "\n")
        assert follower.events(1) == [line("chief:0", 1)]

        idle = follower.no_events_for(1.6)
        assert idle and all(x.startswith("#hb ") for x in idle)
        assert abs(float(idle[0].split()[1]) - time.time()) < 5

        lease = tmp_path / "lease"
        assert lease.exists() and time.time() - lease.stat().st_mtime < 2.5
    finally:
        assert follower.close() == 0


def test_follow_delivers_new_lines_quickly(tmp_path, pyz):
    events_file = tmp_path / "tasks" / "worker-0" / "events.jsonl"
    append(events_file, "")
    follower = Follower(pyz, tmp_path)
    try:
        follower.no_events_for(0.3)
        delays = []
        for n in range(20):
            sent = time.monotonic()
            append(events_file, line("worker:0", n) + "\n")
            while True:
                arrived, text = follower.lines.get(timeout=5)
                if not text.startswith("#hb "):
                    break
            assert text == line("worker:0", n)
            delays.append(arrived - sent)
        assert sorted(delays)[-2] < 0.25, delays
    finally:
        assert follower.close() == 0


def test_follow_resumes_without_duplicates(tmp_path, pyz):
    events_file = tmp_path / "tasks" / "worker-0" / "events.jsonl"
    lines = [line("worker:0", n) for n in range(10)]
    append(events_file, "".join(x + "\n" for x in lines))
    follower = Follower(pyz, tmp_path)
    try:
        assert follower.events(10) == lines
    finally:
        follower.close()
    offset = sum(len(x) + 1 for x in lines[:6])
    follower = Follower(pyz, tmp_path, f"worker-0={offset}")
    try:
        assert follower.events(4) == lines[6:]
        assert all(x.startswith("#hb ") for x in follower.no_events_for(1.3))
    finally:
        follower.close()


def test_follow_exits_on_stdin_eof_and_quietly_on_a_closed_stdout(tmp_path, pyz):
    (tmp_path / "tasks").mkdir()
    follower = Follower(pyz, tmp_path)
    follower.no_events_for(0.2)
    assert follower.close() == 0

    proc = subprocess.Popen([sys.executable, str(pyz), "follow", "--run-dir", str(tmp_path)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()  # the first heartbeat: it is running
        proc.stdout.close()
        assert proc.wait(5) == 0
        assert b"Traceback" not in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_ports_reports_busy_ports_and_picks_bindable_free_ones(pyz):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    bound_only = socket.socket()
    bound_only.bind(("127.0.0.1", 0))
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    free_port = probe.getsockname()[1]
    probe.close()
    busy_ports = [listener.getsockname()[1], bound_only.getsockname()[1]]
    try:
        check = [*busy_ports, free_port]
        result = agent_json(pyz, "ports", "--bind", "127.0.0.1", "--check", ",".join(map(str, check)),
                            "--pick", "3")
    finally:
        listener.close()
        bound_only.close()
    assert sorted(result["busy"]) == sorted(busy_ports)
    picked = result["picked"]
    assert len(picked) == 3 and len(set(picked)) == 3 and not set(picked) & set(check)
    for port in picked:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_listener_on_any_address_makes_a_port_busy_for_a_specific_address(pyz):
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        port = listener.getsockname()[1]
        result = agent_json(pyz, "ports", "--bind", "127.0.0.1", "--check", str(port))
    assert result["busy"] == [port] and result["picked"] == []


def _start_with_run_id(run_id: str, command: str) -> subprocess.Popen:
    return subprocess.Popen(["sh", "-c", command], start_new_session=True,
                            env=dict(os.environ, DISTLAUNCH_RUN_ID=run_id))


def test_sweep_finds_and_kills_processes_of_the_run(pyz):
    run_id = "sweep-" + uuid.uuid4().hex
    polite = _start_with_run_id(run_id, "exec sleep 60")
    stubborn = _start_with_run_id(run_id, "trap '' TERM; echo ready; exec sleep 60")
    other = _start_with_run_id("another-run", "exec sleep 60")
    try:
        deadline = time.monotonic() + 5
        while True:
            found = agent_json(pyz, "sweep", "--run-id", run_id)["left"]
            if {p["pid"] for p in found} == {polite.pid, stubborn.pid} or time.monotonic() > deadline:
                break
        assert {p["pid"] for p in found} == {polite.pid, stubborn.pid}
        assert all("sleep 60" in p["cmdline"] for p in found)

        result = agent_json(pyz, "sweep", "--run-id", run_id, "--kill", "--grace", "1")
        assert result == {"left": []}
        assert polite.wait(5) == -signal.SIGTERM
        assert stubborn.wait(5) == -signal.SIGKILL
        assert other.poll() is None
    finally:
        for proc in (polite, stubborn, other):
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)


def test_preflight_reports_python_and_optional_modules(pyz):
    result = agent_json(pyz, "preflight")
    assert result["python"] == platform.python_version()
    assert result["psutil"] is True  # installed in the test venv
    assert isinstance(result["pynvml"], bool)


def test_an_address_not_on_this_host_is_checked_on_the_wildcard(pyz):
    # 192.0.2.1 (TEST-NET-1) is never a local address: think of a NAT address in a profile
    with socket.socket() as listener:
        listener.bind(("0.0.0.0", 0))
        listener.listen()
        port = listener.getsockname()[1]
        result = agent_json(pyz, "ports", "--bind", "192.0.2.1", "--check", str(port), "--pick", "1")
    assert result["busy"] == [port]
    assert len(result["picked"]) == 1 and result["picked"][0] != port


def test_sweep_leaves_the_launchers_notify_commands_alone(pyz):
    run_id = "sweep-notify-" + uuid.uuid4().hex
    task = _start_with_run_id(run_id, "exec sleep 60")
    notify = subprocess.Popen(["/bin/sh", "-c", "exec sleep 60"], stdout=subprocess.DEVNULL,
                              env=dict(os.environ, DISTLAUNCH_RUN_ID=run_id, DISTLAUNCH_NOTIFY="1"))
    try:
        deadline = time.monotonic() + 5
        while True:  # until both have exec'd with their own environment
            found = {p["pid"] for p in agent_json(pyz, "sweep", "--run-id", run_id)["left"]}
            notify_env = Path(f"/proc/{notify.pid}/environ").read_bytes().split(b"\0")
            if (found == {task.pid} and b"DISTLAUNCH_NOTIFY=1" in notify_env) or time.monotonic() > deadline:
                break
        assert found == {task.pid}
        result = agent_json(pyz, "sweep", "--run-id", run_id, "--kill", "--grace", "1")
        assert result == {"left": []}
        assert task.wait(5) == -signal.SIGTERM
        assert notify.poll() is None  # still running: the job's end notification outlives the teardown
    finally:
        for proc in (task, notify):
            if proc.poll() is None:
                proc.kill()
                proc.wait(5)
