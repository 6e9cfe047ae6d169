"""A GPU that errs becomes a named fault (telemetry/gpufaults.py) and the cause of a failure on its
host (telemetry/causes.py): Xid counts and uncorrectable ECC counts as the agents' samples carry them."""

from __future__ import annotations

from launcher import events as ev
from launcher.telemetry.causes import OutputTails, PeerIndex, with_cause
from launcher.telemetry.gpufaults import GpuFault, GpuWatch, xid_text

PEERS = PeerIndex([("worker:0", "10.0.0.3", 2222), ("worker:1", "10.0.0.3", 2223)])


def gpu(index: int, *, xids: int = 0, xid: int | None = None, ecc: int | None = 0) -> dict[str, object]:
    return {"index": index, "util_percent": 90.0, "xid_count": xids, "xid": xid, "ecc_uncorrected": ecc}


def test_xids_are_named_with_what_they_mean() -> None:
    assert xid_text(79) == "Xid 79 (fell off the bus)"
    assert xid_text(48) == "Xid 48 (double-bit ECC error)"
    assert xid_text(7777) == "Xid 7777"


def test_a_new_xid_is_one_fault_however_many_tasks_share_the_gpu() -> None:
    watch = GpuWatch()
    assert watch.on_sample("gpu3", [gpu(0), gpu(1)], 10.0) == []
    faults = watch.on_sample("gpu3", [gpu(1, xids=1, xid=79)], 11.0)
    assert faults == [GpuFault("gpu3", 1, "Xid 79 (fell off the bus)", True, 11.0)]
    assert faults[0].text == "GPU 1 on gpu3: Xid 79 (fell off the bus)"
    assert watch.on_sample("gpu3", [gpu(1, xids=1, xid=79)], 11.0) == []  # the other task on GPU 1
    assert watch.on_sample("gpu4", [gpu(1)], 11.0) == []  # another host's GPU 1 is another GPU
    assert [f.what for f in watch.on_sample("gpu3", [gpu(1, xids=2, xid=13)], 12.0)] == [
        "Xid 13 (graphics engine exception)"]


def test_the_programs_own_xids_are_named_but_drain_nothing() -> None:
    watch = GpuWatch()
    drains = {xid: watch.on_sample(f"h{xid}", [gpu(0, xids=1, xid=xid)])[0].drains for xid in (13, 31, 43, 79, 48, 95)}
    assert drains == {13: False, 31: False, 43: False, 79: True, 48: True, 95: True}


def test_a_new_agent_counting_from_zero_again_is_still_heard() -> None:
    watch = GpuWatch()
    watch.on_sample("a", [gpu(0, xids=3, xid=31)])
    assert watch.on_sample("a", [gpu(0, xids=0)]) == []
    assert [f.what for f in watch.on_sample("a", [gpu(0, xids=1, xid=74)])] == ["Xid 74 (NVLink error)"]


def test_uncorrectable_ecc_errors_are_a_fault_when_they_grow_not_for_what_came_before() -> None:
    watch = GpuWatch()
    assert watch.on_sample("a", [gpu(0, ecc=4)]) == []  # since the driver loaded: before the job
    assert watch.on_sample("a", [gpu(0, ecc=4)]) == []
    assert watch.on_sample("a", [gpu(0, ecc=6)], 5.0) == [GpuFault("a", 0, "2 uncorrectable ECC errors", True, 5.0)]
    assert [f.what for f in watch.on_sample("a", [gpu(0, ecc=7)])] == ["1 uncorrectable ECC error"]
    assert watch.on_sample("a", [gpu(0, ecc=None), {"index": "0", "ecc_uncorrected": 99}]) == []  # unsupported


def test_a_task_failing_after_its_hosts_gpu_erred_names_the_gpu_first() -> None:
    tails = OutputTails()
    with_cause(ev.state_event("r", "worker:0", ev.STARTING, host="gpu3", restarts=0, ts=100.0), tails, PEERS)
    tails.note_gpu_fault(GpuFault("gpu3", 1, "Xid 79 (fell off the bus)", True, 105.0))
    for line in ("Traceback (most recent call last):", '  File "/w/train.py", line 9, in <module>',
                 "RuntimeError: CUDA error: unspecified launch failure"):
        with_cause(ev.log_event("r", "worker:0", "stderr", line), tails, PEERS)
    failed = with_cause(ev.state_event("r", "worker:0", ev.FAILED, host="gpu3", exit_code=1, ts=106.0), tails, PEERS)
    assert failed.get("cause") == ("GPU 1 on gpu3: Xid 79 (fell off the bus); then RuntimeError: "
                                   "CUDA error: unspecified launch failure at train.py:9")


def test_a_gpu_fault_before_the_incarnation_or_on_another_host_is_no_cause() -> None:
    tails = OutputTails()
    tails.note_gpu_fault(GpuFault("gpu3", 1, "Xid 79 (fell off the bus)", True, 90.0))
    tails.note_gpu_fault(GpuFault("gpu4", 0, "Xid 48 (double-bit ECC error)", True, 101.0))
    with_cause(ev.state_event("r", "worker:0", ev.STARTING, host="gpu3", restarts=1, ts=100.0), tails, PEERS)
    failed = with_cause(ev.state_event("r", "worker:0", ev.FAILED, host="gpu3", exit_code=3, ts=106.0), tails, PEERS)
    assert failed.get("cause") == "exit code 3"
