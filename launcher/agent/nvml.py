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
from typing import Any, Dict, List, Optional, Tuple

log = logging.getLogger(__name__)

_lock = threading.Lock()
_initialised = False  # nvmlInit was attempted
_available = False  # ... and succeeded
_pynvml: Any = None
_handles: Dict[int, Any] = {}
_memory_v2 = True  # the v2 memory query has not failed yet
_logged: set = set()
_event_set: Any = None  # the Xid event set, once registered
_xid_state = "unset"  # unset | ready | unsupported

# NVML's constants, fixed in its header for every driver (pynvml names them the same)
_TEMPERATURE_GPU = 0
_CLOCK_SM = 1
_ECC_CORRECTED, _ECC_UNCORRECTED = 0, 1
_VOLATILE_ECC = 0
_EVENT_XID = 0x8  # nvmlEventTypeXidCriticalError
_ERROR_TIMEOUT = 10  # NVML_ERROR_TIMEOUT: no event waiting
#: the most events one poll reads (a storm of Xids must not hold the sample pass)
XID_POLL_MAX = 64

#: the clock event (throttle) reasons that say something is holding the GPU back, by NVML bit;
#: idle, application clock settings, sync boost and display clocks are normal and left out
THROTTLE_REASONS = (
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "power_brake"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
_THROTTLE_QUERIES = ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons")


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


def throttle_names(mask: int) -> List[str]:
    """The short names of the problem reasons set in a clock event reasons ``mask``, in bit order."""
    return [name for bit, name in THROTTLE_REASONS if mask & bit]


def _number(value: Any, scale: float = 1.0) -> Optional[float]:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return round(value * scale, 1)


def gpu_health(index: int) -> Dict[str, Any]:
    """What says whether one GPU is well: ``temp_c``, ``power_w`` and ``power_limit_w`` (the
    enforced limit), ``sm_clock_mhz`` and ``sm_clock_max_mhz``, ``throttle`` (the short names of
    :data:`THROTTLE_REASONS` now active) and the volatile (since the driver loaded) ECC error
    counts ``ecc_corrected`` / ``ecc_uncorrected``. A reading the device does not give (no ECC on a
    consumer card, no power sensor, no GPU at all) is None; nothing raises."""
    out: Dict[str, Any] = {"temp_c": None, "power_w": None, "power_limit_w": None, "sm_clock_mhz": None,
                           "sm_clock_max_mhz": None, "throttle": None, "ecc_corrected": None,
                           "ecc_uncorrected": None}
    handle = device_handle(index)
    if handle is None:
        return out
    out["temp_c"] = _number(query("nvmlDeviceGetTemperature", handle, _TEMPERATURE_GPU))
    out["power_w"] = _number(query("nvmlDeviceGetPowerUsage", handle), 0.001)  # NVML gives mW
    out["power_limit_w"] = _number(query("nvmlDeviceGetEnforcedPowerLimit", handle), 0.001)
    out["sm_clock_mhz"] = _number(query("nvmlDeviceGetClockInfo", handle, _CLOCK_SM))
    out["sm_clock_max_mhz"] = _number(query("nvmlDeviceGetMaxClockInfo", handle, _CLOCK_SM))
    for name in _THROTTLE_QUERIES:  # the newer name first; drivers before 12.2 have only the older
        if _pynvml is not None and getattr(_pynvml, name, None) is None:
            continue
        mask = query(name, handle)
        if isinstance(mask, int):
            out["throttle"] = throttle_names(mask)
            break
    for key, kind in (("ecc_corrected", _ECC_CORRECTED), ("ecc_uncorrected", _ECC_UNCORRECTED)):
        count = query("nvmlDeviceGetTotalEccErrors", handle, kind, _VOLATILE_ECC)
        out[key] = int(count) if isinstance(count, int) and not isinstance(count, bool) else None
    return out


def _register_xids() -> bool:
    """Make the Xid event set and register every GPU that takes it; False where none does
    (consumer cards, drivers that refuse): said once, and not tried again."""
    global _event_set, _xid_state
    if _xid_state != "unset":
        return _xid_state == "ready"
    _xid_state = "unsupported"
    if not _ensure_init():
        return False
    event_set = query("nvmlEventSetCreate")
    if event_set is None:
        _log_once("xid", logging.INFO, "no Xid events from NVML: it cannot make an event set")
        return False
    registered = []
    for index in range(device_count()):
        handle = device_handle(index)
        if handle is None:
            continue
        try:
            _pynvml.nvmlDeviceRegisterEvents(handle, _EVENT_XID, event_set)
        except Exception as exc:  # NotSupported on consumer cards, a missing binding
            _log_once("xid:%d" % index, logging.INFO, "no Xid events from GPU %d: %s: %s",
                      index, type(exc).__name__, exc)
            continue
        registered.append(index)
    if not registered:
        with contextlib.suppress(Exception):
            _pynvml.nvmlEventSetFree(event_set)
        _log_once("xid", logging.INFO, "no Xid events from NVML on this host: no GPU takes them")
        return False
    _event_set = event_set
    _xid_state = "ready"
    return True


def _index_of(handle: Any) -> Optional[int]:
    """The physical index of the device an event names."""
    index = query("nvmlDeviceGetIndex", handle)
    if isinstance(index, int):
        return index
    for known, cached in list(_handles.items()):
        if cached is handle or cached == handle:
            return known
    return None


def poll_xids() -> List[Tuple[int, int]]:
    """The Xid errors NVML reported since the last poll, as ``(GPU index, Xid)`` in order; waits for
    none (0 ms). Registers every GPU on the first call; empty where Xid events are unsupported."""
    if not _register_xids():
        return []
    out: List[Tuple[int, int]] = []
    for _ in range(XID_POLL_MAX):
        try:
            data = _pynvml.nvmlEventSetWait(_event_set, 0)
        except Exception as exc:
            if getattr(exc, "value", None) != _ERROR_TIMEOUT and type(exc).__name__ != "NVMLError_Timeout":
                _log_once("xid-wait", logging.WARNING, "waiting for Xid events failed: %s: %s",
                          type(exc).__name__, exc)
            break
        if not int(getattr(data, "eventType", 0)) & _EVENT_XID:
            continue
        index = _index_of(getattr(data, "device", None))
        if index is not None:
            out.append((index, int(getattr(data, "eventData", 0))))
    return out


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
    global _initialised, _available, _pynvml, _memory_v2, _event_set, _xid_state
    with _lock:
        _memory_v2 = True
        if _available and _pynvml is not None:
            if _event_set is not None:
                with contextlib.suppress(Exception):
                    _pynvml.nvmlEventSetFree(_event_set)
            with contextlib.suppress(Exception):
                _pynvml.nvmlShutdown()
        _event_set = None
        _xid_state = "unset"
        _initialised = False
        _available = False
        _pynvml = None
        _handles.clear()
        _logged.clear()
