"""The profile's ``container`` table: [defaults] and per role, merged key by key, Slurm's pyxis, mistakes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.agent.containerrt import ContainerSpec
from launcher.cli import main
from launcher.errors import ProfileError
from launcher.model import Overrides, Profile
from launcher.profile.reader import load_profile
from launcher.runrecord import resolved_model

TF = "tensorflow/tensorflow:2.16.1-gpu"
HOSTS = """
[hosts.h]
address = "localhost"
transport = "local"
"""


def profile_text(defaults: str = "", ps: str = "", worker: str = "", hosts: str = HOSTS) -> str:
    return (f'[defaults]\ncommand = "{{python}} train.py"\n{defaults}\n{hosts}\n'
            f"[roles.ps]\n{ps}\n[roles.worker]\ncount = 2\n{worker}\n")


def load(tmp_path: Path, text: str, overrides: Overrides | None = None) -> Profile:
    path = tmp_path / "p.toml"
    path.write_text(text, encoding="utf-8")
    return load_profile(path, overrides)


def refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> str:
    """``check --no-remote`` exits 2 with one line naming the file; that line."""
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    assert main(["check", "--no-remote", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert str(path) in err
    return err.strip()


@pytest.fixture(autouse=True)
def _outside_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(name, raising=False)


def test_no_container_table_means_bare_tasks(tmp_path: Path) -> None:
    profile = load(tmp_path, profile_text())
    assert profile.defaults.container is None
    assert all(role.settings.container is None for role in profile.roles.values())


def test_defaults_reach_every_role_with_the_documented_defaults(tmp_path: Path) -> None:
    profile = load(tmp_path, profile_text(f'container = {{ image = "{TF}" }}'))
    expected = ContainerSpec(image=TF, runtime="docker", mounts=(), options=(), pull="missing")
    assert profile.defaults.container == expected
    assert [role.settings.container for role in profile.roles.values()] == [expected, expected]


def test_a_role_table_overrides_key_by_key_and_false_turns_it_off(tmp_path: Path) -> None:
    defaults = (f'container = {{ image = "{TF}", runtime = "podman", mounts = ["~/data:/data:ro"], '
                'options = ["--shm-size=8g"] }')
    worker = '[roles.worker.container]\nimage = "team/tf:nightly"\npull = "always"\n'
    profile = load(tmp_path, profile_text(defaults, ps="container = false", worker=worker))
    assert profile.roles["ps"].settings.container is None
    assert profile.roles["worker"].settings.container == ContainerSpec(
        image="team/tf:nightly", runtime="podman", mounts=("~/data:/data:ro",), options=("--shm-size=8g",),
        pull="always")


def test_a_role_may_have_a_container_without_defaults(tmp_path: Path) -> None:
    profile = load(tmp_path, profile_text(worker=f'container = {{ image = "{TF}", runtime = "apptainer" }}'))
    assert profile.roles["ps"].settings.container is None
    worker = profile.roles["worker"].settings.container
    assert worker is not None and worker.runtime == "apptainer"


def test_set_changes_the_image_for_one_run(tmp_path: Path) -> None:
    text = profile_text(f'container = {{ image = "{TF}" }}')
    profile = load(tmp_path, text, Overrides(sets=("defaults.container.image=team/tf:fix",)))
    assert {r.settings.container.image for r in profile.roles.values() if r.settings.container} == {"team/tf:fix"}
    profile = load(tmp_path, text, Overrides(sets=("roles.worker.container=false",)))
    assert profile.roles["worker"].settings.container is None


def test_the_run_record_holds_the_container(tmp_path: Path) -> None:
    profile = load(tmp_path, profile_text(f'container = {{ image = "{TF}", mounts = ["/d:/d"] }}'))
    record = json.loads(json.dumps(resolved_model(profile), default=str))
    assert record["roles"]["worker"]["settings"]["container"]["image"] == TF
    assert record["defaults"]["container"]["mounts"] == ["/d:/d"]


def test_slurm_hosts_run_pyxis_unless_told_apptainer_or_enroot(tmp_path: Path) -> None:
    text = (f'[defaults]\ncommand = "run"\ncontainer = {{ image = "{TF}" }}\n[slurm]\n'
            '[roles.worker]\ncount = 2\n[roles.worker.container]\nruntime = "enroot"\n[roles.ps]\n')
    profile = load(tmp_path, text)
    assert profile.defaults.container is not None and profile.defaults.container.runtime == "pyxis"
    assert profile.roles["ps"].settings.container == profile.defaults.container
    worker = profile.roles["worker"].settings.container
    assert worker is not None and (worker.runtime, worker.image) == ("enroot", TF)


@pytest.mark.parametrize(("text", "message"), [
    (profile_text('container = { runtime = "docker" }'),
     'defaults.container: has no image; add image = "tensorflow/tensorflow:2.16.1-gpu"'),
    (profile_text(worker='container = { pull = "always" }'),
     "roles.worker.container: has no image; add image = \"tensorflow/tensorflow:2.16.1-gpu\" (or under "
     "[defaults.container])"),
    (profile_text('container = { image = " " }'), "defaults.container.image: is empty; give an image"),
    (profile_text('container = { image = "-v/:/host" }'), "starts with '-', which the runtime would read as an option"),
    (profile_text('container = { image = "tf", runtime = "lxc" }'),
     'defaults.container.runtime: "lxc" is not one of docker, podman, apptainer, enroot, pyxis'),
    (profile_text('container = { image = "tf", pull = "sometimes" }'),
     'defaults.container.pull: "sometimes" is not one of never, missing, always'),
    (profile_text('container = { image = "tf", mounts = ["data:/data"] }'),
     "defaults.container.mounts: 'data:/data': the host path 'data' must be absolute or start with ~"),
    (profile_text('container = { image = "tf", mounts = ["/data:/data:rx"] }'), "'rx' is not ro or rw"),
    (profile_text('container = { image = "tf", mounts = "/data:/data" }'),
     'defaults.container.mounts: expected a list like ["/data:/data:ro"], got "/data:/data"'),
    (profile_text('container = { image = "tf", option = ["--rm"] }'),
     'defaults.container.option: unknown key in [defaults.container]; did you mean "options"?'),
    (profile_text("container = true"), 'defaults.container: expected a table like { image = "..." } or false'),
    (profile_text('container = "tf"'), 'defaults.container: expected a table like { image = "..." } or false'),
    (profile_text('container = { image = "/images/tf.sif" }'),
     "defaults.container.image: '/images/tf.sif' is a file; docker runs registry images"),
    (profile_text('container = { image = "tf", runtime = "pyxis" }'),
     'defaults.container.runtime: "pyxis" runs containers through srun and needs [slurm]'),
    (profile_text('container = { image = "tf", runtime = "docker" }', hosts="[slurm]"),
     "defaults.container.runtime: \"docker\" cannot run Slurm tasks"),
    ('[defaults]\ncommand = "run"\n[slurm]\n[roles.worker]\ncontainer = { image = "tf", runtime = "podman" }\n',
     'roles.worker.container.runtime: "podman" cannot run Slurm tasks (its daemon, not the job step, would own '
     'the container); use "pyxis"'),
])
def test_mistakes_are_one_line_naming_the_key_and_the_fix(text: str, message: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert message in refused(tmp_path, capsys, text)


def test_the_error_names_the_line_of_the_key(tmp_path: Path) -> None:
    text = profile_text(worker='[roles.worker.container]\nimage = "tf"\nmounts = ["rel:/x"]\n')
    with pytest.raises(ProfileError) as caught:
        load(tmp_path, text)
    line = text.splitlines().index('mounts = ["rel:/x"]') + 1
    assert f"p.toml:{line}: roles.worker.container.mounts:" in str(caught.value)


@pytest.mark.parametrize(("container", "key", "fix"), [
    ('{ image = "tf", options = ["--env=WANDB_API_KEY=${env:WANDB_API_KEY}"] }', "defaults.container.options",
     "put the variable in env instead"),
    ('{ image = "tf", options = ["--label", "owner=${env:WANDB_API_KEY}"] }', "defaults.container.options",
     "put the variable in env instead"),
    ('{ image = "tf", mounts = ["/data/${env:WANDB_API_KEY}:/data"] }', "defaults.container.mounts",
     "write the path itself"),
])
def test_a_value_from_the_launchers_environment_is_refused_in_options_and_mounts(
        container: str, key: str, fix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """They go into spec.json and onto `docker run`'s command line (ps shows it to every user),
    where nothing masks them: refused with the way out, and the value itself never printed."""
    monkeypatch.setenv("WANDB_API_KEY", "s3cr3t-value")
    line = refused(tmp_path, capsys, profile_text(f"container = {container}"))
    assert f"{key}: holds a value from the launcher's environment" in line and fix in line
    assert "s3cr3t-value" not in line


@pytest.mark.parametrize("options", ['["-e", "API_TOKEN=abc"]', '["--env=DB_PASSWORD=abc"]', '["-eMY_SECRET=abc"]',
                                     '["--env", "HF_TOKEN=abc"]'])
def test_an_option_that_gives_a_secret_looking_variable_its_value_is_refused(
        options: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    line = refused(tmp_path, capsys, profile_text(worker=f'container = {{ image = "tf", options = {options} }}'))
    assert "roles.worker.container.options: gives " in line and "`ps` shows to every user" in line
    assert "abc" not in line


def test_secrets_pass_by_env_and_plain_options_and_mounts_stay_allowed(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "s3cr3t-value")
    text = profile_text('env = { WANDB_API_KEY = "${env:WANDB_API_KEY}" }\n'
                        'container = { image = "tf", options = ["--shm-size=8g", "-e", "TF_CPP_MIN_LOG_LEVEL=2", '
                        '"-e", "WANDB_API_KEY"], mounts = ["/data:/data:ro"] }')
    profile = load(tmp_path, text)
    assert profile.defaults.container is not None
    assert profile.defaults.container.options == ("--shm-size=8g", "-e", "TF_CPP_MIN_LOG_LEVEL=2", "-e",
                                                  "WANDB_API_KEY")
    assert "s3cr3t-value" in profile.secrets
