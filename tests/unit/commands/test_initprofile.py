"""distlaunch init: the strategy guessed from a script's source, and the profile written for it."""

from __future__ import annotations

import tomllib
from pathlib import Path

import jsonschema
import pytest

from launcher.cli import main
from launcher.commands.initguess import guess_strategy
from launcher.plan import build_plan
from launcher.profile.reader import load_profile
from launcher.profile.schema import profile_schema

DATA = Path(__file__).resolve().parents[2] / "data"
VALIDATOR = jsonschema.Draft202012Validator(profile_schema())


@pytest.mark.parametrize(("source", "strategy", "line"), [
    ("import tensorflow as tf\n\nstrategy = tf.distribute.ParameterServerStrategy(resolver)\n",
     "parameter_server", 3),
    ("from tensorflow.distribute.experimental import ParameterServerStrategy\n", "parameter_server", 1),
    ("import tensorflow as tf\ns = tf.distribute.MultiWorkerMirroredStrategy()\n", "multi_worker_mirrored", 2),
    ("import tensorflow as tf\ns = tf.distribute.experimental.MultiWorkerMirroredStrategy()\n",
     "multi_worker_mirrored", 2),
    ("import tensorflow as tf\nserver = tf.train.Server(cluster, job_name='ps')\n", "parameter_server", 2),
    ("import tensorflow.compat.v1 as tf\n\nwith tf.device(tf.train.replica_device_setter(cluster=c)):\n"
     "    pass\n", "parameter_server", 3),
    ("print('hello')\n", "custom", None),
    ("import tensorflow as tf\nmodel.fit(x)\n# tf.distribute.MultiWorkerMirroredStrategy() later\n", "custom", None),
])
def test_each_rule_gives_its_strategy_and_says_where(source: str, strategy: str, line: int | None) -> None:
    guess = guess_strategy(source)
    assert guess.strategy == strategy
    if line is None:
        assert "no ParameterServerStrategy" in guess.reason
    else:
        assert guess.reason.startswith(f"line {line} uses ")


def test_ps_strategy_wins_over_a_tf1_server_and_tf1_is_marked() -> None:
    both = "import tensorflow as tf\ntf.train.Server(c)\ntf.distribute.ParameterServerStrategy(r)\n"
    assert guess_strategy(both).strategy == "parameter_server" and not guess_strategy(both).tf1
    assert guess_strategy("tf.train.Server(c)\n").tf1


def test_a_python2_script_is_read_as_text() -> None:
    source = "import tensorflow as tf\nprint 'starting'\nserver = tf.train.Server(cluster)  # TF1\n"
    guess = guess_strategy(source)
    assert guess.strategy == "parameter_server" and guess.tf1
    assert guess.reason.startswith("line 3 uses tf.train.Server")


def test_role_and_output_flags_are_found_in_argparse_and_tf_flags() -> None:
    argparse_style = "p.add_argument('--job_name')\np.add_argument('--task_index')\np.add_argument('--model_dir')\n"
    guess = guess_strategy(argparse_style)
    assert guess.role_flags == ("--job_name={role}", "--task_index={index}")
    assert guess.output_flag == "--model_dir"
    flags_style = "flags.DEFINE_string('job_name', '', '')\nflags.DEFINE_integer('task_index', 0, '')\n"
    assert guess_strategy(flags_style).role_flags == ("--job_name={role}", "--task_index={index}")
    assert guess_strategy("p.add_argument('--job_name')\n").role_flags == ()
    assert guess_strategy("print(1)\n").output_flag is None


def written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str, *flags: str) -> tuple[Path, dict]:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(source)
    assert main(["init", "train.py", *flags]) == 0
    target = tmp_path / "train.toml"
    data = tomllib.loads(target.read_text())
    assert list(VALIDATOR.iter_errors(data)) == []
    return target, data


PS_SOURCE = ("import tensorflow as tf\ns = tf.distribute.ParameterServerStrategy(r)\n"
             "p.add_argument('--checkpoint-dir')\n")


def test_a_ps_script_gets_chief_workers_and_ps_on_this_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    target, data = written(tmp_path, monkeypatch, PS_SOURCE)
    out = capsys.readouterr().out
    assert out.startswith("wrote train.toml: parameter_server (line 2 uses tf.distribute.ParameterServerStrategy)")
    assert "next: distlaunch check train.toml" in out
    assert data["strategy"] == "parameter_server"
    assert data["defaults"]["command"] == "{python} train.py --checkpoint-dir {outputs}/ckpt"
    assert data["hosts"] == {"local": {"address": "localhost", "transport": "local"}}
    assert {role: table["count"] for role, table in data["roles"].items()} == {"chief": 1, "ps": 1, "worker": 2}
    text = target.read_text()
    assert "# Guessed from train.py: line 2 uses tf.distribute.ParameterServerStrategy." in text
    assert "a failed ps restarts together with the chief" in text.replace("\n# ", " ")
    plan = build_plan(load_profile(target))
    assert [t.task_id for t in plan.tasks] == ["ps:0", "worker:0", "worker:1", "chief:0"]
    assert all(t.workdir == str(tmp_path.resolve()) for t in plan.tasks)


#: what a pip user has not got: folders of distlaunch's repository
REPOSITORY_PATHS = ("docs/", "examples/", "cluster_profiles/", "tests/", "launcher/", ".md")


@pytest.mark.parametrize("flags", [(), ("--hosts", "gpu[1-2]"), ("--image", "tensorflow/tensorflow:2.15.0")])
def test_the_comments_point_at_nothing_only_a_clone_of_the_repository_has(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: tuple[str, ...]) -> None:
    keras = ("import tensorflow as tf\ns = tf.distribute.MultiWorkerMirroredStrategy()\n"
             "with s.scope():\n    m = tf.keras.Sequential()\nm.fit(x)\n")
    for source in (PS_SOURCE, keras, (DATA / "tf1_between_graph.py").read_text(), "print(1)\n"):
        target, _ = written(tmp_path, monkeypatch, source, *flags, "--force")
        comments = [line for line in target.read_text().splitlines() if "#" in line]
        assert not [line for line in comments if any(p in line for p in REPOSITORY_PATHS)]
        assert any('"Key reference"' in line for line in comments)


def test_a_tf1_script_gets_ps_and_workers_with_its_role_flags(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    _, data = written(tmp_path, monkeypatch, (DATA / "tf1_between_graph.py").read_text())
    assert sorted(data["roles"]) == ["ps", "worker"]
    assert data["defaults"]["command"] == ("{python} train.py --job_name={role} --task_index={index} "
                                           "--train_dir {outputs}/ckpt")


def test_ssh_hosts_and_ranges_get_tables_sync_and_one_worker_each(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    source = "import tensorflow as tf\ntf.distribute.MultiWorkerMirroredStrategy()\n"
    target, data = written(tmp_path, monkeypatch, source, "--hosts", "node[01-03],10.0.0.5")
    assert data["hosts"] == {"node": {"address": "node[01-03]"}, "10.0.0.5": {"address": "10.0.0.5"}}
    assert data["sync"]["source"] == "." and data["defaults"]["python"] == "python3"
    assert data["roles"] == {"worker": {"count": 4, "hosts": ["node", "10.0.0.5"]}}
    plan = build_plan(load_profile(target))
    assert [t.host for t in plan.tasks] == ["node-01", "node-02", "node-03", "10.0.0.5"]


def test_a_script_in_a_subfolder_runs_from_where_init_ran(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "my train.py").write_text("print(1)\n")
    (tmp_path / "profiles").mkdir()
    assert main(["init", "src/my train.py", "-o", "profiles/job.toml"]) == 0
    data = tomllib.loads((tmp_path / "profiles" / "job.toml").read_text())
    assert data["name"] == "my-train" and data["strategy"] == "custom"
    assert data["defaults"]["command"] == "{python} 'src/my train.py'"
    assert data["defaults"]["workdir"] == ".."
    assert data["roles"] == {"worker": {"count": 1, "hosts": ["local"]}}
    # the commented [metrics] of a custom script work once uncommented
    target = tmp_path / "profiles" / "job.toml"
    text = target.read_text()
    for line in ("# [metrics]", "# step = ", "# loss = "):
        text = text.replace("\n" + line, "\n" + line[2:])
    target.write_text(text)
    metrics = load_profile(target).metrics
    assert metrics.step == r"step[ :=]+(\d+)" and metrics.loss == r"loss[ :=]+(\S+)"


@pytest.mark.parametrize(("flags", "message"), [
    (["missing.py"], "missing.py: no such file"),
    ([], "name your training script"),
    (["train.py", "--hosts", "n[1-"], "--hosts: 'n[1-': '[' is never closed"),
    (["train.py", "--hosts", ""], "--hosts is empty"),
    (["train.py", "--hosts", "alice@gpu1"], "--hosts alice@gpu1: give host names only"),
    (["train.py", "--ps", "1"], "--ps: MultiWorkerMirroredStrategy has no parameter servers"),
    (["train.py", "--workers", "-1"], "--workers -1: give a count of 0 or more"),
    (["train.py", "--runtime", "podman"], "--runtime podman needs --image"),
    (["train.py", "--image", "tf", "--runtime", "pyxis"], "--runtime pyxis: use one of docker, podman, apptainer"),
    (["train.py", "--image=-v/:/x"], "--image '-v/:/x' starts with '-'"),
    (["train.py", "--image", "/images/tf.sif"], "--image '/images/tf.sif' is a file; docker runs registry images"),
])
def test_mistakes_are_one_line_and_exit_2(flags: list[str], message: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("tf.distribute.MultiWorkerMirroredStrategy()\n")
    assert main(["init", *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"distlaunch: error: {message}") and err.count("\n") == 1
    assert not (tmp_path / "train.toml").exists()


def test_an_existing_file_is_kept_without_force(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "train.toml").write_text("mine\n")
    assert main(["init", "train.py"]) == 2
    assert "train.toml exists; pass --force" in capsys.readouterr().err
    assert (tmp_path / "train.toml").read_text() == "mine\n"
    assert main(["init", "train.py", "--force"]) == 0
    assert "strategy = \"custom\"" in (tmp_path / "train.toml").read_text()


def test_ps_refuses_no_chief_and_zero_ps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(PS_SOURCE)
    assert main(["init", "train.py", "--no-chief"]) == 2
    assert main(["init", "train.py", "--ps", "0"]) == 2
    err = capsys.readouterr().err
    assert "--no-chief: ParameterServerStrategy needs a chief" in err and "--ps 0:" in err
    assert main(["init", "train.py", "--ps", "3", "--workers", "5"]) == 0
    data = tomllib.loads((tmp_path / "train.toml").read_text())
    assert {role: table["count"] for role, table in data["roles"].items()} == {"chief": 1, "ps": 3, "worker": 5}


def test_image_writes_a_container_table_every_task_runs_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    target, data = written(tmp_path, monkeypatch, PS_SOURCE, "--image", "tensorflow/tensorflow:2.16.1-gpu")
    assert "in docker image tensorflow/tensorflow:2.16.1-gpu" in capsys.readouterr().out
    assert data["defaults"]["container"] == {"image": "tensorflow/tensorflow:2.16.1-gpu", "runtime": "docker",
                                             "pull": "missing"}
    assert data["defaults"]["python"] == "python3"  # the image's interpreter, not the launcher's
    text = target.read_text()
    assert '# mounts = ["/data:/data:ro"]' in text and '# options = ["--shm-size=8g"]' in text
    profile = load_profile(target)
    assert {r.settings.container.image for r in profile.roles.values() if r.settings.container} == \
        {"tensorflow/tensorflow:2.16.1-gpu"}
    assert all(t.python == "python3" for t in build_plan(profile).tasks)


def test_runtime_and_ssh_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = "import tensorflow as tf\ntf.distribute.MultiWorkerMirroredStrategy()\n"
    target, data = written(tmp_path, monkeypatch, source, "--hosts", "gpu1,gpu2", "--image", "/images/tf.sif",
                           "--runtime", "apptainer")
    assert data["defaults"]["container"]["runtime"] == "apptainer"
    container = load_profile(target).roles["worker"].settings.container
    assert container is not None and (container.image, container.runtime) == ("/images/tf.sif", "apptainer")
