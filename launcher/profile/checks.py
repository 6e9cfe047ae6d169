"""What every part of the profile reader shares: key lines, the one-line error, value checks.

``Checker`` knows where each key sits in the file and turns any mistake into one ``ProfileError``
that names the file, the line, the key path and the fix; the readers of the profile's sections
(``HostsReader`` in hosts.py, ``RolesReader`` in roles.py, ``ProfileReader`` in reader.py) are each
given the one ``Checker`` of the file they read.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.errors import ProfileError
from launcher.model import (
    SshSettings,
    Transport,
)
from launcher.profile.keys import (
    ENV_NAME_PATTERN,
    SSH_KEYS,
    TOP_KEYS,
    Key,
    Table,
)
from launcher.profile.names import PROBLEMS
from launcher.profile.sizes import parse_rate, parse_size

#: the kinds of key that are tables themselves (never "moved above the first table")
_TABLE_KINDS = ("table", "tables", "table_list", "regex_map")

TRANSPORTS: tuple[Transport, ...] = ("ssh", "openssh", "local")  # "slurm" comes from [slurm], not per host

#: placeholders a command may use; ``{port}`` and ``{run_dir}`` are filled at launch
COMMAND_PLACEHOLDERS = ("python", "role", "index", "task", "host", "port", "run_dir", "outputs")
#: placeholders ``outputs`` may use
OUTPUTS_PLACEHOLDERS = ("name",)
#: placeholders a workdir may use
WORKDIR_PLACEHOLDERS = ("profile_dir",)
#: placeholders a checkpoint_dir may use
CHECKPOINT_DIR_PLACEHOLDERS = ("role", "index", "task", "outputs")
#: ``{name}`` not preceded by ``$``, so shell's ``${VAR}`` is left alone
PLACEHOLDER_RE = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")

#: [ssh] when the profile has none: ~/.ssh/config applies to whatever the profile leaves unset
DEFAULT_SSH = SshSettings(unset=SSH_KEYS.names)
_LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})

_KEY_PART = r"""(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
_ASSIGNMENT_RE = re.compile(rf"^({_KEY_PART}(?:\s*\.\s*{_KEY_PART})*)\s*=\s*(.*)$")
_INLINE_KEY_RE = re.compile(rf"(?:^\{{|,)\s*({_KEY_PART})\s*=")

KeyPath = tuple[str, ...]

#: the one host a [slurm] profile has outside an allocation
SLURM_PLACEHOLDER = "slurm-allocation"


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


def _get(table: Mapping[str, Any], spec: Table, name: str) -> Any:
    """A checked value, or the declared default where the key is absent."""
    return table.get(name, spec.default(name))


@dataclass
class Checker:
    """The one-line error (``fail``: file:line, key path, fix) and the checks of keys and values
    against their declarations, for one profile file."""

    path: Path
    text: str
    set_paths: frozenset[KeyPath] = frozenset()  # keys given with --set: errors name the flag, not a line

    def __post_init__(self) -> None:
        self._lines = key_lines(self.text)

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
                if key and name in TOP_KEYS.names and TOP_KEYS[name].kind not in _TABLE_KINDS:
                    # TOML puts every key after a [table] header into that table
                    raise self.fail((*key, name), f"a top-level key, not one of {where}: move it above the "
                                                  "first [table] of the profile")
                raise self.fail((*key, name), f"unknown key in {where}; {suggest(name, spec.names)}")
            self.check_value(value, spec[name], (*key, name))

    def check_value(self, value: object, spec: Key, key: KeyPath) -> None:
        """One value against its declared kind; the message says what was expected and how to fix it."""
        kind = spec.kind
        if kind in ("string", "choice"):
            if not isinstance(value, str):
                raise self.fail(key, f"expected a string, got {show_value(value)}; put it in quotes")
            problem = PROBLEMS[spec.pattern](value) if spec.pattern else None
            if problem is not None:
                raise self.fail(key, problem)
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
        elif kind == "rate":
            if isinstance(value, bool) or not isinstance(value, int | str) or (
                    isinstance(value, str) and parse_rate(value) is None) or (isinstance(value, int) and value < 0):
                raise self.fail(key, f'expected bytes per second (an integer >= 0) or a rate like "50MiB/s", '
                                     f"got {show_value(value)}")
        elif kind == "string_list":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise self.fail(key, f"expected {spec.expected}, got {show_value(value)}")
        elif kind == "index_list":
            if not isinstance(value, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value
            ):
                raise self.fail(key, f"expected {spec.expected}, got {show_value(value)}")
        elif kind == "table_or_false":
            if value is not False and not isinstance(value, dict):
                raise self.fail(key, f'expected a table like {{ image = "..." }} or false, got {show_value(value)}')
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
