"""One run's changes to a profile without editing it: ``--set KEY=VALUE`` and ``${env:VAR}``.

Both act on the parsed TOML before the reader checks it, so a ``--set`` key or value is
validated exactly like one written in the file, and an interpolated value like a typed one.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from launcher.errors import ProfileError
from launcher.model import Overrides

KeyPath = tuple[str, ...]

#: ``${env:NAME}`` in any string value of the profile
ENV_REF_RE = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
_KEY_PART_RE = re.compile(r"[A-Za-z0-9_-]+")
_SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "KEY")


def is_secret(name: str) -> bool:
    """Whether an env var name looks like it holds a secret (TOKEN, SECRET, PASSWORD, KEY)."""
    upper = name.upper()
    return any(word in upper for word in _SECRET_WORDS)


class EnvVarUnset(ProfileError):
    """``${env:VAR}`` names a variable the launcher's environment lacks (``key``: where it is used)."""

    def __init__(self, key: KeyPath, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


def overrides_from(args: Any) -> Overrides:
    """The overrides of a parsed command line (``--set`` and the arguments after ``--``)."""
    return Overrides(tuple(getattr(args, "sets", ()) or ()), tuple(getattr(args, "args", ()) or ()))


@dataclass
class Resolution:
    """What applying overrides and interpolation did, for messages and for masking."""

    set_paths: set[KeyPath] = field(default_factory=set)
    #: values that came from the launcher's environment: masked wherever they are shown or written
    secrets: set[str] = field(default_factory=set)


def parse_set(item: str) -> tuple[KeyPath, Any]:
    """``roles.worker.count=8`` -> (("roles", "worker", "count"), 8).

    The value is read as a TOML value (numbers, booleans, quoted strings, [lists], {tables});
    anything that is not valid TOML is taken as a plain string, so ``name=my-run`` works."""
    key, sep, raw = item.partition("=")
    parts = tuple(p.strip() for p in key.split("."))
    if not sep or not key.strip() or not all(_KEY_PART_RE.fullmatch(p) for p in parts):
        raise ProfileError(f"--set {item}: expected KEY=VALUE with a dotted key, "
                           "e.g. --set roles.worker.count=4")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return parts, value


def apply_sets(data: dict[str, Any], sets: Sequence[str], resolution: Resolution) -> None:
    for item in sets:
        path, value = parse_set(item)
        table = data
        for i, part in enumerate(path[:-1]):
            child = table.setdefault(part, {})
            if not isinstance(child, dict):
                raise ProfileError(f"--set {item}: {'.'.join(path[: i + 1])} is not a table, "
                                   "so it has no keys to set")
            table = child
        table[path[-1]] = value
        resolution.set_paths.add(path)
        if len(path) >= 2 and path[-2] == "env" and is_secret(path[-1]) and isinstance(value, str) and value \
                and "${env:" not in value:
            # a secret given on the command line: masked wherever the run is recorded or shown
            resolution.secrets.add(value)


def interpolate_env(data: Any, environ: Mapping[str, str], resolution: Resolution,
                    path: KeyPath = ()) -> Any:
    """``data`` with every ``${env:VAR}`` replaced by the launcher's value; an unset VAR is refused."""
    if isinstance(data, dict):
        return {k: interpolate_env(v, environ, resolution, (*path, k)) for k, v in data.items()}
    if isinstance(data, list):
        return [interpolate_env(v, environ, resolution, (*path, str(i))) for i, v in enumerate(data)]
    if not isinstance(data, str) or "${env:" not in data:
        return data

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        found = environ.get(name)
        if found is None:
            raise EnvVarUnset(path, f"${{env:{name}}} is not set in the launcher's environment; "
                              f"export {name}=... before running distlaunch")
        if found:
            resolution.secrets.add(found)
        return found

    return ENV_REF_RE.sub(value, data)


def resolve(data: dict[str, Any], overrides: Overrides, environ: Mapping[str, str] | None = None
            ) -> tuple[dict[str, Any], Resolution]:
    """The profile data this run uses: ``--set`` applied, then ``${env:...}`` filled in."""
    resolution = Resolution()
    apply_sets(data, overrides.sets, resolution)
    return interpolate_env(data, os.environ if environ is None else environ, resolution), resolution


def mask_secrets(text: str, secrets: set[str]) -> str:
    """``text`` with every value from the launcher's environment replaced by ``****``."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "****")
    return text
