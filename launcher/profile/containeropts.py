"""A container's ``options`` read as its runtime's own command line reads them.

distlaunch appends ``options`` to the runtime's argv after its own flags (containerrt.run_argv), so
they reach ``ps`` (every user sees a command line) and they win over what distlaunch set. Reading
them with a flag's name in mind (``options[i - 1] == "-e"``) misses what the runtime itself finds:
``-ie API_TOKEN=x`` (docker's bundled short flags), ``-eAPI_TOKEN=x``, ``--env=API_TOKEN=x``,
apptainer's ``--env FOO=1,API_TOKEN=x`` (one flag, a comma list), srun's ``--exp=ALL,TOKEN=x``
(getopt's abbreviations). So each runtime has a table of its flags (which take a value, the short
letters, how they bundle) and ``parse_options`` yields (flag, value) pairs as that runtime would.

Two uses: the profile refuses a secret given its value there (``secret_problem``), and ``check``
warns about an option that undoes what distlaunch promises (``option_warnings``): the task as
your uid:gid, on the host's network, unprivileged, seeing only the paths it mounts, stopped and
removed by its name.
"""

from __future__ import annotations

import csv
import posixpath
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from launcher.agent.containerrt import ContainerSpec, parse_mount
from launcher.model import Profile
from launcher.profile.overrides import is_secret


@dataclass(frozen=True)
class Syntax:
    """How one runtime's command line reads flags (long names with their dashes)."""

    values: frozenset[str]  # long flags that take a value (the others are switches)
    shorts: dict[str, str]  # "-e" -> "--env"
    bundles: bool  # pflag / getopt: "-ie" is -i -e, "-eVALUE" gives -e its value (enroot: one flag a word)
    short_equals: bool  # pflag: "-e=VALUE" is VALUE (getopt: "=VALUE")
    prefixes: bool  # getopt_long: "--exp" is "--export" where no other long flag starts so
    aliases: dict[str, str] = field(default_factory=dict)  # "--net" -> "--network"
    env: frozenset[str] = frozenset()  # flags whose value sets variables: NAME[=VALUE][,NAME[=VALUE]...]
    secret: frozenset[str] = frozenset()  # flags whose value is itself a secret (a registry password)


@dataclass(frozen=True)
class Option:
    """One flag as the runtime reads it: ``flag`` canonical (``-e`` -> ``--env``), or None for a word
    no flag takes (the runtime would read it as the image, or the command); ``value`` None for a
    switch; ``missing``: a flag that takes a value and ends the options (the image would be it)."""

    flag: str | None
    value: str | None = None
    missing: bool = False
    given: str = ""  # the flag as written ("-v" for --volume), for messages

    def shown(self) -> str:
        flag = self.given or self.flag
        if flag is None or self.value is None:
            return flag or self.value or ""
        return f"{flag} {self.value}" if self.value else flag


def _syntax(values: str, shorts: str, *, bundles: bool = True, short_equals: bool = True, prefixes: bool = False,
            aliases: str = "", env: str = "", secret: str = "") -> Syntax:
    """A table from words: ``values`` and ``env`` long names, ``shorts`` "x:long" pairs."""
    def longs(text: str) -> frozenset[str]:
        return frozenset("--" + name for name in text.split())

    pairs = [item.split(":") for item in shorts.split()]
    alias_pairs = [item.split(":") for item in aliases.split()]
    return Syntax(values=longs(values), shorts={"-" + s: "--" + name for s, name in pairs}, bundles=bundles,
                  short_equals=short_equals, prefixes=prefixes, aliases={"--" + a: "--" + b for a, b in alias_pairs},
                  env=longs(env), secret=longs(secret))


#: docker run and podman run (both cobra/pflag, the same flags where they overlap; podman's own added)
_OCI = _syntax(
    values="""add-host annotation arch attach authfile blkio-weight blkio-weight-device cap-add cap-drop
        cgroup-conf cgroup-parent cgroupns cgroups chrootdirs cidfile conmon-pidfile cpu-count cpu-percent
        cpu-period cpu-quota cpu-rt-period cpu-rt-runtime cpu-shares cpus cpuset-cpus cpuset-mems creds
        decryption-key detach-keys device device-cgroup-rule device-read-bps device-read-iops
        device-write-bps device-write-iops dns dns-opt dns-option dns-search domainname entrypoint env
        env-file env-merge expose gidmap gpus group-add group-entry health-cmd health-interval
        health-on-failure health-retries health-start-interval health-start-period health-timeout hostname
        hostuser init-path ip ip6 ipc isolation kernel-memory label label-file link link-local-ip log-driver
        log-opt mac-address memory memory-reservation memory-swap memory-swappiness mount name network
        network-alias os passwd-entry personality pid pidfile pids-limit platform pod pod-id-file
        preserve-fds publish pull requires restart retry retry-delay runtime sdnotify seccomp-policy secret
        security-opt shm-size shm-size-systemd stop-signal stop-timeout storage-opt subgidname subuidname
        sysctl systemd timeout tmpfs tz uidmap ulimit umask unsetenv user userns uts variant volume
        volume-driver volumes-from workdir""",
    shorts="a:attach c:cpu-shares d:detach e:env h:hostname i:interactive l:label m:memory p:publish "
           "P:publish-all q:quiet t:tty u:user v:volume w:workdir",
    aliases="net:network", env="env env-merge", secret="creds")

#: apptainer exec (cobra/pflag; note -e is --cleanenv, and --env takes NAME=VALUE pairs, comma separated)
_APPTAINER = _syntax(
    values="""add-caps app apply-cgroups bind blkio-weight blkio-weight-device containlibs cpu-shares cpus
        cpuset-cpus cpuset-mems cwd dmtcp-launch dmtcp-restart dns docker-host docker-password
        docker-username drop-caps env env-file fusemount home hostname memory memory-reservation memory-swap
        mount network network-args no-mount overlay pem-path pids-limit pwd scratch security shell tmpdir
        vm-cpu vm-ip vm-ram workdir""",
    shorts="B:bind C:containall H:home S:scratch W:workdir c:contain e:cleanenv f:fakeroot i:ipc n:net "
           "o:overlay p:pid s:shell u:userns w:writable",
    env="env", secret="docker-password")

#: enroot start (a bash loop: one flag a word, "--flag=VALUE" for the flags with a value)
_ENROOT = _syntax(values="conf env mount rc", shorts="c:conf e:env m:mount r:root w:rw",
                  bundles=False, short_equals=False, env="env")

#: srun under pyxis (getopt_long: bundled short flags, abbreviated long ones; -e is --error)
_SRUN = _syntax(
    values="""account chdir clusters comment constraint container container-env container-image
        container-mounts container-name container-save container-workdir core-spec cpu-bind cpus-per-gpu
        cpus-per-task dependency distribution error exclude export extra-node-info gid gpu-bind gpus
        gpus-per-node gpus-per-task gres input job-name licenses mem mem-per-cpu mem-per-gpu mpi network
        nodelist nodes ntasks ntasks-per-node output partition qos reservation threads time uid wait""",
    shorts="A:account B:extra-node-info C:constraint D:chdir E:preserve-env G:gpus H:hold I:immediate "
           "J:job-name K:kill-on-bad-exit L:licenses M:clusters N:nodes O:overcommit Q:quiet S:core-spec "
           "T:threads W:wait X:disable-status Z:no-allocate c:cpus-per-task d:dependency e:error i:input "
           "k:no-kill l:label m:distribution n:ntasks o:output p:partition q:qos s:oversubscribe t:time "
           "u:unbuffered v:verbose w:nodelist x:exclude",
    short_equals=False, prefixes=True, env="export container-env")

#: per runtime (every name of containeradapters.ADAPTERS, tests/unit/profile/test_container_options.py
#: checks): how its command line reads flags; which flags set variables is what the secret refusal reads
SYNTAX: dict[str, Syntax] = {"docker": _OCI, "podman": _OCI, "apptainer": _APPTAINER, "enroot": _ENROOT,
                             "pyxis": _SRUN}


def parse_options(runtime: str, words: Sequence[str]) -> list[Option]:
    """``words`` as ``runtime`` reads them. A flag the table does not know is read as a switch, so
    the word after it is still looked at (the runtime itself would refuse the flag)."""
    syntax = SYNTAX[runtime]
    found: list[Option] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":  # the end of the flags: what follows is the image (or the command)
            found.extend(Option(None, rest) for rest in words[i:])
            break
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            flag = _long(syntax, name)
            if eq:
                found.append(Option(flag, value, given=name))
            elif flag in syntax.values:
                found.append(_valued(flag, name, words[i] if i < len(words) else None))
                i += i < len(words)
            else:
                found.append(Option(flag, given=name))
        elif word.startswith("-") and len(word) > 1:
            taken = _short(syntax, word, words[i] if i < len(words) else None, found)
            i += taken
        else:
            found.append(Option(None, word))
    return found


def _valued(flag: str, given: str, following: str | None) -> Option:
    """A flag that takes the next word as its value (none left: missing)."""
    return Option(flag, following, missing=following is None, given=given)


def _long(syntax: Syntax, name: str) -> str:
    name = syntax.aliases.get(name, name)
    if syntax.prefixes and name not in syntax.values and name not in syntax.shorts.values():
        known = syntax.values | frozenset(syntax.shorts.values())
        matches = [flag for flag in known if flag.startswith(name)]
        if len(matches) == 1:
            return matches[0]
    return name


def _short(syntax: Syntax, word: str, following: str | None, found: list[Option]) -> int:
    """Appends the flags of one ``-x...`` word; returns how many following words it took (0 or 1)."""
    if not syntax.bundles:
        flag = syntax.shorts.get(word, word)
        if flag not in syntax.values:
            found.append(Option(flag, given=word))
            return 0
        found.append(_valued(flag, word, following))
        return int(following is not None)
    letters = word[1:]
    while letters:
        given = "-" + letters[0]
        flag = syntax.shorts.get(given, given)
        rest = letters[1:]
        if syntax.short_equals and len(rest) > 1 and rest.startswith("="):
            found.append(Option(flag, rest[1:], given=given))  # pflag: "-e=VALUE", a switch too ("-d=false")
            return 0
        if flag not in syntax.values:
            found.append(Option(flag, given=given))
            letters = rest
            continue
        if rest:
            found.append(Option(flag, rest, given=given))  # "-eNAME=VALUE", "-ieNAME=VALUE"
            return 0
        found.append(_valued(flag, given, following))
        return int(following is not None)
    return 0


def _pieces(value: str) -> list[str]:
    """A value as a comma list (apptainer's --env is CSV, srun's --export a comma list; docker reads
    one NAME=VALUE, but the text after a comma is on the command line all the same)."""
    try:
        rows = list(csv.reader([value]))
    except csv.Error:
        rows = []
    return rows[0] if rows and rows[0] else value.split(",")


#: the way out for a secret in options
ENV_FIX = "put the variable in env instead (a container gets env by name, its value never shown)"


def secret_problem(runtime: str, words: Sequence[str]) -> str | None:
    """Why ``words`` would put a secret on the runtime's command line, else None: a variable whose
    name looks secret (TOKEN, SECRET, PASSWORD, KEY) given a value by an environment flag, or by a
    word no flag takes (``-ie API_TOKEN=x`` on apptainer, where -e is --cleanenv), or a flag whose
    value is a password. The message names the variable or flag, never the value."""
    syntax = SYNTAX[runtime]
    for option in parse_options(runtime, words):
        if option.value is None:
            continue
        if option.flag in syntax.secret:
            return (f"gives {option.flag} a password on the container runtime's command line, which `ps` "
                    "shows to every user; log in to the registry beforehand instead")
        if option.flag is not None and option.flag not in syntax.env:
            continue
        for piece in _pieces(option.value):
            variable, sep, _ = piece.partition("=")
            if sep and is_secret(variable.strip()):
                return (f"gives {variable.strip()} its value on the container runtime's command line, which "
                        f"`ps` shows to every user; {ENV_FIX}")
    return None


def missing_value_problem(runtime: str, words: Sequence[str]) -> str | None:
    """Why ``words`` end in a flag that takes a value (the runtime would take the image for it), else None."""
    for option in parse_options(runtime, words):
        if option.missing:
            return (f"ends with {option.given or option.flag}, which takes a value: {runtime} would read the "
                    "image (or the command) as its value; give the value after it, or remove the flag")
    return None


# --- what an option undoes of distlaunch's promises (a warning each, from check) ---

_FALSE = ("false", "0", "f", "no")
_UNCONFINED = ("unconfined", "label=disable", "label:disable")
_RUNTIME_SOCKETS = ("docker.sock", "podman.sock", "containerd.sock")
_RUNTIME_DIRS = ("docker", "containerd", "podman", "crio", "cri-dockerd", "k3s", "snapd")
#: a process's root as /proc shows it (``/proc/1/root``, ``/proc/self/root``): the host's files
_PROC_ROOT = re.compile(r"/proc/[^/]+/root(/.*)?")


def _on(option: Option) -> bool:
    return option.value is None or option.value.strip().lower() not in _FALSE


def _is_root(path: str) -> bool:
    return path.startswith("/") and posixpath.normpath("/" + path.lstrip("/")) == "/"


def _holds_runtime_socket(path: str) -> bool:
    """``/run``, ``/var/run`` and the folders in them where runtimes keep their sockets
    (``/run/docker``, ``/var/run/containerd``, ``/run/user/<uid>`` for rootless podman ...)."""
    parts = path.strip("/").split("/")
    if parts[:2] == ["var", "run"]:
        parts = parts[1:]
    if parts[:1] != ["run"]:
        return False
    return len(parts) == 1 or parts[1] in _RUNTIME_DIRS or (parts[1] == "user" and len(parts) <= 3)


def mount_warning(source: str, shown: str) -> str | None:
    """A warning for a bind of ``source`` (the host path): the whole host (``/``, or a process's
    view of it, ``/proc/1/root``), or a runtime's socket or a folder holding one (``/run``)."""
    path = posixpath.normpath("/" + source.lstrip("/")) if source.startswith("/") else source
    if _is_root(source) or _PROC_ROOT.fullmatch(path):
        return f"{shown} mounts the host's whole file system into the container"
    if source.rstrip("/").endswith(_RUNTIME_SOCKETS):
        return f"{shown} gives the task the container runtime's socket, with which it can start a root container"
    if source.startswith("/") and _holds_runtime_socket(path):
        return (f"{shown} gives the task the folder of the container runtime's socket, with which it can "
                "start a root container")
    return None


def _bind_sources(option: Option, runtime: str) -> list[str]:
    """The host paths a mount flag's value binds: ``SRC:DST[:OPTS]`` (apptainer and pyxis: a comma
    list of them), ``type=bind,source=SRC,...`` (--mount), enroot's ``SRC DST ...`` fstab line."""
    value = option.value or ""
    if option.flag == "--mount" and runtime != "enroot":
        fields = dict(part.partition("=")[::2] for part in _pieces(value))
        return [fields[k] for k in ("source", "src") if fields.get(k)]
    if runtime == "enroot":
        return [(value.split() or [""])[0].split(":")[0]]
    if runtime in ("apptainer", "pyxis"):  # SRC alone binds SRC at the same path
        return [spec.split(":")[0] for spec in value.split(",")]
    return [value.split(":")[0]] if ":" in value else []  # docker's -v /data: a volume, not a bind


def _user(option: Option, runtime: str) -> str | None:
    who = f"group {option.value}" if option.flag == "--gid" else option.value
    return (f"{option.shown()} runs the task as {who}, not as your uid:gid: what it writes in its "
            "workdir, {outputs} and the run dir would not be yours")


def _network(option: Option, runtime: str) -> str | None:
    if option.value == "host" or not _on(option):  # apptainer's --net is a switch (--net=false)
        return None
    return (f"{option.shown()} takes the container off the host's network, which distlaunch needs: "
            "TF_CONFIG's addresses and the task ports would not reach the task")


def _switch(text: str) -> Callable[[Option, str], str | None]:
    return lambda option, runtime: f"{option.shown()} {text}" if _on(option) else None


def _namespace(kind: str, distlaunch_sets: bool) -> Callable[[Option, str], str | None]:
    def rule(option: Option, runtime: str) -> str | None:
        if option.value == "host" and not distlaunch_sets:
            return f"{option.shown()} shares the host's {kind} namespace with the task"
        if option.value != "host" and distlaunch_sets:
            return f"{option.shown()} replaces distlaunch's --{kind} host"
        return None
    return rule


def _caps(option: Option, runtime: str) -> str | None:
    caps = option.value or ""
    if caps.strip().upper() in ("ALL", "CAP_ALL"):
        return f"{option.shown()} gives the task every capability"
    return f"{option.shown()} gives the task {'capabilities' if ',' in caps else 'the capability'} {caps}"


def _security(option: Option, runtime: str) -> str | None:
    value = (option.value or "").lower()
    if any(word in value for word in _UNCONFINED):
        return f"{option.shown()} turns off the kernel's confinement of the container"
    return None


def _mount(option: Option, runtime: str) -> str | None:
    for source in _bind_sources(option, runtime):
        warning = mount_warning(source, option.shown())
        if warning:
            return warning
    return None


def _export(option: Option, runtime: str) -> str | None:
    first = (option.value or "").split(",")[0].strip()
    if first.upper() == "ALL":
        return None
    return (f"{option.shown()} replaces distlaunch's --export=ALL: the task's environment (TF_CONFIG, "
            "DISTLAUNCH_*, env) would not reach it")


_Rule = Callable[[Option, str], str | None]
_OCI_RULES: dict[str, _Rule] = {
    "--user": _user,
    "--privileged": _switch("gives the container every capability and the host's devices"),
    "--volume": _mount, "--mount": _mount,
    "--network": _network,
    "--pid": _namespace("pid", False), "--userns": _namespace("user", False),
    "--ipc": _namespace("ipc", True),
    "--cap-add": _caps,
    "--security-opt": _security,
    "--name": lambda o, r: (f"{o.shown()} replaces the name distlaunch stops, finds and removes the "
                            "container by: it could outlive the job"),
    "--detach": _switch("makes the runtime return at once: the task would end while its container "
                        "runs on, unsupervised"),
}
#: per runtime (every name of ADAPTERS, as SYNTAX): canonical flag -> the warning it deserves (or None
#: for a harmless value); {} for a runtime whose options undo nothing distlaunch promises
RULES: dict[str, dict[str, _Rule]] = {
    "docker": _OCI_RULES,
    "podman": _OCI_RULES,
    "apptainer": {"--net": _network, "--network": _network, "--bind": _mount, "--mount": _mount,
                  "--add-caps": _caps, "--security": _security,
                  "--allow-setuid": _switch("lets setuid programs in the image run as their owner"),
                  "--keep-privs": _switch("keeps root's privileges in the container")},
    "enroot": {"--mount": _mount},
    "pyxis": {"--container-mounts": _mount, "--export": _export, "--uid": _user, "--gid": _user},
}


def option_warnings(runtime: str, words: Sequence[str]) -> list[str]:
    """One line for each option that undoes something distlaunch promises of a container."""
    rules = RULES[runtime]
    lines: list[str] = []
    for option in parse_options(runtime, words):
        rule = rules.get(option.flag or "")
        line = rule(option, runtime) if rule and not option.missing else None
        if line and line not in lines:
            lines.append(line)
    return lines


def spec_warnings(spec: ContainerSpec) -> list[tuple[str, str]]:
    """(key, line): the ``options`` warnings, and ``mounts`` of the whole host or a runtime socket."""
    lines = [("options", line) for line in option_warnings(spec.runtime, spec.options)]
    for mount in spec.mounts:
        try:
            source = parse_mount(mount, "~")[0]
        except ValueError:
            continue
        line = mount_warning(source, repr(mount))
        if line:
            lines.append(("mounts", line))
    return lines


def container_warnings(profile: Profile) -> list[str]:
    """``check``'s lines about the profile's containers, each naming the key it comes from: a
    role's container that holds the same options (or mounts) as [defaults]' is [defaults]'."""
    base = profile.defaults.container
    places: Iterable[tuple[str, ContainerSpec | None]] = [
        ("defaults", base),
        *((f"roles.{name}", role.settings.container) for name, role in profile.roles.items() if role.count)]
    lines: list[str] = []
    for where, spec in places:
        if spec is None:
            continue
        for key, line in spec_warnings(spec):
            inherited = (base is not None and base.runtime == spec.runtime
                         and getattr(base, key) == getattr(spec, key))
            text = f"{'defaults' if inherited else where}.container.{key}: {line}"
            if text not in lines:
                lines.append(text)
    return lines
