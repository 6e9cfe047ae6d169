"""A GPU that falls off the bus drains its host to the spare (issue 58 §2), through the real
supervisor and real host agents on three local hosts; only the GPU is faked, by a ``pynvml`` on
the agents' path whose event set answers one Xid 79 for host b's GPU 0 once the test says so."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.jobtools import (
    REPO,
    finish_up,
    kill_run_processes,
    launch_up,
    read_events,
    wait_for,
    wait_for_event,
)
from tests.profiles import build_profile, local_host
from tests.webhook import Webhook

pytestmark = pytest.mark.slow

#: pynvml as a host with one healthy GPU answers it, until ``FLAG`` exists: then host b's agent
#: (its working directory is its host run dir, ``hosts/b``) gets one Xid 79 on GPU 0
FAKE_PYNVML = '''
import os
FLAG = %r
_said = []
class NVMLError(Exception):
    def __init__(self, value):
        super().__init__("NVML error %%d" %% value)
        self.value = value
class _Memory:
    total, used, free = 80 << 30, 1 << 30, 79 << 30
class _Use:
    gpu, memory = 55, 10
class _Xid:
    device, eventType, eventData = 0, 0x8, 79
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlSystemGetDriverVersion(): return "550.54.15"
def nvmlDeviceGetCount(): return 1
def nvmlDeviceGetHandleByIndex(index):
    if index >= 1:
        raise NVMLError(2)
    return index
def nvmlDeviceGetIndex(handle): return handle
def nvmlDeviceGetName(handle): return b"NVIDIA H100 80GB HBM3"
def nvmlDeviceGetMemoryInfo(handle, version=None): return _Memory
def nvmlDeviceGetUtilizationRates(handle): return _Use
def nvmlDeviceGetComputeRunningProcesses(handle): return []
def nvmlDeviceGetProcessUtilization(handle, since): return []
def nvmlDeviceGetTemperature(handle, sensor): return 71
def nvmlDeviceGetPowerUsage(handle): return 350000
def nvmlDeviceGetEnforcedPowerLimit(handle): return 700000
def nvmlDeviceGetClockInfo(handle, clock): return 1755
def nvmlDeviceGetMaxClockInfo(handle, clock): return 1980
def nvmlDeviceGetCurrentClocksEventReasons(handle): return 0
def nvmlDeviceGetTotalEccErrors(handle, kind, counter): return 0
def nvmlEventSetCreate(): return "set"
def nvmlEventSetFree(event_set): pass
def nvmlDeviceRegisterEvents(handle, kinds, event_set): pass
def nvmlEventSetWait(event_set, timeout_ms):
    if not _said and os.path.exists(FLAG) and os.path.basename(os.getcwd()) == "b":
        _said.append(1)
        return _Xid
    raise NVMLError(10)
'''

TICKER = "{python} -u -c 'import time\nfor i in range(%d):\n    print(\"tick\", i, flush=True); time.sleep(0.1)'"


@pytest.fixture
def run_id(request: pytest.FixtureRequest) -> Iterator[str]:
    rid = f"it-gpu-{request.node.name[5:25].replace('_', '-')}"
    yield rid
    kill_run_processes(rid)


def _profile(tmp: Path, spares: list[str], notify: dict[str, Any] | None = None) -> Path:
    hosts = [local_host(name, tf_address=f"127.0.0.{i + 2}", gpus=[0]) for i, name in enumerate("abc")]
    return build_profile(tmp / "gpu.toml", name="it-gpu-drain", strategy="custom", orphan_grace=10,
                         top=f"sample_interval = 0.5\nspares = {json.dumps(spares)}\n",
                         defaults={"python": sys.executable}, workdir=REPO, grace=2, restart="on-failure",
                         hosts=hosts if spares else hosts[:2],
                         roles={"worker": {"count": 2, "hosts": ["a", "b"], "gpus_per_task": 1,
                                           "command": TICKER % 200}},
                         metrics={"step": r"tick (\d+)"}, notify=notify)


def _ticking(run_dir: Path, task: str, at_least: int) -> bool:
    return any(e["kind"] == "metric" and e["task"] == task and (e.get("step") or 0) >= at_least
               for e in read_events(run_dir))


def _fake_nvml(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    fake = tmp / "fake-nvml"
    fake.mkdir()
    flag = tmp / "xid-now"
    (fake / "pynvml.py").write_text(FAKE_PYNVML % str(flag))
    monkeypatch.setenv("PYTHONPATH", f"{fake}:{REPO}")
    return flag


def _gpu_conditions(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["task"], e["reason"]) for e in events if e["kind"] == "condition" and e["condition"] == "gpu_error"]


@pytest.mark.timeout(180)
def test_an_xid_79_drains_the_host_to_the_spare(tmp_path: Path, run_id: str, monkeypatch: pytest.MonkeyPatch,
                                                hook: Webhook) -> None:
    flag = _fake_nvml(tmp_path, monkeypatch)
    # [notify] with a webhook and nothing more: a GPU error is told by default
    proc, run_dir = launch_up(tmp_path, _profile(tmp_path, ["c"], notify={"webhook": hook.url}), run_id)
    wait_for(lambda: _ticking(run_dir, "worker:1", 3), 90, "worker:1 ticking on b")
    flag.write_text("now")
    moved = wait_for_event(run_dir, lambda e: e["kind"] == "state" and e["task"] == "worker:1"
                           and e["state"] == "running" and e.get("moved_from") == "b", 60, "worker:1 on the spare")
    assert moved["host"] == "c"
    events = read_events(run_dir)
    said = "GPU 0 on b: Xid 79 (fell off the bus)"
    assert _gpu_conditions(events) == [("worker:1", said)]  # worker:0's GPU 0 is on another host
    drained = [e for e in events if e["kind"] == "host" and e["host"] == "b" and e["state"] == "drained"]
    assert [e["reason"] for e in drained] == [said]
    health = [g for e in events if e["kind"] == "sample" and e["task"] == "worker:1" for g in e["gpus"]]
    assert health and health[-1]["temp_c"] == 71 and health[-1]["power_limit_w"] == 700.0
    code = finish_up(proc, tmp_path, 90)
    assert code == 0, (tmp_path / "up.log").read_text()[-3000:]
    assert not any(e["kind"] == "state" and e["state"] == "failed" for e in read_events(run_dir))
    alerts = hook.alerts()
    # told as it happened, cleared as the task left the broken GPU, then the move
    assert alerts[:3] == [("gpu_error", "1", "worker:1"), ("gpu_error", "0", "worker:1"),
                          ("moved", "1", "worker:1")], hook.posts
    assert alerts.count(("gpu_error", "1", "worker:1")) == 1, hook.posts
    told = next(p for p in hook.posts if p.get("alert") == "gpu_error")
    assert told["figure"] == said and told["host"] == "b", told


@pytest.mark.timeout(180)
def test_without_a_spare_the_host_stays_and_it_is_said_in_one_line(tmp_path: Path, run_id: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    flag = _fake_nvml(tmp_path, monkeypatch)
    proc, run_dir = launch_up(tmp_path, _profile(tmp_path, []), run_id)
    wait_for(lambda: _ticking(run_dir, "worker:1", 3), 90, "worker:1 ticking on b")
    flag.write_text("now")
    wait_for(lambda: _gpu_conditions(read_events(run_dir)), 30, "the gpu_error condition")
    code = finish_up(proc, tmp_path, 90)
    assert code == 0, (tmp_path / "up.log").read_text()[-3000:]
    events = read_events(run_dir)
    assert not [e for e in events if e["kind"] == "host" and e["state"] == "drained"]
    assert {e["host"] for e in events if e["kind"] == "state" and e["task"] == "worker:1"} == {"b"}
    log = (tmp_path / "up.log").read_text()
    assert log.count("GPU 0 on b: Xid 79 (fell off the bus); no spare to drain b to: it stays in the job") == 1
