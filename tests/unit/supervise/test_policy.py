"""Restart and success policies (DESIGN.md section 6) as pure functions."""

from __future__ import annotations

import itertools

import pytest

from launcher.model import RESTART_POLICIES, RestartPolicy, TaskSpec
from launcher.supervise.policy import (
    BACKOFF_FIRST,
    BACKOFF_MAX,
    backoff_delay,
    crash_loop_reason,
    deciding_task,
    job_succeeded,
    quick_failures_after,
    restart_group,
    wants_restart,
    why_not_restarted,
)

PS_JOB = ["ps:0", "ps:1", "worker:0", "worker:1", "chief:0", "evaluator:0"]


WANTS_RESTART: list[tuple[RestartPolicy, int | None, bool, bool]] = [
    ("never", 1, False, False),
    ("never", 137, False, False),
    ("never", 0, True, False),
    ("on-failure", 1, False, True),
    ("on-failure", 137, False, True),
    ("on-failure", 0, True, False),
    ("always", 0, True, True),
    ("always", 1, False, True),
    ("exit-code", 1, False, False),
    ("exit-code", 3, False, False),
    ("exit-code", 127, False, False),
    ("exit-code", 128, False, True),
    ("exit-code", 137, False, True),
    ("exit-code", 143, False, True),
    ("exit-code", None, False, True),  # no exit code at all: the agent or host was lost, so retry
    ("exit-code", 0, True, False),
]


@pytest.mark.parametrize(("policy", "exit_code", "succeeded", "expected"), WANTS_RESTART)
def test_wants_restart_follows_each_policy(policy: RestartPolicy, exit_code: int | None, succeeded: bool,
                                           expected: bool) -> None:
    assert wants_restart(policy, exit_code, succeeded) is expected


@pytest.mark.parametrize("policy", RESTART_POLICIES)
def test_every_restart_policy_has_a_rule_and_rows_in_the_table_above(policy: RestartPolicy) -> None:
    """A value added to model.RestartPolicy needs its rule in wants_restart and its rows here."""
    for exit_code, succeeded in ((0, True), (1, False), (137, False), (None, False)):
        assert isinstance(wants_restart(policy, exit_code, succeeded), bool)
    assert policy in {row[0] for row in WANTS_RESTART}, f"add {policy!r} rows to WANTS_RESTART"
    assert why_not_restarted(policy, 1)


def test_a_policy_without_a_rule_is_an_error_not_a_quiet_no() -> None:
    with pytest.raises(ValueError, match="'sometimes' has no rule"):
        wants_restart("sometimes", 1, False)  # type: ignore[arg-type]


def test_why_not_restarted_names_the_policy_and_the_permanent_code() -> None:
    assert "never" in why_not_restarted("never", 1)
    reason = why_not_restarted("exit-code", 3)
    assert "exit code 3" in reason and "permanent" in reason and "128" in reason


def test_backoff_starts_at_one_second_doubles_and_is_capped() -> None:
    delays = [backoff_delay(n) for n in range(10)]
    assert delays[:5] == [BACKOFF_FIRST, 2.0, 4.0, 8.0, 16.0]
    assert all(b >= a for a, b in itertools.pairwise(delays))
    assert max(delays) == BACKOFF_MAX == delays[-1]
    assert backoff_delay(-3) == BACKOFF_FIRST
    assert backoff_delay(10_000) == BACKOFF_MAX  # no float overflow for a task restarted very often


def test_parameter_server_ps_restarts_with_the_chief() -> None:
    assert restart_group("parameter_server", "ps:1", PS_JOB) == ["ps:1", "chief:0"]


@pytest.mark.parametrize("failed", ["worker:1", "chief:0", "evaluator:0"])
def test_parameter_server_worker_chief_and_evaluator_restart_alone(failed: str) -> None:
    assert restart_group("parameter_server", failed, PS_JOB) == [failed]


def test_parameter_server_ps_without_chief_restarts_alone() -> None:
    assert restart_group("parameter_server", "ps:0", ["ps:0", "worker:0"]) == ["ps:0"]


@pytest.mark.parametrize("failed", ["worker:1", "worker:0", "chief:0"])
def test_multi_worker_mirrored_restarts_the_whole_worker_group(failed: str) -> None:
    ids = ["chief:0", "worker:0", "worker:1", "evaluator:0"]
    group = restart_group("multi_worker_mirrored", failed, ids)
    assert group[0] == failed
    assert sorted(group) == ["chief:0", "worker:0", "worker:1"]
    assert len(group) == len(set(group))


def test_multi_worker_mirrored_evaluator_restarts_alone() -> None:
    assert restart_group("multi_worker_mirrored", "evaluator:0", ["worker:0", "evaluator:0"]) == ["evaluator:0"]


def test_custom_strategy_restarts_the_task_alone() -> None:
    assert restart_group("custom", "ps:0", PS_JOB) == ["ps:0"]
    assert restart_group("custom", "worker:0", PS_JOB) == ["worker:0"]


def test_deciding_task_is_the_chief_else_worker_zero() -> None:
    assert deciding_task(PS_JOB) == "chief:0"
    assert deciding_task(["ps:0", "worker:1", "worker:0"]) == "worker:0"
    assert deciding_task(["ps:0", "evaluator:0"]) is None


def test_chief_policy_succeeds_on_the_deciding_task_alone() -> None:
    states = {"ps:0": "running", "worker:0": "running", "chief:0": "succeeded"}
    assert job_succeeded("chief", states)
    assert not job_succeeded("chief", {**states, "chief:0": "running"})
    assert not job_succeeded("chief", {**states, "chief:0": "failed"})
    no_chief = {"ps:0": "running", "worker:0": "succeeded", "worker:1": "running"}
    assert job_succeeded("chief", no_chief)
    assert not job_succeeded("chief", {"ps:0": "succeeded"})


def test_all_workers_policy_waits_for_every_worker_and_the_chief() -> None:
    states = {"ps:0": "running", "worker:0": "succeeded", "worker:1": "running", "chief:0": "succeeded"}
    assert not job_succeeded("all_workers", states)
    assert job_succeeded("all_workers", {**states, "worker:1": "succeeded"})
    assert not job_succeeded("all_workers", {"ps:0": "succeeded"})


def _spec(max_restarts: int = 10, min_uptime: float = 10.0) -> TaskSpec:
    return TaskSpec(task_id="worker:0", role="worker", index=0, host="h", address="h", port=None, gpus=(),
                    command="exit 3", python="python3", workdir="/", env={}, restart="on-failure",
                    max_restarts=max_restarts, grace_seconds=1.0, in_cluster=True, min_uptime=min_uptime)


def test_quick_failures_grow_restart_with_another_code_and_end_with_a_slow_one() -> None:
    quick = quick_failures_after([], 3, 0.2, 10.0)
    quick = quick_failures_after(quick, 3, 0.4, 10.0)
    assert quick == [(3, 0.2), (3, 0.4)]
    assert quick_failures_after(quick, 1, 0.1, 10.0) == [(1, 0.1)]
    assert quick_failures_after(quick, 3, 10.0, 10.0) == []
    assert quick_failures_after(quick, 3, 0.1, 0.0) == []  # min_uptime 0: never a crash loop


def test_crash_loop_after_three_quick_failures_or_every_allowed_attempt() -> None:
    assert crash_loop_reason(_spec(), [(3, 0.2), (3, 0.4)], restarts=1) is None
    reason = crash_loop_reason(_spec(), [(3, 0.2), (3, 0.4), (3, 0.3)], restarts=2)
    assert reason == "crash loop: exit 3 within 0.4 s of start, 3 times (worker:0; min_uptime = 10 s)"
    # max_restarts = 1: both attempts it had were quick failures
    assert crash_loop_reason(_spec(max_restarts=1), [(3, 0.2), (3, 0.4)], restarts=1) is not None
    # a single attempt is not a loop
    assert crash_loop_reason(_spec(max_restarts=0), [(3, 0.2)], restarts=0) is None
