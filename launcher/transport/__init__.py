"""One Host interface, several implementations, each in its own module.

``base`` holds the interface (Host, LineStream, CommandResult) and the pieces implementations
share; ``local`` runs commands on this machine, ``ssh`` over SSH (Fabric/paramiko), ``openssh``
by the system ssh client over one multiplexed master, ``slurm`` as job steps
(``srun --overlap``) inside a Slurm allocation.
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
