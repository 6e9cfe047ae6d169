"""A frozen MultiWorkerMirroredStrategy peer is named: TensorFlow's multi-worker custom-loop tutorial
shape (tests/data/mwms_tutorial_loop.py, unmodified, autolog on), two workers, worker:1 stopped with
SIGSTOP mid-training. worker:0 fails when worker:1's heartbeats stop; its cause names worker:1, says
what worker:1's agent sampled of its process (stopped, state T), and points at the script's line,
not autolog's wrapper."""

from __future__ import annotations

import contextlib
import json
import os
import signal
from pathlib import Path

import pytest

from tests.integration.jobtools import (
    REPO,
    cli,
    kill_run_processes,
    local_ps_profile,
    pids_with_run_id,
    read_events,
    start_cli,
    wait_for_event,
)
from tests.profiles import build_profile

pytestmark = pytest.mark.slow

SCRIPT = "tests/data/mwms_tutorial_loop.py"


def task_python(run_id: str, group: int, script: str) -> int:
    """The task's Python itself (not the wrapper or the role's shell, whose command lines name it too)."""
    for pid in pids_with_run_id(run_id):
        with contextlib.suppress(OSError):
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if os.getpgid(pid) == group and "python" in Path(argv[0].decode()).name and \
                    any(arg.endswith(script.encode()) for arg in argv[1:]):
                return pid
    raise AssertionError(f"no Python of {script} in process group {group}")


@pytest.mark.timeout(300)
def test_a_frozen_mwms_worker_is_named_in_its_peers_cause(tmp_path: Path) -> None:
    # no stall capture (stall_seconds stays at its default, 300 s): the state comes from the samples
    profile = build_profile(tmp_path / "p.toml", name="it-frozen-peer", strategy="multi_worker_mirrored",
                            command=f"{{python}} {SCRIPT}", workdir=REPO, env={"TF_CPP_MIN_LOG_LEVEL": "2"},
                            restart="never", grace=2, roles={"worker": 2})
    run_dir, run_id = tmp_path / "run", "it-frozen-peer"
    proc = start_cli("up", str(profile), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id,
                     log=tmp_path / "up.log")
    try:
        wait_for_event(run_dir, lambda e: e["kind"] == "log" and e["task"] == "worker:1"
                       and e.get("line", "").startswith("Epoch: 1,"), 180, "worker:1 training")
        group = next(e for e in read_events(run_dir)
                     if e["kind"] == "state" and e["task"] == "worker:1" and e.get("pid"))["pid"]
        os.kill(task_python(run_id, group, SCRIPT), signal.SIGSTOP)
        assert proc.wait(timeout=120) == 1
    finally:
        kill_run_processes(run_id)  # SIGKILL ends a stopped process too
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    events = read_events(run_dir)
    failed = next(e for e in events if e["kind"] == "state" and e["task"] == "worker:0" and e["state"] == "failed")
    assert not [e for e in events if e["kind"] == "stacks"]  # the evidence is the sampler's
    assert failed["culprit"] == "worker:1", failed
    assert failed["cause"] == ("lost contact with worker:1: it stopped sending heartbeats "
                               "(worker:1 was stopped, state T) (UnavailableError at mwms_tutorial_loop.py:55)")
    log = (tmp_path / "up.log").read_text()
    assert f"root cause: worker:1 (worker:0 failed first: exit code 1: {failed['cause']})" in log, log[-3000:]


@pytest.mark.timeout(300)
def test_a_frozen_parameter_server_is_named_as_the_suspect_of_the_stall(tmp_path: Path) -> None:
    """ParameterServerStrategy prints nothing when a ps freezes: its workers and chief just wait.
    What names it is the stall: the chief's step stops, the stacks capture finds ps:0 stopped,
    and the stall line says so."""
    path = local_ps_profile(tmp_path, steps=1_000_000, name="it-frozen-ps", ports=True, grace=2,
                            defaults={"stall_seconds": 4})
    run_dir, run_id = tmp_path / "run", "it-frozen-ps"
    proc = start_cli("up", str(path), "--no-tui", "--run-dir", str(run_dir), "--run-id", run_id,
                     log=tmp_path / "up.log")
    try:
        wait_for_event(run_dir, lambda e: e["kind"] == "metric" and e["task"] == "chief:0"
                       and (e.get("step") or 0) >= 40, 180, "the chief training")
        group = next(e for e in read_events(run_dir)
                     if e["kind"] == "state" and e["task"] == "ps:0" and e.get("pid"))["pid"]
        os.kill(task_python(run_id, group, "examples/ps_mnist.py"), signal.SIGSTOP)
        stalled = wait_for_event(run_dir, lambda e: e["kind"] == "condition" and e.get("condition") == "stalled"
                                 and e.get("active") and "suspect ps:0: it is stopped" in str(e.get("reason")),
                                 60, "a stall line naming the frozen ps")
        assert stalled["task"] in ("chief:0", "worker:0"), stalled
        # the step-time cells, from the last windows before the freeze, blame the frozen ps, never
        # a healthy peer, once the stall is raised
        status = json.loads(cli("status", str(run_dir), "--json", timeout=60).stdout)
        verdicts = {t: (v.get("step_time") or {}).get("verdict") for t, v in status["tasks"].items()}
        blamed = {t: v for t, v in verdicts.items() if v and v.startswith("waiting for ")}
        assert all(v == "waiting for ps:0" for v in blamed.values()), verdicts
        assert verdicts.get("ps:0") in (None, "stalled"), verdicts
    finally:
        kill_run_processes(run_id)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
