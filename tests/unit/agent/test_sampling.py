"""TaskSampler on real process trees, with psutil and with the /proc fallback."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from launcher.agent.readings import parse_nvidia_smi
from launcher.agent.sampling import TaskSampler

ALLOC_MB = 120

# The root only waits; its child holds ALLOC_MB of memory and burns CPU, so what is measured
# comes from the child: a sampler that looked at the root alone would see ~0 % and a few MB.
TREE_SCRIPT = f"""
import subprocess, sys
child = subprocess.Popen([sys.executable, "-c", '''
import time
block = bytearray({ALLOC_MB} * 1024 * 1024)
for i in range(0, len(block), 4096):
    block[i] = 1
print("ready", flush=True)
deadline = time.monotonic() + 60
x = 0
while time.monotonic() < deadline:
    for _ in range(10000):
        x += 1
'''])
print(child.pid, flush=True)
child.wait()
"""


@pytest.fixture
def busy_tree() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen([sys.executable, "-c", TREE_SCRIPT], stdout=subprocess.PIPE, text=True)
    child_pid = 0
    try:
        assert proc.stdout is not None
        child_pid = int(proc.stdout.readline())
        assert proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        if child_pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child_pid, signal.SIGKILL)
        proc.kill()
        proc.wait(timeout=10)


def _sample_until(sampler: TaskSampler, predicate, deadline_s: float = 20.0) -> dict:
    """Sample every 0.3 s until ``predicate(sample)`` or the deadline; returns the last sample."""
    end = time.monotonic() + deadline_s
    while True:
        time.sleep(0.3)
        sample = sampler.sample()
        if predicate(sample) or time.monotonic() > end:
            return sample


@pytest.mark.parametrize("use_psutil", [True, False], ids=["psutil", "proc"])
def test_tree_cpu_and_rss_include_children(busy_tree: subprocess.Popen[str], use_psutil: bool) -> None:
    sampler = TaskSampler(busy_tree.pid, [], use_psutil=use_psutil)
    sample = _sample_until(sampler, lambda s: (s["cpu_percent"] or 0) > 30)
    assert sample["cpu_percent"] > 30, sample
    assert sample["rss_bytes"] >= ALLOC_MB * 1024 * 1024, sample
    assert sample["gpus"] == []
    assert sample["source"] == ("psutil" if use_psutil else "proc")


def test_psutil_and_proc_agree_on_memory(busy_tree: subprocess.Popen[str]) -> None:
    a = TaskSampler(busy_tree.pid, [], use_psutil=True).sample()
    b = TaskSampler(busy_tree.pid, [], use_psutil=False).sample()
    assert abs(a["rss_bytes"] - b["rss_bytes"]) < 0.1 * a["rss_bytes"], (a, b)


def test_first_sample_covers_time_since_construction() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time\nt=time.monotonic()\n"
                             "while time.monotonic()-t<30: pass"])
    try:
        sampler = TaskSampler(proc.pid, [], use_psutil=False)
        time.sleep(0.5)
        first = sampler.sample()
        assert first["cpu_percent"] is not None and first["cpu_percent"] > 20, first
    finally:
        proc.kill()
        proc.wait(timeout=10)


@pytest.mark.parametrize("use_psutil", [True, False], ids=["psutil", "proc"])
def test_vanished_task_gives_none_and_never_raises(use_psutil: bool) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    sampler = TaskSampler(proc.pid, [3], use_psutil=use_psutil, use_nvml=False)
    proc.wait(timeout=30)
    sample = sampler.sample()
    assert sample["cpu_percent"] is None and sample["rss_bytes"] is None
    assert [g["index"] for g in sample["gpus"]] == [3]


# -- nvidia-smi fallback: the one seam where a GPU is faked --------------------------------------

SMI_CSV = "0, 35, 1024, 16384\n1, [N/A], 2048, 16384\n2, 99, 15000, 16384\n"


def _fake_nvidia_smi(bin_dir, body: str) -> str:
    """Put an ``nvidia-smi`` shell script in ``bin_dir`` that logs each call to ``calls``."""
    calls = os.path.join(bin_dir, "calls")
    script = os.path.join(bin_dir, "nvidia-smi")
    with open(script, "w") as f:
        f.write(f'#!/bin/sh\necho "$@" >> {calls}\n{body}\n')
    os.chmod(script, 0o755)
    return calls


def _calls(calls_file: str) -> list[str]:
    if not os.path.exists(calls_file):
        return []
    with open(calls_file) as f:
        return f.read().splitlines()


def test_nvidia_smi_fallback_reads_assigned_gpus(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_nvidia_smi(str(tmp_path), f"printf '{SMI_CSV}'")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    sampler = TaskSampler(os.getpid(), [1, 0, 5], use_psutil=False, use_nvml=False)
    sample = sampler.sample()
    assert sample["source"] == "proc+nvidia-smi"
    by_index = {g["index"]: g for g in sample["gpus"]}
    assert [g["index"] for g in sample["gpus"]] == [1, 0, 5]
    assert by_index[0]["util_percent"] == 35.0
    assert by_index[0]["mem_used_bytes"] == 1024 * 1024 * 1024
    assert by_index[0]["mem_total_bytes"] == 16384 * 1024 * 1024
    assert by_index[1]["util_percent"] is None and by_index[1]["mem_used_bytes"] == 2048 * 1024 * 1024
    assert by_index[5]["util_percent"] is None and by_index[5]["mem_total_bytes"] is None
    sampler.sample()
    assert len(_calls(calls)) == 2, "one nvidia-smi call per sample"
    assert "--format=csv,noheader,nounits" in _calls(calls)[0]


def test_failing_nvidia_smi_is_tried_once(tmp_path, monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    calls = _fake_nvidia_smi(str(tmp_path), "echo 'NVIDIA-SMI has failed' >&2; exit 9")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    sampler = TaskSampler(os.getpid(), [0], use_psutil=True, use_nvml=False)
    samples = [sampler.sample() for _ in range(4)]
    assert len(_calls(calls)) == 1
    assert all(s["gpus"][0]["util_percent"] is None for s in samples)
    assert samples[-1]["source"] == "psutil+nogpu"
    assert len([r for r in caplog.records if "nvidia-smi failed" in r.getMessage()]) == 1


def test_no_gpu_source_at_all(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    sample = TaskSampler(os.getpid(), [0], use_psutil=False, use_nvml=False).sample()
    assert sample["source"] == "proc+nogpu"
    assert sample["gpus"] == [{"index": 0, "util_percent": None, "mem_used_bytes": None,
                               "mem_total_bytes": None, "proc_mem_bytes": None, "proc_util_percent": None}]
    assert sample["cpu_percent"] is not None


def test_parse_nvidia_smi_skips_garbage() -> None:
    parsed = parse_nvidia_smi("No devices were found\n\n3, 7, 1, 2\n")
    assert list(parsed) == [3]
    assert parsed[3]["mem_total_bytes"] == 2 * 1024 * 1024


def test_host_reading_is_the_whole_machine(busy_tree: subprocess.Popen[str]) -> None:
    sampler = TaskSampler(busy_tree.pid, [])
    host = _sample_until(sampler, lambda s: (s.get("host") or {}).get("cpu_percent"))["host"]
    with open("/proc/meminfo") as f:
        total_kib = int(next(line for line in f if line.startswith("MemTotal:")).split()[1])
    assert host["mem_total_bytes"] == total_kib * 1024 and 0 < host["mem_used_bytes"] < host["mem_total_bytes"]
    assert host["cpus"] == os.cpu_count()
    # the busy child keeps at least part of one core busy: the machine is not idle
    assert 100.0 / host["cpus"] * 0.3 <= host["cpu_percent"] <= 100.0


def test_the_program_pid_is_below_the_wrapper_and_its_shell() -> None:
    """Issue 56: the pid shown was the wrapper shell's, which py-spy, gdb -p or kill -STOP cannot use."""
    from launcher.agent.readings import scan_stats
    from launcher.agent.sampling import HostSampler, program_pid
    from launcher.agent.spec import _WRAPPER

    # the wrapper shell, the command's shell (`sleep; true` keeps it from exec'ing), the program
    proc = subprocess.Popen(["/bin/sh", "-c", _WRAPPER, "distlaunch-task", os.devnull, "",
                             "/bin/sh", "-c", f"{sys.executable} -c 'import time; time.sleep(30)'; true"],
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        def found() -> int | None:
            stats = scan_stats()
            children: dict[int, list[int]] = {}
            for pid, (ppid, _, _) in stats.items():
                children.setdefault(ppid, []).append(pid)
            pid = program_pid(proc.pid, children, stats)
            return pid if pid != proc.pid and _exe(pid) == os.path.realpath(sys.executable) else None

        deadline = time.monotonic() + 20
        while (main := found()) is None:
            assert time.monotonic() < deadline, "the program under the two shells never showed"
            time.sleep(0.05)
        assert main != proc.pid
        sample = HostSampler().sample({"t": (proc.pid, [])})["t"]
        assert sample["main_pid"] == main and proc.pid in sample["pids"]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _exe(pid: int) -> str:
    with contextlib.suppress(OSError):
        return os.path.realpath(f"/proc/{pid}/exe")
    return ""
