"""One Host interface, several implementations, each in its own module.

``base`` holds the interface (Host, LineStream, CommandResult) and the pieces implementations
share; ``local`` runs commands on this machine, ``ssh`` over SSH (Fabric/paramiko), ``openssh``
by the system ssh client over one multiplexed master, ``slurm`` as job steps
(``srun --overlap``) inside a Slurm allocation.

Each host has one ``Host``, used from one worker thread of the supervisor. Commands are shell
strings (every profile value in them is ``shlex.quote``d by the caller). ``stream_lines`` delivers
stdout lines on a reader thread with a bounded line length; it never keeps the whole output.

``sshconfig.py`` resolves an SSH host before connecting: ``ssh -G`` against the chosen config and
again against ``/dev/null``, keeping only what the config changed, under the profile's explicit
values (``SshSettings.unset`` lists the keys the profile left open). ``SshHost`` opens each
ProxyJump hop as a Fabric connection with the same known_hosts policy and tunnels the next one
through its direct-tcpip channel, or runs ProxyCommand (``sshauth.proxy_command``) as the socket of
the target. ``sshoptions.py`` sorts every setting ``ssh -G`` reports as changed into honoured
(sshconfig/ssh.py), ignored (changes neither destination nor authentication: ControlMaster,
forwardings, logging) and refused: anything else, or a value that changes how to authenticate
(GSSAPI, PKCS#11, no publickey), stops ``resolve`` with a HostError naming the setting and
``transport = "openssh"``; an unknown setting is refused too, so a new OpenSSH option is never
dropped silently. ``sshauth.py`` holds the paramiko pieces for CertificateFile (a key with its
certificate loaded), IdentityAgent (an agent on another socket), ProxyCommand and
ServerAliveCountMax (a watch that closes a transport after N unanswered keepalives). ``shellcmds.py`` holds
the shell both SSH hosts send (a detached start) and their common ``ShellHost`` base. ``OpenSshHost``
runs every command as an ``ssh -o ControlMaster=no HOST /bin/sh -c CMD`` child with ``-o
ControlPath=SOCKET`` (``local.run_process``, streams as ``LocalLineStream`` over that argv):
``connect`` starts the master (``-M -N -f``, ControlPersist) unless ``-O check`` finds one of the
run, the socket in ``<run dir>/ssh/`` (0700; ``$TMPDIR/distlaunch-ssh-UID/HASH`` where that path is
too long for a unix socket, a temporary directory for ``check``). Each folder of it is created 0700
or, when there already, verified at every ``connect`` (ours, exactly 0700, not a symlink:
``lstat``), else one line naming it and what is wrong (``launcher/privatedir.py``, the one check for
every private dir under /tmp). ``close`` ends the master only in the process that started it;
``Host.end_run`` (from ``down``) ends it whoever did. ssh reads ssh_config itself; the profile's
explicit values go first on its command line (``-l``, ``-p``, ``-i``, ``-o``), so they win.
``slurm.py``'s ``SlurmHost`` is a ``LocalHost`` whose every command is wrapped in ``srun --overlap
--jobid J --nodelist NODE``; it sets ``detach_by_setsid = False``, so ``HostSession`` starts the
host agent (``serve``) with ``start_detached`` as one long step per node, before each ``follow`` and
``start``, which then run with ``--no-spawn`` and wait for it (a ``setsid`` child of another step
would escape slurmstepd's process tracking; a second ``serve`` exits at once on the lock). A
``HostGone`` from ``connect`` (the allocation ended) makes the supervisor fail the job instead of
reconnecting. A step that fails with srun's or slurmstepd's own word (not the command's) makes
``SlurmHost`` ask ``squeue`` for the job's state: an allocation that is completing or has ended (its
credential revoked: exit 168 is Slurm's error 4008 cut to 8 bits) is ``HostGone`` too, and ``down``
counts such a host as clean, since Slurm ends every process of a job that ends; no retry decides it.
``launcher/profile/hostlist.py`` expands host ranges, ``launcher/profile/slurm_env.py`` reads the
allocation from the environment, ``launcher/export/sbatch.py`` writes the batch script.
"""

from __future__ import annotations

from collections.abc import Callable

from launcher.model import HostConfig
from launcher.transport.base import (
    MAX_LINE_BYTES,
    CommandResult,
    CommandTimeout,
    Host,
    LineSplitter,
    LineStream,
)
from launcher.transport.local import LocalHost
from launcher.transport.slurm import SlurmHost

TYPE_CHECKING = False
if TYPE_CHECKING:
    from launcher.transport.ssh import SshHost

__all__ = ["MAX_LINE_BYTES", "CommandResult", "CommandTimeout", "Host", "LineSplitter", "LineStream",
           "LocalHost", "SlurmHost", "SshHost", "make_host"]


def __getattr__(name: str) -> object:
    """``SshHost`` on first use: Fabric and paramiko take ~0.25 s to import, which a job of local
    hosts (the embedded default) never needs."""
    if name == "SshHost":
        from launcher.transport.ssh import SshHost

        return SshHost
    raise AttributeError(name)


def make_host(config: HostConfig, on_notice: Callable[[str], None] | None = None,
              run_id: str | None = None) -> Host:
    """The Host for a profile's host entry; ``on_notice`` receives one-line notices (new host keys);
    ``run_id``: the run the host serves (the openssh transport's master is the run's)."""
    if config.transport == "local":
        return LocalHost(config)
    if config.transport == "slurm":
        return SlurmHost(config)
    if config.transport == "openssh":
        from launcher.transport.openssh import OpenSshHost

        return OpenSshHost(config, on_notice=on_notice, run_id=run_id)
    from launcher.transport.ssh import SshHost

    return SshHost(config, on_notice=on_notice)
