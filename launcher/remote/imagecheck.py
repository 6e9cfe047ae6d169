"""The launcher's side of the container images' preflight: what each host is asked, and its answer
as problem lines and parity columns.

Each host's preflight gets the images of its tasks (``--containers``; on the host,
launcher/agent/containercheck.py checks that the runtime answers, finds or pulls each image per its
``pull``, reads its digest and the TensorFlow version inside). A missing image, a runtime that does
not answer and a TensorFlow that does not import in the image are one line each, naming the host
and the image; the digest and the image's TensorFlow go into the hosts' rows, where a digest that
differs across hosts is flagged like any compared column.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from launcher.agent.containeradapters import DEFAULT_RUNTIME
from launcher.model import Plan
from launcher.plan import task_container
from launcher.remote.parity import HostRow


def container_checks(plan: Plan, tensorflow: str) -> dict[str, list[dict[str, Any]]]:
    """Host name -> the images its tasks run in, each once per (image spec, python), with how the
    TensorFlow version inside is read: ``tensorflow`` ("import" for `check`, "metadata" for `up`),
    or not at all for a custom strategy."""
    how = tensorflow if plan.profile.strategy != "custom" else None
    checks: dict[str, list[dict[str, Any]]] = {}
    for task in plan.tasks:
        container = task_container(plan, task)
        if container is None:
            continue
        item = {"container": container.to_json(), "python": task.python, "tensorflow": how}
        mine = checks.setdefault(task.host, [])
        if item not in mine:
            mine.append(item)
    return checks


def containerised_only(plan: Plan, host: str) -> bool:
    """Every task of ``host`` runs in a container: the host's own Python needs no TensorFlow."""
    tasks = [t for t in plan.tasks if t.host == host]
    return bool(tasks) and all(task_container(plan, t) is not None for t in tasks)


def image_problems(host: str, answer: Mapping[str, Any]) -> list[str]:
    """One line per image the host cannot run a task from, naming host, image and the fix."""
    problems: list[str] = []
    for found in answer.get("containers") or []:
        image, runtime = found.get("image"), found.get("runtime") or DEFAULT_RUNTIME
        error = found.get("error")
        if error == "not present (pull = never)":
            problems.append(f"host {host}: container image {image} is not present and pull = \"never\"; "
                            f"load it there ({runtime} pull / load) or set container.pull = \"missing\"")
        elif error == "not present":
            problems.append(f"host {host}: container image {image} is not present and nothing can pull it; "
                            "put the image file there or fix container.image")
        elif isinstance(error, str) and error.startswith("cannot pull it: "):
            problems.append(f"host {host}: container image {image} is not present and {runtime} cannot pull it "
                            f"({error[len('cannot pull it: '):]}); fix container.image, or load it there")
        elif error:
            problems.append(f"host {host}: cannot use container image {image}: {error}; fix the runtime there "
                            "or container.runtime")
        elif found.get("tf_error"):
            problems.append(f"host {host}: `import tensorflow` fails in container image {image} "
                            f"({found['tf_error']}); use an image with TensorFlow or fix `python`")
    return problems


def add_images(row: HostRow, answer: Mapping[str, Any], containerised: bool) -> None:
    """The host's images into its row: ``images`` (reference -> short digest), and as its TensorFlow the image's
    where every task there runs in a container (the host's own interpreter then does not matter)."""
    found: Sequence[Mapping[str, Any]] = [c for c in answer.get("containers") or [] if not c.get("error")]
    if not found:
        return
    row.images = {str(c.get("image")): (str(c["digest"]) if c.get("digest") else None) for c in found}
    versions = [str(c["tensorflow"]) for c in found if c.get("tensorflow")]
    row.image_tensorflow = ", ".join(dict.fromkeys(versions)) or None
    if containerised and versions:
        row.tensorflow = versions[0]
        row.cuda = None  # the host's build says nothing of the image's
