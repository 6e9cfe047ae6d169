"""The verbs the launcher runs over SSH to talk to the host agent: ``follow``, ``start``, ``stop``.

Each connects to the host agent's socket in the host run dir and starts the agent first when none
is serving (``--no-spawn``: wait for one that the transport starts, e.g. a Slurm step). When no
agent serves, ``stop`` does the job itself (kill the task's group, write the final event).

Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import sys
import threading
import time
from typing import Any, Dict, List, Optional

from launcher import events
from launcher.agent.agentfiles import write_specs
from launcher.agent.agentlog import warn
from launcher.agent.hostagent import LOCK_NAME, PID_NAME, SOCKET_NAME, HostAgent
from launcher.agent.output import EventWriter, last_state
from launcher.agent.procs import (
    KILL_CONFIRM_SECONDS,
    _group_members,
    _is_our_agent,
    _is_our_group,
    _kill_group_for_good,
    _read_int,
    _signal_pid,
    _wait_until,
    _write_atomic,
    pause,
    pid_alive,
)
from launcher.agent.spec import AgentSpec, autolog_site_dir
from launcher.protocol.agentlines import AgentOp, FollowRequest, StartRequest, StopRequest

CONNECT_SECONDS = 15.0
#: `stop --exit`: how long the verb waits for the host agent to be gone after it answered
AGENT_EXIT_WAIT_SECONDS = 10.0
#: `follow --pinged`: with no ping for this long the launcher is gone without closing the link
FOLLOW_PING_EXIT_SECONDS = 30.0


def connect(run_dir: str, spawn: bool = True, timeout: float = CONNECT_SECONDS) -> socket.socket:
    """A connection to the run's host agent, starting one (detached) if ``spawn`` and none serves;
    without ``spawn``, waits ``timeout`` for one that another party starts (0: fail at once)."""
    os.chdir(run_dir)  # a relative socket name: a long run dir must not exceed sun_path
    spawned = False
    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(SOCKET_NAME)
            return sock
        except OSError:
            sock.close()
        if spawn and not spawned:
            spawn_agent(run_dir)
            spawned = True
        if timeout <= 0 or time.monotonic() >= deadline:
            raise OSError("no host agent answers in %s after %g s (see agent.log there)" % (run_dir, timeout))
        pause(0.01 if spawned else 0.1)


def spawn_agent(run_dir: str) -> None:
    """Become the host agent in a grandchild of this process (fork, setsid, fork: no new
    interpreter to boot), detached from this command's streams (an SSH channel stays open while
    anything holds them); it inherits this verb's environment, where the launcher puts
    ``DISTLAUNCH_RUN_ID`` (``sweep`` finds it by that). Nothing happens if the agent's lock is
    held: one is starting already."""
    lock_fd = os.open(os.path.join(run_dir, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(lock_fd)
        return
    fcntl.flock(lock_fd, fcntl.LOCK_UN)  # the agent takes it again for its whole life
    os.close(lock_fd)
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        log = os.open(os.path.join(run_dir, "agent.log"), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.closerange(3, _max_fd())
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        code = HostAgent(run_dir).serve()
    except BaseException as exc:  # the grandchild must never return into the client's code
        with contextlib.suppress(Exception):
            warn("agent: the host agent failed: %r" % (exc,))
        code = 1
    os._exit(code)


def _max_fd() -> int:
    try:
        return int(os.sysconf("SC_OPEN_MAX"))
    except (ValueError, OSError):
        return 1024


def request(run_dir: str, asked: AgentOp, spawn: bool = True, timeout: float = 600.0,
            wait: float = CONNECT_SECONDS) -> Dict[str, Any]:
    """``asked`` as the first line of a connection to the host agent, and its one-line answer."""
    sock = connect(run_dir, spawn, wait)
    try:
        sock.settimeout(timeout)
        sock.sendall(asked.encode())
        data = b""
        while not data.endswith(b"\n"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    finally:
        sock.close()
    answer: Dict[str, Any] = json.loads(data or b"{}")
    return answer


# -- follow -----------------------------------------------------------------------------------------


def follow_when_asked(run_dir: str, first: Optional[bytes] = None) -> int:
    """``preflight --then-follow``, once its answer is out: wait for the launcher's first line on
    stdin (a ping, or the request that starts the tasks), then start the host agent and follow it,
    passing that line on. EOF instead (the launch stopped at preflight) ends here, and no host
    agent was started. The host agent's modules are imported (this module's imports) and the
    zipapp is looked into for autolog's hook here, while the launcher still decides, so the host
    agent forked from here inherits both."""
    autolog_site_dir()
    if first is None:  # else the reach check (launcher/agent/reachcheck.py) read it already
        try:
            first = os.read(0, 65536)
        except OSError:
            first = b""
    if not first:
        return 0
    return cmd_follow(run_dir, {}, pinged=True, first=first)


def cmd_follow(run_dir: str, offsets: Dict[str, int], pinged: bool = False, spawn: bool = True,
               first: bytes = b"") -> int:
    """Relay the host agent's event stream to stdout and stdin's pings to it, until either ends.
    ``first``: what was read from stdin already, passed on after the follow request."""
    try:
        sock = connect(run_dir, spawn)
    except OSError as exc:
        warn("agent follow: %s" % exc)
        return 1
    sock.sendall(FollowRequest(offsets, pinged).encode() + first)
    done = threading.Event()
    last_ping = [time.monotonic()]

    def relay_pings() -> None:
        # os.read on the fd, not sys.stdin: a daemon thread blocked inside a buffered reader
        # aborts the interpreter at exit
        try:
            while True:
                data = os.read(0, 65536)
                if not data:
                    break
                last_ping[0] = time.monotonic()
                sock.sendall(data)  # pings (empty lines) and requests (JSON lines) alike
        except OSError:
            pass
        done.set()
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)

    threading.Thread(target=relay_pings, name="stdin", daemon=True).start()
    out = sys.stdout.buffer
    sock.settimeout(1.0)
    try:
        while not done.is_set():
            if pinged and time.monotonic() - last_ping[0] > FOLLOW_PING_EXIT_SECONDS:
                return 0  # the launcher is gone without closing the link; it starts a new follower
            try:
                data = sock.recv(65536)
            except socket.timeout:
                continue
            if not data:
                return 0  # the host agent went away: the launcher sees the end and follows again
            out.write(data)
            out.flush()
    except BrokenPipeError:
        # the reader went away: silence the interpreter's final flush too
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
    return 0


# -- start --------------------------------------------------------------------------------------------


def cmd_start(run_dir: str, asked: StartRequest, spawn: bool = True) -> Dict[str, Any]:
    """Write the specs of ``asked`` here and have the host agent start its tasks in their order;
    secrets never touch a file."""
    write_specs(run_dir, asked.specs or {})
    if not asked.tasks:
        return {"pids": {}, "errors": {}}
    return request(run_dir, StartRequest(asked.tasks, asked.secrets), spawn)


# -- stop ---------------------------------------------------------------------------------------------


def cmd_stop(run_dir: str, slugs: List[str], grace: Optional[float], exit_after: bool = False) -> Dict[str, Any]:
    """Stop tasks through the host agent; where none serves, stop each task's group here."""
    agent_pid = _agent_pid(run_dir)
    try:
        answer = request(run_dir, StopRequest(tuple(slugs), grace, exit_after), spawn=False,
                         timeout=(grace or 10.0) + 60.0, wait=0.0)
    except (OSError, ValueError):
        pass
    else:
        if exit_after and agent_pid and "error" not in answer:
            # answered before it ends: a sweep right after would find it still exiting
            answer["agent_exited"] = _wait_gone(agent_pid, AGENT_EXIT_WAIT_SECONDS)
        return answer
    from launcher.agent.taskcontainer import stop_task_containers

    dirs = {slug: os.path.join(run_dir, "tasks", slug) for slug in slugs}
    stop_task_containers(list(dirs.values()), grace)  # all at once: the graces run side by side
    answers = {slug: stop_without_agent(task_dir, grace, containers=False) for slug, task_dir in dirs.items()}
    left = [slug for slug, a in answers.items() if not a["stopped"]]
    return {"stopped": [s for s in slugs if s not in left], "left": left, "without_agent": answers}


def _agent_pid(run_dir: str) -> int:
    try:
        with open(os.path.join(run_dir, PID_NAME), encoding="ascii") as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def _wait_gone(pid: int, timeout: float) -> bool:
    """Until process ``pid`` has ended, at most ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() >= deadline:
            return False
        pause(0.02)
    return True


def stop_without_agent(task_dir: str, grace: Optional[float], containers: bool = True) -> Dict[str, Any]:
    """Stop one task with no host agent: its single-task ``run`` agent if one runs, its container
    through the runtime (SIGTERM, the grace, SIGKILL; unless ``containers`` is False: the caller
    did), then its group."""
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
    if containers and spec is not None and spec.container is not None:  # a daemon's outlives its client
        from launcher.agent.taskcontainer import stop_task_containers

        stop_task_containers([task_dir], grace)
    group_killed = False
    if pgid is not None and _is_our_group(pgid, run_id):
        group_killed = True
        _kill_group_for_good(pgid, 0.0, lambda: None)
    left = _group_members(pgid) if pgid is not None else []
    events_path = os.path.join(task_dir, "events.jsonl")
    wrote_final = False
    if spec is not None and os.path.exists(events_path):
        last = last_state(events_path)
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


__all__ = ["_write_atomic", "cmd_follow", "cmd_start", "cmd_stop", "connect", "follow_when_asked", "request",
           "spawn_agent"]
