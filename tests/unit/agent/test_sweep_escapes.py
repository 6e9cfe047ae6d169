"""`sweep --run-dir` finds what a task started that dropped DISTLAUNCH_RUN_ID (`env -i`) and left its
process group (`setpgid`: found by the task's session) or its session too (`setsid`: found by the
task's own cgroup, where the host has cgroup v2 the agent may divide). Real agent, real processes;
processes of other runs and of no run are left alone."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.agent.procs import pid_alive, stat_fields
from tests.integration.jobtools import wait_for


def agent(pyz: Path, *args: str, stdin: bytes = b"", run_id: str = "") -> dict:
    env = dict(os.environ, DISTLAUNCH_RUN_ID=run_id) if run_id else None
    out = subprocess.run([sys.executable, str(pyz), *args], input=stdin, capture_output=True, timeout=60,
                         check=True, env=env)
    return json.loads(out.stdout)


#: a task that starts two escapees and waits: one in a new process group of its session, one in a
#: new session; both with an empty environment (no DISTLAUNCH_RUN_ID)
#: (their output elsewhere: the task's pipes would keep its readers waiting after it ended)
ESCAPING_TASK = (
    "env -i /usr/bin/setsid /bin/sh -c 'echo $$ > setsid.pid; exec /usr/bin/sleep 300' >/dev/null 2>&1 & "
    f"env -i {sys.executable} -c 'import os, time; os.setpgid(0, 0); "
    "open(\"setpgid.pid\", \"w\").write(str(os.getpid())); time.sleep(300)' >/dev/null 2>&1 & wait")


@pytest.fixture
def escaping_run(tmp_path: Path, pyz: Path) -> Iterator[tuple[str, Path, dict[str, int]]]:
    """(run id, host run dir, {"task", "setpgid", "setsid": pid}) of a started escaping task."""
    run_id, run_dir = "sweep-esc-" + uuid.uuid4().hex[:8], tmp_path / "run"
    run_dir.mkdir()
    spec = {"run": run_id, "task": "worker:0", "command": ESCAPING_TASK, "workdir": str(run_dir),
            "grace_seconds": 1, "sample_interval": 5, "autolog": False}
    started = agent(pyz, "start", "--run-dir", str(run_dir), run_id=run_id,
                    stdin=json.dumps({"specs": {"worker-0": spec}}).encode())
    pids = {"task": started["pids"]["worker-0"]}
    try:
        for name in ("setpgid", "setsid"):
            pid_file = run_dir / f"{name}.pid"

            def written(path: Path = pid_file) -> bool:
                return path.exists() and bool(path.read_text().strip())

            wait_for(written, 20, f"the {name} escapee")
            pids[name] = int(pid_file.read_text())
        yield run_id, run_dir, pids
    finally:
        subprocess.run([sys.executable, str(pyz), "stop", "--run-dir", str(run_dir), "--tasks", "worker-0", "--exit"],
                       capture_output=True, timeout=60, check=False)
        for pid in pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        cgroup = task_info(run_dir).get("cgroup") if (run_dir / "tasks" / "worker-0" / "task.json").exists() else None
        if cgroup and Path(cgroup).is_dir():  # a test that did not sweep: its cgroup, once the kills emptied it
            wait_for(lambda: not (Path(cgroup) / "cgroup.procs").read_text().split(), 10, "the cgroup to empty")
            Path(cgroup).rmdir()


def session_of(pid: int) -> int:
    return int(stat_fields(pid)[3])


def group_of(pid: int) -> int:
    return int(stat_fields(pid)[2])


def task_info(run_dir: Path) -> dict:
    info: dict = json.loads((run_dir / "tasks" / "worker-0" / "task.json").read_text())
    return info


def test_the_task_records_its_session_and_the_escapees_are_not_found_by_environment(
        pyz: Path, escaping_run: tuple[str, Path, dict[str, int]]) -> None:
    run_id, run_dir, pids = escaping_run
    info = task_info(run_dir)
    assert info["sid"] == pids["task"] == session_of(pids["task"])
    assert session_of(pids["setpgid"]) == pids["task"] and group_of(pids["setpgid"]) == pids["setpgid"]
    assert session_of(pids["setsid"]) == pids["setsid"]
    by_env = {p["pid"] for p in agent(pyz, "sweep", "--run-id", run_id)["left"]}
    assert pids["task"] in by_env and not by_env & {pids["setpgid"], pids["setsid"]}


def test_sweep_kills_a_process_that_left_the_group_found_by_the_session(
        pyz: Path, escaping_run: tuple[str, Path, dict[str, int]]) -> None:
    run_id, run_dir, pids = escaping_run
    bystander = subprocess.Popen(["/usr/bin/sleep", "300"], start_new_session=True)
    try:
        found = {p["pid"] for p in agent(pyz, "sweep", "--run-id", run_id, "--run-dir", str(run_dir))["left"]}
        assert pids["setpgid"] in found and bystander.pid not in found
        # as teardown does: the task's group is stopped first, then the sweep kills what is left
        subprocess.run([sys.executable, str(pyz), "stop", "--run-dir", str(run_dir), "--tasks", "worker-0"],
                       capture_output=True, timeout=60, check=True)
        assert pid_alive(pids["setpgid"])  # the group kill did not reach it
        result = agent(pyz, "sweep", "--run-id", run_id, "--run-dir", str(run_dir), "--kill", "--grace", "1")
        assert not pid_alive(pids["setpgid"])
        assert bystander.poll() is None
        assert result["left"] == []
    finally:
        bystander.kill()
        bystander.wait(10)


def test_sweep_kills_a_process_that_left_the_session_found_by_the_tasks_cgroup(
        pyz: Path, escaping_run: tuple[str, Path, dict[str, int]]) -> None:
    run_id, run_dir, pids = escaping_run
    cgroup = task_info(run_dir)["cgroup"]
    if cgroup is None:
        pytest.skip("no cgroup v2 that this user may divide here: the task has no cgroup of its own")
    procs = Path(cgroup) / "cgroup.procs"
    members = {int(p) for p in procs.read_text().split()}
    assert {pids["task"], pids["setsid"], pids["setpgid"]} <= members
    other_run = subprocess.Popen(["/usr/bin/sleep", "300"], env=dict(os.environ, DISTLAUNCH_RUN_ID="another-run"))
    try:
        procs.write_text(str(other_run.pid))  # a process of another run in the same cgroup: never touched
        subprocess.run([sys.executable, str(pyz), "stop", "--run-dir", str(run_dir), "--tasks", "worker-0"],
                       capture_output=True, timeout=60, check=True)
        assert pid_alive(pids["setsid"])
        result = agent(pyz, "sweep", "--run-id", run_id, "--run-dir", str(run_dir), "--kill", "--grace", "1")
        assert not pid_alive(pids["setsid"]) and result["left"] == []
        assert other_run.poll() is None
    finally:
        other_run.kill()
        other_run.wait(10)
    wait_for(lambda: not Path(cgroup).exists() or not procs.read_text().split(), 10, "the cgroup to empty")
    subprocess.run([sys.executable, str(pyz), "sweep", "--run-id", run_id, "--run-dir", str(run_dir), "--kill"],
                   capture_output=True, timeout=60, check=True)
    assert not Path(cgroup).exists()  # removed once empty
