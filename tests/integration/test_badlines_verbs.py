"""Every verb that reads a run's files back, on a run dir built from the bad-line corpus
(tests/data/badlines/): good events between bytes that are not UTF-8, torn JSON and fields of the
wrong type. Each verb reads the good lines, says in one stderr line how many it skipped, and
ends without a traceback; `runs` lists a run whose state.json is unreadable as such."""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.jobtools import REPO, cli, wait_for

CORPUS = REPO / "tests" / "data" / "badlines"
BAD = [raw for raw in (CORPUS / "events.bad.jsonl").read_bytes().split(b"\n") if raw.strip()]
GOOD = [raw for raw in (CORPUS / "events.good.jsonl").read_bytes().split(b"\n") if raw.strip()]
#: every bad line of the corpus and the torn last line
SKIPPED = len(BAD) + 1
RUN_ID = "badlines-run"


def private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


@pytest.fixture
def run_dir(distlaunch_home: Path) -> Path:
    """The corpus as a finished run under the state root: the bad lines between the good ones
    (the first line bad too), the torn line last."""
    path = distlaunch_home / "runs" / RUN_ID
    path.mkdir(parents=True, mode=0o700)
    path.chmod(0o700)
    (path.parent).chmod(0o700)
    mixed = [line for pair in zip(BAD, GOOD, strict=False) for line in pair] + GOOD[len(BAD):] + BAD[len(GOOD):]
    private(path / "events.jsonl", b"\n".join(mixed) + b"\n" + (CORPUS / "torn-last-line").read_bytes())
    private(path / "state.json", (CORPUS / "state.json").read_bytes())
    return path


def warning_lines(stderr: str) -> list[str]:
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    return [line for line in stderr.splitlines() if "skipped" in line]


def test_status_reads_the_good_lines_and_says_how_many_it_skipped(run_dir: Path) -> None:
    result = cli("status", RUN_ID, timeout=60)
    assert result.returncode == 0, result.stderr
    assert warning_lines(result.stderr) == [f"distlaunch: warning: {run_dir / 'events.jsonl'}: skipped {SKIPPED} "
                                            "bad lines (not UTF-8, not an event, or a field of the wrong type)"]
    assert "job Failed: worker:0 failed" in result.stdout
    assert "root cause: worker:0 failed first" in result.stdout
    chief = next(line for line in result.stdout.splitlines() if line.startswith("chief:0"))
    assert chief.split()[-6:] == ["50", "0.2000", "none", "yet", "50", "-"]  # step, loss, checkpoint, at risk, split


def test_status_json_counts_the_skipped_lines(run_dir: Path) -> None:
    result = cli("status", RUN_ID, "--json", timeout=60)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["skipped_lines"] == SKIPPED
    assert summary["tasks"]["chief:0"]["step"] == 50 and summary["tasks"]["worker:0"]["state"] == "failed"


def test_events_shows_the_timeline_of_the_good_lines(run_dir: Path) -> None:
    result = cli("events", RUN_ID, timeout=60)
    assert result.returncode == 0, result.stderr
    assert len(warning_lines(result.stderr)) == 1 and f"skipped {SKIPPED} bad lines" in result.stderr
    out = result.stdout
    assert "job Failed: worker:0 failed" in out and "stalled raised" in out and "operator: restart worker:0" in out
    assert "host local unreachable: link lost" in out


def test_runs_lists_the_run_and_one_with_an_unreadable_state(run_dir: Path) -> None:
    damaged = run_dir.parent / "damaged-run"
    damaged.mkdir(mode=0o700)
    private(damaged / "state.json", b'{"run_id": "damaged-run", \xff')
    private(damaged / "events.jsonl", GOOD[0] + b"\n")
    result = cli("runs", timeout=60)
    assert result.returncode == 0, result.stderr
    warnings = warning_lines(result.stderr)
    assert len(warnings) == 1 and RUN_ID in warnings[0]
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[1:]}
    assert rows[RUN_ID].split()[1:3] == ["badlines", "Failed"]
    assert rows["damaged-run"].split()[1] == "unreadable"
    listed = {r["run"]: r for r in json.loads(cli("runs", "--json", timeout=60).stdout)}
    assert listed["damaged-run"]["job_state"] == "unreadable" and "state.json" in listed["damaged-run"]["job_reason"]
    # `runs` reads the first line and the tail up to the last good one: the first, those after it, the torn one
    assert listed[RUN_ID]["skipped_lines"] == 1 + (len(BAD) - len(GOOD)) + 1


def test_export_tensorboard_exports_the_good_lines(run_dir: Path, tmp_path: Path) -> None:
    result = cli("export", "tensorboard", RUN_ID, str(tmp_path / "tb"), timeout=120)
    assert result.returncode == 0, result.stderr
    assert len(warning_lines(result.stderr)) == 1 and f"skipped {SKIPPED} bad lines" in result.stderr
    # 5 metrics (loss, accuracy, 4 rates) and 5 samples (cpu, rss, gpu util and memory)
    assert "chief:0: 34 scalars" in result.stdout
    assert list((tmp_path / "tb" / RUN_ID / "chief-0").glob("events.out.tfevents.*"))


def _tmux(socket: str, *args: str) -> str:
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=20).stdout


def test_replay_plays_the_good_lines_and_says_how_many_it_skipped(run_dir: Path, distlaunch_home: Path) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux not installed (it gives the dashboard a terminal)")
    socket = f"dl-{secrets.token_hex(4)}"
    command = (f"cd {shlex.quote(str(REPO))} && DISTLAUNCH_HOME={shlex.quote(str(distlaunch_home))} "
               f"{shlex.quote(sys.executable)} -m launcher.cli replay {RUN_ID} --speed 0; echo EXIT=$?; sleep 120")
    _tmux(socket, "new-session", "-d", "-s", "replay", "-x", "200", "-y", "40",
          "-e", f"PATH={os.environ['PATH']}", command)
    try:
        wait_for(lambda: "worker:0" in (screen := _tmux(socket, "capture-pane", "-p", "-t", "replay"))
                 and "Failed" in screen, 60, "the replayed job's end on the dashboard")
        _tmux(socket, "send-keys", "-t", "replay", "q")
        wait_for(lambda: "EXIT=" in _tmux(socket, "capture-pane", "-p", "-J", "-t", "replay"), 30, "replay to end")
        screen = _tmux(socket, "capture-pane", "-p", "-J", "-t", "replay")
        assert "EXIT=0" in screen and "Traceback" not in screen, screen
        assert f"{run_dir / 'events.jsonl'}: skipped {SKIPPED} bad lines" in screen, screen
    finally:
        _tmux(socket, "kill-server")


def test_distlaunch_alone_in_a_terminal_opens_the_runs_and_enter_replays_one(run_dir: Path,
                                                                           distlaunch_home: Path) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux not installed (it gives the screen a terminal)")
    socket = f"dl-{secrets.token_hex(4)}"
    command = (f"cd {shlex.quote(str(REPO))} && DISTLAUNCH_HOME={shlex.quote(str(distlaunch_home))} "
               f"{shlex.quote(sys.executable)} -m launcher.cli; echo EXIT=$?; sleep 120")
    _tmux(socket, "new-session", "-d", "-s", "runs", "-x", "200", "-y", "40",
          "-e", f"PATH={os.environ['PATH']}", command)
    try:
        wait_for(lambda: RUN_ID in (screen := _tmux(socket, "capture-pane", "-p", "-t", "runs"))
                 and "Attach / replay" in screen, 60, "the runs screen with the run")
        _tmux(socket, "send-keys", "-t", "runs", "Enter")  # an ended run: its replay
        wait_for(lambda: "(replay" in _tmux(socket, "capture-pane", "-p", "-t", "runs"), 60,
                 "the dashboard replaying the picked run")
        _tmux(socket, "send-keys", "-t", "runs", "q")
        wait_for(lambda: "EXIT=" in _tmux(socket, "capture-pane", "-p", "-J", "-t", "runs"), 30, "the replay to end")
        screen = _tmux(socket, "capture-pane", "-p", "-J", "-t", "runs")
        assert "EXIT=0" in screen and "Traceback" not in screen, screen
    finally:
        _tmux(socket, "kill-server")
