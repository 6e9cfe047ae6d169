"""Whether a profiler capture would crash this task, said to the launcher (issue 46 §2).

TensorFlow's profiler (2.21 at least) kills a task whose collective ops complete their parameters
with another task, the collective leader: a MultiWorkerMirrored worker other than chief:0 (or
worker:0 where there is no chief) dies of SIGSEGV or SIGABRT (``free(): invalid size``) when its
host tracer stops, and the job fails with it. No tracer option avoids it but one that records
nothing on the host (tests/data/steptime/profiler_crash.py has the evidence). So
`distlaunch profile` does not capture such a task.

So ``launcher/tfprofiler/safety.py`` never captures such a task: with ``strategy =
"multi_worker_mirrored"``, every worker but the leader; with any strategy, a task whose autolog saw
``Context.configure_collective_ops`` name another task as leader
(``launcher/autolog/profilersafety.py``, watched once the profiler server started: a metric value
``profiler_unsafe`` = 1, read back from events.jsonl, only lines holding that name decoded). One
line each says why and what to do instead; the others are captured. A task whose capture failed
because it ended meanwhile is said to have ended (its ``state`` event since the capture began,
waited for up to 3 s), never what its port's silence looked like.

A strategy says so as it starts: ``Context.configure_collective_ops(collective_leader=...)``
(what MultiWorkerMirroredStrategy calls in a cluster). When the leader it names is not this task,
a metric value ``PROFILER_UNSAFE`` = 1 goes out once, which `distlaunch profile` reads back from
the run's events (launcher/tfprofiler/safety.py): the profile's ``strategy`` need not say
``multi_worker_mirrored`` for the task to be spared.

Stdlib-only at import and Python >= 3.9 (the value's name is in ``launcher/protocol/metricnames.py``);
autolog's recorder (its reader thread, its exit flush) is imported only where it is used.
"""

from __future__ import annotations

import functools
import json
import os
import re
from typing import Any, Callable, Optional, Tuple

from launcher.protocol.metricnames import PROFILER_UNSAFE

_JOB = re.compile(r"/job:([^/]+)")
_TASK = re.compile(r"/task:(\d+)")


def watch(module: Callable[[str], Any]) -> None:
    """Wrap ``Context.configure_collective_ops`` to judge the leader it is given (once)."""
    context = module("tensorflow.python.eager.context")
    owner = getattr(context, "Context", None)
    if owner is None:
        return
    original = owner.__dict__.get("configure_collective_ops")
    if original is None or getattr(original, "_distlaunch_wrapped", False):
        return

    @functools.wraps(original)
    def configure_collective_ops(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = original(self, *args, **kwargs)
        try:
            _judge(_argument(args, kwargs, 0, "collective_leader"), _argument(args, kwargs, 3, "device_filters"))
        except Exception as exc:  # never the script's failure
            _recorder().degraded("tell whether a profiler capture is safe here", exc)
        return result

    configure_collective_ops._distlaunch_wrapped = True  # type: ignore[attr-defined]
    owner.configure_collective_ops = configure_collective_ops


def _argument(args: Tuple[Any, ...], kwargs: dict, index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


def _judge(leader: Any, device_filters: Any) -> None:
    chief = _task_of(leader)
    if chief is None:  # "": collectives on this machine only
        return
    me = _task_of(device_filters[0]) if device_filters else None
    if me is None:
        me = _tf_config_task()
    if me is not None and me != chief:
        _recorder().note(values={PROFILER_UNSAFE: 1}, now=True)


def _recorder() -> Any:
    from launcher.autolog import recorder

    return recorder


def _task_of(device: Any) -> Optional[Tuple[str, int]]:
    """("worker", 1) of ``/job:worker/replica:0/task:1``; None for anything else."""
    job, task = _JOB.search(str(device or "")), _TASK.search(str(device or ""))
    return (job.group(1), int(task.group(1))) if job and task else None


def _tf_config_task() -> Optional[Tuple[str, int]]:
    try:
        task = json.loads(os.environ.get("TF_CONFIG") or "{}").get("task") or {}
        return str(task["type"]), int(task["index"])
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
