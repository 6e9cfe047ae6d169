"""GPU memory through the NVML gate reads as nvidia-smi shows it (issue 47).

NVML's v1 memory query counts the memory the driver reserves for itself as used (0.5-1 GiB on an
idle data-centre GPU); nvidia-smi's memory.used, like NVML's v2 query, leaves it out. A fake
``pynvml`` in ``sys.modules`` is the seam: it answers v1 and v2 as a driver does.
"""

from __future__ import annotations

import sys
import types
from collections.abc import Iterator

import pytest

from launcher.agent import nvml

TOTAL, RESERVED, ALLOCATED = 80 << 30, 600 << 20, 3 << 30


class FakeNvml(types.ModuleType):
    """pynvml as a driver with (``has_v2``) or without the v2 memory query answers it."""

    class NVMLError(Exception):
        pass

    class NVMLError_FunctionNotFound(NVMLError):
        pass

    def __init__(self, has_v2: bool = True, binding_v2: bool = True) -> None:
        super().__init__("pynvml")
        self.has_v2, self.failing = has_v2, False
        self.calls: list[object] = []
        if binding_v2:
            self.nvmlMemory_v2 = 0x02000028

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> types.SimpleNamespace:
        return types.SimpleNamespace(gpu=42, memory=7)

    def nvmlDeviceGetMemoryInfo(self, handle: int, version: int | None = None) -> types.SimpleNamespace:
        self.calls.append(version)
        if self.failing:
            raise self.NVMLError("GPU is lost")
        if version:
            if not self.has_v2:
                raise self.NVMLError_FunctionNotFound("Function Not Found")
            return types.SimpleNamespace(version=version, total=TOTAL, reserved=RESERVED,
                                         free=TOTAL - RESERVED - ALLOCATED, used=ALLOCATED)
        return types.SimpleNamespace(total=TOTAL, free=TOTAL - RESERVED - ALLOCATED, used=RESERVED + ALLOCATED)


@pytest.fixture(autouse=True)
def fresh_nvml() -> Iterator[None]:
    nvml.reset()
    yield
    nvml.reset()


def _install(monkeypatch: pytest.MonkeyPatch, fake: FakeNvml) -> FakeNvml:
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    return fake


def test_used_memory_leaves_out_the_drivers_reservation(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _install(monkeypatch, FakeNvml())
    stats = nvml.gpu_stats(0)
    assert stats == {"index": 0, "util_percent": 42.0, "mem_used_bytes": ALLOCATED, "mem_total_bytes": TOTAL}
    assert fake.calls == [fake.nvmlMemory_v2]


def test_a_driver_without_v2_is_read_with_v1_and_not_asked_v2_again(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _install(monkeypatch, FakeNvml(has_v2=False))
    for _ in range(3):
        stats = nvml.gpu_stats(0)
        assert stats is not None and stats["mem_used_bytes"] == RESERVED + ALLOCATED
    assert fake.calls == [fake.nvmlMemory_v2, None, None, None]


def test_a_binding_without_v2_is_read_with_v1(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _install(monkeypatch, FakeNvml(binding_v2=False))
    stats = nvml.gpu_stats(0)
    assert stats is not None and stats["mem_used_bytes"] == RESERVED + ALLOCATED
    assert fake.calls == [None]


def test_a_passing_failure_does_not_give_up_v2(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _install(monkeypatch, FakeNvml())
    fake.failing = True
    stats = nvml.gpu_stats(0)
    assert stats is not None and stats["mem_used_bytes"] is None and stats["util_percent"] == 42.0
    fake.failing = False
    stats = nvml.gpu_stats(0)
    assert stats is not None and stats["mem_used_bytes"] == ALLOCATED
    assert fake.calls[-1] == fake.nvmlMemory_v2
