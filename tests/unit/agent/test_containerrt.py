"""Container runtimes' command lines (launcher/agent/containeradapters.py, each runtime's adapter) and the
spec they read (launcher/agent/containerrt.py): every runtime, built, not run."""

from __future__ import annotations

import re
from typing import Any

import pytest

from launcher.agent import containerrt as crt
from launcher.agent.containeradapters import ADAPTERS, ContainerRuntime, adapter_for, enroot_uri
from launcher.agent.containerrt import ContainerSpec

RUN = "mnist-20240501-101010-ab12"
LABELS = crt.task_labels(RUN, "worker:1")
IMAGE = "nvcr.io/nvidia/tensorflow:24.01-tf2-py3"


def spec(runtime: str = "docker", **kw: Any) -> ContainerSpec:
    return ContainerSpec(image=kw.pop("image", IMAGE), runtime=runtime, **kw)


def run(s: ContainerSpec, **kw: Any) -> list[str]:
    args: dict[str, Any] = dict(name="dl-x-worker-1-0", labels=LABELS, env_names=["TF_CONFIG", "DISTLAUNCH_RUN_ID"],
                                mounts=["/home/u/code", "/home/u/out"], workdir="/home/u/code", gpus=None,
                                user="1000:1000", command=["/bin/sh", "-c", "python3 train.py"], home="/home/u")
    args.update(kw)
    return s.adapter.run_argv(s, **args)


def pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


# ---- the spec's JSON -------------------------------------------------------------------------

def test_spec_round_trips_through_json() -> None:
    s = spec("podman", mounts=("/data:/data:ro",), options=("--shm-size=8g",), pull="always")
    data = s.to_json()
    assert data == {"image": IMAGE, "runtime": "podman", "mounts": ["/data:/data:ro"],
                    "options": ["--shm-size=8g"], "pull": "always"}
    assert ContainerSpec.from_json(data) == s
    assert ContainerSpec.from_json({"image": "tf"}) == ContainerSpec(image="tf")
    sif = ContainerSpec.from_json({"image": "/images/tf.sif", "runtime": "apptainer"})  # a file: not docker's
    assert sif.image == "/images/tf.sif"


@pytest.mark.parametrize(("data", "message"), [
    ({"image": "tf", "runtime": "lxc"}, "unknown container runtime 'lxc'; valid: docker, podman"),
    ({"image": "tf", "pull": "sometimes"}, "unknown container pull policy 'sometimes'"),
    ({"runtime": "docker"}, "container image is empty"),
    ({"image": "  "}, "container image is empty"),
    ({"image": "-v/:/host"}, "starts with '-'"),
    ({"image": "my image"}, "has spaces"),
    ({"image": "/images/tf.sif"}, "is a file; docker runs registry images"),
    ({"image": "tf", "mounts": ["data:/data"]}, "must be absolute or start with ~"),
    ({"image": "tf", "mounts": ["/data:data"]}, "the path inside, 'data', must be absolute"),
    ({"image": "tf", "mounts": ["/data:/data:rx"]}, "'rx' is not ro or rw"),
    ({"image": "tf", "mounts": ["/a,b:/a"]}, "has a ','"),
    ({"image": "tf", "mounts": "/data:/data"}, "mounts must be a list of strings"),
    ({"image": "tf", "options": [1]}, "options must be a list of strings"),
    ({"image": "tf", "volumes": []}, "unknown key 'volumes'"),
    (["tf"], "expected a JSON object"),
])
def test_from_json_refuses_what_a_launcher_would_not_write(data: Any, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ContainerSpec.from_json(data)


# ---- the registry ----------------------------------------------------------------------------

def test_one_adapter_per_runtime_and_the_name_lists_are_the_registrys() -> None:
    assert crt.RUNTIMES == ("docker", "podman", "apptainer", "enroot", "pyxis") == tuple(ADAPTERS)
    assert crt.DAEMON_RUNTIMES == ("docker", "podman")
    facts = {name: (type(a).__name__, a.daemon, a.nvidia_env, a.slurm_step, bool(a.client_errors))
             for name, a in ADAPTERS.items()}
    assert facts == {"docker": ("Docker", True, False, False, True), "podman": ("Podman", True, False, False, True),
                     "apptainer": ("Apptainer", False, False, False, False),
                     "enroot": ("Enroot", False, True, False, False), "pyxis": ("Pyxis", False, True, True, False)}
    for name, adapter in ADAPTERS.items():
        assert isinstance(adapter, ContainerRuntime) and adapter.name == name and adapter_for(name) is adapter
        assert spec(name, image="/i/tf.sif" if name in ("apptainer", "enroot") else IMAGE).adapter is adapter
    with pytest.raises(ValueError, match=re.escape("unknown container runtime 'lxc'; valid: docker, podman, "
                                                   "apptainer, enroot, pyxis")):
        adapter_for("lxc")
    with pytest.raises(ValueError, match="unknown container runtime"):
        _ = spec("lxc").adapter


def test_only_a_daemon_runtime_refuses_an_image_file() -> None:
    for adapter in ADAPTERS.values():
        assert (adapter.image_problem("/images/tf.sif") is not None) == adapter.daemon
        assert adapter.image_problem(IMAGE) is None
    assert adapter_for("podman").image_problem("./tf.tar") == (
        "'./tf.tar' is a file; podman runs registry images (load the file with `podman load` and give its name), "
        'or use runtime = "apptainer"')


# ---- names -----------------------------------------------------------------------------------

def test_container_name_is_per_incarnation_and_docker_valid() -> None:
    names = {crt.container_name(RUN, task, inc) for task in ("worker:1", "worker:2", "ps:0") for inc in (0, 1)}
    assert len(names) == 6
    assert crt.container_name(RUN, "worker:1", 3) == f"dl-{RUN}-worker-1-3"
    for name in names:
        assert re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*", name)


def test_a_long_run_id_keeps_the_task_and_stays_unique() -> None:
    a = crt.container_name("r" * 200 + "a", "worker:12", 4)
    b = crt.container_name("r" * 200 + "b", "worker:12", 4)
    assert len(a) <= crt.MAX_NAME and a != b and a.endswith("-worker-12-4")
    assert re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*", crt.container_name("a b/c", "x" * 300, 0))
    with pytest.raises(ValueError):
        crt.container_name(RUN, "worker:1", -1)


# ---- docker and podman -----------------------------------------------------------------------

def test_docker_run_argv_exactly() -> None:
    s = spec(mounts=("~/data:/data:ro",), options=("--shm-size=8g",))
    assert run(s, gpus=[0, 1], container_home="/home/u/run/tasks/worker-1/home") == [
        "docker", "run", "--rm", "--init", "--name", "dl-x-worker-1-0",
        "--label", f"distlaunch.run={RUN}", "--label", "distlaunch.task=worker:1",
        "--network", "host", "--ipc", "host", "--user", "1000:1000",
        "-e", "TF_CONFIG", "-e", "DISTLAUNCH_RUN_ID", "-e", "CUDA_VISIBLE_DEVICES",
        "-e", "HOME=/home/u/run/tasks/worker-1/home", "-e", "TINI_KILL_PROCESS_GROUP=1",
        "-v", "/home/u/code:/home/u/code", "-v", "/home/u/out:/home/u/out", "-v", "/home/u/data:/data:ro",
        "-w", "/home/u/code", "--gpus", '"device=0,1"', "--pull", "missing", "--shm-size=8g",
        IMAGE, "/bin/sh", "-c", "python3 train.py"]


def test_a_stop_reaches_the_whole_process_group_of_a_command_that_is_not_execd() -> None:
    """docker's --init (tini) signals only its child, the shell of ``a && b`` or a pipe, unless told to
    signal the child's process group; podman's (catatonit) has no such variable: a second init with
    -g runs the command."""
    docker = run(spec())
    assert pairs(docker, "-e")[-1] == "TINI_KILL_PROCESS_GROUP=1" and "--init" in docker
    assert docker[docker.index(IMAGE) + 1:] == ["/bin/sh", "-c", "python3 train.py"]
    podman = run(spec("podman"))
    assert "--init" in podman and "TINI_KILL_PROCESS_GROUP=1" not in pairs(podman, "-e")
    assert podman[podman.index(IMAGE) + 1:] == ["/run/podman-init", "-g", "--", "/bin/sh", "-c", "python3 train.py"]
    for other in ("apptainer", "enroot", "pyxis"):  # the client's own children: the group's signals reach them
        argv = run(spec(other, image="/i/tf.sif" if other == "apptainer" else IMAGE))
        assert "TINI_KILL_PROCESS_GROUP=1" not in argv and "/run/podman-init" not in argv


def test_home_inside_is_the_given_directory_unless_the_task_sets_home() -> None:
    home = "/runs/r/tasks/worker-1/home"
    assert "HOME=" + home in pairs(run(spec("podman"), container_home=home), "-e")
    assert pairs(run(spec(), container_home=None), "-e") == ["TF_CONFIG", "DISTLAUNCH_RUN_ID",
                                                             "TINI_KILL_PROCESS_GROUP=1"]
    own = run(spec(), env_names=["HOME", "TF_CONFIG"], container_home=home)
    assert pairs(own, "-e")[:2] == ["HOME", "TF_CONFIG"] and "HOME=" + home not in own
    with pytest.raises(ValueError, match="absolute path without"):
        run(spec(), container_home="/a:b/home")


def test_env_goes_by_name_only() -> None:
    argv = run(spec(), env_names=["TF_CONFIG", "WANDB_API_KEY", "TF_CONFIG"])
    assert pairs(argv, "-e") == ["TF_CONFIG", "WANDB_API_KEY", "TINI_KILL_PROCESS_GROUP=1"]  # the init's own
    with pytest.raises(ValueError, match="not a plain name"):
        run(spec(), env_names=["WANDB_API_KEY=s3cret"])


def test_podman_uses_cdi_devices_and_no_user_or_gpus_when_not_given() -> None:
    argv = run(spec("podman", pull="never"), gpus=[2, 3])
    assert argv[:2] == ["podman", "run"] and "--gpus" not in argv
    assert pairs(argv, "--device") == ["nvidia.com/gpu=2", "nvidia.com/gpu=3"]
    assert pairs(argv, "--pull") == ["never"]
    bare = run(spec(), gpus=None, user=None)
    assert "--user" not in bare and "--gpus" not in bare and "--device" not in bare


def test_a_spec_mount_replaces_a_default_one_at_the_same_place() -> None:
    argv = run(spec(mounts=("/scratch/out:/home/u/out:rw",)))
    assert pairs(argv, "-v") == ["/home/u/code:/home/u/code", "/scratch/out:/home/u/out:rw"]


@pytest.mark.parametrize("kw", [{"mounts": ["relative/path"]}, {"mounts": ["/a:b"]}, {"workdir": "code"}])
def test_a_path_the_runtime_would_misread_is_refused(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="absolute path without"):
        run(spec(), **kw)


def test_docker_stop_kill_pid_list_remove() -> None:
    s = spec()
    assert adapter_for("docker").stop_argv(["n"], 10) == ["docker", "stop", "-t", "10", "n"]
    assert adapter_for("podman").stop_argv(["n", "m"], 2.5) == ["podman", "stop", "-t", "3", "n", "m"]
    assert adapter_for("docker").stop_argv([], 2) is None
    assert adapter_for("docker").exists_argv("n") == ["docker", "container", "inspect", "--format", "{{.Id}}", "n"]
    assert s.adapter.kill_argv("n") == ["docker", "kill", "-s", "KILL", "n"]
    assert adapter_for("podman").kill_argv("n", "TERM") == ["podman", "kill", "-s", "TERM", "n"]
    assert s.adapter.host_pid_argv("n") == ["docker", "inspect", "--format", "{{.State.Pid}}", "n"]
    assert adapter_for("docker").list_argv({crt.RUN_LABEL: RUN}) == [
        "docker", "ps", "-a", "--filter", f"label=distlaunch.run={RUN}", "--format", "{{.Names}}"]
    assert adapter_for("podman").list_argv(LABELS) == [
        "podman", "ps", "-a", "--filter", f"label=distlaunch.run={RUN}", "--filter", "label=distlaunch.task=worker:1",
        "--format", "{{.Names}}"]
    assert adapter_for("docker").remove_argv(["a", "b"]) == ["docker", "rm", "-f", "a", "b"]
    assert adapter_for("docker").remove_argv([]) is None


def test_docker_image_checks_and_tf_version() -> None:
    s = spec(options=("--entrypoint=",))
    assert s.adapter.image_present_argv(s) == ["docker", "image", "inspect", "--format", "{{.Id}}", IMAGE]
    assert s.adapter.pull_argv(s) == ["docker", "pull", IMAGE]
    assert s.adapter.image_digest_argv(s) == ["docker", "image", "inspect", "--format", "{{.Id}}", IMAGE]
    argv = crt.tf_version_argv(s, "python3")
    assert argv[:9] == ["docker", "run", "--rm", "--init", "--network", "host", "--pull", "never", "--entrypoint="]
    assert argv[9:12] == [IMAGE, "python3", "-c"] and "tf.__version__" in argv[12]
    named = crt.tf_version_argv(s, "python3", name="dl-r-preflight-7-1", labels={crt.RUN_LABEL: RUN})
    assert named[:8] == ["docker", "run", "--rm", "--init", "--name", "dl-r-preflight-7-1", "--label",
                         f"distlaunch.run={RUN}"]
    assert crt.parse_tf_version(f"== banner ==\n{crt.TF_VERSION_MARKER}2.15.1\n") == "2.15.1"
    assert crt.parse_tf_version("ModuleNotFoundError: No module named 'tensorflow'\n") is None


def test_docker_environ_numbers_the_gpus_from_zero_inside() -> None:
    environ = {"TF_CONFIG": "{}", "CUDA_VISIBLE_DEVICES": "2,3"}
    env = adapter_for("docker").environ(environ, env_names=["TF_CONFIG", "CUDA_VISIBLE_DEVICES"], gpus=[2, 3])
    assert env == {"TF_CONFIG": "{}", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert adapter_for("docker").environ(environ, env_names=["TF_CONFIG"], gpus=None) == environ


# ---- apptainer -------------------------------------------------------------------------------

def test_apptainer_exec_with_nv_binds_and_pwd_on_a_sif_file() -> None:
    s = spec("apptainer", image="/images/tf.sif", mounts=("/data:/data:ro",), options=("--writable-tmpfs",))
    assert run(s, gpus=[1]) == [
        "apptainer", "exec", "--nv", "--bind", "/home/u/code:/home/u/code", "--bind", "/home/u/out:/home/u/out",
        "--bind", "/data:/data:ro", "--pwd", "/home/u/code", "--writable-tmpfs", "/images/tf.sif",
        "/bin/sh", "-c", "python3 train.py"]
    assert "--nv" not in run(s, gpus=[])
    assert "--cleanenv" not in run(s)  # the task's environment must pass


def test_apptainer_environ_wins_over_the_image_and_keeps_physical_gpus() -> None:
    environ = {"TF_CONFIG": "{}", "CUDA_VISIBLE_DEVICES": "1", "OTHER": "x"}
    env = adapter_for("apptainer").environ(environ, env_names=["TF_CONFIG", "CUDA_VISIBLE_DEVICES"], gpus=[1])
    assert env["APPTAINERENV_TF_CONFIG"] == "{}" and env["APPTAINERENV_CUDA_VISIBLE_DEVICES"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "1" and "APPTAINERENV_OTHER" not in env


def test_apptainer_has_no_daemon_and_pulls_a_registry_image_into_a_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/u")
    s = spec("apptainer", image="tensorflow/tensorflow:2.15.0-gpu")
    for argv in (s.adapter.stop_argv(["n"], 5), s.adapter.kill_argv("n"), s.adapter.host_pid_argv("n"),
                 s.adapter.list_argv(LABELS), s.adapter.remove_argv(["n"]), s.adapter.image_digest_argv(s)):
        assert argv is None
    path = s.adapter.image_file(s)
    assert path.startswith("/home/u/.cache/distlaunch/images/tensorflow_tensorflow_2.15.0-gpu-")
    assert path.endswith(".sif")
    assert s.adapter.image_present_argv(s) == ["test", "-e", path]
    pull = s.adapter.pull_argv(s)
    assert pull is not None and pull[:2] == ["/bin/sh", "-c"] and "apptainer pull --force" in pull[2]
    assert pull[-2:] == [path, "docker://tensorflow/tensorflow:2.15.0-gpu"]
    assert run(s)[-4] == path
    file = spec("apptainer", image="/images/tf.sif")
    assert file.adapter.pull_argv(file) is None
    probe = crt.tf_version_argv(s, "python3")
    assert probe[:3] == ["apptainer", "exec", "--cleanenv"] and probe[3] == path


# ---- enroot ----------------------------------------------------------------------------------

def test_enroot_start_mounts_env_by_name_gpus_and_workdir() -> None:
    s = spec("enroot", image="/images/tf.sqsh", mounts=("/data:/data:ro",), options=("--rw",))
    assert run(s, gpus=[0, 1]) == [
        "enroot", "start",
        "--mount", "/home/u/code:/home/u/code:none:x-create=auto,rbind",
        "--mount", "/home/u/out:/home/u/out:none:x-create=auto,rbind",
        "--mount", "/data:/data:none:x-create=auto,rbind,ro",
        "--env", "TF_CONFIG", "--env", "DISTLAUNCH_RUN_ID", "--env", "NVIDIA_VISIBLE_DEVICES",
        "--env", "CUDA_VISIBLE_DEVICES", "--rw", "/images/tf.sqsh",
        "/bin/sh", "-c", 'cd "$1" && shift && exec "$@"', "distlaunch-workdir", "/home/u/code",
        "/bin/sh", "-c", "python3 train.py"]


def test_enroot_environ_names_the_gpus_it_exposes_or_none() -> None:
    s = spec("enroot")
    assert s.adapter.environ({}, env_names=[], gpus=[2, 3]) == {
        "NVIDIA_VISIBLE_DEVICES": "2,3", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert s.adapter.environ({}, env_names=[], gpus=None) == {"NVIDIA_VISIBLE_DEVICES": "void"}


def test_enroot_imports_a_registry_image_in_its_uri_form(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/u")
    s = spec("enroot")
    pull = s.adapter.pull_argv(s)
    assert pull is not None and 'enroot import -o "$tmp" "$2"' in pull[2]
    assert pull[-1] == "docker://nvcr.io#nvidia/tensorflow:24.01-tf2-py3"
    assert pull[-2].endswith(".sqsh") and s.adapter.image_present_argv(s) == ["test", "-e", pull[-2]]
    assert enroot_uri("ubuntu:22.04") == "docker://ubuntu:22.04"
    assert enroot_uri("localhost:5000/tf:1") == "docker://localhost:5000#tf:1"
    assert enroot_uri("dockerd://tf:1") == "dockerd://tf:1"
    assert s.adapter.stop_argv(["n"], 3) is None and adapter_for("enroot").list_argv(LABELS) is None


# ---- pyxis -----------------------------------------------------------------------------------

def test_pyxis_srun_flags() -> None:
    s = spec("pyxis", mounts=("/lustre/data:/data:ro",), options=("--container-writable",))
    assert run(s, gpus=[0], node="node07") == [
        "srun", "--overlap", "--nodes=1", "--ntasks=1", "--quiet", "--kill-on-bad-exit=0", "--export=ALL",
        "--nodelist=node07", "--job-name=dl-x-worker-1-0",
        "--container-image=nvcr.io#nvidia/tensorflow:24.01-tf2-py3",
        "--container-mounts=/home/u/code:/home/u/code,/home/u/out:/home/u/out,/lustre/data:/data:ro",
        "--container-workdir=/home/u/code",
        "--container-env=TF_CONFIG,DISTLAUNCH_RUN_ID,NVIDIA_VISIBLE_DEVICES,CUDA_VISIBLE_DEVICES",
        "--container-writable", "/bin/sh", "-c", "python3 train.py"]


def test_pyxis_checks_by_starting_the_image_and_has_nothing_to_pull_or_stop() -> None:
    s = spec("pyxis", image="docker://tensorflow/tensorflow:2.15.0")
    assert s.adapter.image_present_argv(s, node="n1")[-2:] == [
        "--container-image=tensorflow/tensorflow:2.15.0", "true"]
    assert "--nodelist=n1" in s.adapter.image_present_argv(s, node="n1")
    assert s.adapter.pull_argv(s) is None and s.adapter.image_digest_argv(s) is None
    assert s.adapter.stop_argv(["n"], 5) is None and s.adapter.kill_argv("n") is None
    assert s.adapter.host_pid_argv("n") is None
    file = spec("pyxis", image="/sq/tf.sqsh")
    assert file.adapter.image_present_argv(file) == ["test", "-e", "/sq/tf.sqsh"]
    probe = crt.tf_version_argv(s, "python")
    assert probe[0] == "srun" and "--container-image=tensorflow/tensorflow:2.15.0" in probe
    assert probe[-3:-1] == ["python", "-c"]
