"""Shell commands both SSH transports (paramiko and the system ssh client) send to a host."""

from __future__ import annotations

import posixpath
import shlex

from launcher.transport.base import signal_name


def sh(command: str) -> str:
    """Run ``command`` by /bin/sh whatever the user's login shell is (fish, csh, ...)."""
    return "/bin/sh -c " + shlex.quote(command)


def detached(command: str, log: str, cwd: str | None) -> str:
    """Start ``command`` in a new session with output to ``log``; prints its pid (== its pgid)."""
    lines = []
    if cwd is not None:
        lines.append(f"cd {shlex.quote(cwd)} || exit 97")
    if posixpath.dirname(log):
        lines.append(f"mkdir -p {shlex.quote(posixpath.dirname(log))} || exit 98")
    lines.append(f": >>{shlex.quote(log)} || exit 98")
    # setsid -f forks a child that is leader of a new session and process group; that child
    # prints its own pid and then execs the command in place, so pid == pgid. Not a shell
    # background job: those start with SIGINT/SIGQUIT ignored, which tasks would inherit.
    lines.append(
        "exec setsid -f /bin/sh -c "
        + shlex.quote('echo $$; exec /bin/sh -c "$1" </dev/null >>"$2" 2>&1')
        + f" distlaunch-task {shlex.quote(command)} {shlex.quote(log)}")
    return "\n".join(lines)


def put_from_stdin(tmp: str, path: str, mode: int) -> str:
    """Write stdin to ``path`` through ``tmp`` (atomic rename), with ``mode``."""
    q_tmp, q_path = shlex.quote(tmp), shlex.quote(path)
    return (f"umask 077; cat > {q_tmp} && chmod {mode:o} {q_tmp} && mv -f {q_tmp} {q_path} "
            f"|| {{ rm -f {q_tmp}; exit 1; }}")


def kill_group(pgid: int, sig: int) -> str:
    return f"kill -s {signal_name(sig)} -- -{int(pgid)}"
