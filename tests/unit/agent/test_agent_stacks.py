"""The host side of `distlaunch stacks` on real processes: which process is the task's Python,
py-spy's and faulthandler's readings, and what is said where neither can read."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.agent import stackmodel as sm
from launcher.agent import stackreader
from launcher.autolog.hook import STACKS_ENV

HUNG = """\
import os, sys, time
sys.path.insert(0, os.environ["REPO"])
from launcher.autolog import hook as autolog_hook
autolog_hook.register_stacks_dump()
print("ready", flush=True)


def wait_for_peer():
    while True:
        time.sleep(1)


wait_for_peer()
"""
REPO = str(Path(__file__).resolve().parents[3])


@pytest.fixture
def task(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A task as the agent starts one: a shell leading its own process group, the Python under it,
    with autolog's faulthandler writing into the task dir."""
    (tmp_path / "hung.py").write_text(HUNG)
    env = {**os.environ, "REPO": REPO, STACKS_ENV: str(tmp_path / stackreader.STACKS_FILE)}
    proc = subprocess.Popen(["/bin/sh", "-c", f"{sys.executable} {tmp_path / 'hung.py'}; :"], env=env,
                            stdout=subprocess.PIPE, start_new_session=True)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    try:
        yield tmp_path, proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def test_the_tasks_python_under_its_shell_is_found_and_read_both_ways(task: tuple[Path, subprocess.Popen[bytes]]
                                                                       ) -> None:
    task_dir, proc = task
    pid = stackreader.main_python(proc.pid)
    assert pid is not None and pid != proc.pid
    dump_signal = stackreader.STACKS_SIGNAL
    assert stackreader._caught(pid, dump_signal) and not stackreader._caught(proc.pid, dump_signal)
    deadline = time.monotonic() + 20
    spy = stackreader.find_pyspy(pid)
    assert spy is not None, "py-spy is a dependency: beside the venv's Python"
    threads, error = stackreader.run_pyspy(spy, pid, False, False, deadline)
    frame = sm.user_frame(threads[0]) if threads else None
    assert not error and frame is not None and frame.function == "wait_for_peer"
    threads, error = stackreader.read_faulthandler(str(task_dir), pid, deadline)
    assert not error, error
    assert [f.function for f in threads[0].frames] == ["<module>", "wait_for_peer"]
    # a pid without the handler is never signalled (SIGUSR2 would end it)
    threads, error = stackreader.read_faulthandler(str(task_dir), proc.pid, deadline)
    assert threads == [] and "not set up in pid" in error
    assert proc.poll() is None


def test_py_spy_can_be_hidden_and_a_stopped_process_is_read_without_blocking(
        task: tuple[Path, subprocess.Popen[bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    _, proc = task
    pid = stackreader.main_python(proc.pid)
    assert pid is not None
    spy = stackreader.find_pyspy(pid)
    monkeypatch.setenv(stackreader.PYSPY_ENV, "/nonexistent")
    assert stackreader.find_pyspy(pid) is None
    assert spy is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        deadline = time.monotonic() + 10
        while (stackreader._stat(pid) or ("?",))[0] != "T":  # the kernel stops it asynchronously
            assert time.monotonic() < deadline, "the process did not stop"
            time.sleep(0.01)
        threads, error = stackreader.run_pyspy(spy, pid, False, True, time.monotonic() + 20)
        assert threads and not error
    finally:
        os.kill(pid, signal.SIGCONT)
