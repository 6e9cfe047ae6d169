"""--set, -- ARGS and ${env:VAR}: one run's changes, validated like the file, secrets masked."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from launcher.commands.check import print_plan
from launcher.errors import ProfileError
from launcher.model import Overrides
from launcher.plan import build_plan, split_secrets
from launcher.profile.overrides import mask_secrets, parse_set
from launcher.profile.reader import load_profile

BASE = """
name = "variants"
strategy = "custom"
[defaults]
command = "python3 train.py --lr 0.1"
env = { API_TOKEN = "${env:DL_TEST_TOKEN}", MODE = "run-${env:DL_TEST_MODE}" }
[hosts.local]
address = "localhost"
transport = "local"
[roles.worker]
count = 2
hosts = ["local"]
"""


@pytest.fixture
def profile_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DL_TEST_TOKEN", "s3cr3t-value")
    monkeypatch.setenv("DL_TEST_MODE", "fast")
    path = tmp_path / "variants.toml"
    path.write_text(BASE)
    return path


def test_set_changes_keys_of_any_table_with_toml_or_plain_values(profile_file: Path) -> None:
    profile = load_profile(profile_file, Overrides(sets=("roles.worker.count=4", "name=my-variant",
                                                         "defaults.max_restarts=0", "roles.worker.env.X='1'")))
    assert profile.roles["worker"].count == 4 and profile.name == "my-variant"
    assert profile.roles["worker"].settings.max_restarts == 0
    assert [t.task_id for t in build_plan(profile).tasks] == [f"worker:{i}" for i in range(4)]
    with pytest.raises(ProfileError, match="expected a string"):
        load_profile(profile_file, Overrides(sets=("roles.worker.env.X=1",)))  # TOML 1 is a number


@pytest.mark.parametrize(("item", "message"), [
    ("roles.worker.cuont=3", "--set roles.worker.cuont: unknown key in [roles.worker]; did you mean \"count\"?"),
    ("roles.worker.count=many", '--set roles.worker.count: expected an integer, got "many"'),
    ("roles.worker.count", "--set roles.worker.count: expected KEY=VALUE"),
    ("name.first=x", "--set name.first=x: name is not a table"),
])
def test_a_bad_set_is_one_line_naming_the_flag(profile_file: Path, item: str, message: str) -> None:
    with pytest.raises(ProfileError) as caught:
        load_profile(profile_file, Overrides(sets=(item,)))
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_args_after_the_double_dash_reach_every_command_quoted(profile_file: Path) -> None:
    plan = build_plan(load_profile(profile_file, Overrides(args=("--lr", "0.5", "--note", "a b"))))
    assert {t.command for t in plan.tasks} == {"python3 train.py --lr 0.1 --lr 0.5 --note 'a b'"}


def test_env_values_come_from_the_launcher_and_are_kept_out_of_files_and_output(profile_file: Path) -> None:
    profile = load_profile(profile_file)
    env = profile.roles["worker"].settings.env
    assert env == {"API_TOKEN": "s3cr3t-value", "MODE": "run-fast"}
    assert profile.secrets == {"s3cr3t-value", "fast"}
    public, secret = split_secrets(env, profile.secrets)
    assert public == {} and secret == env  # API_TOKEN by its name and its value; MODE by its value
    shown = io.StringIO()
    print_plan(build_plan(profile), shown)
    masked = mask_secrets(shown.getvalue(), set(profile.secrets))
    assert "s3cr3t-value" not in masked and "fast" not in masked


def test_an_unset_env_variable_is_refused_with_its_line(profile_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DL_TEST_TOKEN")
    with pytest.raises(ProfileError) as caught:
        load_profile(profile_file)
    assert str(caught.value) == (f"{profile_file}:6: defaults.env.API_TOKEN: ${{env:DL_TEST_TOKEN}} is not set in "
                                 "the launcher's environment; export DL_TEST_TOKEN=... before running distlaunch")


def test_parse_set_reads_toml_values() -> None:
    assert parse_set("a.b=[1, 2]") == (("a", "b"), [1, 2])
    assert parse_set("x=true") == (("x",), True)
    assert parse_set('x="quoted"') == (("x",), "quoted")
    assert parse_set("x=0.5") == (("x",), 0.5)
