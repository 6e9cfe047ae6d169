"""A profile as a Kubeflow ``TFJob`` (``kubeflow.org/v1``) manifest.

On Kubernetes the training operator, not distlaunch, runs the job: it creates one pod per
replica and a headless service per pod, and gives every pod its own TF_CONFIG. So the manifest
carries what a pod needs (image, command, env, port, GPUs, restart policy), and a YAML comment
header lists what the profile says that a TFJob cannot express: host pinning, SSH, per-task
restart limits, the dashboard's sampling and metrics.

Placeholders in ``command`` that differ between the replicas of a role are filled by Kubernetes
when the pod starts, from the downward API, never guessed at export time:

    {index}    $(DISTLAUNCH_TASK_INDEX): the pod label training.kubeflow.org/replica-index
    {task}     <role>:$(DISTLAUNCH_TASK_INDEX)
    {host}     $(DISTLAUNCH_HOST): the pod name, which is also its hostname and service name
    {run_dir}  /distlaunch-run: an emptyDir volume, scratch space that lives as long as the pod
    {outputs}  /distlaunch-outputs: the PersistentVolumeClaim <job>-outputs, which outlives pods and
               runs as the profile's outputs do

{python}, {role} and {port} are the same for every replica of a role and are written out. Every
other ``$`` (in the command and in env values) is doubled, so Kubernetes' own ``$(VAR)``
expansion hands the shell exactly what the profile wrote.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import yaml

from launcher.agent.containeradapters import is_image_file
from launcher.agent.containerrt import ContainerSpec
from launcher.errors import ProfileError, UserError
from launcher.model import ROLES, Profile, RoleConfig
from launcher.plan import is_secret
from launcher.profile.checks import PLACEHOLDER_RE

API_VERSION = "kubeflow.org/v1"
KIND = "TFJob"
#: profile role -> the tfReplicaSpecs key the CRD defines for it
REPLICA_TYPES = {"chief": "Chief", "ps": "PS", "worker": "Worker", "evaluator": "Evaluator"}
RESTART_POLICIES = {"never": "Never", "on-failure": "OnFailure", "always": "Always", "exit-code": "ExitCode"}
#: success_policy -> spec.successPolicy; None leaves the operator's default (chief, else worker 0)
SUCCESS_POLICIES: dict[str, str | None] = {"chief": None, "all_workers": "AllWorkers"}
CONTAINER_NAME = "tensorflow"  # the operator looks for its container by this name
PORT_NAME = "tfjob-port"  # ...and for the TensorFlow server port by this one
DEFAULT_PORT = 2222  # the operator's own default when no tfjob-port is given
DEFAULT_PYTHON = "python3"
#: the image of a role with neither --image nor a container in the profile
DEFAULT_IMAGE = "tensorflow/tensorflow:latest"
#: the profile's container pull policy -> the pod's imagePullPolicy
PULL_POLICIES = {"never": "Never", "missing": "IfNotPresent", "always": "Always"}
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
INDEX_ENV = "DISTLAUNCH_TASK_INDEX"
HOST_ENV = "DISTLAUNCH_HOST"
RUN_DIR_VOLUME = "distlaunch-run"
RUN_DIR_MOUNT = "/distlaunch-run"
OUTPUTS_VOLUME = "distlaunch-outputs"
OUTPUTS_MOUNT = "/distlaunch-outputs"
#: what distlaunch does on a failure that the operator does not (DESIGN.md section 6)
RECOVERY_BY_STRATEGY = {
    "parameter_server": "restarts the chief with a failed ps, so it restores from its checkpoint",
    "multi_worker_mirrored": "restarts every worker when one fails, as collectives need all peers",
}
MAX_NAME = 63  # a DNS label; pod and service names <job>-<role>-<index> must fit too

_PER_REPLICA = ("index", "task", "host", "run_dir", "outputs")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


@dataclass(frozen=True)
class TfJobExport:
    """The manifest, plus the comment lines that say what was adapted or left out and why."""

    manifest: dict[str, Any]
    header: tuple[str, ...]
    secret_env: tuple[str, ...]  # env names read from the job's Secret, which the user must create


def job_name(profile: Profile) -> str:
    """The profile name as a DNS-1035 label short enough for the pod names derived from it."""
    name = re.sub(r"[^a-z0-9]+", "-", profile.name.lower()).strip("-")
    if not name[:1].isalpha():
        name = f"job-{name}".rstrip("-")
    longest_suffix = max((len(f"-{role}-{max(cfg.count - 1, 0)}") for role, cfg in profile.roles.items()),
                         default=0)
    return name[: MAX_NAME - longest_suffix].rstrip("-")


def outputs_claim(job: str) -> str:
    return f"{job}-outputs"


def secret_name(job: str) -> str:
    return f"{job}-secrets"


def tfjob_manifest(profile: Profile, *, image: str | None, namespace: str | None) -> dict[str, Any]:
    """The TFJob as a plain dict, exactly what ``tfjob_yaml`` serialises."""
    return build_tfjob(profile, image=image, namespace=namespace).manifest


def tfjob_yaml(profile: Profile, *, image: str | None, namespace: str | None) -> str:
    """The manifest as YAML, preceded by its comment header."""
    export = build_tfjob(profile, image=image, namespace=namespace)
    return manifest_text(export.manifest, export.header)


def manifest_text(manifest: dict[str, Any], header: tuple[str, ...]) -> str:
    """A Kubernetes manifest as YAML after its header's comment lines (TFJob's and JobSet's)."""
    body = yaml.safe_dump(manifest, sort_keys=False, default_flow_style=False, width=1_000_000)
    return "".join(f"# {line}".rstrip() + "\n" for line in header) + body


def build_tfjob(profile: Profile, *, image: str | None, namespace: str | None) -> TfJobExport:
    """``image``: every pod's (``--image``); None: each role's container image, else DEFAULT_IMAGE."""
    if image is not None:
        check_image(image)
    if namespace is not None:
        check_namespace(namespace)
    unknown = sorted(set(profile.roles) - set(ROLES))
    if unknown:
        raise ProfileError(f"{profile.path}: role {unknown[0]!r} has no TFJob replica type; "
                           f"use one of {', '.join(ROLES)}")
    if not profile.roles:
        raise ProfileError(f"{profile.path}: no [roles.*] table; a TFJob needs at least one role")

    job = job_name(profile)
    replicas: dict[str, Any] = {}
    placeholders: set[str] = set()
    secrets: list[str] = []
    relative_workdirs: list[str] = []
    images: dict[str, str] = {}
    for role_name in ROLES:
        role = profile.roles.get(role_name)
        if role is None:
            continue
        images[role_name] = role_image(profile, role, image)
        replica, used = _replica_spec(role, image=images[role_name], secret=secret_name(job),
                                      claim=outputs_claim(job))
        replicas[REPLICA_TYPES[role_name]] = replica
        placeholders |= used
        secrets.extend(k for k in role.settings.env if is_secret(k) and k not in secrets)
        if not PurePosixPath(role.settings.workdir).is_absolute():
            relative_workdirs.append(f"{role_name} ({one_line(role.settings.workdir)})")

    metadata: dict[str, Any] = {"name": job}
    if namespace is not None:
        metadata["namespace"] = namespace
    spec: dict[str, Any] = {
        "runPolicy": {"cleanPodPolicy": "All", "backoffLimit": profile.backoff_limit},
    }
    success = SUCCESS_POLICIES[profile.success_policy]
    if success is not None:
        spec["successPolicy"] = success
    spec["tfReplicaSpecs"] = replicas
    manifest = {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}

    header = _header(profile, job=job, images=images, namespace=namespace, placeholders=placeholders,
                     secrets=secrets, relative_workdirs=relative_workdirs)
    return TfJobExport(manifest=manifest, header=header, secret_env=tuple(secrets))


def run_export_tfjob(profile_path: Path, *, image: str | None, namespace: str | None, output: Path | None) -> int:
    """``distlaunch export tfjob``: write the manifest to ``output``, or to stdout."""
    from launcher.profile.reader import load_profile

    profile = load_profile(profile_path)
    export = build_tfjob(profile, image=image, namespace=namespace)
    return write_manifest(manifest_text(export.manifest, export.header), output, KIND,
                          export.manifest["metadata"]["name"], export.secret_env)


def write_manifest(text: str, output: Path | None, kind: str, name: str, secret_env: tuple[str, ...]) -> int:
    """A manifest to ``output`` (or stdout), and what to create before applying it, on stderr."""
    if output is None:
        sys.stdout.write(text)
    else:
        try:
            output.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UserError(f"cannot write {output}: {exc.strerror or exc}; give -o a writable path") from exc
        print(f"wrote {kind} {name} to {output}", file=sys.stderr)
    if secret_env:
        print(f"note: create Secret {secret_name(name)} with {', '.join(secret_env)} before applying "
              "(see the manifest's header)", file=sys.stderr)
    return 0


def pod_volumes(container: dict[str, Any], pod: dict[str, Any], used: set[str], claim: str) -> None:
    """The run dir (an emptyDir) and the outputs (the claim) where the command names them."""
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    if "run_dir" in used:
        mounts.append({"name": RUN_DIR_VOLUME, "mountPath": RUN_DIR_MOUNT})
        volumes.append({"name": RUN_DIR_VOLUME, "emptyDir": {}})
    if "outputs" in used:
        mounts.append({"name": OUTPUTS_VOLUME, "mountPath": OUTPUTS_MOUNT})
        volumes.append({"name": OUTPUTS_VOLUME, "persistentVolumeClaim": {"claimName": claim}})
    if mounts:
        container["volumeMounts"] = mounts
        pod["volumes"] = volumes


def _replica_spec(role: RoleConfig, *, image: str, secret: str, claim: str) -> tuple[dict[str, Any], set[str]]:
    """One tfReplicaSpecs entry, and the per-replica placeholders its command uses."""
    settings = role.settings
    port = role.port if role.port is not None else DEFAULT_PORT
    command, used = render_command(settings.command, role=role.name,
                                   python=settings.python or DEFAULT_PYTHON, port=port)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "command": ["/bin/sh", "-c", command],
    }
    if settings.container is not None:
        container["imagePullPolicy"] = PULL_POLICIES[settings.container.pull]
    env = _env(settings.env, secret=secret, used=used)
    if env:
        container["env"] = env
    if PurePosixPath(settings.workdir).is_absolute():
        container["workingDir"] = settings.workdir
    container["ports"] = [{"name": PORT_NAME, "containerPort": port}]
    if role.gpus_per_task > 0:
        container["resources"] = {"limits": {"nvidia.com/gpu": role.gpus_per_task}}
    pod: dict[str, Any] = {"containers": [container]}
    pod_volumes(container, pod, used, claim)
    pod["terminationGracePeriodSeconds"] = math.ceil(settings.grace_seconds)
    spec = {
        "replicas": role.count,
        "restartPolicy": RESTART_POLICIES[settings.restart],
        "template": {"spec": pod},
    }
    return spec, used


def render_command(command: str, *, role: str, python: str, port: int) -> tuple[str, set[str]]:
    """The command for ``/bin/sh -c`` in Kubernetes' escaping, and the per-replica placeholders used.

    Literal ``$`` becomes ``$$`` (Kubernetes turns it back into ``$``); per-replica values are
    ``$(VAR)`` references that Kubernetes fills from the container's env at start.
    """
    fixed = {"python": escape_dollars(python), "role": role, "port": str(port)}
    per_replica = {
        "index": f"$({INDEX_ENV})",
        "task": f"{role}:$({INDEX_ENV})",
        "host": f"$({HOST_ENV})",
        "run_dir": RUN_DIR_MOUNT,
        "outputs": OUTPUTS_MOUNT,
    }
    used: set[str] = set()
    parts: list[str] = []
    pos = 0
    for match in PLACEHOLDER_RE.finditer(command):
        key = match.group(1)
        if key not in fixed and key not in per_replica:
            continue  # load_profile refuses unknown placeholders; keep any other text as written
        parts.append(escape_dollars(command[pos:match.start()]))
        if key in per_replica:
            used.add(key)
            parts.append(per_replica[key])
        else:
            parts.append(fixed[key])
        pos = match.end()
    parts.append(escape_dollars(command[pos:]))
    return "".join(parts), used


def escape_dollars(text: str) -> str:
    """Protect text from Kubernetes' ``$(VAR)`` expansion in command and env values."""
    return text.replace("$", "$$")


def _env(values: dict[str, str], *, secret: str, used: set[str]) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = []
    for name, value in values.items():
        if is_secret(name):
            env.append({"name": name, "valueFrom": {"secretKeyRef": {"name": secret, "key": name}}})
        else:
            env.append({"name": name, "value": escape_dollars(str(value))})
    if used & {"index", "task"}:
        label = f"metadata.labels['{REPLICA_INDEX_LABEL}']"
        env.append({"name": INDEX_ENV, "valueFrom": {"fieldRef": {"fieldPath": label}}})
    if "host" in used:
        env.append({"name": HOST_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}})
    return env


def _header(profile: Profile, *, job: str, images: dict[str, str], namespace: str | None, placeholders: set[str],
            secrets: list[str], relative_workdirs: list[str]) -> tuple[str, ...]:
    ns = namespace or "<namespace>"
    lines = [
        f'Kubeflow TFJob for distlaunch profile "{one_line(profile.name)}"',
        f"({one_line(str(profile.path))}), written by `distlaunch export tfjob`.",
        "Apply with `kubectl apply -f FILE`; needs the Kubeflow training operator.",
        "",
        "TF_CONFIG is not set here: the training operator generates it for every pod, with the",
        f"addresses {job}-<role>-<index>.{ns}.svc:<port> (the evaluator is left out of the",
        "cluster, as distlaunch does).",
        f"{_images_text(images)} must hold the training code and its Python packages;",
        "scripts that use `from launcher import report` need distlaunch installed in it.",
    ]
    if job != profile.name:
        lines.append(f'metadata.name "{job}" is the profile name made a valid Kubernetes name.')
    if relative_workdirs:
        lines += [f"workdir of {', '.join(relative_workdirs)} is relative to the profile file, so no",
                  "workingDir is set: commands run in the image's working directory."]
    if placeholders:
        described = {
            "index": "{index} = the pod label " + REPLICA_INDEX_LABEL,
            "task": "{task} = <role>:<that index>",
            "host": "{host} = the pod name",
            "run_dir": f"{{run_dir}} = {RUN_DIR_MOUNT}, an emptyDir deleted with the pod "
                       "(checkpoints belong on a persistent volume)",
            "outputs": f"{{outputs}} = {OUTPUTS_MOUNT}, PersistentVolumeClaim {outputs_claim(job)} "
                       "(create it first, ReadWriteMany when several pods write there)",
        }
        lines.append("Placeholders filled in each pod at start:")
        lines += [f"  {described[key]}" for key in _PER_REPLICA if key in placeholders]
    if secrets:
        ns_flag = f" -n {namespace}" if namespace else ""
        literals = " ".join(f"--from-literal={name}=..." for name in secrets)
        lines += [
            "",
            f"Secret env ({', '.join(secrets)}) is read from Secret {secret_name(job)}; create it first:",
            f"  kubectl create secret generic {secret_name(job)}{ns_flag} {literals}",
        ]
    lines += ["", "Not carried over (no TFJob equivalent):"]
    lines += [f"  {'  ' if item.startswith(' ') else '- '}{item.strip()}" for item in _dropped(profile)]
    return tuple(lines)


def _dropped(profile: Profile) -> list[str]:
    """One comment line per profile setting that the manifest does not carry, with its value."""
    items = ["hosts: Kubernetes places the pods and the device plugin assigns GPUs (add a nodeSelector",
             "  or affinity to the pod templates to pin them):"]
    for host in profile.hosts.values():
        if host.transport == "local":
            how = "local transport"
        else:
            user = f"{host.ssh.user}@" if host.ssh.user else ""
            how = f"ssh {user}{host.address}:{host.ssh.ssh_port} and its [ssh] settings"
        gpus = f", gpus = {list(host.gpus)}" if host.gpus else ""
        items.append(one_line(f"  hosts.{host.name}: {how}{gpus}"))
    pinning = "; ".join(f"{r.name} on {', '.join(r.hosts)}" for r in profile.roles.values())
    items.append(one_line(f"roles.*.hosts, host pinning: {pinning}"))
    limits = ", ".join(f"{r.name} {r.settings.max_restarts}" for r in profile.roles.values())
    items.append(f"max_restarts per task ({limits}): only the job-wide runPolicy.backoffLimit applies")
    recovery = RECOVERY_BY_STRATEGY.get(profile.strategy)
    if recovery:
        items.append(f"strategy = {profile.strategy}: distlaunch {recovery};")
        items.append("  the operator restarts each pod alone, by its restartPolicy")
    items.append(f"orphan_grace_seconds = {profile.orphan_grace_seconds:g}: there is no launcher to wait for")
    items.append(f"sample_interval = {profile.sample_interval:g}: the dashboard's CPU/GPU sampling")
    metrics = profile.metrics
    if metrics.step or metrics.loss or metrics.extra:
        items.append("[metrics] regexes: the dashboard's; the output stays in the pod logs")
    if profile.log_policies:
        items.append(f"[[log_policies]] ({len(profile.log_policies)}): matched by the launcher; the operator "
                     "restarts by exit code only")
    if any(r.settings.on_nan == "stop" for r in profile.roles.values()):
        items.append('on_nan = "stop": the launcher stops the job at a NaN loss; nothing does in the TFJob')
    containers = [c for r in profile.roles.values() if (c := r.settings.container) is not None]
    if containers:
        runtimes = "/".join(sorted({c.runtime for c in containers}))
        extras = "".join(f", {name}" for name in ("mounts", "options") if any(getattr(c, name) for c in containers))
        users = ", ".join(r.name for r in profile.roles.values() if r.settings.container)
        items.append(f"container runtime {runtimes}{extras} ({users}): the kubelet runs the pods; add volumes")
        items.append("  (mounts) or a securityContext (options) to the pod templates where they matter")
    if profile.notify.command:
        # not its text: a webhook URL in it is a secret
        items.append("[notify] command: run by the launcher; watch the TFJob's conditions instead")
    return items


def role_image(profile: Profile, role: RoleConfig, image: str | None) -> str:
    """The image of a role's pods: ``--image``, else the role's container image as a registry
    reference (enroot's ``REGISTRY#IMAGE`` and ``docker://`` written as Kubernetes reads them),
    else DEFAULT_IMAGE; an image *file* cannot be pulled by a kubelet."""
    if image is not None:
        return image
    container: ContainerSpec | None = role.settings.container
    if container is None:
        return DEFAULT_IMAGE
    if is_image_file(container.image) or "://" in container.image.removeprefix("docker://"):
        raise ProfileError(f"{profile.path}: roles.{role.name} runs in {container.image!r}, which Kubernetes "
                           "cannot pull; give a registry image with --image")
    return container.image.removeprefix("docker://").replace("#", "/", 1)


def _images_text(images: dict[str, str]) -> str:
    distinct = set(images.values())
    if len(distinct) == 1:
        return f"The image ({one_line(distinct.pop())})"
    return "The images (" + "; ".join(f"{role}: {one_line(image)}" for role, image in images.items()) + ")"


def check_image(image: str) -> None:
    if not image or any(c.isspace() for c in image):
        raise UserError(f"--image {image!r} is not a container image reference; "
                        "give one like --image tensorflow/tensorflow:2.16.1")


def check_namespace(namespace: str) -> None:
    if len(namespace) > MAX_NAME or not _DNS_LABEL.fullmatch(namespace):
        raise UserError(f"--namespace {namespace!r} is not a Kubernetes namespace name; use lowercase "
                        "letters, digits and '-', at most 63 characters")


def one_line(text: str) -> str:
    """Text safe inside a one-line YAML comment."""
    return "".join(c if c.isprintable() else "?" for c in text)
