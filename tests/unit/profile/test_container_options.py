"""A container's ``options`` read as each runtime's command line reads them: the secret refusal and
``check``'s warnings about options that undo what distlaunch promises (issue 49, item 6)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from launcher.agent.containeradapters import ADAPTERS
from launcher.cli import build_parser, main
from launcher.profile.containeropts import RULES, SYNTAX, Option, option_warnings, parse_options, secret_problem
from launcher.profile.keys import CONTAINER_KEYS

HOSTS = '[hosts.h]\naddress = "localhost"\ntransport = "local"\n'


def profile_text(defaults: str = "", worker: str = "", hosts: str = HOSTS) -> str:
    return (f'[defaults]\ncommand = "{{python}} train.py"\n{defaults}\n{hosts}\n'
            f"[roles.ps]\n[roles.worker]\ncount = 2\n{worker}\n")


def container(options: str, runtime: str = "docker", extra: str = "") -> str:
    return f'container = {{ image = "tf", runtime = "{runtime}", options = {options}{extra} }}'


def check(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> tuple[int, str]:
    path = tmp_path / "p.toml"
    path.write_text(text, encoding="utf-8")
    code = main(["check", "--no-remote", str(path)])
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return code, err


def warnings(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> list[str]:
    code, err = check(tmp_path, capsys, text)
    assert code == 0, err
    return [line.removeprefix("distlaunch: warning: ") for line in err.splitlines()
            if line.startswith("distlaunch: warning: ")]


@pytest.fixture(autouse=True)
def _outside_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(name, raising=False)


# --- the parser: what each runtime's own CLI makes of the words ---

@pytest.mark.parametrize(("runtime", "words", "expected"), [
    # docker / podman (pflag): bundled switches, a value glued on or after, "=" forms
    ("docker", ["-ie", "X=1"], [("--interactive", None), ("--env", "X=1")]),
    ("docker", ["-tieX=1"], [("--tty", None), ("--interactive", None), ("--env", "X=1")]),
    ("docker", ["-eX=1", "-e=Y=2", "--env", "Z", "--env=W=3"],
     [("--env", "X=1"), ("--env", "Y=2"), ("--env", "Z"), ("--env", "W=3")]),
    ("podman", ["-d=false", "--privileged=false", "--rm"], [("--detach", "false"), ("--privileged", "false"),
                                                            ("--rm", None)]),
    ("docker", ["--net", "bridge", "-v/:/host"], [("--network", "bridge"), ("--volume", "/:/host")]),
    ("docker", ["--shm-size", "8g", "--", "-e"], [("--shm-size", "8g"), (None, "-e")]),
    # apptainer (pflag too, other flags): -e is --cleanenv, so "-ie X" leaves X to no flag
    ("apptainer", ["-ie", "API_TOKEN=x"], [("--ipc", None), ("--cleanenv", None), (None, "API_TOKEN=x")]),
    ("apptainer", ["-B/data:/data", "--env", "A=1,B=2"], [("--bind", "/data:/data"), ("--env", "A=1,B=2")]),
    # enroot (a bash case loop): one flag a word, no bundles
    ("enroot", ["-ie", "X=1", "-e", "Y=2", "--env=Z=3"], [("-ie", None), (None, "X=1"), ("--env", "Y=2"),
                                                        ("--env", "Z=3")]),
    # srun under pyxis (getopt_long): -e is --error, long flags may be abbreviated
    ("pyxis", ["-N1", "-eerr.log", "--exp=ALL,X=1", "--container-env", "A,B"],
     [("--nodes", "1"), ("--error", "err.log"), ("--export", "ALL,X=1"), ("--container-env", "A,B")]),
])
def test_options_are_read_as_the_runtime_reads_them(runtime: str, words: list[str],
                                                    expected: list[tuple[str | None, str | None]]) -> None:
    assert [(o.flag, o.value) for o in parse_options(runtime, words)] == expected


def test_a_flag_that_takes_a_value_at_the_end_is_missing_it() -> None:
    assert parse_options("docker", ["--shm-size=8g", "-v"])[-1] == Option("--volume", None, missing=True, given="-v")
    assert parse_options("docker", ["-ite"])[-1].missing
    assert not parse_options("apptainer", ["-ie"])[-1].missing  # -e is a switch there


# --- secrets: refused wherever the runtime would find them ---

@pytest.mark.parametrize(("runtime", "options", "variable"), [
    ("docker", '["-ie", "API_TOKEN=literal"]', "API_TOKEN"),
    ("podman", '["-tieAPI_TOKEN=literal"]', "API_TOKEN"),
    ("docker", '["-eAPI_TOKEN=literal"]', "API_TOKEN"),
    ("docker", '["--env=API_TOKEN=literal"]', "API_TOKEN"),
    ("docker", '["-e", "FOO=1,API_TOKEN=literal"]', "API_TOKEN"),  # FOO's value, on the command line all the same
    ("apptainer", '["--env", "FOO=1,API_TOKEN=literal"]', "API_TOKEN"),
    ("apptainer", '["--env=FOO=1,DB_PASSWORD=literal"]', "DB_PASSWORD"),
    ("apptainer", '["-ie", "API_TOKEN=literal"]', "API_TOKEN"),  # -e is --cleanenv: a stray word
    ("enroot", '["-e", "MY_SECRET=literal"]', "MY_SECRET"),
    ("enroot", '["--env=MY_SECRET=literal"]', "MY_SECRET"),
])
def test_a_secret_given_its_value_in_options_is_refused_as_the_runtime_reads_them(
        runtime: str, options: str, variable: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = check(tmp_path, capsys, profile_text(worker=container(options, runtime)))
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"roles.worker.container.options: gives {variable} its value on the container runtime's command line" in err
    assert "put the variable in env instead" in err and "literal" not in err


@pytest.mark.parametrize("options", ['["--export=ALL,HF_TOKEN=literal"]', '["--exp=ALL,HF_TOKEN=literal"]',
                                     '["--container-env=HF_TOKEN=literal"]'])
def test_srun_exports_are_read_as_comma_lists_under_pyxis(options: str, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    text = f'[defaults]\ncommand = "run"\n{container(options, "pyxis")}\n[slurm]\n[roles.worker]\ncount = 1\n'
    code, err = check(tmp_path, capsys, text)
    assert code == 2 and "defaults.container.options: gives HF_TOKEN its value" in err and "literal" not in err


def test_a_registry_password_in_options_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = check(tmp_path, capsys, profile_text(container('["--docker-password", "literal"]', "apptainer")))
    assert code == 2 and "defaults.container.options: gives --docker-password a password" in err
    assert "literal" not in err


def test_a_role_that_changes_the_runtime_reads_the_inherited_options_anew(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """docker takes --label's value; enroot has no --label, so API_TOKEN=... is a stray word there."""
    text = profile_text(container('["--label", "API_TOKEN=literal"]'), worker='[roles.worker.container]\n'
                        'runtime = "enroot"\n')
    code, err = check(tmp_path, capsys, text)
    assert code == 2 and "defaults.container.options: read by enroot for roles.worker.container: gives API_TOKEN its " \
        "value" in err


def test_a_flag_left_without_its_value_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = check(tmp_path, capsys, profile_text(container('["--shm-size=8g", "-v"]')))
    assert code == 2 and "defaults.container.options: ends with -v, which takes a value" in err


@pytest.mark.parametrize(("runtime", "words"), [
    ("docker", ["-e", "WANDB_API_KEY"]),  # by name: the value stays in the runtime's environment
    ("docker", ["-it", "--shm-size", "8g", "-e", "TF_CPP_MIN_LOG_LEVEL=2", "--label", "team=ml"]),
    ("apptainer", ["-e", "--env", "FOO=1,BAR=2"]),
    ("pyxis", ["--container-env=HF_TOKEN", "--export=ALL"]),
])
def test_names_and_plain_values_stay_allowed(runtime: str, words: list[str]) -> None:
    assert secret_problem(runtime, words) is None


# --- check's warnings: what an option undoes of distlaunch's promises ---

@pytest.mark.parametrize(("options", "line"), [
    ('["--user", "0:0"]', "--user 0:0 runs the task as 0:0, not as your uid:gid"),
    ('["-u0:0"]', "-u 0:0 runs the task as 0:0, not as your uid:gid"),
    ('["--privileged"]', "--privileged gives the container every capability and the host's devices"),
    ('["-v", "/:/host"]', "-v /:/host mounts the host's whole file system into the container"),
    ('["--mount", "type=bind,source=/,target=/host,readonly"]', "mounts the host's whole file system"),
    ('["-v", "/var/run/docker.sock:/var/run/docker.sock"]', "gives the task the container runtime's socket"),
    # issue 59, item 10: the folders that hold a runtime's socket, and the host's root through /proc
    ('["-v", "/var/run:/var/run"]', "-v /var/run:/var/run gives the task the folder of the container runtime's socket"),
    ('["-v", "/run:/run:ro"]', "gives the task the folder of the container runtime's socket"),
    ('["-v", "/run/docker/:/x"]', "gives the task the folder of the container runtime's socket"),
    ('["--mount", "type=bind,src=/run,dst=/run"]', "gives the task the folder of the container runtime's socket"),
    ('["-v", "/proc/1/root:/host"]', "-v /proc/1/root:/host mounts the host's whole file system into the container"),
    ('["-v", "/proc/self/root/etc:/h"]', "mounts the host's whole file system"),
    ('["--pid=host"]', "--pid host shares the host's pid namespace with the task"),
    ('["--network", "bridge"]', "--network bridge takes the container off the host's network, which distlaunch needs"),
    ('["--net=none"]', "--net none takes the container off the host's network"),
    ('["--cap-add=SYS_ADMIN"]', "--cap-add SYS_ADMIN gives the task the capability SYS_ADMIN"),
    ('["--security-opt", "seccomp=unconfined"]', "turns off the kernel's confinement of the container"),
    ('["--ipc=private"]', "--ipc private replaces distlaunch's --ipc host"),
    ('["--name", "mine"]', "--name mine replaces the name distlaunch stops, finds and removes the container by"),
    ('["-d"]', "-d makes the runtime return at once"),
])
def test_check_warns_about_an_option_that_undoes_a_promise(options: str, line: str, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    found = warnings(tmp_path, capsys, profile_text(container(options)))
    assert len(found) == 1 and found[0].startswith("defaults.container.options: ") and line in found[0], found


def test_each_warning_names_the_key_it_comes_from(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = profile_text(container('["--privileged"]', extra=', mounts = ["/:/host:ro"]'),
                        worker='[roles.worker.container]\noptions = ["-ie", "TF_CPP_MIN_LOG_LEVEL=2", "-u", "0"]\n')
    assert warnings(tmp_path, capsys, text) == [
        "defaults.container.options: --privileged gives the container every capability and the host's devices",
        "defaults.container.mounts: '/:/host:ro' mounts the host's whole file system into the container",
        "roles.worker.container.options: -u 0 runs the task as 0, not as your uid:gid: what it writes in its "
        "workdir, {outputs} and the run dir would not be yours",
    ]


@pytest.mark.parametrize(("runtime", "words", "line"), [
    ("apptainer", ["-n"], "-n takes the container off the host's network"),
    ("apptainer", ["-B", "/data,/:/host"], "mounts the host's whole file system"),
    ("apptainer", ["--add-caps", "ALL"], "--add-caps ALL gives the task every capability"),
    ("enroot", ["--mount", "/ /host none bind"], "mounts the host's whole file system"),
    ("pyxis", ["--container-mounts=/:/host"], "mounts the host's whole file system"),
    ("pyxis", ["--export=NONE"], "replaces distlaunch's --export=ALL"),
])
def test_other_runtimes_are_warned_about_in_their_own_flags(runtime: str, words: list[str], line: str) -> None:
    found = option_warnings(runtime, words)
    assert len(found) == 1 and line in found[0], found


def test_harmless_options_give_no_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    options = ('["--shm-size=8g", "--network=host", "--ipc", "host", "--privileged=false", "-d=false", '
               '"-v", "/data:/data:ro", "-v", "/scratch", "--mount", "type=bind,source=/data,target=/d", "-it", '
               '"--security-opt", "no-new-privileges"]')
    assert warnings(tmp_path, capsys, profile_text(container(options))) == []
    assert option_warnings("apptainer", ["--net=false", "-B", "/data", "--pid"]) == []
    assert option_warnings("docker", ["-v", "/run/media/disk:/data", "-v", "/proc/cpuinfo:/c", "-v", "/runs:/r"]) == []
    assert option_warnings("pyxis", ["--export=ALL,FOO", "--container-mounts=/data:/data"]) == []


# -- a runtime added to containeradapters.ADAPTERS: every place that must name it (docs/contributing.md) ---


@pytest.mark.parametrize("runtime", list(ADAPTERS))
def test_every_runtime_has_a_flag_table_and_a_warning_table(runtime: str) -> None:
    assert runtime in SYNTAX, f"add {runtime!r} to containeropts.SYNTAX: how its command line reads flags"
    assert runtime in RULES, f"add {runtime!r} to containeropts.RULES ({{}} when no option undoes a promise)"


@pytest.mark.parametrize("runtime", list(ADAPTERS))
def test_every_runtime_refuses_a_secret_in_each_flag_that_sets_variables(runtime: str) -> None:
    syntax = SYNTAX[runtime]
    assert syntax.env, f"containeropts.SYNTAX[{runtime!r}].env names no flag that sets variables"
    for flag in syntax.env:
        problem = secret_problem(runtime, [flag, "API_TOKEN=s3cr3t"])
        assert problem is not None and "API_TOKEN" in problem and "s3cr3t" not in problem, (flag, problem)


def _help(verb: str) -> str:
    parser = build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return verbs.choices[verb].format_help()


@pytest.mark.parametrize("runtime", list(ADAPTERS))
def test_every_runtime_is_named_where_users_read_the_choices(runtime: str) -> None:
    assert CONTAINER_KEYS["runtime"].choices == tuple(ADAPTERS)
    assert runtime in CONTAINER_KEYS["runtime"].doc, "profile/keys.py: the runtime key's help names each runtime"
    if not ADAPTERS[runtime].slurm_step:  # what `init --runtime` offers
        assert runtime in _help("init"), "cli.py: init --runtime's help names every runtime it takes"
