"""The per-host agent: supervises one task as a daemon and writes its events to a file.

It runs ON each host from the uploaded zipapp (``python agent.pyz VERB ...``), so it is
stdlib-only and must work on any Python >= 3.9. The launcher never owns a task process: it
starts one detached ``run`` agent per task and *follows* the agents' ``events.jsonl`` files,
which is why a dropped SSH link, ``--detach`` and ``attach`` all behave the same.

Verbs (docs/ARCHITECTURE.md): ``run``, ``follow``, ``stop``, ``ports``, ``sweep``,
``preflight``. Every verb except ``run``/``follow`` prints one JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import errno
import importlib
import importlib.util
import json
import math
import os
import platform
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from launcher import events
from launcher.metricregex import MetricRegexes

MAX_LINE_BYTES = 1024 * 1024
MALFORMED_REPORT_EVERY = 100
LEASE_CHECK_SECONDS = 0.5
FOLLOW_POLL_SECONDS = 0.03
FOLLOW_HEARTBEAT_SECONDS = 1.0
FOLLOW_LEASE_TOUCH_SECONDS = 1.0
# `follow --pinged`: the launcher writes a byte to stdin every second. Only a recent ping proves it
# still reads us: in a partition sshd keeps our session (and this loop) alive for hours.
FOLLOW_PING_FRESH_SECONDS = 2.5
FOLLOW_PING_EXIT_SECONDS = 30.0
READER_DRAIN_SECONDS = 5.0
LEFTOVER_TERM_SECONDS = 2.0
KILL_CONFIRM_SECONDS = 5.0
PR_SET_CHILD_SUBREAPER = 36
#: autolog's sitecustomize directory inside the zipapp (launcher/agentpack.py SITE_DIR)
AUTOLOG_SITE_DIR = "distlaunch_site"


# -- the spec ---------------------------------------------------------------------------------


@dataclass
class AgentSpec:
    """What one ``run`` agent supervises: the contents of ``tasks/<slug>/spec.json``."""

    run: str
    task: str
    command: str
    workdir: str
    host: str = "local"
    incarnation: int = 0
    restarts: int = 0
    env: Dict[str, str] = field(default_factory=dict)
    grace_seconds: float = 10.0
    orphan_grace_seconds: float = 60.0
    sample_interval: float = 1.0
    metrics: Dict[str, str] = field(default_factory=dict)
    gpus: List[int] = field(default_factory=list)
    setup: List[str] = field(default_factory=list)  # shell lines run before the command, in its shell
    shell: str = ""  # e.g. "bash -lc"; empty: /bin/sh -c
    autolog: bool = True

    @classmethod
    def from_dict(cls, obj: Dict[str, Any]) -> "AgentSpec":
        missing = [k for k in ("run", "task", "command", "workdir") if k not in obj]
        if missing:
            raise ValueError("spec.json lacks %s" % ", ".join(missing))
        return cls(
            run=str(obj["run"]),
            task=str(obj["task"]),
            command=str(obj["command"]),
            workdir=str(obj["workdir"]),
            host=str(obj.get("host") or "local"),
            incarnation=int(obj.get("incarnation") or 0),
            restarts=int(obj.get("restarts") or 0),
            env={str(k): str(v) for k, v in (obj.get("env") or {}).items()},
            grace_seconds=float(obj.get("grace_seconds", 10.0)),
            orphan_grace_seconds=float(obj.get("orphan_grace_seconds", 60.0)),
            sample_interval=float(obj.get("sample_interval", 1.0)),
            metrics={str(k): str(v) for k, v in (obj.get("metrics") or {}).items()},
            gpus=[int(g) for g in (obj.get("gpus") or [])],
            setup=[str(line) for line in (obj.get("setup") or [])],
            shell=str(obj.get("shell") or ""),
            autolog=bool(obj.get("autolog", True)),
        )

    @classmethod
    def load(cls, path: str) -> "AgentSpec":
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))


# -- small process helpers (Linux /proc, with kill(0) fallbacks) ------------------------------


def _write_atomic(path: str, text: str) -> None:
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _read_int(path: str) -> Optional[int]:
    try:
        with open(path, encoding="utf-8") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _proc_stat(pid: int) -> Optional[Tuple[str, int]]:
    """(state letter, pgid) of a process from /proc, or None when it is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            raw = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = raw[raw.rfind(")") + 2:].split()
    try:
        return rest[0], int(rest[2])
    except (IndexError, ValueError):
        return None


def _all_pids() -> List[int]:
    try:
        return [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    stat = _proc_stat(pid)
    if stat is not None:
        return stat[0] != "Z"
    if os.path.isdir("/proc/self"):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _group_members(pgid: int) -> List[int]:
    """Live (non-zombie) processes of a process group."""
    if not os.path.isdir("/proc/self"):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    members = []
    for pid in _all_pids():
        stat = _proc_stat(pid)
        if stat is not None and stat[1] == pgid and stat[0] != "Z":
            members.append(pid)
    return members


def _environ_has(pid: int, name: str, value: str) -> bool:
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            entries = f.read().split(b"\0")
    except OSError:
        return False
    return ("%s=%s" % (name, value)).encode() in entries


def _cmdline(pid: int) -> List[str]:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            raw = f.read()
    except OSError:
        return []
    return [part.decode("utf-8", "replace") for part in raw.split(b"\0") if part]


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal_pid(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def _wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def _kill_group_for_good(pgid: int, term_first: float, reap: Callable[[], None]) -> None:
    """SIGTERM (when ``term_first`` > 0), wait, then SIGKILL until no live member remains."""
    if not _group_members(pgid):
        return
    if term_first > 0:
        _signal_group(pgid, signal.SIGTERM)

        def gone() -> bool:
            reap()
            return not _group_members(pgid)

        if _wait_until(gone, term_first):
            return
    deadline = time.monotonic() + KILL_CONFIRM_SECONDS
    while _group_members(pgid) and time.monotonic() < deadline:
        _signal_group(pgid, signal.SIGKILL)
        time.sleep(0.05)
        reap()


def _become_subreaper() -> None:
    """Orphaned grandchildren of the task get the agent as parent, so it can reap them."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _reap_adopted(exclude: int) -> None:
    """Collect zombies adopted as subreaper, leaving the task leader to Popen."""
    for pid in _all_pids():
        if pid == exclude:
            continue
        stat = _proc_stat(pid)
        if stat is None or stat[0] != "Z":
            continue
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def describe_exit(returncode: int) -> Tuple[int, str]:
    """(exit code as a shell reports it, reason): a signal N becomes 128+N."""
    if returncode < 0:
        signum = -returncode
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = "signal %d" % signum
        return 128 + signum, "killed by %s" % name
    return returncode, "exit code %d" % returncode


def start_error_text(exc: OSError, workdir: str) -> str:
    """Why Popen failed, naming the workdir when the chdir into it was what failed."""
    if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EACCES):
        what = {errno.ENOENT: "does not exist", errno.ENOTDIR: "is not a directory",
                errno.EACCES: "cannot be entered (permission denied)"}[exc.errno]
        return "workdir %s %s" % (workdir, what)
    return str(exc)


#: what /bin/sh says on stderr when it cannot run the command (exit 127: not found, 126: not executable)
_SHELL_CANNOT = re.compile(r"(not found|No such file or directory|Permission denied|cannot execute)\s*$")


def shell_cannot_execute(returncode: int, last_stderr_line: str) -> Optional[str]:
    """The shell's own "command not found" / "cannot execute", as opposed to a program's exit 126/127.

    Both conditions are needed: a program may exit 127 by itself, and print such words too."""
    if returncode not in (126, 127) or not _SHELL_CANNOT.search(last_stderr_line):
        return None
    return last_stderr_line.strip()


# -- events out -------------------------------------------------------------------------------


class EventWriter:
    """The one writer of ``events.jsonl``: one line per event, whole or not at all, under one lock.

    Each event gets the next ``seq`` of its task, continuing the file's last one, so the numbers
    run gap-free across incarnations and any reader can tell a lost line. A line that cannot be
    written (a full disk) still uses its number: the gap is the truth, and once writing works
    again a log line says how many were lost and why. After ``close`` further events are
    dropped, so nothing follows the final state event.
    """

    def __init__(self, path: str) -> None:
        self._lock = threading.Lock()
        self._path = path
        self._seq = _last_seq(path)
        self._fd: Optional[int] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._failed = 0
        self._failure = ""

    def write(self, event: events.Event) -> None:
        with self._lock:
            if self._fd is None:
                return
            if self._failed and event.task is not None:
                told = events.log_event(event.run, event.task, "stderr",
                                        "distlaunch agent: %d event(s) could not be written to %s (%s); "
                                        "the task ran on" % (self._failed, self._path, self._failure))
                if self._append(told):
                    self._failed = 0
            self._append(event)

    def _append(self, event: events.Event) -> bool:
        assert self._fd is not None
        self._seq += 1
        event.data["seq"] = self._seq
        data = (event.to_json() + "\n").encode("utf-8")
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, data[written:])
            return True
        except OSError as exc:
            if written:  # cut the partial line off, or the next line would be glued to it
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, os.fstat(self._fd).st_size - written)
            if not self._failed:
                sys.stderr.write("agent: cannot write events to %s: %s\n" % (self._path, exc.strerror))
            self._failed += 1
            self._failure = exc.strerror or str(exc)
            return False

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


# -- task output ------------------------------------------------------------------------------


class OutputInterpreter:
    """Turns one line of task output into events: report lines, logs, regex metrics."""

    def __init__(self, spec: AgentSpec, emit: Callable[[events.Event], None]) -> None:
        self._spec = spec
        self._emit = emit
        self._lock = threading.Lock()
        self._malformed = 0
        self._regexes = MetricRegexes(spec.metrics)
        for name, error in self._regexes.invalid:
            emit(events.log_event(spec.run, spec.task, "stderr",
                                  "distlaunch agent: metrics regex %r is invalid (%s); ignored"
                                  % (name, error)))
        self._warned: Set[str] = set()  # regexes that matched without a number, warned once each
        self._gave_number: Set[str] = set()
        self._lines = 0
        # names an explicit report() or a regex has given: autolog's values for them are dropped
        self._explicit: Set[str] = set()

    def handle(self, stream: str, line: str) -> None:
        if line.startswith(events.REPORT_PREFIX):
            self._handle_report(stream, line[len(events.REPORT_PREFIX):])
            return
        self._emit(events.log_event(self._spec.run, self._spec.task, stream, line))
        if self._regexes:
            metric = self._regex_metric(line)
            if metric is not None:
                self._emit(metric)

    def finish(self) -> None:
        """At the task's end: say which regexes never gave a number from any of its lines."""
        if not self._regexes or not self._lines:
            return
        for name, pattern, _ in self._regexes.patterns:
            if name not in self._gave_number and name not in self._warned:
                self._emit(events.log_event(
                    self._spec.run, self._spec.task, "stderr",
                    "distlaunch agent: metrics regex %s = %r matched none of this task's %d output lines "
                    "(try it with `distlaunch check PROFILE --metrics-sample LOGFILE`)"
                    % (name, pattern, self._lines)))

    def _handle_report(self, stream: str, payload: str) -> None:
        spec = self._spec
        try:
            obj = json.loads(payload)
            if not isinstance(obj, dict):
                raise ValueError("not a JSON object")
            kind = obj.get("kind")
            if kind == "metric":
                values = obj.get("values") or {}
                if not isinstance(values, dict):
                    raise ValueError("metric values is not an object")
                step = obj.get("step")
                loss = obj.get("loss")
                if obj.get("source") == "autolog":
                    explicit = self._explicit
                    step = None if "step" in explicit else step
                    loss = None if "loss" in explicit else loss
                    values = {k: v for k, v in values.items() if k not in explicit}
                    if step is None and loss is None and not values:
                        return
                else:
                    self._note_explicit(step, loss, values)
                event = events.metric_event(spec.run, spec.task,
                                            step=int(step) if step is not None else None,
                                            loss=loss, values=values)
            elif kind == "placement":
                variables = obj.get("variables")
                if not isinstance(variables, list):
                    raise ValueError("placement variables is not a list")
                if obj.get("source") == "autolog":
                    if "placement" in self._explicit:
                        return
                else:
                    self._explicit.add("placement")
                event = events.placement_event(spec.run, spec.task, variables)
            else:
                raise ValueError("unknown kind %r" % (kind,))
        except (ValueError, TypeError) as exc:
            with self._lock:
                self._malformed += 1
                count = self._malformed
            if count % MALFORMED_REPORT_EVERY == 1:
                self._emit(events.log_event(
                    spec.run, spec.task, stream,
                    "distlaunch agent: malformed %sline ignored (%d so far): %s"
                    % (events.REPORT_PREFIX, count, exc)))
            return
        self._emit(event)

    def _note_explicit(self, step: Any, loss: Any, values: Dict[str, Any]) -> None:
        if step is not None:
            self._explicit.add("step")
        if loss is not None:
            self._explicit.add("loss")
        self._explicit.update(values)

    def _regex_metric(self, line: str) -> Optional[events.Event]:
        result = self._regexes.apply(line)
        with self._lock:
            self._lines += 1
            self._gave_number.update(result.matched)
            self._explicit.update(result.matched)
            new_misses = [m for m in result.misses if m.name not in self._warned]
            self._warned.update(m.name for m in new_misses)
        for miss in new_misses:
            self._emit(events.log_event(self._spec.run, self._spec.task, "stderr",
                                        "distlaunch agent: " + miss.message()))
        if not result.any_value:
            return None
        values = {k: v for k, v in result.values.items() if math.isfinite(v)}
        loss = result.loss if result.loss is not None and math.isfinite(result.loss) else None
        return events.metric_event(self._spec.run, self._spec.task, step=result.step, loss=loss, values=values)


def _decode_line(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").rstrip("\r")
    if "\r" in text:  # progress bars redraw with \r: keep what a terminal would show last
        parts = [p for p in text.split("\r") if p]
        text = parts[-1] if parts else ""
    return text


def _read_lines(fd: int, stream: str, handle: Callable[[str, str], None]) -> None:
    """Read a pipe line by line until EOF; a line over MAX_LINE_BYTES is cut and the rest dropped.

    Raw ``os.read`` on a file descriptor this thread owns, not a buffered file object: a daemon
    thread blocked inside a buffered reader at exit aborts the interpreter, and a pipe held open
    by an escaped grandchild may never reach EOF.
    """
    pending = b""
    dropping = False
    try:
        while True:
            data = os.read(fd, 65536)
            if not data:
                break
            parts = (pending + data).split(b"\n")
            pending = parts.pop()
            for part in parts:
                if dropping:
                    dropping = False
                    continue
                handle(stream, _decode_line(part))
            if len(pending) > MAX_LINE_BYTES:
                if not dropping:
                    handle(stream, _decode_line(pending[:MAX_LINE_BYTES]) + " [line truncated]")
                dropping = True
                pending = b""
        if pending and not dropping:
            handle(stream, _decode_line(pending))
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


# -- the run verb ---------------------------------------------------------------------------


def agent_pythonpath_entry() -> str:
    """The directory (or zipapp) holding the ``launcher`` package this agent runs from."""
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


#: secret env values reach the agent in its own environment, never in spec.json:
#: a JSON object {task slug: {NAME: value}} that the launcher's start script read from stdin
SECRETS_VAR = "DISTLAUNCH_SECRETS"


def task_secrets(task: str) -> Dict[str, str]:
    try:
        every = json.loads(os.environ.get(SECRETS_VAR) or "{}")
        mine = every.get(task.replace(":", "-")) or {}
    except (ValueError, AttributeError):
        return {}
    return {str(k): str(v) for k, v in mine.items()}


def task_argv(spec: AgentSpec) -> List[str]:
    """The task's shell and its script: the setup lines, then the command, each only if the one
    before succeeded (a failed ``conda activate`` must not run training in the wrong env)."""
    script = " && ".join([*spec.setup, spec.command]) if spec.setup else spec.command
    shell = shlex.split(spec.shell) if spec.shell else ["/bin/sh", "-c"]
    return [*shell, script]


def task_environment(spec: AgentSpec) -> Dict[str, str]:
    env = dict(os.environ)
    env.pop(SECRETS_VAR, None)  # only this task's own secrets go on, by name
    env.update(spec.env)
    env.update(task_secrets(spec.task))
    env["DISTLAUNCH_RUN_ID"] = spec.run
    env["DISTLAUNCH_TASK"] = spec.task
    existing = env.get("PYTHONPATH", "")
    entries = [agent_pythonpath_entry()]
    site = os.path.join(entries[0], AUTOLOG_SITE_DIR)
    if spec.autolog and _exists_in_path_entry(site):
        entries.insert(0, site)  # its sitecustomize chains to any other one further down the path
    env["DISTLAUNCH_AUTOLOG"] = "1" if spec.autolog else "0"
    env["DISTLAUNCH_SAMPLE_INTERVAL"] = repr(spec.sample_interval)
    if existing:
        entries.append(existing)
    env["PYTHONPATH"] = os.pathsep.join(entries)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _exists_in_path_entry(path: str) -> bool:
    """A directory, or a directory inside a zip archive on the path (``agent.pyz/sub``)."""
    if os.path.isdir(path):
        return True
    archive, _, inner = path.rpartition(os.sep)
    if not os.path.isfile(archive):
        return False
    try:
        import zipfile

        with zipfile.ZipFile(archive) as zf:
            return any(n.startswith(inner + "/") for n in zf.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def _load_sampling() -> Any:
    """launcher.sampling is optional in the zipapp: without it the agent emits no samples."""
    try:
        return importlib.import_module("launcher.sampling")
    except ImportError:
        return None


class TaskRunner:
    """Runs one task to its end and writes exactly one final state event."""

    def __init__(self, task_dir: str, spec: AgentSpec) -> None:
        self.task_dir = task_dir
        self.spec = spec
        self.host_run_dir = os.path.dirname(os.path.dirname(os.path.abspath(task_dir)))
        self.writer = EventWriter(os.path.join(task_dir, "events.jsonl"))
        self.started_at = time.time()
        self._stop_reason: Optional[str] = None
        self._stop_requested = threading.Event()
        self._done = threading.Event()
        self._task_exited = threading.Event()
        self._detached_seen_at = 0.0

    # signal handlers and lease loss both end here
    def request_stop(self, reason: str) -> None:
        if self._stop_reason is None:
            self._stop_reason = reason
        self._stop_requested.set()

    def _state(self, state: str, **fields: Any) -> None:
        self.writer.write(events.state_event(self.spec.run, self.spec.task, state, host=self.spec.host,
                                             restarts=self.spec.restarts, **fields))

    def run(self) -> int:
        spec = self.spec
        _become_subreaper()
        self._state(events.STARTING)
        try:
            proc = subprocess.Popen(
                task_argv(spec), cwd=os.path.expanduser(spec.workdir), env=task_environment(spec),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True, close_fds=True)
        except OSError as exc:
            # /bin/sh itself exists, so this is the workdir (chdir) failing: no restart can fix it
            self._state(events.FAILED, reason="could not start: %s" % start_error_text(exc, spec.workdir),
                        permanent=True)
            self.writer.close()
            return 0
        pgid = proc.pid
        _write_atomic(os.path.join(self.task_dir, "task.pgid"), "%d\n" % pgid)
        self._state(events.RUNNING, pid=proc.pid)

        interpreter = OutputInterpreter(spec, self.writer.write)
        last_stderr: List[str] = []

        def handle(stream: str, line: str) -> None:
            if stream == "stderr":
                last_stderr[:] = [line]
            interpreter.handle(stream, line)

        assert proc.stdout is not None and proc.stderr is not None
        readers = []
        for pipe, name in ((proc.stdout, "stdout"), (proc.stderr, "stderr")):
            fd = os.dup(pipe.fileno())  # the reader thread owns (and closes) its own descriptor
            pipe.close()
            readers.append(threading.Thread(target=_read_lines, args=(fd, name, handle),
                                            name="read-" + name, daemon=True))
        for reader in readers:
            reader.start()
        sampler = threading.Thread(target=self._sample_loop, args=(proc.pid,), name="sampler", daemon=True)
        sampler.start()

        self._supervise(proc)
        # a stop that comes after the task ended by itself does not rewrite how it ended
        stopped = self._stop_requested.is_set() and proc.returncode is None
        if stopped:
            self._terminate(proc, pgid)
        returncode = proc.wait()
        exited_at = time.time()  # the final event comes after the output is drained: this is when it ended
        self._task_exited.set()
        _kill_group_for_good(pgid, LEFTOVER_TERM_SECONDS, lambda: _reap_adopted(proc.pid))
        _reap_adopted(proc.pid)

        deadline = time.monotonic() + READER_DRAIN_SECONDS
        for reader in readers:
            reader.join(max(0.0, deadline - time.monotonic()))
        self._done.set()
        sampler.join(2.0)
        interpreter.finish()

        exit_code, reason = describe_exit(returncode)
        if stopped:
            self._state(events.STOPPED, pid=proc.pid, exit_code=exit_code,
                        reason=self._stop_reason or "stopped on request")
        elif returncode == 0:
            self._state(events.SUCCEEDED, pid=proc.pid, exit_code=0)
        else:
            cannot = shell_cannot_execute(returncode, last_stderr[-1] if last_stderr else "")
            if cannot is not None:
                self._state(events.FAILED, pid=proc.pid, exit_code=exit_code,
                            reason="could not start: %s" % cannot, permanent=True, exited_at=exited_at)
            else:
                self._state(events.FAILED, pid=proc.pid, exit_code=exit_code, reason=reason,
                            exited_at=exited_at)
        self.writer.close()
        return 0

    def _supervise(self, proc: "subprocess.Popen[bytes]") -> None:
        next_lease_check = 0.0
        while proc.poll() is None:
            if self._stop_requested.is_set():
                return
            now = time.monotonic()
            if now >= next_lease_check:
                next_lease_check = now + LEASE_CHECK_SECONDS
                if self._launcher_lost():
                    self.request_stop("launcher lost for %g s" % self.spec.orphan_grace_seconds)
                    return
            self._stop_requested.wait(0.1)

    def _launcher_lost(self) -> bool:
        now = time.time()
        if os.path.exists(os.path.join(self.host_run_dir, "detached")):
            self._detached_seen_at = now
            return False
        try:
            lease = os.stat(os.path.join(self.host_run_dir, "lease")).st_mtime
        except OSError:
            lease = 0.0
        last_sign = max(lease, self.started_at, self._detached_seen_at)
        return now - last_sign > self.spec.orphan_grace_seconds

    def _terminate(self, proc: "subprocess.Popen[bytes]", pgid: int) -> None:
        _signal_group(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, self.spec.grace_seconds))
        _kill_group_for_good(pgid, 0.0, lambda: _reap_adopted(proc.pid))

    def _sample_loop(self, pid: int) -> None:
        sampling = _load_sampling()
        if sampling is None:
            return
        try:
            sampler = sampling.TaskSampler(pid, list(self.spec.gpus))
        except Exception as exc:  # a broken sampler must never take the task down
            sys.stderr.write("agent: sampling unavailable: %s\n" % exc)
            return
        interval = max(0.05, self.spec.sample_interval)
        complained = False
        while not self._done.wait(interval) and not self._task_exited.is_set():
            try:
                sample = sampler.sample()
                event = events.sample_event(
                    self.spec.run, self.spec.task, cpu_percent=sample.get("cpu_percent"),
                    rss_bytes=sample.get("rss_bytes"), gpus=sample.get("gpus"),
                    source=str(sample.get("source", "")), host=sample.get("host"))
            except Exception as exc:
                if not complained:
                    sys.stderr.write("agent: sample failed: %s\n" % exc)
                    complained = True
                continue
            self.writer.write(event)


def cmd_run(task_dir: str) -> int:
    try:
        spec = AgentSpec.load(os.path.join(task_dir, "spec.json"))
    except (OSError, ValueError, TypeError) as exc:
        sys.stderr.write("agent: cannot read %s/spec.json: %s\n" % (task_dir, exc))
        return 2
    runner = TaskRunner(task_dir, spec)

    def on_signal(signum: int, frame: Any) -> None:
        runner.request_stop("stopped on request")

    # handlers first, pid file second: a `stop` that reads the pid always finds them installed
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    _write_atomic(os.path.join(task_dir, "agent.pid"), "%d\n" % os.getpid())
    return runner.run()


# -- the follow verb --------------------------------------------------------------------------


class EventFileTail:
    """New complete lines of one ``events.jsonl``, from a byte offset; keeps a partial tail."""

    def __init__(self, path: str, offset: int) -> None:
        self.path = path
        self.offset = offset
        self._partial = b""

    def read_lines(self) -> List[bytes]:
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return []
        if size <= self.offset:
            return []
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(size - self.offset)
        except OSError:
            return []
        self.offset += len(data)
        data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        return [line for line in lines if line]


def _touch(path: str) -> None:
    try:
        with open(path, "a"):
            pass
        os.utime(path, None)
    except OSError:
        pass


def _parse_offsets(items: List[str]) -> Dict[str, int]:
    offsets: Dict[str, int] = {}
    for item in items:
        slug, sep, value = item.partition("=")
        if not sep:
            raise ValueError("--offset wants SLUG=BYTES, got %r" % item)
        offsets[slug] = int(value)
    return offsets


def cmd_follow(run_dir: str, offsets: Dict[str, int], pinged: bool = False) -> int:
    stdin_closed = threading.Event()
    last_ping = [time.monotonic()]  # pinged mode: when stdin last brought data

    def watch_stdin() -> None:
        # os.read on the fd, not sys.stdin: a daemon thread blocked inside a buffered reader
        # aborts the interpreter at exit
        try:
            while os.read(0, 4096):
                last_ping[0] = time.monotonic()
        except OSError:
            pass
        stdin_closed.set()

    threading.Thread(target=watch_stdin, name="stdin", daemon=True).start()
    tasks_dir = os.path.join(run_dir, "tasks")
    lease = os.path.join(run_dir, "lease")
    tails: Dict[str, EventFileTail] = {}
    out = sys.stdout.buffer
    last_touch = 0.0
    last_hb = 0.0
    try:
        while not stdin_closed.is_set():
            now = time.monotonic()
            if pinged and now - last_ping[0] > FOLLOW_PING_EXIT_SECONDS:
                return 0  # the launcher is gone without closing the link; it starts a new follower
            fresh = not pinged or now - last_ping[0] <= FOLLOW_PING_FRESH_SECONDS
            if fresh and now - last_touch >= FOLLOW_LEASE_TOUCH_SECONDS:
                _touch(lease)
                last_touch = now
            try:
                slugs = sorted(os.listdir(tasks_dir))
            except OSError:
                slugs = []
            wrote = False
            for slug in slugs:
                tail = tails.get(slug)
                if tail is None:
                    path = os.path.join(tasks_dir, slug, "events.jsonl")
                    if not os.path.exists(path):
                        continue
                    tail = tails[slug] = EventFileTail(path, offsets.get(slug, 0))
                for line in tail.read_lines():
                    out.write(line + b"\n")
                    wrote = True
            if now - last_hb >= FOLLOW_HEARTBEAT_SECONDS:  # busy or not: it carries the host's clock
                out.write(b"#hb %.3f\n" % time.time())
                last_hb = now
                wrote = True
            if wrote:
                out.flush()
            stdin_closed.wait(FOLLOW_POLL_SECONDS)
    except BrokenPipeError:
        # the reader went away: silence the interpreter's final flush too
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    return 0


# -- the stop verb ----------------------------------------------------------------------------


def _is_our_agent(pid: int, task_dir: str, run_id: Optional[str]) -> bool:
    """A pid file may point to a reused pid: trust it only if the process looks like our agent."""
    if not pid_alive(pid):
        return False
    args = _cmdline(pid)
    want = os.path.realpath(task_dir)
    try:
        cwd = os.readlink("/proc/%d/cwd" % pid)
    except OSError:
        cwd = ""
    if any("agent" in a for a in args):
        for arg in args:
            if os.path.realpath(os.path.join(cwd, arg)) == want:
                return True
    return run_id is not None and _environ_has(pid, "DISTLAUNCH_RUN_ID", run_id)


def _is_our_group(pgid: int, run_id: Optional[str]) -> bool:
    members = _group_members(pgid)
    if not members:
        return False
    if run_id is None or not os.path.isdir("/proc/self"):
        return True
    return any(_environ_has(pid, "DISTLAUNCH_RUN_ID", run_id) for pid in members)


def _tail_lines(events_path: str) -> List[str]:
    """The complete lines of the last 256 KiB of an event file (none if it cannot be read)."""
    try:
        with open(events_path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 256 * 1024))
            data = f.read()
    except OSError:
        return []
    return data[: data.rfind(b"\n") + 1].decode("utf-8", "replace").splitlines()


def _last_seq(events_path: str) -> int:
    """The ``seq`` of the file's last event, -1 for a new file (or one written without numbers)."""
    for line in reversed(_tail_lines(events_path)):
        try:
            seq = json.loads(line).get("seq")
        except ValueError:
            continue
        return seq if isinstance(seq, int) else -1
    return -1


def _last_state(events_path: str) -> Optional[str]:
    tail = _tail_lines(events_path)
    for line in reversed(tail):
        if '"kind":"state"' not in line:
            continue
        try:
            return str(json.loads(line).get("state"))
        except ValueError:
            continue
    return None


def cmd_stop(task_dir: str, grace: Optional[float]) -> Dict[str, Any]:
    spec: Optional[AgentSpec]
    try:
        spec = AgentSpec.load(os.path.join(task_dir, "spec.json"))
    except (OSError, ValueError):
        spec = None
    run_id = spec.run if spec else None
    if grace is None:
        grace = spec.grace_seconds if spec else 10.0
    agent_pid = _read_int(os.path.join(task_dir, "agent.pid"))
    pgid = _read_int(os.path.join(task_dir, "task.pgid"))

    agent_was_running = agent_pid is not None and _is_our_agent(agent_pid, task_dir, run_id)
    agent_killed = False
    if agent_was_running and agent_pid is not None:
        pid = agent_pid
        _signal_pid(pid, signal.SIGTERM)
        if not _wait_until(lambda: not pid_alive(pid), grace + 5.0):
            _signal_pid(pid, signal.SIGKILL)
            agent_killed = True
            _wait_until(lambda: not pid_alive(pid), KILL_CONFIRM_SECONDS)
    group_killed = False
    if pgid is not None and _is_our_group(pgid, run_id):
        group_killed = True
        _kill_group_for_good(pgid, 0.0, lambda: None)
    left = _group_members(pgid) if pgid is not None else []

    events_path = os.path.join(task_dir, "events.jsonl")
    wrote_final = False
    if spec is not None and os.path.exists(events_path):
        last = _last_state(events_path)
        if last is not None and last not in events.FINAL_TASK_STATES:
            writer = EventWriter(events_path)
            writer.write(events.state_event(spec.run, spec.task, events.STOPPED, host=spec.host,
                                            pid=pgid, restarts=spec.restarts,
                                            reason="stopped on request (agent did not report)"))
            writer.close()
            wrote_final = True
    return {"stopped": not left, "agent_pid": agent_pid, "agent_was_running": agent_was_running,
            "agent_killed": agent_killed, "pgid": pgid, "group_killed": group_killed,
            "left": left, "wrote_final_state": wrote_final}


# -- the ports verb ---------------------------------------------------------------------------


def _listening_ports() -> Set[int]:
    """TCP ports in LISTEN state on any address (TF's gRPC server binds every address)."""
    ports = set()
    for name in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(name, encoding="ascii") as f:
                next(f, None)
                for row in f:
                    cols = row.split()
                    if len(cols) > 3 and cols[3] == "0A":
                        ports.add(int(cols[1].rsplit(":", 1)[1], 16))
        except (OSError, ValueError):
            continue
    return ports


def _family(addr: str) -> int:
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def _bindable_address(addr: str) -> str:
    """``addr``, or the wildcard address when ``addr`` is not on this host (a NAT address).

    TF's gRPC server listens on every address anyway, so the wildcard check is the honest one.
    """
    with socket.socket(_family(addr), socket.SOCK_STREAM) as sock:
        try:
            sock.bind((addr, 0))
            return addr
        except OSError as exc:
            if exc.errno != errno.EADDRNOTAVAIL:
                raise
    return "::" if _family(addr) == socket.AF_INET6 else "0.0.0.0"


def _can_bind(addr: str, port: int) -> bool:
    # SO_REUSEADDR on, as TF's gRPC server has it: sockets in TIME_WAIT do not make a port busy,
    # while a listener or a plain bound socket still does.
    with socket.socket(_family(addr), socket.SOCK_STREAM) as sock:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((addr, port))
            return True
        except OSError:
            return False


def cmd_ports(addr: str, check: List[int], pick: int) -> Dict[str, Any]:
    addr = _bindable_address(addr)
    listening = _listening_ports()
    busy = [p for p in check if p in listening or not _can_bind(addr, p)]
    picked: List[int] = []
    held: List[socket.socket] = []
    try:
        for _ in range(pick * 20):
            if len(picked) >= pick:
                break
            sock = socket.socket(_family(addr), socket.SOCK_STREAM)
            held.append(sock)
            sock.bind((addr, 0))
            port = sock.getsockname()[1]
            if port in check or port in listening or port in picked:
                continue
            picked.append(port)
    finally:
        for sock in held:
            sock.close()
    if len(picked) < pick:
        raise OSError("could not find %d free ports on %s" % (pick, addr))
    return {"busy": busy, "picked": picked}


# -- the sweep verb ---------------------------------------------------------------------------


def _run_processes(run_id: str) -> List[int]:
    """Processes of the run, except the launcher's [notify] commands (they run after the job, by design)."""
    skip = {os.getpid(), os.getppid()}
    return [pid for pid in _all_pids()
            if pid not in skip and _environ_has(pid, "DISTLAUNCH_RUN_ID", run_id) and pid_alive(pid)
            and not _environ_has(pid, "DISTLAUNCH_NOTIFY", "1")]


def cmd_sweep(run_id: str, kill: bool, grace: float) -> Dict[str, Any]:
    pids = _run_processes(run_id)
    if kill and pids:
        for pid in pids:
            _signal_pid(pid, signal.SIGTERM)
        _wait_until(lambda: not any(pid_alive(p) for p in pids), grace)
        for pid in pids:
            if pid_alive(pid):
                _signal_pid(pid, signal.SIGKILL)
        _wait_until(lambda: not any(pid_alive(p) for p in pids), KILL_CONFIRM_SECONDS)
        pids = _run_processes(run_id)
    return {"left": [{"pid": pid, "cmdline": " ".join(_cmdline(pid))} for pid in pids]}


# -- preflight --------------------------------------------------------------------------------


def cmd_preflight(checks_json: Optional[str] = None, cwd: Optional[str] = None,
                  ports: Optional[Tuple[str, List[int], int]] = None) -> Dict[str, Any]:
    """What this host's Python offers; with ``checks_json`` the failed path checks (launcher/hostcheck.py,
    relative paths under ``cwd``), with ``ports`` the answer of ``ports`` too: one round trip for all."""
    def has(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            return False

    answer: Dict[str, Any] = {"python": platform.python_version(), "psutil": has("psutil"),
                              "pynvml": has("pynvml")}
    if checks_json is not None:
        hostcheck = importlib.import_module("launcher.hostcheck")
        answer["failed"] = hostcheck.run_checks(json.loads(checks_json), cwd or os.getcwd())
    if ports is not None:
        answer["ports"] = cmd_ports(*ports)
    return answer


# -- entry point ------------------------------------------------------------------------------


def _port_list(text: str) -> List[int]:
    return [int(p) for p in text.split(",") if p.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agent.pyz", description="distlaunch host agent")
    verbs = parser.add_subparsers(dest="verb", required=True)
    run = verbs.add_parser("run", help="supervise the task of D/spec.json")
    run.add_argument("--task-dir", required=True)
    follow = verbs.add_parser("follow", help="stream every task's new events")
    follow.add_argument("--run-dir", required=True)
    follow.add_argument("--offset", action="append", default=[], metavar="SLUG=BYTES")
    follow.add_argument("--pinged", action="store_true",
                        help="touch the lease only while stdin brings a ping every second")
    stop = verbs.add_parser("stop", help="stop one task and its agent")
    stop.add_argument("--task-dir", required=True)
    stop.add_argument("--grace", type=float, default=None)
    ports = verbs.add_parser("ports", help="check and pick TCP ports")
    ports.add_argument("--bind", required=True)
    ports.add_argument("--check", type=_port_list, default=[])
    ports.add_argument("--pick", type=int, default=0)
    sweep = verbs.add_parser("sweep", help="find (and kill) every process of a run")
    sweep.add_argument("--run-id", required=True)
    sweep.add_argument("--kill", action="store_true")
    sweep.add_argument("--grace", type=float, default=5.0)
    preflight = verbs.add_parser("preflight", help="what this host's Python offers; path and port checks")
    preflight.add_argument("--checks", default=None, help="JSON list of path checks (launcher/hostcheck.py)")
    preflight.add_argument("--cwd", default=None, help="the directory relative paths are taken from")
    preflight.add_argument("--bind", default=None)
    preflight.add_argument("--check", type=_port_list, default=[])
    preflight.add_argument("--pick", type=int, default=0)
    return parser


def _print_json(obj: Dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if args.verb == "run":
        return cmd_run(args.task_dir)
    if args.verb == "follow":
        try:
            offsets = _parse_offsets(args.offset)
        except ValueError as exc:
            sys.stderr.write("agent: %s\n" % exc)
            return 2
        return cmd_follow(args.run_dir, offsets, pinged=args.pinged)
    if args.verb == "stop":
        _print_json(cmd_stop(args.task_dir, args.grace))
    elif args.verb == "ports":
        try:
            _print_json(cmd_ports(args.bind, args.check, args.pick))
        except OSError as exc:
            sys.stderr.write("agent ports: %s\n" % exc)
            _print_json({"error": str(exc)})
            return 1
    elif args.verb == "sweep":
        _print_json(cmd_sweep(args.run_id, args.kill, args.grace))
    elif args.verb == "preflight":
        ports = (args.bind, args.check, args.pick) if args.bind is not None else None
        try:
            _print_json(cmd_preflight(args.checks, args.cwd, ports))
        except (OSError, ValueError) as exc:
            sys.stderr.write("agent preflight: %s\n" % exc)
            _print_json({"error": str(exc)})
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
