"""CPU, memory and GPU use of one task's whole process tree, sampled by the agent.

A task is ``/bin/sh -c <command>`` plus whatever it forks (data loaders,
``tf.data`` service workers, ...), and children come and go, so the tree is
walked again on every sample. CPU is the percent of one core (like ``top``:
four busy threads read 400), computed from the growth of user+system time of the
processes alive in the tree between two samples; a child that lives and dies
between two samples is not seen.

Sources, best first, and the sample's ``source`` string says which were used:
CPU/memory from ``psutil`` or ``/proc``; GPUs from NVML (``launcher.agent.nvml``) or
one ``nvidia-smi`` call per sample. No GPU, no driver, or a vanished task are
normal states: values become None, nothing raises.

Stdlib-only at import and Python >= 3.9: this module is packed into the agent
zipapp that runs on hosts.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import time
from typing import Any, Dict, List, Optional, Tuple

from launcher.agent import nvml
from launcher.agent.readings import (
    HostReader,
    ProcKey,
    TreeReading,
    empty_gpu,
    parse_nvidia_smi,
    proc_children,
    read_proc_stat,
    scan_parents,
    scan_stats,
)

log = logging.getLogger(__name__)


NVIDIA_SMI_TIMEOUT_S = 2.0
_SMI_QUERY = "--query-gpu=index,utilization.gpu,memory.used,memory.total"

GPU_NVML = "nvml"
GPU_SMI = "nvidia-smi"
GPU_NONE = "nogpu"


class TaskSampler:
    """Samples one task: build it right after the task starts, call ``sample()`` every interval.

    ``pid`` is the task's root process; ``gpu_indices`` are the physical GPU indices
    the task was given (empty: none). ``use_psutil`` / ``use_nvml``: None picks the
    best available source, False forces the fallback (``/proc``, ``nvidia-smi``).
    The first ``sample()`` covers the time since construction.
    """

    def __init__(self, pid: int, gpu_indices: List[int], use_psutil: Optional[bool] = None,
                 use_nvml: Optional[bool] = None) -> None:
        self.pid = pid
        self.gpu_indices = list(gpu_indices)
        self._use_nvml = use_nvml
        self._psutil: Any = _psutil_module(use_psutil)
        self._psutil_root: Any = None
        self._children_files: Optional[bool] = None
        self._clock_ticks = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        self._page_size = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._gpu_mode: Optional[str] = None
        self._host = HostReader()
        self._prev_cpu: Dict[ProcKey, float] = {}
        self._prev_time = time.monotonic()
        baseline = self._read_tree_safely()
        if baseline is not None:
            self._prev_cpu = {key: cpu for key, (cpu, _) in baseline.items()}

    @property
    def cpu_source(self) -> str:
        return "psutil" if self._psutil is not None else "proc"

    def sample(self) -> Dict[str, Any]:
        """``{"cpu_percent", "rss_bytes", "gpus": [...], "source", "host": {...}}``; never raises."""
        now = time.monotonic()
        reading = self._read_tree_safely()
        cpu_percent: Optional[float] = None
        rss_bytes: Optional[int] = None
        pids: set = set()
        if reading is not None:
            elapsed = now - self._prev_time
            used = sum(max(0.0, cpu - self._prev_cpu.get(key, 0.0)) for key, (cpu, _) in reading.items())
            if elapsed > 0:
                cpu_percent = round(100.0 * used / elapsed, 1)
            rss_bytes = sum(rss for _, rss in reading.values() if rss is not None)
            pids = {pid for pid, _ in reading}
            self._prev_cpu = {key: cpu for key, (cpu, _) in reading.items()}
        self._prev_time = now
        try:
            gpus = self._sample_gpus(pids)
        except Exception as exc:  # the agent must keep supervising whatever happens here
            log.warning("GPU sampling failed: %s: %s", type(exc).__name__, exc)
            self._gpu_mode = GPU_NONE
            gpus = [empty_gpu(i) for i in self.gpu_indices]
        source = self.cpu_source
        if self.gpu_indices:
            source += "+" + (self._gpu_mode or GPU_NONE)
        try:
            host: Optional[Dict[str, Any]] = self._host.read()
        except Exception as exc:  # /proc oddities must not stop task sampling
            log.warning("host sampling failed: %s: %s", type(exc).__name__, exc)
            host = None
        return {"cpu_percent": cpu_percent, "rss_bytes": rss_bytes, "gpus": gpus, "source": source,
                "host": host}

    # -- process tree ----------------------------------------------------------------------

    def _read_tree_safely(self) -> Optional[TreeReading]:
        try:
            if self._psutil is not None:
                return self._read_tree_psutil()
            return self._read_tree_proc()
        except Exception as exc:
            log.warning("process sampling of pid %d failed: %s: %s", self.pid, type(exc).__name__, exc)
            return None

    def _read_tree_psutil(self) -> Optional[TreeReading]:
        psutil = self._psutil
        gone = (psutil.NoSuchProcess, psutil.AccessDenied)
        try:
            if self._psutil_root is None:
                self._psutil_root = psutil.Process(self.pid)
            root = self._psutil_root
            if not root.is_running():
                return None
            procs = [root, *root.children(recursive=True)]
        except gone:
            return None
        out: TreeReading = {}
        for proc in procs:
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    rss = proc.memory_info().rss
                    out[(proc.pid, proc.create_time())] = (times.user + times.system, int(rss))
            except gone:
                continue
        return out

    def _read_tree_proc(self) -> Optional[TreeReading]:
        root = read_proc_stat(self.pid)
        if root is None:
            return None
        if self._children_files is None:
            self._children_files = os.path.exists("/proc/%d/task/%d/children" % (self.pid, self.pid))
        parents: Optional[Dict[int, List[int]]] = None if self._children_files else scan_parents()
        out: TreeReading = {}
        stack = [self.pid]
        seen = set()
        while stack:
            pid = stack.pop()
            if pid in seen:
                continue
            seen.add(pid)
            stat = root if pid == self.pid else read_proc_stat(pid)
            if stat is None:
                continue
            _, ticks, start = stat
            out[(pid, start)] = (ticks / self._clock_ticks, self._read_rss(pid))
            stack.extend(proc_children(pid) if parents is None else parents.get(pid, []))
        return out

    def _read_rss(self, pid: int) -> Optional[int]:
        try:
            with open("/proc/%d/statm" % pid) as f:
                return int(f.read().split()[1]) * self._page_size
        except (OSError, ValueError, IndexError):
            return None

    # -- GPUs ------------------------------------------------------------------------------

    def _sample_gpus(self, pids: set) -> List[Dict[str, Any]]:
        if not self.gpu_indices:
            return []
        if self._gpu_mode is None:
            self._gpu_mode = self._pick_gpu_mode()
        if self._gpu_mode == GPU_NVML:
            return [self._nvml_gpu(index, pids) for index in self.gpu_indices]
        if self._gpu_mode == GPU_SMI:
            by_index = self._run_nvidia_smi()
            if by_index is not None:
                return [by_index.get(i) or empty_gpu(i) for i in self.gpu_indices]
        return [empty_gpu(i) for i in self.gpu_indices]

    def _pick_gpu_mode(self) -> str:
        if self._use_nvml is not False and nvml.available():
            return GPU_NVML
        if shutil.which("nvidia-smi"):
            return GPU_SMI
        return GPU_NONE

    def _nvml_gpu(self, index: int, pids: set) -> Dict[str, Any]:
        entry = nvml.gpu_stats(index) or empty_gpu(index)
        entry.update(nvml.gpu_health(index))
        entry["proc_mem_bytes"] = None
        entry["proc_util_percent"] = None
        procs = nvml.compute_processes(index)
        if procs is not None:
            ours = [used for pid, used in procs.items() if pid in pids]
            known = [used for used in ours if used is not None]
            entry["proc_mem_bytes"] = sum(known) if known or not ours else None
        utils = nvml.process_utilization(index)
        if utils is not None:
            entry["proc_util_percent"] = float(sum(u for pid, u in utils.items() if pid in pids))
        return entry

    def _run_nvidia_smi(self) -> Optional[Dict[int, Dict[str, Any]]]:
        """One ``nvidia-smi`` call for all GPUs; on any failure, stop using it for good."""
        path = shutil.which("nvidia-smi")
        try:
            if path is None:
                raise OSError("nvidia-smi is no longer on PATH")
            done = subprocess.run([path, _SMI_QUERY, "--format=csv,noheader,nounits"],
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=NVIDIA_SMI_TIMEOUT_S, check=False)
            if done.returncode != 0:
                raise OSError("exit code %d: %s" % (done.returncode, done.stderr.strip()[:200]))
        except (OSError, subprocess.SubprocessError) as exc:
            log.warning("nvidia-smi failed, no more GPU samples from it: %s", exc)
            self._gpu_mode = GPU_NONE
            return None
        return parse_nvidia_smi(done.stdout)


def _psutil_module(use_psutil: Optional[bool]) -> Any:
    """psutil where it is installed and not turned off (False), else None (/proc is read instead)."""
    if use_psutil is False:
        return None
    try:
        import psutil
    except ImportError:
        return None
    return psutil


def tree_state(pids: "set[int]", states: Dict[int, str]) -> Optional[str]:
    """The state of a task's process tree as a peer's failure needs it: T when any member is
    stopped (SIGSTOP, a debugger: t), else D when one waits on the disk, else S or R (None: no
    process). It joins the cause of a peer that lost contact with this task."""
    letters = {states.get(pid, "") for pid in pids}
    if letters & {"T", "t"}:
        return "T"
    if "D" in letters:
        return "D"
    if "R" in letters:
        return "R"
    return "S" if letters - {""} else None


#: what a task's wrapper and its command's shell are: the program a user means is below them
SHELLS = frozenset({"sh", "dash", "bash", "zsh", "ksh", "ash", "busybox"})


def _comm(pid: int) -> str:
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


def program_pid(root: int, children: Dict[int, List[int]], stats: Dict[int, Tuple[int, int, float]]) -> int:
    """The process a task's command started: from the tree's root (the wrapper shell, which is the
    process group a stop signals) down through shells that each have one child; the pid a user
    hands py-spy, gdb or kill -STOP, and the one ``stacks`` reads."""
    pid = root
    for _ in range(8):
        kids = [c for c in children.get(pid, []) if c in stats]
        if len(kids) != 1 or _comm(pid) not in SHELLS:
            break
        pid = kids[0]
    return pid


class HostSampler:
    """Samples every task of a host in one pass: one /proc walk for all process trees, one GPU
    query per GPU in use (its use and its health: ``nvml.gpu_health``), one poll of NVML's Xid
    events, one machine reading. Each GPU entry carries ``xid_count``, the Xids NVML reported for
    that GPU since this agent started (each agent is one run's), and ``xid``, the latest.
    ``sample({key: (root pid, gpu indices)})`` returns ``{key: sample}`` (the shape of
    ``TaskSampler.sample``); a task's first sample covers the time since it was first seen. Never
    raises."""

    def __init__(self, use_psutil: Optional[bool] = None, use_nvml: Optional[bool] = None) -> None:
        self._use_nvml = use_nvml
        self._psutil: Any = _psutil_module(use_psutil)
        self._procs: Dict[ProcKey, Any] = {}  # psutil.Process per tree member, kept while it lives
        self._clock_ticks = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0
        self._page_size = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self._host = HostReader()
        self._gpu_mode: Optional[str] = None
        self._smi = TaskSampler.__new__(TaskSampler)  # borrows its nvidia-smi call and GPU entries
        self._smi._gpu_mode = None
        self._prev: Dict[Any, Tuple[float, Dict[ProcKey, float]]] = {}
        #: per GPU index: (Xids NVML reported since this agent started, the latest one)
        self._xids: Dict[int, Tuple[int, int]] = {}

    def sample(self, tasks: Dict[Any, Tuple[int, List[int]]]) -> Dict[Any, Dict[str, Any]]:
        now = time.monotonic()
        states: Dict[int, str] = {}
        stats = scan_stats(states)
        children: Dict[int, List[int]] = {}
        for pid, (ppid, _, _) in stats.items():
            children.setdefault(ppid, []).append(pid)
        seen: set = set()
        trees: Dict[Any, TreeReading] = {key: self._tree(root, stats, children, seen)
                                         for key, (root, _) in tasks.items()}
        for gone in [k for k in self._procs if k not in seen]:
            del self._procs[gone]
        gpu_by_index = self._gpus(sorted({i for _, gpus in tasks.values() for i in gpus}))
        try:
            host: Optional[Dict[str, Any]] = self._host.read()
        except Exception as exc:  # /proc oddities must not stop task sampling
            log.warning("host sampling failed: %s: %s", type(exc).__name__, exc)
            host = None
        out: Dict[Any, Dict[str, Any]] = {}
        for key, (_root, gpu_indices) in tasks.items():
            reading = trees[key]
            then, prev_cpu = self._prev.get(key, (now, {}))
            cpu_percent: Optional[float] = None
            rss_bytes: Optional[int] = None
            if reading:
                used = sum(max(0.0, cpu - prev_cpu.get(k, cpu if key not in self._prev else 0.0))
                           for k, (cpu, _) in reading.items())
                if now > then:
                    cpu_percent = round(100.0 * used / (now - then), 1)
                rss_bytes = sum(rss for _, rss in reading.values() if rss is not None)
            self._prev[key] = (now, {k: cpu for k, (cpu, _) in reading.items()})
            pids = {pid for pid, _ in reading}
            gpus = [self._gpu_entry(gpu_by_index, i, pids) for i in gpu_indices]
            source = ("psutil" if self._psutil is not None else "proc") + (
                "+" + (self._gpu_mode or GPU_NONE) if gpu_indices else "")
            out[key] = {"cpu_percent": cpu_percent, "rss_bytes": rss_bytes, "gpus": gpus, "source": source,
                        "host": host, "pids": sorted(pids), "proc_state": tree_state(pids, states),
                        "main_pid": program_pid(_root, children, stats) if reading else None}
        for key in [k for k in self._prev if k not in tasks]:
            del self._prev[key]
        return out

    def _tree(self, root: int, stats: Dict[int, Tuple[int, int, float]],
              children: Dict[int, List[int]], seen: set) -> TreeReading:
        """The process tree under ``root`` from one /proc walk; each member's CPU and RSS from psutil
        where it is installed, else from the same /proc files."""
        out: TreeReading = {}
        stack = [root] if root in stats else []
        while stack:
            pid = stack.pop()
            _, ticks, start = stats[pid]
            if (pid, start) in out:
                continue
            seen.add((pid, start))
            reading = self._psutil_reading(pid, start) if self._psutil is not None else None
            out[(pid, start)] = reading or (ticks / self._clock_ticks, self._rss(pid))
            stack.extend(c for c in children.get(pid, []) if c in stats)
        return out

    def _psutil_reading(self, pid: int, start: float) -> Optional[Tuple[float, Optional[int]]]:
        psutil = self._psutil
        try:
            proc = self._procs.get((pid, start))
            if proc is None:
                proc = self._procs[(pid, start)] = psutil.Process(pid)
            with proc.oneshot():
                times = proc.cpu_times()
                return times.user + times.system, int(proc.memory_info().rss)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None

    def _rss(self, pid: int) -> Optional[int]:
        try:
            with open("/proc/%d/statm" % pid) as f:
                return int(f.read().split()[1]) * self._page_size
        except (OSError, ValueError, IndexError):
            return None

    def _gpus(self, indices: List[int]) -> Dict[int, Dict[str, Any]]:
        """Per GPU in use: its stats and per-process use (one query each), by physical index."""
        if not indices:
            return {}
        try:
            if self._gpu_mode is None:
                self._gpu_mode = (GPU_NVML if self._use_nvml is not False and nvml.available()
                                  else GPU_SMI if shutil.which("nvidia-smi") else GPU_NONE)
            if self._gpu_mode == GPU_NVML:
                for index, xid in nvml.poll_xids():
                    count, _ = self._xids.get(index, (0, 0))
                    self._xids[index] = (count + 1, xid)
                out: Dict[int, Dict[str, Any]] = {}
                for i in indices:
                    entry = nvml.gpu_stats(i) or empty_gpu(i)
                    entry.update(nvml.gpu_health(i))
                    entry["xid_count"], entry["xid"] = self._xids.get(i, (0, None))
                    out[i] = {"entry": entry, "procs": nvml.compute_processes(i), "utils": nvml.process_utilization(i)}
                return out
            if self._gpu_mode == GPU_SMI:
                by_index = self._smi._run_nvidia_smi()
                if by_index is None:
                    self._gpu_mode = GPU_NONE
                    return {}
                return {i: {"entry": by_index.get(i) or empty_gpu(i), "procs": None, "utils": None}
                        for i in indices}
        except Exception as exc:  # the agent must keep supervising whatever happens here
            log.warning("GPU sampling failed: %s: %s", type(exc).__name__, exc)
            self._gpu_mode = GPU_NONE
        return {}

    @staticmethod
    def _gpu_entry(by_index: Dict[int, Dict[str, Any]], index: int, pids: set) -> Dict[str, Any]:
        found = by_index.get(index)
        if found is None:
            return empty_gpu(index)
        entry = dict(found["entry"])
        entry["proc_mem_bytes"] = None
        entry["proc_util_percent"] = None
        procs, utils = found["procs"], found["utils"]
        if procs is not None:
            ours = [used for pid, used in procs.items() if pid in pids]
            known = [used for used in ours if used is not None]
            entry["proc_mem_bytes"] = sum(known) if known or not ours else None
        if utils is not None:
            entry["proc_util_percent"] = float(sum(u for pid, u in utils.items() if pid in pids))
        return entry


