"""TOML cluster profile -> validated ``Profile`` (DESIGN.md section 4).

Every mistake becomes one ``ProfileError`` line that names the file, the line where the key
sits when it can be found cheaply, the key path, and how to fix it. Nothing is started from a
profile that did not load, so all checks that need no host happen here.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from launcher.errors import ProfileError
from launcher.model import (
    ALERT_NAMES,
    GpuBusy,
    GrowPolicy,
    LocalNetwork,
    LogPolicy,
    MetricsConfig,
    NotifyConfig,
    OnHostLost,
    Overrides,
    Profile,
    Strategy,
    SuccessPolicy,
    SyncConfig,
)
from launcher.profile.checks import (
    DEFAULT_SSH,
    OUTPUTS_PLACEHOLDERS,
    Checker,
    _get,
    show_value,
    suggest,
)
from launcher.profile.hetjob import read_components
from launcher.profile.hosts import HostsReader
from launcher.profile.keys import (
    LOG_POLICY_KEYS,
    NOTIFY_KEYS,
    SYNC_KEYS,
    TOP_KEYS,
)
from launcher.profile.names import job_name_problem
from launcher.profile.overrides import EnvVarUnset, resolve
from launcher.profile.roles import RolesReader
from launcher.profile.sizes import parse_rate, parse_size


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
        raise Checker(path, text).fail(exc.key, exc.message) from None
    checker = Checker(path, text, frozenset(resolution.set_paths))
    # the secrets are refused where they would show (container options, mounts)
    profile = ProfileReader(checker, frozenset(resolution.secrets)).read(data)
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


#: host_lost_seconds left out: at least this much beyond the orphan grace
DEFAULT_LOST_BEYOND_GRACE = 60.0


@dataclass(frozen=True)
class ProfileReader:
    """The whole profile: its top-level keys and the small sections here; [ssh], [hosts] and
    [slurm] through a ``HostsReader``, the tasks and roles through a ``RolesReader``, all three
    failing through the one ``checker``, in the order the checks have always run."""

    checker: Checker
    #: the values taken from the launcher's environment (``${env:...}``)
    secrets: frozenset[str] = frozenset()

    def read(self, data: dict[str, Any]) -> Profile:
        path = self.checker.path
        self.checker.check_table(data, (), TOP_KEYS)
        name: str = data.get("name", path.stem)
        if not name.strip():
            raise self.checker.fail(("name",), 'is empty; give the job a name, e.g. name = "mnist-ps"')
        problem = job_name_problem(name)  # a written name was checked with its key; this is the file's
        if problem is not None:
            raise self.checker.fail(("name",), f"(from the file name {path.name}) {problem}: set name = \"...\"")
        role_reader = RolesReader(self.checker, on_slurm="slurm" in data, secrets=self.secrets)
        host_reader = HostsReader(self.checker, self.secrets)
        defaults_table = self.checker.table(data, "defaults", ())
        ssh_table = self.checker.table(data, "ssh", ())
        defaults = role_reader.task_settings(defaults_table, ("defaults",), None)
        ssh = host_reader.ssh_settings(ssh_table, ("ssh",), DEFAULT_SSH)
        slurm = host_reader.slurm(data)
        roles_table = self.checker.table(data, "roles", ())
        components = read_components(self.checker, roles_table, slurm)
        if slurm is not None and components:
            slurm = replace(slurm, components=components)
            role_reader = replace(role_reader, slurm=slurm)
        notice = host_reader.default_preemption_notice(defaults_table, ssh_table)
        hosts = host_reader.hosts(self.checker.table(data, "hosts", ()), ssh, notice) if slurm is None \
            else host_reader.slurm_hosts(notice, slurm)
        spares = host_reader.spares(data, hosts)
        roles = role_reader.roles(roles_table, defaults, hosts, spares)
        metrics = self.metrics(self.checker.table(data, "metrics", ()))
        has_ps = "ps" in roles and roles["ps"].count > 0
        strategy = cast(Strategy | None, data.get("strategy")) or \
            ("parameter_server" if has_ps else "multi_worker_mirrored")
        roles = role_reader.with_min_counts(roles, strategy)
        success = cast(SuccessPolicy, _get(data, TOP_KEYS, "success_policy"))
        straggler = float(_get(data, TOP_KEYS, "straggler_ratio"))
        role_reader.check_job(roles, success)
        grace = float(_get(data, TOP_KEYS, "orphan_grace_seconds"))
        return Profile(
            path=path,
            name=name,
            strategy=strategy,
            success_policy=success,
            backoff_limit=_get(data, TOP_KEYS, "backoff_limit"),
            orphan_grace_seconds=grace,
            sample_interval=float(_get(data, TOP_KEYS, "sample_interval")),
            defaults=defaults,
            hosts=hosts,
            roles=roles,
            metrics=metrics,
            notify=self.notify(self.checker.table(data, "notify", ())),
            outputs=self.outputs(data, name),
            sync=self.sync(data),
            slurm=slurm,
            straggler_ratio=straggler,
            straggler_seconds=float(_get(data, TOP_KEYS, "straggler_seconds")),
            allow_version_skew=bool(_get(data, TOP_KEYS, "allow_version_skew")),
            min_free_disk=int(parse_size(_get(data, TOP_KEYS, "min_free_disk")) or 0),
            checkpoint_copies_kept=int(_get(data, TOP_KEYS, "checkpoint_copies_kept")),
            checkpoint_copy_bandwidth=int(parse_rate(_get(data, TOP_KEYS, "checkpoint_copy_bandwidth")) or 0),
            checkpoint_copy_percent=int(_get(data, TOP_KEYS, "checkpoint_copy_percent")),
            gpu_busy=cast(GpuBusy, _get(data, TOP_KEYS, "gpu_busy")),
            local_network=cast(LocalNetwork, _get(data, TOP_KEYS, "local_network")),
            log_policies=self.log_policies(data.get("log_policies", [])),
            spares=spares,
            host_lost_seconds=self.host_lost_seconds(data, grace),
            on_host_lost=cast(OnHostLost, _get(data, TOP_KEYS, "on_host_lost")),
            max_host_losses=data.get("max_host_losses"),
            readmit_after_seconds=float(_get(data, TOP_KEYS, "readmit_after_seconds")),
            grow=cast(GrowPolicy, _get(data, TOP_KEYS, "grow")),
            grow_every_seconds=float(_get(data, TOP_KEYS, "grow_every_seconds")),
            host_discovery=self.host_discovery(data),
            host_discovery_seconds=float(_get(data, TOP_KEYS, "host_discovery_seconds")),
        )

    def host_discovery(self, data: Mapping[str, Any]) -> str | None:
        command: str | None = data.get("host_discovery")
        if command is not None and not command.strip():
            raise self.checker.fail(("host_discovery",), "is empty; give the command that prints host names, or "
                                    "leave the key out")
        if command is not None and "slurm" in data:
            raise self.checker.fail(("host_discovery",), "a Slurm job's hosts are its allocation's nodes; remove "
                                    "host_discovery (or [slurm])")
        return command.strip() if command is not None else None

    def host_lost_seconds(self, data: Mapping[str, Any], grace: float) -> float:
        """``host_lost_seconds``, more than the orphan grace: a lost host's tasks must have stopped
        (their agent's grace run out) before their replacements start elsewhere. Left out, it is 120,
        or the orphan grace + 60 where that is more (a profile with a long grace needs no new key)."""
        lost = float(_get(data, TOP_KEYS, "host_lost_seconds"))
        if "host_lost_seconds" not in data:  # the default follows a longer orphan grace: never a mistake
            return max(lost, grace + DEFAULT_LOST_BEYOND_GRACE)
        if lost > grace:
            return lost
        raise self.checker.fail(("host_lost_seconds",), f"host_lost_seconds ({lost:g}) must be more than "
                                f"orphan_grace_seconds ({grace:g}), so a lost host's tasks have stopped before they "
                                f"run elsewhere; raise host_lost_seconds above {grace:g} or lower orphan_grace_seconds")

    def sync(self, data: Mapping[str, Any]) -> SyncConfig | None:
        if "sync" not in data:
            return None
        table = self.checker.table(data, "sync", ())
        self.checker.check_table(table, ("sync",), SYNC_KEYS)
        source = str(_get(table, SYNC_KEYS, "source"))
        if not source.strip():
            raise self.checker.fail(("sync", "source"), 'is empty; give the folder to copy, e.g. source = "."')
        return SyncConfig(source=source, exclude=tuple(_get(table, SYNC_KEYS, "exclude")))

    def outputs(self, data: Mapping[str, Any], name: str) -> str:
        outputs = str(_get(data, TOP_KEYS, "outputs"))
        if not outputs.strip():
            raise self.checker.fail(("outputs",),
                                    'is empty; give a folder, e.g. outputs = "~/distlaunch/outputs/{name}"')
        self.checker.check_placeholders(outputs, ("outputs",), OUTPUTS_PLACEHOLDERS)
        return outputs.replace("{name}", name)

    def notify(self, table: Mapping[str, Any]) -> NotifyConfig:
        key = ("notify",)
        self.checker.check_table(table, key, NOTIFY_KEYS)
        command: str | None = table.get("command")
        if command is not None and not command.strip():
            raise self.checker.fail((*key, "command"), "is empty; give a shell command, or leave [notify] out")
        webhook: str | None = table.get("webhook")  # its pattern is checked with the table
        on = tuple(_get(table, NOTIFY_KEYS, "on"))
        for name in on:
            if name not in ALERT_NAMES:
                raise self.checker.fail((*key, "on"), f"no alert {name!r}; {suggest(name, ALERT_NAMES)}")

        def number(name: str) -> float:
            return float(_get(table, NOTIFY_KEYS, name))

        disk_low = parse_size(_get(table, NOTIFY_KEYS, "disk_low"))
        return NotifyConfig(command=command, timeout_seconds=number("timeout_seconds"),
                            bell=bool(_get(table, NOTIFY_KEYS, "bell")), webhook=webhook, on=on,
                            throughput_drop_percent=number("throughput_drop_percent"),
                            throughput_window_seconds=number("throughput_window_seconds"),
                            gpu_idle_minutes=number("gpu_idle_minutes"),
                            disk_low=int(disk_low if disk_low is not None else 0),
                            checkpoint_old_minutes=number("checkpoint_old_minutes"),
                            repeat_minutes=number("repeat_minutes"))

    def metrics(self, table: Mapping[str, Any]) -> MetricsConfig:
        patterns: dict[str, str] = {}
        for name, value in table.items():
            key = ("metrics", name)
            if not isinstance(value, str):
                raise self.checker.fail(key, f"expected a regex string, got {show_value(value)}")
            try:
                compiled = re.compile(value)
            except re.error as exc:
                raise self.checker.fail(key, f"bad regex: {exc}; fix it (TOML literal strings '...' "
                                        "keep backslashes as written)") from None
            if compiled.groups < 1:
                raise self.checker.fail(key, "the regex has no capture group; wrap the number in "
                                        "parentheses, e.g. 'loss: (\\S+)'")
            patterns[name] = value
        step = patterns.pop("step", None)
        loss = patterns.pop("loss", None)
        return MetricsConfig(step=step, loss=loss, extra=patterns)

    def log_policies(self, entries: list[dict[str, Any]]) -> tuple[LogPolicy, ...]:
        policies = []
        for number, entry in enumerate(entries, start=1):
            key = (f"log_policies[{number}]",)
            self.checker.check_table(entry, key, LOG_POLICY_KEYS)
            for name in LOG_POLICY_KEYS.names:
                if name not in entry:
                    raise self.checker.fail(key, f'has no {name}; add it, e.g. pattern = "CUDA_ERROR_OUT_OF_MEMORY" '
                                            'and action = "no_retry"')
            try:
                re.compile(entry["pattern"])
            except re.error as exc:
                raise self.checker.fail((*key, "pattern"), f"bad regex: {exc}; fix it (TOML literal strings '...' "
                                        "keep backslashes as written)") from None
            policies.append(LogPolicy(pattern=entry["pattern"], action=entry["action"]))
        return tuple(policies)
