"""Samples of a host's running tasks: one pass over all of them every interval (the smallest of
theirs), each turned into a ``sample`` event; the host agent and the single-task ``run`` verb run
the same loop. The same pass scans each task's ``checkpoint_dir`` (``launcher/agent/ckptwatch.py``).

The sampler (``launcher.agent.sampling``) is optional in the zipapp: without it no samples go out.

Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).
"""

from __future__ import annotations

import importlib
import os
import threading
from typing import Any, Callable, Dict, List, Optional

from launcher import events
from launcher.agent.agentlog import warn
from launcher.agent.runner import TaskRunner


def sample_tasks(active: Callable[[], List[TaskRunner]], stop: threading.Event) -> None:
    """Sample the tasks ``active`` gives until ``stop`` is set (on a thread of its own)."""
    sampler: Any = None
    primed = False
    complained = False
    while True:
        runners = [r for r in active() if r.active and r.pid]
        interval = min([r.spec.sample_interval for r in runners] or [1.0])
        if stop.wait(max(0.05, interval)):
            return
        runners = [r for r in active() if r.active and r.pid]
        if not runners:
            continue
        for runner in runners:  # the profile's checkpoint_dir: a listdir where a task has one
            runner.watch_checkpoints()
        if sampler is False:
            continue
        if sampler is None:
            # made one interval after the first tasks started, not while they start: its
            # modules (psutil among them) cost ~50 ms of CPU, and a launch's tasks start in that
            # window on every host. Its first pass is the baseline; samples follow from the next
            sampler = make_sampler()
            if sampler is None:
                sampler = False  # no samples here; checkpoint_dir is still watched
                continue
        try:
            found = sampler.sample({r: (r.sample_root, list(r.spec.gpus)) for r in runners})
        except Exception as exc:
            if not complained:
                warn("agent: sample failed: %s" % exc)
                complained = True
            continue
        for runner, sample in found.items():  # the OOM killer's evidence: every pass, the first too
            runner.oom.see(sample.get("pids") or (), sample.get("rss_bytes"))
        if not primed:
            primed = True
            continue
        free: Dict[str, Optional[int]] = {}  # this pass's free bytes per folder: the host's tasks share them
        for runner, sample in found.items():
            if runner.exited.is_set() or not sample.get("pids", True):
                continue  # a task (or its container) that just ended reads as empty: no sample of its end
            runner.writer.write(events.sample_event(
                runner.spec.run, runner.spec.task, cpu_percent=sample.get("cpu_percent"),
                rss_bytes=sample.get("rss_bytes"), gpus=sample.get("gpus"),
                source=str(sample.get("source", "")), host=with_disk(sample.get("host"), runner, free),
                proc_state=sample.get("proc_state"), main_pid=sample.get("main_pid")))


def make_sampler() -> Any:
    """A ``sampling.HostSampler``, or None (told on stderr) where sampling cannot work here."""
    sampling = _load_sampling()
    if sampling is None:
        return None
    try:
        return sampling.HostSampler()
    except Exception as exc:  # a broken sampler must never take the tasks down
        warn("agent: sampling unavailable: %s" % exc)
        return None


def _load_sampling() -> Any:
    try:
        return importlib.import_module("launcher.agent.sampling")
    except ImportError:
        return None


def with_disk(host: Optional[Dict[str, Any]], runner: TaskRunner,
              seen: Optional[Dict[str, Optional[int]]] = None) -> Optional[Dict[str, Any]]:
    """The host sample with the free bytes where the task writes: its job's ``outputs`` (the nearest
    folder that exists) and its run dir (a statvfs each, once per folder and pass with ``seen``)."""
    if host is None:
        return None
    seen = {} if seen is None else seen
    out = dict(host)
    run_dir = os.path.dirname(os.path.dirname(os.path.abspath(runner.task_dir)))
    for name, path in (("outputs_free_bytes", runner.spec.outputs), ("run_dir_free_bytes", run_dir)):
        if not path:
            continue
        if path not in seen:
            seen[path] = free_bytes(path)
        if seen[path] is not None:
            out[name] = seen[path]
    return out


def free_bytes(path: str) -> Optional[int]:
    """Bytes an unprivileged writer may still use at ``path`` (or its nearest existing parent)."""
    path = os.path.abspath(os.path.expanduser(path))
    while True:
        try:
            st = os.statvfs(path)
            return int(st.f_bavail * st.f_frsize)
        except OSError:
            parent = os.path.dirname(path)
            if parent == path:
                return None
            path = parent
