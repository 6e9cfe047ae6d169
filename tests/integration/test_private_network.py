"""An all-local job in a private network namespace (issue 59, item 2): TensorFlow's task ports have
no authentication, so on a shared machine the tasks get a network of their own.

- A job with ``local_network = "private"``: its two tasks reach each other at their TF_CONFIG
  addresses, and the same port refuses a connection from this machine's network; every task and
  the host agent share one namespace, not ours. A host agent killed with SIGKILL is replaced by
  one that joins its predecessor's namespace (the tasks it adopts live there), and the job ends
  Succeeded with nothing left.
- `distlaunch profile` reaches a task's profiler server from inside that namespace.
- As another user (uid 65534, no privilege) the namespace is made inside a user namespace of
  that user's own (stdlib, from the agent's module): its listener is out of reach from outside
  and reached by a process that joins it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.agent import netns
from tests.integration.jobtools import (
    REPO,
    cli,
    kill_run_processes,
    pids_with_run_id,
    read_events,
    start_cli,
    task_step,
    wait_for,
    write_profile,
)
from tests.integration.otheruser import OTHER_UID, require_other_user, shared_tmp

pytestmark = pytest.mark.slow

PEER = REPO / "tests" / "data" / "network" / "peer.py"
STEPS_SCRIPT = "tests/data/steptime/no_optimizer.py"


def _kernel_allows() -> None:
    refused = netns.can_make()
    if refused is not None:
        if os.environ.get("DISTLAUNCH_REQUIRE_SSHD") == "1":
            pytest.fail(f"DISTLAUNCH_REQUIRE_SSHD=1 but this machine refuses a network namespace: {refused}")
        pytest.skip(f"this machine refuses a network namespace: {refused}")


def _reachable(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def _net(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def _log(run_dir: Path, task: str) -> str:
    path = run_dir / "logs" / f"{task.replace(':', '-')}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def _agent_pid(run_dir: Path) -> int | None:
    try:
        pid = int((run_dir / "hosts" / "local" / "agent.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if Path(f"/proc/{pid}").exists() else None


def test_tasks_reach_each_other_in_their_own_network_and_nobody_else_does(tmp_path: Path) -> None:
    _kernel_allows()
    run_id = "it-private-net"
    stop = tmp_path / "stop"
    profile = write_profile(tmp_path / "job.toml", f"""
name = "{run_id}"
strategy = "custom"
success_policy = "all_workers"
local_network = "private"
[defaults]
command = "{{python}} {PEER}"
workdir = "{REPO}"
env = {{ STOP_FILE = "{stop}" }}
restart = "never"
grace_seconds = 5
[hosts.local]
address = "localhost"
transport = "local"
[roles.worker]
count = 2
hosts = ["local"]
""")
    run_dir = tmp_path / "run"
    up_log = tmp_path / "up.log"
    up = start_cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id, log=up_log)
    try:
        def reached() -> bool:
            assert up.poll() is None, up_log.read_text(errors="replace")[-3000:]
            return "REACHED hello from worker:0" in _log(run_dir, "worker:1")

        wait_for(reached, 120, "worker:1 to reach worker:0 at its TF_CONFIG address")
        state = json.loads((run_dir / "state.json").read_text())
        port, pids = state["tasks"]["worker:0"]["port"], [state["tasks"][t]["pid"] for t in ("worker:0", "worker:1")]
        assert not _reachable(port), f"worker:0's port {port} answers from this machine's network"
        agent = wait_for(lambda: _agent_pid(run_dir), 30, "the host agent's pid")
        theirs = {_net(pid) for pid in pids} | {_net(agent)}
        assert len(theirs) == 1 and theirs != {_net(os.getpid())}, theirs

        os.kill(agent, signal.SIGKILL)  # a new host agent adopts the tasks, in their namespace
        again = wait_for(lambda: (p := _agent_pid(run_dir)) != agent and p, 90, "a new host agent")
        assert _net(again) in theirs, "the new host agent is not in its tasks' network namespace"
        assert "joined the private network of task pid" in (run_dir / "hosts" / "local" / "agent.log").read_text()
        assert not _reachable(port)

        stop.touch()
        up.wait(timeout=120)
        said = up_log.read_text(errors="replace")
        assert up.returncode == 0, said[-3000:]
        assert "the tasks run in a private network namespace" in said, said[-2000:]
        jobs = [e for e in read_events(run_dir) if e["kind"] == "job"]
        assert jobs[-1]["state"] == "Succeeded", jobs[-1]
        wait_for(lambda: pids_with_run_id(run_id) == [], 30, "no process of the run")
    finally:
        stop.touch()
        if up.poll() is None:
            up.kill()
            up.wait(timeout=30)
        kill_run_processes(run_id)


def test_a_profile_capture_reaches_a_task_in_its_private_network(tmp_path: Path) -> None:
    _kernel_allows()
    run_id = "it-private-net-profile"
    profile = write_profile(tmp_path / "job.toml", f"""
name = "{run_id}"
strategy = "custom"
local_network = "private"
[defaults]
command = "{{python}} {STEPS_SCRIPT}"
workdir = "{REPO}"
env = {{ TF_CPP_MIN_LOG_LEVEL = "2", SLOW_TASKS = "worker:0", SLEEP_MS = "20", STEPS = "100000" }}
restart = "never"
grace_seconds = 5
[hosts.local]
address = "localhost"
transport = "local"
[roles.worker]
count = 1
hosts = ["local"]
""")
    run_dir = tmp_path / "run"
    try:
        up = cli("up", str(profile), "--detach", "--run-dir", str(run_dir), "--run-id", run_id, timeout=240)
        assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]

        # a batch every 20 ms (SLOW_TASKS): the one worker does not train flat out through the test
        wait_for(lambda: task_step(run_dir, "worker:0") >= 20, 180, "worker:0 training", interval=0.5)
        result = cli("profile", run_id, "--seconds", "1", timeout=240)
        assert result.returncode == 0, result.stdout + result.stderr
        assert re.search(r"^worker:0: \d+ step\(s\) captured", result.stdout, re.MULTILINE), result.stdout
        port = json.loads((run_dir / "state.json").read_text())["tasks"]["worker:0"]["profiler_port"]
        assert not _reachable(port), "the profiler port answers from this machine's network"
    finally:
        cli("down", run_id, timeout=120)
        kill_run_processes(run_id)


UNPRIVILEGED = """
import os, socket, sys, time
sys.path.insert(0, sys.argv[1])
import netns
netns.make_private()
server = socket.socket()
server.bind(("127.0.0.1", 0))
server.listen(4)
print(os.getpid(), server.getsockname()[1], flush=True)
server.settimeout(60)
conn, _ = server.accept()
conn.sendall(b"inside")
conn.close()
time.sleep(60)
"""

JOINER = """
import socket, sys
sys.path.insert(0, sys.argv[1])
import netns
def reach():
    with socket.create_connection(("127.0.0.1", int(sys.argv[3])), timeout=5) as conn:
        return conn.recv(10).decode()
print(netns.run_in(int(sys.argv[2]), reach), flush=True)
"""


def _python_for_other() -> str:
    """An interpreter uid 65534 can run (the test's own may live under a private home)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", sys.executable):
        done = subprocess.run(["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups",
                               candidate, "-c", "pass"], capture_output=True, timeout=30, cwd="/")
        if done.returncode == 0:
            return candidate
    pytest.fail("no python that uid 65534 can run")


def test_an_unprivileged_user_gets_a_network_of_their_own() -> None:
    require_other_user()
    python = _python_for_other()
    with shared_tmp() as shared:  # pytest's tmp_path is 0700: uid 65534 could not read the module there
        _unprivileged_namespace(python, shared)


def _unprivileged_namespace(python: str, code: Path) -> None:
    shutil.copy(REPO / "launcher" / "agent" / "netns.py", code / "netns.py")
    (code / "netns.py").chmod(0o644)
    as_other = ["setpriv", f"--reuid={OTHER_UID}", f"--regid={OTHER_UID}", "--clear-groups", python, "-c"]
    holder = subprocess.Popen([*as_other, UNPRIVILEGED, str(code)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd="/")
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline().split()
        assert len(line) == 2, (line, holder.stderr.read() if holder.stderr is not None else "")
        pid, port = int(line[0]), int(line[1])
        assert _net(pid) != _net(os.getpid())
        assert os.stat(f"/proc/{pid}").st_uid == OTHER_UID  # a user namespace of its own: no privilege gained
        assert not _reachable(port), "the unprivileged namespace's listener answers from outside"
        joined = subprocess.run([*as_other, JOINER, str(code), str(pid), str(port)], capture_output=True, text=True,
                                timeout=60, cwd="/")
        assert joined.returncode == 0 and joined.stdout.strip() == "inside", joined.stderr
    finally:
        holder.kill()
        holder.wait(timeout=30)
