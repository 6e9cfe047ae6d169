from __future__ import annotations

import io

from launcher import events as ev
from launcher.printer import JsonPrinter, ProgressPrinter, human_bytes


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
    printer = ProgressPrinter(out, every=3600)
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
