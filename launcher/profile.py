"""TOML cluster profile -> validated ``Profile`` (DESIGN.md section 4).

Every mistake becomes one ``ProfileError`` line that names the file, the line where the key
sits when it can be found cheaply, the key path, and how to fix it. Nothing is started from a
profile that did not load, so all checks that need no host happen here.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from launcher import hostlist
from launcher.errors import ProfileError
from launcher.model import (
    ROLES,
    START_ORDER,
    GpuBusy,
    HostConfig,
    HostKeyPolicy,
    LogPolicy,
    MetricsConfig,
    NotifyConfig,
    OnNan,
    OnStall,
    Profile,
    RestartPolicy,
    RoleConfig,
    SlurmConfig,
    SshSettings,
    Strategy,
    SuccessPolicy,
    SyncConfig,
    TaskDefaults,
    Transport,
)
from launcher.profile_keys import (
    ENV_NAME_PATTERN,
    HOST_KEYS,
    HOST_NAME_PATTERN,
    LOG_POLICY_KEYS,
    NOTIFY_KEYS,
    ROLE_KEYS,
    SINGLE_TASK_ROLES,
    SLURM_KEYS,
    SSH_KEYS,
    SSH_TABLE,
    SYNC_KEYS,
    TASK_KEYS,
    TOP_KEYS,
    Key,
    Table,
)
from launcher.profile_overrides import EnvVarUnset, Overrides, resolve
from launcher.sizes import parse_size
from launcher.slurm_env import current_allocation

TRANSPORTS: tuple[Transport, ...] = ("ssh", "openssh", "local")  # "slurm" comes from [slurm], not per host

#: placeholders a command may use; ``{port}`` and ``{run_dir}`` are filled at launch
COMMAND_PLACEHOLDERS = ("python", "role", "index", "task", "host", "port", "run_dir", "outputs")
#: placeholders ``outputs`` may use
OUTPUTS_PLACEHOLDERS = ("name",)
#: placeholders a workdir may use
WORKDIR_PLACEHOLDERS = ("profile_dir",)
#: ``{name}`` not preceded by ``$``, so shell's ``${VAR}`` is left alone
PLACEHOLDER_RE = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")

_HOST_NAME_RE = re.compile(HOST_NAME_PATTERN)
#: [ssh] when the profile has none: ~/.ssh/config applies to whatever the profile leaves unset
DEFAULT_SSH = SshSettings(unset=SSH_KEYS.names)
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})

_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
_ASSIGNMENT_RE = re.compile(rf"^({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*=\s*(.*)$")
_INLINE_KEY_RE = re.compile(rf"(?:^\{{|,)\s*({_KEY_PART})\s*=")

KeyPath = tuple[str, ...]

#: the one host a [slurm] profile has outside an allocation
SLURM_PLACEHOLDER = "slurm-allocation"


def load_profile(path: Path, overrides: Overrides | None = None, text: str | None = None) -> Profile:
    """Read and validate the profile at ``path``; raise ``ProfileError`` (one line) on any mistake.

    ``overrides`` are one run's ``--set`` keys and command arguments; ``text``, when given, is the
    profile as an earlier run recorded it (``path`` then only names it and anchors relative paths).
    """
    overrides = overrides or Overrides()
    if text is not None:
        return _read_text(path, text, overrides)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise ProfileError(f"{path}: profile not found; check the path "
                           "(ready ones are in cluster_profiles/)") from None
    except IsADirectoryError:
        raise ProfileError(f"{path}: is a directory; give the profile's .toml file") from None
    except UnicodeDecodeError as exc:
        raise ProfileError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); "
                           "save the profile as UTF-8") from None
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read the profile: {exc.strerror}") from None
    return _read_text(path, text, overrides)


def _read_text(path: Path, text: str, overrides: Overrides) -> Profile:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(_toml_error_line(path, text, exc)) from None
    try:
        data, resolution = resolve(data, overrides)
    except EnvVarUnset as exc:
        raise _ProfileReader(path, text).fail(exc.key, exc.message) from None
    profile = _ProfileReader(path, text, frozenset(resolution.set_paths)).read(data)
    return replace(profile, text=text, overrides=overrides, secrets=frozenset(resolution.secrets))


def _toml_error_line(path: Path, text: str, exc: tomllib.TOMLDecodeError) -> str:
    """``path:LINE:COL: invalid TOML: ...`` from tomllib's "... (at line L, column C)" message."""
    message = str(exc)
    match = re.search(r"\s*\(at line (\d+), column (\d+)\)\s*$", message)
    if match:
        line, col = match.group(1), match.group(2)
        message = message[: match.start()]
    else:
        lines = text.splitlines() or [""]
        line, col = str(len(lines)), str(len(lines[-1]) + 1)
        message = re.sub(r"\s*\(at end of document\)\s*$", " at the end of the file", message)
    return f"{path}:{line}:{col}: invalid TOML: {message}; fix the syntax there"


def key_lines(text: str) -> dict[KeyPath, int]:
    """Map each key path to the line it is written on: a cheap scan, good enough for messages.

    It understands table headers, ``key = value`` lines (dotted keys too) and the keys of
    single-line inline tables. Keys it cannot place are reported without a line number.
    """
    found: dict[KeyPath, int] = {}
    table: KeyPath = ()
    arrays: dict[KeyPath, int] = {}  # [[name]] tables seen so far: the n-th is name[n] (from 1)
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        header = re.match(r"^\[\[?\s*([^\]]+?)\s*\]\]?", line)
        if header:
            table = _split_key(header.group(1))
            found.setdefault(table, number)
            if line.startswith("[["):
                arrays[table] = arrays.get(table, 0) + 1
                table = (*table[:-1], f"{table[-1]}[{arrays[table]}]")
                found.setdefault(table, number)
            continue
        assignment = _ASSIGNMENT_RE.match(line)
        if not assignment:
            continue
        key = table + _split_key(assignment.group(1))
        found.setdefault(key, number)
        rest = assignment.group(2)
        if rest.startswith("{"):
            for inner in _INLINE_KEY_RE.findall(rest):
                found.setdefault(key + _split_key(inner), number)
    return found


def _split_key(dotted: str) -> KeyPath:
    parts = re.findall(r""""([^"]*)"|'([^']*)'|([A-Za-z0-9_-]+)""", dotted)
    return tuple(a or b or c for a, b, c in parts)


def show_value(value: object) -> str:
    """A value as the user wrote it in TOML, for messages."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "[" + ", ".join(show_value(v) for v in value) + "]"
    return str(value)


def suggest(word: str, choices: Iterable[str]) -> str:
    """``; did you mean "x"?`` when a close choice exists, else the list of valid ones."""
    options = list(choices)
    close = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    if close:
        return f'did you mean "{close[0]}"?'
    return "valid: " + ", ".join(options)


@dataclass
class _ProfileReader:
    """Walks the parsed TOML once, checking every key; ``fail`` raises the one-line error."""

    path: Path
    text: str
    set_paths: frozenset[KeyPath] = frozenset()  # keys given with --set: errors name the flag, not a line

    def __post_init__(self) -> None:
        self._lines = key_lines(self.text)

    # ---- reporting ----------------------------------------------------------------------

    def fail(self, key: KeyPath, message: str) -> ProfileError:
        dotted = ".".join(k if re.fullmatch(r"[A-Za-z0-9_-]+(?:\[\d+\])?", k) else json.dumps(k) for k in key)
        if any(key[: len(p)] == p for p in self.set_paths):
            return ProfileError(f"--set {dotted}: {message}")
        where = f"{self.path}"
        for n in range(len(key), 0, -1):
            line = self._lines.get(key[:n])
            if line is not None:
                where = f"{self.path}:{line}"
                break
        return ProfileError(f"{where}: {dotted or '(top level)'}: {message}")

    def check_table(self, table: Mapping[str, Any], key: KeyPath, spec: Table) -> None:
        """Refuse keys ``spec`` does not declare and values of the wrong kind, in the order written."""
        for name, value in table.items():
            if name not in spec.names:
                where = f"[{'.'.join(key)}]" if key else "the top level"
                raise self.fail((*key, name), f"unknown key in {where}; {suggest(name, spec.names)}")
            self.check_value(value, spec[name], (*key, name))

    def check_value(self, value: object, spec: Key, key: KeyPath) -> None:
        """One value against its declared kind; the message says what was expected and how to fix it."""
        kind = spec.kind
        if kind in ("string", "choice"):
            if not isinstance(value, str):
                raise self.fail(key, f"expected a string, got {show_value(value)}; put it in quotes")
            if kind == "choice" and value not in spec.choices:
                raise self.fail(key, f"{show_value(value)} is not one of {', '.join(spec.choices)}; "
                                f"{suggest(value, spec.choices)}")
        elif kind == "integer":
            if isinstance(value, bool) or not isinstance(value, int):
                raise self.fail(key, f"expected an integer, got {show_value(value)}")
            if spec.minimum is not None and value < spec.minimum:
                raise self.fail(key, f"must be >= {spec.minimum}, got {value}")
            if spec.maximum is not None and value > spec.maximum:
                raise self.fail(key, f"must be <= {spec.maximum}, got {value}")
        elif kind == "number":
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise self.fail(key, f"expected a number, got {show_value(value)}")
            if value < 0 or (spec.positive and value == 0):
                raise self.fail(key, f"must be {'> 0' if spec.positive else '>= 0'}, got {value}")
        elif kind == "boolean":
            if not isinstance(value, bool):
                raise self.fail(key, f"expected true or false, got {show_value(value)}")
        elif kind == "path_or_false":
            if value is not False and not (isinstance(value, str) and value.strip()):
                raise self.fail(key, f'expected a path like "~/.ssh/config" or false, got {show_value(value)}')
        elif kind == "size":
            if isinstance(value, bool) or not isinstance(value, int | str) or (
                    isinstance(value, str) and parse_size(value) is None) or (isinstance(value, int) and value < 0):
                raise self.fail(key, f'expected bytes (an integer >= 0) or a size like "1GiB", got {show_value(value)}')
        elif kind == "string_list":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise self.fail(key, f"expected {spec.expected}, got {show_value(value)}")
        elif kind == "index_list":
            if not isinstance(value, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
            ):
                raise self.fail(key, f"expected {spec.expected}, got {show_value(value)}")
        elif kind == "table_list":
            if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
                raise self.fail(key, f"expected [[{key[-1]}]] tables, got {show_value(value)}")
        elif not isinstance(value, dict):
            raise self.fail(key, f"expected a table, got {show_value(value)}")

    def table(self, parent: Mapping[str, Any], name: str, key: KeyPath) -> dict[str, Any]:
        value = parent.get(name, {})
        if not isinstance(value, dict):
            raise self.fail((*key, name), f"expected a table, got {show_value(value)}")
        return value

    # ---- sections -----------------------------------------------------------------------

    def read(self, data: dict[str, Any]) -> Profile:
        self.check_table(data, (), TOP_KEYS)
        name: str = data.get("name", self.path.stem)
        if not name.strip():
            raise self.fail(("name",), 'is empty; give the job a name, e.g. name = "mnist-ps"')
        defaults = self.task_settings(self.table(data, "defaults", ()), ("defaults",), None)
        ssh = self.ssh_settings(self.table(data, "ssh", ()), ("ssh",), DEFAULT_SSH)
        slurm = self.slurm(data)
        hosts = self.hosts(self.table(data, "hosts", ()), ssh) if slurm is None else self.slurm_hosts()
        roles = self.roles(self.table(data, "roles", ()), defaults, hosts)
        metrics = self.metrics(self.table(data, "metrics", ()))
        has_ps = "ps" in roles and roles["ps"].count > 0
        strategy = cast(Strategy | None, data.get("strategy"))
        success = cast(SuccessPolicy, _get(data, TOP_KEYS, "success_policy"))
        straggler = float(_get(data, TOP_KEYS, "straggler_ratio"))
        self.check_job(roles, success)
        return Profile(
            path=self.path,
            name=name,
            strategy=strategy or ("parameter_server" if has_ps else "multi_worker_mirrored"),
            success_policy=success,
            backoff_limit=_get(data, TOP_KEYS, "backoff_limit"),
            orphan_grace_seconds=float(_get(data, TOP_KEYS, "orphan_grace_seconds")),
            sample_interval=float(_get(data, TOP_KEYS, "sample_interval")),
            defaults=defaults,
            hosts=hosts,
            roles=roles,
            metrics=metrics,
            notify=self.notify(self.table(data, "notify", ())),
            outputs=self.outputs(data, name),
            sync=self.sync(data),
            slurm=slurm,
            straggler_ratio=straggler,
            allow_version_skew=bool(_get(data, TOP_KEYS, "allow_version_skew")),
            min_free_disk=int(parse_size(_get(data, TOP_KEYS, "min_free_disk")) or 0),
            gpu_busy=cast(GpuBusy, _get(data, TOP_KEYS, "gpu_busy")),
            log_policies=self.log_policies(data.get("log_policies", [])),
        )

    def sync(self, data: Mapping[str, Any]) -> SyncConfig | None:
        if "sync" not in data:
            return None
        table = self.table(data, "sync", ())
        self.check_table(table, ("sync",), SYNC_KEYS)
        source = str(_get(table, SYNC_KEYS, "source"))
        if not source.strip():
            raise self.fail(("sync", "source"), 'is empty; give the folder to copy, e.g. source = "."')
        return SyncConfig(source=source, exclude=tuple(_get(table, SYNC_KEYS, "exclude")))

    def outputs(self, data: Mapping[str, Any], name: str) -> str:
        outputs = str(_get(data, TOP_KEYS, "outputs"))
        if not outputs.strip():
            raise self.fail(("outputs",), 'is empty; give a folder, e.g. outputs = "~/distlaunch/outputs/{name}"')
        self.check_placeholders(outputs, ("outputs",), OUTPUTS_PLACEHOLDERS)
        return outputs.replace("{name}", name)

    def slurm_hosts(self) -> dict[str, HostConfig]:
        """One host per node of the allocation; outside one, a placeholder that ``check`` shows
        and that refuses to connect (so ``export sbatch`` and ``check --no-remote`` still work)."""
        try:
            allocation = current_allocation()
        except hostlist.HostlistError as exc:
            raise self.fail(("slurm",), f"SLURM_JOB_NODELIST is not a hostlist ({exc})") from None
        if allocation is None:
            return {SLURM_PLACEHOLDER: HostConfig(name=SLURM_PLACEHOLDER, address="(no allocation)",
                                                  transport="slurm", group="slurm")}
        return {node: HostConfig(name=node, address=node, transport="slurm", group="slurm",
                                 gpus=allocation.gpus_per_node, slurm_job_id=allocation.job_id)
                for node in allocation.nodes}

    def slurm(self, data: Mapping[str, Any]) -> SlurmConfig | None:
        if "slurm" not in data:
            return None
        table = self.table(data, "slurm", ())
        key: KeyPath = ("slurm",)
        self.check_table(table, key, SLURM_KEYS)
        if data.get("hosts"):
            raise self.fail(("hosts",), "[slurm] takes the hosts from the allocation; remove [hosts] "
                            "(or remove [slurm] to use SSH)")
        for name in ("time", "partition", "account"):
            if name in table and not table[name].strip():
                raise self.fail((*key, name), "is empty; give a value or leave the key out")
        extra: list[str] = table.get("sbatch_args", [])
        return SlurmConfig(nodes=table.get("nodes"), time=table.get("time"), partition=table.get("partition"),
                           account=table.get("account"), gpus_per_node=table.get("gpus_per_node"),
                           sbatch_args=tuple(extra))

    def task_settings(self, table: Mapping[str, Any], key: KeyPath,
                      base: TaskDefaults | None) -> TaskDefaults:
        """[defaults] (``base`` None) or a role's overrides of it (env merged key by key)."""
        if base is None:
            self.check_table(table, key, TASK_KEYS)
            base = TaskDefaults(command="")
        command: str | None = table.get("command")
        if command is not None:
            self.check_command(command, (*key, "command"))
        python: str | None = table.get("python")
        if python is not None and not python.strip():
            raise self.fail((*key, "python"), "is empty; give an interpreter, e.g. \"python3\", "
                            "or leave the key out")
        workdir: str | None = table.get("workdir")
        if workdir is not None:
            self.check_placeholders(workdir, (*key, "workdir"), WORKDIR_PLACEHOLDERS)
        env = dict(base.env)
        env.update(self.env(table, key))
        restart = cast(RestartPolicy | None, table.get("restart"))
        max_restarts: int | None = table.get("max_restarts")
        grace: float | None = table.get("grace_seconds")
        setup: list[str] | None = table.get("setup")
        shell: str | None = table.get("shell")
        min_uptime: float | None = table.get("min_uptime")
        autolog: bool | None = table.get("autolog")
        stall: float | None = table.get("stall_seconds")
        on_stall = cast(OnStall | None, table.get("on_stall"))
        on_nan = cast(OnNan | None, table.get("on_nan"))
        if shell is not None and not shell.strip():
            raise self.fail((*key, "shell"), 'is empty; give a shell and its flags, e.g. "bash -lc", '
                            "or leave the key out")
        return TaskDefaults(
            command=base.command if command is None else command,
            python=base.python if python is None else python,
            workdir=base.workdir if workdir is None else workdir,
            env=env,
            restart=base.restart if restart is None else restart,
            max_restarts=base.max_restarts if max_restarts is None else max_restarts,
            grace_seconds=base.grace_seconds if grace is None else float(grace),
            setup=base.setup if setup is None else tuple(setup),
            shell=base.shell if shell is None else shell.strip(),
            min_uptime=base.min_uptime if min_uptime is None else float(min_uptime),
            autolog=base.autolog if autolog is None else autolog,
            stall_seconds=base.stall_seconds if stall is None else float(stall),
            on_stall=base.on_stall if on_stall is None else on_stall,
            on_nan=base.on_nan if on_nan is None else on_nan,
        )

    def env(self, table: Mapping[str, Any], key: KeyPath) -> dict[str, str]:
        env = self.table(table, "env", key)
        for var, value in env.items():
            if not re.fullmatch(ENV_NAME_PATTERN, var):
                raise self.fail((*key, "env", var), "is not a valid environment variable name; "
                                "use letters, digits and _")
            if not isinstance(value, str):
                raise self.fail((*key, "env", var), f"expected a string, got {show_value(value)}; "
                                f'quote it: {var} = "{show_value(value)}"')
        return dict(env)

    def check_command(self, command: str, key: KeyPath) -> None:
        if not command.strip():
            raise self.fail(key, 'is empty; give the shell command each task runs, '
                            'e.g. "{python} train.py"')
        self.check_placeholders(command, key, COMMAND_PLACEHOLDERS)

    def check_placeholders(self, value: str, key: KeyPath, valid: Sequence[str]) -> None:
        for match in PLACEHOLDER_RE.finditer(value):
            word = match.group(1)
            if word not in valid:
                braced = [f"{{{v}}}" for v in valid]
                raise self.fail(key, f"unknown placeholder {{{word}}}; "
                                f"{suggest('{' + word + '}', braced)} (shell variables: write ${{{word}}})")

    def ssh_settings(self, table: Mapping[str, Any], key: KeyPath, base: SshSettings) -> SshSettings:
        if key == ("ssh",):
            self.check_table(table, key, SSH_TABLE)
        user: str | None = table.get("user")
        identity: str | None = table.get("identity_file")
        known: str | None = table.get("known_hosts")
        policy = cast(HostKeyPolicy | None, table.get("host_key_policy"))
        timeout: float | None = table.get("connect_timeout")
        port: int | None = table.get("ssh_port")
        ssh_config = self.ssh_config(table, key, base.ssh_config)
        return SshSettings(
            user=base.user if user is None else user,
            identity_file=base.identity_file if identity is None else identity,
            known_hosts=base.known_hosts if known is None else known,
            host_key_policy=base.host_key_policy if policy is None else policy,
            connect_timeout=base.connect_timeout if timeout is None else float(timeout),
            ssh_port=base.ssh_port if port is None else port,
            ssh_config=ssh_config,
            client=table.get("client", base.client),
            unset=tuple(name for name in base.unset if name not in table),
        )

    def ssh_config(self, table: Mapping[str, Any], key: KeyPath, base: str | None) -> str | None:
        """``ssh_config = "path"`` or ``false`` (OpenSSH's config is not read at all)."""
        value = table.get("ssh_config")
        if value is None:
            return base
        if value is False:
            return None
        if isinstance(value, str) and value.strip():
            return value
        raise self.fail((*key, "ssh_config"), f'expected a path like "~/.ssh/config" or false, '
                        f"got {show_value(value)}")

    def hosts(self, table: Mapping[str, Any], ssh: SshSettings) -> dict[str, HostConfig]:
        if not table:
            # No [hosts]: everything runs on this machine.
            return {"local": HostConfig(name="local", address="localhost", transport="local")}
        hosts: dict[str, HostConfig] = {}
        for name in table:
            key = ("hosts", name)
            if not _HOST_NAME_RE.match(name):
                raise self.fail(key, "host names may use only letters, digits, '-', '_' and '.'; "
                                "rename the host")
            entry = self.table(table, name, ("hosts",))
            self.check_table(entry, key, HOST_KEYS)
            address: str | None = entry.get("address")
            if address is None or not address.strip():
                raise self.fail(key, f'has no address; add address = "10.0.0.1" (or "localhost") '
                                f"under [hosts.{name}]")
            transport = cast(Transport, entry.get("transport", "openssh" if ssh.client == "openssh" else "ssh"))
            tf_address: str | None = entry.get("tf_address")
            if tf_address is not None and not tf_address.strip():
                raise self.fail((*key, "tf_address"), "is empty; give the address tasks on other hosts reach "
                                "this one at, or leave the key out")
            template = HostConfig(name=name, address=address.strip(), transport=transport,
                                  ssh=self.ssh_settings(entry, key, ssh), gpus=self.gpus(entry, key),
                                  tf_address=tf_address.strip() if tf_address else None,
                                  env=self.env(entry, key))
            for host in self.expand_range(template, key, table):
                if host.name in hosts:
                    raise self.fail(key, f'makes host "{host.name}", which is already defined; '
                                    "rename one of them")
                hosts[host.name] = host
        return hosts

    def expand_range(self, template: HostConfig, key: KeyPath,
                     table: Mapping[str, Any]) -> list[HostConfig]:
        """One HostConfig per name of a host range (``gpu[01-16].lab``), else ``template`` alone.

        Generated names: the table's name, '-', and the bracket values as written, joined by '-'
        (``gpu-01``; ``r[1-2]n[1-4]`` -> ``NAME-1-1``); where items differ in their number of
        brackets (``a,b[1-2]``), the 1-based position instead (``NAME-1``, ``NAME-2``, ...).
        """
        if not hostlist.has_ranges(template.address):
            return [template]
        try:
            expanded = hostlist.expand_detailed(template.address)
        except hostlist.HostlistError as exc:
            raise self.fail((*key, "address"), f"bad host range: {exc}") from None
        if template.tf_address is not None and len(expanded) > 1:
            raise self.fail((*key, "tf_address"), "cannot be shared by all hosts of a range; "
                            "give those hosts their own [hosts.X] tables")
        widths = {len(host.values) for host in expanded}
        by_values = widths != {0} and len(widths) == 1 and \
            len({host.values for host in expanded}) == len(expanded)
        digits = len(str(len(expanded)))
        configs = []
        for position, host in enumerate(expanded, start=1):
            suffix = "-".join(host.values) if by_values else str(position).zfill(digits)
            configs.append(dataclasses.replace(template, name=f"{template.name}-{suffix}",
                                               address=host.name, group=template.name))
        return configs

    def gpus(self, entry: Mapping[str, Any], key: KeyPath) -> tuple[int, ...]:
        value: list[int] = _get(entry, HOST_KEYS, "gpus")
        if len(set(value)) != len(value):
            raise self.fail((*key, "gpus"), f"lists a GPU twice: {show_value(value)}; list each index once")
        return tuple(value)

    def roles(self, table: Mapping[str, Any], defaults: TaskDefaults,
              hosts: Mapping[str, HostConfig]) -> dict[str, RoleConfig]:
        for name in table:
            if name == "master":
                raise self.fail(("roles", name), 'TensorFlow 2 has no "master" role; '
                                "rename [roles.master] to [roles.chief]")
            if name not in ROLES:
                raise self.fail(("roles", name), f"unknown role; {suggest(name, ROLES)}")
        roles: dict[str, RoleConfig] = {}
        for name in ROLES:
            if name in table:
                roles[name] = self.role(name, self.table(table, name, ("roles",)), defaults, hosts)
        self.check_ports(roles, hosts)
        self.check_gpus(roles, hosts)
        return roles

    def role(self, name: str, entry: Mapping[str, Any], defaults: TaskDefaults,
             hosts: Mapping[str, HostConfig]) -> RoleConfig:
        key = ("roles", name)
        self.check_table(entry, key, ROLE_KEYS)
        count: int = _get(entry, ROLE_KEYS, "count")
        if name in SINGLE_TASK_ROLES and count > 1:
            raise self.fail((*key, "count"), f"a job has at most one {name}, got {count}; "
                            f"use count = 1 (or add workers instead)")
        host_names = self.role_hosts(name, entry, hosts, count)
        port: int | None = entry.get("port")
        gpus_per_task: int = _get(entry, ROLE_KEYS, "gpus_per_task")
        settings = self.task_settings(entry, key, defaults)
        if name == "ps" and "stall_seconds" not in entry:
            # a parameter server has no step of its own: [defaults] stall_seconds is for the others
            settings = replace(settings, stall_seconds=0.0)
        if count > 0 and not settings.command:
            raise self.fail((*key, "command"), "no command for this role; set command under "
                            f"[defaults] or [roles.{name}]")
        return RoleConfig(name=name, count=count, hosts=host_names, port=port,
                          gpus_per_task=gpus_per_task, settings=settings)

    def role_hosts(self, role: str, entry: Mapping[str, Any], hosts: Mapping[str, HostConfig],
                   count: int) -> tuple[str, ...]:
        key = ("roles", role, "hosts")
        if "hosts" not in entry:
            if len(hosts) == 1 or count == 0:
                return tuple(hosts)[:1]
            groups = {host.group for host in hosts.values()}
            if len(groups) == 1 and None not in groups:
                return tuple(hosts)  # one host range and nothing else: spread over all of it
            raise self.fail(key, f"missing; say where {role} tasks run, e.g. hosts = "
                            f"[{', '.join(json.dumps(h) for h in hosts)}]")
        value: list[str] = entry["hosts"]
        if not value and count > 0:
            raise self.fail(key, f"is empty; list the hosts the {role} tasks run on")
        names: list[str] = []
        for host in value:
            members = [h.name for h in hosts.values() if h.group == host]
            if host not in hosts and not members:
                raise self.fail(key, f'host "{host}" is not defined; {suggest(host, hosts)} '
                                f"(or add [hosts.{host}])")
            names.extend(members or [host])  # a range's table name stands for all its hosts
        return tuple(names)

    def check_ports(self, roles: Mapping[str, RoleConfig], hosts: Mapping[str, HostConfig]) -> None:
        """Two tasks may not share an address:port (after the base-port rule)."""
        taken: dict[tuple[str, int], str] = {}
        for name in START_ORDER:
            role = roles.get(name)
            if role is None or role.port is None:
                continue
            for index, (host, port) in enumerate(task_ports(role)):
                address = hosts[host].address
                where = ("localhost" if address in _LOOPBACK_NAMES else address, port)
                task_id = f"{name}:{index}"
                if port > 65535:
                    raise self.fail(("roles", name, "port"), f"{task_id} would get port {port} "
                                    "(port + task number on its host); choose a lower port")
                if where in taken:
                    raise self.fail(("roles", name, "port"), f"{task_id} and {taken[where]} both use "
                                    f"{address}:{port}; give the roles port ranges that do not overlap "
                                    f"(the i-th task on a host gets port + i)")
                taken[where] = task_id

    def check_gpus(self, roles: Mapping[str, RoleConfig], hosts: Mapping[str, HostConfig]) -> None:
        asked: dict[str, int] = {}
        for name in START_ORDER:
            role = roles.get(name)
            if role is None or role.gpus_per_task == 0:
                continue
            for index in range(role.count):
                host = role.hosts[index % len(role.hosts)]
                asked[host] = asked.get(host, 0) + role.gpus_per_task
                offered = len(hosts[host].gpus)
                if asked[host] > offered:
                    raise self.fail(("roles", name, "gpus_per_task"),
                                    f'tasks on host "{host}" ask for {asked[host]} GPUs but it offers '
                                    f"{offered} (hosts.{host}.gpus = {show_value(list(hosts[host].gpus))}); "
                                    "lower gpus_per_task or count, or list more GPUs")

    def check_job(self, roles: Mapping[str, RoleConfig], success: SuccessPolicy) -> None:
        chiefs = roles["chief"].count if "chief" in roles else 0
        workers = roles["worker"].count if "worker" in roles else 0
        if chiefs == 0 and workers == 0:
            raise self.fail(("roles",), "no chief and no workers, so nothing decides when the job "
                            "succeeded; add [roles.chief] or [roles.worker] with count >= 1")
        if success == "all_workers" and workers == 0:
            raise self.fail(("success_policy",), '"all_workers" needs workers; add [roles.worker] '
                            'or use success_policy = "chief"')

    def notify(self, table: Mapping[str, Any]) -> NotifyConfig:
        key = ("notify",)
        self.check_table(table, key, NOTIFY_KEYS)
        command: str | None = table.get("command")
        if command is not None and not command.strip():
            raise self.fail((*key, "command"), "is empty; give a shell command, or leave [notify] out")
        return NotifyConfig(command=command, timeout_seconds=float(_get(table, NOTIFY_KEYS, "timeout_seconds")),
                            bell=bool(_get(table, NOTIFY_KEYS, "bell")))

    def log_policies(self, entries: list[dict[str, Any]]) -> tuple[LogPolicy, ...]:
        policies = []
        for number, entry in enumerate(entries, start=1):
            key = (f"log_policies[{number}]",)
            self.check_table(entry, key, LOG_POLICY_KEYS)
            for name in LOG_POLICY_KEYS.names:
                if name not in entry:
                    raise self.fail(key, f'has no {name}; add it, e.g. pattern = "CUDA_ERROR_OUT_OF_MEMORY" '
                                    'and action = "no_retry"')
            try:
                re.compile(entry["pattern"])
            except re.error as exc:
                raise self.fail((*key, "pattern"), f"bad regex: {exc}; fix it (TOML literal strings '...' "
                                "keep backslashes as written)") from None
            policies.append(LogPolicy(pattern=entry["pattern"], action=entry["action"]))
        return tuple(policies)

    def metrics(self, table: Mapping[str, Any]) -> MetricsConfig:
        patterns: dict[str, str] = {}
        for name, value in table.items():
            key = ("metrics", name)
            if not isinstance(value, str):
                raise self.fail(key, f"expected a regex string, got {show_value(value)}")
            try:
                compiled = re.compile(value)
            except re.error as exc:
                raise self.fail(key, f"bad regex: {exc}; fix it (TOML literal strings '...' "
                                "keep backslashes as written)") from None
            if compiled.groups < 1:
                raise self.fail(key, "the regex has no capture group; wrap the number in "
                                "parentheses, e.g. 'loss: (\\S+)'")
            patterns[name] = value
        step = patterns.pop("step", None)
        loss = patterns.pop("loss", None)
        return MetricsConfig(step=step, loss=loss, extra=patterns)


def _get(table: Mapping[str, Any], spec: Table, name: str) -> Any:
    """A checked value, or the declared default where the key is absent."""
    return table.get(name, spec.default(name))


def task_ports(role: RoleConfig) -> list[tuple[str, int]]:
    """(host, port) of each task of a role with a base port: the i-th task on a host gets port + i."""
    assert role.port is not None
    seen: dict[str, int] = {}
    placed: list[tuple[str, int]] = []
    for index in range(role.count):
        host = role.hosts[index % len(role.hosts)]
        placed.append((host, role.port + seen.get(host, 0)))
        seen[host] = seen.get(host, 0) + 1
    return placed

