"""Container runtimes as adapters: one class per runtime behind one interface (``ContainerRuntime``:
the task's run, the container a daemon owns, the image), and their registry (``adapter_for``).

Shipped in the agent (stdlib only, Python >= 3.9). Adapters only *build* argv lists, so every runtime
is unit-tested without being installed. docker and podman (one CLI): a daemon or conmon owns the
container, so stops, removal and the host pid go through the runtime. apptainer and enroot run image
*files* (a registry image is pulled once per host into IMAGES_DIR; enroot starts the file, so no named
container is left behind) and pyxis an ``srun --container-image`` step: the container is the client's
own child there, and the task's signals reach it. Every runtime keeps the host's network (TF_CONFIG's
addresses work unchanged), passes the task's environment by *name* (values never on a command line)
and mounts host paths at the same path.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from abc import ABC, abstractmethod
from typing import Dict, List, Mapping, NamedTuple, Optional, Protocol, Sequence, Tuple

#: where apptainer and enroot keep registry images pulled as files, on each host
IMAGES_DIR = "~/.cache/distlaunch/images"
#: the environment variable that tells the CUDA runtime, inside, which GPUs the task uses
CUDA_ENV = "CUDA_VISIBLE_DEVICES"
#: what enroot's (and so pyxis') GPU hook reads to expose GPUs; "void": none
NVIDIA_ENV = "NVIDIA_VISIBLE_DEVICES"
#: how an image that is a file path starts
PATH_STARTS = ("/", "./", "../", "~")
#: what a container's or an image file's name may not hold
UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")
_IMAGE_FILE_SUFFIXES = (".sif", ".simg", ".sqsh", ".squashfs", ".img")

#: (host path, path inside, "ro" | "rw" | None)
Bind = Tuple[str, str, Optional[str]]


class Spec(Protocol):
    """What an adapter reads of a ``containerrt.ContainerSpec``."""

    @property
    def image(self) -> str: ...
    @property
    def options(self) -> Tuple[str, ...]: ...
    @property
    def pull(self) -> str: ...
    def binds(self, mounts: Sequence[str], home: Optional[str]) -> List[Bind]: ...


class Run(NamedTuple):
    """A task's run as ``run_argv`` checked it, for the runtime's ``_argv``."""

    name: str
    labels: Mapping[str, str]
    env: List[str]  # the variables passed by name, each once: the task's, then the GPU ones the runtime reads
    binds: List[Bind]
    workdir: str
    gpus: List[int]
    user: Optional[str]
    command: Sequence[str]
    node: Optional[str]
    home: Optional[str]  # HOME inside (docker, podman), unless the task passes its own


class ContainerRuntime(ABC):
    """One runtime's command lines."""

    name = ""
    #: a daemon (or conmon) owns the container: stops and removal go through the runtime, which knows
    #: the container's host pid; else the container is the client's own child
    daemon = False
    #: it exposes the GPUs NVIDIA_VISIBLE_DEVICES names (enroot's hook, and so pyxis')
    nvidia_env = False
    #: it runs the container as a Slurm step (needs [slurm]); its image check imports the image
    slurm_step = False
    #: how its client's own errors start (a container it refused to start)
    client_errors: Tuple[str, ...] = ()

    # Runs ``command`` in the container, in the foreground (its exit code is the task's), started with
    # ``environ``'s environment: ``env_names`` passed by name, ``mounts`` (host paths) at the same path,
    # ``gpus`` (None: none). ``home``: ~ in the spec's mounts (None: this process's); ``node``: pyxis,
    # the step's Slurm node (else Slurm picks); ``container_home``: docker/podman, HOME inside (by value,
    # unless ``env_names`` has HOME: a uid with no passwd entry there gets "/"). ValueError for a mount or
    # workdir that is not an absolute path without ':' and ','.
    def run_argv(self, spec: Spec, *, name: str, labels: Mapping[str, str], env_names: Sequence[str],
                 mounts: Sequence[str], workdir: str, gpus: Optional[Sequence[int]], user: Optional[str],
                 command: Sequence[str], home: Optional[str] = None, node: Optional[str] = None,
                 container_home: Optional[str] = None) -> List[str]:
        binds = spec.binds(mounts, home)
        if workdir:
            check_path(workdir, "workdir")
        gpu_list = list(gpus or [])
        names = _names(env_names)
        wanted = ((NVIDIA_ENV,) if self.nvidia_env else ()) + ((CUDA_ENV,) if gpu_list else ())
        env = [*names, *(n for n in wanted if n not in names)]
        return self._argv(spec, Run(name, labels, env, binds, workdir, gpu_list, user, command, node, container_home))

    @abstractmethod
    def _argv(self, spec: Spec, run: Run) -> List[str]: ...  # run_argv's, its inputs checked

    # run_argv's environment: ``environ`` (the task's) and what carries it in as the task must see it:
    # only its GPUs, numbered from 0 inside (CUDA_VISIBLE_DEVICES 0..n-1), named by NVIDIA_VISIBLE_DEVICES
    # where the runtime reads it ("void": none, whatever the image says)
    def environ(self, environ: Mapping[str, str], *, env_names: Sequence[str],
                gpus: Optional[Sequence[int]]) -> Dict[str, str]:
        env = dict(environ)
        gpu_list = list(gpus or [])
        if gpu_list:
            env[CUDA_ENV] = ",".join(str(i) for i in range(len(gpu_list)))
        if self.nvidia_env:
            env[NVIDIA_ENV] = ",".join(str(i) for i in gpu_list) if gpu_list else "void"
        return env

    # The container a daemon owns; None where it is the client's own child (signals to it do it).
    # SIGTERM to each, SIGKILL after the grace (in parallel); None: no names
    def stop_argv(self, names: Sequence[str], grace_s: float) -> Optional[List[str]]:
        return None

    # sends the container's main process ``signal``
    def kill_argv(self, name: str, signal: str = "KILL") -> Optional[List[str]]:
        return None

    # Prints the container's main process pid as the host sees it: the runtime's init (docker-init,
    # catatonit), whose process tree the agent samples (the task's command is its child)
    def host_pid_argv(self, name: str) -> Optional[List[str]]:
        return None

    # exit 0 while a container of that name exists (in any state)
    def exists_argv(self, name: str) -> Optional[List[str]]:
        return None

    # prints the names (one a line) of every container, running or not, with these labels
    def list_argv(self, labels: Mapping[str, str]) -> Optional[List[str]]:
        return None

    # force-removes these containers (running ones are killed); None: no names
    def remove_argv(self, names: Sequence[str]) -> Optional[List[str]]:
        return None

    # The image. Why this runtime cannot run ``image``, else None.
    def image_problem(self, image: str) -> Optional[str]:
        return None

    # exit 0 when the runtime's client (and its daemon) answer; None: nothing to ask
    def version_argv(self) -> Optional[List[str]]:
        return [self.name, "version"]

    # exit 0 when the image is on this host
    @abstractmethod
    def image_present_argv(self, spec: Spec, node: Optional[str] = None) -> List[str]: ...

    # fetches the image onto this host; None where there is nothing to pull
    def pull_argv(self, spec: Spec) -> Optional[List[str]]:
        return None

    # prints the image's id (the same wherever the same image is, pulled or built); None where it
    # would cost a read of the whole file
    def image_digest_argv(self, spec: Spec) -> Optional[List[str]]:
        return None

    # runs ``command`` in the image as a task's would (its entrypoint, the spec's options), host network,
    # no mounts, no pull; docker/podman: named and labelled, so one that outlives its client can be removed
    @abstractmethod
    def probe_argv(self, spec: Spec, command: Sequence[str], node: Optional[str] = None, name: str = "",
                   labels: Optional[Mapping[str, str]] = None) -> List[str]: ...


class _Oci(ContainerRuntime):
    """docker and podman: one CLI."""

    daemon = True
    #: ``-e`` values that make the runtime's ``--init`` signal the command's process group
    init_env: Tuple[str, ...] = ()
    #: what runs the command behind the runtime's ``--init``
    init: Tuple[str, ...] = ()

    def _argv(self, spec: Spec, run: Run) -> List[str]:
        argv = [self.name, "run", "--rm", "--init", "--name", run.name, *_label_flags(run.labels),
                "--network", "host", "--ipc", "host"]
        if run.user:
            argv += ["--user", run.user]
        for env in run.env:
            argv += ["-e", env]
        if run.home and "HOME" not in run.env:
            check_path(run.home, "home")
            argv += ["-e", "HOME=" + run.home]
        for env in self.init_env:
            argv += ["-e", env]
        for bind in run.binds:
            argv += ["-v", _bind_text(bind)]
        if run.workdir:
            argv += ["-w", run.workdir]
        if run.gpus:
            argv += self._gpu_flags(run.gpus)
        return [*argv, "--pull", spec.pull, *spec.options, spec.image, *self.init, *run.command]

    @abstractmethod
    def _gpu_flags(self, gpus: Sequence[int]) -> List[str]: ...  # the flags that give it these GPUs

    def stop_argv(self, names: Sequence[str], grace_s: float) -> Optional[List[str]]:
        return [self.name, "stop", "-t", str(max(0, math.ceil(grace_s))), *names] if names else None

    def kill_argv(self, name: str, signal: str = "KILL") -> List[str]:
        return [self.name, "kill", "-s", signal, name]

    def host_pid_argv(self, name: str) -> List[str]:
        return [self.name, "inspect", "--format", "{{.State.Pid}}", name]

    def exists_argv(self, name: str) -> List[str]:
        return [self.name, "container", "inspect", "--format", "{{.Id}}", name]

    def list_argv(self, labels: Mapping[str, str]) -> List[str]:
        filters = [w for key, value in labels.items() for w in ("--filter", f"label={key}={value}")]
        return [self.name, "ps", "-a", *filters, "--format", "{{.Names}}"]

    def remove_argv(self, names: Sequence[str]) -> Optional[List[str]]:
        return [self.name, "rm", "-f", *names] if names else None

    def image_problem(self, image: str) -> Optional[str]:
        if not image.startswith(PATH_STARTS):
            return None
        return (f"{image!r} is a file; {self.name} runs registry images (load the file with `{self.name} load` "
                'and give its name), or use runtime = "apptainer"')

    def version_argv(self) -> List[str]:
        return [self.name, "version", "--format", "{{.Server.Version}}"]

    def image_present_argv(self, spec: Spec, node: Optional[str] = None) -> List[str]:
        return self.image_digest_argv(spec)

    def pull_argv(self, spec: Spec) -> List[str]:
        return [self.name, "pull", spec.image]

    def image_digest_argv(self, spec: Spec) -> List[str]:
        return [self.name, "image", "inspect", "--format", "{{.Id}}", spec.image]

    def probe_argv(self, spec: Spec, command: Sequence[str], node: Optional[str] = None, name: str = "",
                   labels: Optional[Mapping[str, str]] = None) -> List[str]:
        named = ["--name", name] if name else []
        return [self.name, "run", "--rm", "--init", *named, *_label_flags(labels or {}), "--network", "host",
                "--pull", "never", *spec.options, spec.image, *command]


class Docker(_Oci):
    name = "docker"
    client_errors = ("docker: ", "Error response from daemon: ")
    #: its --init is tini: this makes it signal the command's process group, so a stop reaches a
    #: program the shell did not exec (``a && b``, a pipe), not only the shell
    init_env = ("TINI_KILL_PROCESS_GROUP=1",)

    def _gpu_flags(self, gpus: Sequence[int]) -> List[str]:
        # the quotes are docker's: its --gpus value is CSV, and the list has commas
        return ["--gpus", '"device=' + ",".join(str(i) for i in gpus) + '"']


class Podman(_Oci):
    name = "podman"
    client_errors = ("Error: ", "podman: ", "Error response from daemon: ")
    #: its --init (catatonit, or tini) reads no such variable: a second one with -g runs the command
    init = ("/run/podman-init", "-g", "--")

    def _gpu_flags(self, gpus: Sequence[int]) -> List[str]:
        return [w for i in gpus for w in ("--device", f"nvidia.com/gpu={i}")]  # nvidia-ctk's CDI names


class _ImageFile(ContainerRuntime):
    """apptainer and enroot: they run an image file; a registry image is pulled into IMAGES_DIR first."""

    #: the pulled file's
    suffix = ""
    #: how ``probe_argv`` starts the image
    probe_words: Tuple[str, ...] = ()

    # The file it runs: the image itself where it is a file, else where ``pull_argv`` puts the registry
    # image (one file per reference, under ``images_dir``)
    def image_file(self, spec: Spec, images_dir: str = IMAGES_DIR, home: Optional[str] = None) -> str:
        if is_image_file(spec.image):
            return expand(spec.image, home)
        reference = spec.image.split("://", 1)[-1]
        safe = UNSAFE_CHARS.sub("_", reference).strip("_.")[:80] or "image"
        digest = hashlib.sha256(spec.image.encode()).hexdigest()[:8]
        return os.path.join(expand(images_dir, home), f"{safe}-{digest}{self.suffix}")

    def image_present_argv(self, spec: Spec, node: Optional[str] = None) -> List[str]:
        return ["test", "-e", self.image_file(spec)]

    def probe_argv(self, spec: Spec, command: Sequence[str], node: Optional[str] = None, name: str = "",
                   labels: Optional[Mapping[str, str]] = None) -> List[str]:
        return [self.name, *self.probe_words, *spec.options, self.image_file(spec), *command]

    # The file is written beside its final path and moved there, so a failed or concurrent pull never
    # leaves a half file where ``image_present_argv`` looks; None for an image file
    def pull_argv(self, spec: Spec) -> Optional[List[str]]:
        if is_image_file(spec.image):
            return None
        target = self.image_file(spec)
        fetch, uri = self._fetch(spec.image)
        script = ('mkdir -p "$(dirname "$1")" && tmp="$1.part.$$" && rm -f "$tmp" && '
                  f'{{ {fetch} && mv -f "$tmp" "$1"; }} || {{ rm -f "$tmp"; exit 1; }}')
        return ["/bin/sh", "-c", script, "distlaunch-pull", target, uri]

    # (the shell command that writes the file "$tmp" from "$2", the registry image as "$2")
    @abstractmethod
    def _fetch(self, image: str) -> Tuple[str, str]: ...


class Apptainer(_ImageFile):
    name = "apptainer"
    suffix = ".sif"
    probe_words = ("exec", "--cleanenv")  # the host's PYTHONPATH must not answer for the image

    def _argv(self, spec: Spec, run: Run) -> List[str]:
        argv = [self.name, "exec"]
        if run.gpus:
            argv.append("--nv")
        for bind in run.binds:
            argv += ["--bind", _bind_text(bind)]
        if run.workdir:
            argv += ["--pwd", run.workdir]
        return [*argv, *spec.options, self.image_file(spec), *run.command]

    # --nv shows every GPU, so CUDA_VISIBLE_DEVICES stays as the plan set it; each variable is also
    # given as APPTAINERENV_<NAME>, which wins over the image's own values
    def environ(self, environ: Mapping[str, str], *, env_names: Sequence[str],
                gpus: Optional[Sequence[int]]) -> Dict[str, str]:
        env = dict(environ)
        for name in _names(env_names):
            if name in environ:
                env[f"APPTAINERENV_{name}"] = environ[name]
        return env

    def _fetch(self, image: str) -> Tuple[str, str]:
        return 'apptainer pull --force "$tmp" "$2"', image if "://" in image else f"docker://{image}"


class Enroot(_ImageFile):
    name = "enroot"
    suffix = ".sqsh"
    probe_words = ("start",)
    nvidia_env = True

    def _argv(self, spec: Spec, run: Run) -> List[str]:
        argv = [self.name, "start"]
        for src, dst, mode in run.binds:
            options = "x-create=auto,rbind" + (",ro" if mode == "ro" else "")
            argv += ["--mount", f"{src}:{dst}:none:{options}"]
        for env in run.env:
            argv += ["--env", env]
        argv += [*spec.options, self.image_file(spec)]
        if run.workdir:  # enroot has no working-directory flag: a shell changes into it, then execs
            argv += ["/bin/sh", "-c", 'cd "$1" && shift && exec "$@"', "distlaunch-workdir", run.workdir]
        return [*argv, *run.command]

    def _fetch(self, image: str) -> Tuple[str, str]:
        return 'enroot import -o "$tmp" "$2"', enroot_uri(image)


class Pyxis(ContainerRuntime):
    name = "pyxis"
    nvidia_env = True
    slurm_step = True

    def _argv(self, spec: Spec, run: Run) -> List[str]:
        argv = [*_srun(run.name, run.node), f"--container-image={pyxis_image(spec.image)}"]
        if run.binds:
            argv.append("--container-mounts=" + ",".join(_bind_text(bind) for bind in run.binds))
        if run.workdir:
            argv.append(f"--container-workdir={run.workdir}")
        if run.env:
            argv.append("--container-env=" + ",".join(run.env))
        return [*argv, *spec.options, *run.command]

    def version_argv(self) -> None:
        return None  # srun's own; the image check starts a step in it

    # pyxis keeps no image of its own: for a registry image this starts ``true`` in it (which imports
    # it, as the task's start would), so exit 0 means "present or pullable"
    def image_present_argv(self, spec: Spec, node: Optional[str] = None) -> List[str]:
        if is_image_file(spec.image):
            return ["test", "-e", pyxis_image(spec.image)]
        return [*_srun(None, node), f"--container-image={pyxis_image(spec.image)}", "true"]

    def probe_argv(self, spec: Spec, command: Sequence[str], node: Optional[str] = None, name: str = "",
                   labels: Optional[Mapping[str, str]] = None) -> List[str]:
        return [*_srun(None, node), f"--container-image={pyxis_image(spec.image)}", *spec.options, *command]


ADAPTERS: Dict[str, ContainerRuntime] = {a.name: a for a in (Docker(), Podman(), Apptainer(), Enroot(), Pyxis())}
#: what a profile's container.runtime may be
RUNTIMES = tuple(ADAPTERS)
#: runtimes whose containers a daemon (or conmon) owns: teardown must go through the runtime
DAEMON_RUNTIMES = tuple(name for name, adapter in ADAPTERS.items() if adapter.daemon)
DEFAULT_RUNTIME = Docker.name


def adapter_for(runtime: str) -> ContainerRuntime:
    """The adapter of the runtime named ``runtime``; ValueError for a name that is none."""
    adapter = ADAPTERS.get(runtime) if isinstance(runtime, str) else None
    if adapter is None:
        raise ValueError(f"unknown container runtime {runtime!r}; valid: {', '.join(RUNTIMES)}")
    return adapter


def is_image_file(image: str) -> bool:
    """Whether ``image`` names a file (a path, or a .sif/.sqsh name) rather than a registry image."""
    return image.startswith(PATH_STARTS) or image.endswith(_IMAGE_FILE_SUFFIXES)


def enroot_uri(image: str) -> str:
    """A docker reference as enroot writes it: ``docker://[REGISTRY#]IMAGE[:TAG]``."""
    if "://" in image:
        scheme, rest = image.split("://", 1)
        return image if scheme != "docker" else "docker://" + _registry_hash(rest)
    return "docker://" + _registry_hash(image)


def pyxis_image(image: str) -> str:
    """``--container-image``'s value: a file path as it is, else ``[REGISTRY#]IMAGE[:TAG]``."""
    if is_image_file(image):
        return expand(image, None)
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


def check_path(path: str, what: str) -> None:
    """ValueError unless ``path`` is absolute without ':' or ',' (which runtimes read as separators)."""
    if not path.startswith("/") or ":" in path or "," in path:
        raise ValueError(f"container {what} {path!r} must be an absolute path without ':' or ','")


def expand(path: str, home: Optional[str]) -> str:
    """``path`` with ~ as ``home`` (None: this process's)."""
    if home is not None and (path == "~" or path.startswith("~/")):
        return home.rstrip("/") + path[1:]
    return os.path.expanduser(path)


#: set by the launcher in each step of a heterogeneous Slurm job's component (transport/slurm.py):
#: a step started from inside one must name its component, or srun refuses it
HET_GROUP_VAR = "DISTLAUNCH_SLURM_HET_GROUP"


def _srun(name: Optional[str], node: Optional[str]) -> List[str]:
    group = os.environ.get(HET_GROUP_VAR, "")
    return ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--quiet", "--kill-on-bad-exit=0", "--export=ALL",
            *([f"--het-group={group}"] if group.isdigit() else []),
            *([f"--nodelist={node}"] if node else []), *([f"--job-name={name}"] if name else [])]


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


def _bind_text(bind: Bind) -> str:
    src, dst, mode = bind
    return ":".join([src, dst] + ([mode] if mode else []))
