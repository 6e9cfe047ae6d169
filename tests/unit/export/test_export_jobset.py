"""`distlaunch export jobset`: the manifest against the JobSet CRD's own schema, each pod's
TF_CONFIG as Kubernetes expands it, and distlaunch's failure semantics as JobSet policies."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from launcher.cli import main
from launcher.errors import UserError
from launcher.export.jobset import INDEX_ANNOTATION, QUEUE_LABEL, build_jobset, jobset_name, jobset_yaml
from launcher.model import Profile
from launcher.profile.reader import load_profile
from tests.unit.export.test_export_tfjob import (
    IMAGE,
    REPO_ROOT,
    SHIPPED_PROFILES,
    k8s_expand,
    profile,
    ps_profile,
    role,
    schema_errors,
    settings,
    strict,
)

SHARED_CRD = REPO_ROOT.parent / "shared" / "data" / "jobset-crd-v1alpha2.yaml"
BUNDLED_CRD = REPO_ROOT / "tests" / "data" / "jobset-crd-v1alpha2.yaml.gz"


def crd_text() -> str:
    bundled = gzip.decompress(BUNDLED_CRD.read_bytes()).decode("utf-8")
    if SHARED_CRD.is_file():
        assert SHARED_CRD.read_text(encoding="utf-8") == bundled, "tests/data's JobSet CRD differs from shared/"
    return bundled


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    crd = yaml.safe_load(crd_text())
    assert crd["spec"]["group"] == "jobset.x-k8s.io" and crd["spec"]["names"]["kind"] == "JobSet"
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1alpha2"
    schema = strict(version["schema"]["openAPIV3Schema"])
    jsonschema.Draft7Validator.check_schema(schema)
    return jsonschema.Draft7Validator(schema)


def manifest(p: Profile, **kwargs: Any) -> dict[str, Any]:
    return build_jobset(p, image=kwargs.pop("image", IMAGE), namespace=kwargs.pop("namespace", None),
                        **kwargs).manifest


def replicated(m: dict[str, Any], name: str) -> dict[str, Any]:
    [entry] = [r for r in m["spec"]["replicatedJobs"] if r["name"] == name]
    return entry


def pod_env(m: dict[str, Any], name: str, index: int) -> dict[str, str]:
    """A pod's env as the kubelet makes it: the index from the annotation, each value expanded in order."""
    container = replicated(m, name)["template"]["spec"]["template"]["spec"]["containers"][0]
    env: dict[str, str] = {}
    for item in container["env"]:
        if "value" in item:
            env[item["name"]] = k8s_expand(item["value"], env)
        elif item["valueFrom"].get("fieldRef", {}).get("fieldPath") == f"metadata.annotations['{INDEX_ANNOTATION}']":
            env[item["name"]] = str(index)
    return env


def test_every_shipped_profile_exports_a_jobset_the_crd_accepts(validator: jsonschema.Draft7Validator) -> None:
    for path in SHIPPED_PROFILES:
        p = load_profile(path)
        if set(p.roles) - {"chief", "ps", "worker", "evaluator"}:
            continue
        for kwargs in ({}, {"namespace": "ml", "queue": "team-a"}):
            m = manifest(p, **kwargs)
            assert schema_errors(validator, m) == [], path.name
        text = jobset_yaml(build_jobset(p, image=IMAGE, namespace=None))
        assert text.startswith("# Kubernetes JobSet") and yaml.safe_load(text)["kind"] == "JobSet"


def test_a_misspelt_field_is_refused_by_the_strict_schema(validator: jsonschema.Draft7Validator) -> None:
    m = manifest(ps_profile())
    m["spec"]["replicatedJobs"][0]["replica"] = 1
    assert schema_errors(validator, m)


def test_each_pods_tf_config_names_every_task_by_its_stable_pod_name_and_its_own_index() -> None:
    m = manifest(ps_profile())
    job = m["metadata"]["name"]
    assert m["spec"]["network"] == {"enableDNSHostnames": True, "subdomain": job, "publishNotReadyAddresses": True}
    config = json.loads(pod_env(m, "worker", 2)["TF_CONFIG"])
    assert config["task"] == {"type": "worker", "index": 2}
    assert config["cluster"] == {
        "chief": [f"{job}-chief-0-0.{job}:2240"],
        "ps": [f"{job}-ps-0-0.{job}:2300", f"{job}-ps-0-1.{job}:2300"],
        "worker": [f"{job}-worker-0-{i}.{job}:2222" for i in range(3)],
    }
    evaluator = json.loads(pod_env(m, "evaluator", 0)["TF_CONFIG"])
    assert "evaluator" not in evaluator["cluster"] and evaluator["task"] == {"type": "evaluator", "index": 0}
    for entry in m["spec"]["replicatedJobs"]:
        job_spec = entry["template"]["spec"]
        assert entry["replicas"] == 1 and job_spec["completionMode"] == "Indexed"
        assert job_spec["completions"] == job_spec["parallelism"]


def test_per_replica_placeholders_and_literal_dollars_reach_the_shell_as_written() -> None:
    worker = settings("{python} train.py --task {task} --i {index} --cost $HOME", python="python3")
    m = manifest(profile([role("worker", 2, task=worker)]))
    container = replicated(m, "worker")["template"]["spec"]["template"]["spec"]["containers"][0]
    command = k8s_expand(container["command"][2], pod_env(m, "worker", 1))
    assert command == "python3 train.py --task worker:1 --i 1 --cost $HOME"


def test_failure_semantics_become_job_and_jobset_policies() -> None:
    p = ps_profile()  # chief on-failure, ps always, worker never, evaluator exit-code; backoff_limit 7
    m = manifest(p)
    policy = m["spec"]["failurePolicy"]
    assert policy["maxRestarts"] == 7
    assert {"name": "never-restarted", "action": "FailJobSet", "targetReplicatedJobs": ["worker"]} in policy["rules"]
    assert {"name": "permanent-exit-code", "action": "FailJobSet",
            "onJobFailureReasons": ["PodFailurePolicy"]} in policy["rules"]
    worker = replicated(m, "worker")["template"]["spec"]
    assert worker["backoffLimit"] == 0 and worker["template"]["spec"]["restartPolicy"] == "Never"
    chief = replicated(m, "chief")["template"]["spec"]
    assert chief["template"]["spec"]["restartPolicy"] == "OnFailure" and chief["backoffLimit"] == 3
    evaluator = replicated(m, "evaluator")["template"]["spec"]
    [rule] = evaluator["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailJob" and rule["onExitCodes"]["values"] == list(range(1, 128))
    assert evaluator["template"]["spec"]["restartPolicy"] == "Never"


def test_under_multi_worker_mirrored_one_failed_worker_restarts_the_set() -> None:
    p = dataclasses.replace(profile([role("worker", 2, task=settings(restart="on-failure", max_restarts=4))]),
                            strategy="multi_worker_mirrored")
    worker = replicated(manifest(p), "worker")["template"]["spec"]
    assert worker["backoffLimit"] == 0 and worker["template"]["spec"]["restartPolicy"] == "Never"
    assert manifest(p)["spec"]["failurePolicy"] == {"maxRestarts": 7}


def test_success_is_the_chiefs_else_worker_zero_else_every_worker() -> None:
    assert manifest(ps_profile())["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["chief"]}
    no_chief = manifest(profile([role("ps"), role("worker", 3)]))
    assert no_chief["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["worker"]}
    assert replicated(no_chief, "worker")["template"]["spec"]["successPolicy"] == {"rules": [{"succeededIndexes": "0"}]}
    every = manifest(profile([role("chief"), role("worker", 3)], success_policy="all_workers"))
    assert every["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["chief", "worker"]}
    assert "successPolicy" not in replicated(every, "worker")["template"]["spec"]


def test_a_queue_labels_it_for_kueue_and_suspends_it() -> None:
    m = manifest(ps_profile(), queue="team-a", namespace="ml")
    assert m["metadata"] == {"name": "mnist-ps", "namespace": "ml", "labels": {QUEUE_LABEL: "team-a"}}
    assert m["spec"]["suspend"] is True
    assert "suspend" not in manifest(ps_profile())["spec"]
    assert manifest(ps_profile(), suspend=True)["spec"]["suspend"] is True
    with pytest.raises(UserError, match="--queue"):
        manifest(ps_profile(), queue="Team A")


def test_pod_hostnames_fit_a_dns_label() -> None:
    p = profile([role("worker", 120)], name="A" * 80)
    name = jobset_name(p)
    assert len(f"{name}-worker-0-119") <= 63 and name[0].isalpha()


def test_secret_env_comes_from_a_secret_and_its_value_is_never_written() -> None:
    p = profile([role("worker", task=settings(env={"WANDB_API_KEY": "s3cr3t", "A": "1"}))])
    export = build_jobset(p, image=IMAGE, namespace=None)
    assert "s3cr3t" not in jobset_yaml(export) and export.secret_env == ("WANDB_API_KEY",)


def test_the_cli_writes_it_and_a_bad_namespace_is_one_line_exit_2(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "js.yaml"
    assert main(["export", "jobset", str(REPO_ROOT / "cluster_profiles" / "local.toml"), "-o", str(out)]) == 0
    assert yaml.safe_load(out.read_text())["kind"] == "JobSet"
    assert main(["export", "jobset", str(REPO_ROOT / "cluster_profiles" / "local.toml"), "--namespace", "Bad_NS"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--namespace 'Bad_NS'" in err[-1]
