"""A task in a container as the agent runs it (launcher/agent/taskcontainer.py, spec.py): the command
exec'd last, the paths mounted, the runtime's refusal in one line, which runtimes a run's sweep asks,
and the image preflight's answers (launcher/agent/containercheck.py) where no runtime is needed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from launcher.agent import containercheck, taskcontainer
from launcher.agent.containeradapters import Apptainer
from launcher.agent.spec import AgentSpec, exec_last, task_argv, task_script, task_variables


@pytest.mark.parametrize(("command", "execd"), [
    ("python3 train.py --steps 5", True),
    ("python3 -c 'import a; b()'", True),  # the ; is quoted: one command
    ("python3 train.py > out.log 2>&1", True),  # redirections stay with the exec'd program
    ("  /opt/venv/bin/python x.py", True),
    ("cd sub && python3 x.py", False),
    ("python3 a.py; python3 b.py", False),
    ("python3 a.py | tee log", False),
    ("python3 a.py &", False),
    ("FOO=1 python3 x.py", False),  # exec FOO=1 would run a program named FOO=1
    ("exec python3 x.py", False),  # already
    ("source env.sh", False),
    ("python3 'unbalanced", False),
    ("python3 x.py\npython3 y.py", False),
    ("python3 x.py $(nproc)", False),
    ("", False),
])
def test_exec_last_only_where_exec_keeps_the_meaning(command: str, execd: bool) -> None:
    assert exec_last(command) == (f"exec {command.strip()}" if execd else command)


def test_task_script_execs_the_command_after_the_setup_lines_only_in_a_container() -> None:
    assert task_script(["source a", "conda activate b"], "python3 t.py", container=True) == \
        "source a && conda activate b && exec python3 t.py"
    assert task_script(["source a"], "python3 t.py") == "source a && python3 t.py"
    spec = AgentSpec(run="r", task="worker:0", command="python3 t.py", workdir="/w", container={"image": "i"})
    assert task_argv(spec) == ["/bin/sh", "-c", "exec python3 t.py"]
    spec.script_in_env = True  # the launcher built the secret script with the exec already
    assert task_argv(spec)[-1].startswith("s=$DISTLAUNCH_SCRIPT;")


def test_a_containers_variables_are_the_tasks_own_not_the_agents(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME_ONLY_VAR", "x")
    monkeypatch.setenv("PYTHONPATH", "/host/site")
    spec = AgentSpec(run="r1", task="worker:0", command="c", workdir="/w", env={"TF_CONFIG": "{}", "A": "1"},
                     container={"image": "i"})
    names = task_variables(spec, {"WANDB_API_KEY": "s3cret"}, "/runs/r1/tasks/worker-0")
    assert {"TF_CONFIG", "A", "WANDB_API_KEY", "DISTLAUNCH_RUN_ID", "DISTLAUNCH_TASK", "PYTHONPATH",
            "PYTHONUNBUFFERED", "DISTLAUNCH_STACKS_FILE"} <= set(names)
    assert "HOME_ONLY_VAR" not in names
    command = taskcontainer.run_command(spec, taskcontainer.container_of(spec), "/runs/r1/tasks/worker-0",
                                        list(names))
    assert "s3cret" not in " ".join(command)  # by name only
    assert command[command.index("-e", command.index("WANDB_API_KEY") - 1)] == "-e"


def test_home_inside_a_daemons_container_is_a_private_directory_of_the_task_dir(tmp_path: Path) -> None:
    """The agent's uid has no passwd entry in the image: HOME would be "/" there, where ~/.keras and
    the like cannot be written. The task dir is mounted with the run dir, so its home/ is writable."""
    task_dir = tmp_path / "runs" / "r1" / "tasks" / "worker-0"
    task_dir.mkdir(parents=True)
    spec = AgentSpec(run="r1", task="worker:0", command="c", workdir=str(tmp_path), container={"image": "i"})
    command = taskcontainer.run_command(spec, taskcontainer.container_of(spec), str(task_dir), ["TF_CONFIG"])
    home = task_dir / "home"
    assert command[command.index(f"HOME={home}") - 1] == "-e"
    assert home.is_dir() and (home.stat().st_mode & 0o777) == 0o700
    assert any(str(task_dir).startswith(m + "/") for m in taskcontainer.mounts(spec, str(task_dir)))
    mine = taskcontainer.run_command(spec, taskcontainer.container_of(spec), str(task_dir), ["HOME"])
    assert not [w for w in mine if w.startswith("HOME=")]  # the task's own HOME (env) wins
    apptainer = AgentSpec(run="r1", task="worker:0", command="c", workdir=str(tmp_path),
                          container={"image": "/i.sif", "runtime": "apptainer"})
    assert not [w for w in taskcontainer.run_command(apptainer, taskcontainer.container_of(apptainer), str(task_dir),
                                                     ["TF_CONFIG"]) if "HOME" in w]


def test_mounts_cover_run_dir_code_workdir_and_outputs_once(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "r1"
    spec = AgentSpec(run="r1", task="ps:0", command="c", workdir=str(tmp_path / "code"),
                     outputs=str(tmp_path / "out"))
    found = taskcontainer.mounts(spec, str(run / "tasks" / "ps-0"))
    assert str(run) in found and str(tmp_path / "code") in found and str(tmp_path / "out") in found
    assert len(found) == len(set(found))
    inner = AgentSpec(run="r1", task="ps:0", command="c", workdir=str(run / "ckpt"))  # inside the run dir
    assert str(run / "ckpt") not in taskcontainer.mounts(inner, str(run / "tasks" / "ps-0"))


@pytest.mark.parametrize(("code", "lines", "image", "said"), [
    (125, ["docker: Error response from daemon: No such image: nosuch/image:1", "",
           "Run 'docker run --help' for more information"], "nosuch/image:1",
     "container did not start: No such image: nosuch/image:1"),
    (125, ["Unable to find image 'x:1' locally",
           'docker: Error response from daemon: Get "https://registry-1.docker.io/v2/": no such host.',
           "See 'docker run --help'."], "x:1",
     'container did not start: Get "https://registry-1.docker.io/v2/": no such host (image x:1)'),
    (125, ["Error: short-name resolution enforced"], "img",
     "container did not start: short-name resolution enforced (image img)"),
    (127, ['docker: Error response from daemon: failed to create shim task: OCI runtime create failed: '
           'exec: "/bin/sh": stat /bin/sh: no such file or directory: unknown.'], "scratch",
     'container did not start: failed to create shim task: OCI runtime create failed: exec: "/bin/sh": '
     "stat /bin/sh: no such file or directory: unknown (image scratch)"),
    (127, ["sh: 1: python3: not found"], "i", None),  # the command in the container: the shell says so
    (1, ["docker: Error response from daemon: x"], "i", None),
    (125, [], "i", None),  # no word of the runtime's: the program in the container exited 125 itself
    (125, ["loss diverged, giving up", "See 'the docs'."], "i", None),
])
def test_start_failure_is_the_runtimes_own_words(code: int, lines: list[str], image: str, said: str | None) -> None:
    assert taskcontainer.start_failure(code, lines, image) == said


def test_start_failure_reads_only_the_words_of_the_runtime_that_ran() -> None:
    assert taskcontainer.start_failure(125, ["Error: model file missing"], "i", "docker") is None
    assert taskcontainer.start_failure(125, ["Error: short-name resolution enforced"], "i", "podman") == \
        "container did not start: short-name resolution enforced (image i)"
    daemon = ["docker: Error response from daemon: No such image: i"]
    assert taskcontainer.start_failure(125, daemon, "i", "docker") == "container did not start: No such image: i"
    assert taskcontainer.start_failure(125, daemon, "/i.sif", "apptainer") is None  # 125 is docker's and podman's


def test_a_sweep_asks_only_the_daemon_runtimes_the_runs_tasks_use(tmp_path: Path) -> None:
    for slug, container in (("ps-0", {"image": "i", "runtime": "podman"}), ("worker-0", {"image": "i"}),
                            ("worker-1", {"image": "i", "runtime": "apptainer"}), ("chief-0", None)):
        (tmp_path / "tasks" / slug).mkdir(parents=True)
        (tmp_path / "tasks" / slug / "spec.json").write_text(json.dumps({"run": "r", "container": container}))
    (tmp_path / "tasks" / "broken").mkdir()
    (tmp_path / "tasks" / "broken" / "spec.json").write_text("{")
    assert taskcontainer.run_runtimes(str(tmp_path)) == ["podman", "docker"]
    assert taskcontainer.run_runtimes(str(tmp_path / "none")) == []


def test_short_digest() -> None:
    assert containercheck.short_digest("sha256:457e38fde9b5aa0011\n") == "457e38fde9b5"
    assert containercheck.short_digest("") is None


@pytest.mark.skipif(shutil.which("distlaunch-no-runtime") is not None, reason="a runtime by that name exists")
def test_image_check_of_a_runtime_that_is_not_installed_and_of_a_bad_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoRuntime(Apptainer):  # asked as apptainer is: `NAME version`
        name = "distlaunch-no-runtime"

    assert containercheck.runtime_answers(NoRuntime()) == \
        "distlaunch-no-runtime is not installed here (not on the PATH)"
    monkeypatch.setenv("PATH", "/nonexistent")
    answer = containercheck.check_images([{"container": {"image": "i", "runtime": "podman"}, "python": "python3"}])
    assert answer == [{"image": "i", "runtime": "podman", "pull": "missing",
                       "error": "podman is not installed here (not on the PATH)"}]
    bad = containercheck.check_images([{"container": {"image": "-x"}}])
    assert bad[0]["image"] == "-x" and bad[0]["error"].startswith("bad container spec: container image")
