"""The rehearsal's stand-in GPU (``gpu_truth.py --rehearse``): never a GPU figure.

A machine without a GPU has no driver for distlaunch's NVML path to read, so the rehearsal fakes it
at the two seams the tests fake it at: a ``pynvml`` module first on PYTHONPATH (what
tests/integration/test_preflight_hosts.py does) and an ``nvidia-smi`` executable first on PATH
(tests/unit/agent/test_sampling.py). Both read one state directory, so they describe one "GPU":

- ``procs/<pid>.json``, written by each stand-in load (``gpu_truth_load.py --backend cpu``):
  ``{"mem_bytes": N, "busy": [[t0, t1], ...]}`` -- the host memory it really holds, standing in for
  device memory, and the wall-clock spans its CPU loop was busy, standing in for kernels. A file
  whose process is gone counts for nothing (the driver frees a dead process's memory).
- device utilisation = the share of the last second covered by any live process's busy spans (as
  NVML defines it: "percent of time over the past sample period during which one or more kernels
  was executing"); per-process utilisation = that process's own share since the asked time.
- memory used = the live processes' memory, plus ``RESERVED_BYTES`` in NVML's v1 answer only: a
  driver's own reservation, which v1 counts as used and v2 and nvidia-smi do not.

What the rehearsal proves is the plumbing: distlaunch's sampler, its events and the pid attribution
against a second reader of the same truth at other moments. What it cannot prove is a real
driver's answers; only the GPU machine gives those.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

NAME = "REHEARSAL stand-in GPU (CPU load)"
DRIVER = "0.0-rehearsal"
CUDA = "99.9"  # no real CUDA: a version no driver has, so a stand-in figure is never taken for one
TOTAL_BYTES = 16 << 30
RESERVED_BYTES = 512 << 20
#: the device utilisation's sample period, and how long before the reading it ends: the loads write
#: their busy spans every ``WRITE_EVERY_S``, so the newest moments are not known yet (a driver, too,
#: reports its last whole sample period)
WINDOW_S = 1.0
LAG_S = 0.15
WRITE_EVERY_S = 0.1
_MIB = 1 << 20


# -- the writer side (a stand-in load) ---------------------------------------------------------------------


class Registration:
    """One stand-in process on the fake GPU: its memory and busy spans, rewritten as they change."""

    def __init__(self, state_dir: str, mem_bytes: int) -> None:
        self.path = Path(state_dir) / "procs" / f"{os.getpid()}.json"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.mem_bytes = mem_bytes
        self.busy: list[list[float]] = []
        self.written = 0.0
        self.write()

    def add_busy(self, start: float, end: float) -> None:
        if self.busy and start - self.busy[-1][1] < 1e-3:
            self.busy[-1][1] = end  # back to back: one span
        else:
            self.busy.append([start, end])
        if end - self.written >= WRITE_EVERY_S:
            keep = end - 3 * WINDOW_S
            self.busy = [span for span in self.busy if span[1] >= keep]
            self.write()

    def write(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"mem_bytes": self.mem_bytes, "busy": self.busy}))
        os.replace(tmp, self.path)
        self.written = time.time()


# -- the reader side (fake NVML and fake nvidia-smi) -------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in (b"Z", b"X")


def processes(state_dir: str) -> dict[int, dict[str, Any]]:
    """``{pid: {"mem_bytes", "busy"}}`` of the live stand-in processes."""
    out: dict[int, dict[str, Any]] = {}
    for path in (Path(state_dir) / "procs").glob("*.json"):
        try:
            pid = int(path.stem)
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if _alive(pid):
            out[pid] = data
    return out


def _covered(spans: list[list[float]], start: float, end: float) -> float:
    """Seconds of [start, end] covered by the union of ``spans``."""
    clipped = sorted((max(a, start), min(b, end)) for a, b in spans if b > start and a < end)
    total, reach = 0.0, start
    for a, b in clipped:
        a = max(a, reach)
        if b > a:
            total += b - a
            reach = b
    return total


def device_util(state_dir: str, now: float | None = None) -> int:
    now = (time.time() if now is None else now) - LAG_S
    spans = [span for proc in processes(state_dir).values() for span in proc.get("busy", [])]
    return round(100.0 * _covered(spans, now - WINDOW_S, now) / WINDOW_S)


def used_bytes(state_dir: str, reserved: bool) -> int:
    used = sum(int(proc.get("mem_bytes") or 0) for proc in processes(state_dir).values())
    return used + (RESERVED_BYTES if reserved else 0)


# -- the fake pynvml's functions (a generated pynvml.py star-imports them after configure()) ---------------

_STATE: dict[str, str] = {}
nvmlMemory_v2 = 0x02000028


class NVMLError(Exception):
    pass


class NVMLError_NotFound(NVMLError):
    pass


class NVMLError_FunctionNotFound(NVMLError):
    pass


def configure(state_dir: str) -> None:
    _STATE["dir"] = state_dir


def _dir() -> str:
    return _STATE["dir"]


def nvmlInit() -> None:
    if "dir" not in _STATE:
        raise NVMLError("the stand-in GPU is not configured")


def nvmlShutdown() -> None:
    pass


def nvmlDeviceGetCount() -> int:
    return 1


def nvmlDeviceGetHandleByIndex(index: int) -> int:
    if index != 0:
        raise NVMLError("Invalid Argument")
    return index


def nvmlSystemGetDriverVersion() -> str:
    return DRIVER


def nvmlSystemGetCudaDriverVersion() -> int:
    major, minor = CUDA.split(".")
    return int(major) * 1000 + int(minor) * 10


def nvmlDeviceGetName(handle: int) -> str:
    return NAME


def nvmlDeviceGetUtilizationRates(handle: int) -> SimpleNamespace:
    return SimpleNamespace(gpu=device_util(_dir()), memory=0)


def nvmlDeviceGetMemoryInfo(handle: int, version: int | None = None) -> SimpleNamespace:
    if version:
        used = used_bytes(_dir(), reserved=False)
        return SimpleNamespace(version=version, total=TOTAL_BYTES, reserved=RESERVED_BYTES,
                               free=TOTAL_BYTES - RESERVED_BYTES - used, used=used)
    used = used_bytes(_dir(), reserved=True)
    return SimpleNamespace(total=TOTAL_BYTES, free=TOTAL_BYTES - used, used=used)


def nvmlDeviceGetComputeRunningProcesses(handle: int) -> list[SimpleNamespace]:
    return [SimpleNamespace(pid=pid, usedGpuMemory=int(proc.get("mem_bytes") or 0))
            for pid, proc in sorted(processes(_dir()).items())]


def nvmlDeviceGetProcessUtilization(handle: int, since_us: int) -> list[SimpleNamespace]:
    now = time.time() - LAG_S
    start = max(since_us / 1e6 - LAG_S, now - 2 * WINDOW_S)
    out = []
    for pid, proc in sorted(processes(_dir()).items()):
        spans = proc.get("busy", [])
        if spans and spans[-1][1] > start:
            share = _covered(spans, start, now) / max(now - start, 1e-6)
            out.append(SimpleNamespace(pid=pid, timeStamp=int(now * 1e6), smUtil=round(100 * share), memUtil=0,
                                       encUtil=0, decUtil=0))
    if not out:
        raise NVMLError_NotFound("Not Found")  # what a real driver answers when no process ran a kernel
    return out


# -- the fake nvidia-smi -----------------------------------------------------------------------------------

_GPU_FIELDS = {
    "index": lambda d: "0",
    "name": lambda d: NAME,
    "driver_version": lambda d: DRIVER,
    "utilization.gpu": lambda d: str(device_util(d)),
    "memory.used": lambda d: str(used_bytes(d, reserved=False) // _MIB),
    "memory.total": lambda d: str(TOTAL_BYTES // _MIB),
}


def smi_main(state_dir: str, argv: list[str]) -> int:
    """The few ``nvidia-smi`` calls distlaunch and gpu_truth.py make, answered from ``state_dir``."""
    opts = dict(a.split("=", 1) for a in argv if a.startswith("--") and "=" in a)
    if not argv:
        print(f"| NVIDIA-SMI (stand-in)   Driver Version: {DRIVER}   CUDA Version: {CUDA}     |")
        print(f"|   0  {NAME}   {used_bytes(state_dir, False) // _MIB}MiB / {TOTAL_BYTES // _MIB}MiB |")
        return 0
    if opts.get("--format") != "csv,noheader,nounits":
        print("nvidia-smi stand-in: only --format=csv,noheader,nounits is answered", file=sys.stderr)
        return 2
    if "--query-gpu" in opts:
        fields = opts["--query-gpu"].split(",")
        unknown = [f for f in fields if f not in _GPU_FIELDS]
        if unknown:
            print(f'Field "{unknown[0]}" is not a valid field to query.', file=sys.stderr)
            return 2
        print(", ".join(_GPU_FIELDS[f](state_dir) for f in fields))
        return 0
    if opts.get("--query-compute-apps") == "pid,used_memory":
        for pid, proc in sorted(processes(state_dir).items()):
            print(f"{pid}, {int(proc.get('mem_bytes') or 0) // _MIB}")
        return 0
    print("nvidia-smi stand-in: query not answered: " + " ".join(argv), file=sys.stderr)
    return 2


def install(fake_dir: Path, state_dir: Path) -> dict[str, str]:
    """Write the fake ``pynvml`` module, ``nvidia-smi`` executable and a ``tensorflow`` that does not
    import (the GPU machine has none) under ``fake_dir``; the environment additions that put them first."""
    here = str(Path(__file__).resolve().parent)
    site = fake_dir / "site"
    bindir = fake_dir / "bin"
    (site / "tensorflow").mkdir(parents=True, exist_ok=True)
    bindir.mkdir(parents=True, exist_ok=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    head = f"import sys\nsys.path.insert(0, {here!r})\nimport gpu_truth_fake as _fake\n"
    (site / "pynvml.py").write_text(
        '"""REHEARSAL stand-in for pynvml (benchmarks/gpu_truth_fake.py)."""\n' + head
        + f"_fake.configure({str(state_dir)!r})\nfrom gpu_truth_fake import *  # noqa: F403\n"
        "from gpu_truth_fake import NVMLError, NVMLError_FunctionNotFound, NVMLError_NotFound, nvmlMemory_v2\n")
    (site / "tensorflow" / "__init__.py").write_text(
        'raise ImportError("hidden by gpu_truth.py --rehearse: the GPU machine has no TensorFlow")\n')
    smi = bindir / "nvidia-smi"
    smi.write_text(f"#!{sys.executable}\n" + head + f"sys.exit(_fake.smi_main({str(state_dir)!r}, sys.argv[1:]))\n")
    smi.chmod(0o755)
    return {"PYTHONPATH": str(site), "PATH": str(bindir)}
