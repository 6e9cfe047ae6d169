"""The container spec: the profile's ``container`` table as it reaches the agent, checked, and what
is the same for every runtime (the container's name and labels, the TensorFlow probe).

Shipped in the agent (stdlib only, Python >= 3.9). The profile's ``container`` table (DESIGN.md
section 4) reaches the agent as the JSON of ``ContainerSpec``; each runtime's command lines are its
adapter's (launcher/agent/containeradapters.py, ``spec.adapter``), built only, never run here.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from launcher.agent.containeradapters import (
    ADAPTERS,
    DEFAULT_RUNTIME,
    UNSAFE_CHARS,
    Bind,
    ContainerRuntime,
    adapter_for,
    check_path,
    expand,
)
from launcher.agent.containeradapters import DAEMON_RUNTIMES as DAEMON_RUNTIMES  # the profile's checks read them here
from launcher.agent.containeradapters import RUNTIMES as RUNTIMES

PULL_POLICIES = ("never", "missing", "always")
#: labels every container of a run carries (docker / podman)
RUN_LABEL = "distlaunch.run"
TASK_LABEL = "distlaunch.task"
#: docker's limit is larger; 128 keeps names readable and inside every runtime's limit
MAX_NAME = 128
#: the line ``tf_version_argv`` prints before the version (an image's entrypoint may print too)
TF_VERSION_MARKER = "distlaunch-tf-version:"

_JSON_KEYS = ("image", "runtime", "mounts", "options", "pull", "extra")
_MODES = ("ro", "rw")


def image_problem(image: object, runtime: Optional[str] = None) -> Optional[str]:
    """Why ``image`` cannot be a container image (reference or file; for ``runtime``), else None."""
    if not isinstance(image, str) or not image.strip():
        return 'is empty; give an image, e.g. image = "tensorflow/tensorflow:2.16.1-gpu"'
    if any(c.isspace() or not c.isprintable() for c in image):
        return f"{image!r} has spaces or control characters; give an image reference or a file path without them"
    if image.startswith("-"):
        return f"{image!r} starts with '-', which the runtime would read as an option; give the image's name"
    adapter = ADAPTERS.get(runtime) if isinstance(runtime, str) else None
    return adapter.image_problem(image) if adapter is not None else None


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
    return expand(parts[0], home), parts[1], parts[2] if len(parts) == 3 else None


@dataclass(frozen=True)
class ContainerSpec:
    image: str
    runtime: str = DEFAULT_RUNTIME
    mounts: Tuple[str, ...] = ()  # "SRC:DST[:ro]" on top of the defaults (workdir, outputs, run dir)
    options: Tuple[str, ...] = ()  # extra runtime flags, as given
    pull: str = "missing"
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def adapter(self) -> ContainerRuntime:
        """The runtime's command lines (ValueError for an unknown runtime)."""
        return adapter_for(self.runtime)

    def binds(self, mounts: Sequence[str], home: Optional[str]) -> List[Bind]:
        """``mounts`` (host paths, the same path inside), then the spec's (~ is ``home``); a spec
        mount replaces a default one at the same place inside, and each place inside is mounted once."""
        binds: Dict[str, Bind] = {}
        for path in mounts:
            check_path(path, "mount")
            binds.setdefault(path.rstrip("/") or "/", (path, path, None))
        for mount in self.mounts:
            src, dst, mode = parse_mount(mount, home)
            check_path(src, "mount")
            binds[dst.rstrip("/") or "/"] = (src, dst, mode)
        return list(binds.values())

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
        runtime = data.get("runtime", DEFAULT_RUNTIME)
        adapter_for(runtime)  # ValueError for a name that is no runtime's
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
    run = UNSAFE_CHARS.sub("-", run_id).strip("-.") or "run"
    task = UNSAFE_CHARS.sub("-", task_id).strip("-.") or "task"
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



def tf_version_argv(spec: ContainerSpec, python: str, node: Optional[str] = None, name: str = "",
                    labels: Optional[Mapping[str, str]] = None) -> List[str]:
    """Runs ``python -c 'import tensorflow; print(version)'`` in the image (``probe_argv``: as a
    task's would, host network, no mounts, without pulling); the version is on the line that starts
    with TF_VERSION_MARKER (``parse_tf_version``)."""
    probe = [python, "-c", f"import tensorflow as tf; print({TF_VERSION_MARKER!r} + tf.__version__)"]
    return spec.adapter.probe_argv(spec, probe, node, name=name, labels=labels)


def parse_tf_version(stdout: str) -> Optional[str]:
    """The version ``tf_version_argv`` printed, else None."""
    for line in reversed(stdout.splitlines()):
        if line.startswith(TF_VERSION_MARKER):
            return line[len(TF_VERSION_MARKER):].strip() or None
    return None
