"""Container runtimes: the command lines that run, stop, find and check a task's container.

Shipped in the agent (stdlib only, Python >= 3.9). The profile's ``container`` table (DESIGN.md
section 4) reaches the agent as the JSON of ``ContainerSpec``; everything here only *builds*
argv lists, it runs nothing, so every runtime is unit-tested without being installed.

Runtimes: ``docker`` and ``podman`` (a daemon or conmon owns the container: stop, kill, find by
label and the host pid go through the runtime), ``apptainer`` and ``enroot`` (the container is a
child process of the agent: signals reach it directly, no labels), ``pyxis`` (Slurm hosts:
``srun --container-image``; srun forwards the agent's signals to the step).

What every runtime keeps the same: the host's network (TF_CONFIG's addresses work unchanged), the
task's environment passed by *name* (values stay in the client's environment, never on a command
line: start every argv with ``runtime_environ``), and host paths mounted at the same path.

apptainer and enroot run image *files*: a ``.sif`` / ``.sqsh`` path as it is, a registry image pulled
once per host into ``IMAGES_DIR`` (``pull_argv``); enroot starts the file directly (``enroot start
IMAGE.sqsh``), so no named enroot container is left behind. pyxis imports the image at every start
(enroot's layer cache makes repeats cheap): ``pull`` does not apply to it.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

RUNTIMES = ("docker", "podman", "apptainer", "enroot", "pyxis")
#: runtimes whose containers a daemon (or conmon) owns: teardown must go through the runtime
DAEMON_RUNTIMES = ("docker", "podman")
#: runtimes that run an image file (a registry image is pulled into IMAGES_DIR first)
FILE_RUNTIMES = ("apptainer", "enroot")
PULL_POLICIES = ("never", "missing", "always")
#: labels every container of a run carries (docker / podman)
RUN_LABEL = "distlaunch.run"
TASK_LABEL = "distlaunch.task"
#: where apptainer and enroot keep registry images pulled as files, on each host
IMAGES_DIR = "~/.cache/distlaunch/images"
#: docker's limit is larger; 128 keeps names readable and inside every runtime's limit
MAX_NAME = 128
#: the line ``tf_version_argv`` prints before the version (an image's entrypoint may print too)
TF_VERSION_MARKER = "distlaunch-tf-version:"
#: the environment variable that tells the CUDA runtime, inside, which GPUs the task uses
CUDA_ENV = "CUDA_VISIBLE_DEVICES"
#: what enroot's (and so pyxis') GPU hook reads to expose GPUs; "void": none
NVIDIA_ENV = "NVIDIA_VISIBLE_DEVICES"
#: docker's --init is tini: this makes it signal the command's process group, so a stop reaches a
#: program the shell did not exec (``a && b``, a pipe), not only the shell
TINI_GROUP_ENV = "TINI_KILL_PROCESS_GROUP=1"
#: podman's --init (catatonit, or tini) reads no such variable: a second one with -g runs the command
PODMAN_INIT = ("/run/podman-init", "-g", "--")

_JSON_KEYS = ("image", "runtime", "mounts", "options", "pull", "extra")
_MODES = ("ro", "rw")
_IMAGE_FILE_SUFFIXES = (".sif", ".simg", ".sqsh", ".squashfs", ".img")
_PATH_STARTS = ("/", "./", "../", "~")
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def image_problem(image: object, runtime: Optional[str] = None) -> Optional[str]:
    """Why ``image`` cannot be a container image (reference or file; for ``runtime``), else None."""
    if not isinstance(image, str) or not image.strip():
        return 'is empty; give an image, e.g. image = "tensorflow/tensorflow:2.16.1-gpu"'
    if any(c.isspace() or not c.isprintable() for c in image):
        return f"{image!r} has spaces or control characters; give an image reference or a file path without them"
    if image.startswith("-"):
        return f"{image!r} starts with '-', which the runtime would read as an option; give the image's name"
    if runtime in DAEMON_RUNTIMES and image.startswith(_PATH_STARTS):
        return (f"{image!r} is a file; {runtime} runs registry images (load the file with `{runtime} load` and "
                'give its name), or use runtime = "apptainer"')
    return None


def mount_problem(mount: object) -> Optional[str]:
    """Why ``mount`` is not ``SRC:DST[:ro|rw]`` (SRC absolute or ~, DST absolute), else None."""
    example = 'write "SRC:DST" or "SRC:DST:ro", e.g. "/data:/data:ro"'
    if not isinstance(mount, str):
        return f"expected a string like \"/data:/data:ro\", got {mount!r}"
    if "," in mount:
        return f"{mount!r} has a ',', which pyxis and --mount read as a separator; rename the folder"
    parts = mount.split(":")
    if len(parts) not in (2, 3):
        return f"{mount!r} is not SRC:DST[:ro|rw] (a path cannot hold ':'); {example}"
    src, dst = parts[0], parts[1]
    if not (src.startswith("/") or src == "~" or src.startswith("~/")):
        return f"{mount!r}: the host path {src!r} must be absolute or start with ~; {example}"
    if not dst.startswith("/"):
        return f"{mount!r}: the path inside, {dst!r}, must be absolute; {example}"
    if len(parts) == 3 and parts[2] not in _MODES:
        return f"{mount!r}: {parts[2]!r} is not ro or rw; {example}"
    return None


def parse_mount(mount: str, home: Optional[str] = None) -> Tuple[str, str, Optional[str]]:
    """``SRC:DST[:ro|rw]`` -> (src with ~ expanded on this host, dst, mode or None); ValueError if bad."""
    problem = mount_problem(mount)
    if problem is not None:
        raise ValueError(f"container mount {problem}")
    parts = mount.split(":")
    return _expand(parts[0], home), parts[1], parts[2] if len(parts) == 3 else None


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    runtime: str = "docker"
    mounts: Tuple[str, ...] = ()  # "SRC:DST[:ro]" on top of the defaults (workdir, outputs, run dir)
    options: Tuple[str, ...] = ()  # extra runtime flags, as given
    pull: str = "missing"
    extra: Dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        data: Dict[str, Any] = {"image": self.image, "runtime": self.runtime, "mounts": list(self.mounts),
                                "options": list(self.options), "pull": self.pull}
        if self.extra:
            data["extra"] = dict(self.extra)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ContainerSpec":
        """The spec a launcher wrote; ValueError (one line) for anything it would not have written."""
        if not isinstance(data, Mapping):
            raise ValueError(f"container spec: expected a JSON object, got {type(data).__name__}")
        unknown = sorted(set(data) - set(_JSON_KEYS))
        if unknown:
            raise ValueError(f"container spec: unknown key {unknown[0]!r}; valid: {', '.join(_JSON_KEYS)}")
        runtime = data.get("runtime", "docker")
        if runtime not in RUNTIMES:
            raise ValueError(f"unknown container runtime {runtime!r}; valid: {', '.join(RUNTIMES)}")
        problem = image_problem(data.get("image"), runtime)
        if problem is not None:
            raise ValueError(f"container image {problem}")
        pull = data.get("pull", "missing")
        if pull not in PULL_POLICIES:
            raise ValueError(f"unknown container pull policy {pull!r}; valid: {', '.join(PULL_POLICIES)}")
        mounts = _strings(data.get("mounts", []), "mounts")
        for mount in mounts:
            problem = mount_problem(mount)
            if problem is not None:
                raise ValueError(f"container mount {problem}")
        extra = data.get("extra", {})
        if not isinstance(extra, Mapping):
            raise ValueError("container spec: extra must be a JSON object")
        return cls(image=data["image"], runtime=runtime, mounts=mounts,
                   options=_strings(data.get("options", []), "options"), pull=pull, extra=dict(extra))


def _strings(value: object, key: str) -> Tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"container spec: {key} must be a list of strings")
    return tuple(value)


def container_name(run_id: str, task_id: str, incarnation: int) -> str:
    """A name unique per incarnation, valid for docker/podman (``[a-zA-Z0-9][a-zA-Z0-9_.-]*``).

    ``dl-<run>-<role>-<index>-<incarnation>`` with anything else made '-'; a name longer than
    MAX_NAME keeps its task and incarnation and trades the run id's tail for a hash of it."""
    if isinstance(incarnation, bool) or not isinstance(incarnation, int) or incarnation < 0:
        raise ValueError(f"incarnation must be an integer >= 0, got {incarnation!r}")
    run = _NAME_UNSAFE.sub("-", run_id).strip("-.") or "run"
    task = _NAME_UNSAFE.sub("-", task_id).strip("-.") or "task"
    tail = f"-{task}-{incarnation}"
    name = f"dl-{run}{tail}"
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(f"{run_id}\0{task_id}".encode()).hexdigest()
    room = MAX_NAME - len(f"dl--{digest[:12]}{tail}")
    if room < 1:  # an absurd task id: the hash alone keeps the name unique
        return f"dl-{digest[:40]}-{incarnation}"
    return f"dl-{run[:room].rstrip('-.')}-{digest[:12]}{tail}"


def task_labels(run_id: str, task_id: str) -> Dict[str, str]:
    """The labels ``run_argv`` gives a task's container and ``list_argv`` finds it by."""
    return {RUN_LABEL: run_id, TASK_LABEL: task_id}


def run_argv(spec: ContainerSpec, *, name: str, labels: Mapping[str, str], env_names: Sequence[str],
             mounts: Sequence[str], workdir: str, gpus: Optional[Sequence[int]], user: Optional[str],
             command: Sequence[str], home: Optional[str] = None, node: Optional[str] = None,
             container_home: Optional[str] = None) -> List[str]:
    """The argv that runs ``command`` in the container, in the foreground (its exit code is the
    task's). Host networking; ``env_names`` are passed by name only (values come from the
    calling process's environment, never on the command line); ``mounts`` are host paths mounted
    at the same path; ``gpus`` None: none, else the runtime's GPU flags for those indices.

    Start it with ``runtime_environ(...)`` as its environment. ``home``: the host's home for ~ in
    the spec's mounts (default: this process's); ``node``: pyxis only, the Slurm node the step
    must run on (the agent's own, ``$SLURMD_NODENAME``), else Slurm picks one of the allocation's.
    ``container_home``: docker/podman, HOME inside (a uid with no passwd entry there gets "/") unless
    ``env_names`` has HOME; by value, as the client's own HOME must stay (docker's config, podman's
    storage). ValueError for a mount or workdir that is not an absolute path without ':' and ','."""
    binds = _binds(spec, mounts, home)
    if workdir:
        _check_path(workdir, "workdir")
    gpu_list = list(gpus or [])
    names = _names(env_names)
    runtime = spec.runtime
    if runtime in DAEMON_RUNTIMES:
        argv = [runtime, "run", "--rm", "--init", "--name", name, *_label_flags(labels), "--network", "host",
                "--ipc", "host"]
        if user:
            argv += ["--user", user]
        for env in _with_gpu_names(spec, names, gpu_list):
            argv += ["-e", env]
        if container_home and "HOME" not in names:
            _check_path(container_home, "home")
            argv += ["-e", "HOME=" + container_home]
        if runtime == "docker":
            argv += ["-e", TINI_GROUP_ENV]
        for src, dst, mode in binds:
            argv += ["-v", _bind_text(src, dst, mode, ":")]
        if workdir:
            argv += ["-w", workdir]
        argv += _gpu_flags(runtime, gpu_list)
        argv += ["--pull", spec.pull]
        init = PODMAN_INIT if runtime == "podman" else ()
        return [*argv, *spec.options, spec.image, *init, *command]
    if runtime == "apptainer":
        argv = ["apptainer", "exec"]
        if gpu_list:
            argv.append("--nv")
        for src, dst, mode in binds:
            argv += ["--bind", _bind_text(src, dst, mode, ":")]
        if workdir:
            argv += ["--pwd", workdir]
        return [*argv, *spec.options, image_file(spec), *command]
    if runtime == "enroot":
        argv = ["enroot", "start"]
        for src, dst, mode in binds:
            options = "x-create=auto,rbind" + (",ro" if mode == "ro" else "")
            argv += ["--mount", f"{src}:{dst}:none:{options}"]
        for env in _with_gpu_names(spec, names, gpu_list):
            argv += ["--env", env]
        argv += [*spec.options, image_file(spec)]
        if workdir:  # enroot has no working-directory flag: a shell changes into it, then execs
            argv += ["/bin/sh", "-c", 'cd "$1" && shift && exec "$@"', "distlaunch-workdir", workdir]
        return [*argv, *command]
    argv = _srun(name, node)
    argv.append(f"--container-image={pyxis_image(spec.image)}")
    if binds:
        argv.append("--container-mounts=" + ",".join(_bind_text(s, d, m, ":") for s, d, m in binds))
    if workdir:
        argv.append(f"--container-workdir={workdir}")
    env_list = _with_gpu_names(spec, names, gpu_list)
    if env_list:
        argv.append("--container-env=" + ",".join(env_list))
    return [*argv, *spec.options, *command]


def runtime_environ(spec: ContainerSpec, environ: Mapping[str, str], *, env_names: Sequence[str],
                    gpus: Optional[Sequence[int]]) -> Dict[str, str]:
    """The environment to start ``run_argv``'s argv with: ``environ`` (the task's variables) plus
    what the runtime needs to carry them in as the task must see them.

    docker, podman, enroot and pyxis show a task only its own GPUs, numbered from 0 inside, so
    CUDA_VISIBLE_DEVICES becomes 0..n-1 there (the host-side indices stay the plan's); enroot and
    pyxis expose the GPUs that NVIDIA_VISIBLE_DEVICES names ("void": none, whatever the image
    says). apptainer --nv shows every GPU, so CUDA_VISIBLE_DEVICES stays as the plan set it, and
    each variable is also given as APPTAINERENV_<NAME>, which wins over the image's own values."""
    env = dict(environ)
    gpu_list = list(gpus or [])
    runtime = spec.runtime
    if runtime == "apptainer":
        for name in _names(env_names):
            if name in environ:
                env[f"APPTAINERENV_{name}"] = environ[name]
        return env
    if gpu_list:
        env[CUDA_ENV] = ",".join(str(i) for i in range(len(gpu_list)))
    if runtime in ("enroot", "pyxis"):
        env[NVIDIA_ENV] = ",".join(str(i) for i in gpu_list) if gpu_list else "void"
    return env


def stop_argv(runtime: str, names: Sequence[str], grace_s: float) -> Optional[List[str]]:
    """``docker stop -t N NAME...``: SIGTERM to each, SIGKILL after N s (in parallel); None where
    signals to the child process do it, or no names."""
    if runtime not in DAEMON_RUNTIMES or not names:
        return None
    return [runtime, "stop", "-t", str(max(0, math.ceil(grace_s))), *names]


def kill_argv(spec: ContainerSpec, name: str, signal: str = "KILL") -> Optional[List[str]]:
    """``docker kill -s SIGNAL name``; None where signals to the child process do it."""
    return [spec.runtime, "kill", "-s", signal, name] if spec.runtime in DAEMON_RUNTIMES else None


def host_pid_argv(spec: ContainerSpec, name: str) -> Optional[List[str]]:
    """Prints the container's main process pid as the host sees it; None: the child is it.

    With ``--init`` that process is the runtime's init (docker-init, catatonit); the task's
    command is its child, so the agent samples (and takes stacks of) that pid's process tree."""
    return [spec.runtime, "inspect", "--format", "{{.State.Pid}}", name] if spec.runtime in DAEMON_RUNTIMES else None


def exists_argv(runtime: str, name: str) -> Optional[List[str]]:
    """Exit 0 while a container of that name exists (in any state)."""
    return [runtime, "container", "inspect", "--format", "{{.Id}}", name] if runtime in DAEMON_RUNTIMES else None


def list_argv(runtime: str, labels: Mapping[str, str]) -> Optional[List[str]]:
    """Prints the names (one a line) of every container, running or not, with these labels."""
    if runtime not in DAEMON_RUNTIMES:
        return None
    filters = [w for key, value in labels.items() for w in ("--filter", f"label={key}={value}")]
    return [runtime, "ps", "-a", *filters, "--format", "{{.Names}}"]


def remove_argv(runtime: str, names: Sequence[str]) -> Optional[List[str]]:
    """Force-removes these containers (running ones are killed); None: no daemon, or no names."""
    if runtime not in DAEMON_RUNTIMES or not names:
        return None
    return [runtime, "rm", "-f", *names]


def image_present_argv(spec: ContainerSpec, node: Optional[str] = None) -> List[str]:
    """Exit 0 when the image is on this host.

    pyxis keeps no image of its own: for a registry image this starts ``true`` in it (which
    imports it, as the task's start would), so exit 0 means "present or pullable"."""
    runtime = spec.runtime
    if runtime in DAEMON_RUNTIMES:
        return [runtime, "image", "inspect", "--format", "{{.Id}}", spec.image]
    if runtime in FILE_RUNTIMES or is_image_file(spec.image):
        return ["test", "-e", image_file(spec)]
    return [*_srun(None, node), f"--container-image={pyxis_image(spec.image)}", "true"]


def pull_argv(spec: ContainerSpec) -> Optional[List[str]]:
    """Fetches the image onto this host; None where there is nothing to pull (an image file,
    pyxis). apptainer and enroot write the file beside its final path and move it there, so a
    failed or concurrent pull never leaves a half file where ``image_present_argv`` looks."""
    runtime = spec.runtime
    if runtime in DAEMON_RUNTIMES:
        return [runtime, "pull", spec.image]
    if runtime not in FILE_RUNTIMES or is_image_file(spec.image):
        return None
    target = image_file(spec)
    if runtime == "apptainer":
        fetch = 'apptainer pull --force "$tmp" "$2"'
        uri = spec.image if "://" in spec.image else f"docker://{spec.image}"
    else:
        fetch = 'enroot import -o "$tmp" "$2"'
        uri = enroot_uri(spec.image)
    script = ('mkdir -p "$(dirname "$1")" && tmp="$1.part.$$" && rm -f "$tmp" && '
              f'{{ {fetch} && mv -f "$tmp" "$1"; }} || {{ rm -f "$tmp"; exit 1; }}')
    return ["/bin/sh", "-c", script, "distlaunch-pull", target, uri]


def image_digest_argv(spec: ContainerSpec) -> Optional[List[str]]:
    """Prints the image's id / digest: the content-addressed id docker and podman keep (the same
    on every host that holds the same image, pulled or built); None for image files and pyxis,
    whose digest would cost a read of the whole file."""
    if spec.runtime not in DAEMON_RUNTIMES:
        return None
    return [spec.runtime, "image", "inspect", "--format", "{{.Id}}", spec.image]


def tf_version_argv(spec: ContainerSpec, python: str, node: Optional[str] = None, name: str = "",
                    labels: Optional[Mapping[str, str]] = None) -> List[str]:
    """Runs ``python -c 'import tensorflow; print(version)'`` in the image (host network, no mounts).

    The image runs as a task's would (its entrypoint and the spec's options), without pulling;
    the version is on the line that starts with TF_VERSION_MARKER (``parse_tf_version``). docker
    and podman: named ``name`` and labelled, so one that outlives its client can be removed."""
    probe = [python, "-c", f"import tensorflow as tf; print({TF_VERSION_MARKER!r} + tf.__version__)"]
    runtime = spec.runtime
    if runtime in DAEMON_RUNTIMES:
        named = ["--name", name] if name else []
        return [runtime, "run", "--rm", "--init", *named, *_label_flags(labels or {}), "--network", "host",
                "--pull", "never", *spec.options, spec.image, *probe]
    if runtime == "apptainer":  # the host's PYTHONPATH must not answer for the image
        return ["apptainer", "exec", "--cleanenv", *spec.options, image_file(spec), *probe]
    if runtime == "enroot":
        return ["enroot", "start", *spec.options, image_file(spec), *probe]
    return [*_srun(None, node), f"--container-image={pyxis_image(spec.image)}", *spec.options, *probe]


def parse_tf_version(stdout: str) -> Optional[str]:
    """The version ``tf_version_argv`` printed, else None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(TF_VERSION_MARKER):
            return line[len(TF_VERSION_MARKER):].strip() or None
    return None


def is_image_file(image: str) -> bool:
    """Whether ``image`` names a file (a path, or a .sif/.sqsh name) rather than a registry image."""
    return image.startswith(_PATH_STARTS) or image.endswith(_IMAGE_FILE_SUFFIXES)


def image_file(spec: ContainerSpec, images_dir: str = IMAGES_DIR, home: Optional[str] = None) -> str:
    """The file apptainer and enroot run: the image itself where it is a file, else where
    ``pull_argv`` puts the registry image (one file per reference, under ``images_dir``)."""
    if is_image_file(spec.image):
        return _expand(spec.image, home)
    reference = spec.image.split("://", 1)[-1]
    safe = _NAME_UNSAFE.sub("_", reference).strip("_.")[:80] or "image"
    digest = hashlib.sha256(spec.image.encode()).hexdigest()[:8]
    suffix = ".sif" if spec.runtime == "apptainer" else ".sqsh"
    return os.path.join(_expand(images_dir, home), f"{safe}-{digest}{suffix}")


def enroot_uri(image: str) -> str:
    """A docker reference as enroot writes it: ``docker://[REGISTRY#]IMAGE[:TAG]``."""
    if "://" in image:
        scheme, rest = image.split("://", 1)
        return image if scheme != "docker" else "docker://" + _registry_hash(rest)
    return "docker://" + _registry_hash(image)


def pyxis_image(image: str) -> str:
    """``--container-image``'s value: a file path as it is, else ``[REGISTRY#]IMAGE[:TAG]``."""
    if is_image_file(image):
        return _expand(image, None)
    return _registry_hash(image[len("docker://"):] if image.startswith("docker://") else image)


def _registry_hash(reference: str) -> str:
    """``nvcr.io/nvidia/tensorflow:24.01`` -> ``nvcr.io#nvidia/tensorflow:24.01`` (docker's rule:
    a first component with '.' or ':', or localhost, is a registry)."""
    if "#" in reference or "/" not in reference:
        return reference
    first, rest = reference.split("/", 1)
    if "." in first or ":" in first or first == "localhost":
        return f"{first}#{rest}"
    return reference


def _srun(name: Optional[str], node: Optional[str]) -> List[str]:
    return ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--quiet", "--kill-on-bad-exit=0", "--export=ALL",
            *([f"--nodelist={node}"] if node else []), *([f"--job-name={name}"] if name else [])]


def _gpu_flags(runtime: str, gpus: Sequence[int]) -> List[str]:
    if not gpus:
        return []
    if runtime == "docker":  # the quotes are docker's: its --gpus value is CSV, and the list has commas
        return ["--gpus", '"device=' + ",".join(str(i) for i in gpus) + '"']
    return [w for i in gpus for w in ("--device", f"nvidia.com/gpu={i}")]  # podman: nvidia-ctk's CDI names


def _label_flags(labels: Mapping[str, str]) -> List[str]:
    return [w for key, value in labels.items() for w in ("--label", f"{key}={value}")]


def _names(env_names: Sequence[str]) -> List[str]:
    """Each variable once, in order; a name with '=' would carry a value onto the command line."""
    seen: List[str] = []
    for name in env_names:
        if not name or "=" in name or any(c.isspace() for c in name):
            raise ValueError(f"environment variable name {name!r} is not a plain name")
        if name not in seen:
            seen.append(name)
    return seen


def _with_gpu_names(spec: ContainerSpec, names: List[str], gpus: Sequence[int]) -> List[str]:
    """The GPU variables runtime_environ sets travel in by name too (apptainer: all do anyway)."""
    wanted = (CUDA_ENV,) if gpus else ()
    if spec.runtime in ("enroot", "pyxis"):
        wanted = (NVIDIA_ENV, *wanted)
    return [*names, *(n for n in wanted if n not in names)]


def _binds(spec: ContainerSpec, mounts: Sequence[str], home: Optional[str]) -> List[Tuple[str, str, Optional[str]]]:
    """The default mounts (same path inside), then the spec's; a spec mount replaces a default
    one at the same place inside, and each place inside is mounted once."""
    binds: Dict[str, Tuple[str, str, Optional[str]]] = {}
    for path in mounts:
        _check_path(path, "mount")
        binds.setdefault(path.rstrip("/") or "/", (path, path, None))
    for mount in spec.mounts:
        src, dst, mode = parse_mount(mount, home)
        _check_path(src, "mount")
        binds[dst.rstrip("/") or "/"] = (src, dst, mode)
    return list(binds.values())


def _bind_text(src: str, dst: str, mode: Optional[str], sep: str) -> str:
    return sep.join([src, dst] + ([mode] if mode else []))


def _check_path(path: str, what: str) -> None:
    if not path.startswith("/") or ":" in path or "," in path:
        raise ValueError(f"container {what} {path!r} must be an absolute path without ':' or ','")


def _expand(path: str, home: Optional[str]) -> str:
    if home is not None and (path == "~" or path.startswith("~/")):
        return home.rstrip("/") + path[1:]
    return os.path.expanduser(path)
