"""What a host offers a job, for the launcher's table of hosts side by side (launcher/remote/parity.py):
free space at given paths, free memory, its clock, and its GPUs (through the one NVML gate).

Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).
"""

from __future__ import annotations

import os
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional


def free_bytes(path: str) -> Optional[int]:
    """Free space for an unprivileged user where ``path`` is (or would be: its nearest existing parent)."""
    path = os.path.expanduser(path)
    while path and not os.path.exists(path):
        parent = os.path.dirname(path.rstrip("/"))
        if parent == path:
            break
        path = parent
    try:
        st = os.statvfs(path or "/")
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def available_memory() -> Optional[int]:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for row in f:
                if row.startswith("MemAvailable:"):
                    return int(row.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def cuda_version(code: Any) -> str:
    """The driver's CUDA version as nvidia-smi writes it ("12.4" for NVML's 12040); "" if unknown."""
    if not isinstance(code, int) or isinstance(code, bool) or code <= 0:
        return ""
    return f"{code // 1000}.{code % 1000 // 10}"


def gpus() -> Optional[List[Dict[str, Any]]]:
    """Each GPU NVML sees: index, model, memory, and what other processes hold on it; None without NVML.
    Nothing of this run runs yet when this is asked, so every process there is another's."""
    from launcher.agent import nvml

    try:
        if not nvml.available():
            return None
        driver = _text(nvml.query("nvmlSystemGetDriverVersion", default=""))
        cuda = cuda_version(nvml.query("nvmlSystemGetCudaDriverVersion", default=None))
        found = []
        for index in range(nvml.device_count()):
            stats = nvml.gpu_stats(index) or {}
            procs = nvml.compute_processes(index) or {}
            found.append({"index": index, "name": _text(nvml.query("nvmlDeviceGetName", nvml.device_handle(index),
                                                                       default="?")),
                          "driver": driver, "cuda": cuda, "mem_total_bytes": stats.get("mem_total_bytes"),
                          "others_pids": sorted(procs),
                          "others_bytes": sum(used or 0 for used in procs.values())})
        return found
    finally:
        nvml.reset()  # this process may fork the host agent next: it starts NVML afresh


def _importable(module: str) -> Optional[bool]:
    try:
        import importlib.util

        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return None


def host_facts(request: Dict[str, Any]) -> Dict[str, Any]:
    """``{"disk": {path: free bytes}, "mem_available_bytes", "gpus", "time"}`` for
    ``{"paths": [...], "gpus": bool}``; ``gpus`` only when asked (importing pynvml costs ~0.2-0.4 s,
    so a launch asks only hosts whose tasks are given GPUs); ``time`` last, so the launcher's
    receive time of the answer is close to it."""
    paths = [str(p) for p in request.get("paths") or []]
    facts: Dict[str, Any] = {"disk": {p: free_bytes(p) for p in paths}, "mem_available_bytes": available_memory()}
    facts["tf_keras"] = _importable("tf_keras")  # Keras 2: what Keras fit needs under a multi-worker strategy
    if request.get("gpus"):
        try:
            import importlib.util

            has_nvml = importlib.util.find_spec("pynvml") is not None
        except (ImportError, ValueError):
            has_nvml = False
        facts["gpus"] = gpus() if has_nvml else None
    facts["time"] = time.time()
    return facts
