"""A private network namespace for a job whose tasks all run on one machine.

TensorFlow's task ports have no authentication: on a shared machine every local user can connect
to one and run code in the task. A network namespace of the job's own (a loopback of its own)
keeps them out: the host agent makes one at its start (``enter_private``) and every task it starts
inherits it, so the tasks reach each other on 127.0.0.1 and nobody else reaches them. Root makes
it with ``unshare(CLONE_NEWNET)``; anyone else inside a user namespace of their own, where the
kernel lets unprivileged users make one (uid mapped to itself: files stay theirs).

An agent started after a killed one joins the namespace of its predecessor's live tasks
(``setns``), so adopted and new tasks share one network. Launcher-side code that must reach a task
port (a profiler capture) runs in a process that joined it (``join``, ``run_in``).

Stdlib-only, Python >= 3.9 (runs from the agent zipapp).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import struct
from typing import Any, Callable, Iterable, Optional

#: in a host run dir: the launcher asks the host agent for a private network ("private")
NETWORK_FILE = "network"
#: /proc/PID/comm of a host agent (hostagent.AGENT_PROCESS_NAME)
AGENT_NAME = "distlaunch-host"
#: the machine's own network counters, read from inside a private namespace (pid 1's namespace)
HOST_NET_DEV = "/proc/1/net/dev"
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH14x"


def _libc() -> Any:
    import ctypes  # here: every agent verb imports this module, few of them need it

    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        import ctypes

        code = ctypes.get_errno()
        raise OSError(code, "%s: %s" % (what, os.strerror(code)))


def make_private() -> None:
    """This process into a new network namespace with its loopback up (and, unless root, a new
    user namespace first, its uid and gid mapped to themselves). Single-threaded callers only."""
    uid, gid = os.getuid(), os.getgid()
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNET | (CLONE_NEWUSER if uid != 0 else 0)), "unshare")
    if uid != 0:
        for name, text in (("setgroups", "deny"), ("uid_map", "%d %d 1" % (uid, uid)),
                           ("gid_map", "%d %d 1" % (gid, gid))):
            with open("/proc/self/" + name, "w") as f:
                f.write(text)
    loopback_up()


def ready_gpus() -> None:
    """Before a user namespace: CUDA's first use after a boot makes /dev/nvidia-uvm with the
    setuid nvidia-modprobe, which a user namespace (no root mapped) would run without its setuid
    bit; it is made here, from outside, where the driver is and the node is missing."""
    if os.getuid() == 0 or not os.path.exists("/dev/nvidiactl") or os.path.exists("/dev/nvidia-uvm"):
        return
    import subprocess

    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["nvidia-modprobe", "-u", "-c0"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=10)


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        flags = struct.unpack(_IFREQ, fcntl.ioctl(sock, _SIOCGIFFLAGS, struct.pack(_IFREQ, b"lo", 0)))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))


def _ns_id(pid: Any, kind: str) -> Optional[int]:
    try:
        return os.stat("/proc/%s/ns/%s" % (pid, kind)).st_ino
    except OSError:
        return None


def private_to(pid: int) -> bool:
    """Whether ``pid`` lives in a network namespace other than this process's."""
    theirs = _ns_id(pid, "net")
    return theirs is not None and theirs != _ns_id("self", "net")


def join(pid: int) -> None:
    """This process into the network namespace of ``pid`` (and its user namespace first, where it
    is another). Single-threaded callers only (a forked child, a preexec function)."""
    libc = _libc()
    user = os.open("/proc/%d/ns/user" % pid, os.O_RDONLY)
    try:
        net = os.open("/proc/%d/ns/net" % pid, os.O_RDONLY)
        try:
            if _ns_id(pid, "user") != _ns_id("self", "user"):
                _check(libc.setns(user, CLONE_NEWUSER), "setns into the user namespace of %d" % pid)
            _check(libc.setns(net, CLONE_NEWNET), "setns into the network namespace of %d" % pid)
        finally:
            os.close(net)
    finally:
        os.close(user)


def wanted(run_dir: str) -> bool:
    try:
        with open(os.path.join(run_dir, NETWORK_FILE), encoding="utf-8") as f:
            return f.read().strip() == "private"
    except OSError:
        return False


def agent_member(run_dir: str) -> Optional[int]:
    """The pid of the host agent of ``run_dir`` when it runs in the run's private network (checked
    by its name and its namespace: a pid file outlives its process), else None."""
    if not wanted(run_dir):
        return None
    try:
        with open(os.path.join(run_dir, "agent.pid"), encoding="ascii") as f:
            pid = int(f.read().strip())
        with open("/proc/%d/comm" % pid, encoding="utf-8") as f:
            name = f.read().strip()
    except (OSError, ValueError):
        return None
    return pid if name == AGENT_NAME and private_to(pid) else None


def join_run(run_dir: str) -> bool:
    """This (single-threaded) process into the private network of ``run_dir``'s host agent, where
    it has one: whether it joined."""
    pid = agent_member(run_dir)
    if pid is None:
        return False
    try:
        join(pid)
    except OSError:
        return False
    return True


def enter_private(live_pids: Iterable[int]) -> str:
    """The host agent at its start: join the private network of the first of ``live_pids`` (its
    predecessor's tasks) that has one, else make a new one. What was done, in words; OSError when
    the kernel refuses."""
    for pid in live_pids:
        if private_to(pid):
            join(pid)
            return "joined the private network of task pid %d" % pid
    make_private()
    return "made a private network namespace"


def can_make() -> Optional[str]:
    """None when this user may make a private network here, else why not (the kernel's words). A
    forked child tries, so the caller's own namespaces never change."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # little here (no lock the parent's threads could hold): ctypes, /proc, one socket
        os.close(read)
        try:
            make_private()
            os.write(write, b"ok")
        except OSError as exc:
            os.write(write, ("no: " + (exc.strerror or str(exc))).encode()[:500])
        except BaseException:
            pass
        os._exit(0)
    os.close(write)
    try:
        said = b""
        while True:
            chunk = os.read(read, 512)
            if not chunk:
                break
            said += chunk
    finally:
        os.close(read)
        _reap(pid)
    if said == b"ok":  # judged by what it wrote: a caller that ignores SIGCHLD gets no exit status
        return None
    return said.decode(errors="replace")[4:] or "the test of a private network namespace failed"


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):  # SIGCHLD ignored: the kernel reaped it
        os.waitpid(pid, 0)


def run_in(pid: int, func: Callable[[], Any]) -> Any:
    """``func()`` (its answer JSON-able) in a forked child that joined ``pid``'s network: the
    launcher reaching a port of a task in a private network. Raises OSError when it cannot join."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read)
        code = 0
        try:
            try:
                join(pid)
                out = {"ok": func()}
            except OSError as exc:
                out = {"errno": exc.errno or errno.EPERM, "error": exc.strerror or str(exc)}
            data = json.dumps(out).encode()
            while data:
                data = data[os.write(write, data):]
        except BaseException:
            code = 1
        os._exit(code)
    os.close(write)
    chunks = []
    try:
        while True:
            chunk = os.read(read, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        os.close(read)
        _reap(child)
    try:
        answer = json.loads(b"".join(chunks).decode())
    except ValueError:
        raise OSError(errno.EIO, "the process that joined the network of pid %d gave no answer" % pid) from None
    if "error" in answer:
        raise OSError(int(answer["errno"]), str(answer["error"]))
    return answer["ok"]
