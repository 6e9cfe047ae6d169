"""A profile as a Kubernetes ``JobSet`` (``jobset.x-k8s.io/v1alpha2``) manifest.

JobSet runs one indexed Job per role and, with ``network.enableDNSHostnames``, gives every pod a
stable name: ``<jobset>-<role>-0-<index>.<jobset>``. Those names are known when the manifest is
written, so unlike a TFJob (whose operator writes TF_CONFIG) the manifest carries each pod's
``TF_CONFIG``: the cluster is spelt out per role, and the task index comes from the pod's
``batch.kubernetes.io/job-completion-index`` annotation through Kubernetes' own ``$(VAR)``
expansion.

What distlaunch's failure semantics become (DESIGN.md section 6):

- a role with ``restart = "never"``: its Job has no retries and its failure fails the JobSet;
- ``exit-code``: exit codes 1-127 fail the Job at once (a ``podFailurePolicy``) and the JobSet
  with it; killed tasks (128 and up) are retried;
- ``on-failure`` / ``always``: the pod's container is restarted in place (same name, same
  address) up to ``max_restarts`` times per index; under multi_worker_mirrored a worker's Job
  has no retries, so one failed worker restarts the whole set, as collectives need;
- ``backoff_limit`` is ``failurePolicy.maxRestarts`` (each restart recreates every Job);
- the success policy is the JobSet's: the chief's Job (else worker index 0 through the worker
  Job's own ``successPolicy``), or every worker's; the JobSet controller then stops the Jobs
  still running, so a parameter server never outlives its job.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from launcher.errors import ProfileError, UserError
from launcher.export.tfjob import (
    CONTAINER_NAME,
    DEFAULT_PORT,
    DEFAULT_PYTHON,
    HOST_ENV,
    INDEX_ENV,
    MAX_NAME,
    OUTPUTS_MOUNT,
    PULL_POLICIES,
    check_image,
    check_namespace,
    escape_dollars,
    manifest_text,
    one_line,
    outputs_claim,
    pod_volumes,
    render_command,
    role_image,
    secret_name,
    write_manifest,
)
from launcher.model import ROLES, Profile, RoleConfig
from launcher.plan import is_secret

API_VERSION = "jobset.x-k8s.io/v1alpha2"
KIND = "JobSet"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PORT_NAME = "tf-port"
#: exit codes distlaunch's ``exit-code`` policy treats as permanent (>= 128: killed, retried)
PERMANENT_EXIT_CODES = list(range(1, 128))
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@dataclass(frozen=True)
class JobSetExport:
    """The manifest, plus the comment lines that say what was adapted or left out and why."""

    manifest: dict[str, Any]
    header: tuple[str, ...]
    secret_env: tuple[str, ...]


def jobset_name(profile: Profile) -> str:
    """The profile name as a DNS label short enough for every pod hostname derived from it
    (``<name>-<role>-0-<index>``, at most 63 characters)."""
    name = re.sub(r"[^a-z0-9]+", "-", profile.name.lower()).strip("-")
    if not name[:1].isalpha():
        name = f"job-{name}".rstrip("-")
    longest = max((len(f"-{role}-0-{max(cfg.count - 1, 0)}") for role, cfg in profile.roles.items()), default=0)
    return name[: MAX_NAME - longest].rstrip("-")


def pod_address(job: str, role: str, index: int, port: int) -> str:
    """Where a task is reached: its pod's stable hostname under the JobSet's subdomain."""
    return f"{job}-{role}-0-{index}.{job}:{port}"


def role_port(role: RoleConfig) -> int:
    return role.port if role.port is not None else DEFAULT_PORT


def cluster_spec(profile: Profile, job: str) -> dict[str, list[str]]:
    """TF_CONFIG's ``cluster``: every role but the evaluator, as distlaunch writes it."""
    return {name: [pod_address(job, name, i, role_port(role)) for i in range(role.count)]
            for name in ROLES if (role := profile.roles.get(name)) is not None and name != "evaluator"}


def tf_config_value(cluster: dict[str, list[str]], role: str) -> str:
    """The env value of TF_CONFIG for a role's pods; Kubernetes puts in the index at start."""
    text = json.dumps({"cluster": cluster, "task": {"type": role, "index": 0}}, separators=(",", ":"))
    escaped = escape_dollars(text)
    head, sep, _ = escaped.rpartition('"index":0}}')
    assert sep, "TF_CONFIG's task index is written last"
    return f'{head}"index":$({INDEX_ENV})}}}}'


def build_jobset(profile: Profile, *, image: str | None, namespace: str | None, queue: str | None = None,
                 suspend: bool = False) -> JobSetExport:
    if image is not None:
        check_image(image)
    if namespace is not None:
        check_namespace(namespace)
    if queue is not None and not _DNS_LABEL.fullmatch(queue):
        raise UserError(f"--queue {queue!r} is not a Kueue LocalQueue name; use lowercase letters, digits and '-'")
    unknown = sorted(set(profile.roles) - set(ROLES))
    if unknown:
        raise ProfileError(f"{profile.path}: role {unknown[0]!r} is not a TensorFlow task type; "
                           f"use one of {', '.join(ROLES)}")
    if not profile.roles:
        raise ProfileError(f"{profile.path}: no [roles.*] table; a JobSet needs at least one role")
    job = jobset_name(profile)
    cluster = cluster_spec(profile, job)
    replicated: list[dict[str, Any]] = []
    secrets: list[str] = []
    images: dict[str, str] = {}
    placeholders: set[str] = set()
    for name in ROLES:
        role = profile.roles.get(name)
        if role is None:
            continue
        images[name] = role_image(profile, role, image)
        entry, used = _replicated_job(profile, role, job=job, image=images[name], cluster=cluster)
        replicated.append(entry)
        placeholders |= used
        secrets.extend(k for k in role.settings.env if is_secret(k) and k not in secrets)

    metadata: dict[str, Any] = {"name": job}
    if namespace is not None:
        metadata["namespace"] = namespace
    if queue is not None:
        metadata["labels"] = {QUEUE_LABEL: queue}
    spec: dict[str, Any] = {
        "network": {"enableDNSHostnames": True, "subdomain": job, "publishNotReadyAddresses": True},
        "replicatedJobs": replicated,
        "successPolicy": _success_policy(profile),
        "failurePolicy": _failure_policy(profile),
    }
    if suspend or queue is not None:
        spec["suspend"] = True  # Kueue admits a suspended JobSet; without it, `kubectl patch` starts it
    manifest = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}
    header = _header(profile, job=job, images=images, namespace=namespace, queue=queue,
                     suspended="suspend" in spec, secrets=secrets, placeholders=placeholders)
    return JobSetExport(manifest=manifest, header=header, secret_env=tuple(secrets))


def jobset_yaml(export: JobSetExport) -> str:
    return manifest_text(export.manifest, export.header)


def run_export_jobset(profile_path: Path, *, image: str | None, namespace: str | None, queue: str | None,
                      suspend: bool, output: Path | None) -> int:
    """``distlaunch export jobset``: write the manifest to ``output``, or to stdout."""
    from launcher.profile.reader import load_profile

    profile = load_profile(profile_path)
    export = build_jobset(profile, image=image, namespace=namespace, queue=queue, suspend=suspend)
    return write_manifest(jobset_yaml(export), output, KIND, export.manifest["metadata"]["name"], export.secret_env)


def _replicated_job(profile: Profile, role: RoleConfig, *, job: str, image: str,
                    cluster: dict[str, list[str]]) -> tuple[dict[str, Any], set[str]]:
    settings = role.settings
    port = role_port(role)
    command, used = render_command(settings.command, role=role.name, python=settings.python or DEFAULT_PYTHON,
                                   port=port)
    container: dict[str, Any] = {"name": CONTAINER_NAME, "image": image, "command": ["/bin/sh", "-c", command]}
    if settings.container is not None:
        container["imagePullPolicy"] = PULL_POLICIES[settings.container.pull]
    container["env"] = _env(settings.env, secret=secret_name(job), role=role.name, cluster=cluster, used=used)
    if PurePosixPath(settings.workdir).is_absolute():
        container["workingDir"] = settings.workdir
    container["ports"] = [{"name": PORT_NAME, "containerPort": port}]
    if role.gpus_per_task > 0:
        container["resources"] = {"limits": {"nvidia.com/gpu": role.gpus_per_task}}
    restart = settings.restart
    pod: dict[str, Any] = {
        "restartPolicy": "Never" if restart in ("never", "exit-code") or _whole_group(profile, role) else "OnFailure",
        "containers": [container],
    }
    pod_volumes(container, pod, used, outputs_claim(job))
    pod["terminationGracePeriodSeconds"] = math.ceil(settings.grace_seconds)
    retries = 0 if restart == "never" or _whole_group(profile, role) else settings.max_restarts
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": role.count,
        "parallelism": role.count,
        "backoffLimit": retries * role.count,
        "template": {"spec": pod},
    }
    if restart == "exit-code":
        spec["podFailurePolicy"] = {"rules": [
            {"action": "FailJob",
             "onExitCodes": {"containerName": CONTAINER_NAME, "operator": "In", "values": PERMANENT_EXIT_CODES}}]}
    if role.name == "worker" and "chief" not in profile.roles and profile.success_policy == "chief":
        spec["successPolicy"] = {"rules": [{"succeededIndexes": "0"}]}  # worker:0 is the chief
    return {"name": role.name, "replicas": 1, "template": {"spec": spec}}, used


def _whole_group(profile: Profile, role: RoleConfig) -> bool:
    """Under MultiWorkerMirrored a failed worker restarts every worker: its Job fails at once and
    the JobSet recreates the set."""
    return profile.strategy == "multi_worker_mirrored" and role.name in ("worker", "chief")


def _env(values: dict[str, str], *, secret: str, role: str, cluster: dict[str, list[str]],
         used: set[str]) -> list[dict[str, Any]]:
    """The index first: later values (TF_CONFIG, the command) refer to it as ``$(VAR)``."""
    env: list[dict[str, Any]] = [
        {"name": INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}},
    ]
    if "host" in used:
        env.append({"name": HOST_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    if role == "evaluator":
        tf_config = escape_dollars(json.dumps({"cluster": cluster, "task": {"type": "evaluator", "index": 0}},
                                              separators=(",", ":")))
    else:
        tf_config = tf_config_value(cluster, role)
    env.append({"name": "TF_CONFIG", "value": tf_config})
    for name, value in values.items():
        if is_secret(name):
            env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": name}}})
        else:
            env.append({"name": name, "value": escape_dollars(str(value))})
    return env


def _success_policy(profile: Profile) -> dict[str, Any]:
    if profile.success_policy == "all_workers":
        targets = [r for r in ("chief", "worker") if r in profile.roles]
    else:
        targets = ["chief"] if "chief" in profile.roles else ["worker"]
    return {"operator": "All", "targetReplicatedJobs": targets}


def _failure_policy(profile: Profile) -> dict[str, Any]:
    rules: list[dict[str, Any]] = []
    never = [r.name for r in profile.roles.values() if r.settings.restart == "never"]
    if never:
        rules.append({"name": "never-restarted", "action": "FailJobSet", "targetReplicatedJobs": never})
    if any(r.settings.restart == "exit-code" for r in profile.roles.values()):
        rules.append({"name": "permanent-exit-code", "action": "FailJobSet",
                      "onJobFailureReasons": ["PodFailurePolicy"]})
    policy: dict[str, Any] = {"maxRestarts": profile.backoff_limit}
    if rules:
        policy["rules"] = rules
    return policy


def _header(profile: Profile, *, job: str, images: dict[str, str], namespace: str | None, queue: str | None,
            suspended: bool, secrets: list[str], placeholders: set[str]) -> tuple[str, ...]:
    ns = namespace or "<namespace>"
    distinct = sorted(set(images.values()))
    lines = [
        f'Kubernetes JobSet for distlaunch profile "{one_line(profile.name)}"',
        f"({one_line(str(profile.path))}), written by `distlaunch export jobset`.",
        "Apply with `kubectl apply -f FILE`; needs the JobSet controller (v0.5 or later).",
        "",
        f"Every pod is reached as {job}-<role>-0-<index>.{job} (in namespace {ns}); TF_CONFIG",
        "names them and takes the pod's index from its job-completion-index annotation.",
        f"The image ({one_line('; '.join(distinct))}) must hold the training code and its packages.",
    ]
    if job != profile.name:
        lines.append(f'metadata.name "{job}" is the profile name made a valid Kubernetes name.')
    if queue is not None:
        lines.append(f"Kueue: queued to LocalQueue {queue}; Kueue starts it when the quota allows.")
    elif suspended:
        lines.append(f"Suspended: start it with `kubectl patch jobset {job} --type=merge -p "
                     "'{\"spec\":{\"suspend\":false}}'`.")
    if "outputs" in placeholders:
        lines.append(f"{{outputs}} = {OUTPUTS_MOUNT}, PersistentVolumeClaim {outputs_claim(job)}: create it first "
                     "(ReadWriteMany when several pods write there).")
    if secrets:
        ns_flag = f" -n {namespace}" if namespace else ""
        literals = " ".join(f"--from-literal={name}=..." for name in secrets)
        lines += [f"Secret env ({', '.join(secrets)}) comes from Secret {secret_name(job)}; create it first:",
                  f"  kubectl create secret generic {secret_name(job)}{ns_flag} {literals}"]
    lines += ["", "Not carried over: hosts, SSH and GPU lists (Kubernetes places the pods), the",
              "dashboard's sampling and [metrics], [notify], [[log_policies]], orphan_grace_seconds;",
              "distlaunch's checkpoint copies (put checkpoints on the outputs claim)."]
    return tuple(lines)
