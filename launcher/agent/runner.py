"""One task from start (or adoption) to its one final state event.

The task runs under a wrapper shell in its own session and process group; its stdout and stderr
are pipes whose read ends the task itself also holds (inherited, unused): when the agent reading
them is killed, the task's writes do not fail, and an agent that adopts the task opens the same
pipes again through ``/proc/<pid>/fd``. Output written while no agent read it waits in the
pipe (up to the pipe's size: then the task's next write blocks until an agent reads again).

The host agent runs each task as ``/bin/sh -c WRAPPER distlaunch-task <exit file> <task argv>`` in
its own session and process group, the task argv being the role's ``shell`` (default ``/bin/sh -c``)
with its ``setup`` lines and command. The wrapper waits for the task's shell, writes its exit status
to ``exit_status`` and dies of the same signal (or exits with the same code), so the parent sees
what it saw before the wrapper existed. One waiter thread per task
blocks in ``waitpid``; two reader threads per task read the pipes (a batch of tasks is started
first, their threads after); one sampler thread samples all tasks per ``sample_interval``
(``sampling.HostSampler``: one walk of /proc for all process trees, one query per GPU in use, one
machine reading); it loads its modules (psutil) one interval after the first tasks started, not
while they start, and its first pass is the baseline of the first sample, which comes one interval
later (two after the start). The agent's signal handlers (SIGTERM, SIGINT, SIGCHLD) only set flags
that the main loop reads every 0.5 s: a handler runs on the main thread between two bytecodes, so
one that takes a lock can deadlock against the code it interrupted (the SIGCHLD handler once did,
under a burst of orphans ending). A task starts with every signal at its default and none blocked
(``procs.default_signals``, the Popen's ``preexec_fn``; ``LocalHost.start_detached`` uses it too): a
signal its parent ignores (the agent's SIGHUP, a launcher's SIGINT and SIGHUP under ``nohup ... &``)
would stay ignored through the exec, and a non-interactive shell cannot undo that (POSIX keeps a
signal ignored on entry ignored, ``trap`` included); Popen's ``restore_signals`` covers SIGPIPE and
SIGXFSZ only.

When the host agent dies (SIGKILL included) its tasks keep running and the follower's stream ends.
The launcher follows again (``HostLinks``: ``_on_stream_closed``, ``reconnect``,
``_resume_stream``); the ``follow`` verb finds no agent answering, starts one (``spawn_agent``; the
flock decides if two try), and the new agent, before it listens, adopts each task whose last state
is not final: if ``task.json``'s pid lives, it reopens the task's pipes through
``/proc/<pid>/fd/<n>`` (checking they are pipes), writes a log line "a new host agent adopted this
task", and watches the pid (no longer its child: polled). When an adopted task ends, its exit status
comes from ``exit_status``; when the wrapper was killed too (no file), the task fails with "exit
status unknown". A task that ended while no agent ran is ended the same way at once and goes through
its restart policy. **Output the task wrote while no agent ran is delivered from the pipe if it fit
in it; a line the killed agent had half read is lost.**

Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from typing import Any, Dict, List, Optional, Set, Tuple

from launcher import events
from launcher.agent import taskcgroup, taskcontainer
from launcher.agent.agentlog import warn
from launcher.agent.ckptwatch import CheckpointWatch, watched_directory
from launcher.agent.oomcheck import OomWatch
from launcher.agent.output import EventWriter, OutputInterpreter, read_lines
from launcher.agent.procs import (
    SPAWN_LOCK,
    _kill_group_for_good,
    _reap_adopted,
    _signal_group,
    _write_atomic,
    pause,
    pid_alive,
    stat_fields,
)
from launcher.agent.spec import (
    EXIT_STATUS_FILE,
    AgentSpec,
    describe_exit,
    read_exit_status,
    shell_cannot_execute,
    start_error_text,
    task_environment,
    task_variables,
    wrapped_argv,
)

READER_DRAIN_SECONDS = 5.0
#: past READER_DRAIN_SECONDS, the readers are waited for while lines still come (a loaded host
#: working through a backlog), up to this long in all; a pipe that stays silent (a child that
#: outlived the task holds it open) ends the wait
READER_DRAIN_MAX_SECONDS = 30.0
LEFTOVER_TERM_SECONDS = 2.0
ADOPTED_POLL_SECONDS = 0.25
#: the task's pid, process group and the fd numbers of its own pipe read ends (for adoption)
TASK_FILE = "task.json"
#: stderr lines kept to word a failure to start (a runtime's error comes before its "See --help" line)
STDERR_KEPT = 5
#: after the runtime's stop and kill, how long the container's client may take to end
CONTAINER_END_SECONDS = 5.0


class TaskRunner:
    """Runs one task: ``start()`` (or ``adopt()``), then ``wait()`` on a thread of its own."""

    def __init__(self, task_dir: str, spec: AgentSpec, writer: EventWriter, leaders: Set[int],
                 secrets: Optional[Dict[str, str]] = None) -> None:
        self.task_dir = task_dir
        self.spec = spec
        self.writer = writer
        self._leaders = leaders  # pids whose exit status belongs to a Popen: never reaped elsewhere
        self._secrets = secrets
        self.pid: Optional[int] = None
        self.adopted = False
        self._proc: Optional["subprocess.Popen[bytes]"] = None
        self._deferred_fds: Optional[Tuple[int, int]] = None
        self._readers: List[threading.Thread] = []
        self._lines_read = 0  # lines both readers handed over (the drain at the end watches it move)
        self._interpreter: Optional[OutputInterpreter] = None
        self._last_stderr: List[str] = []
        self._stop_reason: Optional[str] = None
        self._stopped = False  # a stop request came while the task still ran
        self._cgroup: Optional[str] = None  # the task's own cgroup (taskcgroup.py), where it has one
        #: the profile's checkpoint_dir, watched by the sample loop and once more at the end
        self._checkpoints: Optional[CheckpointWatch] = None
        self._checkpoints_lock = threading.Lock()
        if spec.checkpoint_dir:
            self._checkpoints = CheckpointWatch(spec.run, spec.task, spec.host,
                                                watched_directory(spec.workdir, spec.checkpoint_dir),
                                                lambda: self._interpreter.last_step if self._interpreter else None)
        #: the task's container (docker, podman, ...), its name this incarnation and its main
        #: process as the host sees it (learned after the start; sampling and stacks use it)
        self.container = taskcontainer.container_of(spec)
        self.container_name = taskcontainer.name_of(spec) if self.container is not None else None
        self.host_pid: Optional[int] = None
        self._task_info: Dict[str, Any] = {}
        #: the OOM killer's evidence and the peak RSS (the sampler feeds it), told at a SIGKILL
        self.oom = OomWatch()
        self.exited = threading.Event()
        self.done = threading.Event()

    @property
    def active(self) -> bool:
        return self.pid is not None and not self.exited.is_set()

    @property
    def sample_root(self) -> Optional[int]:
        """The root of the task's process tree: its container's main process where a daemon runs
        the container (not a child of the task's client), else the task's own pid."""
        return self.host_pid or self.pid

    def _state(self, state: str, **fields: Any) -> None:
        self.writer.write(events.state_event(self.spec.run, self.spec.task, state, host=self.spec.host,
                                             restarts=self.spec.restarts, **fields))

    # -- start ----------------------------------------------------------------------------------

    def start(self, defer_readers: bool = False, gate: Optional[int] = None) -> Optional[int]:
        """Start the task; its pid, or None when it could not start (the final event is written).

        ``defer_readers``: the output readers start with ``start_readers()`` (a host agent starts
        a whole batch of tasks first; the pipes hold 64 KiB each meanwhile). ``gate``: the read end
        of a pipe whose EOF lets the task's command run (the wrapper waits on it as stdin)."""
        spec = self.spec
        self._state(events.STARTING)
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(self.task_dir, EXIT_STATUS_FILE))
        cgroup = self._cgroup = taskcgroup.make(spec.run, os.path.basename(os.path.abspath(self.task_dir)))
        env = task_environment(spec, self._secrets, self.task_dir)
        inner: Optional[List[str]] = None
        if self.container is not None:  # the container gets the task's variables by name from its client's env
            names = list(task_variables(spec, self._secrets, self.task_dir))
            try:
                inner = taskcontainer.run_command(spec, self.container, self.task_dir, names)
            except ValueError as exc:
                self._not_started(str(exc))
                return None
            env = taskcontainer.client_environment(spec, self.container, env, names)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            with SPAWN_LOCK:
                proc = subprocess.Popen(
                    wrapped_argv(spec, self.task_dir, cgroup, inner), cwd=os.path.expanduser(spec.workdir),
                    env=env,
                    stdin=subprocess.DEVNULL if gate is None else gate, stdout=out_w,
                    stderr=err_w, pass_fds=(out_r, err_r), start_new_session=True)
                self._leaders.add(proc.pid)
        except (OSError, ValueError) as exc:
            for fd in (out_r, out_w, err_r, err_w):
                os.close(fd)
            # /bin/sh itself exists, so an OSError is the workdir (chdir) failing, a ValueError a NUL
            # byte in the command or the environment: no restart can fix either
            why = start_error_text(exc, spec.workdir) if isinstance(exc, OSError) else str(exc)
            self._not_started(why)
            return None
        os.close(out_w)
        os.close(err_w)
        self._proc = proc
        self.pid = proc.pid
        self.oom.see([proc.pid])
        _write_atomic(os.path.join(self.task_dir, "task.pgid"), "%d\n" % proc.pid)
        # sid: the task's session (its own: start_new_session); cgroup: its own, where one was made.
        # `sweep` finds by them what the task started that left its group or dropped its environment
        self._task_info = {"pid": proc.pid, "pgid": proc.pid, "fds": [out_r, err_r], "sid": proc.pid,
                           "started": _start_ticks(proc.pid), "cgroup": cgroup}
        if self.container_name is not None:
            self._task_info["container"] = self.container_name
        _write_atomic(os.path.join(self.task_dir, TASK_FILE), json.dumps(self._task_info))
        self._state(events.RUNNING, pid=proc.pid)
        self.watch_checkpoints()  # what is there already: the newest is reported, the rest is old
        self._deferred_fds = (out_r, err_r)
        if not defer_readers:
            self.start_readers()
        return proc.pid

    def _not_started(self, why: str) -> None:
        """The final event of a task that could not start: no restart can fix that."""
        self._state(events.FAILED, reason="could not start: %s" % why, permanent=True)
        self.writer.close()
        self.exited.set()
        self.done.set()

    def start_readers(self) -> None:
        """Start reading the output of a task ``start(defer_readers=True)`` started."""
        fds, self._deferred_fds = self._deferred_fds, None
        if fds is not None:
            self._start_readers(*fds)
            self._watch_container()

    def adopt(self, info: Dict[str, Any]) -> bool:
        """Take over a task a killed agent started; False if it is gone (then nothing was written)."""
        pid = int(info["pid"])
        if not pid_alive(pid):
            return False
        fds: List[Optional[int]] = []
        for number in info.get("fds") or []:
            fds.append(_reopen_pipe(pid, int(number)))
        self.pid = pid
        self.adopted = True
        self._cgroup = info.get("cgroup") if isinstance(info.get("cgroup"), str) else None
        self._task_info = dict(info)
        if self.container is not None and isinstance(info.get("container"), str):
            self.container_name = str(info["container"])  # the incarnation the killed agent started
        self.writer.write(events.log_event(self.spec.run, self.spec.task, "stderr",
                                           "distlaunch agent: a new host agent adopted this task (pid %d); "
                                           "output written while no agent ran may be missing" % pid))
        self._start_readers(*[*fds, None, None][:2])
        self._watch_container()
        return True

    def _watch_container(self) -> None:
        """Learn the host pid of a container a daemon runs (polled: it exists only once the runtime
        created it), and keep it in task.json for tools."""
        container, name = self.container, self.container_name
        if container is None or name is None or not taskcontainer.daemon_owned(container):
            return

        def learn() -> None:
            pid = taskcontainer.learn_host_pid(container, name, lambda: not self.exited.is_set())
            if pid is None or self.exited.is_set():
                return
            self.host_pid = pid
            self.oom.see([pid])
            self._task_info["host_pid"] = pid
            with contextlib.suppress(OSError):
                _write_atomic(os.path.join(self.task_dir, TASK_FILE), json.dumps(self._task_info))

        threading.Thread(target=learn, name="container-pid", daemon=True).start()

    def _start_readers(self, out_fd: Optional[int], err_fd: Optional[int]) -> None:
        self._interpreter = OutputInterpreter(self.spec, self.writer.write)
        for fd, name in ((out_fd, "stdout"), (err_fd, "stderr")):
            if fd is None:
                continue
            reader = threading.Thread(target=read_lines, args=(fd, name, self._handle), name="read-" + name,
                                      daemon=True)
            reader.start()
            self._readers.append(reader)

    def _drain_readers(self) -> None:
        """Let the readers reach the end of the task's output: READER_DRAIN_SECONDS, then a second
        at a time while lines still come, READER_DRAIN_MAX_SECONDS at most."""
        began = time.monotonic()
        deadline = began + READER_DRAIN_SECONDS
        while True:
            seen = self._lines_read
            for reader in self._readers:
                reader.join(max(0.0, deadline - time.monotonic()))
            if not any(r.is_alive() for r in self._readers) or self._lines_read == seen:
                return
            if time.monotonic() - began >= READER_DRAIN_MAX_SECONDS:
                return
            deadline = min(time.monotonic() + 1.0, began + READER_DRAIN_MAX_SECONDS)

    def _handle(self, stream: str, line: str) -> None:
        self._lines_read += 1
        if stream == "stderr":
            self._last_stderr.append(line)
            del self._last_stderr[:-STDERR_KEPT]
        assert self._interpreter is not None
        self._interpreter.handle(stream, line)

    # -- stop -----------------------------------------------------------------------------------

    def request_stop(self, reason: str) -> None:
        """SIGTERM the task's group, SIGKILL it after the grace period (on a thread of its own)."""
        if self._stop_reason is not None or self.pid is None or self.exited.is_set():
            return
        self._stop_reason = reason
        self._stopped = True
        threading.Thread(target=self._terminate, name="stop", daemon=True).start()

    def _terminate(self) -> None:
        assert self.pid is not None
        container, name = self.container, self.container_name
        if container is not None and name is not None and taskcontainer.daemon_owned(container):
            # the daemon owns the container: its runtime stops it (SIGTERM, the grace, SIGKILL), and its
            # client then ends; the client's group gets signals only when the runtime could not stop it
            # (not created yet: the client ends on SIGTERM before it starts one)
            if not taskcontainer.stop(container, name, max(0.0, self.spec.grace_seconds)):
                _signal_group(self.pid, signal.SIGTERM)
            if not self.exited.wait(CONTAINER_END_SECONDS):
                taskcontainer.kill(container, name)
                if not self.exited.wait(CONTAINER_END_SECONDS):
                    _kill_group_for_good(self.pid, 0.0, self._reap)
            return
        _signal_group(self.pid, signal.SIGTERM)
        if not self.exited.wait(max(0.0, self.spec.grace_seconds)):
            _kill_group_for_good(self.pid, 0.0, self._reap)

    def watch_checkpoints(self, final: bool = False) -> None:
        """One scan of the profile's checkpoint_dir (sample loop: each pass; ``final``: at the task's
        end, taking what is there as settled); never raises."""
        if self._checkpoints is None:
            return
        with self._checkpoints_lock:
            try:
                for event in self._checkpoints.scan(final=final):
                    self.writer.write(event)
            except Exception as exc:  # a broken watch must never take the task down
                self._checkpoints = None
                warn("agent: checkpoint_dir of %s not watched any more: %s" % (self.spec.task, exc))

    def _reap(self) -> None:
        _reap_adopted(self._leaders)

    # -- the end --------------------------------------------------------------------------------

    def wait(self) -> None:
        """Block until the task ended, then write its final state event."""
        assert self.pid is not None
        pid = self.pid
        if self._proc is not None:
            returncode: Optional[int] = self._proc.wait()
        else:
            while pid_alive(pid):
                pause(ADOPTED_POLL_SECONDS)
            status = read_exit_status(self.task_dir)
            returncode = None if status is None else (-(status - 128) if 128 < status < 160 else status)
        exited_at = time.time()  # the final event comes after the output is drained: this is when it ended
        self.exited.set()
        if pid > 0:
            _kill_group_for_good(pid, LEFTOVER_TERM_SECONDS, self._reap)
        if self._cgroup is not None:
            taskcgroup.remove(self._cgroup)  # only once empty: what left the group is the sweep's
        self._leaders.discard(pid)
        self._reap()
        self._drain_readers()
        if self._interpreter is not None:
            self._interpreter.finish()
        self.watch_checkpoints(final=True)  # what it wrote since the last sample pass
        self._remove_container()
        self._final(pid, returncode, exited_at)
        self.writer.close()
        self.done.set()

    def _remove_container(self) -> None:
        """Whatever ended the client (its container's end, a kill), this incarnation's container goes,
        and is gone before the final event: that event may restart the task, whose next container
        must not meet this one still holding its ports on the host's network."""
        container, name = self.container, self.container_name
        if container is None or name is None or not taskcontainer.daemon_owned(container):
            return
        if not taskcontainer.remove_until_gone(container.runtime, name):
            warn("agent: container %s of %s is still there after its removal" % (name, self.spec.task))

    def _final(self, pid: int, returncode: Optional[int], exited_at: float) -> None:
        if self._stopped:
            exit_code = describe_exit(returncode)[0] if returncode is not None else None
            self._state(events.STOPPED, pid=pid, exit_code=exit_code, reason=self._stop_reason or "stopped on request")
        elif returncode is None:
            self._state(events.FAILED, pid=pid, exit_code=None, exited_at=exited_at,
                        reason="ended while no host agent watched it; its exit status is unknown")
        elif returncode == 0:
            self._state(events.SUCCEEDED, pid=pid, exit_code=0)
        else:
            exit_code, reason = describe_exit(returncode)
            cannot = shell_cannot_execute(returncode, self._last_stderr[-1] if self._last_stderr else "")
            refused = (taskcontainer.start_failure(returncode, self._last_stderr, self.container.image,
                                                   self.container.runtime) if self.container is not None else None)
            if refused is not None:  # the image or the runtime: no restart can fix it
                self._state(events.FAILED, pid=pid, exit_code=exit_code, reason=refused, permanent=True,
                            exited_at=exited_at)
            elif cannot is not None:
                self._state(events.FAILED, pid=pid, exit_code=exit_code, reason="could not start: %s" % cannot,
                            permanent=True, exited_at=exited_at)
            else:
                self._state(events.FAILED, pid=pid, exit_code=exit_code, reason=reason, exited_at=exited_at,
                            **self._signal_evidence(returncode))

    def _signal_evidence(self, returncode: int) -> Dict[str, Any]:
        """For a task a signal ended (and not distlaunch: that is a stop): the signal's name, and for
        SIGKILL whether the kernel's OOM killer sent it and the task's peak RSS (the launcher's cause)."""
        if returncode >= 0:
            return {}
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            return {}
        out: Dict[str, Any] = {"signal": name}
        if -returncode == signal.SIGKILL:
            out["oom_kill"] = self.oom.oom_killed()
            if self.oom.peak_rss is not None:
                out["peak_rss_bytes"] = self.oom.peak_rss
        return out


def _start_ticks(pid: int) -> Optional[int]:
    """When ``pid`` started (clock ticks since boot, /proc/PID/stat): a pid used again is told apart."""
    fields = stat_fields(pid)
    return int(fields[19]) if len(fields) > 19 and fields[19].isdigit() else None


def _reopen_pipe(pid: int, fd: int) -> Optional[int]:
    """A new read end of the pipe that ``pid`` holds as ``fd`` (its own stdout/stderr pipe)."""
    try:
        link = os.readlink("/proc/%d/fd/%d" % (pid, fd))
        if not link.startswith("pipe:"):
            return None
        return os.open("/proc/%d/fd/%d" % (pid, fd), os.O_RDONLY)
    except OSError as exc:
        warn("agent: cannot reopen the output pipe %d of pid %d: %s" % (fd, pid, exc))
        return None


def read_task_file(task_dir: str) -> Optional[Dict[str, Any]]:
    try:
        with open(os.path.join(task_dir, TASK_FILE), encoding="utf-8") as f:
            info = json.load(f)
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and isinstance(info.get("pid"), int) else None

