"""What a name in a profile may be: names that become paths (hosts, the job), login users and
host addresses that reach a shell or an ssh command line.

Each rule is a pattern (for the JSON Schema, keys.py) and a function that says what is wrong with
a value in words, with the fix (for the reader's one-line error). The SSH transport checks users
and addresses with the same functions before it expands them into a ProxyCommand.
"""

from __future__ import annotations

import re
from collections.abc import Callable

#: the most tasks one job may have (all roles together), and the most hosts one host range may name:
#: past these a typo (count = 100000, node[1-1000000]) would cost minutes and gigabytes to plan
MAX_TASKS = 10_000
MAX_HOSTS = 10_000

#: a host's name in [hosts.NAME]: a folder name on the launcher (local hosts keep their files there)
HOST_NAME_PATTERN = r"^(?![.-])(?!.*\.\.)[A-Za-z0-9_.-]+$"
#: the job's ``name``: the outputs folder's name ({name}); spaces allowed, nothing that walks a path
JOB_NAME_PATTERN = r"^(?![.-])(?!.*\.\.)(?=.*\S)[^/\x00]+$"
#: a login user: what OpenSSH accepts from a command line, less anything a shell would act on
#: (empty: the local user, as when the key is left out)
USER_PATTERN = r"^(?:[A-Za-z0-9_][A-Za-z0-9_.@+-]*)?$"
#: an address: a host name, an IPv4 or IPv6 address (with a %zone), or a host range (gpu[01-16].lab);
#: spaces around it are dropped
ADDRESS_PATTERN = r"^\s*[A-Za-z0-9_.:%\[\],][A-Za-z0-9_.:%\[\],-]*\s*$"

#: a [notify] webhook: an http(s) URL, no spaces
WEBHOOK_PATTERN = r"^https?://\S+$"
#: one name of ``[notify] on`` (launcher/model.py ALERT_NAMES)
ALERT_PATTERN = (r"^(stall|straggler|nan|host_unreachable|host_lost|moved|drained|throughput_drop|gpu_idle"
                 r"|gpu_error|disk_low|checkpoint_old)$")
_USER_CHARS = "letters, digits and . _ - @ +"
_USER_CHAR = r"[A-Za-z0-9_.@+-]"
_ADDRESS_CHARS = "letters, digits and . _ - : % [ ] ,"
_ADDRESS_CHAR = r"[A-Za-z0-9_.:%\[\],-]"


def _path_problem(name: str, what: str) -> str | None:
    """Why ``name`` cannot be one folder's name, else None."""
    if not name.strip():
        return f"is empty; give the {what} a name"
    if "\x00" in name:
        return f"contains a NUL byte; rename the {what}"
    if "/" in name:
        return f"contains '/', which would make it a path; rename the {what} without '/'"
    if ".." in name:
        return f"contains '..', which would make it a path; rename the {what}"
    if name[0] in ".-":
        return f"starts with '{name[0]}'; rename the {what} to start with a letter or digit"
    return None


def host_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a host ([hosts.NAME]), else None."""
    problem = _path_problem(name, "host")
    if problem is None and not re.fullmatch(HOST_NAME_PATTERN, name):
        return "host names may use only letters, digits, '-', '_' and '.'; rename the host"
    return problem


def job_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name the job (it names its outputs folder), else None."""
    return _path_problem(name, "job")


def _bad_chars(value: str, allowed: str) -> str:
    bad = sorted({c for c in value if not re.fullmatch(allowed, c)})
    return " ".join(repr(c) for c in bad)


def user_problem(user: str) -> str | None:
    """Why ``user`` cannot be a login user (a ProxyCommand's %r puts it into a shell), else None."""
    if re.fullmatch(USER_PATTERN, user):
        return None
    if user.startswith("-"):
        return f"{user!r} starts with '-', which ssh would read as an option; give the login user's name"
    return (f"{user!r} has characters a shell would act on ({_bad_chars(user, _USER_CHAR)}); "
            f"a user may use only {_USER_CHARS}: give the login user's name")


def address_problem(address: str) -> str | None:
    """Why ``address`` cannot be a host's address (it reaches ssh's command line and a
    ProxyCommand's %h / %n), else None; a blank one is the reader's to word."""
    address = address.strip()
    if not address or re.fullmatch(ADDRESS_PATTERN, address):
        return None
    if address.startswith("-"):
        return (f"{address!r} starts with '-', which ssh would read as an option; "
                "give the host's name or IP address")
    return (f"{address!r} has characters a host name cannot have "
            f"({_bad_chars(address, _ADDRESS_CHAR)}); an address may use only {_ADDRESS_CHARS}")


def webhook_problem(url: str) -> str | None:
    if re.fullmatch(WEBHOOK_PATTERN, url):
        return None
    return f"{url!r} is no http(s) URL; give one like \"https://hooks.example/T0/B0/x\""


#: each pattern a key may declare (keys.Key.pattern), with the function that words a mismatch
PROBLEMS: dict[str, Callable[[str], str | None]] = {
    HOST_NAME_PATTERN: host_name_problem,
    JOB_NAME_PATTERN: job_name_problem,
    USER_PATTERN: user_problem,
    ADDRESS_PATTERN: address_problem,
    WEBHOOK_PATTERN: webhook_problem,
}
