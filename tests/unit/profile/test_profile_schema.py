"""The JSON Schema and the parser agree: shipped profiles pass both, malformed ones fail both, key by key."""

from __future__ import annotations

import copy
import dataclasses
import json
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from launcher import model
from launcher.cli import main
from launcher.errors import ProfileError
from launcher.profile.keys import (
    CONTAINER_KEYS,
    HOST_KEYS,
    LOG_POLICY_KEYS,
    NOTIFY_KEYS,
    ROLE_KEYS,
    ROLE_SLURM_KEYS,
    SLURM_KEYS,
    SSH_KEYS,
    SSH_TABLE,
    SYNC_KEYS,
    TASK_KEYS,
    TOP_KEYS,
    Key,
    Table,
)
from launcher.profile.reader import load_profile
from launcher.profile.schema import profile_schema, schema_text

PROFILES = Path(__file__).resolve().parents[3] / "cluster_profiles"
SCHEMA_FILE = PROFILES / "distlaunch-profile.schema.json"
VALIDATOR = jsonschema.Draft202012Validator(profile_schema(), format_checker=jsonschema.FormatChecker())

BASE: dict[str, Any] = {
    "defaults": {"command": "{python} t.py"},
    "hosts": {"h": {"address": "localhost", "transport": "local", "gpus": [0, 1]}},
    "roles": {"worker": {"count": 1, "hosts": ["h"]}},
}


def to_toml(data: dict[str, Any], prefix: tuple[str, ...] = ()) -> str:
    """Just enough of a TOML writer for these tests: scalars, lists, nested tables as [a.b] sections."""
    lines = [f"{json.dumps(k)} = {_toml_value(v)}" for k, v in data.items() if not isinstance(v, dict)]
    text = ""
    if prefix:
        text += "[" + ".".join(json.dumps(p) for p in prefix) + "]\n"
    text += "".join(line + "\n" for line in lines)
    for k, v in data.items():
        if isinstance(v, dict):
            text += to_toml(v, (*prefix, k))
    return text


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):  # an inline table, e.g. an item of an array of tables
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def schema_errors(data: dict[str, Any]) -> list[str]:
    return [e.message for e in VALIDATOR.iter_errors(data)]


def refused_by_check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> str:
    path = tmp_path / "p.toml"
    path.write_text(text, encoding="utf-8")
    code = main(["check", "--no-remote", str(path)])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


# ---- shipped profiles ---------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(PROFILES.glob("*.toml")), ids=lambda p: p.name)
def test_shipped_profile_validates_and_names_the_schema(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.splitlines()[0] == "#:schema ./distlaunch-profile.schema.json"
    assert schema_errors(tomllib.loads(text)) == []


def test_shipped_schema_file_is_the_generated_one() -> None:
    assert SCHEMA_FILE.read_text(encoding="utf-8") == schema_text(), \
        "run: distlaunch schema -o cluster_profiles/distlaunch-profile.schema.json"


def test_schema_is_valid_draft_2020_12() -> None:
    jsonschema.Draft202012Validator.check_schema(profile_schema())


def test_schema_verb_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == profile_schema()


# ---- malformed profiles: refused by both ----------------------------------------------------------

MALFORMED = {
    "unknown top key": {"stratgy": "custom"},
    "unknown defaults key": {"defaults": {"comand": "x"}},
    "bad strategy": {"strategy": "horovod"},
    "count as string": {"roles": {"worker": {"count": "two"}}},
    "negative count": {"roles": {"worker": {"count": -1}}},
    "two chiefs": {"roles": {"chief": {"count": 2, "hosts": ["h"]}}},
    "master role": {"roles": {"master": {"count": 1}}},
    "port out of range": {"roles": {"worker": {"port": 70000}}},
    "host without address": {"hosts": {"h": {"address": None}}},
    "bad host name": {"hosts": {"h x": {"address": "a"}}},
    "gpu listed twice": {"hosts": {"h": {"gpus": [0, 0]}}},
    "gpus not a list": {"hosts": {"h": {"gpus": 2}}},
    "env value not a string": {"defaults": {"env": {"SEED": 1}}},
    "bad env name": {"defaults": {"env": {"1X": "a"}}},
    "zero sample interval": {"sample_interval": 0},
    "ssh timeout string": {"ssh": {"connect_timeout": "10"}},
    "bad host key policy": {"ssh": {"host_key_policy": "auto-add"}},
    "metric not a string": {"metrics": {"step": 3}},
    "bad metric regex": {"metrics": {"loss": "loss: ([0-9"}},
    "defaults not a table": {"defaults": "x"},
}


def merged(patch: dict[str, Any], base: dict[str, Any] = BASE) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(value, out[key])
        else:
            out[key] = value
    return out


def test_the_base_profile_is_good(tmp_path: Path) -> None:
    assert schema_errors(BASE) == []
    path = tmp_path / "p.toml"
    path.write_text(to_toml(BASE), encoding="utf-8")
    assert load_profile(path).roles["worker"].count == 1


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_profile_fails_schema_and_check(case: str, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    data = merged(MALFORMED[case])
    assert schema_errors(data), f"schema accepted {case}"
    refused_by_check(tmp_path, to_toml(data), capsys)


# ---- the model, the declaration and the schema agree on every key ---------------------------------

def field_names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


#: each model class, the declared table(s) its fields come from, and its fields that no key sets
#: (where the profile was read from, names taken from table headers, tables folded in)
MODEL_TABLES: list[tuple[type, tuple[Table, ...], set[str]]] = [
    # path, text, overrides and secrets: this run's reading of the profile, not keys in it
    (model.Profile, (TOP_KEYS,), {"path", "text", "overrides", "secrets"}),
    (model.TaskDefaults, (TASK_KEYS,), set()),
    # unset: which keys the profile left open (for ~/.ssh/config), not a key itself
    (model.SshSettings, (SSH_TABLE,), {"unset"}),
    # group, slurm_job_id and slurm_het_group: set by host ranges and the Slurm allocation, not written
    (model.HostConfig, (HOST_KEYS,), {"name", "ssh", "group", "slurm_job_id", "slurm_het_group"}),
    (model.RoleConfig, (ROLE_KEYS,), {"name", "settings"}),
    (model.NotifyConfig, (NOTIFY_KEYS,), set()),
    (model.SyncConfig, (SYNC_KEYS,), set()),
    # components: from the roles' [roles.X.slurm] tables (SlurmComponent below)
    (model.SlurmConfig, (SLURM_KEYS,), {"components"}),
    # roles: which roles the component holds, from where the table is
    (model.SlurmComponent, (ROLE_SLURM_KEYS,), {"roles"}),
    (model.LogPolicy, (LOG_POLICY_KEYS,), set()),
]
#: declared keys with no field of their own: [ssh] is folded into each host's SshSettings, a host's ssh
#: keys into its HostConfig.ssh, a role's task keys into its RoleConfig.settings, [ssh]'s preemption_notice
#: into each HostConfig without its own
FOLDED_KEYS = {model.Profile: {"ssh"}, model.HostConfig: set(SSH_KEYS.names),
               model.RoleConfig: {*TASK_KEYS.names, "slurm"}, model.SshSettings: {"preemption_notice"}}


@pytest.mark.parametrize(("cls", "tables", "not_keys"), MODEL_TABLES, ids=[c.__name__ for c, _, _ in MODEL_TABLES])
def test_every_model_field_is_declared_and_every_declared_key_is_in_the_model(
        cls: type, tables: tuple[Table, ...], not_keys: set[str]) -> None:
    declared = {name for table in tables for name in table.names} - FOLDED_KEYS.get(cls, set())
    fields = field_names(cls) - not_keys
    assert not fields - declared, (f"{cls.__name__} fields {sorted(fields - declared)} have no key in "
                                   "launcher/profile/keys.py: declare them there (or, if no key sets them, "
                                   "list them in MODEL_TABLES here)")
    assert not declared - fields, f"keys {sorted(declared - fields)} are declared but {cls.__name__} has no field"


@pytest.mark.parametrize(("table", "cls"), [(TASK_KEYS, model.TaskDefaults), (SSH_TABLE, model.SshSettings),
                                            (NOTIFY_KEYS, model.NotifyConfig)])
def test_declared_defaults_are_the_model_defaults(table: Table, cls: type) -> None:
    for f in dataclasses.fields(cls):
        if f.name not in table.names:  # set by the reader, not a key (SshSettings.unset)
            continue
        declared = table[f.name].default
        actual = f.default if f.default is not dataclasses.MISSING else None
        if declared is not None:  # the model keeps lists as tuples (frozen dataclasses)
            assert declared == (list(actual) if isinstance(actual, tuple) else actual), f.name


def leaf_keys(table: Table = TOP_KEYS, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Key]]:
    """(path, key) of every declared key, walking sub-tables with the names BASE uses."""
    found: list[tuple[tuple[str, ...], Key]] = []
    for key in table.keys:
        if key.kind == "table":
            assert key.table is not None
            found += leaf_keys(key.table, (*path, key.name))
        elif key.kind == "table_or_false":  # false itself, then each key of the table
            assert key.table is not None
            found.append(((*path, key.name), key))
            found += leaf_keys(key.table, (*path, key.name))
        elif key.kind == "tables":
            assert key.table is not None
            name = next(iter(BASE.get(key.name, {})), key.names[0] if key.names else "h")
            found.append(((*path, key.name), key))
            found += leaf_keys(key.table, (*path, key.name, name))
        else:
            found.append(((*path, key.name), key))
    return found


#: keys whose valid values the generic rules below would not make (a rule spans the key's words)
GOOD_VALUES: dict[str, object] = {"runtime": "podman", "mounts": ["/data:/data:ro"]}
#: the same for keys of the other tables: a spare is a host no role uses ("s", which with_value adds),
#: host_lost_seconds is more than orphan_grace_seconds (60), min_count at most count (1)
GOOD_OTHER_VALUES: dict[str, object] = {"spares": ["s"], "host_lost_seconds": 90.5, "min_count": 1,
                                        "webhook": "http://127.0.0.1:9/hook", "on": ["gpu_idle"]}


def good_value(key: Key) -> object:
    """A valid value for the key that differs from its default, so reading it back proves it was read."""
    if key in CONTAINER_KEYS.keys and key.name in GOOD_VALUES:
        return GOOD_VALUES[key.name]
    if key not in CONTAINER_KEYS.keys and key.name in GOOD_OTHER_VALUES:
        return GOOD_OTHER_VALUES[key.name]
    if key.kind == "table_or_false":
        return False
    if key.kind == "choice":
        return next(c for c in reversed(key.choices) if c != key.default)
    if key.kind == "integer":
        return key.maximum if key.maximum is not None else (key.minimum or 0) + 1
    if key.kind == "number":
        return 2.5
    if key.kind == "boolean":
        return not key.default
    if key.kind == "string_list":
        return ["h"]
    if key.kind == "index_list":
        return [1]
    if key.kind == "env":
        return {"SEED": "7"}
    if key.kind == "regex_map":
        return {"step": r"step (\d+)"}
    if key.kind == "size":
        return 2 * 1024**3  # the model keeps bytes
    if key.kind == "rate":
        return 20 * 1024**2  # the model keeps bytes per second
    if key.kind == "table_list":
        return [{"pattern": "CUDA_ERROR_OUT_OF_MEMORY", "action": "no_retry"}]
    return "x"


def bad_values(key: Key) -> list[object]:
    """Values of the wrong kind or out of bounds; both the schema and the parser must refuse each."""
    wrong_type: object = "x" if key.kind not in ("string", "choice", "path_or_false") else 3
    bad = [wrong_type]
    if key.kind == "choice":
        bad.append("no-such-choice")
    if key.nonblank:
        bad += ["", "  "]
    if key.kind == "integer":
        bad += [1.5, True]
        if key.minimum is not None:
            bad.append(key.minimum - 1)
        if key.maximum is not None:
            bad.append(key.maximum + 1)
    if key.kind == "number":
        bad.append(0 if key.positive else -1)
    if key.kind == "env":
        bad += [{"SEED": 7}, {"1X": "a"}]
    if key.kind == "regex_map":
        bad.append({"step": 7})
    if key.kind == "table_list":  # not tables, a key missing, a wrong choice, an unknown key
        bad += [["x"], [{"action": "warn"}], [{"pattern": "x", "action": "retry"}],
                [{"pattern": "x", "action": "warn", "when": 1}]]
    if key.kind == "path_or_false":
        bad += [True, "", " "]
    if key.kind == "size":
        bad += [-1, True, 1.5, "12 parsecs", ""]
    if key.kind == "rate":
        bad += [-1, True, 1.5, "12 parsecs/s", "", "5MiB/h"]
    if key.kind == "table_or_false":
        bad.append(True)
    if key.item_pattern:
        bad.append(["data:/data"])
    return bad


def with_value(path: tuple[str, ...], value: object) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    node = data
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value
    if len(path) > 1 and path[-2] == "container" and path[-1] != "image":  # a container needs its image
        node.setdefault("image", "tensorflow/tensorflow:2.16.1")
    if path == ("spares",):  # a spare is a host of its own, on which no role runs tasks
        data["hosts"]["s"] = {"address": "localhost", "transport": "local"}
    if path[0] == "slurm" or path[2:3] == ("slurm",):  # hosts from the allocation: no [hosts] beside [slurm]
        data.setdefault("slurm", {})
        data.pop("hosts", None)
        for role in data.get("roles", {}).values():
            role.pop("hosts", None)
    return data


def read_back(profile: model.Profile, path: tuple[str, ...]) -> object:
    """Where the parser put the value of ``path`` in the model."""
    if path[0] == "ssh" or path == ("defaults", "preemption_notice"):  # both give each host its default
        path = ("hosts", "h", *path[1:])
    if path[0] == "roles" and path[2:3] == ("slurm",):  # a role's own Slurm component
        assert profile.slurm is not None
        component = next(c for c in profile.slurm.components if path[1] in c.roles)
        return getattr(component, path[3])
    obj: object = profile
    for part in path:
        if isinstance(obj, dict):
            obj = obj[part]
        elif hasattr(obj, part):
            obj = getattr(obj, part)
        else:  # folded: a host's ssh keys, a role's task settings
            nested = [getattr(obj, f.name) for f in dataclasses.fields(obj)  # type: ignore[arg-type]
                      if dataclasses.is_dataclass(getattr(obj, f.name))]
            obj = getattr(next(n for n in nested if hasattr(n, part)), part)
    return obj


LEAVES = leaf_keys()


@pytest.mark.parametrize(("path", "key"), LEAVES, ids=[".".join(p) for p, _ in LEAVES])
def test_schema_and_parser_agree_on_key(path: tuple[str, ...], key: Key, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    good = copy.deepcopy(BASE) if key.kind in ("table", "tables") else with_value(path, good_value(key))
    assert schema_errors(good) == []
    file = tmp_path / "good.toml"
    file.write_text(to_toml(good), encoding="utf-8")
    profile = load_profile(file)
    if key.kind not in ("table", "tables"):
        value = read_back(profile, path)
        expected = good_value(key)
        if key.kind == "env":
            assert isinstance(value, dict) and value["SEED"] == "7"
        elif key.kind == "regex_map":
            assert value == model.MetricsConfig(step=r"step (\d+)")
        elif key.kind == "table_list":
            assert value == (model.LogPolicy("CUDA_ERROR_OUT_OF_MEMORY", "no_retry"),)
        elif key.kind == "table_or_false":
            assert value is None
        else:
            assert value == (tuple(expected) if isinstance(expected, list) else expected), path
    for bad in bad_values(key):
        data = with_value(path, bad)
        assert schema_errors(data), (path, bad)
        err = refused_by_check(tmp_path, to_toml(data), capsys)
        assert path[-1] in err or path[-2] in err, err


def test_a_key_the_declaration_lacks_is_refused(tmp_path: Path) -> None:
    data = with_value(("defaults", "not_a_key"), 1)
    assert schema_errors(data)
    file = tmp_path / "p.toml"
    file.write_text(to_toml(data), encoding="utf-8")
    with pytest.raises(ProfileError, match="unknown key"):
        load_profile(file)


def test_schema_to_an_unwritable_path_is_a_user_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema", "-o", str(tmp_path / "missing-dir" / "s.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "cannot write the schema" in err


def test_schema_to_a_file(tmp_path: Path) -> None:
    assert main(["schema", "-o", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text()) == profile_schema()


def test_check_says_a_notify_command_is_set_without_showing_it(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    data = merged({"notify": {"command": "curl https://hooks.example.com/T0/s3cret", "timeout_seconds": 5}})
    path = tmp_path / "p.toml"
    path.write_text(to_toml(data), encoding="utf-8")
    assert main(["check", "--no-remote", str(path)]) == 0
    out = capsys.readouterr().out
    assert ("[notify] command on each task failure, at the job's end, and when these start and clear: "
            "stall, nan, host_lost, moved, gpu_error (bounded by 5s)") in out
    assert "s3cret" not in out
