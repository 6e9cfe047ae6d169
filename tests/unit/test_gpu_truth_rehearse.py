"""benchmarks/gpu_truth.py's rehearsal parts, quickly: the stand-in GPU answers through its fake
nvidia-smi and its fake pynvml as one GPU (and distlaunch's NVML gate reads the fake as nvidia-smi
shows it), and the comparisons judge what they are given. The whole rehearsal
(``benchmarks/gpu_truth.py --rehearse``) runs distlaunch for real and takes half a minute: not here.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from launcher.agent import nvml
from launcher.agent.readings import parse_nvidia_smi

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH))  # for these two only: benchmarks/ has modules named like others (stacks, common)
try:
    import gpu_truth_compare as cmp
    import gpu_truth_fake as fake
finally:
    sys.path.remove(str(BENCH))

MIB = 1 << 20


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    """The generated fake pynvml (imported as ``pynvml``) and nvidia-smi over a fresh state directory."""
    env = fake.install(tmp_path / "fake", tmp_path / "state")
    monkeypatch.syspath_prepend(env["PYTHONPATH"])
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", importlib.import_module("pynvml"))
    nvml.reset()
    yield {**env, "state": str(tmp_path / "state")}
    nvml.reset()


def _smi(env: dict[str, str], *args: str) -> str:
    done = subprocess.run([os.path.join(env["PATH"], "nvidia-smi"), *args], capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout


def test_fake_nvml_and_fake_nvidia_smi_describe_one_gpu(stand_in: dict[str, str]) -> None:
    reg = fake.Registration(stand_in["state"], 64 * MIB)
    now = time.time()
    reg.add_busy(now - 0.6, now - 0.35)
    reg.write()
    gate = nvml.gpu_stats(0)
    smi = parse_nvidia_smi(_smi(stand_in, "--query-gpu=index,utilization.gpu,memory.used,memory.total",
                                "--format=csv,noheader,nounits"))[0]
    assert gate is not None
    # the reserved memory is left out of `used` as by nvidia-smi (the gate asks NVML's v2)
    assert gate["mem_used_bytes"] == smi["mem_used_bytes"] == 64 * MIB
    assert gate["mem_total_bytes"] == smi["mem_total_bytes"] == fake.TOTAL_BYTES
    assert 20 <= gate["util_percent"] <= 30 and 20 <= smi["util_percent"] <= 30
    apps = _smi(stand_in, "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits")
    assert apps.split() == [f"{os.getpid()},", "64"]
    assert nvml.compute_processes(0) == {os.getpid(): 64 * MIB}
    assert nvml.process_utilization(0, window_s=1.0) == {os.getpid(): pytest.approx(25, abs=3)}
    assert "CUDA Version: 99.9" in _smi(stand_in)


def test_device_utilisation_is_the_union_of_busy_spans(tmp_path: Path) -> None:
    a = fake.Registration(str(tmp_path), 0)
    a.busy = [[10.0, 10.5]]
    a.write()
    (tmp_path / "procs" / "999999999.json").write_text('{"mem_bytes": 5, "busy": [[10.0, 11.0]]}')  # no such pid
    assert fake.device_util(str(tmp_path), now=11.0 + fake.LAG_S) == 50
    assert fake.used_bytes(str(tmp_path), reserved=False) == 0


def _sample(ts: float, util: float, used: int, proc: int | None) -> dict[str, Any]:
    return {"kind": "sample", "task": "worker:0", "ts": ts,
            "gpus": [{"index": 0, "util_percent": util, "mem_used_bytes": used, "mem_total_bytes": 100,
                      "proc_mem_bytes": proc, "proc_util_percent": 50.0}]}


def _record(ts: float, util: float, used: int, apps: dict[int, int | None]) -> dict[str, Any]:
    return {"ts": ts, "util": util, "mem_used": used, "mem_total": 100, "apps": apps,
            "trees": {"worker:0": [10, 11], "chief:0": [20]}}


def test_compare_judges_util_memory_and_attribution() -> None:
    events = [_sample(100.0 + i, 50 + (8 if i % 2 else 0), 1000, 400) for i in range(10)]
    records = [_record(100.2 + i, 50, 1010, {11: 400, 99: 600}) for i in range(10)]
    result = cmp.compare_gpu_task(events, records, "worker:0", 100, 110, 0, 0.5, 100.0, phase_at=105.0)
    assert result["matched"] == 10 and result["util"]["mad_points"] == 4.0 and result["util"]["ok"]
    assert result["util"]["median_ad_points"] == 4.0 and result["proc_mem"]["exact_samples"] == 10
    assert set(result["util"]["by_phase"]) == {"before", "after"}
    assert result["mem_used"]["mad_bytes"] == 10.0 and result["mem_used"]["ok"]
    assert result["proc_mem"]["mad_bytes"] == 0.0 and result["attribution"]["pids_on_gpu"] == [11]
    assert result["ok"]
    assert cmp.unattributed(records, 100, 110) == [99]
    # memory another process holds is not the task's: counting the device's would miss by far
    wrong = [_sample(100.0 + i, 50, 1000, 1000) for i in range(10)]
    assert not cmp.compare_gpu_task(wrong, records, "worker:0", 100, 110, 0, 0.5, None)["proc_mem"]["ok"]
    # issue 61's goal is a median absolute difference of 5 points: off by 6 in most samples misses it
    # although the mean (4.8) is within issue 47's 10 points
    skewed = [_sample(100.0 + i, 56 if i < 8 else 50, 1000, 400) for i in range(10)]
    util = cmp.compare_gpu_task(skewed, records, "worker:0", 100, 110, 0, 0.5, None)["util"]
    assert util["mad_points"] == 4.8 and util["median_ad_points"] == 6.0 and not util["ok"]


def test_a_task_without_a_gpu_must_show_none() -> None:
    quiet = [{"kind": "sample", "task": "chief:0", "ts": 100.0 + i, "gpus": []} for i in range(3)]
    assert cmp.compare_no_gpu_task(quiet, [_record(101, 0, 0, {11: 1})], "chief:0", 100, 110)["ok"]
    assert not cmp.compare_no_gpu_task(quiet, [_record(101, 0, 0, {20: 1})], "chief:0", 100, 110)["ok"]


def test_parity_needs_model_driver_and_cuda() -> None:
    ident = {"name": "GPU X", "driver": "580.1", "cuda": "13.0"}
    table = {"hosts": [{"host": "g1", "cuda": None, "gpus": [{"index": 0, "name": "GPU X", "driver": "580.1"}]}]}
    result = cmp.parity(table, ident, 0)
    assert result["model_ok"] and result["driver_ok"] and not result["cuda_ok"] and not result["ok"]
    table["hosts"][0]["cuda"] = "CUDA 13.0, cuDNN 9"  # TensorFlow's build: not the driver's version
    assert not cmp.parity(table, ident, 0)["cuda_ok"]
    table["hosts"][0]["gpus"][0]["cuda"] = "13.0"  # type: ignore[index]
    assert cmp.parity(table, ident, 0)["ok"]
