"""The agent's verbs (follow and start through the host agent, ports, sweep, preflight), from the real zipapp."""

from __future__ import annotations

import contextlib
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

from launcher.agent import clients
from launcher.protocol.agentlines import StartRequest, StatusRequest
from launcher.remote import agentpack


def agent_json(pyz: Path, *args: str) -> dict:
    out = subprocess.run([sys.executable, str(pyz), *args], capture_output=True, text=True, timeout=30,
                         check=True)
    return json.loads(out.stdout)


class Follower:
    """A running `follow` verb with its stdout lines in a queue (it starts the host agent if needed)."""

    def __init__(self, pyz: Path, run_dir: Path, *offsets: str) -> None:
        args = [sys.executable, str(pyz), "follow", "--run-dir", str(run_dir)]
        for offset in offsets:
            args += ["--offset", offset]
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=dict(os.environ, DISTLAUNCH_RUN_ID=RUN_ID))
        self.lines: queue.Queue[tuple[float, str]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.lines.put((time.time(), raw.decode().rstrip("\n")))

    def events(self, count: int, timeout: float = 5.0) -> list[str]:
        """The next ``count`` non-heartbeat lines."""
        got: list[str] = []
        deadline = time.monotonic() + timeout
        while len(got) < count:
            _, line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if not line.startswith("#hb "):
                got.append(line)
        return got

    def ask(self, request: dict, limit: int = 40) -> list[str]:
        """Send a request line on the verb's stdin; the lines until its `#re` answer (the last)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(request) + "\n").encode())
        self.proc.stdin.flush()
        lines = self.events(1, timeout=15)
        while not lines[-1].startswith("#re ") and len(lines) < limit:
            lines += self.events(1, timeout=15)
        return lines

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


RUN_ID = "r-verbs-test"


def line(task: str, n: int) -> str:
    return json.dumps({"v": 1, "ts": 1.0, "run": "r", "task": task, "kind": "log", "stream": "stdout",
                       "line": f"line {n}"}, separators=(",", ":"))


def append(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(text)


def start_tasks(pyz: Path, run_dir: Path, commands: dict[str, str]) -> dict:
    """The `start` verb: specs on stdin, the host agent (started if none serves) runs them."""
    specs = {slug: {"run": RUN_ID, "task": slug.replace("-", ":"), "command": command, "workdir": str(run_dir),
                    "grace_seconds": 2, "sample_interval": 0.2, "autolog": False}
             for slug, command in commands.items()}
    out = subprocess.run([sys.executable, str(pyz), "start", "--run-dir", str(run_dir)],
                         input=json.dumps({"specs": specs}).encode(), capture_output=True, timeout=60, check=True,
                         env=dict(os.environ, DISTLAUNCH_RUN_ID=RUN_ID))
    return json.loads(out.stdout)


def test_the_start_verb_reads_the_start_request_the_launcher_writes_on_its_stdin(run_dir, pyz):
    """HostSession.start_tasks, where no follow channel is open: the request's own bytes, op included."""
    spec = {"run": RUN_ID, "task": "worker:0", "command": "true", "workdir": str(run_dir), "autolog": False}
    request = StartRequest(("worker-0",), {"worker-0": {"A": "1"}}, {"worker-0": spec})
    out = subprocess.run([sys.executable, str(pyz), "start", "--run-dir", str(run_dir)], input=request.encode(),
                         capture_output=True, timeout=60, check=True, env=dict(os.environ, DISTLAUNCH_RUN_ID=RUN_ID))
    answer = json.loads(out.stdout)
    assert set(answer["pids"]) == {"worker-0"} and answer["errors"] == {}, answer
    assert json.loads((run_dir / "tasks" / "worker-0" / "spec.json").read_text()) == spec


def end_agent(pyz: Path, run_dir: Path) -> None:
    """Every task of the run dir stopped (by the agent, or by the verb itself where the agent
    died: a test that failed must not leave its tasks behind), then the agent ends."""
    tasks = ",".join(p.name for p in (run_dir / "tasks").iterdir()) if (run_dir / "tasks").is_dir() else ""
    subprocess.run([sys.executable, str(pyz), "stop", "--run-dir", str(run_dir), "--tasks", tasks, "--exit"],
                   capture_output=True, timeout=60, check=False)


@pytest.fixture
def run_dir(tmp_path, pyz):
    yield tmp_path
    end_agent(pyz, tmp_path)


def test_follow_catches_up_from_offsets_without_a_partial_line_and_touches_the_lease(run_dir, pyz):
    worker = run_dir / "tasks" / "worker-0" / "events.jsonl"
    ps = run_dir / "tasks" / "ps-0" / "events.jsonl"
    append(worker, line("worker:0", 1) + "\n" + line("worker:0", 2) + "\n" + line("worker:0", 3) + "\n")
    append(worker, line("worker:0", 4)[:10])  # a writer killed mid-line
    append(ps, line("ps:0", 1) + "\n" + line("ps:0", 2) + "\n")
    resume_at = len(line("worker:0", 1)) + 1
    follower = Follower(pyz, run_dir, f"worker-0={resume_at}")
    try:
        first = follower.events(4)
        assert sorted(first) == sorted([line("worker:0", 2), line("worker:0", 3),
                                        line("ps:0", 1), line("ps:0", 2)])
        idle = follower.no_events_for(1.6)
        assert idle and all(x.startswith("#hb ") for x in idle)
        assert abs(float(idle[0].split()[1]) - time.time()) < 5
        lease = run_dir / "lease"
        assert lease.exists() and time.time() - lease.stat().st_mtime < 2.5
    finally:
        assert follower.close() == 0


def test_events_of_tasks_started_later_are_pushed_within_a_fraction_of_a_second(run_dir, pyz):
    follower = Follower(pyz, run_dir)
    try:
        follower.no_events_for(0.3)
        answer = start_tasks(pyz, run_dir, {"worker-0": "for i in $(seq 40); do echo line $i; sleep 0.02; done",
                                            "ps-0": "echo only line"})
        assert set(answer["pids"]) == {"worker-0", "ps-0"} and answer["errors"] == {}
        delays, logs = [], []
        while len(logs) < 41:
            arrived, text = follower.lines.get(timeout=10)
            if text.startswith("#hb "):
                continue
            event = json.loads(text)
            if event["kind"] == "log":
                logs.append((event["task"], event["line"]))
                delays.append(arrived - event["ts"])
        assert [x for t, x in logs if t == "worker:0"] == [f"line {i}" for i in range(1, 41)]
        assert ("ps:0", "only line") in logs
        assert sorted(delays)[int(len(delays) * 0.9)] < 0.25, delays
    finally:
        assert follower.close() == 0


def test_follow_resumes_without_duplicates(run_dir, pyz):
    start_tasks(pyz, run_dir, {"worker-0": "for i in $(seq 10); do echo line $i; done"})
    events_file = run_dir / "tasks" / "worker-0" / "events.jsonl"
    wait = time.monotonic() + 20
    while '"state":"succeeded"' not in (events_file.read_text() if events_file.exists() else ""):
        assert time.monotonic() < wait, "the task did not finish"
        time.sleep(0.05)
    lines = events_file.read_text().splitlines()
    follower = Follower(pyz, run_dir)
    try:
        assert follower.events(len(lines)) == lines
    finally:
        follower.close()
    offset = sum(len(x) + 1 for x in lines[:6])
    follower = Follower(pyz, run_dir, f"worker-0={offset}")
    try:
        assert follower.events(len(lines) - 6) == lines[6:]
        assert all(x.startswith("#hb ") for x in follower.no_events_for(1.3))
    finally:
        follower.close()


def test_one_host_agent_serves_however_many_clients_start_it(run_dir, pyz):
    followers = [Follower(pyz, run_dir) for _ in range(3)]
    try:
        for f in followers:
            f.no_events_for(0.5)
        agents = [p for p in os.listdir("/proc") if p.isdigit() and _is_serve(int(p), run_dir)]
        assert len(agents) == 1, agents
    finally:
        for f in followers:
            f.close()


def _is_serve(pid: int, run_dir: Path) -> bool:
    """A host agent of this run dir: its process name, its working directory, the run id."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        cwd = os.readlink(f"/proc/{pid}/cwd")
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return comm == "distlaunch-host" and cwd == str(run_dir) and f"DISTLAUNCH_RUN_ID={RUN_ID}".encode() in env


def test_follow_exits_on_stdin_eof_and_quietly_on_a_closed_stdout(run_dir, pyz):
    (run_dir / "tasks").mkdir()
    follower = Follower(pyz, run_dir)
    follower.no_events_for(0.2)
    assert follower.close() == 0

    proc = subprocess.Popen([sys.executable, str(pyz), "follow", "--run-dir", str(run_dir)],
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


def test_a_start_request_on_the_follow_channel_is_answered_on_the_stream(run_dir, pyz):
    """The launcher's start rides the open follow channel: a JSON line on the verb's stdin, the
    answer a `#re` line among the events, then the task's events follow."""
    follower = Follower(pyz, run_dir)
    try:
        spec = {"run": RUN_ID, "task": "worker:0", "command": "echo hello", "workdir": str(run_dir),
                "grace_seconds": 2, "autolog": False}
        request = {"op": "start", "id": 7, "specs": {"worker-0": spec}, "tasks": ["worker-0"], "secrets": {}}
        lines = follower.ask(request)
        answer = json.loads(lines[-1][4:])
        assert answer["id"] == 7 and set(answer["pids"]) == {"worker-0"} and answer["errors"] == {}
        seen = [json.loads(x) for x in lines[:-1] if not x.startswith("#")]  # events may precede the answer
        while not any(e["kind"] == "state" and e["state"] == "succeeded" for e in seen):
            seen += [json.loads(x) for x in follower.events(1, timeout=15) if not x.startswith("#")]
        assert any(e["kind"] == "log" and e["line"] == "hello" for e in seen)
        assert json.loads((run_dir / "tasks" / "worker-0" / "spec.json").read_text())["command"] == "echo hello"
    finally:
        follower.close()


def test_a_host_agent_under_a_storm_of_sigchld_still_answers_and_exits(tmp_path, pyz):
    """Orphans of a task are the host agent's children (it is their subreaper): a task that leaves
    a stream of short-lived orphans sends it SIGCHLD after SIGCHLD. Its handlers once took a lock
    (Event.set), and one interrupted by the next deadlocked the agent for good."""
    storm = "while true; do (true &); done"
    answer = start_tasks(pyz, tmp_path, {"worker-0": storm, "worker-1": storm})
    pids = [pid for pid in answer["pids"].values() if pid]
    assert len(pids) == 2, answer
    agent = [int(p) for p in os.listdir("/proc") if p.isdigit() and _is_serve(int(p), tmp_path)]
    assert len(agent) == 1
    try:
        for _ in range(10):  # each round trip goes through the agent's main loop and its locks
            assert clients.request(str(tmp_path), StatusRequest(), spawn=False, timeout=10)["pid"] == agent[0]
            time.sleep(0.3)
        os.kill(agent[0], signal.SIGTERM)
        deadline = time.monotonic() + 20
        while _alive(agent[0]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(agent[0]), "the host agent did not exit within 20 s of SIGTERM"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(agent[0], signal.SIGKILL)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_task_that_cannot_start_fails_alone_and_the_rest_of_its_batch_runs(tmp_path, pyz):
    """A NUL byte in one task's environment makes its Popen raise ValueError: that task fails for
    good with the reason, and the tasks started before and after it in the same batch are
    supervised (their output read, their exit reported)."""
    specs = {slug: {"run": RUN_ID, "task": slug.replace("-", ":"), "command": "echo hello from $0; exit 0",
                    "workdir": str(tmp_path), "grace_seconds": 2, "sample_interval": 0.2, "autolog": False}
             for slug in ("worker-0", "worker-1", "worker-2")}
    specs["worker-1"]["env"] = {"BAD": "a\u0000b"}
    try:
        out = subprocess.run([sys.executable, str(pyz), "start", "--run-dir", str(tmp_path)],
                             input=json.dumps({"specs": specs}).encode(), capture_output=True, timeout=60,
                             check=True, env=dict(os.environ, DISTLAUNCH_RUN_ID=RUN_ID))
        answer = json.loads(out.stdout)
        assert answer["pids"]["worker-1"] is None and answer["pids"]["worker-0"] and answer["pids"]["worker-2"]

        def finals() -> dict[str, dict]:
            got = {}
            for slug in specs:
                path = tmp_path / "tasks" / slug / "events.jsonl"
                for text in (path.read_text().splitlines() if path.exists() else []):
                    event = json.loads(text)
                    if event["kind"] == "state" and event["state"] in ("succeeded", "failed", "stopped"):
                        got[slug] = event
            return got

        deadline = time.monotonic() + 20
        while len(finals()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        ended = finals()
        assert {s: e["state"] for s, e in ended.items()} == \
            {"worker-0": "succeeded", "worker-1": "failed", "worker-2": "succeeded"}
        assert ended["worker-1"]["permanent"] is True and "null byte" in ended["worker-1"]["reason"]
        logs = (tmp_path / "tasks" / "worker-2" / "events.jsonl").read_text()
        assert "hello from" in logs
    finally:
        end_agent(pyz, tmp_path)


# -- preflight --then-follow: a launch's one exec per host ---------------------------------------------


class OneExec:
    """What the launcher runs on a host (launcher/remote/channel.py): the bootstrap writes the agent
    from the first bytes of stdin, answers the preflight, then waits for the launcher's first line."""

    def __init__(self, tmp_path: Path, run_dir: Path, cwd: Path | None = None) -> None:
        from launcher.remote.channel import BOOTSTRAP

        self.data = agentpack.build_agent_zipapp()
        self.pyz = tmp_path / "uploaded.pyz"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", BOOTSTRAP, str(len(self.data)), agentpack.agent_digest(), str(self.pyz), "", "",
             "preflight", "--bind", "127.0.0.1",
             "--pick", "2", "--then-follow", "--run-dir", str(run_dir)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
            env=dict(os.environ, DISTLAUNCH_RUN_ID=RUN_ID))
        assert self.proc.stdin is not None and self.proc.stdout is not None
        assert self.proc.stdout.readline() == b"#agent send\n"  # no cache given: it asks for the archive
        self.proc.stdin.write(self.data)
        self.proc.stdin.flush()
        self.answer = json.loads(self.proc.stdout.readline())

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def until_answer_and_running(self) -> tuple[dict, dict]:
        """Read the stream until the `#re` answer and the task's `running` event both came (in
        either order); fails at EOF (the follower exits 30 s after its last ping)."""
        assert self.proc.stdout is not None
        answer: dict = {}
        running: dict = {}
        while not (answer and running):
            raw = self.proc.stdout.readline().decode()
            assert raw, "the stream ended first"
            if raw.startswith("#re "):
                answer = json.loads(raw[4:])
            elif raw.startswith("{") and json.loads(raw).get("state") == "running":
                running = json.loads(raw)
        return answer, running


def test_then_follow_ends_on_eof_without_starting_a_host_agent(tmp_path, run_dir):
    one = OneExec(tmp_path, run_dir)
    assert len(one.answer["ports"]["picked"]) == 2 and one.answer["python"] == platform.python_version()
    assert one.pyz.read_bytes() == one.data and (one.pyz.stat().st_mode & 0o777) == 0o600
    assert one.proc.stdin is not None
    one.proc.stdin.close()  # the launch stopped at preflight
    assert one.proc.wait(timeout=30) == 0
    assert not (run_dir / "agent.pid").exists() and not (run_dir / "agent.sock").exists()


def test_then_follow_starts_the_host_agent_on_the_first_line_and_passes_the_start_on(tmp_path, run_dir):
    one = OneExec(tmp_path, run_dir)
    spec = {"run": RUN_ID, "task": "worker:0", "command": "sleep 30", "workdir": str(run_dir),
            "grace_seconds": 2, "autolog": False}
    one.send(json.dumps({"op": "start", "specs": {"worker-0": spec}, "tasks": ["worker-0"], "id": 7}))
    answer, running = one.until_answer_and_running()
    assert answer["id"] == 7 and answer["errors"] == {} and isinstance(answer["pids"]["worker-0"], int)
    assert running["task"] == "worker:0" and running["pid"] == answer["pids"]["worker-0"]
    agent = int((run_dir / "agent.pid").read_text())
    assert Path(f"/proc/{agent}/comm").read_text().strip() == "distlaunch-host"
    assert one.proc.stdin is not None
    one.proc.stdin.close()
    assert one.proc.wait(timeout=30) == 0
    os.kill(answer["pids"]["worker-0"], 0)  # the task outlives its follower: the host agent runs it


def test_each_verb_alone_parses_as_with_the_whole_command_line():
    from launcher.agent import verbs

    whole = verbs.build_parser()
    subparsers = next(a for a in whole._actions if a.dest == "verb")
    assert set(subparsers.choices) == set(verbs.VERBS)  # type: ignore[attr-defined]
    argv = ["preflight", "--bind", "0.0.0.0", "--pick", "3", "--then-follow", "--run-dir", "/r"]
    assert verbs.build_parser("preflight").parse_args(argv) == whole.parse_args(argv)


def test_the_bootstrap_does_not_import_from_the_directory_it_runs_in(tmp_path, run_dir):
    """Over SSH that directory is the home: a ~/json.py (or ~/psutil) must not shadow the real one."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "json.py").write_text("raise ImportError('the home directory shadowed json')\n")
    one = OneExec(tmp_path, run_dir, cwd=home)
    assert len(one.answer["ports"]["picked"]) == 2
    assert one.proc.stdin is not None
    one.proc.stdin.close()
    assert one.proc.wait(timeout=30) == 0


def test_then_follow_without_a_run_dir_is_refused(pyz):
    out = subprocess.run([sys.executable, str(pyz), "preflight", "--then-follow"], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 2 and "--then-follow needs --run-dir" in out.stderr


def test_a_batch_runs_no_command_before_its_last_task_was_spawned(run_dir, pyz):
    """The batch gate: every task of one start request waits until the agent has spawned the
    whole batch (tasks booting at once would otherwise starve the spawning of the rest). Each
    command writes the time it began; none begins before the batch's last `running` stamp."""
    marks = run_dir / "began"
    marks.mkdir()
    commands = {f"worker-{i}": f'date +%s.%N > {marks}/{i}' for i in range(12)}
    answer = start_tasks(pyz, run_dir, commands)
    assert all(answer["pids"].values()) and answer["errors"] == {}

    def began() -> dict[str, float]:
        return {p.name: float(p.read_text()) for p in marks.iterdir() if p.read_text().strip()}

    deadline = time.monotonic() + 20
    while len(began()) < len(commands) and time.monotonic() < deadline:
        time.sleep(0.05)
    running = []
    for slug in commands:
        for text in (run_dir / "tasks" / slug / "events.jsonl").read_text().splitlines():
            event = json.loads(text)
            if event["kind"] == "state" and event["state"] == "running":
                running.append(event["ts"])
    assert len(began()) == len(commands) and len(running) == len(commands)
    assert min(began().values()) >= max(running) - 0.002  # the stamps and `date` share one clock


def test_a_stop_request_with_exit_on_the_follow_channel_is_answered_then_the_agent_ends(run_dir, pyz):
    """The job's end rides the open follow channel too (no exec per host): the tasks are stopped,
    the `#re` answer comes on the stream, then the host agent exits (its lock is free)."""
    start_tasks(pyz, run_dir, {"worker-0": "sleep 60", "worker-1": "sleep 60"})
    agent_pid = int(wait_pid_file(run_dir / "agent.pid"))
    follower = Follower(pyz, run_dir)
    try:
        request = {"op": "stop", "id": 9, "tasks": ["worker-0", "worker-1"], "grace": 2, "exit": True}
        answer = json.loads(follower.ask(request)[-1][4:])
        assert answer["id"] == 9 and sorted(answer["stopped"]) == ["worker-0", "worker-1"] and answer["left"] == []
        assert follower.proc.wait(10) == 0  # the agent ended: the follower's stream did too
        assert clients._wait_gone(agent_pid, 10.0)
    finally:
        follower.close()


def test_a_follower_that_vanishes_mid_stream_does_not_kill_the_host_agent(run_dir, pyz):
    """A follower killed while the agent pushes it a burst (the launcher SIGKILLed: its relay's
    socket closes under the agent's send) costs the agent an EPIPE, never its life; the agent
    dying there would leave its tasks unsupervised with no orphan rule to stop them."""
    start_tasks(pyz, run_dir, {"worker-0": "while :; do echo aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa; done"})
    agent_pid = int(wait_pid_file(run_dir / "agent.pid"))
    for _ in range(8):
        follower = Follower(pyz, run_dir)
        follower.events(50, timeout=15)  # the burst flows
        follower.proc.kill()
        follower.proc.wait(5)
    time.sleep(0.5)  # a SIGPIPE would have ended it within this; there is no event to await for "still alive"
    os.kill(agent_pid, 0)
    assert Path(f"/proc/{agent_pid}/status").read_text().split("State:")[1].split()[0] != "Z"


def wait_pid_file(path: Path, timeout: float = 10.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            text = path.read_text().strip()
            if text:
                return text
        time.sleep(0.02)
    raise AssertionError(f"no {path} after {timeout} s")
