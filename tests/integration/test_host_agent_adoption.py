"""The host agent killed with SIGKILL: its tasks run on, a new one adopts them, nothing is counted twice.

One job per test, on a local host and on a host behind a private sshd: two tasks print a numbered
line every 50 ms. The test SIGKILLs the host agent while they run; the launcher sees the stream
end, follows again, which starts a new host agent that adopts the live tasks from their
task.json (pid, group, pipe fds). A task that ends while no agent runs is judged by the exit status
its wrapper shell left: with restart = "never" its exit 3 fails the job, named as the root cause.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import (
    REPO,
    kill_run_processes,
    pids_with_run_id,
    read_events,
    start_cli,
    wait_for,
    wait_for_event,
)
from tests.profiles import Host, build_profile, local_host, ssh_table, sshd_host
from tests.sshd import PrivateSshd

pytestmark = [pytest.mark.slow]

# prints "line N" every 50 ms until the file `stop-<task>` exists in the run's scratch dir, then exits
# with the number in it
TASK = ("i=0; while [ ! -e {scratch}/stop-$DISTLAUNCH_TASK ]; do i=$((i+1)); echo line $i; sleep 0.05; done; "
        "exit $(cat {scratch}/stop-$DISTLAUNCH_TASK)")


def profile(tmp: Path, scratch: Path, host: Host, name: str, ssh: dict[str, Any] | None = None) -> Path:
    return build_profile(tmp / "adopt.toml", name=name, strategy="custom", success_policy="all_workers",
                         orphan_grace=60, command=TASK.format(scratch=scratch), workdir=REPO,
                         defaults={"python": sys.executable}, restart="never", grace=2, ssh=ssh, hosts=[host],
                         roles={"worker": 2})


def host_agents(run_id: str) -> list[int]:
    """Host agent processes of the run: by their process name and the run id in their environment."""
    out = []
    for pid in pids_with_run_id(run_id):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "distlaunch-host":
                out.append(pid)
        except OSError:
            continue
    return out


def seqs_exactly_once(events: list[dict[str, Any]]) -> None:
    """Every agent event of each task once, numbered without gaps or repeats."""
    by_task: dict[str, list[int]] = {}
    for e in events:
        if e.get("task") and isinstance(e.get("seq"), int):
            by_task.setdefault(e["task"], []).append(e["seq"])
    assert by_task, "no numbered events"
    for task, seqs in by_task.items():
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"{task}: {seqs[:5]}... not gap-free once"


def run_adoption(tmp_path: Path, host: Host, run_id: str, ssh: dict[str, Any] | None = None) -> None:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    run_dir = tmp_path / "run"
    prof = profile(tmp_path, scratch, host, run_id, ssh)
    log = tmp_path / "up.log"
    up = start_cli("up", str(prof), "--no-tui", "--run-id", run_id, "--run-dir", str(run_dir), log=log)
    try:
        for task in ("worker:0", "worker:1"):
            wait_for_event(run_dir, lambda e, t=task: e["kind"] == "log" and e["task"] == t
                           and e["line"] == "line 5", 60, f"{task} output")
        agents = wait_for(lambda: host_agents(run_id), 10, "the host agent")
        assert len(agents) == 1, f"one host agent per host, found {agents}"
        pids = {e["task"]: e["pid"] for e in read_events(run_dir) if e["kind"] == "state" and e["state"] == "running"}
        os.kill(agents[0], signal.SIGKILL)
        # a new agent comes up (started by the launcher's new follower) and adopts both tasks
        new = wait_for(lambda: [p for p in host_agents(run_id) if p != agents[0]], 30, "a new host agent")
        assert len(new) == 1
        def adopted() -> set[str]:
            return {e["task"] for e in read_events(run_dir)
                    if e["kind"] == "log" and "adopted this task" in e.get("line", "")}

        wait_for(lambda: adopted() == {"worker:0", "worker:1"}, 30, "the adoption line of each task")
        for task, pid in pids.items():
            assert Path(f"/proc/{pid}").exists(), f"{task} (pid {pid}) did not survive its agent"
        # output after the adoption still arrives
        last = max(int(e["line"].split()[1]) for e in read_events(run_dir)
                   if e["kind"] == "log" and e["task"] == "worker:0" and e["line"].startswith("line "))
        wait_for_event(run_dir, lambda e: e["kind"] == "log" and e["task"] == "worker:0"
                       and e["line"] == f"line {last + 10}", 30, "output after the adoption")
        # worker:0 succeeds under the new agent; worker:1 ends while no agent runs, with exit 3
        (scratch / "stop-worker:0").write_text("0")
        wait_for_event(run_dir, lambda e: e["kind"] == "state" and e["task"] == "worker:0"
                       and e["state"] == "succeeded", 30, "worker:0 succeeded")
        agent = host_agents(run_id)[0]
        os.kill(agent, signal.SIGKILL)
        (scratch / "stop-worker:1").write_text("3")
        wait_for(lambda: not Path(f"/proc/{pids['worker:1']}").exists()
                 or Path(f"/proc/{pids['worker:1']}/stat").read_text().split(")")[1].split()[0] == "Z",
                 30, "worker:1 to end")
        assert up.wait(timeout=90) == 1, log.read_text()[-3000:]
    finally:
        kill_run_processes(run_id)
        if up.poll() is None:
            up.kill()
    events = read_events(run_dir)
    failed = [e for e in events if e["kind"] == "state" and e["task"] == "worker:1" and e["state"] == "failed"]
    assert failed and failed[-1]["exit_code"] == 3, [e for e in events if e["kind"] == "state"]
    ends = [e for e in events if e["kind"] == "job"]
    assert ends[-1]["state"] == "Failed" and "worker:1" in ends[-1]["reason"], ends[-1]
    seqs_exactly_once(events)
    assert pids_with_run_id(run_id) == [], "processes of the run left behind"
    state = json.loads((run_dir / "state.json").read_text())
    assert state["outcome"] == "Failed"


def test_a_killed_local_host_agent_is_replaced_and_its_tasks_adopted(tmp_path: Path) -> None:
    run_adoption(tmp_path, local_host("h"), "it-adopt-local")


@pytest.mark.sshd
@pytest.mark.parametrize("client", ["builtin", "openssh"])
def test_a_killed_host_agent_over_ssh_is_replaced_and_its_tasks_adopted(tmp_path: Path, sshd: PrivateSshd,
                                                                        client: str) -> None:
    run_adoption(tmp_path, sshd_host(sshd, "h"), f"it-adopt-{client}", ssh_table(sshd, client=client))
