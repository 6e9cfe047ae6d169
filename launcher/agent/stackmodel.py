"""The stacks of a job's tasks: what one capture holds, how it is read, grouped and judged.

A capture is a list of ``TaskStacks``, one per task: the process's state as /proc shows it, its
wchan, and the Python threads (frames oldest first, newest LAST, as Python prints them) that
py-spy or faulthandler read. The host agent builds them (``launcher/agent/stackreader.py``), the
launcher gathers them, and ``distlaunch stacks``, the stall capture and the dashboard's stacks
view read them with ``group``, ``suspect`` and ``user_frame``.

Stdlib-only, Python >= 3.9: packed into the agent zipapp.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

# methods
PYSPY = "py-spy"
PYSPY_NATIVE = "py-spy --native"
FAULTHANDLER = "faulthandler"
METHODS = (PYSPY, PYSPY_NATIVE, FAULTHANDLER)

# process states in words, from the state letter of /proc/PID/stat
RUNNING = "running"
SLEEPING = "sleeping"
DISK_WAIT = "disk wait"
STOPPED = "stopped"
ZOMBIE = "zombie"
TRACING_STOP = "tracing stop"
IDLE = "idle"
GONE = "gone"
#: the host did not answer in time: the state is unknown
UNKNOWN = "unknown"
STATE_WORDS = {"R": RUNNING, "S": SLEEPING, "D": DISK_WAIT, "T": STOPPED, "t": TRACING_STOP,
               "Z": ZOMBIE, "X": GONE, "I": IDLE}
#: states whose process cannot run a signal handler (faulthandler) and whose stack will not move
FROZEN_STATES = (STOPPED, TRACING_STOP)
#: states with nothing to read: no stacks is the whole answer
NO_STACK_STATES = (STOPPED, TRACING_STOP, ZOMBIE, GONE)


@dataclass(frozen=True)
class Frame:
    function: str
    file: str
    line: Optional[int]
    native: bool = False

    @property
    def label(self) -> str:
        """``wait_for_peer (hang.py:4)``: the function and the file's base name."""
        where = os.path.basename(self.file) or self.file
        return "%s (%s)" % (self.function, where if self.line is None else "%s:%d" % (where, self.line))

    def key(self) -> Tuple[str, str, Optional[int]]:
        return self.function, self.file, self.line


@dataclass
class ThreadStack:
    name: str
    ident: str
    frames: List[Frame] = field(default_factory=list)  # oldest first, newest last

    def key(self) -> Tuple[Tuple[str, str, Optional[int]], ...]:
        """What two threads must share to count as the same stack (native frames left out, so a
        ``--native`` capture and a plain one of the same code compare equal)."""
        return tuple(f.key() for f in self.frames if not f.native)


@dataclass
class TaskStacks:
    task: str
    host: str
    pid: Optional[int]
    state: str
    wchan: Optional[str] = None
    method: Optional[str] = None
    threads: List[ThreadStack] = field(default_factory=list)
    note: Optional[str] = None  # why there are no stacks / what would make it work

    @property
    def answered(self) -> bool:
        """True when the task's host said what there is to say: stacks, or a state that has none."""
        return bool(self.threads) or self.state in NO_STACK_STATES

    def main_thread(self) -> Optional[ThreadStack]:
        """The thread named MainThread (py-spy), else the one that runs a ``<module>`` frame (the
        script, also under ``python -m``: faulthandler names no thread), else the first."""
        for thread in self.threads:
            if thread.name == "MainThread":
                return thread
        for thread in self.threads:
            if any(f.function == "<module>" for f in thread.frames):
                return thread
        return self.threads[0] if self.threads else None

    def to_json(self) -> Dict[str, Any]:
        """A JSON-able dict (the wire between agent and launcher, and the run dir's capture files)."""
        return {"task": self.task, "host": self.host, "pid": self.pid, "state": self.state, "wchan": self.wchan,
                "method": self.method, "note": self.note,
                "threads": [{"name": t.name, "ident": t.ident,
                             "frames": [[f.function, f.file, f.line, f.native] for f in t.frames]}
                            for t in self.threads]}

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "TaskStacks":
        threads = [ThreadStack(str(t.get("name") or ""), str(t.get("ident") or ""),
                               [Frame(str(f[0]), str(f[1]), None if f[2] is None else int(f[2]), bool(f[3]))
                                for f in t.get("frames") or []])
                   for t in data.get("threads") or []]
        pid = data.get("pid")
        return cls(task=str(data["task"]), host=str(data.get("host") or ""), pid=None if pid is None else int(pid),
                   state=str(data.get("state") or UNKNOWN), wchan=data.get("wchan"), method=data.get("method"),
                   threads=threads, note=data.get("note"))


def state_word(letter: str) -> str:
    return STATE_WORDS.get(letter, letter or UNKNOWN)


# -- parsers -------------------------------------------------------------------------------------

_PYSPY_THREAD = re.compile(r'^Thread (?P<ident>\S+)(?: \((?P<status>[^)]*)\))?:?(?: "(?P<name>.*)")?\s*$')
_PYSPY_FRAME = re.compile(r"^\s+(?P<function>.+?) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)\s*$")
_FH_THREAD = re.compile(r"^(?:Current thread|Thread) (?P<ident>0x[0-9a-fA-F]+|\d+)"
                        r"(?: \[(?P<name>[^\]]*)\])? \(most recent call first\):\s*$")
_FH_FRAME = re.compile(r'^\s+File "(?P<file>.*)", line (?P<line>\d+|\?\?\?) in (?P<function>.*?)\s*$')


def parse_pyspy_dump(text: str) -> List[ThreadStack]:
    """The threads of ``py-spy dump`` text output (with or without ``--native``, ``--full-filenames``).

    py-spy prints the newest frame first; the frames come back oldest first. A frame without a
    line number (``clock_nanosleep (libc.so.6)``, ``0x7f.. (libc.so.6)``) is native."""
    threads: List[ThreadStack] = []
    current: Optional[ThreadStack] = None
    for raw in text.splitlines():
        head = _PYSPY_THREAD.match(raw)
        if head:
            current = ThreadStack(head.group("name") or "", head.group("ident"))
            threads.append(current)
            continue
        frame = _PYSPY_FRAME.match(raw) if current is not None else None
        if frame and current is not None:
            line = frame.group("line")
            current.frames.append(Frame(frame.group("function"), frame.group("file"),
                                        None if line is None else int(line), native=line is None))
        elif raw and not raw[0].isspace():
            current = None  # "Process ...", "Python v...", an error: not part of a thread
    for thread in threads:
        thread.frames.reverse()
    return threads


def parse_faulthandler(text: str) -> List[ThreadStack]:
    """The threads of faulthandler's dump (``dump_traceback(all_threads=True)``) in ``text``.

    Only the last dump counts when the text holds several (the file is appended to at each
    signal): a thread seen again starts a new dump."""
    threads: List[ThreadStack] = []
    current: Optional[ThreadStack] = None
    for raw in text.splitlines():
        head = _FH_THREAD.match(raw)
        if head:
            if any(t.ident == head.group("ident") for t in threads):
                threads = []
            current = ThreadStack(head.group("name") or "", head.group("ident"))
            threads.append(current)
            continue
        frame = _FH_FRAME.match(raw)
        if frame and current is not None:
            line = frame.group("line")
            current.frames.append(Frame(frame.group("function"), frame.group("file"),
                                        int(line) if line.isdigit() else None))
        elif not raw.lstrip().startswith(("...", "<no Python frame>")):
            current = None
    for thread in threads:
        thread.frames.reverse()
    return threads


# -- the user's own frame ------------------------------------------------------------------------

_LIBRARY_PARTS = ("/site-packages/", "/dist-packages/", "/tensorflow/", "/keras/", "/tf_keras/", "/absl/")
#: distlaunch's own code in a task (autolog, report, the agent): from the zipapp, whose compiled files
#: name their sources relative to it ("launcher/autolog/patches.py"), or from an installed checkout
_DISTLAUNCH_OWN = re.compile(r"(?:^|/)(?:launcher/(?:autolog/|agent/|report\.py$|events\.py$)|distlaunch_site/)"
                             r"|agent\.pyz/")
_STDLIB_DIR = re.compile(r"/lib(?:64)?/python\d+(?:\.\d+)?/")
_STDLIB_NAMES = frozenset(getattr(sys, "stdlib_module_names", ()))


def is_library(frame: Frame) -> bool:
    """True for a frame that is not the user's own code: native, stdlib, installed packages,
    TensorFlow/Keras/absl, distlaunch's autolog, report and agent, ``<frozen ...>`` and ``<string>``.

    Causes (launcher/telemetry/causes.py), stall lines and a capture's suspect frame all point at
    the innermost frame this says is the user's: autolog wraps every ``tf.function`` call, so an
    error raised in one passes through distlaunch's frame just inside the training loop's."""
    path = frame.file.replace("\\", "/")
    if frame.native or path.startswith("<"):
        return True
    if any(part in path for part in _LIBRARY_PARTS) or _DISTLAUNCH_OWN.search(path) or _STDLIB_DIR.search(path):
        return True
    # py-spy without --full-filenames shortens stdlib paths to the module's file name
    return "/" not in path and os.path.splitext(path)[0] in _STDLIB_NAMES


def user_frame(stack: Union[ThreadStack, TaskStacks, None]) -> Optional[Frame]:
    """The innermost frame of the user's own code (of the task's main thread for a TaskStacks)."""
    thread = stack.main_thread() if isinstance(stack, TaskStacks) else stack
    if thread is None:
        return None
    for frame in reversed(thread.frames):
        if not is_library(frame):
            return frame
    return None


# -- grouping and the suspect --------------------------------------------------------------------


def _split_task(task: str) -> Tuple[str, Optional[int]]:
    role, _, index = task.rpartition(":")
    if role and index.isdigit():
        return role, int(index)
    return task, None


def task_sort_key(task: str) -> Tuple[str, int, str]:
    role, index = _split_task(task)
    return role, -1 if index is None else index, task


def compress_tasks(tasks: Iterable[str]) -> str:
    """``worker:0, worker:2-7 (7)``: ranges compressed per role, the count when there are several."""
    names = sorted(set(tasks), key=task_sort_key)
    parts: List[str] = []
    run: List[Tuple[str, int]] = []

    def flush() -> None:
        if run:
            role, first = run[0]
            last = run[-1][1]
            parts.append("%s:%d" % (role, first) if first == last else "%s:%d-%d" % (role, first, last))
            run.clear()

    for name in names:
        role, index = _split_task(name)
        if index is None:
            flush()
            parts.append(name)
        elif run and run[-1][0] == role and run[-1][1] + 1 == index:
            run.append((role, index))
        else:
            flush()
            run.append((role, index))
    flush()
    label = ", ".join(parts)
    return "%s (%d)" % (label, len(names)) if len(names) > 1 else label


def stack_key(capture: TaskStacks) -> Tuple[Any, ...]:
    """Captures with equal keys show the same stack: the main thread's frames, or, without
    stacks, the state and the note."""
    main = capture.main_thread()
    if main is not None and main.key():
        return ("stack", main.key())
    return ("none", capture.state, capture.note or "")


@dataclass
class Group:
    tasks: List[str]
    label: str  # "worker:0, worker:2-7 (7)"
    sample: TaskStacks  # one member's capture (the others show the same stack)
    suspect: bool = False


def suspect(captures: Sequence[TaskStacks]) -> Optional[Tuple[str, str]]:
    """(task, why) of the task that most likely holds the others up, or None.

    In this order: a stopped process; a process in disk wait (D); the odd one out, a task whose
    main stack differs from all the others of its role while those agree."""
    ordered = sorted(captures, key=lambda c: task_sort_key(c.task))
    for capture in ordered:
        if capture.state in FROZEN_STATES:
            return capture.task, "it is %s%s" % (capture.state, _wchan_words(capture))
    for capture in ordered:
        if capture.state == DISK_WAIT:
            return capture.task, "it is in disk wait (D)%s" % _wchan_words(capture)
    by_role: Dict[str, List[TaskStacks]] = {}
    for capture in ordered:
        if capture.threads:
            by_role.setdefault(_split_task(capture.task)[0], []).append(capture)
    for members in by_role.values():
        if len(members) < 3:
            continue
        counts: Dict[Tuple[Any, ...], List[TaskStacks]] = {}
        for capture in members:
            counts.setdefault(stack_key(capture), []).append(capture)
        if len(counts) == 2:
            small, large = sorted(counts.values(), key=len)
            if len(small) == 1 and len(large) >= 2:
                odd = small[0]
                frame = user_frame(odd) or _newest(odd)
                where = " (in %s)" % frame.label if frame is not None else ""
                return odd.task, "its stack differs from the other %d %s tasks%s" % (
                    len(large), _split_task(odd.task)[0], where)
    return None


def group(captures: Sequence[TaskStacks]) -> List[Group]:
    """Identical stacks together: the suspect alone and first (a stopped task may show the same
    stack as the others), then the largest groups."""
    found = suspect(captures)
    buckets: Dict[Tuple[Any, ...], List[TaskStacks]] = {}
    for capture in sorted(captures, key=lambda c: task_sort_key(c.task)):
        key = ("suspect",) if found is not None and capture.task == found[0] else stack_key(capture)
        buckets.setdefault(key, []).append(capture)
    groups: List[Group] = []
    for members in buckets.values():
        tasks = [c.task for c in members]
        is_suspect = found is not None and found[0] in tasks
        sample = next((c for c in members if found is not None and c.task == found[0]), members[0])
        groups.append(Group(tasks, compress_tasks(tasks), sample, is_suspect))
    groups.sort(key=lambda g: (not g.suspect, -len(g.tasks), task_sort_key(g.tasks[0])))
    return groups


def _newest(capture: TaskStacks) -> Optional[Frame]:
    main = capture.main_thread()
    return main.frames[-1] if main is not None and main.frames else None


def _wchan_words(capture: TaskStacks) -> str:
    return " (wchan %s)" % capture.wchan if capture.wchan else ""
