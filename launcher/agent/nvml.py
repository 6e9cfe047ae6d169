"""The one gate through which every NVML call goes.

Hosts may have no GPU, no driver, no ``pynvml``, or a driver older than the
``pynvml`` bindings. None of that is an error for distlaunch: it only means
"no GPU data". So every call here initialises NVML lazily (once, under a lock),
turns ``NVMLError`` / ``ImportError`` / a missing binding into a *not available*
result, logs each kind of failure once, and never raises to the caller.

Stdlib-only at import and Python >= 3.9: this module is packed into the agent
zipapp that runs on hosts.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any, Dict, List, Optional

log = logging.getLogger(__name__)

_lock = threading.Lock()
_initialised = False  # nvmlInit was attempted
_available = False  # ... and succeeded
_pynvml: Any = None
_handles: Dict[int, Any] = {}
_memory_v2 = True  # the v2 memory query has not failed yet
_logged: set = set()


def _log_once(key: str, level: int, message: str, *args: Any) -> None:
    """Log ``message`` the first time ``key`` is seen, so a 1 Hz sampler cannot spam the log."""
    with _lock:
        if key in _logged:
            return
        _logged.add(key)
    log.log(level, message, *args)


def _ensure_init() -> bool:
    global _initialised, _available, _pynvml
    if _initialised:
        return _available
    with _lock:
        if _initialised:
            return _available
        try:
            import pynvml

            pynvml.nvmlInit()
        except ImportError as exc:
            failure = "pynvml is not installed (%s)" % exc
        except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
            failure = "NVML init failed: %s: %s" % (type(exc).__name__, exc)
        else:
            _pynvml = pynvml
            _available = True
            failure = ""
        _initialised = True
    if failure:
        _log_once("init", logging.INFO, "no NVML, GPU data from NVML unavailable: %s", failure)
    return _available


def available() -> bool:
    """Whether NVML is loaded and initialised on this host (initialises on first call)."""
    return _ensure_init()


def query(func_name: str, *args: Any, default: Any = None) -> Any:
    """Call ``pynvml.<func_name>(*args)``; ``default`` if NVML or the function is unavailable or fails.

    A binding missing from ``pynvml`` or a symbol missing from the driver library is
    logged once per function name; other NVML errors (NotSupported, NotFound, ...)
    are normal answers and logged once per function at debug level.
    """
    if not _ensure_init():
        return default
    func = getattr(_pynvml, func_name, None)
    if func is None:
        _log_once("missing:" + func_name, logging.WARNING, "pynvml has no function %s", func_name)
        return default
    try:
        return func(*args)
    except _pynvml.NVMLError as exc:
        if isinstance(exc, getattr(_pynvml, "NVMLError_FunctionNotFound", ())):
            _log_once("missing:" + func_name, logging.WARNING,
                      "the NVML library lacks %s (driver too old?)", func_name)
        else:
            _log_once("error:" + func_name, logging.DEBUG, "%s failed: %s", func_name, exc)
        return default
    except Exception as exc:  # a broken binding must not take the agent down
        _log_once("error:" + func_name, logging.WARNING, "%s raised %s: %s",
                  func_name, type(exc).__name__, exc)
        return default


def device_count() -> int:
    """How many GPUs NVML sees (0 without NVML)."""
    return int(query("nvmlDeviceGetCount", default=0))


def device_handle(index: int) -> Any:
    """The NVML handle of the GPU with physical ``index``, or None. Cached per index."""
    handle = _handles.get(index)
    if handle is None:
        handle = query("nvmlDeviceGetHandleByIndex", index)
        if handle is not None:
            _handles[index] = handle
    return handle


def gpu_stats(index: int) -> Optional[Dict[str, Any]]:
    """``{"index", "util_percent", "mem_used_bytes", "mem_total_bytes"}`` for one GPU, or None.

    A value the device does not report is None; None for the whole dict means the
    GPU itself cannot be reached.
    """
    handle = device_handle(index)
    if handle is None:
        return None
    util = query("nvmlDeviceGetUtilizationRates", handle)
    mem = _memory_info(handle)
    return {
        "index": index,
        "util_percent": float(util.gpu) if util is not None else None,
        "mem_used_bytes": int(mem.used) if mem is not None else None,
        "mem_total_bytes": int(mem.total) if mem is not None else None,
    }


def _memory_info(handle: Any) -> Any:
    """The GPU's memory as nvidia-smi shows it: NVML's v2 answer, whose ``used`` leaves out what the
    driver reserves for itself; v1's counts it as used (some 0.5-1 GiB on an idle data-centre GPU that
    nvidia-smi shows at ~0 MiB). v1 where the binding or the driver has no v2: once v1 answers where v2
    did not, v2 is not asked again."""
    global _memory_v2
    version = getattr(_pynvml, "nvmlMemory_v2", None)
    if not _memory_v2 or version is None:
        return query("nvmlDeviceGetMemoryInfo", handle)
    try:
        return _pynvml.nvmlDeviceGetMemoryInfo(handle, version)
    except Exception as exc:  # NVMLError_FunctionNotFound (an older driver), an old binding's TypeError
        _log_once("memory_v2", logging.DEBUG, "nvmlDeviceGetMemoryInfo v2 failed (%s: %s)", type(exc).__name__, exc)
    mem = query("nvmlDeviceGetMemoryInfo", handle)
    if mem is not None:
        _memory_v2 = False
    return mem


_PROCESS_QUERIES = (
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v2",
)


def compute_processes(index: int) -> Optional[Dict[int, Optional[int]]]:
    """``{pid: used GPU memory bytes or None}`` of the compute processes on one GPU, or None.

    Tries the newest binding first and an older one for older drivers. The pids are
    as the driver sees them (host pids, even inside a container).
    """
    handle = device_handle(index)
    if handle is None:
        return None
    for name in _PROCESS_QUERIES:
        procs = query(name, handle)
        if procs is not None:
            out: Dict[int, Optional[int]] = {}
            for proc in procs:
                used = getattr(proc, "usedGpuMemory", None)
                out[int(proc.pid)] = int(used) if used is not None else None
            return out
    return None


def process_utilization(index: int, window_s: float = 1.0) -> Optional[Dict[int, int]]:
    """``{pid: SM utilisation percent}`` over the last ``window_s`` seconds on one GPU, or None.

    NVML answers "not found" when no process ran a kernel in the window; that is
    reported as an empty dict only when the device is reachable.
    """
    handle = device_handle(index)
    if handle is None:
        return None
    since_us = int((time.time() - window_s) * 1_000_000)
    samples: Optional[List[Any]] = query("nvmlDeviceGetProcessUtilization", handle, since_us)
    if samples is None:
        return {}
    out: Dict[int, int] = {}
    for sample in samples:
        pid = int(sample.pid)
        out[pid] = max(out.get(pid, 0), int(sample.smUtil))
    return out


def reset() -> None:
    """Forget the init state, cached handles and what was logged (tests; after a fork)."""
    global _initialised, _available, _pynvml, _memory_v2
    with _lock:
        _memory_v2 = True
        if _available and _pynvml is not None:
            with contextlib.suppress(Exception):
                _pynvml.nvmlShutdown()
        _initialised = False
        _available = False
        _pynvml = None
        _handles.clear()
        _logged.clear()
