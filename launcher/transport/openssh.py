"""OpenSshHost: a host reached by the system ``ssh`` client, multiplexed over one master connection.

Everything OpenSSH can do works (Kerberos/GSSAPI, PKCS#11 and FIDO keys, Match exec, 2FA
prompts), since ``ssh`` itself reads ~/.ssh/config. ``connect`` starts a master
(ControlMaster + ControlPersist) whose socket lives in a private 0700 directory of the run, so
one authentication serves the preflight, the agent upload (over stdin), the follow channel and
every later verb of the run (``restart``, ``stacks``, ``down`` in other processes find the same
socket); the master is closed when the run ends (``close`` of the process that started it, or
``down``). Each command is one ``ssh -o ControlMaster=no ... HOST /bin/sh -c CMD`` child.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable

from launcher.errors import HostError
from launcher.model import HostConfig
from launcher.paths import runs_root
from launcher.privatedir import UnsafePath, ensure_private_dir
from launcher.transport import shellcmds, sshconfig
from launcher.transport.base import CommandResult, LineStream, head
from launcher.transport.local import LocalLineStream, run_process

#: how long an idle master outlives the last command (a launcher that died leaves it this long)
CONTROL_PERSIST_SECONDS = 600
#: unix socket paths are limited to 104-108 bytes: a run dir deeper than this takes /tmp instead
_MAX_SOCKET_PATH = 104
#: what a socket path adds to its directory: "/", the name, and the ".XXXXXXXXXXXXXXXX" suffix the
#: master binds under before renaming it into place
_SOCKET_EXTRA = 1 + 10 + 17
#: the launcher's keepalive where ssh_config sets none: a cut link ends the master within 15 s
KEEPALIVE = ("ServerAliveInterval=5", "ServerAliveCountMax=3")
#: how ssh (not the remote command) says it failed, on its last stderr line with exit code 255
_SSH_FAILURE = re.compile(r"^(ssh: |Connection (closed|reset|refused|timed out)|kex_exchange_identification"
                          r"|.*Permission denied \(|Host key verification failed|client_loop: |mux_client_"
                          r"|Control socket connect|ssh_exchange_identification|Received disconnect"
                          r"|Bad owner or permissions|Timeout, server )")


def control_dir(run_id: str | None) -> tuple[str, bool]:
    """(the directory for a run's control sockets, whether it is a temporary one to remove).
    A run's: under its local run dir, or under /tmp where that path is too long for a socket;
    without a run (``check``), a temporary one."""
    if run_id is None or not (runs_root() / run_id).is_dir():
        return tempfile.mkdtemp(prefix="dl-ssh-"), True
    preferred = str(runs_root() / run_id / "ssh")
    if len(preferred) + _SOCKET_EXTRA < _MAX_SOCKET_PATH:
        return preferred, False
    digest = hashlib.sha256(preferred.encode()).hexdigest()[:12]
    return os.path.join(shared_control_root(), digest), False


def shared_control_root() -> str:
    """The user's folder under /tmp (or $TMPDIR) for the control dirs of runs too deep for a socket."""
    return os.path.join(tempfile.gettempdir(), f"distlaunch-ssh-{os.getuid()}")


def make_control_dir(directory: str) -> None:
    """Create or verify a run's control dir and, under /tmp, the user's folder above it: each
    private (0700, the user's, not a symlink) every time, or one line saying what is wrong. A
    folder another user made there would receive the master's connections."""
    hint = ""
    if os.path.dirname(directory) == shared_control_root():
        hint = "; or set TMPDIR to a directory of yours (the run dir is too deep for a socket under it)"
        ensure_private_dir(shared_control_root(), hint)
    ensure_private_dir(directory, hint)


class OpenSshHost(shellcmds.ShellHost):
    """A host reached by the system ``ssh`` binary, every command over one master connection."""

    def __init__(self, config: HostConfig, on_notice: Callable[[str], None] | None = None,
                 run_id: str | None = None) -> None:
        super().__init__(config, on_notice)
        self._run_id = run_id
        self._dir: str | None = None
        self._temporary = False
        self._owner = False  # this process started the master: it ends it
        self._open = False

    @property
    def label(self) -> str:
        return f"host {self.name} ({self.address})"

    @property
    def socket_path(self) -> str:
        if self._dir is None:
            self._dir, self._temporary = control_dir(self._run_id)
        return os.path.join(self._dir, hashlib.sha256(self.name.encode()).hexdigest()[:10])

    # ---- the ssh command line

    def _options(self) -> list[str]:
        """ssh's options: the profile's values (which win, as -o comes before the config), the
        control socket, and BatchMode where no one could answer a prompt."""
        settings, unset = self.settings, self.settings.unset
        route = self.route or self.resolve()
        argv = ["ssh", *self._config_option(), "-T", "-o", f"ControlPath={self.socket_path}"]
        no_config = settings.ssh_config is None
        if settings.user and ("user" not in unset or no_config):
            argv += ["-l", settings.user]
        if "ssh_port" not in unset or no_config:
            argv += ["-p", str(settings.ssh_port)]
        if settings.identity_file and ("identity_file" not in unset or no_config):
            argv += ["-i", os.path.expanduser(settings.identity_file)]
        if "known_hosts" not in unset or no_config:
            argv += ["-o", f"UserKnownHostsFile={os.path.expanduser(settings.known_hosts)}"]
        if "host_key_policy" not in unset or no_config:
            strict = "accept-new" if settings.host_key_policy == "accept-new" else "yes"
            argv += ["-o", f"StrictHostKeyChecking={strict}"]
        argv += ["-o", f"ConnectTimeout={max(1, round(route.connect_timeout))}"]
        if route.target.keepalive_seconds is None:
            argv += [arg for option in KEEPALIVE for arg in ("-o", option)]
        if not sys.stdin.isatty():
            argv += ["-o", "BatchMode=yes"]
        return argv

    def _config_option(self) -> list[str]:
        """As ``ssh HOST``: the default config is read with the system-wide one (no ``-F``);
        another file alone (``-F`` skips /etc/ssh/ssh_config, as with ssh); false: none."""
        setting = self.settings.ssh_config
        if setting == sshconfig.DEFAULT_CONFIG:
            return []
        path = os.path.expanduser(setting) if setting else None
        return ["-F", path if path and os.path.isfile(path) else "/dev/null"]

    def _command(self, command: str) -> list[str]:
        return [*self._options(), "-o", "ControlMaster=no", "-o", "LogLevel=ERROR", "--", self.address,
                shellcmds.sh(command)]

    def _control(self, operation: str, timeout: float = 15.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self._options(), "-O", operation, "--", self.address], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    # ---- connection

    def connect(self) -> None:
        if self.connected:
            return
        try:
            self._connect()
        except BaseException:
            self.close()  # a temporary control dir goes with the failed attempt
            raise

    def _connect(self) -> None:
        self.resolve()
        self.check_identity_file()
        directory = os.path.dirname(self.socket_path)
        if not self._temporary:  # a temporary one is mkdtemp's: new and private
            try:
                make_control_dir(directory)
            except UnsafePath as exc:
                raise HostError(f"{self.label}: {exc}") from None
        with contextlib.suppress(subprocess.TimeoutExpired):
            if self._control("check").returncode == 0:  # a master of this run serves already
                self._open = True
                return
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)  # a master that died leaves its socket behind
        tty = sys.stdin.isatty()  # a prompt (2FA, a passphrase) is answered once, here
        argv = [*self._options(), "-o", "ControlMaster=yes", "-o", f"ControlPersist={CONTROL_PERSIST_SECONDS}",
                "-N", "-f", "--", self.address]
        assert self.route is not None
        try:
            result = subprocess.run(argv, capture_output=True, text=True, stdin=None if tty else subprocess.DEVNULL,
                                    timeout=None if tty else self.route.connect_timeout * 3 + 30)
        except subprocess.TimeoutExpired:
            raise HostError(f"{self.label}: ssh did not log in within "
                            f"{self.route.connect_timeout * 3 + 30:g}s; check the host and the network") from None
        except OSError as exc:
            raise HostError(f"{self.label}: cannot run ssh ({exc.strerror or exc}); install the "
                            "OpenSSH client or set transport = \"ssh\"") from None
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        for line in lines:
            if line.startswith("Warning: Permanently added"):
                self.notice(f"{self.label}: {line.removeprefix('Warning: ').rstrip('.')} "
                             f"(host_key_policy = \"accept-new\")")
        if result.returncode != 0:
            raise HostError(self._explain(lines[-1] if lines else f"ssh exited with {result.returncode}"))
        self._owner = self._open = True

    def _explain(self, line: str) -> str:
        """One line for a failed login: ssh's own reason, and what to do about the common ones."""
        if "Host key verification failed" in line or "No ED25519 host key is known" in line:
            return (f"{self.label}: unknown host key, or a changed one (ssh: {line}); if it is new, add it "
                    f"with `ssh-keyscan` to {self.settings.known_hosts} or set host_key_policy = \"accept-new\"")
        if "Permission denied" in line:
            return f"{self.label}: ssh: {line}; check user and identity_file, or log in once with `ssh {self.address}`"
        return f"{self.label}: ssh: {line}"

    def close(self) -> None:
        """End the master if this process started it (the run is over for it), and forget it."""
        if self._open and self._owner and self._dir is not None:
            self.end_master()
        self._open = self._owner = False
        if self._temporary and self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def end_master(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            self._control("exit")
        if self._dir is not None:
            with contextlib.suppress(OSError):  # only once empty: other hosts' masters may live there
                os.rmdir(self._dir)

    def end_run(self) -> None:
        """The run is over (``down``): its master goes too, whichever process started it."""
        if self._dir is not None:
            self.end_master()
        self._owner = False
        self.close()

    @property
    def connected(self) -> bool:
        return self._open and self._dir is not None and os.path.exists(self.socket_path)

    # ---- commands

    def run(self, command: str, timeout: float = 60.0, stdin: bytes | None = None) -> CommandResult:
        result = run_process(self._command(command), timeout, stdin,
                             f"{self.label}: `{head(command)}` did not finish within {timeout:g}s")
        if result.exit_code == 255:
            last = (result.stderr.strip().splitlines() or [""])[-1]
            if _SSH_FAILURE.match(last):
                raise HostError(f"{self.label}: connection lost while running `{head(command)}` ({last})")
        return result

    def stream_lines(self, command: str, on_line: Callable[[str], None],
                     on_close: Callable[[int | None], None] | None = None) -> LineStream:
        try:
            return LocalLineStream(command, on_line, on_close, argv=self._command(command))
        except OSError as exc:
            raise HostError(f"{self.label}: cannot start ssh for `{head(command)}` ({exc})") from exc
