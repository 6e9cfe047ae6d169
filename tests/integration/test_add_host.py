"""Hosts that join a running job (issue 55 §3): `distlaunch add-host RUN HOST` and a profile's
``host_discovery`` command, on network-namespace hosts with real sshd. A host joins as a spare after
its preflight, is in status and state.json (so `down` reaches it), and a `resize` grows onto it;
mistakes and a host that fails its preflight are one line, exit 2, and leave nothing there."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import (
    REPO,
    cli,
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
from tests.profiles import build_profile, netns_hosts

pytestmark = [pytest.mark.slow]

TICKER = "{python} -u -c 'import time\nfor i in range(%d):\n    print(\"tick\", i, flush=True); time.sleep(0.1)'"


@pytest.fixture
def lab() -> Iterator[NetnsLab]:
    require_netns()
    with NetnsLab(3) as made:
        yield made


@pytest.fixture
def run_id(request: pytest.FixtureRequest, lab: NetnsLab) -> Iterator[str]:
    rid = f"it-add-{request.node.name[5:20].replace('_', '-')}-{lab.tag}"
    yield rid
    kill_run_processes(rid)


def one_worker_on_a(tmp: Path, lab: NetnsLab, name: str, ticks: int, top: str = "") -> Path:
    """custom strategy, no TensorFlow: worker:0 ticks on a; b and c are in [hosts], used by nothing."""
    return build_profile(tmp / f"{name}.toml", name=name, strategy="custom", orphan_grace=10, top=top,
                         defaults={"python": sys.executable}, workdir=REPO, grace=2,
                         hosts=netns_hosts(lab, "ssh"),
                         roles={"worker": {"count": 1, "hosts": ["a"], "max_count": 3, "command": TICKER % ticks}},
                         metrics={"step": r"tick (\d+)"})


def ran_on(events: list[dict[str, Any]], task: str) -> list[str]:
    return [e["host"] for e in events if e["kind"] == "state" and e["task"] == task and e["state"] == "running"]


def status(run_dir: Path) -> dict[str, Any]:
    done = cli("status", str(run_dir), "--json")
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


@pytest.mark.timeout(300)
def test_add_host_and_discovery_bring_spares_a_resize_grows_onto(tmp_path: Path, lab: NetnsLab, run_id: str) -> None:
    listed = tmp_path / "hosts.txt"
    listed.write_text("# none yet\n")
    profile = one_worker_on_a(tmp_path, lab, "it-add", ticks=900,
                              top=f'host_discovery = "cat {listed}"\nhost_discovery_seconds = 1\n')
    proc, run_dir = launch_up(tmp_path, profile, run_id)
    wait_for(lambda: ran_on(read_events(run_dir), "worker:0"), 120, "worker:0 running on a")
    state = json.loads((run_dir / "state.json").read_text())
    assert set(state["hosts"]) == {"a"}  # b and c: never connected

    added = cli("add-host", run_id, "c", timeout=300)
    assert added.returncode == 0, added.stderr
    spare = wait_for_event(run_dir, lambda e: e["kind"] == "host" and e.get("host") == "c", 10, "host c's event")
    assert spare["state"] == "spare" and "add-host" in spare["reason"], spare
    recorded = json.loads((run_dir / "state.json").read_text())
    assert "c" in recorded["hosts"] and recorded["host_states"]["c"]["state"] == "spare", recorded["host_states"]
    again = cli("add-host", run_id, "c", timeout=60)
    assert again.returncode == 2 and again.stderr.count("\n") == 1, again.stderr
    assert "already a host of the job" in again.stderr
    bad = cli("add-host", run_id, "no such host!", timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "is no host" in bad.stderr, bad.stderr

    listed.write_text("b\n")  # the discovery command's next run finds b
    found = wait_for_event(run_dir, lambda e: e["kind"] == "host" and e.get("host") == "b", 120, "b discovered")
    assert found["state"] == "spare" and "host_discovery" in found["reason"], found

    grown = cli("resize", run_id, "worker=3")
    assert grown.returncode == 0, grown.stderr
    wait_for(lambda: ran_on(read_events(run_dir), "worker:1") and ran_on(read_events(run_dir), "worker:2"), 120,
             "worker:1 and worker:2 running")
    events = read_events(run_dir)
    assert {ran_on(events, "worker:1")[0], ran_on(events, "worker:2")[0]} == {"b", "c"}
    assert status(run_dir)["roles"]["worker"]["running"] == 3
    text = cli("status", str(run_dir)).stdout
    assert "resized " in text and "worker 1 -> 3: host " in text, text  # the size's history, one line each
    # a supervisor that dies is taken over by `attach`, added hosts and all
    os.kill(json.loads((run_dir / "state.json").read_text())["supervisor_pid"], signal.SIGKILL)
    assert finish_up(proc, tmp_path, 60) != 0
    attach = start_cli("attach", run_id, "--no-tui", log=tmp_path / "attach.log")
    try:
        wait_for(lambda: "takes it over" in (tmp_path / "attach.log").read_text(), 60, "the take-over")
        wait_for(lambda: (s := status(run_dir))["supervision"] in ("live", "supervised")
                 and s["roles"]["worker"]["running"] == 3, 120, "the new supervisor with 3 workers", interval=0.5)
        events = read_events(run_dir)  # the take-over restarts nothing: the grow's start is not done twice
        assert len(ran_on(events, "worker:1")) == len(ran_on(events, "worker:2")) == 1, ran_on(events, "worker:1")
        assert [(r["before"], r["after"]) for r in status(run_dir)["resizes"]] == [(1, 3)]  # kept by the take-over
        hosts = status(run_dir)["hosts"]
        assert {h: hosts[h]["state"] for h in ("b", "c")} == {"b": "up", "c": "up"}, hosts
        down = cli("down", run_id, timeout=120)
        assert attach.wait(timeout=60) == 143
    finally:
        if attach.poll() is None:
            attach.kill()
            attach.wait(timeout=30)
    assert down.returncode == 0, down.stderr
    assert "stopped on 3 host(s)" in down.stdout, down.stdout  # the added hosts too
    wait_for(lambda: pids_with_run_id(run_id) == [], 30, "no process of the run on any host")
    assert not any(lab.run_dir(name, run_id).exists() for name in ("a", "b", "c"))


@pytest.mark.timeout(240)
def test_a_host_that_fails_its_preflight_is_not_added(tmp_path: Path, lab: NetnsLab, run_id: str) -> None:
    """An unreachable host (its link cut): one line, exit 2, the job goes on untouched and its
    hosts stay as they were."""
    profile = one_worker_on_a(tmp_path, lab, "it-add-bad", ticks=600)
    proc, run_dir = launch_up(tmp_path, profile, run_id)
    try:
        wait_for(lambda: ran_on(read_events(run_dir), "worker:0"), 120, "worker:0 running on a")
        lab.cut("c")
        refused = cli("add-host", run_id, "c", timeout=300)
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert "host c is not added" in refused.stderr, refused.stderr
        assert set(json.loads((run_dir / "state.json").read_text())["hosts"]) == {"a"}
        assert status(run_dir)["job"]["state"] == "Running"
    finally:
        cli("down", run_id, timeout=120)
        finish_up(proc, tmp_path, 60)


@pytest.mark.timeout(420)
def test_a_discovered_host_takes_a_third_parameter_server_worker(tmp_path: Path, lab: NetnsLab, run_id: str) -> None:
    """Real TensorFlow: a ParameterServerStrategy job (ps and chief on a, a worker on b) whose
    discovery command then prints c; `resize worker=2` places worker:1 on c (a planned restart of the
    cluster from the chief's checkpoint: another address than any the coordinator knows), and the
    job succeeds with both workers, nothing counted as a failure or a restart."""
    listed = tmp_path / "hosts.txt"
    listed.write_text("")
    ckpt = tmp_path / "ckpt"
    profile = build_profile(tmp_path / "ps.toml", name="it-add-ps", strategy="parameter_server", orphan_grace=10,
                            top=f'host_discovery = "cat {listed}"\nhost_discovery_seconds = 1\ngrow = "now"\n',
                            command=f"{{python}} examples/ps_mnist.py --steps 2500 --log-every 20 "
                                    f"--checkpoint-dir {ckpt} --checkpoint-every 100",
                            defaults={"python": sys.executable}, workdir=REPO, env={"TF_CPP_MIN_LOG_LEVEL": "2"},
                            grace=5, hosts=netns_hosts(lab, "ssh"),
                            roles={"ps": {"hosts": ["a"]}, "chief": {"hosts": ["a"]},
                                   "worker": {"count": 1, "hosts": ["b"], "max_count": 2}})
    proc, run_dir = launch_up(tmp_path, profile, run_id)
    wait_for(lambda: max((e["step"] for e in read_events(run_dir) if e["kind"] == "metric"
                          and e["task"] == "chief:0" and e.get("step") is not None), default=-1) >= 200,
             240, "the chief past step 200")
    listed.write_text("c\n")
    wait_for_event(run_dir, lambda e: e["kind"] == "host" and e.get("host") == "c" and e["state"] == "spare", 120,
                   "c discovered")
    grown = cli("resize", run_id, "worker=2")
    assert grown.returncode == 0, grown.stderr
    running = wait_for_event(run_dir, lambda e: e["kind"] == "state" and e["task"] == "worker:1"
                             and e["state"] == "running", 180, "worker:1 running")
    assert running["host"] == "c"
    code = finish_up(proc, tmp_path, 360)
    log = (tmp_path / "up.log").read_text()
    assert code == 0, log[-4000:]
    assert "worker 1 -> 2" in log and "resuming from step 0" not in log, log[-3000:]
    state = json.loads((run_dir / "state.json").read_text())
    assert all(t["restarts"] == 0 for t in state["tasks"].values()) and state["job_restarts"] == 0, state["tasks"]
    assert state["roles"]["worker"]["running"] == 2
    worker_steps = [e for e in read_events(run_dir) if e["kind"] == "metric" and e["task"] == "worker:1"]
    assert worker_steps or any(e["kind"] == "log" and e["task"] == "worker:1" for e in read_events(run_dir))
