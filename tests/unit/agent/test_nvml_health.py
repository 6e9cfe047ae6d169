"""A GPU's health through the NVML gate (issue 58 §2): temperature, power against its limit, SM
clock, throttle reasons, ECC counts and Xid events, as the agent's sample pass reads them.

A fake ``pynvml`` in ``sys.modules`` is the seam: it answers as a driver does, in NVML's units
(milliwatts, MHz, a reasons bit mask, an event set that raises Timeout when empty).
"""

from __future__ import annotations

import logging
import os
import sys
import types
from collections.abc import Iterator

import pytest

from launcher.agent import nvml
from launcher.agent.sampling import HostSampler


class FakeNvml(types.ModuleType):
    """pynvml on a host with ``count`` GPUs; ``xids`` waits as (index, Xid) events to be polled."""

    class NVMLError(Exception):
        def __init__(self, value: int, text: str = "") -> None:
            super().__init__(text or f"NVML error {value}")
            self.value = value

    class NVMLError_FunctionNotFound(NVMLError):
        pass

    def __init__(self, count: int = 2, *, ecc: bool = True, xid_events: bool = True,
                 new_reasons_name: bool = True) -> None:
        super().__init__("pynvml")
        self.count, self.ecc, self.xid_events = count, ecc, xid_events
        self.xids: list[tuple[int, int]] = []
        self.registered: list[int] = []
        self.waits = 0
        self.reasons = 0x1 | 0x40 | 0x8  # idle, hw thermal, hw slowdown
        self.uncorrected = 0
        if new_reasons_name:
            self.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: self.reasons

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlEventSetFree(self, event_set: object) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        if index >= self.count:
            raise self.NVMLError(2, "Invalid Argument")
        return f"gpu{index}"

    def nvmlDeviceGetIndex(self, handle: str) -> int:
        return int(handle[3:])

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(gpu=90, memory=40)

    def nvmlDeviceGetMemoryInfo(self, handle: str, version: int | None = None) -> types.SimpleNamespace:
        return types.SimpleNamespace(total=80 << 30, used=20 << 30, free=60 << 30)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: str) -> list[object]:
        return []

    def nvmlDeviceGetProcessUtilization(self, handle: str, since: int) -> list[object]:
        return []

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:
        assert sensor == 0  # NVML_TEMPERATURE_GPU
        return 83 + int(handle[3:])

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:
        return 612_345  # mW

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: str) -> int:
        return 700_000

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:
        assert clock == 1  # NVML_CLOCK_SM
        return 1395

    def nvmlDeviceGetMaxClockInfo(self, handle: str, clock: int) -> int:
        assert clock == 1
        return 1980

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: str) -> int:
        return self.reasons

    def nvmlDeviceGetTotalEccErrors(self, handle: str, error_type: int, counter: int) -> int:
        assert counter == 0  # volatile
        if not self.ecc:
            raise self.NVMLError(3, "Not Supported")
        return 7 if error_type == 0 else self.uncorrected

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: str, types_: int, event_set: str) -> None:
        assert types_ == 0x8 and event_set == "event-set"
        if not self.xid_events:
            raise self.NVMLError(3, "Not Supported")
        self.registered.append(int(handle[3:]))

    def nvmlEventSetWait(self, event_set: str, timeout_ms: int) -> types.SimpleNamespace:
        assert timeout_ms == 0  # the sample pass never waits
        self.waits += 1
        if not self.xids:
            raise self.NVMLError(10, "Timeout")
        index, xid = self.xids.pop(0)
        return types.SimpleNamespace(device=f"gpu{index}", eventType=0x8, eventData=xid)


@pytest.fixture(autouse=True)
def fresh_nvml() -> Iterator[None]:
    nvml.reset()
    yield
    nvml.reset()


def _install(monkeypatch: pytest.MonkeyPatch, fake: FakeNvml) -> FakeNvml:
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def test_health_is_read_in_watts_and_megahertz_with_the_problem_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, FakeNvml())
    assert nvml.gpu_health(1) == {
        "temp_c": 84.0, "power_w": 612.3, "power_limit_w": 700.0, "sm_clock_mhz": 1395.0,
        "sm_clock_max_mhz": 1980.0, "throttle": ["hw_slowdown", "hw_thermal"],
        "ecc_corrected": 7, "ecc_uncorrected": 0}


def test_an_older_binding_reads_the_throttle_reasons_by_their_old_name(monkeypatch: pytest.MonkeyPatch,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="launcher.agent.nvml")
    fake = _install(monkeypatch, FakeNvml(new_reasons_name=False))
    fake.reasons = 0x4 | 0x2  # software power cap, application clocks (no problem)
    assert nvml.gpu_health(0)["throttle"] == ["sw_power_cap"]
    assert not [r for r in caplog.records if "has no function" in r.getMessage()]


@pytest.mark.parametrize(("mask", "names"), [
    (0x0, []),
    (0x1 | 0x2 | 0x10 | 0x100, []),  # idle, app clocks, sync boost, display: normal
    (0x4, ["sw_power_cap"]),
    (0x20 | 0x80, ["sw_thermal", "power_brake"]),
    (0x8 | 0x40 | 0x200 | 0x400, ["hw_slowdown", "hw_thermal", "board_limit", "reliability"]),
])
def test_throttle_reasons_decode_to_short_names(mask: int, names: list[str]) -> None:
    assert nvml.throttle_names(mask) == names


def test_a_card_without_ecc_or_a_gpu_gone_reads_none(monkeypatch: pytest.MonkeyPatch) -> None:
    _install(monkeypatch, FakeNvml(count=1, ecc=False))
    health = nvml.gpu_health(0)
    assert (health["ecc_corrected"], health["ecc_uncorrected"]) == (None, None)
    assert health["temp_c"] == 83.0
    assert set(nvml.gpu_health(5).values()) == {None}  # no such GPU: nothing, and nothing raised


def test_xids_are_polled_without_waiting_and_named_by_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _install(monkeypatch, FakeNvml())
    assert nvml.poll_xids() == []
    assert fake.registered == [0, 1]
    fake.xids = [(1, 79), (0, 13), (1, 48)]
    assert nvml.poll_xids() == [(1, 79), (0, 13), (1, 48)]
    assert nvml.poll_xids() == []
    assert fake.registered == [0, 1]  # registered once


def test_a_storm_of_xids_is_read_a_bounded_batch_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _install(monkeypatch, FakeNvml())
    fake.xids = [(0, 31)] * (nvml.XID_POLL_MAX + 5)
    assert len(nvml.poll_xids()) == nvml.XID_POLL_MAX
    assert len(nvml.poll_xids()) == 5


def test_gpus_that_refuse_xid_events_are_unsupported_and_said_once(monkeypatch: pytest.MonkeyPatch,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="launcher.agent.nvml")
    fake = _install(monkeypatch, FakeNvml(xid_events=False))
    for _ in range(5):
        assert nvml.poll_xids() == []
    assert fake.waits == 0
    said = [r.getMessage() for r in caplog.records if "no Xid events from NVML" in r.getMessage()]
    assert said == ["no Xid events from NVML on this host: no GPU takes them"]


def test_without_nvml_there_are_no_xids_and_no_health(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml raises ImportError
    assert nvml.poll_xids() == []
    assert set(nvml.gpu_health(0).values()) == {None}


def test_the_sample_pass_carries_each_gpus_health_and_its_xids(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _install(monkeypatch, FakeNvml())
    sampler = HostSampler(use_psutil=False)
    tasks = {"worker:0": (os.getpid(), [0]), "worker:1": (os.getpid(), [1])}
    first = sampler.sample(tasks)
    gpu1 = first["worker:1"]["gpus"][0]
    assert (gpu1["index"], gpu1["temp_c"], gpu1["power_w"], gpu1["throttle"]) == (1, 84.0, 612.3,
                                                                                  ["hw_slowdown", "hw_thermal"])
    assert (gpu1["xid_count"], gpu1["xid"], gpu1["ecc_uncorrected"]) == (0, None, 0)
    assert first["worker:1"]["source"] == "proc+nvml"
    fake.xids = [(1, 79)]
    fake.uncorrected = 2
    second = sampler.sample(tasks)
    assert (second["worker:1"]["gpus"][0]["xid_count"], second["worker:1"]["gpus"][0]["xid"]) == (1, 79)
    assert second["worker:1"]["gpus"][0]["ecc_uncorrected"] == 2
    assert second["worker:0"]["gpus"][0]["xid_count"] == 0  # another GPU's Xid is not this one's
    third = sampler.sample(tasks)
    assert third["worker:1"]["gpus"][0]["xid_count"] == 1  # a count since the agent started: kept
