"""`distlaunch export tfjob`: the manifest's fields, its YAML, and the TFJob CRD's own schema."""

from __future__ import annotations

import copy
import dataclasses
import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from launcher.agent.containerrt import ContainerSpec
from launcher.cli import main
from launcher.errors import ProfileError, UserError
from launcher.export.tfjob import RESTART_POLICIES, job_name, tfjob_manifest, tfjob_yaml
from launcher.model import RESTART_POLICIES as PROFILE_RESTART_POLICIES
from launcher.model import (
    HostConfig,
    LogPolicy,
    MetricsConfig,
    NotifyConfig,
    Profile,
    RoleConfig,
    SshSettings,
    TaskDefaults,
)
from launcher.plan import is_secret
from launcher.profile.reader import load_profile

REPO_ROOT = Path(__file__).resolve().parents[3]
SHARED_CRD = REPO_ROOT.parent / "shared" / "data" / "tfjob-crd-v1.yaml"
BUNDLED_CRD = REPO_ROOT / "tests" / "data" / "tfjob-crd-v1.yaml"
SHIPPED_PROFILES = sorted((REPO_ROOT / "cluster_profiles").glob("*.toml"))
IMAGE = "registry.example/train:1.0"


def crd_path() -> Path:
    """The CRD beside the repository (CI clones shared/ next to it), else the copy in tests/data."""
    return SHARED_CRD if SHARED_CRD.is_file() else BUNDLED_CRD


def strict(schema: Any) -> Any:
    """The schema with unknown fields refused where the API server would silently prune them.

    A misspelt field would otherwise pass validation and be dropped on `kubectl apply`.
    """
    if isinstance(schema, dict):
        out = {key: strict(value) for key, value in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(item) for item in schema]
    return schema


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    crd = yaml.safe_load(crd_path().read_text(encoding="utf-8"))
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["spec"]["group"] == "kubeflow.org"
    assert crd["spec"]["names"]["kind"] == "TFJob"
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1"
    schema = strict(version["schema"]["openAPIV3Schema"])
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def schema_errors(validator: jsonschema.Draft7Validator, manifest: dict[str, Any]) -> list[str]:
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(manifest)]


def settings(command: str = "{python} train.py", **overrides: Any) -> TaskDefaults:
    return TaskDefaults(command=command, **overrides)


def role(name: str, count: int = 1, *, hosts: tuple[str, ...] = ("gpu1",), port: int | None = None,
         gpus_per_task: int = 0, task: TaskDefaults | None = None) -> RoleConfig:
    return RoleConfig(name=name, count=count, hosts=hosts, port=port, gpus_per_task=gpus_per_task,
                      settings=task or settings())


def profile(roles: list[RoleConfig], *, name: str = "mnist-ps", success_policy: str = "chief",
            metrics: MetricsConfig | None = None) -> Profile:
    hosts = {
        "gpu1": HostConfig(name="gpu1", address="10.0.0.11", gpus=(0, 1),
                           ssh=SshSettings(user="alice", identity_file="~/.ssh/id_ed25519")),
        "local": HostConfig(name="local", address="localhost", transport="local"),
    }
    return Profile(
        path=Path("/profiles/p.toml"), name=name, strategy="parameter_server",
        success_policy=success_policy,  # type: ignore[arg-type]
        backoff_limit=7, orphan_grace_seconds=45.0, sample_interval=0.5, defaults=settings(),
        hosts=hosts, roles={r.name: r for r in roles}, metrics=metrics or MetricsConfig(),
    )


def ps_profile() -> Profile:
    worker = settings("{python} train.py --role {role}", python="/opt/tf/bin/python", workdir="/srv/code",
                      env={"TF_CPP_MIN_LOG_LEVEL": "2"}, restart="never", max_restarts=5, grace_seconds=2.5)
    return profile([
        role("chief", port=2240),
        role("ps", 2, hosts=("gpu1", "local"), port=2300, task=settings(restart="always")),
        role("worker", 3, gpus_per_task=1, task=worker),
        role("evaluator", task=settings(restart="exit-code")),
    ], metrics=MetricsConfig(step=r"step (\d+)"))


def container(manifest: dict[str, Any], replica_type: str) -> dict[str, Any]:
    return manifest["spec"]["tfReplicaSpecs"][replica_type]["template"]["spec"]["containers"][0]


def k8s_expand(text: str, env: dict[str, str]) -> str:
    """What the kubelet does to command and env values: $$ -> $, $(NAME) -> its value if defined."""
    out: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif (m := re.match(r"\$\(([^)]*)\)", text[i:])) and m.group(1) in env:
            out.append(env[m.group(1)])
            i += m.end()
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


# --- the fields ---------------------------------------------------------------------------------

def test_ps_profile_has_one_replica_spec_per_role_with_the_crd_keys() -> None:
    manifest = tfjob_manifest(ps_profile(), image=IMAGE, namespace="ml-team")
    assert manifest["apiVersion"] == "kubeflow.org/v1"
    assert manifest["kind"] == "TFJob"
    assert manifest["metadata"] == {"name": "mnist-ps", "namespace": "ml-team"}
    replicas = manifest["spec"]["tfReplicaSpecs"]
    assert list(replicas) == ["Chief", "PS", "Worker", "Evaluator"]
    assert {k: v["replicas"] for k, v in replicas.items()} == {
        "Chief": 1, "PS": 2, "Worker": 3, "Evaluator": 1}
    assert {k: v["restartPolicy"] for k, v in replicas.items()} == {
        "Chief": "OnFailure", "PS": "Always", "Worker": "Never", "Evaluator": "ExitCode"}


def test_every_restart_policy_of_a_profile_has_its_tfjob_restart_policy() -> None:
    """A value added to model.RestartPolicy needs its entry in tfjob.RESTART_POLICIES (else a KeyError
    at export time), one of the values the operator knows."""
    assert set(RESTART_POLICIES) == set(PROFILE_RESTART_POLICIES)
    assert set(RESTART_POLICIES.values()) <= {"Never", "OnFailure", "Always", "ExitCode"}


def test_container_is_named_tensorflow_and_carries_image_command_env_port_gpus() -> None:
    manifest = tfjob_manifest(ps_profile(), image=IMAGE, namespace=None)
    assert "namespace" not in manifest["metadata"]
    worker = container(manifest, "Worker")
    assert worker["name"] == "tensorflow"
    assert worker["image"] == IMAGE
    assert worker["command"] == ["/bin/sh", "-c", "/opt/tf/bin/python train.py --role worker"]
    assert worker["env"] == [{"name": "TF_CPP_MIN_LOG_LEVEL", "value": "2"}]
    assert worker["workingDir"] == "/srv/code"
    assert worker["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
    assert worker["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    pod = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 3  # grace_seconds 2.5, rounded up

    ps = container(manifest, "PS")
    assert ps["command"] == ["/bin/sh", "-c", "python3 train.py"]  # no python given: python3
    assert ps["ports"] == [{"name": "tfjob-port", "containerPort": 2300}]
    assert "resources" not in ps
    assert container(manifest, "Chief")["ports"][0]["containerPort"] == 2240


def test_no_tf_config_in_the_manifest_and_the_header_says_why() -> None:
    text = tfjob_yaml(ps_profile(), image=IMAGE, namespace=None)
    manifest = yaml.safe_load(text)
    for replica in manifest["spec"]["tfReplicaSpecs"].values():
        names = [e["name"] for e in replica["template"]["spec"]["containers"][0].get("env", [])]
        assert "TF_CONFIG" not in names
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert any("TF_CONFIG is not set here" in line for line in header)
    assert any("training operator generates it" in line for line in header)


def test_run_policy_cleans_every_pod_and_keeps_the_backoff_limit() -> None:
    spec = tfjob_manifest(ps_profile(), image=IMAGE, namespace=None)["spec"]
    assert spec["runPolicy"] == {"cleanPodPolicy": "All", "backoffLimit": 7}
    assert "successPolicy" not in spec  # chief: the operator's default


def test_all_workers_success_policy() -> None:
    prof = profile([role("worker", 2)], success_policy="all_workers")
    assert tfjob_manifest(prof, image=IMAGE, namespace=None)["spec"]["successPolicy"] == "AllWorkers"


def test_relative_workdir_is_left_out_and_noted() -> None:
    prof = profile([role("worker", task=settings(workdir=".."))])
    text = tfjob_yaml(prof, image=IMAGE, namespace=None)
    assert "workingDir" not in container(yaml.safe_load(text), "Worker")
    assert "# workdir of worker (..) is relative to the profile file" in text


def test_secret_env_comes_from_a_secret_and_its_value_is_never_written() -> None:
    env = {"API_TOKEN": "tok-value-1", "db_password": "pw-value-2", "AWS_SECRET_ACCESS_KEY": "sk-value-3",
           "PLAIN": "visible"}
    prof = profile([role("worker", 2, task=settings(env=env))], name="mnist-ps")
    text = tfjob_yaml(prof, image=IMAGE, namespace="ml")
    for value in ("tok-value-1", "pw-value-2", "sk-value-3"):
        assert value not in text
    entries = {e["name"]: e for e in container(yaml.safe_load(text), "Worker")["env"]}
    for name in ("API_TOKEN", "db_password", "AWS_SECRET_ACCESS_KEY"):
        assert entries[name] == {"name": name,
                                 "valueFrom": {"secretKeyRef": {"name": "mnist-ps-secrets", "key": name}}}
    assert entries["PLAIN"] == {"name": "PLAIN", "value": "visible"}
    assert ("#   kubectl create secret generic mnist-ps-secrets -n ml --from-literal=API_TOKEN=... "
            "--from-literal=db_password=... --from-literal=AWS_SECRET_ACCESS_KEY=...") in text


def test_what_tfjob_cannot_express_is_listed_in_the_header() -> None:
    text = tfjob_yaml(ps_profile(), image=IMAGE, namespace=None)
    header = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    for expected in ("hosts.gpu1: ssh alice@10.0.0.11:22 and its [ssh] settings, gpus = [0, 1]",
                     "hosts.local: local transport",
                     "host pinning: chief on gpu1; ps on gpu1, local; worker on gpu1",
                     "max_restarts per task (chief 3, ps 3, worker 5, evaluator 3)",
                     "strategy = parameter_server: distlaunch restarts the chief with a failed ps",
                     "orphan_grace_seconds = 45", "sample_interval = 0.5", "[metrics] regexes"):
        assert expected in header
    assert "10.0.0.11" not in body and "alice" not in body


def test_a_notify_command_is_listed_without_its_text() -> None:
    hook = "curl -s https://hooks.example.com/services/T0/B0/s3cret-token"
    text = tfjob_yaml(dataclasses.replace(ps_profile(), notify=NotifyConfig(command=hook)), image=IMAGE,
                      namespace=None)
    assert "# " in text and "[notify] command: run by the launcher" in text
    assert "s3cret-token" not in text


def test_log_policies_and_on_nan_stop_are_listed() -> None:
    profile = ps_profile()
    worker = profile.roles["worker"]
    roles = dict(profile.roles, worker=dataclasses.replace(
        worker, settings=dataclasses.replace(worker.settings, on_nan="stop")))
    profile = dataclasses.replace(profile, roles=roles,
                                  log_policies=(LogPolicy("CUDA_ERROR_OUT_OF_MEMORY", "no_retry"),))
    text = tfjob_yaml(profile, image=IMAGE, namespace=None)
    assert "#   - [[log_policies]] (1): matched by the launcher" in text
    assert '#   - on_nan = "stop": the launcher stops the job' in text
    assert "log_policies" not in tfjob_yaml(ps_profile(), image=IMAGE, namespace=None)


# --- command placeholders ----------------------------------------------------------------------

def test_per_replica_placeholders_are_filled_by_kubernetes_in_each_pod() -> None:
    command = ("{python} t.py --role {role} --index {index} --task {task} --host {host} --port {port} "
               "--dir {run_dir}")
    prof = profile([role("worker", 4, port=2300, task=settings(command))])
    manifest = tfjob_manifest(prof, image=IMAGE, namespace=None)
    worker = container(manifest, "Worker")
    assert worker["command"][2] == ("python3 t.py --role worker --index $(DISTLAUNCH_TASK_INDEX) "
                                    "--task worker:$(DISTLAUNCH_TASK_INDEX) --host $(DISTLAUNCH_HOST) "
                                    "--port 2300 --dir /distlaunch-run")
    assert worker["env"] == [
        {"name": "DISTLAUNCH_TASK_INDEX",
         "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['training.kubeflow.org/replica-index']"}}},
        {"name": "DISTLAUNCH_HOST", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    assert worker["volumeMounts"] == [{"name": "distlaunch-run", "mountPath": "/distlaunch-run"}]
    pod = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "distlaunch-run", "emptyDir": {}}]


def test_outputs_become_a_persistent_volume_claim_that_outlives_the_pods() -> None:
    prof = profile([role("worker", 2, task=settings("{python} t.py --ckpt {outputs}/ckpt --tmp {run_dir}"))])
    manifest = tfjob_manifest(prof, image=IMAGE, namespace=None)
    worker = container(manifest, "Worker")
    assert worker["command"][2] == "python3 t.py --ckpt /distlaunch-outputs/ckpt --tmp /distlaunch-run"
    assert worker["volumeMounts"] == [{"name": "distlaunch-run", "mountPath": "/distlaunch-run"},
                                      {"name": "distlaunch-outputs", "mountPath": "/distlaunch-outputs"}]
    claim = f"{manifest['metadata']['name']}-outputs"
    pod = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    assert pod["volumes"][1] == {"name": "distlaunch-outputs", "persistentVolumeClaim": {"claimName": claim}}


def test_a_command_without_per_replica_placeholders_gets_no_extra_env_or_volume() -> None:
    manifest = tfjob_manifest(profile([role("worker")]), image=IMAGE, namespace=None)
    worker = container(manifest, "Worker")
    assert "env" not in worker and "volumeMounts" not in worker
    assert "volumes" not in manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]


def test_the_shell_gets_the_command_as_written_after_kubernetes_expansion(tmp_path: Path) -> None:
    """Kubernetes expands $(VAR) and $$ in command and env; the export must survive both."""
    command = 'echo {task} {host} $GREETING ${GREETING} $(echo sub) $$; echo $(echo {index}) "$X"'
    env = {"X": "a $(GREETING) b $$"}
    prof = profile([role("worker", 3, task=settings(command, env=env))], name="demo")
    worker = container(tfjob_manifest(prof, image=IMAGE, namespace=None), "Worker")
    pod_env = {"DISTLAUNCH_TASK_INDEX": "2", "DISTLAUNCH_HOST": "demo-worker-2", "GREETING": "hi"}
    x_value = k8s_expand(next(e["value"] for e in worker["env"] if e["name"] == "X"), pod_env)
    assert x_value == env["X"]
    script = k8s_expand(worker["command"][2], {**pod_env, "X": x_value})
    run = subprocess.run(["/bin/sh", "-c", script],
                         env={"GREETING": "hi", "X": x_value, "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=10, check=True)
    first, second = run.stdout.splitlines()
    *words, pid = first.split()
    assert words == ["worker:2", "demo-worker-2", "hi", "hi", "sub"]
    assert pid.isdigit()  # $$ reached the shell, which printed its pid
    assert second == "2 a $(GREETING) b $$"


# --- names and input checks --------------------------------------------------------------------

@pytest.mark.parametrize(("name", "expected"), [
    ("mnist-ps", "mnist-ps"), ("My_Profile.v2", "my-profile-v2"), ("2fast", "job-2fast"), ("__", "job"),
])
def test_job_name_is_a_dns_label(name: str, expected: str) -> None:
    assert job_name(profile([role("worker", 2)], name=name)) == expected


def test_a_long_name_leaves_room_for_pod_names() -> None:
    prof = profile([role("worker", 12), role("evaluator")], name="x" * 100)
    name = job_name(prof)
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name)
    assert len(f"{name}-evaluator-0") <= 63 and len(f"{name}-worker-11") <= 63


@pytest.mark.parametrize("namespace", ["ML_team", "-x", "a" * 64, ""])
def test_a_bad_namespace_is_a_user_error(namespace: str) -> None:
    with pytest.raises(UserError, match="--namespace"):
        tfjob_manifest(ps_profile(), image=IMAGE, namespace=namespace)


@pytest.mark.parametrize("image", ["", "my image"])
def test_a_bad_image_is_a_user_error(image: str) -> None:
    with pytest.raises(UserError, match="--image"):
        tfjob_manifest(ps_profile(), image=image, namespace=None)


# --- YAML and the CRD schema -------------------------------------------------------------------

def constructed_profiles() -> list[Profile]:
    return [
        ps_profile(),
        profile([role("worker", 2, task=settings("{python} t.py {task} {host} {run_dir}"))],
                success_policy="all_workers"),
        profile([role("chief", task=settings(env={"HF_TOKEN": "x"}))]),
    ]


@pytest.mark.parametrize("prof", constructed_profiles(), ids=["ps", "workers", "chief-only"])
def test_yaml_loads_back_as_the_manifest_and_validates(prof: Profile, validator: Any) -> None:
    text = tfjob_yaml(prof, image=IMAGE, namespace="ml")
    assert text.startswith("# Kubeflow TFJob")
    manifest = tfjob_manifest(prof, image=IMAGE, namespace="ml")
    assert yaml.safe_load(text) == manifest
    assert schema_errors(validator, manifest) == []


@pytest.mark.parametrize(("path", "bad_value"), [
    (("spec", "tfReplicaSpecs", "Worker", "replicas"), "two"),
    (("spec", "tfReplicaSpecs", "Worker", "restartPolicy"), 5),
    (("spec", "runPolicy", "backoffLimit"), "many"),
    (("spec", "tfReplicaSpecs", "Worker", "template", "spec", "containers"), [{"image": IMAGE}]),
    (("spec", "tfReplicaSpecs", "Worker", "template", "spec", "containers", 0, "workdir"), "/srv"),
])
def test_the_schema_catches_a_broken_manifest(path: tuple[Any, ...], bad_value: Any, validator: Any) -> None:
    manifest = copy.deepcopy(tfjob_manifest(ps_profile(), image=IMAGE, namespace=None))
    target: Any = manifest
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = bad_value
    assert schema_errors(validator, manifest) != []


def test_the_bundled_crd_is_the_shared_one() -> None:
    if not SHARED_CRD.is_file():
        pytest.skip(f"no shared CRD at {SHARED_CRD}; the tests use {BUNDLED_CRD}")
    assert BUNDLED_CRD.read_bytes() == SHARED_CRD.read_bytes()


@pytest.mark.parametrize("path", SHIPPED_PROFILES, ids=[p.name for p in SHIPPED_PROFILES])
def test_every_shipped_profile_exports_a_valid_tfjob(path: Path, validator: Any) -> None:
    prof = load_profile(path)
    text = tfjob_yaml(prof, image=IMAGE, namespace="ml")
    manifest = yaml.safe_load(text)
    assert manifest == tfjob_manifest(prof, image=IMAGE, namespace="ml")
    assert schema_errors(validator, manifest) == []
    replicas = manifest["spec"]["tfReplicaSpecs"]
    expected = {"chief": "Chief", "ps": "PS", "worker": "Worker", "evaluator": "Evaluator"}
    assert {k: v["replicas"] for k, v in replicas.items()} == {expected[r.name]: r.count
                                                              for r in prof.roles.values()}
    for replica_type, replica in replicas.items():
        main_container = container(manifest, replica_type)
        assert main_container["name"] == "tensorflow"
        assert main_container["command"][:2] == ["/bin/sh", "-c"]
        assert "{" not in re.sub(r"\$\{[^}]*\}", "", main_container["command"][2])  # no placeholder left
        assert replica["restartPolicy"] in {"Never", "OnFailure", "Always", "ExitCode"}
    for r in prof.roles.values():
        for name, value in r.settings.env.items():
            if is_secret(name) and value:
                assert value not in text


def test_shipped_profiles_exist() -> None:
    assert len(SHIPPED_PROFILES) >= 4


# --- through the CLI ---------------------------------------------------------------------------

def test_cli_writes_the_manifest_to_a_file(tmp_path: Path) -> None:
    src = REPO_ROOT / "cluster_profiles" / "local.toml"
    out = tmp_path / "job.yaml"
    assert main(["export", "tfjob", str(src), "--image", IMAGE, "--namespace", "ml", "-o", str(out)]) == 0
    loaded = yaml.safe_load(out.read_text(encoding="utf-8"))
    assert loaded == tfjob_manifest(load_profile(src), image=IMAGE, namespace="ml")
    assert loaded["metadata"]["namespace"] == "ml"


def test_cli_prints_to_stdout_without_o(capsys: pytest.CaptureFixture[str]) -> None:
    src = REPO_ROOT / "cluster_profiles" / "local.toml"
    assert main(["export", "tfjob", str(src)]) == 0
    loaded = yaml.safe_load(capsys.readouterr().out)
    assert container(loaded, next(iter(loaded["spec"]["tfReplicaSpecs"])))["image"] == \
        "tensorflow/tensorflow:latest"


def test_cli_reports_a_profile_error_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('name = "x"\n[roles.master]\ncount = 1\n', encoding="utf-8")
    out = tmp_path / "job.yaml"
    assert main(["export", "tfjob", str(bad), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bad.toml" in err
    assert not out.exists()


def test_cli_reports_an_unwritable_output_in_one_line(tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    src = REPO_ROOT / "cluster_profiles" / "local.toml"
    out = tmp_path / "missing-dir" / "job.yaml"
    assert main(["export", "tfjob", str(src), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "missing-dir" in err


# --- the profile's container --------------------------------------------------------------------

def container_profile() -> Profile:
    tf = ContainerSpec(image="team/tf:2.16", mounts=("/data:/data:ro",), pull="always")
    return profile([
        role("chief", task=settings(container=tf)),
        role("ps", task=settings(container=ContainerSpec(image="docker://nvcr.io#nvidia/tf:24.01", runtime="podman"))),
        role("worker", 2),
    ])


def test_each_role_runs_its_container_image_with_its_pull_policy(validator: Any) -> None:
    manifest = tfjob_manifest(container_profile(), image=None, namespace=None)
    assert container(manifest, "Chief")["image"] == "team/tf:2.16"
    assert container(manifest, "Chief")["imagePullPolicy"] == "Always"
    assert container(manifest, "PS")["image"] == "nvcr.io/nvidia/tf:24.01"
    assert container(manifest, "PS")["imagePullPolicy"] == "IfNotPresent"
    assert container(manifest, "Worker")["image"] == "tensorflow/tensorflow:latest"
    assert "imagePullPolicy" not in container(manifest, "Worker")
    assert schema_errors(validator, manifest) == []
    text = tfjob_yaml(container_profile(), image=None, namespace=None)
    assert "The images (chief: team/tf:2.16; ps: nvcr.io/nvidia/tf:24.01; worker: tensorflow/tensorflow:latest)" \
        in text
    assert "container runtime docker/podman, mounts (chief, ps): the kubelet runs the pods" in text


def test_an_explicit_image_wins_over_the_profile() -> None:
    manifest = tfjob_manifest(container_profile(), image=IMAGE, namespace=None)
    assert {container(manifest, t)["image"] for t in ("Chief", "PS", "Worker")} == {IMAGE}


def test_an_image_file_cannot_go_to_kubernetes() -> None:
    sif = ContainerSpec(image="/images/tf.sif", runtime="apptainer")
    with pytest.raises(ProfileError, match=r"roles.worker runs in '/images/tf.sif', which Kubernetes cannot pull; "
                                           "give a registry image with --image"):
        tfjob_manifest(profile([role("worker", task=settings(container=sif))]), image=None, namespace=None)
    assert tfjob_manifest(profile([role("worker", task=settings(container=sif))]), image=IMAGE, namespace=None)


def test_cli_uses_the_profiles_image_unless_image_is_given(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "p.toml"
    src.write_text('[defaults]\ncommand = "{python} t.py"\ncontainer = { image = "team/tf:2.16" }\n'
                   '[roles.worker]\ncount = 2\n', encoding="utf-8")
    assert main(["export", "tfjob", str(src)]) == 0
    assert container(yaml.safe_load(capsys.readouterr().out), "Worker")["image"] == "team/tf:2.16"
    assert main(["export", "tfjob", str(src), "--image", IMAGE]) == 0
    assert container(yaml.safe_load(capsys.readouterr().out), "Worker")["image"] == IMAGE
