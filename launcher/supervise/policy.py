"""Restart and success policies (DESIGN.md section 6), as pure functions of task facts."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from launcher.model import RestartPolicy, Strategy, SuccessPolicy, TaskSpec

#: first back-off delay and its ceiling, in seconds; the delay doubles with each restart
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 30.0
#: quick failures in a row (each within min_uptime of start, same exit code) that make a crash loop
CRASH_LOOP_STARTS = 3

#: (exit code, seconds from start to failure) of a task's latest failures, oldest first
QuickFailures = list[tuple[int | None, float]]


def wants_restart(policy: RestartPolicy, exit_code: int | None, succeeded: bool) -> bool:
    """Does the task's own policy ask for a restart after it ended this way? (``exit_code`` None:
    killed by a signal.) Every value of ``RestartPolicy`` is answered here; another is a ValueError."""
    if policy == "always":
        return True
    if policy == "never" or succeeded:
        return False
    if policy == "on-failure":
        return True
    if policy == "exit-code":
        # killed by a signal (OOM killer, preemption, kill -9) is retryable; 1-127 is the script's verdict
        return exit_code is None or exit_code >= 128
    raise ValueError(f"restart policy {policy!r} has no rule in wants_restart")


def why_not_restarted(policy: RestartPolicy, exit_code: int | None) -> str:
    if policy == "never":
        return "restart policy is never"
    if policy == "exit-code":
        return f"exit code {exit_code} is permanent under the exit-code policy (only >= 128 is retried)"
    return f"restart policy {policy}"


def backoff_delay(restarts_so_far: int) -> float:
    """Seconds to wait before the next restart: 1, 2, 4, ... up to BACKOFF_MAX."""
    # the exponent is capped so that a task with a huge max_restarts cannot overflow a float
    exponent = min(max(restarts_so_far, 0), 64)
    return float(min(BACKOFF_FIRST * (2 ** exponent), BACKOFF_MAX))


def restart_group(strategy: Strategy, failed: str, task_ids: Iterable[str]) -> list[str]:
    """The tasks restarted together when ``failed`` fails, as TensorFlow's recovery needs.

    parameter_server: a worker or the chief alone; a ps together with the chief (which restores
    from its checkpoint). multi_worker_mirrored: the whole worker group (chief included), since
    collectives cannot continue with a missing peer. custom: the task alone.
    """
    ids = list(task_ids)
    role = failed.split(":", 1)[0]
    if strategy == "parameter_server" and role == "ps":
        return [failed] + [t for t in ids if t.startswith("chief:")]
    if strategy == "multi_worker_mirrored" and role in ("worker", "chief"):
        return [failed] + [t for t in ids if t != failed and t.split(":", 1)[0] in ("worker", "chief")]
    return [failed]


def deciding_task(task_ids: Iterable[str]) -> str | None:
    """chief:0, or worker:0 when there is no chief (the first worker left, where the workers
    shrank after a host was lost: TF_CONFIG numbers it 0, so it is the one that saves)."""
    ids = set(task_ids)
    if "chief:0" in ids:
        return "chief:0"
    workers = sorted((t for t in ids if t.startswith("worker:")), key=lambda t: int(t.split(":", 1)[1]))
    return workers[0] if workers else None


def job_succeeded(policy: SuccessPolicy, states: Mapping[str, str]) -> bool:
    """Has the job succeeded, given every task's current state?"""
    if policy == "all_workers":
        # a worker the job went on without (its host lost, the role shrank in place) is not waited for
        deciders = [t for t in states if t.split(":", 1)[0] in ("worker", "chief") and states[t] != "lost"]
        return bool(deciders) and all(states[t] == "succeeded" for t in deciders)
    decider = deciding_task(states)
    return decider is not None and states.get(decider) == "succeeded"


def quick_failures_after(quick: QuickFailures, exit_code: int | None, uptime: float,
                         min_uptime: float) -> QuickFailures:
    """The run of quick failures with one exit code, after one more failure: it grows when this
    one was quick with the same code, starts over with another code, and ends with a slow one."""
    if uptime >= min_uptime:
        return []
    if quick and quick[-1][0] != exit_code:
        return [(exit_code, uptime)]
    return [*quick, (exit_code, uptime)]


def crash_loop_reason(spec: TaskSpec, quick: QuickFailures, restarts: int) -> str | None:
    """A crash loop (supervisord's startsecs, Kubernetes' CrashLoopBackOff): CRASH_LOOP_STARTS quick
    failures in a row, or every attempt the task was allowed (at least two) quick; else None."""
    n = len(quick)
    every_allowed = n >= 2 and n == restarts + 1 and restarts >= spec.max_restarts
    if n < CRASH_LOOP_STARTS and not every_allowed:
        return None
    longest = max(uptime for _, uptime in quick)
    return (f"crash loop: exit {quick[-1][0]} within {longest:.1f} s of start, {n} times "
            f"({spec.task_id}; min_uptime = {spec.min_uptime:g} s)")
