"""A Slurm job's requeue and time limit, on the supervisor's side (launcher/supervise/slurmlife.py):
which SIGTERM is a requeue, when the time limit acts, and the record a requeue leaves. Slurm's
answers are given (the real cluster: tests/integration/test_slurm_requeue.py)."""

from __future__ import annotations

import threading
from typing import Any

from launcher.runstate import RunState, SlurmJobRecord
from launcher.supervise.slurmlife import Requeue, SlurmJob, TimeLimit, requeue_reason
from launcher.transport.slurmqueue import JobRestarts, SlurmJobInfo, parse_show_job, parse_squeue_line


def _answer(state: str, reason: str = "", end: float | None = None, start: float | None = None) -> Any:
    def ask(job_id: str, **_: Any) -> SlurmJobInfo:
        return SlurmJobInfo(job_id, state, reason, start_time=start, end_time=end)
    return ask


def _restarts(state: str, count: int, reason: str = "", preempted: bool = False) -> Any:
    def ask(job_id: str, **_: Any) -> JobRestarts:
        return JobRestarts(state, count, reason, preempted)
    return ask


def test_a_sigterm_is_a_requeue_only_when_slurm_counts_one_more_restart() -> None:
    job = SlurmJob("41", submitted=True)
    # Slurm 22.05: a requeued job is COMPLETING (then PENDING) at once, its Restarts one up
    assert requeue_reason(job, 0, _restarts("COMPLETING", 1)) == Requeue("Slurm requeued job 41")
    assert requeue_reason(job, 1, _restarts("PENDING", 2, "BeginTime")) == Requeue("Slurm requeued job 41 (BeginTime)")
    assert requeue_reason(job, 0, _restarts("REQUEUED", 1, "JobHeldAdmin")) == \
        Requeue("Slurm requeued job 41 (JobHeldAdmin)")
    assert requeue_reason(job, 1, _restarts("COMPLETING", 1)) is None  # a requeue the run knows: this is a cancel
    for state in ("RUNNING", "CANCELLED"):
        assert requeue_reason(job, 0, _restarts(state, 1)) is None, state
    assert requeue_reason(job, 0, lambda *_, **__: None) is None  # no answer: a stop, as ever
    # preempted with a grace time: still RUNNING, the count goes up once the grace is over
    # (the supervisor asks for the requeue itself once the tasks stopped: a batch script ending in the
    # grace would end the job, not requeue it)
    assert requeue_reason(job, 0, _restarts("RUNNING", 0, preempted=True)) == \
        Requeue("Slurm preempted job 41 to requeue it", preempted=True)
    # a job started by hand (salloc, a batch script written by `export sbatch`) would start a new run
    assert requeue_reason(SlurmJob("41"), 0, _restarts("COMPLETING", 1)) is None


def test_scontrol_show_job_is_read_for_its_state_and_restarts() -> None:
    line = ("JobId=41 JobName=it UserId=root(0) Priority=1 Reason=BeginTime Dependency=(null) Requeue=1 "
            "Restarts=2 BatchFlag=1 JobState=PENDING Comment=distlaunch-run:x")
    assert parse_show_job(line) == JobRestarts("PENDING", 2, "BeginTime")
    assert parse_show_job("slurm_load_jobs error: Invalid job id specified") is None
    preempting = "JobState=RUNNING Reason=None Requeue=1 Restarts=0 PreemptEligibleTime=2031-01-01T00:00:00 " \
                 "PreemptTime=2031-01-01T00:05:00"
    assert parse_show_job(preempting) == JobRestarts("RUNNING", 0, "", True)
    assert not parse_show_job(preempting.replace("Requeue=1", "Requeue=0")).preempted  # type: ignore[union-attr]
    assert not parse_show_job(line + " PreemptTime=None").preempted  # type: ignore[union-attr]


def test_the_time_limit_acts_once_its_margin_before_slurms_end() -> None:
    said: list[str] = []
    done = threading.Event()
    now = [1000.0]
    limit = TimeLimit(SlurmJob("7"), 60.0, said.append, done, ask=_answer("RUNNING", end=1100.0),
                      clock=lambda: now[0])
    waits: list[float] = []

    class Clocked(threading.Event):
        def wait(self, timeout: float | None = None) -> bool:
            waits.append(timeout or 0.0)
            now[0] += timeout or 0.0
            return False

    limit.done = Clocked()
    limit.watch()
    assert waits == [40.0] and len(said) == 1  # 1100 - 60 - 1000
    assert said[0].startswith("time limit: Slurm ends job 7 at ") and said[0].endswith(", 60 s from now")


def test_a_margin_as_long_as_the_whole_limit_is_said_and_never_acted_on() -> None:
    said: list[str] = []
    notices: list[str] = []
    limit = TimeLimit(SlurmJob("7"), 300.0, said.append, threading.Event(),
                      ask=_answer("RUNNING", start=1000.0, end=1240.0), clock=lambda: 1001.0,
                      on_notice=notices.append)
    limit.done = type("Once", (threading.Event,), {"wait": lambda self, timeout=None: self.set() or True})()
    limit.watch()
    assert said == [] and len(notices) == 1
    assert notices[0] == ("time_limit_margin_seconds (300) is not less than job 7's whole time limit (240 s): "
                          "nothing acts before the limit")


def test_a_job_without_a_limit_is_asked_again_and_never_acted_on() -> None:
    said: list[str] = []
    asked = []

    def ask(job_id: str, **_: Any) -> SlurmJobInfo:
        asked.append(job_id)
        if len(asked) == 3:
            limit.done.set()
        return SlurmJobInfo(job_id, "RUNNING")  # squeue's %e: UNLIMITED

    limit = TimeLimit(SlurmJob("7"), 60.0, said.append, threading.Event(), ask=ask)
    limit.done = type("Quick", (threading.Event,), {"wait": lambda self, timeout=None: self.is_set()})()
    limit.watch()
    assert said == [] and len(asked) == 3


def test_squeue_end_time_is_read_and_unlimited_is_none() -> None:
    info = parse_squeue_line("9", "RUNNING|None|2031-05-01T14:02:11|node7|2031-05-01T16:02:11")
    assert info.end_time is not None and info.start_time is not None and info.end_time - info.start_time == 7200
    assert parse_squeue_line("9", "RUNNING|None|2031-05-01T14:02:11|node7|NONE").end_time is None


def test_a_requeued_event_is_read_back_as_one() -> None:
    from launcher import events as ev

    line = ev.requeued_event("r", "41", "Slurm requeued job 41", 1, "node3").to_json()
    back = ev.Event.from_json(line)
    assert isinstance(back, ev.RequeuedEvent) and back.requeues == 1 and back.node == "node3"


def test_a_requeue_count_survives_state_json() -> None:
    state = RunState(run_id="r", slurm=SlurmJobRecord("41", 1.0, None, None, requeues=2))
    again = RunState.from_json(state.to_json())
    assert again.slurm is not None and again.slurm.requeues == 2 and again.awaiting_slurm


class _Sup:
    """What SlurmLife uses of the supervisor: its loop is this thread's queue."""

    def __init__(self) -> None:
        import queue

        self.run_id = "r"
        self.slurm_job: SlurmJobRecord | None = SlurmJobRecord("41", 1.0, "n1", None)
        self.outcome: str | None = None
        self.finished: list[tuple[str, str]] = []
        self.published: list[Any] = []
        self.calls: queue.Queue[Any] = queue.Queue()
        self.finishing = False

    def call(self, fn: Any) -> None:
        self.calls.put(fn)

    def run_one(self) -> None:
        self.calls.get(timeout=10)()

    def finish(self, state: str, reason: str) -> None:
        self.finished.append((state, reason))
        self.finishing = True

    def publish(self, event: Any, line: str | None = None) -> None:
        self.published.append(event)


def test_an_end_of_a_submitted_run_waits_for_slurms_word_and_a_requeue_wins(monkeypatch: Any) -> None:
    from launcher.supervise import slurmlife

    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    monkeypatch.setattr(slurmlife, "requeue_reason", lambda job, known: Requeue("Slurm requeued job 41"))
    sup = _Sup()
    life = slurmlife.SlurmLife(sup)  # type: ignore[arg-type]
    assert life.holds("Failed", "host n1 lost: the allocation ended") and life.asking
    assert life.holds("Stopped", "stopped by SIGTERM")  # the same cause, told twice: still one question
    sup.run_one()  # Slurm's word, on the loop
    assert not life.asking and life.requeued == "Slurm requeued job 41"
    assert sup.finished == [("Restarting", "Slurm requeued job 41: the run goes on when the job runs again")]
    assert [e.kind for e in sup.published] == ["requeued"] and sup.published[0].requeues == 1
    state = RunState(run_id="r", supervisor_pid=9, slurm=sup.slurm_job)
    assert life.recorded(state) is state  # not before the supervisor closes: the next allocation would take it
    sup.outcome = "Restarting"
    waiting = life.recorded(state)
    assert waiting.awaiting_slurm and waiting.slurm is not None and waiting.slurm.requeues == 1
    assert waiting.slurm.node is None and waiting.job_reason.startswith("Slurm requeued job 41; waiting")


def test_without_a_requeue_the_first_end_goes_through_and_success_never_waits(monkeypatch: Any) -> None:
    from launcher.supervise import slurmlife

    monkeypatch.setattr(slurmlife, "requeue_reason", lambda job, known: None)
    sup = _Sup()
    life = slurmlife.SlurmLife(sup)  # type: ignore[arg-type]
    assert not life.holds("Succeeded", "chief:0 exited 0")
    assert life.holds("Stopped", "stopped by `distlaunch down`")
    sup.run_one()
    assert sup.finished == [("Stopped", "stopped by `distlaunch down`")] and life.requeued is None
    assert not life.holds("Failed", "later")  # asked once: the end is decided from here on
    sup.slurm_job = None
    assert not slurmlife.SlurmLife(sup).holds("Failed", "not a submitted run")  # type: ignore[arg-type]


def test_a_task_failure_of_a_submitted_run_is_judged_after_slurms_word(monkeypatch: Any) -> None:
    """Slurm's SIGTERM at a preemption reaches the task's step first: its failure is not judged
    (no restart counted) until Slurm answered; a preemption then requeues the job, asked of Slurm by
    the supervisor once the tasks stopped; a plain failure is judged as ever."""
    from launcher.supervise import slurmlife

    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    answers = [Requeue("Slurm preempted job 41 to requeue it", preempted=True)]
    monkeypatch.setattr(slurmlife, "requeue_reason", lambda job, known: answers[0])
    requeued: list[str] = []
    monkeypatch.setattr(slurmlife.slurmqueue, "requeue", lambda job, cluster=None: requeued.append(job))
    sup = _Sup()
    life = slurmlife.SlurmLife(sup)  # type: ignore[arg-type]
    judged: list[str] = []
    assert life.holds_failure(lambda: judged.append("chief:0")) and life.asking
    sup.run_one()
    assert judged == [] and sup.finished[0][0] == "Restarting" and sup.published == []  # told at close
    sup.outcome = "Restarting"
    assert life.closing("Restarting") == "Restarting" and requeued == ["41"]
    assert [e.kind for e in sup.published] == ["requeued"]

    answers[0] = None  # type: ignore[call-overload]
    sup = _Sup()
    life = slurmlife.SlurmLife(sup)  # type: ignore[arg-type]
    assert life.holds_failure(lambda: judged.append("worker:0"))
    sup.run_one()
    assert judged == ["worker:0"] and sup.finished == []  # Slurm keeps the job: the policy decides
    assert life.holds_failure(lambda: judged.append("worker:0 again"))  # a later failure asks again


def test_a_preemptions_requeue_refused_in_its_grace_leaves_the_run_waiting(monkeypatch: Any) -> None:
    """`scontrol requeue` refused (or late) while the job is still in its preemption grace: Slurm
    requeues it at the grace's end all the same, so the run waits for it, never Stopped for good."""
    from launcher.supervise import slurmlife

    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    preempted = Requeue("Slurm preempted job 41 to requeue it", preempted=True)
    monkeypatch.setattr(slurmlife, "requeue_reason", lambda job, known: preempted)
    monkeypatch.setattr(slurmlife.slurmqueue, "requeue", lambda job, cluster=None: "did not finish: timed out")
    sup = _Sup()
    life = slurmlife.SlurmLife(sup)  # type: ignore[arg-type]
    assert life.holds_failure(lambda: None)
    sup.run_one()
    sup.outcome = "Restarting"
    assert life.closing("Restarting") == "Restarting" and life.requeued is not None
    assert [e.kind for e in sup.published] == ["requeued"]
    monkeypatch.setattr(slurmlife, "requeue_reason", lambda job, known: None)  # Slurm keeps no requeue
    sup = _Sup()
    life = slurmlife.SlurmLife(sup)  # type: ignore[arg-type]
    life.requeue("time limit: Slurm ends job 41 at 12:00:00", by_us=True)
    sup.ended = lambda state, reason: None  # type: ignore[attr-defined]
    assert life.closing("Restarting") == "Stopped" and life.requeued is None
