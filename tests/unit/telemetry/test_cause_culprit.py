"""Which peer a failure's cause names: a signature that can name the culprit beats one that cannot,
a specific peer row beats "lost contact", and what a stacks capture saw of the culprit's process is
added. The corpus is tests/data/causes/ (tests/data/causes/README.md says where each file is from)."""

from __future__ import annotations

from pathlib import Path

from launcher import events as ev
from launcher.agent.stackmodel import DISK_WAIT, RUNNING, STOPPED, UNKNOWN, TaskStacks
from launcher.telemetry.causes import (
    FAILURE_CONTEXT_LINES,
    STATE_EVIDENCE_SECONDS,
    OutputTails,
    PeerIndex,
    ProcState,
    cause_of,
    signature_cause,
    with_cause,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "causes"
MWMS = PeerIndex([("worker:0", "localhost", 41000), ("worker:1", "localhost", 41001),
                  ("worker:2", "localhost", 41002)])
PSS = PeerIndex([("ps:0", "localhost", 2222), ("worker:0", "localhost", 2223), ("chief:0", "localhost", 2224)])
HEARTBEATS = "lost contact with worker:1: it stopped sending heartbeats"


def corpus(name: str) -> list[str]:
    return (DATA / name).read_text().splitlines()


def test_a_frozen_mwms_peer_is_named_by_the_heartbeat_line_with_the_users_line() -> None:
    """TensorFlow 2.21's own output: worker:0 of tests/data/mwms_tutorial_loop.py, worker:1 SIGSTOPped."""
    cause = cause_of({"exit_code": 1}, corpus("mwms_frozen_peer.txt"), MWMS, "worker:0")
    assert (cause.text, cause.culprit) == (f"{HEARTBEATS} (UnavailableError at mwms_tutorial_loop.py:55)",
                                           "worker:1")


def test_the_generic_row_on_the_exception_line_does_not_hide_the_heartbeat_line_that_names_the_peer() -> None:
    """The issue's shape: the error reported by the task itself and a longer "Detected at node"
    list, so no task is named within 10 lines of the exception line; the heartbeat lines are."""
    lines = corpus("mwms_frozen_peer_leader.txt")
    exception = next(i for i, line in enumerate(lines) if line.startswith("tensorflow.python.framework"))
    alone = signature_cause(lines[:exception + 12], MWMS, "worker:0", "h", first=exception, since=exception)
    assert alone is not None and alone.text == "lost contact with a peer"  # what the exception line says alone
    cause = cause_of({"exit_code": 1}, lines, MWMS, "worker:0")
    assert (cause.text, cause.culprit) == (f"{HEARTBEATS} (UnavailableError at mwms_tutorial_loop.py:55)",
                                           "worker:1")


def test_the_culprits_of_the_heartbeat_line_are_the_tasks_listed_after_it_not_the_reporter() -> None:
    lines = ["UNAVAILABLE: Error reported from /job:worker/task:0: The following tasks are unhealthy "
             "(stopped sending heartbeats):", "/job:worker/replica:0/task:2", "The tasks have crashed."]
    cause = signature_cause(lines, MWMS, "worker:1", "h")
    assert cause is not None and (cause.text, cause.culprit) == (
        "lost contact with worker:2: it stopped sending heartbeats", "worker:2")
    same_line = ["UnavailableError: Error reported from /job:worker/task:0: The following tasks are unhealthy "
                 "(stopped sending heartbeats): /job:worker/task:2"]
    cause = signature_cause(same_line, MWMS, "worker:1", "h")
    assert cause is not None and cause.culprit == "worker:2"


def test_a_peer_row_that_names_no_one_yields_to_one_that_does_in_the_same_failure() -> None:
    named = "tensorflow.python.framework.errors_impl.UnavailableError: Socket closed (peer ipv4:127.0.0.1:2222)"
    filler = [f"step {i}" for i in range(20)]
    traceback = ["Traceback (most recent call last):", '  File "/home/u/train.py", line 9, in <module>',
                 "    step()", "tensorflow.python.framework.errors_impl.UnavailableError: Graph execution error:"]
    cause = cause_of({"exit_code": 1}, [named, *filler, *traceback], PSS, "chief:0")
    assert (cause.text, cause.culprit) == ("lost contact with ps:0 (UnavailableError at train.py:9)", "ps:0")
    # a line long before the failure (FAILURE_CONTEXT_LINES) is another story: it does not name this one's culprit
    old = ["step"] * (FAILURE_CONTEXT_LINES + 15)
    cause = cause_of({"exit_code": 1}, [named, *old, *traceback], PSS, "chief:0")
    assert (cause.text, cause.culprit) == ("lost contact with a peer (UnavailableError at train.py:9)", None)


def test_a_specific_signature_on_the_exception_line_is_not_displaced_by_peer_lines() -> None:
    lines = ["W0000 warning: Socket closed talking to ipv4:127.0.0.1:2222",
             "ModuleNotFoundError: No module named 'tensorflow_datasets'"]
    cause = signature_cause(lines, PSS, "chief:0", "gpu1", first=1)
    assert cause is not None and (cause.text, cause.culprit) == (
        "package tensorflow_datasets missing on host gpu1", None)


def stacks(task: str, state: str) -> TaskStacks:
    return TaskStacks(task, "local", 10, state)


def failed_worker0(tails: OutputTails, at: float) -> ev.Event:
    for line in corpus("mwms_frozen_peer.txt"):
        with_cause(ev.log_event("r", "worker:0", "stderr", line, ts=at - 1), tails, MWMS)
    return with_cause(ev.state_event("r", "worker:0", ev.FAILED, exit_code=1, reason="exit code 1", ts=at),
                      tails, MWMS)


def test_a_stopped_culprit_seen_by_a_stacks_capture_is_told_as_evidence() -> None:
    tails = OutputTails()
    tails.note_states([stacks("worker:0", "sleeping"), stacks("worker:1", STOPPED)], 1000.0)
    failed = failed_worker0(tails, 1008.0)
    assert failed.get("cause") == (f"{HEARTBEATS} (worker:1 was stopped, state T) "
                                   "(UnavailableError at mwms_tutorial_loop.py:55)")
    assert failed.get("culprit") == "worker:1"


def test_disk_wait_is_evidence_too_and_a_running_peer_is_not() -> None:
    lines = corpus("mwms_frozen_peer.txt")
    seen = {"worker:1": ProcState("D", 50.0)}
    assert "(worker:1 was in disk wait, state D)" in cause_of({"exit_code": 1}, lines, MWMS, "worker:0", seen,
                                                              60.0).text
    running = cause_of({"exit_code": 1}, lines, MWMS, "worker:0", {"worker:1": ProcState("R", 50.0)}, 60.0)
    assert "state" not in running.text


def test_evidence_is_dropped_when_old_or_of_an_earlier_incarnation_and_kept_when_a_host_did_not_answer() -> None:
    tails = OutputTails()
    tails.note_states([stacks("worker:1", DISK_WAIT)], 1000.0)
    tails.note_states([stacks("worker:1", UNKNOWN)], 1005.0)  # no answer: says nothing new
    assert tails.states["worker:1"] == ProcState("D", 1000.0)
    too_late = failed_worker0(tails, 1000.0 + STATE_EVIDENCE_SECONDS + 1)
    assert "state D" not in str(too_late.get("cause"))

    tails = OutputTails()
    tails.note_states([stacks("worker:1", STOPPED)], 1000.0)
    with_cause(ev.state_event("r", "worker:1", ev.STARTING, restarts=1, ts=1001.0), tails, MWMS)
    assert "worker:1" not in tails.states  # the stopped process was replaced
    tails.note_states([stacks("worker:1", STOPPED)], 1002.0)
    tails.note_states([stacks("worker:1", RUNNING)], 1003.0)  # continued since: the newest capture counts
    assert "was stopped" not in str(failed_worker0(tails, 1004.0).get("cause"))


def test_the_agents_samples_carry_a_stopped_peers_state_into_the_cause() -> None:
    """No stacks capture needed: every `sample` event says its task's process state."""
    tails = OutputTails()
    for n, letter in enumerate(("S", "R", "T", "T")):
        tails.add(ev.sample_event("r", "worker:1", cpu_percent=0.0, rss_bytes=1, proc_state=letter, ts=100.0 + n))
    for line in corpus("mwms_frozen_peer.txt"):
        tails.add(ev.log_event("r", "worker:0", "stderr", line, ts=104.0))
    failed = with_cause(ev.state_event("r", "worker:0", ev.FAILED, exit_code=1, ts=105.0), tails, MWMS)
    assert failed.get("cause") == (f"{HEARTBEATS} (worker:1 was stopped, state T) "
                                   "(UnavailableError at mwms_tutorial_loop.py:55)")


def test_a_later_sample_of_a_running_peer_withdraws_the_evidence() -> None:
    tails = OutputTails()
    tails.add(ev.sample_event("r", "worker:1", cpu_percent=0.0, rss_bytes=1, proc_state="T", ts=100.0))
    tails.add(ev.sample_event("r", "worker:1", cpu_percent=9.0, rss_bytes=1, proc_state="R", ts=101.0))
    for line in corpus("mwms_frozen_peer.txt"):
        tails.add(ev.log_event("r", "worker:0", "stderr", line, ts=102.0))
    failed = with_cause(ev.state_event("r", "worker:0", ev.FAILED, exit_code=1, ts=103.0), tails, MWMS)
    assert "state T" not in str(failed.get("cause"))
