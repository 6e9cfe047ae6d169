"""A failed incarnation's cause from its state event and its output, and the root cause it makes."""

from __future__ import annotations

from launcher import events as ev
from launcher.telemetry.causes import OutputTails, PeerIndex, cause_of, exit_cause, last_traceback, with_cause
from launcher.telemetry.jobview import JobView

PEERS = PeerIndex([("ps:0", "localhost", 2222), ("worker:0", "localhost", 2223), ("chief:0", "localhost", 2224)])

MEMORY_ERROR = """Traceback (most recent call last):
  File "/home/u/job/oom.py", line 3, in <module>
    x = bytearray(10 ** 10)
        ^^^^^^^^^^^^^^^^^^^
MemoryError""".splitlines()

TF_UNAVAILABLE = """Traceback (most recent call last):
  File "/home/u/job/train.py", line 80, in <module>
    main()
  File "/home/u/job/train.py", line 71, in main
    coordinator.join()
  File "/usr/lib/python3/dist-packages/tensorflow/python/distribute/coordinator/cluster_coordinator.py", line 1, in join
    raise e
tensorflow.python.framework.errors_impl.UnavailableError: Socket closed
Additional GRPC error information from remote target /job:ps/replica:0/task:0 while calling /EagerService/Enqueue:
:{"created":"@1700000000.0","description":"Error received from peer ipv4:127.0.0.1:2222"}""".splitlines()


def test_the_last_traceback_names_the_exception_and_the_innermost_frame_of_the_users_code() -> None:
    tb = last_traceback(["noise", *MEMORY_ERROR])
    assert tb is not None and (tb.exc_type, tb.message, tb.where) == ("MemoryError", "", "oom.py:3")
    tf = last_traceback(TF_UNAVAILABLE)
    assert tf is not None and (tf.exc_type, tf.message, tf.where) == ("UnavailableError", "Socket closed",
                                                                     "train.py:71")
    assert last_traceback(["Traceback (most recent call last):", '  File "a.py", line 1, in <module>']) is None


def test_cause_in_order_sigkill_then_signature_then_traceback_then_exit() -> None:
    assert cause_of({"exit_code": 1, "reason": "exit code 1"}, MEMORY_ERROR, PEERS, "worker:0").text == \
        "MemoryError at oom.py:3"
    lost = cause_of({"exit_code": 1}, TF_UNAVAILABLE, PEERS, "chief:0")
    assert (lost.text, lost.culprit) == ("lost contact with ps:0 (UnavailableError at train.py:71)", "ps:0")
    killed = cause_of({"exit_code": 137, "signal": "SIGKILL", "oom_kill": False}, TF_UNAVAILABLE, PEERS, "chief:0")
    assert (killed.text, killed.culprit) == ("killed by SIGKILL (not by distlaunch)", None)
    assert cause_of({"exit_code": 3, "reason": "exit code 3"}, ["just a line"], PEERS, "worker:0").text == \
        "exit code 3"


def test_the_exit_as_the_host_saw_it() -> None:
    assert exit_cause({"signal": "SIGKILL", "oom_kill": True, "peak_rss_bytes": int(11.2 * 2**30)}) == \
        "killed by the kernel OOM killer (peak RSS 11.2 GiB)"
    assert exit_cause({"signal": "SIGKILL", "oom_kill": True}) == "killed by the kernel OOM killer"
    assert exit_cause({"signal": "SIGSEGV", "exit_code": 139}) == "killed by SIGSEGV"
    assert exit_cause({"exit_code": 2}) == "exit code 2"


def test_the_cause_sees_only_the_failed_incarnations_output() -> None:
    tails = OutputTails()
    with_cause(ev.state_event("r", "worker:0", ev.STARTING, restarts=0), tails, PEERS)
    for line in MEMORY_ERROR:
        with_cause(ev.log_event("r", "worker:0", "stderr", line), tails, PEERS)
    with_cause(ev.state_event("r", "worker:0", ev.STARTING, restarts=1), tails, PEERS)
    with_cause(ev.log_event("r", "worker:0", "stderr", "ValueError: nope"), tails, PEERS)
    failed = with_cause(ev.state_event("r", "worker:0", ev.FAILED, exit_code=4, reason="exit code 4"), tails, PEERS)
    assert failed.get("cause") == "exit code 4"
    running = ev.state_event("r", "worker:0", ev.RUNNING)
    assert with_cause(running, tails, PEERS) is running  # only failures get a cause


def test_the_root_cause_points_at_the_culprit_not_at_the_first_to_notice() -> None:
    tails = OutputTails()
    for line in TF_UNAVAILABLE:
        with_cause(ev.log_event("r", "chief:0", "stderr", line), tails, PEERS)
    view = JobView()
    view.apply(with_cause(ev.state_event("r", "chief:0", ev.FAILED, exit_code=1, reason="exit code 1"),
                          tails, PEERS))
    view.apply(ev.job_event("r", ev.JOB_FAILED, "chief:0 failed"))
    assert view.tasks["chief:0"].culprit == "ps:0"
    assert view.failure_cause.startswith("ps:0 (chief:0 failed first: exit code 1: lost contact with ps:0")
