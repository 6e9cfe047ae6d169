"""Who can reach a job's TensorFlow ports, and the firewall rule that keeps the others out.

TensorFlow's gRPC task ports have no authentication and TensorFlow binds them on every address of
the machine: whoever connects runs any op inside the task, as its owner. distlaunch cannot close
that, so it says it: ``exposure_warnings`` for a task that listens on a public address,
``local_users_warning`` for tasks on a machine where other people have processes, and
``firewall_rules`` (``check --firewall``) prints iptables rules, per host, that let only the
owner's uid and the job's own hosts reach the ports. Nothing here changes a host.
"""

from __future__ import annotations

import getpass
import ipaddress
import os
from collections.abc import Callable, Iterable, Sequence

from launcher.model import Plan, TaskSpec

#: the lowest uid of a person's account (Debian's and Red Hat's UID_MIN); below are system accounts
FIRST_PERSON_UID = 1000
#: ids that are nobody's: the kernel's overflow uid (nobody) and (uid_t)-1
NOBODY_UIDS = frozenset({65534, 4294967295})
#: ports one iptables ``multiport`` match takes
MULTIPORT_MAX = 15


def exposure_warnings(plan: Plan) -> list[str]:
    """One line per address that is a public IP: TensorFlow's gRPC ports have no authentication.

    Host names are not resolved (check must not depend on DNS); only IP literals are judged.
    """
    warnings = []
    seen: dict[str, list[str]] = {}
    for task in plan.tasks:
        seen.setdefault(task.address, []).append(task.task_id)
    for address, task_ids in seen.items():
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            continue
        if ip.is_private or ip.is_loopback or ip.is_link_local:
            continue
        warnings.append(f"{', '.join(task_ids)} listen on {address}, not a private address; "
                        "TensorFlow's gRPC ports have no authentication: use a private network")
    return warnings


def on_this_machine(plan: Plan) -> list[TaskSpec]:
    """The tasks that run on the launcher's machine: local hosts and loopback addresses."""
    local = {name for name, host in plan.profile.hosts.items() if host.transport == "local"}
    out = []
    for task in plan.tasks:
        try:
            loopback = ipaddress.ip_address(task.address).is_loopback
        except ValueError:
            loopback = task.address == "localhost"
        if task.host in local or loopback:
            out.append(task)
    return out


def other_people(me: int | None = None, uids: Callable[[], Iterable[int]] | None = None) -> list[int]:
    """The uids of people (not system accounts, not root, not nobody) other than ``me`` with a process here."""
    me = os.getuid() if me is None else me
    seen = set(uids() if uids is not None else _process_uids())
    return sorted(uid for uid in seen if uid != me and uid >= FIRST_PERSON_UID and uid not in NOBODY_UIDS)


def _process_uids() -> Iterable[int]:
    """The real uid of every process here: from /proc/PID/status where there is a /proc (a
    few milliseconds; psutil's import and walk cost `up` ~30 ms before its supervisor forks),
    else through psutil."""
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        pids = []
    if not pids:
        import psutil

        for proc in psutil.process_iter(["uids"]):
            uids = proc.info.get("uids")
            if uids is not None:
                yield uids.real
        return
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status", "rb") as fh:
                for line in fh:
                    if line.startswith(b"Uid:"):
                        yield int(line.split()[1])
                        break
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile


def local_users_warning(plan: Plan, profile_path: str, people: Sequence[int] | None = None) -> str | None:
    """One line where tasks run on this machine and other people have processes on it; None else."""
    tasks = on_this_machine(plan)
    if not tasks:
        return None
    people = other_people() if people is None else people
    if not people:
        return None
    names = ", ".join(t.task_id for t in tasks[:4]) + (f" and {len(tasks) - 4} more" if len(tasks) > 4 else "")
    who = "another user has" if len(people) == 1 else f"{len(people)} other users have"
    return (f"{names} run on this machine, where {who} processes: TensorFlow's task ports have no "
            f"authentication and any local user can reach them and run code as you; "
            f"`distlaunch check {profile_path} --firewall` prints a rule that keeps them out")


def firewall_rules(plan: Plan) -> str:
    """A shell script of iptables rules per host that let only the job's owner (its uid on that
    host) and the job's own hosts reach the task ports. Printed, never applied."""
    hosts: dict[str, list[TaskSpec]] = {}
    for task in plan.tasks:
        hosts.setdefault(task.host, []).append(task)
    addresses = sorted({t.address for t in plan.tasks} | set(plan.addresses.values()))
    peers = [a for a in addresses if not _loopback(a)]
    chain = _chain_name(plan.profile.name)
    lines = [f"# distlaunch: firewall rules for the task ports of {plan.profile.name!r} (run as root on each host;",
             "# printed, never applied). Without them any user of a host, and anyone who reaches",
             "# its addresses, can connect to a task and run TensorFlow ops as you.",
             f"# Undo: iptables -D each rule below as it was -I'd, then iptables -F {chain}; iptables -X {chain}"]
    picked = [t.task_id for t in plan.tasks if t.port is None]
    if picked:
        lines.append(f"# {', '.join(picked)}: port picked at launch; give the role a `port` to cover it here")
    for host, tasks in hosts.items():
        # every fixed port of the job: TensorFlow's cluster spec lets any task reach any other
        ports = sorted({t.port for t in plan.tasks if t.port is not None})
        own = sorted({t.port for t in tasks if t.port is not None})
        config = plan.profile.hosts.get(host)
        user = (config.ssh.user if config is not None and config.transport != "local" else None) \
            or getpass.getuser()
        lines.append("")
        listed = ", ".join(f"{t.task_id} port {t.port if t.port is not None else 'picked'}" for t in tasks)
        lines.append(f"# host {host} ({tasks[0].address}): {listed}")
        for group in _chunks(ports):
            lines.append(f"iptables -I OUTPUT -p tcp -m multiport --dports {group} -m owner ! --uid-owner {user} "
                         "-j REJECT")
        if not own:
            continue
        lines.append(f"iptables -N {chain} 2>/dev/null || iptables -F {chain}")
        for address in peers:
            lines.append(f"iptables -A {chain} -s {address} -j RETURN")
        lines.append(f"iptables -A {chain} -p tcp -j REJECT --reject-with tcp-reset")
        for group in _chunks(own):
            lines.append(f"iptables -I INPUT ! -i lo -p tcp -m multiport --dports {group} -j {chain}")
    return "\n".join(lines) + "\n"


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return address == "localhost"


def _chunks(ports: Sequence[int]) -> list[str]:
    """``multiport`` lists of at most MULTIPORT_MAX entries, runs of ports written as ranges
    (a range counts two)."""
    runs: list[list[int]] = []
    for port in ports:
        if runs and port == runs[-1][1] + 1:
            runs[-1][1] = port
        else:
            runs.append([port, port])
    out: list[str] = []
    group: list[str] = []
    weight = 0
    for first, last in runs:
        text, cost = (str(first), 1) if first == last else (f"{first}:{last}", 2)
        if weight + cost > MULTIPORT_MAX:
            out.append(",".join(group))
            group, weight = [], 0
        group.append(text)
        weight += cost
    if group:
        out.append(",".join(group))
    return out


def _chain_name(name: str) -> str:
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in name)
    return ("dl-" + safe)[:28]
