"""`status --json` and `export tensorboard` give each host's GPUs with their health (issue 58 §2):
the run dir holds the samples an agent sends from NVML (no GPU on this machine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher import events as ev
from launcher.cli import main
from launcher.rundir import RunDir

RUN = "r-gpuhealth"


def _gpu(index: int, temp: float, *, xids: int = 0, xid: int | None = None) -> dict[str, object]:
    return {"index": index, "util_percent": 88.0, "mem_used_bytes": 2**30, "mem_total_bytes": 80 * 2**30,
            "proc_util_percent": 88.0, "temp_c": temp, "power_w": 640.5, "power_limit_w": 700.0,
            "sm_clock_mhz": 1410.0, "sm_clock_max_mhz": 1980.0, "throttle": ["sw_power_cap", "hw_thermal"],
            "ecc_corrected": 3, "ecc_uncorrected": 1, "xid_count": xids, "xid": xid}


def _run(root: Path) -> Path:
    rd = RunDir.create(RUN, root / RUN)
    rd.write_state({"run_id": RUN, "name": "gpu", "strategy": "multi_worker_mirrored", "hosts": {"gpu3": {}}, "tasks": {
        "worker:0": {"host": "gpu3", "address": "10.0.0.3", "port": 2222, "state": "running"},
        "worker:1": {"host": "gpu3", "address": "10.0.0.3", "port": 2223, "state": "running"}}})
    rd.append(ev.job_event(RUN, ev.JOB_RUNNING, ts=1.0))
    for task in ("worker:0", "worker:1"):
        rd.append(ev.state_event(RUN, task, ev.RUNNING, host="gpu3", pid=10, ts=1.0))
    rd.append(ev.metric_event(RUN, "worker:0", step=50, loss=0.5, ts=2.0))
    rd.append(ev.sample_event(RUN, "worker:0", cpu_percent=100.0, rss_bytes=2**30, source="psutil+nvml",
                              gpus=[_gpu(0, 71.0)], ts=3.0))
    rd.append(ev.sample_event(RUN, "worker:1", cpu_percent=100.0, rss_bytes=2**30, source="psutil+nvml",
                              gpus=[_gpu(1, 90.0, xids=1, xid=79)], ts=3.1))
    rd.append(ev.sample_event(RUN, "worker:0", cpu_percent=100.0, rss_bytes=2**30, source="psutil+nvml",
                              gpus=[_gpu(0, 73.0)], ts=4.0))
    rd.close()
    return rd.path


def test_status_json_gives_each_hosts_gpus_with_their_health(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", str(_run(tmp_path)), "--json"]) == 0
    gpus = json.loads(capsys.readouterr().out)["hosts"]["gpu3"]["gpus"]
    assert [g["index"] for g in gpus] == [0, 1]
    assert gpus[0] == {"index": 0, "util_percent": 88.0, "mem_used_bytes": 2**30, "mem_total_bytes": 80 * 2**30,
                       "temp_c": 73.0, "power_w": 640.5, "power_limit_w": 700.0, "sm_clock_mhz": 1410.0,
                       "sm_clock_max_mhz": 1980.0, "throttle": ["sw_power_cap", "hw_thermal"],
                       "ecc_corrected": 3, "ecc_uncorrected": 1, "xid_count": 0, "xid": None}
    assert (gpus[1]["temp_c"], gpus[1]["xid_count"], gpus[1]["xid"]) == (90.0, 1, 79)


def test_export_tensorboard_writes_each_gpus_health_in_its_hosts_run(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", "tensorboard", str(_run(tmp_path)), str(tmp_path / "tb")]) == 0
    capsys.readouterr()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb" / RUN / "host-gpu3"))
    acc.Reload()
    scalars = {tag: [(s.step, s.value, s.wall_time) for s in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    assert scalars["gpu0/temp_c"] == [(50, 71.0, 3.0), (50, 73.0, 4.0)]
    assert scalars["gpu1/temp_c"] == [(50, 90.0, pytest.approx(3.1))]
    assert scalars["gpu0/power_w"][0][1] == 640.5 and scalars["gpu0/power_limit_w"][0][1] == 700.0
    assert scalars["gpu0/sm_clock_mhz"][0][1] == 1410.0
    assert scalars["gpu0/throttle_reasons"][0][1] == 2.0
    assert (scalars["gpu0/ecc_corrected"][0][1], scalars["gpu0/ecc_uncorrected"][0][1]) == (3.0, 1.0)
    assert scalars["gpu1/xid_count"] == [(50, 1.0, pytest.approx(3.1))]
