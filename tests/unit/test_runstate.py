"""state.json as one record: what the supervisor writes reads back to the same bytes, old files
still read, and a field of the wrong type is named, never taken."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from launcher import runstate
from launcher.errors import UserError
from launcher.rundir import RunDir
from launcher.runstate import RunState, SlurmJobRecord, StateFieldError, load_run_state

#: a state.json as a supervisor writes it mid-run (after a move)
WRITTEN = {
    "run_id": "r1", "profile": "/p/job.toml", "overrides": {"set": ["roles.worker.count=2"], "args": ["--lr"]},
    "name": "job", "strategy": "parameter_server", "job_state": "Running", "job_reason": "", "job_restarts": 1,
    "outcome": None, "supervisor_pid": 4242, "launcher_pid": 4242, "clients": 1, "updated": 1700000000.5,
    "hosts": {"a": {"config": {"name": "a", "address": "10.0.0.1"}, "base_dir": "/r/a", "python": "python3",
                    "outputs_dir": "/o"}},
    "tasks": {"worker:0": {"host": "a", "slug": "worker-0", "address": "10.0.0.1", "port": 2222, "pid": 77,
                           "state": "running", "restarts": 1, "incarnation": 2, "python": "python3",
                           "profiler_port": None}},
    "offsets": {"a": {"worker-0": 1234}},
    "pending_restarts": [{"tasks": ["worker:0"], "due": 1700000001.0, "counted": False}],
    "lost_events": {"worker:0": 2},
    "host_states": {"a": {"state": "up", "reason": "replaces b", "since": 1700000000.0},
                    "b": {"state": "unreachable", "reason": "eof", "since": 1700000000.0, "last_contact_s": 3.5}},
    "host_losses": 1, "spares": [], "roles": {"worker": {"running": 1, "planned": 2, "min": 1}},
    "moves": [{"task": "worker:0", "from": "b", "to": "a", "why": "lost", "ts": 1700000000.0}],
    "left_behind": {"b": ["worker-0"]}, "moved_from": {"worker:0": "b"}, "last_contact": {"b": 123.25},
    "resize_targets": {"worker": 3},
    "resizes": [{"role": "worker", "before": 1, "after": 2, "why": "host c added by `distlaunch add-host`",
                 "ts": 1700000001.0}],
    "checkpoints": {"worker:0": [{"task": "worker:0", "host": "a", "directory": "/o/ckpt", "files": ["checkpoint"],
                                  "step": 20, "epoch": None, "bytes": 9, "api": "checkpoint_manager", "ts": 1.5,
                                  "copy": "/run/checkpoints/worker-0/20", "copy_seconds": 0.25}]},
    "boot_id": "boot",
    "launch": {"process_start": "proc", "wall_start": 1699999990.0, "imports": 0.11, "forked": 0.13,
               "hosts": {"a": {"connected": 0.2, "agent": 0.25, "preflight": 0.3, "start_sent": 0.31,
                               "spawned": 0.35, "first_running": 0.34}},
               "agent_from": {"a": "cached"}},
}


def test_what_the_supervisor_writes_reads_back_to_the_same_bytes(tmp_path: Path) -> None:
    state = RunState.from_json(WRITTEN)
    assert json.dumps(state.to_json(), sort_keys=True) == json.dumps(WRITTEN, sort_keys=True)
    assert (state.pending_restarts[0].counted, state.host_states["b"].last_contact_s) == (False, 3.5)


def test_a_file_from_before_the_supervisor_process_names_its_pid_launcher_pid() -> None:
    old = {"run_id": "r1", "launcher_pid": 99, "tasks": {"ps:0": {"host": "a", "port": 2222}}}
    state = RunState.from_json(old)
    assert (state.supervisor_pid, state.tasks["ps:0"].port, state.tasks["ps:0"].incarnation) == (99, 2222, None)
    assert (state.spares, state.hosts, state.job_reason) == (None, {}, "")  # missing keys: their defaults


@pytest.mark.parametrize(("patch", "field"), [
    ({"moved_from": ["worker:0"]}, "moved_from"),
    ({"resize_targets": {"worker": "three"}}, "resize_targets.worker"),
    ({"resizes": [{"role": "worker", "before": "1"}]}, "resizes[0].before"),
    ({"host_losses": 1.5}, "host_losses"),
    ({"host_states": {"a": {"since": "now"}}}, "host_states.a.since"),
    ({"left_behind": {"b": [1]}}, "left_behind.b[0]"),
    ({"moves": [{"task": "worker:0", "ts": "x"}]}, "moves[0].ts"),
    ({"last_contact": {"b": True}}, "last_contact.b"),
    ({"roles": {"worker": {"running": "1"}}}, "roles.worker.running"),
    ({"checkpoints": {"worker:0": [{"task": "worker:0", "host": "a", "directory": 3}]}},
     "checkpoints.worker:0[0].directory"),
    ({"tasks": {"worker:0": {"port": "2222"}}}, "tasks.worker:0.port"),
    ({"pending_restarts": [{"tasks": "worker:0"}]}, "pending_restarts[0].tasks"),
])
def test_a_field_of_the_wrong_type_is_named(patch: dict[str, object], field: str) -> None:
    with pytest.raises(StateFieldError) as raised:
        RunState.from_json({**WRITTEN, **patch})
    assert raised.value.where == field


def test_the_reader_says_which_file_and_field_in_one_line(tmp_path: Path) -> None:
    rd = RunDir(tmp_path, "r1")
    rd.write_state({**WRITTEN, "moved_from": "b"})
    with pytest.raises(UserError) as raised:
        load_run_state(tmp_path)
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / 'state.json'}: unreadable run state (field moved_from is a string, "
                              "not an object)") and "\n" not in message


def test_a_submitted_runs_slurm_job_reads_back_and_a_wrong_type_is_named() -> None:
    state = RunState(run_id="r2", slurm=SlurmJobRecord(job_id="41", submitted=1700000000.0, node=None))
    back = RunState.from_json(json.loads(json.dumps(state.to_json())))
    assert back.slurm == state.slurm and back.awaiting_slurm and back.supervision() == "pending"
    with pytest.raises(StateFieldError, match=r"slurm\.job_id"):
        RunState.from_json({"run_id": "r2", "slurm": {"job_id": 41}})


def test_a_supervisor_on_another_node_is_judged_by_slurm_not_by_a_local_pid(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A run submitted from the login node: its supervisor's pid is the compute node's, and the same
    number here is someone else's process (or none). squeue says whether its job still runs."""
    monkeypatch.setattr(runstate, "_SLURM_SEEN", {})
    answer = tmp_path / "answer"
    squeue = tmp_path / "squeue"
    squeue.write_text(f"#!/bin/sh\ncat {answer}\n")
    squeue.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    here = RunState("r", supervisor_pid=os.getpid(), slurm=SlurmJobRecord("41", node=socket.gethostname()))
    elsewhere = RunState("r", supervisor_pid=os.getpid(), slurm=SlurmJobRecord("41", node="node-elsewhere-7"))
    answer.write_text("COMPLETED|None|N/A|node-elsewhere-7\n")
    assert here.supervisor_here() and here.supervisor_alive()  # this machine's pid, alive
    assert not elsewhere.supervisor_here() and not elsewhere.supervisor_alive()  # the local pid is not asked
    answer.write_text("RUNNING|None|N/A|node-elsewhere-7\n")
    assert not elsewhere.supervisor_alive()  # squeue's word of a moment ago still holds
    monkeypatch.setattr(runstate, "SLURM_SEEN_S", 0.0)
    assert elsewhere.supervisor_alive()
