"""Jobs over several SSH hosts, each in its own network namespace, and partitions between them.

The launcher runs here (root namespace); hosts ``a``, ``b``, ``c`` are namespaces with their own
address and sshd (tests/netns.py). Cutting a host's link drops its packets silently, which is
what a real partition looks like to TCP: nothing errors out, the stream just goes quiet.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import (
    REPO,
    finish_up,
    kill_run_processes,
    launch_up,
    pids_with_run_id,
    read_events,
    start_cli,
    wait_for,
    wait_for_event,
)
from tests.netns import NetnsLab, require_netns
from tests.profiles import build_profile, netns_hosts, ps_mnist_command
from tests.webhook import Webhook

pytestmark = [pytest.mark.slow, pytest.mark.netns, pytest.mark.sshd]
#: the partition tests run over both SSH transports: the built-in client and the system ssh client
TRANSPORTS = pytest.mark.parametrize("transport", ["ssh", "openssh"])

#: a task that prints a numbered line every 0.1 s, so a lost event would leave a gap
TICKER = "{python} -u -c 'import time\nfor i in range(%d):\n    print(\"tick\", i, flush=True); time.sleep(0.1)'"


def ps_profile(tmp: Path, lab: NetnsLab, steps: int) -> Path:
    return build_profile(tmp / "ps.toml", name="it-netns-ps", orphan_grace=60, command=ps_mnist_command(steps),
                         defaults={"python": sys.executable}, workdir=REPO, env={"TF_CPP_MIN_LOG_LEVEL": "2"}, grace=5,
                         hosts=netns_hosts(lab, "ssh"),
                         roles={"ps": {"hosts": ["a"]}, "worker": {"hosts": ["b"]}, "chief": {"hosts": ["c"]}})


def ticker_profile(tmp: Path, lab: NetnsLab, *, ticks: int, orphan_grace: int, transport: str = "ssh",
                   notify: dict[str, Any] | None = None) -> Path:
    """custom strategy: worker:0 on b ticks and decides success; ps:0 on a just waits."""
    return build_profile(tmp / "ticker.toml", name="it-netns-ticker", strategy="custom", orphan_grace=orphan_grace,
                         defaults={"python": sys.executable}, workdir=REPO, grace=2, restart="on-failure",
                         max_restarts=3, hosts=netns_hosts(lab, transport),
                         roles={"ps": {"hosts": ["a"], "command": "sleep 600"},
                                "worker": {"hosts": ["b"], "command": TICKER % ticks}},
                         metrics={"step": r"tick (\d+)"}, notify=notify)


@pytest.fixture
def lab() -> Iterator[NetnsLab]:
    """Hosts a, b, c: three namespaces with an sshd each, removed after the test."""
    require_netns()
    with NetnsLab(3) as made:
        yield made


@pytest.fixture
def run_id(request: pytest.FixtureRequest, lab: NetnsLab) -> Iterator[str]:
    """A run id of this test; its processes and host run dirs are removed afterwards."""
    rid = f"it-netns-{request.node.name[5:25].replace('_', '-')}-{lab.tag}"
    yield rid
    kill_run_processes(rid)
    for name in lab.hosts:
        shutil.rmtree(lab.run_dir(name, rid), ignore_errors=True)


def task_events(events: list[dict[str, Any]], task: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("task") == task]


def host_events(events: list[dict[str, Any]], host: str) -> list[dict[str, Any]]:
    return [e for e in events if e["kind"] == "host" and e["host"] == host]


def agent_events(lab: NetnsLab, host: str, run_id: str, slug: str) -> list[dict[str, Any]]:
    path = lab.run_dir(host, run_id) / "tasks" / slug / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_ps_job_across_three_namespaces(tmp_path: Path, lab: NetnsLab, run_id: str) -> None:
    proc, run_dir = launch_up(tmp_path, ps_profile(tmp_path, lab, steps=60), run_id)
    placed: dict[str, str | None] = {}

    def record_placement() -> bool:
        for e in read_events(run_dir):
            if e["kind"] == "state" and e["state"] == "running" and e["task"] not in placed:
                placed[e["task"]] = lab.host_of_pid(int(e["pid"]))
        return len(placed) == 3

    wait_for(record_placement, 180, "all three tasks running")
    code = finish_up(proc, tmp_path, 300)
    assert code == 0, (tmp_path / "up.log").read_text()[-3000:]
    events = read_events(run_dir)
    # each task ran in its own host's namespace, and TF's gRPC spanned the namespaces
    assert placed == {"ps:0": "a", "worker:0": "b", "chief:0": "c"}
    cluster = json.loads(json.loads((lab.run_dir("b", run_id) / "tasks" / "worker-0" / "spec.json")
                                    .read_text())["env"]["TF_CONFIG"])["cluster"]
    assert cluster["ps"][0].startswith(lab.hosts["a"].address + ":")
    assert cluster["chief"][0].startswith(lab.hosts["c"].address + ":")
    steps = [e["step"] for e in events if e["kind"] == "metric" and e.get("step") is not None]
    assert steps and steps[-1] >= 60
    final = {e["task"]: e["state"] for e in events if e["kind"] == "state"}
    assert final == {"chief:0": "succeeded", "ps:0": "stopped", "worker:0": "stopped"}
    assert not [e for e in events if e["kind"] == "host"]
    assert pids_with_run_id(run_id) == []


@TRANSPORTS
def test_short_partition_loses_no_event_and_restarts_nothing(tmp_path: Path, lab: NetnsLab,
                                                             run_id: str, transport: str, hook: Webhook) -> None:
    notify = {"webhook": hook.url, "on": ["host_unreachable", "host_lost"]}
    proc, run_dir = launch_up(tmp_path, ticker_profile(tmp_path, lab, ticks=600, orphan_grace=60,
                                                    transport=transport, notify=notify), run_id)
    try:
        wait_for_event(run_dir, lambda e: e["kind"] == "metric" and e["task"] == "worker:0"
                       and (e.get("step") or 0) >= 20, 90, "worker:0 ticking")
        lab.cut("b")
        cut_at = time.time()
        lost = wait_for_event(run_dir, lambda e: e["kind"] == "host" and e["state"] == "unreachable", 30,
                              "host b reported unreachable")
        remaining = 10 - (time.time() - cut_at)
        if remaining > 0:
            time.sleep(remaining)  # the partition itself lasts 10 s; nothing to await here
        lab.restore("b")
        restored_at = time.time()
        up = wait_for_event(run_dir, lambda e: e["kind"] == "host" and e["state"] == "up", 60,
                            "host b back up")
        code = finish_up(proc, tmp_path, 180)
    finally:
        lab.restore("b")
        if proc.poll() is None:
            proc.kill()
    print(f"\npartition of b: detected after {lost['ts'] - cut_at:.1f}s, "
          f"reconnected {up['ts'] - restored_at:.1f}s after the link came back")
    assert code == 0, (tmp_path / "up.log").read_text()[-3000:]
    events = read_events(run_dir)
    assert [(e["state"]) for e in host_events(events, "b")] == ["unreachable", "up"]
    # told once as it went quiet, once as it answered again, and never lost
    assert hook.alerts() == [("host_unreachable", "1", "b"), ("host_unreachable", "0", "b")], hook.posts
    assert "host b does not answer" in hook.posts[0]["figure"], hook.posts[0]
    assert lost["host"] == "b" and "heartbeat" in lost["reason"]
    assert lost["ts"] - cut_at < 10  # noticed during the cut, not when TCP gives up
    assert not [e for e in events if e["kind"] == "state" and e["state"] == "restarting"]
    # every event the agent wrote reached the launcher once, in order (pending is the launcher's own)
    seen = [e for e in task_events(events, "worker:0") if not (e["kind"] == "state" and e["state"] == "pending")]
    assert seen == agent_events(lab, "b", run_id, "worker-0")
    ticks = [e["step"] for e in seen if e["kind"] == "metric"]
    assert ticks == list(range(600))
    final = {e["task"]: e["state"] for e in events if e["kind"] == "state"}
    assert final == {"worker:0": "succeeded", "ps:0": "stopped"}
    assert pids_with_run_id(run_id) == []


@TRANSPORTS
def test_partition_longer_than_grace_stops_then_restarts_the_task(tmp_path: Path, lab: NetnsLab,
                                                                   run_id: str, transport: str) -> None:
    proc, run_dir = launch_up(tmp_path, ticker_profile(tmp_path, lab, ticks=300, orphan_grace=5,
                                                    transport=transport), run_id)
    agent_file = lab.run_dir("b", run_id) / "tasks" / "worker-0" / "events.jsonl"
    try:
        wait_for_event(run_dir, lambda e: e["kind"] == "metric" and e["task"] == "worker:0"
                       and (e.get("step") or 0) >= 20, 90, "worker:0 ticking")
        lab.cut("b")
        cut_at = time.time()

        def stopped_by_agent() -> dict[str, Any] | None:
            lines = agent_file.read_text().splitlines()
            return next((e for e in map(json.loads, lines)
                         if e["kind"] == "state" and e["state"] == "stopped"), None)

        stop = wait_for(stopped_by_agent, 11, "the agent on b to stop its task (launcher lost)")
        remaining = 12 - (time.time() - cut_at)
        if remaining > 0:
            time.sleep(remaining)  # the partition lasts 12 s; nothing to await here
        lab.restore("b")
        restored_at = time.time()
        code = finish_up(proc, tmp_path, 180)
    finally:
        lab.restore("b")
        if proc.poll() is None:
            proc.kill()
    events = read_events(run_dir)
    lost, up = host_events(events, "b")[:2]
    rerun = next(e for e in task_events(events, "worker:0") if e["kind"] == "state"
                 and e["state"] == "running" and e.get("restarts") == 1)
    print(f"\npartition of b (12 s, grace 5 s): detected after {lost['ts'] - cut_at:.1f}s, agent stopped "
          f"its task after {stop['ts'] - cut_at:.1f}s, reconnected {up['ts'] - restored_at:.1f}s and "
          f"task running again {rerun['ts'] - restored_at:.1f}s after the link came back")
    assert "launcher lost" in stop["reason"]
    assert code == 0, (tmp_path / "up.log").read_text()[-3000:]
    states = [(e["state"], e.get("restarts")) for e in task_events(events, "worker:0") if e["kind"] == "state"]
    assert ("stopped", 0) in states and ("restarting", 0) in states
    assert states[-1] == ("succeeded", 1)
    ticks = [e["step"] for e in events if e["kind"] == "metric" and e["task"] == "worker:0"]
    assert ticks[-300:] == list(range(300))  # the second incarnation ran to the end
    assert [e["state"] for e in host_events(events, "b")] == ["unreachable", "up"]
    assert pids_with_run_id(run_id) == []


def test_attach_while_a_host_is_cut_off_follows_the_others_and_catches_up(tmp_path: Path, lab: NetnsLab,
                                                                          run_id: str) -> None:
    """The supervisor is SIGKILLed and its host b partitioned: `attach` (whose new supervisor adopts
    the run) must not wait for b (the orphan grace would run out on every host), and b's events
    arrive once the link is back."""
    proc, run_dir = launch_up(tmp_path, ticker_profile(tmp_path, lab, ticks=400, orphan_grace=60), run_id)
    attach = None
    try:
        wait_for_event(run_dir, lambda e: e["kind"] == "metric" and e["task"] == "worker:0"
                       and (e.get("step") or 0) >= 20, 90, "worker:0 ticking")
        gone = json.loads((run_dir / "state.json").read_text())["supervisor_pid"]
        os.kill(gone, signal.SIGKILL)
        proc.wait(timeout=10)  # its client ends with it
        lab.cut("b")
        cut_at = time.time()
        attach = start_cli("attach", str(run_dir), "--no-tui", log=tmp_path / "attach.log")
        wait_for(lambda: json.loads((run_dir / "state.json").read_text()).get("supervisor_pid") != gone
                 or attach.poll() is not None, 30, "attach to take the run over")
        assert attach.poll() is None, (tmp_path / "attach.log").read_text()[-2000:]
        lost = wait_for_event(run_dir, lambda e: e["kind"] == "host" and e["host"] == "b"
                              and e["state"] == "unreachable" and e["ts"] > cut_at, 30, "b told unreachable")
        remaining = 12 - (time.time() - cut_at)
        if remaining > 0:
            time.sleep(remaining)  # the partition lasts 12 s; nothing to await here
        lab.restore("b")
        code = finish_up(attach, tmp_path, 180)
    finally:
        lab.restore("b")
        for p in (proc, attach):
            if p is not None and p.poll() is None:
                p.kill()
    assert "attached without it" in (tmp_path / "attach.log").read_text()
    assert "reconnecting" in lost["reason"]
    assert code == 0, (tmp_path / "attach.log").read_text()[-3000:]
    events = read_events(run_dir)
    assert [e["state"] for e in host_events(events, "b") if e["ts"] > cut_at][-1] == "up"
    seen = [e for e in task_events(events, "worker:0") if not (e["kind"] == "state" and e["state"] == "pending")]
    assert seen == agent_events(lab, "b", run_id, "worker-0")  # every event once, in order
    assert [e["step"] for e in seen if e["kind"] == "metric"] == list(range(400))
    assert not [e for e in events if e["kind"] == "state" and e["state"] == "restarting"]
    assert pids_with_run_id(run_id) == []
