"""report(): the ``@distlaunch`` metric lines, the rate limiter, stdlib-only import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import numpy as np
import pytest

from launcher import events, report

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _messages(text: str) -> list[dict]:
    lines = text.splitlines()
    assert all(line.startswith(events.REPORT_PREFIX) for line in lines), lines
    return [json.loads(line[len(events.REPORT_PREFIX):]) for line in lines]


@pytest.fixture
def reporter(capsys: pytest.CaptureFixture[str]) -> Iterator[pytest.CaptureFixture[str]]:
    """A reporter with nothing pending and no recent line, stdout captured."""
    report.flush()
    report._reporter.last_emit = float("-inf")
    capsys.readouterr()
    yield capsys
    report.flush()
    report.configure(min_interval=report.DEFAULT_MIN_INTERVAL_S)


def _run_python(code: str, env: dict[str, str] | None = None,
                python: str = sys.executable) -> subprocess.CompletedProcess[str]:
    return subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": REPO, **(env or {})}, check=True)


def test_metric_line_is_what_the_agent_decodes(reporter: pytest.CaptureFixture[str]) -> None:
    report.configure(min_interval=0)
    report.report(step=3, loss=0.5, accuracy=np.float32(0.75), lr=np.float64(1e-3))
    (message,) = _messages(reporter.readouterr().out)
    assert message == {"kind": "metric", "step": 3, "loss": 0.5,
                       "values": {"accuracy": 0.75, "lr": 1e-3}}
    event = events.metric_event("r", "worker:0", step=message["step"], loss=message["loss"],
                                values=message["values"])
    assert events.Event.from_json(event.to_json()).get("values") == {"accuracy": 0.75, "lr": 1e-3}


def test_nan_inf_and_non_numbers_become_null(reporter: pytest.CaptureFixture[str]) -> None:
    report.configure(min_interval=0)
    report.report(step=np.int64(7), loss=float("nan"), up=float("inf"), word="abc")
    (message,) = _messages(reporter.readouterr().out)
    assert message["step"] == 7
    assert message["loss"] is None
    assert message["values"] == {"up": None, "word": None}


def test_rate_limited_reports_are_merged_into_the_next_line(reporter: pytest.CaptureFixture[str]) -> None:
    report.configure(min_interval=3600)
    report.report(step=0, loss=9.0)  # nothing emitted yet: goes out at once
    for step in range(1, 1001):
        report.report(step=step, loss=1.0 / step)
        if step == 10:
            report.report(epoch=1)
    assert len(_messages(reporter.readouterr().out)) == 1
    report.flush()
    (message,) = _messages(reporter.readouterr().out)
    assert message["step"] == 1000 and message["loss"] == pytest.approx(1e-3)
    assert message["values"] == {"epoch": 1.0}
    report.flush()
    assert reporter.readouterr().out == "", "flush with nothing pending writes nothing"


def test_lines_per_second_are_bounded_by_the_interval(reporter: pytest.CaptureFixture[str]) -> None:
    interval = 0.05
    report.configure(min_interval=interval)
    start = time.monotonic()
    calls = 0
    while time.monotonic() - start < 0.5:
        report.report(step=calls, loss=1.0)
        calls += 1
    elapsed = time.monotonic() - start
    steps = [m["step"] for m in _messages(reporter.readouterr().out)]
    assert calls > 1000
    assert 2 <= len(steps) <= elapsed / interval + 2, (len(steps), calls)
    assert steps == sorted(steps)


def test_env_interval_and_exit_flush() -> None:
    code = ("from launcher import report\n"
            "report.report(step=1, loss=2.0)\n"
            "report.report(step=2, loss=1.0)\n"
            "print('plain output')\n")
    done = _run_python(code, env={report.INTERVAL_ENV: "3600"})
    lines = done.stdout.splitlines()
    assert lines[1] == "plain output"
    first, last = _messages("\n".join([lines[0], lines[2]]))
    assert (first["step"], last["step"], last["loss"]) == (1, 2, 1.0), "the pending step 2 left at exit"


def test_task_of_device() -> None:
    assert report.task_of_device("/job:ps/replica:0/task:1/device:CPU:0") == "ps:1"
    assert report.task_of_device("/job:worker/task:3/device:GPU:0") == "worker:3"
    assert report.task_of_device("/job:localhost/replica:0/task:0/device:CPU:0") == ""
    assert report.task_of_device("") == ""


HOST_MODULES_SCRIPT = """
import sys
from launcher import report
from launcher.agent import nvml
from launcher.agent import sampling
heavy = [m for m in ("tensorflow", "keras", "numpy", "psutil", "pynvml") if m in sys.modules]
assert not heavy, heavy
sample = sampling.TaskSampler(__import__("os").getpid(), [0], use_psutil=False, use_nvml=False).sample()
assert sample["rss_bytes"] > 0 and sample["source"].startswith("proc"), sample
report.configure(min_interval=0)
report.report(step=1, loss=0.25, x=3)
print(nvml.available())
"""


def test_host_modules_import_stdlib_only() -> None:
    done = _run_python(HOST_MODULES_SCRIPT)
    assert done.stdout.splitlines()[0].startswith(events.REPORT_PREFIX)


PY39 = os.path.expanduser("~/.pyenv/versions/3.9.18/bin/python3.9")


@pytest.mark.skipif(not os.path.exists(PY39), reason="no Python 3.9 interpreter here")
def test_host_modules_run_on_python39() -> None:
    done = _run_python(HOST_MODULES_SCRIPT, python=PY39)
    (message,) = _messages(done.stdout.splitlines()[0])
    assert message["values"] == {"x": 3.0}


class _Var:
    """The attributes report_placement reads from a tf.Variable (stands in for thousands of them)."""

    def __init__(self, name: str, size: int) -> None:
        self.name, self.shape, self.dtype = f"{name}:0", [size], "float32"
        self.device = "/job:ps/replica:0/task:0/device:CPU:0"


def test_huge_placement_stays_under_the_agent_line_limit(reporter: pytest.CaptureFixture[str]) -> None:
    variables = [_Var(f"layer_{i}/a_rather_long_variable_name_{i}", i + 1) for i in range(20_000)]
    entries = report.report_placement(variables)
    captured = reporter.readouterr()
    line = captured.out.splitlines()[0]
    assert len(entries) == 20_000
    assert len(line.encode()) < 1024 * 1024
    (message,) = _messages(line)
    sent = message["variables"]
    assert 0 < len(sent) < 20_000 and sent[0]["bytes"] == 20_000 * 4, "the largest go first"
    assert sent[0]["task"] == "ps:0" and sent[0]["name"] == "layer_19999/a_rather_long_variable_name_19999"
    assert "too large for one line" in captured.err


def test_a_checkpoint_the_script_reports_becomes_the_agents_checkpoint_event(
        reporter: pytest.CaptureFixture[str], tmp_path: os.PathLike[str]) -> None:
    from launcher.agent.output import _checkpoint_from_report

    files = ["ckpt-40.index", "ckpt-40.data-00000-of-00001", "checkpoint"]
    for i, name in enumerate(files):
        with open(os.path.join(tmp_path, name), "w") as f:
            f.write("x" * (i + 1))
    report.report_checkpoint(str(tmp_path), files, step=np.int64(40), api="checkpoint_manager")
    (message,) = _messages(reporter.readouterr().out)
    assert message == {"kind": "checkpoint", "directory": str(tmp_path), "files": files,
                       "api": "checkpoint_manager", "bytes": 6, "step": 40}
    event = _checkpoint_from_report("r", "chief:0", "a", "/", message)
    assert isinstance(event, events.CheckpointEvent)
    assert (event.step, event.directory, event.files, event.bytes, event.host) == (40, str(tmp_path), files, 6, "a")
