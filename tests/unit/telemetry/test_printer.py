from __future__ import annotations

import io
from pathlib import Path

from launcher import events as ev
from launcher.telemetry.jobview import FAILURE_TAIL_LINES
from launcher.telemetry.printer import JsonPrinter, ProgressPrinter, failure_excerpt, human_bytes


def _stream() -> list[ev.Event]:
    return [
        ev.job_event("r", ev.JOB_RUNNING, ts=100.0),
        ev.state_event("r", "worker:0", ev.RUNNING, host="h", pid=42, ts=100.0),
        ev.metric_event("r", "chief:0", step=10, loss=1.5, ts=100.0),
        ev.sample_event("r", "worker:0", cpu_percent=87.0, rss_bytes=3 * 1024**3,
                        gpus=[{"index": 0, "util_percent": 55.0, "mem_used_bytes": 2 * 1024**3}], ts=101.0),
        ev.metric_event("r", "chief:0", step=30, loss=1.25, ts=102.0),
        ev.log_event("r", "worker:0", "stderr", "Traceback: oops", ts=102.5),
        ev.state_event("r", "worker:0", ev.FAILED, host="h", exit_code=3, reason="exit code 3", ts=103.0),
        ev.job_event("r", ev.JOB_FAILED, "worker:0 failed", ts=103.0),
    ]


def test_progress_lines_show_states_step_loss_rate_and_resources() -> None:
    out = io.StringIO()
    printer = ProgressPrinter(out, every=3600, clock=lambda: 1e9)
    printer.consume(_stream())
    text = out.getvalue()
    assert "worker:0     running (on h, pid 42)" in text
    assert "step 30  loss 1.2500  10.0 steps/s" in text  # 20 steps in 2 s
    assert "cpu 87%" in text and "rss 3.0G" in text and "gpu 55% 2.0G" in text
    # the failed task's last output is shown with its failure
    assert "worker:0 | Traceback: oops" in text
    assert "job Failed: worker:0 failed" in text
    assert printer.final_state == ev.JOB_FAILED


def test_json_printer_writes_every_event_as_one_line() -> None:
    out = io.StringIO()
    printer = JsonPrinter(out)
    printer.consume(_stream())
    lines = out.getvalue().splitlines()
    assert len(lines) == len(_stream())
    assert [ev.Event.from_json(line).kind for line in lines] == [e.kind for e in _stream()]
    assert printer.final_state == ev.JOB_FAILED


def test_human_bytes() -> None:
    assert human_bytes(None) == "-"
    assert human_bytes(512) == "512B"
    assert human_bytes(1536) == "1.5K"
    assert human_bytes(5 * 1024**3) == "5.0G"


def _ps_dies_then_workers_fail() -> list[ev.Event]:
    """ps:0 fails on each of 3 incarnations with the same output; the workers then fail with gRPC
    errors, worker:1 twice with the same line."""
    out: list[ev.Event] = [ev.job_event("r", ev.JOB_RUNNING, ts=1.0)]
    ts = 2.0
    for restarts in range(3):
        out.append(ev.state_event("r", "ps:0", ev.STARTING, host="h", restarts=restarts, ts=ts))
        out.append(ev.log_event("r", "ps:0", "stdout", "ps: serving on port 2222", ts=ts + 0.1))
        out.append(ev.log_event("r", "ps:0", "stderr", "ps: out of memory", ts=ts + 0.2))
        out.append(ev.state_event("r", "ps:0", ev.FAILED, host="h", restarts=restarts, exit_code=1,
                                  reason="exit code 1", ts=ts + 0.3))
        ts += 1.0
    for task in ("worker:0", "worker:1"):
        out.append(ev.state_event("r", task, ev.STARTING, host="h", ts=ts))
        out.append(ev.log_event("r", task, "stderr", "UnavailableError: ps:0 unreachable", ts=ts + 0.1))
        out.append(ev.log_event("r", task, "stderr", "UnavailableError: ps:0 unreachable", ts=ts + 0.2))
        out.append(ev.log_event("r", task, "stderr", f"{task} giving up", ts=ts + 0.3))
        out.append(ev.state_event("r", task, ev.FAILED, host="h", exit_code=1, reason="exit code 1", ts=ts + 0.4))
        ts += 1.0
    out.append(ev.job_event("r", ev.JOB_FAILED, "crash loop: exit 1 within 0.3 s of start, 3 times", ts=ts))
    return out


def test_failure_report_names_the_first_failure_and_repeats_no_line() -> None:
    out = io.StringIO()
    ProgressPrinter(out, every=3600).consume(_ps_dies_then_workers_fail())
    lines = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]  # without the time stamp
    report = lines[lines.index("job Failed: crash loop: exit 1 within 0.3 s of start, 3 times") + 1:]
    assert report[0] == "root cause: ps:0 failed first (exit code 1)"
    assert report[1:] == [
        "last output of ps:0:",
        "  ps:0 | ps: serving on port 2222",
        "  ps:0 | ps: out of memory",
        "last output of worker:0:",
        "  worker:0 | UnavailableError: ps:0 unreachable",
        "  worker:0 | worker:0 giving up",
        "last output of worker:1:",
        "  worker:1 | UnavailableError: ps:0 unreachable",
        "  worker:1 | worker:1 giving up",
    ]
    task_lines = [line for line in lines if " | " in line]
    assert len(task_lines) == len(set(task_lines))


def test_no_failure_report_when_the_job_succeeds() -> None:
    events = [*_ps_dies_then_workers_fail()[:-1], ev.job_event("r", ev.JOB_SUCCEEDED, "chief:0 exited 0", ts=99.0)]
    out = io.StringIO()
    ProgressPrinter(out, every=3600).consume(events)
    assert "root cause" not in out.getvalue() and " | " not in out.getvalue()


def test_failure_report_shows_the_traceback_whole_and_folds_tensorflow_start_up_lines() -> None:
    """Real output of a TensorFlow script that dies (tests/data/tf_startup/): its 12-line traceback
    is longer than the report's usual tail, and its start-up lines say nothing about the failure."""
    captured = (Path(__file__).resolve().parents[2] / "data" / "tf_startup" / "tf-2.21-cpu-failing.txt")
    output = captured.read_text(encoding="utf-8").splitlines()
    events = [ev.job_event("r", ev.JOB_RUNNING, ts=1.0),
              ev.state_event("r", "chief:0", ev.RUNNING, host="h", pid=7, ts=1.0)]
    events += [ev.log_event("r", "chief:0", "stderr", line, ts=2.0) for line in output]
    events += [ev.state_event("r", "chief:0", ev.FAILED, host="h", exit_code=1, ts=3.0),
               ev.job_event("r", ev.JOB_FAILED, "chief:0 failed", ts=3.0)]
    out = io.StringIO()
    ProgressPrinter(out, every=3600).consume(events)
    lines = [line.split(" ", 1)[1] for line in out.getvalue().splitlines()]
    report = lines[lines.index("last output of chief:0:") + 1:]
    traceback = output[output.index("Traceback (most recent call last):"):]
    assert len(traceback) > FAILURE_TAIL_LINES
    assert report == [
        "  chief:0 | (7 TensorFlow start-up lines hidden; `distlaunch logs r chief:0` shows every line)",
        *(f"  chief:0 | {line}" for line in traceback),
    ]


def test_failure_report_shows_a_chained_traceback_from_its_first_part() -> None:
    lines = ["starting", "Traceback (most recent call last):", '  File "a.py", line 1', "KeyError: 'x'", "",
             "During handling of the above exception, another exception occurred:", "",
             "Traceback (most recent call last):", '  File "a.py", line 3', "ValueError: y"]
    assert failure_excerpt(lines) == lines[1:]
    assert failure_excerpt(["a", "b", "a", "c"]) == ["a", "b", "c"]  # no traceback: each line once


def test_the_progress_line_comes_on_its_interval_without_events_and_a_hung_task_reads_zero() -> None:
    import threading
    import time

    now = [120.0]
    out = io.StringIO()
    hold = threading.Event()

    def stream():
        yield ev.state_event("r", "worker:0", ev.RUNNING, host="h", pid=42, ts=100.0)
        for s in range(21):  # 2 steps/s from 100 to 120, then the step stops moving
            yield ev.metric_event("r", "worker:0", step=2 * s, loss=1.0, ts=100.0 + s)
        hold.wait(30)  # a live job that sends nothing more

    def printed(text: str) -> None:
        deadline = time.monotonic() + 10
        while text not in out.getvalue():
            assert time.monotonic() < deadline, f"no {text!r} in {out.getvalue()!r}"
            time.sleep(0.01)

    printer = ProgressPrinter(out, every=0.05, clock=lambda: now[0])
    reader = threading.Thread(target=printer.consume, args=(stream(),))
    reader.start()
    try:
        printed("step 40  loss 1.0000  2.0 steps/s  || worker:0 2.0/s")
        now[0] = 170.0  # 50 s after the last step: the ticker prints without any event
        printed("step 40  loss 1.0000  0.0 steps/s  || worker:0 0.0/s")
    finally:
        hold.set()
        reader.join(10)
    assert not reader.is_alive()


def test_a_failure_line_says_its_cause_once() -> None:
    from launcher.telemetry.printer import _state_text

    bare = ev.state_event("r", "worker:0", ev.FAILED, host="local", exit_code=1, reason="exit code 1",
                          cause="exit code 1")
    assert _state_text(bare) == "worker:0     failed (on local, exit 1, exit code 1)"
    told = ev.state_event("r", "worker:0", ev.FAILED, host="local", exit_code=1, reason="exit code 1",
                          cause="ValueError: bad at t.py:3")
    assert _state_text(told) == "worker:0     failed (on local, exit 1, exit code 1): ValueError: bad at t.py:3"
