"""[[log_policies]] matching and the nan_loss condition (launcher/supervise/outputpolicy.py), and how the
profile declares them ([[log_policies]], on_nan)."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher import events as ev
from launcher.model import LogPolicy
from launcher.profile.reader import load_profile
from launcher.supervise.outputpolicy import MAX_LINE_CHARS, LogPolicies, NanLoss, OutputPolicy
from tests.unit.profile.test_profile_errors import GOOD_HEAD, check_error

OOM = LogPolicy("CUDA_ERROR_OUT_OF_MEMORY", "no_retry")
NCCL = LogPolicy(r"NCCL (WARN|error)", "warn")


def log(task: str, line: str) -> ev.Event:
    return ev.log_event("r", task, "stderr", line)


def metric(task: str, step: int | None, loss: float | None) -> ev.Event:
    return ev.metric_event("r", task, step=step, loss=loss)


def starting(task: str) -> ev.Event:
    return ev.state_event("r", task, ev.STARTING)


def test_warn_matches_once_per_incarnation_and_no_retry_keeps_the_first_line() -> None:
    policies = LogPolicies([OOM, NCCL])
    assert policies.on_line("worker:0", "step 1 loss 0.5") == []
    assert policies.no_retry("worker:0") is None
    (warned,) = policies.on_line("worker:0", "NCCL WARN Call to connect returned Connection refused")
    assert warned.number == 2 and warned.warn_reason() == (
        'output matched "NCCL (WARN|error)": NCCL WARN Call to connect returned Connection refused')
    assert policies.on_line("worker:0", "NCCL error again") == []  # once per incarnation
    assert policies.on_line("worker:0", "  CUDA_ERROR_OUT_OF_MEMORY: out of memory  ") == []
    assert policies.on_line("worker:0", "CUDA_ERROR_OUT_OF_MEMORY: later") == []
    match = policies.no_retry("worker:0")
    assert match is not None and match.no_retry_reason() == (
        "output matched log policy 1 (CUDA_ERROR_OUT_OF_MEMORY): CUDA_ERROR_OUT_OF_MEMORY: out of memory")
    assert policies.no_retry("worker:1") is None  # per task
    policies.forget("worker:0")  # a new incarnation matches afresh
    assert policies.no_retry("worker:0") is None
    assert len(policies.on_line("worker:0", "NCCL error")) == 1


def test_a_long_line_is_clipped_in_the_reason() -> None:
    policies = LogPolicies([LogPolicy("boom", "warn")])
    (warned,) = policies.on_line("chief:0", "boom " + "x" * 5000)
    assert len(warned.line) == MAX_LINE_CHARS and warned.line.endswith("...")


def test_nan_loss_is_raised_at_the_first_nan_and_cleared_by_a_finite_loss() -> None:
    nan = NanLoss()
    assert nan.on_metric("worker:0", metric("worker:0", 5, 0.4)) is None
    assert nan.on_metric("worker:0", metric("worker:0", 6, float("nan"))) == (True, "loss is NaN since step 6")
    assert nan.on_metric("worker:0", metric("worker:0", 7, float("inf"))) is None  # still raised
    assert nan.on_metric("worker:0", metric("worker:0", 8, None)) is None  # a step alone clears nothing
    assert nan.on_metric("worker:0", metric("worker:0", 9, 0.3)) == (
        False, "loss is finite again: recovered at step 9")
    # a metric without a step: the task's last step; Inf and -Inf are named as such
    assert nan.on_metric("worker:0", metric("worker:0", None, float("inf"))) == (True, "loss is Inf since step 9")
    assert nan.on_metric("worker:1", metric("worker:1", None, float("-inf"))) == (True, "loss is -Inf")


def test_output_policy_conditions_stop_reason_and_incarnations() -> None:
    out = OutputPolicy("r", [OOM, LogPolicy("Traceback", "warn")], {"worker:0": "stop", "worker:1": "warn"})
    (raised,) = out.on_event(log("worker:1", "Traceback (most recent call last):"))
    assert raised.kind == ev.CONDITION and raised.get("condition") == ev.LOG_POLICY and raised.get("active")
    (nan1,) = out.on_event(metric("worker:1", 3, float("nan")))
    assert nan1.get("reason") == "loss is NaN since step 3" and out.stop_reason() is None  # on_nan = warn
    (nan0,) = out.on_event(metric("worker:0", 4, float("nan")))
    assert nan0.get("condition") == ev.NAN_LOSS
    assert out.stop_reason() == "worker:0 loss is NaN since step 4 (on_nan = stop)"
    assert out.stop_reason() is None  # told once
    out.on_event(log("worker:0", "CUDA_ERROR_OUT_OF_MEMORY"))
    assert out.no_retry("worker:0") == ("output matched log policy 1 (CUDA_ERROR_OUT_OF_MEMORY): "
                                        "CUDA_ERROR_OUT_OF_MEMORY")
    out.on_event(starting("worker:0"))  # the next incarnation starts clean
    assert out.no_retry("worker:0") is None
    assert len(out.on_event(metric("worker:0", 1, float("nan")))) == 1


def test_replay_rebuilds_matches_without_raising_again_or_stopping() -> None:
    history = [log("worker:0", "CUDA_ERROR_OUT_OF_MEMORY here"), metric("worker:0", 2, float("nan"))]
    out = OutputPolicy("r", [OOM], {"worker:0": "stop"})
    out.replay(history)
    assert out.no_retry("worker:0") is not None
    assert out.stop_reason() is None  # the stop was the last launcher's to make
    assert out.on_event(metric("worker:0", 3, float("nan"))) == []  # already raised


def test_log_policies_and_on_nan_are_read(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(GOOD_HEAD.replace('train.py"\n', 'train.py"\non_nan = "stop"\n', 1) + """
[roles.worker]
on_nan = "warn"
[roles.chief]

[[log_policies]]
pattern = "CUDA_ERROR_OUT_OF_MEMORY"
action = "no_retry"

[[log_policies]]
pattern = 'NCCL (WARN|error)'
action = "warn"
""", encoding="utf-8")
    profile = load_profile(path)
    assert profile.log_policies == (OOM, NCCL)
    assert profile.roles["worker"].settings.on_nan == "warn"
    assert profile.roles["chief"].settings.on_nan == "stop"


@pytest.mark.parametrize(("policy", "culprit", "says"), [
    ('pattern = "CUDA_(ERROR"\naction = "no_retry"', "log_policies[2].pattern",
     "bad regex: missing ), unterminated subpattern at position 5"),
    ('pattern = "x"', "log_policies[2]", "has no action"),
    ('pattern = "x"\naction = "retry"', "log_policies[2].action", '"retry" is not one of no_retry, warn'),
])
def test_a_bad_log_policy_is_one_line_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                policy: str, culprit: str, says: str) -> None:
    text = (GOOD_HEAD + "[roles.worker]\n\n[[log_policies]]\npattern = \"ok\"\naction = \"warn\"\n\n"
            f"[[log_policies]]\n{policy}\n")
    path, line = check_error(tmp_path, capsys, text)
    lines = text.splitlines()
    header = len(lines) - lines[::-1].index("[[log_policies]]")  # the second table's line
    key = culprit.rsplit(".", 1)[-1] if "." in culprit else None
    where = header if key is None else next(n for n in range(header, len(lines) + 1)
                                            if lines[n - 1].startswith(key))
    assert f"{path}:{where}: {culprit}: {says}" in line, line


def test_a_failure_every_restart_repeats_is_not_retried_even_without_log_policies() -> None:
    # Keras 3's fit under MultiWorkerMirroredStrategy: the signature row marked `repeats`
    policy = OutputPolicy("r", [], {})
    assert policy.on_event(log("worker:0", "Epoch 1/2")) == []
    assert policy.no_retry("worker:0") is None
    assert policy.on_event(log("worker:0", "ValueError: Attempt to convert a value (PerReplica:{")) == []
    assert policy.no_retry("worker:0") == (
        "restarting cannot help: Keras 3 cannot fit under a multi-worker strategy: set TF_USE_LEGACY_KERAS=1 "
        "in the tasks' env (tf_keras installed on every host)")
    assert policy.no_retry("worker:1") is None
    # a new incarnation starts clean; a [[log_policies]] no_retry match still wins over it
    policy.on_event(starting("worker:0"))
    assert policy.no_retry("worker:0") is None
    both = OutputPolicy("r", [OOM], {})
    both.on_event(log("worker:0", "ValueError: Attempt to convert a value (PerReplica:{"))
    both.on_event(log("worker:0", "CUDA_ERROR_OUT_OF_MEMORY"))
    assert (both.no_retry("worker:0") or "").startswith("output matched log policy 1")
