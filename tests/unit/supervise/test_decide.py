"""The restart policy as a function (supervise/decide.py): tables of events and the decisions they
call for, on plans built from real profiles; no socket, process or clock."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from launcher import events as ev
from launcher.model import Plan
from launcher.plan import build_plan
from launcher.profile.reader import load_profile
from launcher.supervise.decide import (
    Decision,
    ForgetProgress,
    GiveUp,
    JobFacts,
    OutputStop,
    PolicyEvent,
    RestartGroup,
    RestartRequested,
    Stalled,
    Stop,
    StopRequested,
    Succeed,
    TaskEnded,
    TaskFacts,
    TrackCrashes,
    decide,
    out_of_restarts,
)
from launcher.supervise.lifecycle import RestartStage

PSS = {"ps": 2, "worker": 2, "chief": 1}
MWMS = {"worker": 3, "chief": 1, "evaluator": 1}


def _plan(tmp_path: Path, roles: dict[str, int], strategy: str = "parameter_server", role_keys: str = "",
          top: str = "") -> Plan:
    blocks = "".join(f"[roles.{role}]\nhosts = [\"local\"]\ncount = {n}\n{role_keys}\n" for role, n in roles.items())
    profile = tmp_path / "p.toml"
    profile.write_text(f'name = "decide"\nstrategy = "{strategy}"\n{top}\n[defaults]\ncommand = "true"\n'
                       f'workdir = "{tmp_path}"\n[hosts.local]\naddress = "localhost"\ntransport = "local"\n'
                       f"{blocks}")
    return build_plan(load_profile(profile))


def _job(plan: Plan, *, job_restarts: int = 0, job_state: str = ev.JOB_RUNNING, finishing: bool = False,
         **tasks: TaskFacts) -> JobFacts:
    """Every task running, except those given (keyword: the task id with ``_`` for ``:``)."""
    given = {key.replace("_", ":"): facts for key, facts in tasks.items()}
    return JobFacts({t.task_id: given.get(t.task_id, TaskFacts(ev.RUNNING)) for t in plan.tasks},
                    job_state, job_restarts, finishing)


def _failed(exit_code: int | None = 1, **kw: object) -> TaskFacts:
    return replace(TaskFacts(ev.FAILED, exit_code=exit_code), **kw)  # type: ignore[arg-type]


def _only(decisions: list[Decision]) -> list[Decision]:
    """The decisions less the crash bookkeeping."""
    return [d for d in decisions if not isinstance(d, TrackCrashes)]


# -- recovery follows the strategy (DESIGN.md section 6) ----------------------------------------------

@pytest.mark.parametrize(("strategy", "roles", "failed", "group"), [  # groups in the plan's (start) order
    ("parameter_server", PSS, "worker:1", ("worker:1",)),  # the coordinator re-dispatches its work
    ("parameter_server", PSS, "ps:1", ("ps:1", "chief:0")),  # the chief restores from its checkpoint
    ("parameter_server", PSS, "chief:0", ("chief:0",)),
    ("multi_worker_mirrored", MWMS, "worker:1", ("worker:1", "worker:0", "worker:2", "chief:0")),
    ("multi_worker_mirrored", MWMS, "chief:0", ("chief:0", "worker:0", "worker:1", "worker:2")),
    ("multi_worker_mirrored", MWMS, "evaluator:0", ("evaluator:0",)),
    ("custom", {"worker": 2}, "worker:0", ("worker:0",)),
])
def test_a_failure_restarts_the_strategys_group_after_the_first_backoff(
        tmp_path: Path, strategy: str, roles: dict[str, int], failed: str, group: tuple[str, ...]) -> None:
    plan = _plan(tmp_path, roles, strategy)
    job = _job(plan, **{failed.replace(":", "_"): _failed(1)})
    assert decide(plan, job, TaskEnded(failed, ev.FAILED)) == [
        TrackCrashes(failed, []),
        RestartGroup(failed, group, 1.0, "failed (exit code 1)"),
    ]


def test_members_already_restarting_are_left_out_of_the_group(tmp_path: Path) -> None:
    plan = _plan(tmp_path, MWMS, "multi_worker_mirrored")
    # the failed task's own restart ended with its failure; worker:2 is in another restart still
    job = _job(plan, worker_1=_failed(1, restart=RestartStage.UNDER_WAY),
               worker_2=TaskFacts(ev.RUNNING, restart=RestartStage.UNDER_WAY))
    restart = _only(decide(plan, job, TaskEnded("worker:1", ev.FAILED)))
    assert restart == [RestartGroup("worker:1", ("worker:1", "worker:0", "chief:0"), 1.0, "failed (exit code 1)")]


@pytest.mark.parametrize(("restarts", "delay"), [(0, 1.0), (1, 2.0), (2, 4.0), (3, 8.0), (4, 16.0), (5, 30.0)])
def test_the_backoff_doubles_with_the_tasks_restarts_up_to_its_ceiling(tmp_path: Path, restarts: int,
                                                                       delay: float) -> None:
    plan = _plan(tmp_path, {"worker": 1}, "custom", "max_restarts = 10", "backoff_limit = 20")
    job = _job(plan, worker_0=_failed(1, restarts=restarts))
    assert _only(decide(plan, job, TaskEnded("worker:0", ev.FAILED, reason="boom"))) == [
        RestartGroup("worker:0", ("worker:0",), delay, "failed (boom)")]


# -- restart policies per role ------------------------------------------------------------------------

@pytest.mark.parametrize(("policy", "exit_code", "restarted", "why"), [
    ("never", 1, False, "restart policy is never"),
    ("never", 137, False, "restart policy is never"),
    ("on-failure", 1, True, ""),
    ("on-failure", 137, True, ""),
    ("always", 1, True, ""),
    ("exit-code", 1, False, "exit code 1 is permanent under the exit-code policy (only >= 128 is retried)"),
    ("exit-code", 127, False, "exit code 127 is permanent"),
    ("exit-code", 137, True, ""),
    ("exit-code", 143, True, ""),
    ("exit-code", None, True, ""),  # no exit code: the agent or host was lost
])
def test_each_restart_policy_on_a_failure(tmp_path: Path, policy: str, exit_code: int | None, restarted: bool,
                                         why: str) -> None:
    plan = _plan(tmp_path, {"worker": 1}, "custom", f'restart = "{policy}"')
    decisions = _only(decide(plan, _job(plan, worker_0=_failed(exit_code)), TaskEnded("worker:0", ev.FAILED)))
    if restarted:
        assert [type(d) for d in decisions] == [RestartGroup]
    else:
        assert len(decisions) == 1 and isinstance(decisions[0], GiveUp)
        assert decisions[0].cause.startswith(f"worker:0 failed (exit code {exit_code}); not restarted: {why}")


@pytest.mark.parametrize(("policy", "expected"), [
    ("always", [RestartGroup("worker:1", ("worker:1",), 1.0, "exited 0 (restart policy always)")]),
    ("on-failure", []),
    ("never", []),
    ("exit-code", []),
])
def test_a_worker_that_exits_0_before_the_job_succeeded(tmp_path: Path, policy: str,
                                                        expected: list[Decision]) -> None:
    plan = _plan(tmp_path, {"worker": 2}, "custom", f'restart = "{policy}"')
    job = _job(plan, worker_1=TaskFacts(ev.SUCCEEDED, exit_code=0))
    assert decide(plan, job, TaskEnded("worker:1", ev.SUCCEEDED)) == expected


# -- max_restarts, backoff_limit, crash loops ---------------------------------------------------------

@pytest.mark.parametrize(("restarts", "job_restarts", "cause"), [
    (3, 0, "worker:0 failed (exit code 1) after 3 restarts (max_restarts = 3)"),
    (1, 5, "worker:0 failed (exit code 1); the job used all 5 restarts (backoff_limit)"),
])
def test_no_restarts_left_gives_up(tmp_path: Path, restarts: int, job_restarts: int, cause: str) -> None:
    plan = _plan(tmp_path, {"worker": 1}, "custom", "max_restarts = 3\nmin_uptime = 0", "backoff_limit = 5")
    job = _job(plan, job_restarts=job_restarts, worker_0=_failed(1, restarts=restarts))
    assert _only(decide(plan, job, TaskEnded("worker:0", ev.FAILED, uptime=60.0))) == [GiveUp(cause)]
    assert out_of_restarts(plan, job, "worker:0", "failed (exit code 1)") == cause


@pytest.mark.parametrize(("before", "uptime", "exit_code", "after", "gives_up"), [
    ([], 2.0, 1, [(1, 2.0)], False),
    ([(1, 1.0)], 2.0, 1, [(1, 1.0), (1, 2.0)], False),
    ([(1, 1.0), (1, 1.5)], 2.0, 1, [(1, 1.0), (1, 1.5), (1, 2.0)], True),  # third quick one: a crash loop
    ([(1, 1.0), (1, 1.5)], 2.0, 2, [(2, 2.0)], False),  # another exit code starts the run again
    ([(1, 1.0), (1, 1.5)], 30.0, 1, [], False),  # a slow failure ends the run
    ([(1, 1.0), (1, 1.5)], None, 1, [], False),  # started before this supervisor: uptime unknown
])
def test_quick_failures_are_tracked_and_three_make_a_crash_loop(
        tmp_path: Path, before: list[tuple[int | None, float]], uptime: float | None, exit_code: int,
        after: list[tuple[int | None, float]], gives_up: bool) -> None:
    plan = _plan(tmp_path, {"worker": 1}, "custom", "max_restarts = 10\nmin_uptime = 10")
    job = _job(plan, worker_0=_failed(exit_code, restarts=len(before), quick_failures=before))
    decisions = decide(plan, job, TaskEnded("worker:0", ev.FAILED, uptime=uptime))
    assert decisions[0] == TrackCrashes("worker:0", after)
    if gives_up:
        assert decisions[1] == GiveUp("crash loop: exit 1 within 2.0 s of start, 3 times (worker:0; min_uptime = 10 s)")
    else:
        assert isinstance(decisions[1], RestartGroup)


def test_every_allowed_attempt_quick_is_a_crash_loop(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"worker": 1}, "custom", "max_restarts = 1\nmin_uptime = 10")
    job = _job(plan, worker_0=_failed(1, restarts=1, quick_failures=[(1, 0.5)]))
    assert decide(plan, job, TaskEnded("worker:0", ev.FAILED, uptime=0.7))[1] == GiveUp(
        "crash loop: exit 1 within 0.7 s of start, 2 times (worker:0; min_uptime = 10 s)")


# -- failures no restart can fix, the down marker, what is no failure at all --------------------------

@pytest.mark.parametrize(("event", "facts", "expected"), [
    (TaskEnded("worker:0", ev.FAILED, reason="cannot chdir", permanent=True), _failed(126),
     [GiveUp("worker:0 failed (cannot chdir); not restarted: no restart can fix this")]),
    (TaskEnded("worker:0", ev.FAILED, no_retry="output matched log policy 1 (OOM): OOM!"), _failed(1),
     [GiveUp("worker:0 failed (exit code 1); not restarted: output matched log policy 1 (OOM): OOM!")]),
    (TaskEnded("worker:0", ev.STOPPED, down_requested=True), TaskFacts(ev.STOPPED),
     [GiveUp("stopped by `distlaunch down`")]),
    # stopped by the supervisor (a restart, a manual stop): not a failure
    (TaskEnded("worker:0", ev.FAILED), _failed(143, stop_asked=True), []),
    # in a group restart already scheduled (a chief crashing because its ps died)
    (TaskEnded("worker:0", ev.FAILED), _failed(1, restart=RestartStage.SCHEDULED), []),
])
def test_ends_that_are_decided_before_the_restart_policy(tmp_path: Path, event: TaskEnded, facts: TaskFacts,
                                                         expected: list[Decision]) -> None:
    plan = _plan(tmp_path, {"worker": 2}, "custom")
    assert _only(decide(plan, _job(plan, worker_0=facts), event)) == expected


def test_nothing_is_decided_once_the_job_is_finishing(tmp_path: Path) -> None:
    plan = _plan(tmp_path, PSS)
    job = _job(plan, finishing=True, ps_0=_failed(1), chief_0=TaskFacts(ev.SUCCEEDED, exit_code=0))
    events: list[PolicyEvent] = [TaskEnded("ps:0", ev.FAILED), TaskEnded("chief:0", ev.SUCCEEDED),
                                 RestartRequested("worker:0"), StopRequested("worker:0"), OutputStop("NaN"),
                                 Stalled("worker:1", "no step")]
    assert [decide(plan, job, e) for e in events] == [[]] * len(events)


# -- the success policy -------------------------------------------------------------------------------

@pytest.mark.parametrize(("roles", "policy", "succeeded", "ended", "expected"), [
    (PSS, "chief", ["chief:0"], "chief:0", [Succeed("chief:0 exited 0")]),
    ({"worker": 2}, "chief", ["worker:0"], "worker:0", [Succeed("worker:0 exited 0")]),
    ({"worker": 2}, "chief", ["worker:1"], "worker:1", []),  # worker:1 does not decide
    ({"worker": 2, "chief": 1}, "all_workers", ["chief:0", "worker:0"], "worker:0", []),
    ({"worker": 2, "chief": 1}, "all_workers", ["chief:0", "worker:0", "worker:1"], "worker:1",
     [Succeed("all workers exited 0")]),
])
def test_the_success_policy_ends_the_job(tmp_path: Path, roles: dict[str, int], policy: str, succeeded: list[str],
                                         ended: str, expected: list[Decision]) -> None:
    plan = _plan(tmp_path, roles, "custom", top=f'success_policy = "{policy}"')
    job = _job(plan, **{t.replace(":", "_"): TaskFacts(ev.SUCCEEDED, exit_code=0) for t in succeeded})
    assert decide(plan, job, TaskEnded(ended, ev.SUCCEEDED)) == expected


# -- stalls, output policies, the operator -------------------------------------------------------------

@pytest.mark.parametrize(("on_stall", "facts", "job_state", "job_restarts", "expected"), [
    ("restart", TaskFacts(ev.RUNNING), ev.JOB_RUNNING, 0,
     [ForgetProgress("worker:1"), RestartGroup("worker:1", ("worker:1",), 0.0, "stall: no step for 60 s")]),
    ("warn", TaskFacts(ev.RUNNING), ev.JOB_RUNNING, 0, []),
    ("restart", TaskFacts(ev.RUNNING, restart=RestartStage.UNDER_WAY), ev.JOB_RUNNING, 0, []),
    ("restart", TaskFacts(ev.RUNNING), ev.JOB_RESTARTING, 0, []),
    ("restart", TaskFacts(ev.RUNNING, restarts=2), ev.JOB_RUNNING, 0,
     [GiveUp("worker:1 stalled (no step for 60 s) after 2 restarts (max_restarts = 2)")]),
    ("restart", TaskFacts(ev.RUNNING), ev.JOB_RUNNING, 4,
     [GiveUp("worker:1 stalled (no step for 60 s); the job used all 4 restarts (backoff_limit)")]),
])
def test_a_stall_restarts_at_once_under_on_stall_restart(tmp_path: Path, on_stall: str, facts: TaskFacts,
                                                         job_state: str, job_restarts: int,
                                                         expected: list[Decision]) -> None:
    plan = _plan(tmp_path, PSS, role_keys=f'on_stall = "{on_stall}"\nmax_restarts = 2', top="backoff_limit = 4")
    job = _job(plan, job_state=job_state, job_restarts=job_restarts, worker_1=facts)
    assert decide(plan, job, Stalled("worker:1", "no step for 60 s")) == expected


def test_a_nan_loss_under_on_nan_stop_gives_up(tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"worker": 1}, "custom")
    assert decide(plan, _job(plan), OutputStop("worker:0 loss is NaN since step 6 (on_nan = stop)")) == [
        GiveUp("worker:0 loss is NaN since step 6 (on_nan = stop)")]


@pytest.mark.parametrize(("event", "facts", "expected"), [
    (RestartRequested("ps:0"), TaskFacts(ev.RUNNING),
     [RestartGroup("ps:0", ("ps:0", "chief:0"), 0.0, "restart requested")]),
    # no max_restarts for the operator's own restart
    (RestartRequested("ps:0"), TaskFacts(ev.RUNNING, restarts=9), [RestartGroup("ps:0", ("ps:0", "chief:0"), 0.0,
                                                                                "restart requested")]),
    (RestartRequested("ps:0"), TaskFacts(ev.RUNNING, restart=RestartStage.UNDER_WAY), []),
    (RestartRequested("nope:0"), TaskFacts(ev.RUNNING), []),
    (StopRequested("ps:0"), TaskFacts(ev.RUNNING), [Stop("ps:0")]),
    (StopRequested("ps:0"), TaskFacts(ev.FAILED), []),
    (StopRequested("nope:0"), TaskFacts(ev.RUNNING), []),
])
def test_the_operators_restart_and_stop(tmp_path: Path, event: PolicyEvent, facts: TaskFacts,
                                        expected: list[Decision]) -> None:
    plan = _plan(tmp_path, PSS, role_keys="max_restarts = 2")
    assert decide(plan, _job(plan, ps_0=facts), event) == expected


# -- a task that succeeded is never started again (issue 54 §3) ---------------------------------------

@pytest.mark.parametrize(("strategy", "roles", "event", "done", "cause"), [
    # worker:1 finished (it had resumed from a later checkpoint); worker:0 fails: restarting the
    # group would train worker:1 again, restarting worker:0 alone would wait for it for ever
    ("multi_worker_mirrored", {"worker": 2}, TaskEnded("worker:0", ev.FAILED), ["worker:1"],
     "worker:0 failed (exit code 1); not restarted: worker:1 already succeeded, and multi_worker_mirrored "
     "cannot go on without it (a task that succeeded is never started again)"),
    ("multi_worker_mirrored", MWMS, Stalled("chief:0", "no step for 60 s"), ["worker:1", "worker:2"],
     "chief:0 stall: no step for 60 s; not restarted: worker:1, worker:2 already succeeded, and "
     "multi_worker_mirrored cannot go on without them (a task that succeeded is never started again)"),
    ("multi_worker_mirrored", {"worker": 2}, RestartRequested("worker:0"), ["worker:1"],
     "worker:0 restart requested; not restarted: worker:1 already succeeded, and multi_worker_mirrored "
     "cannot go on without it (a task that succeeded is never started again)"),
])
def test_a_group_restart_never_starts_a_task_that_succeeded(
        tmp_path: Path, strategy: str, roles: dict[str, int], event: PolicyEvent, done: list[str],
        cause: str) -> None:
    plan = _plan(tmp_path, roles, strategy, 'restart = "on-failure"\non_stall = "restart"')
    facts = {t.replace(":", "_"): TaskFacts(ev.SUCCEEDED, exit_code=0) for t in done}
    if isinstance(event, TaskEnded):
        facts[event.task.replace(":", "_")] = _failed(1)
    decisions = _only(decide(plan, _job(plan, **facts), event))
    assert [d for d in decisions if isinstance(d, RestartGroup)] == []
    assert [d for d in decisions if isinstance(d, GiveUp)] == [GiveUp(cause)]


def test_a_group_without_a_succeeded_member_restarts_as_before_and_a_lone_task_may_still_run_again(
        tmp_path: Path) -> None:
    plan = _plan(tmp_path, {"worker": 2}, "custom")
    job = _job(plan, worker_0=_failed(1), worker_1=TaskFacts(ev.SUCCEEDED, exit_code=0))
    assert _only(decide(plan, job, TaskEnded("worker:0", ev.FAILED))) == [
        RestartGroup("worker:0", ("worker:0",), 1.0, "failed (exit code 1)")]
    # `restart = "always"` is the user's own wish to run a task that exited 0 again: kept
    always = _plan(tmp_path, {"worker": 2}, "custom", 'restart = "always"')
    assert decide(always, _job(always, worker_1=TaskFacts(ev.SUCCEEDED, exit_code=0)),
                  TaskEnded("worker:1", ev.SUCCEEDED)) == [
        RestartGroup("worker:1", ("worker:1",), 1.0, "exited 0 (restart policy always)")]
