"""The stacks of this host's tasks, read where they run (``distlaunch stacks``, a stall).

For each task: its main Python process (the top-most Python of the task's process group: the
task runs under the wrapper shell and the role's shell), that process's state and wchan from
/proc, then its threads' stacks, by

* py-spy (``py-spy dump``; ``--nonblocking`` for a stopped or D-state process, which a
  blocking dump cannot pause), found through ``$DISTLAUNCH_PYSPY`` (only there when set: a
  path that does not exist turns py-spy off), on PATH, beside the task's Python, or beside
  this agent's Python;
* else faulthandler: autolog's start-up hook registered ``faulthandler.register(SIGUSR2, ...)``
  writing to ``tasks/<slug>/stacks.txt`` (``launcher/autolog/hook.py``); the agent signals the
  process and reads what the handler appended. Only a process that has the handler (its
  marker line in the file, and SIGUSR2 caught in /proc/PID/status) is signalled: SIGUSR2's
  default action would end it.

Where neither works the capture says so in its ``note`` and what would make it work. The tasks
of a host are read in parallel threads. Stdlib-only, Python >= 3.9 (runs on hosts).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Optional, Tuple

from launcher.agent import stackmodel as sm
from launcher.agent.output import last_state
from launcher.agent.procs import _all_pids, _cmdline, _group_members, _is_our_group, pause, stat_fields
from launcher.agent.spec import STACKS_FILE

#: SIGUSR1 is what Slurm's --signal and preemption helpers commonly send; TensorFlow, Keras and
#: absl handle only SIGTERM/SIGINT (and fault signals in C++)
STACKS_SIGNAL = signal.SIGUSR2
#: the line autolog's hook writes into the stacks file when it registered the handler
MARKER = "# distlaunch faulthandler pid %d\n"
#: a path to py-spy (only it is tried); one that does not exist turns py-spy off
PYSPY_ENV = "DISTLAUNCH_PYSPY"
DEFAULT_TIMEOUT = 8.0
#: faulthandler's dump is complete once the file stopped growing for this long
SETTLE_SECONDS = 0.1
_PYTHON_NAME = re.compile(r"^(?:python|pypy)[0-9.]*[a-z]?$")


def capture_host(run_dir: str, tasks: Optional[List[str]] = None, native: bool = False,
                 timeout: float = DEFAULT_TIMEOUT) -> List[sm.TaskStacks]:
    """The captures of the run's tasks on this host (``tasks``: task ids or slugs; None: all)."""
    tasks_dir = os.path.join(run_dir, "tasks")
    try:
        slugs = sorted(os.listdir(tasks_dir))
    except OSError:
        slugs = []
    wanted = set(tasks) if tasks else None
    found: List[Tuple[str, dict]] = []
    for slug in slugs:
        spec = _read_json(os.path.join(tasks_dir, slug, "spec.json"))
        if spec is None:
            continue
        if wanted is None or slug in wanted or str(spec.get("task")) in wanted:
            found.append((slug, spec))
    results: List[Optional[sm.TaskStacks]] = [None] * len(found)
    deadline = time.monotonic() + timeout

    def one(index: int, slug: str, spec: dict) -> None:
        try:
            results[index] = capture_task(os.path.join(tasks_dir, slug), spec, native, deadline)
        except Exception as exc:  # one task's trouble is its own capture's note
            results[index] = sm.TaskStacks(str(spec.get("task")), str(spec.get("host") or ""), None,
                                           sm.UNKNOWN, note="the agent failed to read it: %s" % exc)

    threads = [threading.Thread(target=one, args=(i, slug, spec), name="stacks", daemon=True)
               for i, (slug, spec) in enumerate(found)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()) + 1.0)
    return [r if r is not None else sm.TaskStacks(str(s.get("task")), str(s.get("host") or ""), None, sm.UNKNOWN,
                                                    note="no answer within %g s" % timeout)
            for r, (_, s) in zip(results, found)]  # noqa: B905 (Python 3.9)


def capture_task(task_dir: str, spec: dict, native: bool, deadline: float) -> sm.TaskStacks:
    task, host = str(spec.get("task")), str(spec.get("host") or "")
    info = _read_json(os.path.join(task_dir, "task.json")) or {}
    pgid = int(info.get("pgid") or info.get("pid") or 0)
    state = last_state(os.path.join(task_dir, "events.jsonl"))
    if pgid <= 0 or state in ("succeeded", "failed", "stopped") or not _is_our_group(pgid, spec.get("run")):
        return sm.TaskStacks(task, host, None, sm.GONE, note="not running" + (" (%s)" % state if state else ""))
    root = info.get("host_pid")  # a container a daemon runs: its processes are not in the task's group
    pid = main_python_under(root) if type(root) is int and root > 0 else None
    if pid is None:
        pid = main_python(pgid)
    if pid is None:
        leader = _stat(pgid)
        letter = leader[0] if leader is not None else ""
        return sm.TaskStacks(task, host, pgid, sm.state_word(letter), _wchan(pgid),
                             note="no Python process in the task (its command: %s)" % " ".join(_cmdline(pgid))[:120])
    stat = _stat(pid)
    letter = stat[0] if stat else "X"
    capture = sm.TaskStacks(task, host, pid, sm.state_word(letter), _wchan(pid))
    if capture.state in (sm.ZOMBIE, sm.GONE):
        return capture
    problems: List[str] = []
    spy = find_pyspy(pid)
    if spy is not None:
        threads, error = run_pyspy(spy, pid, native, letter in "TtD", deadline)
        if threads:
            capture.threads, capture.method = threads, sm.PYSPY_NATIVE if native else sm.PYSPY
            return capture
        problems.append("py-spy failed: %s" % error)
    if capture.state in sm.FROZEN_STATES:
        problems.append("a %s process cannot run faulthandler's handler" % capture.state)
    elif spec.get("autolog") is False:
        problems.append("autolog is off, so faulthandler is not set up")
    else:
        threads, error = read_faulthandler(task_dir, pid, deadline)
        if threads:
            capture.threads, capture.method = threads, sm.FAULTHANDLER
            return capture
        problems.append(error)
    if spy is None:
        problems.append("install py-spy on %s (pip install py-spy beside the task's Python)%s" % (
            host or "the host", "" if capture.state in sm.FROZEN_STATES else " or keep autolog on"))
    capture.note = "; ".join(problems)
    return capture


# -- processes -------------------------------------------------------------------------------------


def _stat(pid: int) -> Optional[Tuple[str, int, int]]:
    """(state letter, ppid, start time) of a process from /proc/PID/stat."""
    rest = stat_fields(pid)
    try:
        return rest[0], int(rest[1]), int(rest[19])
    except (IndexError, ValueError):
        return None


def _wchan(pid: int) -> Optional[str]:
    try:
        with open("/proc/%d/wchan" % pid, encoding="ascii", errors="replace") as f:
            text = f.read().strip()
    except OSError:
        return None
    return text if text and text != "0" else None


def _is_python(pid: int) -> bool:
    try:
        exe = os.path.basename(os.readlink("/proc/%d/exe" % pid))
    except OSError:
        exe = ""
    args = _cmdline(pid)
    return bool(_PYTHON_NAME.match(exe) or (args and _PYTHON_NAME.match(os.path.basename(args[0]))))


def main_python(pgid: int) -> Optional[int]:
    """The task's main Python process: the earliest started of the group's Pythons whose parent is
    not a Python of the group (a multiprocessing child is not the task)."""
    return _top_python(_group_members(pgid))


def main_python_under(root: int) -> Optional[int]:
    """The main Python of the process tree under ``root`` (a container's main process, as the host
    sees it: the Python itself, or a shell or init above it)."""
    children: Dict[int, List[int]] = {}
    for pid in _all_pids():
        stat = _stat(pid)
        if stat is not None:
            children.setdefault(stat[1], []).append(pid)
    tree: List[int] = []
    stack = [root]
    while stack and len(tree) < 10000:
        pid = stack.pop()
        tree.append(pid)
        stack.extend(children.get(pid, []))
    return _top_python(tree)


def _top_python(pids: List[int]) -> Optional[int]:
    pythons = {}
    for pid in pids:
        stat = _stat(pid)
        if stat is not None and stat[0] != "Z" and _is_python(pid):
            pythons[pid] = stat
    tops = [pid for pid, stat in pythons.items() if stat[1] not in pythons]
    return min(tops, key=lambda p: (pythons[p][2], p)) if tops else None


def ns_pid(pid: int) -> int:
    """``pid`` as its own (innermost) pid namespace numbers it (NSpid of /proc/PID/status)."""
    try:
        with open("/proc/%d/status" % pid, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return pid


def _caught(pid: int, sig: int) -> bool:
    """True when the process has a handler for ``sig`` (SigCgt of /proc/PID/status)."""
    try:
        with open("/proc/%d/status" % pid, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("SigCgt:"):
                    return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    except (OSError, ValueError, IndexError):
        pass
    return False


# -- py-spy ----------------------------------------------------------------------------------------


def find_pyspy(pid: int) -> Optional[str]:
    """py-spy for the process ``pid``: $DISTLAUNCH_PYSPY alone when set, else on PATH, beside the
    task's Python (as started, and resolved), beside this agent's Python."""
    forced = os.environ.get(PYSPY_ENV)
    if forced is not None:
        return forced if forced and os.access(forced, os.X_OK) else None
    found = shutil.which("py-spy")
    if found:
        return found
    places = []
    args = _cmdline(pid)
    if args and os.path.isabs(args[0]):
        places.append(os.path.dirname(args[0]))
    places.append(os.path.dirname(os.path.realpath("/proc/%d/exe" % pid)))
    places.append(os.path.dirname(sys.executable))
    for place in places:
        candidate = os.path.join(place, "py-spy")
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def run_pyspy(spy: str, pid: int, native: bool, nonblocking: bool,
              deadline: float) -> Tuple[List[sm.ThreadStack], str]:
    """(threads, "") or ([], why py-spy read none)."""
    argv = [spy, "dump", "--pid", str(pid), "--full-filenames"]
    if native:
        argv.append("--native")
    if nonblocking:
        argv.append("--nonblocking")
    try:
        done = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=max(0.5, deadline - time.monotonic()), check=False)
    except subprocess.TimeoutExpired:
        return [], "no answer within the time limit"
    except OSError as exc:
        return [], str(exc)
    text = done.stdout.decode("utf-8", "replace")
    threads = sm.parse_pyspy_dump(text)
    if threads:
        return threads, ""
    lines = [ln.strip() for ln in (text + done.stderr.decode("utf-8", "replace")).splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("Error:") or ln[:2] in ("0:", "1:")]
    return [], " ".join(errors[:3]) or (lines[-1] if lines else "exit code %d" % done.returncode)


# -- faulthandler ----------------------------------------------------------------------------------


def read_faulthandler(task_dir: str, pid: int, deadline: float) -> Tuple[List[sm.ThreadStack], str]:
    """Signal ``pid`` and read the dump autolog's handler appends to the stacks file."""
    path = os.path.join(task_dir, STACKS_FILE)
    try:
        with open(path, "rb") as f:
            before = f.read()
    except OSError:
        return [], "autolog's faulthandler is not set up in this task (no %s)" % STACKS_FILE
    # in a container the handler wrote the pid its own namespace gives it
    if not any((MARKER % p).encode() in before for p in {pid, ns_pid(pid)}) or not _caught(pid, STACKS_SIGNAL):
        return [], "autolog's faulthandler is not set up in pid %d" % pid
    offset = len(before)
    try:
        os.kill(pid, STACKS_SIGNAL)
    except OSError as exc:
        return [], "cannot signal pid %d: %s" % (pid, exc)
    size, changed = offset, time.monotonic()
    while time.monotonic() < deadline:
        pause(0.02)
        try:
            now_size = os.path.getsize(path)
        except OSError:
            break
        if now_size != size:
            size, changed = now_size, time.monotonic()
        elif size > offset and time.monotonic() - changed >= SETTLE_SECONDS:
            break
    if size <= offset:
        return [], "faulthandler wrote nothing (the process did not run the handler in time)"
    with open(path, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", "replace")
    threads = sm.parse_faulthandler(text)
    return (threads, "") if threads else ([], "faulthandler's output held no stack")


def _read_json(path: str) -> Optional[dict]:
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def answer(run_dir: str, tasks: List[str], native: bool, timeout: Optional[float]) -> Dict[str, Any]:
    """The answer to a ``stacks`` request or verb: ``{"stacks": [TaskStacks JSON]}`` of ``tasks``
    (none: every task)."""
    captures = capture_host(run_dir, tasks or None, native, timeout or DEFAULT_TIMEOUT)
    return {"stacks": [c.to_json() for c in captures]}
