"""The hosts side by side (launcher/remote/parity.py): which columns differ, and what each difference means
for the launch (version skew, patch levels, disk, clock, GPUs), judged on the table's data."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.plan import build_plan
from launcher.profile.reader import load_profile
from launcher.profile.sizes import parse_size, show_size
from launcher.remote.parity import HostRow, as_json, differing, judge, row_from_answer, table
from tests.profiles import Host, build_profile


def plan_of(tmp_path: Path, top: str = "", strategy: str = "parameter_server", gpus: list[int] | None = None) -> object:
    hosts = [Host(name, address, options={"gpus": gpus} if gpus else {})
             for name, address in (("a", "127.0.0.2"), ("b", "127.0.0.3"))]
    worker = {"count": 2, "hosts": ["b"], "gpus_per_task": 1 if gpus else None}
    path = build_profile(tmp_path / "p.toml", name="parity", strategy=strategy, top=top, command="python3 train.py",
                         hosts=hosts, roles={"ps": {"hosts": ["a"]}, "worker": worker})
    return build_plan(load_profile(path))


def rows(tf_a: str = "2.15.0", tf_b: str = "2.15.0", py_a: str = "3.11.7", py_b: str = "3.11.7") -> list[HostRow]:
    return [HostRow("a", python=py_a, tensorflow=tf_a), HostRow("b", python=py_b, tensorflow=tf_b)]


def test_same_hosts_have_nothing_to_say(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    assert judge(plan, rows()) == ([], [])  # type: ignore[arg-type]
    assert differing(rows()) == []
    assert "differs" not in table(rows())


def test_tensorflow_major_minor_differing_refuses_a_tensorflow_strategy(tmp_path: Path) -> None:
    warnings, errors = judge(plan_of(tmp_path), rows(tf_b="2.16.1"))  # type: ignore[arg-type]
    assert warnings == []
    assert errors == ["TensorFlow differs across hosts (2.15.0 on a; 2.16.1 on b): the tasks of one job need the "
                      "same major.minor; install one version everywhere (or set allow_version_skew = true)"]
    header = table(rows(tf_b="2.16.1")).splitlines()[0]
    assert "TENSORFLOW differs" in header and "PYTHON differs" not in header


@pytest.mark.parametrize(("top", "strategy"), [("allow_version_skew = true", "parameter_server"),
                                               ("", "custom")])
def test_skew_is_only_a_warning_when_allowed_or_without_a_tensorflow_strategy(tmp_path: Path, top: str,
                                                                               strategy: str) -> None:
    warnings, errors = judge(plan_of(tmp_path, top, strategy), rows(tf_b="2.16.1"))  # type: ignore[arg-type]
    assert errors == [] and warnings == ["TensorFlow differs across hosts (2.15.0 on a; 2.16.1 on b)"]


def test_patch_levels_and_python_differing_are_warnings(tmp_path: Path) -> None:
    warnings, errors = judge(plan_of(tmp_path), rows(tf_b="2.15.1", py_b="3.11.2"))  # type: ignore[arg-type]
    assert errors == []
    assert warnings == ["TensorFlow patch levels differ across hosts (2.15.0 on a; 2.15.1 on b)",
                        "Python differs across hosts (3.11.7 on a; 3.11.2 on b)"]
    assert set(differing(rows(tf_b="2.15.1", py_b="3.11.2"))) == {"PYTHON", "TENSORFLOW"}


def test_low_disk_and_a_skewed_clock_are_warnings_naming_host_and_path(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, 'min_free_disk = "100MiB"')
    low = HostRow("a", python="3.11.7", disk={"outputs": ("/data/out", 12 * 1024**2),
                                             "run dir": ("/home/u/.cache/r", 200 * 1024**2)}, clock_offset=-3.4)
    ok = HostRow("b", python="3.11.7", disk={"outputs": ("/data/out", 101 * 1024**2)}, clock_offset=1.9)
    warnings, errors = judge(plan, [low, ok])  # type: ignore[arg-type]
    assert errors == []
    assert warnings == ["host a: only 12 MiB free at /data/out (outputs); min_free_disk = 100 MiB",
                        "host a: clock is 3 s behind the launcher's; event times, stall detection and the "
                        "timeline depend on it: sync it (NTP)"]


def gpu(index: int, others: int = 0) -> dict[str, object]:
    return {"index": index, "name": "NVIDIA H100", "driver": "550.54", "mem_total_bytes": 80 * 1024**3,
            "others_pids": [4242] if others else [], "others_bytes": others}


@pytest.mark.parametrize("policy", ["warn", "refuse"])
def test_busy_gpus_warn_or_refuse_and_missing_ones_refuse(tmp_path: Path, policy: str) -> None:
    plan = plan_of(tmp_path, f'gpu_busy = "{policy}"', gpus=[0, 1])
    busy = HostRow("b", gpus=[gpu(0, others=3 * 1024**3), gpu(1)])
    warnings, errors = judge(plan, [HostRow("a", gpus=[gpu(0), gpu(1)]), busy])  # type: ignore[arg-type]
    line = "host b: GPU 0, given to worker:0, holds 3 GiB of other processes (pids 4242)"
    assert (warnings, errors) == (([line], []) if policy == "warn" else ([], [f'{line}; stop them or set '
                                                                              'gpu_busy = "warn"']))
    warnings, errors = judge(plan, [HostRow("a", gpus=[gpu(0)]), HostRow("b", gpus=[gpu(0)])])  # type: ignore[arg-type]
    assert errors == ["host b has 1 GPU(s) but worker:1 is given GPU 1; fix hosts.b.gpus (or the roles' "
                      "gpus_per_task)"]
    warnings, errors = judge(plan, [HostRow("a"), HostRow("b")])  # type: ignore[arg-type]
    assert errors == [] and warnings[0].startswith("host b: tasks are given GPUs [0, 1] but NVML cannot be read")


def test_a_row_from_an_answer_and_its_json(tmp_path: Path) -> None:
    answer = {"python": "3.11.7", "facts": {"disk": {"/o": 5, "/r": None}, "mem_available_bytes": 7,
                                            "gpus": [gpu(0)], "time": 1010.0}}
    row = row_from_answer("a", answer, 1000.0, "/o", "/r", "3.11.7 2.15.0 (imported) cuda 12.2 cudnn 8")
    assert (row.tensorflow, row.cuda, row.clock_offset) == ("2.15.0", "CUDA 12.2, cuDNN 8", 10.0)
    assert row.disk == {"outputs": ("/o", 5), "run dir": ("/r", None)}
    other = row_from_answer("b", dict(answer, facts={}), 1000.0, "/o", "/r", "3.11.7 2.15.0 (package metadata)")
    assert other.cuda is None and other.gpus is None
    data = as_json([row, other], ["w"], [])
    assert data["differs"] == [] and data["warnings"] == ["w"]
    assert data["hosts"][0]["disk"]["outputs"] == {"path": "/o", "free_bytes": 5}
    assert "GPUS differs" not in table([row, other])  # a host that does not know is left out


def test_sizes_read_and_shown() -> None:
    assert parse_size("1GiB") == 1024**3 and parse_size("500 MB") == 500 * 1000**2 and parse_size(4096) == 4096
    assert parse_size("1.5G") == int(1.5 * 1024**3) and parse_size("lots") is None and parse_size(-1) is None
    assert show_size(912 * 1024**2) == "912 MiB" and show_size(None) == "?"


def test_min_free_disk_is_read_in_bytes_with_units_and_defaults_to_1_gib(tmp_path: Path) -> None:
    assert plan_of(tmp_path).profile.min_free_disk == 1024**3  # type: ignore[attr-defined]
    assert plan_of(tmp_path, 'min_free_disk = "16 MiB"').profile.min_free_disk == 16 * 1024**2  # type: ignore[attr-defined]


def test_the_gpu_column_shows_the_drivers_cuda_version_as_nvidia_smi_does() -> None:
    """nvidia-smi's header says "Driver Version: 550.54 CUDA Version: 12.4"; NVML gives the CUDA
    version as 12040. Without TensorFlow (a custom job) the CUDA/CUDNN column is empty, so the GPU
    column is where a user sees it."""
    from launcher.agent.hostfacts import cuda_version

    assert (cuda_version(12040), cuda_version(11080), cuda_version(13000)) == ("12.4", "11.8", "13.0")
    assert cuda_version(None) == cuda_version(0) == cuda_version(True) == ""
    row = HostRow("a", gpus=[dict(gpu(0), cuda="12.4"), dict(gpu(1), cuda="12.4")])
    assert row.gpu_summary() == "2x NVIDIA H100, driver 550.54, CUDA 12.4"
    assert HostRow("b", gpus=[gpu(0)]).gpu_summary() == "1x NVIDIA H100, driver 550.54"
