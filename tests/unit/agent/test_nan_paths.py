"""A NaN or Inf loss survives every way a loss reaches the launcher: the [metrics] regexes, report.py's
JSON lines, autolog's tensor reads, the real agent, and events.jsonl (strict JSON: no NaN tokens)."""

from __future__ import annotations

import json
import math
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from launcher import events, report
from launcher.agent.metricregex import MetricRegexes
from launcher.autolog import patches as autolog_patches
from tests.unit.agent.test_agent_autolog import metrics
from tests.unit.agent.test_agent_run import AgentHarness
from tests.unit.test_report import _messages, reporter  # noqa: F401  (fixture)

#: the loss regex the docs and `init` suggest: the leading number of the next word, nan and inf included
SUGGESTED_LOSS = r"loss[ =:]+(\S+)"


def strict_loads(text: str) -> Any:
    def refuse(name: str) -> None:
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize(("line", "label"), [("step 6 loss nan", "nan"), ("loss: NaN,", "nan"),
                                             ("loss = inf", "inf"), ("loss=-inf", "-inf"),
                                             ("loss: -Infinity", "-inf")])
def test_the_suggested_regex_reads_nan_and_inf(line: str, label: str) -> None:
    loss = MetricRegexes({"loss": SUGGESTED_LOSS}).apply(line).loss
    assert loss is not None and events.nonfinite_label(loss) == label
    assert MetricRegexes({"loss": SUGGESTED_LOSS}).apply("loss: 0.25,").loss == 0.25


@pytest.mark.parametrize(("loss", "label"), [(float("nan"), "nan"), (float("inf"), "inf"),
                                             (float("-inf"), "-inf"), (np.float32("nan"), "nan")])
def test_a_nonfinite_loss_event_is_strict_json_and_decodes(loss: float, label: str) -> None:
    event = events.metric_event("r", "worker:0", step=6, loss=loss)
    line = event.to_json()
    assert strict_loads(line)["nonfinite_loss"] == label and strict_loads(line)["loss"] is None
    back = events.Event.from_json(line)
    assert back.get("nonfinite_loss") == label
    assert "nonfinite_loss" not in events.metric_event("r", "worker:0", step=6, loss=0.5).data


def test_the_event_decoder_refuses_python_nan_tokens() -> None:
    """A line some other writer made with json.dumps' NaN is a bad line, on a live stream as in a run's
    files (the typed events check a number is finite; the agent's own lines are strict JSON)."""
    line = json.dumps({"v": 1, "ts": 1.0, "run": "r", "task": "worker:0", "kind": "metric", "step": 1,
                       "loss": float("nan"), "values": {}})
    assert "NaN" in line
    with pytest.raises(events.EventDecodeError, match="metric loss is a float"):
        events.Event.from_json(line)


@pytest.mark.parametrize(("loss", "label"), [(float("nan"), "nan"), (np.float64("inf"), "inf"),
                                             (float("-inf"), "-inf")])
def test_report_names_a_nonfinite_loss(reporter: pytest.CaptureFixture[str], loss: float,  # noqa: F811
                                       label: str) -> None:
    report.configure(min_interval=0)
    report.report(step=6, loss=loss)
    out = reporter.readouterr().out
    (message,) = _messages(out)
    assert message["loss"] is None and message["nonfinite_loss"] == label
    strict_loads(out.split(" ", 1)[1])


class _Tensor:
    def __init__(self, value: float) -> None:
        self.value = value

    def numpy(self) -> float:
        return self.value


def test_autolog_reads_a_nan_loss_tensor_as_nan() -> None:
    value = autolog_patches._read_tensor(_Tensor(float("nan")))
    assert value is not None and math.isnan(value)
    assert autolog_patches._read_tensor(_Tensor(0.5)) == 0.5


def test_the_agent_sends_nonfinite_losses_of_reports_and_regexes(host: AgentHarness) -> None:
    script: Path = host.root / "nan.py"
    script.write_text(textwrap.dedent("""
        from launcher import report
        report.configure(min_interval=0)
        report.report(step=1, loss=float("nan"))
        report.report(step=2, loss=float("-inf"))
        print("step 3 loss nan", flush=True)
        print("step 4 loss 0.5", flush=True)
    """))
    evs = host.run_to_end(host.task(f"{sys.executable} nan.py", autolog=False,
                                    metrics={"step": r"step (\d+)", "loss": SUGGESTED_LOSS}))
    got = [(m["step"], m["loss"], m.get("nonfinite_loss")) for m in metrics(evs)]
    assert got == [(1, None, "nan"), (2, None, "-inf"), (3, None, "nan"), (4, 0.5, None)], got
