"""Where the disks are: does every host see the outputs dir the first host writes to?

A token file is written in the first host's outputs dir and looked for in each other host's
(``check`` and ``up`` say the answer in one line). Per-host storage is what the default
``outputs = "~/distlaunch/outputs/{name}"`` gives on machines without a shared filesystem; then
distlaunch keeps copies of checkpoints itself (launcher/supervise/checkpoints.py).
"""

from __future__ import annotations

import contextlib
import secrets
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

from launcher.remote.session import HostSession


@dataclass
class StorageFinding:
    """Where the outputs dir lives: shared by every host, or per host (the hosts that do not see it)."""

    shared: bool
    apart: list[str] = field(default_factory=list)

    def line(self) -> str:
        if self.shared:
            return "outputs is shared by every host: checkpoints there are read by whoever restarts"
        return (f"outputs is per host (the first host's is not seen from {', '.join(self.apart)}): distlaunch "
                "copies checkpoints to the launcher's machine and on to whoever restarts")


def probe_outputs(sessions: Mapping[str, HostSession]) -> StorageFinding | None:
    """A token written in the first host's outputs dir, looked for in every other host's: None with
    one host (nothing to share) or where a host did not answer."""
    names = list(sessions)
    if len(names) < 2:
        return None
    first = sessions[names[0]]
    name = f".distlaunch-token-{secrets.token_hex(6)}"
    token = f"{first.outputs_dir}/{name}"
    try:
        if not first.host.run(f"mkdir -p {shlex.quote(first.outputs_dir)} && : > {shlex.quote(token)}",
                              timeout=30).ok:
            return None
        apart = [h for h in names[1:]
                 if not sessions[h].host.run(f"test -f {shlex.quote(sessions[h].outputs_dir + '/' + name)}",
                                             timeout=30).ok]
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            first.host.run(f"rm -f {shlex.quote(token)}", timeout=30)
    return StorageFinding(not apart, apart)
