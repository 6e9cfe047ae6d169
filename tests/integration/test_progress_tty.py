"""Progress lines of long steps, seen as a user sees them: the CLI as a real process on a pty.

DISTLAUNCH_PROGRESS_AFTER=0 shows each line from its first moment (it is 1 s otherwise, which
these small steps never reach); the same commands on pipes must print no progress at all."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

import pytest

from launcher import events as ev
from launcher.rundir import RunDir
from tests.integration.jobtools import PYTHON, REPO
from tests.profiles import build_profile


def run_on_pty(args: list[str], env: dict[str, str], timeout: float = 120) -> tuple[int, str]:
    """The CLI with stdout and stderr on one pty; its exit code and everything it wrote."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([PYTHON, "-m", "launcher.cli", *args], stdin=subprocess.DEVNULL, stdout=slave,
                            stderr=slave, cwd=REPO, env={**os.environ, **env}, start_new_session=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert time.monotonic() < deadline, f"{args} still running after {timeout}s: {out!r}"
            if select.select([master], [], [], 0.5)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer has closed the pty
                    break
                if not chunk:
                    break
                out += chunk
            elif proc.poll() is not None:
                break
        return proc.wait(timeout=30), out.decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def make_finished_runs(home: Path, count: int) -> None:
    for i in range(count):
        run_id = f"old-2026010{i}-000000-aaaa"
        rd = RunDir.create(run_id, home / "runs" / run_id)
        rd.append(ev.job_event(run_id, ev.JOB_CREATED, ts=1.0))
        for step in range(1, 40):
            rd.append(ev.metric_event(run_id, "worker:0", step=step, loss=1.0 / step, ts=1.0 + step))
        rd.append(ev.job_event(run_id, ev.JOB_SUCCEEDED, ts=100.0))
        rd.write_state({"run_id": run_id, "name": "old", "job_state": ev.JOB_SUCCEEDED,
                        "tasks": {"worker:0": {"host": "local"}}, "hosts": {}})
        rd.close()


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DISTLAUNCH_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_prune_and_export_draw_progress_on_a_terminal_and_clear_it(home: Path, tmp_path: Path) -> None:
    make_finished_runs(home, 3)
    env = {"DISTLAUNCH_HOME": str(home), "DISTLAUNCH_PROGRESS_AFTER": "0", "TERM": "xterm"}
    rc, out = run_on_pty(["export", "tensorboard", "old-20260100-000000-aaaa", str(tmp_path / "tb")], env)
    assert rc == 0, out
    assert "\rexporting  0 events" in out
    assert re.search(r"\rexporting  [\d,]+ events  \d+s\r {20,}\r", out), out  # cleared before the results
    assert "worker:0: " in out
    rc, out = run_on_pty(["prune"], env)
    assert rc == 0, out
    assert "\rpruning  [--------------------]  0/3 runs" in out
    assert out.count("removed old-") == 3 and "pruned 3 run(s)" in out
    for line in out.splitlines():
        if line.startswith("removed"):
            assert "pruning" not in line, f"the progress line is mixed into {line!r}"


def test_check_draws_progress_for_the_host_steps(home: Path, tmp_path: Path) -> None:
    build_profile(tmp_path / "p.toml", name=None, command="{python} -c pass", workdir=".", hosts=(),
                  roles={"worker": 2})
    env = {"DISTLAUNCH_HOME": str(home), "DISTLAUNCH_PROGRESS_AFTER": "0", "TERM": "xterm",
           "HOME": str(tmp_path)}  # the job's outputs folder, which check makes, stays in tmp
    rc, out = run_on_pty(["check", str(tmp_path / "p.toml")], env)
    assert rc == 0, out
    for label in ("connecting", "checking python", "uploading the agent", "checking workdirs and ports"):
        assert f"\r{label}  [--------------------]  0/1 hosts" in out, (label, out)


def test_nothing_but_the_results_when_output_is_not_a_terminal(home: Path, tmp_path: Path) -> None:
    make_finished_runs(home, 2)
    env = {**os.environ, "DISTLAUNCH_HOME": str(home), "DISTLAUNCH_PROGRESS_AFTER": "0", "TERM": "xterm"}
    for args in (["export", "tensorboard", "old-20260100-000000-aaaa", str(tmp_path / "tb")], ["prune"]):
        result = subprocess.run([PYTHON, "-m", "launcher.cli", *args], capture_output=True, text=True,
                                cwd=REPO, env=env, timeout=120)
        assert result.returncode == 0, result.stderr
        assert "\r" not in result.stdout + result.stderr
        assert result.stderr == ""
