"""Whether an all-local job's tasks run in a private network namespace (``local_network``).

TensorFlow's task ports have no authentication, and on a shared machine every local user can reach
them. A job whose tasks all run on this one machine, outside containers, can have a network of its
own (launcher/agent/netns.py: the host agent makes it, the tasks inherit it): nobody else reaches
the ports, and the tasks reach no other machine either (no dataset download from there). So
``auto`` takes it only where it protects someone: other people have processes here; ``private``
always (refused in one line where it cannot be had); ``host`` never.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from launcher.agent import netns
from launcher.commands.exposure import local_users_warning, other_people
from launcher.errors import UserError
from launcher.model import Plan

PRIVATE_LINE = ("the tasks run in a private network namespace: no other user of this machine can reach their "
                "ports, and they reach no other machine (local_network = \"host\" shares this machine's network)")


@dataclass(frozen=True)
class Decision:
    private: bool
    #: what `up` and `check` say about it ("" for nothing); ``warning``: said as a warning
    line: str = ""
    warning: bool = False


def not_eligible(plan: Plan) -> str | None:
    """Why this job's tasks cannot share a private network, or None when they can."""
    hosts = {t.host for t in plan.tasks}
    remote = sorted(h for h in hosts | set(plan.profile.spares) if plan.profile.hosts[h].transport != "local")
    if remote:
        return f"tasks run on other machines ({', '.join(remote[:3])})"
    if len(hosts) > 1 or plan.profile.spares:
        return "the tasks are on more than one local host (each host agent would have a network of its own)"
    outside = sorted({t.address for t in plan.tasks if not _loopback(t.address)})
    if outside:
        return (f"the tasks' TF_CONFIG address {outside[0]} is not a loopback one (a private network has only "
                "127.0.0.1); give the host address = \"localhost\"")
    boxed = [t.task_id for t in plan.tasks if plan.profile.roles[t.role].settings.container is not None]
    if boxed:
        return f"{', '.join(boxed[:3])} run in a container, whose runtime keeps the machine's network"
    return None


def _loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False


def decide(plan: Plan, profile_path: str, people: Sequence[int] | None = None,
           kernel: Callable[[], str | None] = netns.can_make) -> Decision:
    """The decision for ``plan``, its line for `up`/`check`; UserError when ``private`` was asked
    for and cannot be had."""
    choice = plan.profile.local_network
    if choice == "host":
        shared = local_users_warning(plan, profile_path, people)
        return Decision(False, shared or "", warning=shared is not None)
    why = not_eligible(plan)
    if choice == "private":
        if why is not None:
            raise UserError(f"local_network = \"private\" needs every task on one local host: {why}; "
                            "set local_network = \"host\" (or \"auto\")")
        refused = kernel()
        if refused is not None:
            raise UserError(f"local_network = \"private\": this machine refuses a network namespace of your own "
                            f"({refused}; unprivileged user namespaces may be off: sysctl "
                            "kernel.unprivileged_userns_clone / user.max_user_namespaces); "
                            "set local_network = \"host\"")
        return Decision(True, PRIVATE_LINE)
    shared = local_users_warning(plan, profile_path, people if people is not None else other_people())
    if shared is None:
        return Decision(False)
    if why is None:
        refused = kernel()
        if refused is None:
            return Decision(True, PRIVATE_LINE)
        why = f"this machine refuses a network namespace of your own ({refused})"
    return Decision(False, f"{shared} (no private network for them: {why})", warning=True)
