"""Issue 46 §3: autolog's last reading (launcher/autolog/recorder.py ``flush``), without TensorFlow.

A task whose training ends between two of the reader's ticks still sends the step and loss it
ended with: read once more at the interpreter's exit, by the reader thread, which the exit waits
for a bounded time. An exit never hangs, fails or changes its code because of that read, and a
forked child never reads its parent's state. Each script runs in a Python of its own (the exit
is what is tested); the reader's interval is a minute, so no tick of its own ever comes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from typing import Any

from launcher.autolog import recorder
from tests.integration.jobtools import REPO

#: a step source the reader reads like an optimizer's ``iterations``
PRELUDE = """
import os, sys, time
from launcher.autolog import recorder

class Iterations:
    def __init__(self, mode):
        self.value, self.mode = 0, mode

    def __float__(self):
        if self.mode == "hang":
            time.sleep(600)
        if self.mode == "raise":
            print("READ FAILS", flush=True)
            raise RuntimeError("the runtime is gone")
        print("READ in %d" % os.getpid(), flush=True)
        return float(self.value)

class Optimizer:
    def __init__(self, mode="ok"):
        self.iterations = Iterations(mode)
"""


def run(body: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "DISTLAUNCH_AUTOLOG_INTERVAL": "60"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=REPO)
    return done, time.monotonic() - started


def metric_lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("@distlaunch "):]) for line in stdout.splitlines()
            if line.startswith("@distlaunch ") and '"kind":"metric"' in line]


def test_the_exit_reads_and_sends_the_last_step_and_loss() -> None:
    done, _ = run("""
        optimizer = Optimizer()
        recorder.reader.add_optimizer(optimizer)
        for step in range(1, 8):  # a job shorter than one interval: no tick reads it
            optimizer.iterations.value = step
            recorder.reader.offer_loss(1.0 / step, lambda value: value)
        print("trained", flush=True)
    """)
    assert done.returncode == 0, done.stderr
    lines = metric_lines(done.stdout)
    assert lines and lines[-1]["step"] == 7 and lines[-1]["loss"] == 1.0 / 7, done.stdout
    assert done.stdout.index("trained") < done.stdout.index("@distlaunch"), done.stdout
    assert "distlaunch autolog" not in done.stderr, done.stderr


def test_the_exit_sends_the_step_the_script_ended_with_even_below_one_a_tick_read() -> None:
    """Issue 62: Keras 3 counts ``iterations`` by reading and assigning (``assign(self + 1)``), so
    under ParameterServerStrategy two workers' increments overwrite each other and a late one can
    set the counter back. A tick that read the higher value must not outlast the end: the last
    step sent is the one the script ends with."""
    done, _ = run("""
        optimizer = Optimizer()
        recorder.reader.add_optimizer(optimizer)
        optimizer.iterations.value = 31
        recorder.reader.tick()  # a tick reads 31 and sends it
        optimizer.iterations.value = 30  # a racing increment's late assign sets it back
        print("ended at step %d" % optimizer.iterations.value, flush=True)
    """)
    assert done.returncode == 0, done.stderr
    steps = [line["step"] for line in metric_lines(done.stdout) if line["step"] is not None]
    assert steps == [31, 30], done.stdout
    assert "ended at step 30" in done.stdout


def test_an_exit_whose_read_hangs_ends_in_bounded_time_with_its_own_code() -> None:
    done, took = run("""
        optimizer = Optimizer("hang")  # the reader holds optimizers weakly
        recorder.reader.add_optimizer(optimizer)
        recorder.reader.offer_loss(0.5, lambda value: value)
        sys.exit(3)
    """)
    assert done.returncode == 3, done.stderr
    assert recorder.EXIT_FLUSH_TIMEOUT_S - 1 < took < recorder.EXIT_FLUSH_TIMEOUT_S + 10, took  # it did wait
    assert "Traceback" not in done.stderr and "distlaunch autolog" not in done.stderr, done.stderr


def test_a_read_that_fails_at_the_exit_is_let_go_unsaid_and_what_is_pending_still_goes_out() -> None:
    done, _ = run("""
        optimizer = Optimizer("raise")
        recorder.reader.add_optimizer(optimizer)
        recorder.note(loss=0.5)  # the first line goes out at once (no line sent yet)
        recorder.note(step=4, loss=0.25)  # within the rate limit: pending
    """)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "distlaunch autolog" not in done.stderr, done.stderr
    assert "READ FAILS" in done.stdout, done.stdout  # the exit did try
    lines = metric_lines(done.stdout)
    assert lines and lines[-1]["step"] == 4 and lines[-1]["loss"] == 0.25, done.stdout


def test_a_forked_child_that_exits_never_reads() -> None:
    done, _ = run("""
        optimizer = Optimizer()
        recorder.reader.add_optimizer(optimizer)
        optimizer.iterations.value = 5
        child = os.fork()
        if child == 0:
            print("child %d" % os.getpid(), flush=True)
            sys.exit(0)  # a normal exit: its atexit handlers run
        os.waitpid(child, 0)
        print("parent %d" % os.getpid(), flush=True)
    """)
    assert done.returncode == 0, done.stderr
    lines = [line.split() for line in done.stdout.splitlines()]
    pids = {words[0]: words[1] for words in lines if words[0] in ("child", "parent")}
    reads = [words[-1] for words in lines if words[:2] == ["READ", "in"]]
    assert reads == [pids["parent"]], done.stdout
    assert metric_lines(done.stdout)[-1]["step"] == 5, done.stdout


def test_joins_flush_while_flushes_take_a_small_share_of_the_time(monkeypatch: Any) -> None:
    """A loop that joins after every step pays one read per twenty reads' time at most."""
    reads: list[float] = []

    def tick() -> None:
        reads.append(time.monotonic())
        time.sleep(0.01)

    monkeypatch.setattr(recorder._state, "on", True)
    monkeypatch.setattr(recorder.reader, "tick", tick)
    monkeypatch.setattr(recorder.reporter, "emit", lambda: None)
    monkeypatch.setitem(recorder._flushes, "join", 0.0)
    deadline = time.monotonic() + 0.5
    joins = 0
    while time.monotonic() < deadline:
        recorder.flush_after_join()
        joins += 1
        time.sleep(0.001)
    assert joins > 20 and 1 <= len(reads) <= 0.5 / (0.01 / recorder.JOIN_FLUSH_SHARE) + 1, (joins, len(reads))
    assert recorder.flush("the end of Keras fit") and len(reads) >= 2  # the end of fit always reads
