"""Bad files in a run dir (issue 49, item 7), through the real CLI: a state.json that is not UTF-8
is one line naming it and what to do (exit 2), never an internal error; an events.jsonl that is a
FIFO or a symlink is refused in one line, never opened so as to block or followed; one such run
dir is left out of `distlaunch runs` with a warning, never a hang of the whole list; and
`up --run-id` takes only a run id, never a path out of the state root."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.integration.jobtools import cli
from tests.integration.test_badlines_verbs import CORPUS, GOOD, private
from tests.integration.test_preflight import profile_with_python
from tests.integration.test_run_ownership import _one_line

RUN_ID = "badfiles-run"


def make_run(root: Path, run_id: str) -> Path:
    """A finished run under ``root`` (the state root's runs/) from the bad-line corpus's good lines."""
    path = root / run_id
    path.mkdir(parents=True, mode=0o700)
    root.chmod(0o700)
    state = json.loads((CORPUS / "state.json").read_text())
    state["run_id"] = run_id
    private(path / "state.json", json.dumps(state).encode())
    private(path / "events.jsonl", b"\n".join(GOOD) + b"\n")
    return path


@pytest.fixture
def run_dir(distlaunch_home: Path) -> Path:
    return make_run(distlaunch_home / "runs", RUN_ID)


def error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The one stderr line of a user error (exit 2)."""
    line = _one_line(result.stderr)
    assert "internal error" not in line and result.returncode == 2, result.stderr
    return line


@pytest.mark.parametrize("verb", [["status", "--json"], ["events"], ["attach", "--no-tui"], ["profile"]],
                         ids=["status", "events", "attach", "profile"])
def test_a_state_json_that_is_not_utf8_is_one_line_naming_it(run_dir: Path, verb: list[str]) -> None:
    state = run_dir / "state.json"
    private(state, b"\xff\xfe" + state.read_bytes())
    line = error_line(cli(verb[0], RUN_ID, *verb[1:], timeout=60))
    assert f"{state}: unreadable run state (not UTF-8 text: byte 0xff at offset 0)" in line
    assert f"rm -r {run_dir}" in line  # what to do


@pytest.mark.parametrize("verb", ["status", "events", "replay"])
def test_an_events_file_that_is_a_fifo_is_refused_not_waited_on(run_dir: Path, verb: str) -> None:
    events = run_dir / "events.jsonl"
    events.unlink()
    os.mkfifo(events, 0o600)  # no writer ever comes: a blocking open would wait for ever
    line = error_line(cli(verb, RUN_ID, timeout=30))
    assert f"{events}: not a regular file" in line and "remove it" in line


@pytest.mark.parametrize("verb", ["status", "events"])
def test_an_events_file_that_is_a_symlink_is_not_followed(run_dir: Path, tmp_path: Path, verb: str) -> None:
    elsewhere = tmp_path / "elsewhere.jsonl"
    private(elsewhere, (run_dir / "events.jsonl").read_bytes())  # good events, and ours: still not followed
    (run_dir / "events.jsonl").unlink()
    (run_dir / "events.jsonl").symlink_to(elsewhere)
    line = error_line(cli(verb, RUN_ID, timeout=30))
    assert str(run_dir / "events.jsonl") in line and "symbolic link" in line


def test_runs_leaves_out_a_run_dir_with_a_fifo_and_lists_the_rest_quickly(run_dir: Path) -> None:
    fifo_events = make_run(run_dir.parent, "fifo-events")
    (fifo_events / "events.jsonl").unlink()
    os.mkfifo(fifo_events / "events.jsonl", 0o600)
    fifo_state = make_run(run_dir.parent, "fifo-state")
    (fifo_state / "state.json").unlink()
    os.mkfifo(fifo_state / "state.json", 0o600)
    for args in (["runs"], ["runs", "--json"]):
        started = time.monotonic()
        result = cli(*args, timeout=10)  # a blocking open of either FIFO would never end
        assert time.monotonic() - started < 10
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
        warnings = sorted(line for line in result.stderr.splitlines() if line.strip())
        assert len(warnings) == 2, result.stderr
        assert f"{fifo_events / 'events.jsonl'}: not a regular file" in warnings[0]
        assert f"{fifo_state / 'state.json'}: not a regular file" in warnings[1]
        assert all(w.startswith("distlaunch: warning: run not listed: ") for w in warnings)
    listed = [r["run"] for r in json.loads(result.stdout)]
    assert listed == [RUN_ID]


@pytest.mark.parametrize("run_id", ["../escaped", "a/b", "..", ".hidden", "latest", "x" * 101])
def test_up_takes_only_a_run_id_never_a_path_out_of_the_state_root(distlaunch_home: Path, tmp_path: Path,
                                                                  run_id: str) -> None:
    # (a python that does not exist: a distlaunch that took the id would make its run dir and stop
    # at the preflight, before any task)
    profile = profile_with_python(tmp_path, "/nonexistent/python3")
    line = error_line(cli("up", str(profile), "--no-tui", "--run-id", run_id, timeout=120))
    assert f"--run-id {run_id!r}: not a run id" in line
    assert sorted(p.name for p in distlaunch_home.iterdir() if p.name != "distlaunch.log") == []


#: host-loss fields of state.json with a type no reader takes (issue 59, item 8)
WRONG_TYPES = {
    "moved_from": ("moved_from", ["worker:0", "a"]),
    "host_losses": ("host_losses", "1"),
    "since": ("host_states.local.since", {"local": {"state": "up", "reason": "", "since": "yesterday"}}),
    "left_behind": ("left_behind.local", {"local": "worker-0"}),
    "moves": ("moves[0]", ["worker:0"]),
    "last_contact": ("last_contact.local", {"local": None}),
}


@pytest.mark.parametrize("key", list(WRONG_TYPES))
def test_attach_to_a_state_json_with_a_wrong_type_names_the_file_and_field(run_dir: Path, key: str) -> None:
    field, value = WRONG_TYPES[key]
    state = json.loads((run_dir / "state.json").read_text())
    state.update({"outcome": None, "job_state": "Running", key if key != "since" else "host_states": value})
    private(run_dir / "state.json", json.dumps(state).encode())
    line = error_line(cli("attach", RUN_ID, "--no-tui", timeout=60))
    assert f"{run_dir / 'state.json'}: unreadable run state (field {field} is " in line, line
    assert f"rm -r {run_dir}" in line
