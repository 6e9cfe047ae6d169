"""Shell commands both SSH transports (paramiko and the system ssh client) send to a host."""

from __future__ import annotations

import getpass
import os
import posixpath
import shlex
from collections.abc import Callable

from launcher.errors import HostError
from launcher.model import HostConfig
from launcher.transport import sshconfig
from launcher.transport.base import CommandResult, Host, head


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


class ShellHost(Host):
    """What both SSH hosts build the same way on ``run``: the route, the home, absolute paths and
    a detached start. Subclasses set ``config`` and ``label`` and implement the rest."""

    def __init__(self, config: HostConfig, on_notice: Callable[[str], None] | None) -> None:
        self.name = config.name
        self.address = config.address
        self.config = config
        self.settings = config.ssh
        self.user = self.settings.user or getpass.getuser()
        self.port = self.settings.ssh_port
        #: where the address led once ssh_config was applied (set by ``resolve``)
        self.route: sshconfig.Route | None = None
        #: one-line notices for the user (a host key added under accept-new); also sent to on_notice
        self.notices: list[str] = []
        self._on_notice = on_notice
        self._home: str | None = None

    def check_identity_file(self) -> None:
        """The profile's identity_file must exist (ssh would only warn and try other keys)."""
        path = self.settings.identity_file
        if path and "identity_file" not in self.settings.unset and not os.path.isfile(os.path.expanduser(path)):
            raise HostError(f"{self.label}: identity_file {path} does not exist; "
                            f"fix identity_file in [ssh] or [hosts.{self.name}]")

    def notice(self, line: str) -> None:
        self.notices.append(line)
        if self._on_notice is not None:
            self._on_notice(line)

    def resolve(self) -> sshconfig.Route:
        """The route ``connect`` takes (``ssh -G`` over the profile); also what ``check`` prints."""
        route = sshconfig.resolve(self.config)
        self.route = route
        self.user, self.port = route.target.user, route.target.port
        return route

    @property
    def label(self) -> str:
        raise NotImplementedError

    def _check(self, command: str, what: str, timeout: float = 60.0, stdin: bytes | None = None) -> CommandResult:
        result = self.run(command, timeout=timeout, stdin=stdin)
        if not result.ok:
            detail = (result.stderr.strip().splitlines() or [f"exit code {result.exit_code}"])[-1]
            raise HostError(f"{self.label}: cannot {what}: {detail}")
        return result

    def home(self) -> str:
        if self._home is None:
            home = self._check('printf %s "$HOME"', "find the home directory").stdout.strip()
            if not home.startswith("/"):
                raise HostError(f"{self.label}: $HOME is not set for user {self.user}")
            self._home = home
        return self._home

    def _absolute(self, path: str) -> str:
        if path == "~" or path.startswith("~/"):
            return self.home() + path[1:]
        return path

    def start_detached(self, command: str, log_path: str, cwd: str | None = None) -> int:
        script = detached(command, self._absolute(log_path), None if cwd is None else self._absolute(cwd))
        result = self._check(script, f"start `{head(command)}`")
        try:
            return int(result.stdout.split()[0])
        except (IndexError, ValueError):
            raise HostError(f"{self.label}: cannot start `{head(command)}`: no pid reported "
                            f"({result.stderr.strip() or result.stdout.strip()!r})") from None
