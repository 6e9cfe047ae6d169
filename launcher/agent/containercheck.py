"""Preflight of a host's container images, on the host: the runtime answers, the image is there
(or pulled as ``pull`` says), its digest, and the TensorFlow version inside it.

The agent's ``preflight --containers JSON`` runs it (one round trip with the other checks); the
launcher words the problems and puts digest and version in the hosts' parity table
(launcher/remote/imagecheck.py). Stdlib-only, Python >= 3.9 (runs on hosts from the agent zipapp).
"""

from __future__ import annotations

import itertools
import os
import subprocess

from launcher.agent import containerrt as rt

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Sequence, Tuple

    from launcher.agent.containeradapters import ContainerRuntime

#: a pull of a large image (TensorFlow's GPU images are several GB) over a slow link
PULL_SECONDS = 900.0
#: the runtime's client answering whether the image is here, and its digest
QUERY_SECONDS = 30.0
#: starting the image and importing TensorFlow in it (a cold disk may take a while)
TF_SECONDS = 170.0
#: the TensorFlow probe's task label (its run label is the run's, where the launcher names it)
PROBE_TASK = "preflight"
_PROBES = itertools.count(1)
#: `up`'s version check inside the image: package metadata (milliseconds), an import only without it
METADATA_PROBE = (
    "import sys\n"
    "try:\n"
    "    from importlib import metadata\n"
    "    for n in ('tensorflow', 'tensorflow-cpu', 'tensorflow-gpu', 'tf-nightly', 'tensorflow-intel'):\n"
    "        try:\n"
    "            print(%r + metadata.version(n)); sys.exit(0)\n"
    "        except metadata.PackageNotFoundError:\n"
    "            pass\n"
    "except ImportError:\n"
    "    pass\n"
    "import tensorflow as tf\n"
    "print(%r + tf.__version__)\n" % (rt.TF_VERSION_MARKER, rt.TF_VERSION_MARKER))


def probe_name(run_id: str) -> str:
    """The TensorFlow probe's container: unique per run, host agent and image checked."""
    return rt.container_name(run_id or "preflight", "%s-%d" % (PROBE_TASK, os.getpid()), next(_PROBES))


def _call(argv: Sequence[str], timeout: float) -> Tuple[int, str, str]:
    try:
        done = subprocess.run(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return 124, "", "no answer within %g s" % timeout
    except OSError as exc:
        return 127, "", "%s: %s" % (argv[0], exc.strerror or exc)
    return done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")


def _last(text: str, code: int) -> str:
    lines = [ln.strip() for ln in text.splitlines()
             if ln.strip() and not ln.strip().startswith(("See '", "Run '"))]
    return lines[-1] if lines else "exit code %d" % code


def runtime_answers(runtime: ContainerRuntime) -> Optional[str]:
    """None when the runtime's client (and its daemon) answer, else why not in a few words."""
    argv = runtime.version_argv()
    if argv is None:
        return None  # srun's own (pyxis); the image check starts a step in it
    code, _, err = _call(argv, QUERY_SECONDS)
    if code == 127:
        return "%s is not installed here (not on the PATH)" % runtime.name
    if code != 0:
        return "%s does not answer: %s" % (runtime.name, _last(err, code))
    return None


def short_digest(text: str) -> Optional[str]:
    """``sha256:1a2b...`` -> its first 12 hex digits (what ``docker images`` shows)."""
    word = text.strip().split()[0] if text.strip() else ""
    word = word.split(":", 1)[-1]
    return word[:12] or None


def check_image(item: Dict[str, Any]) -> Dict[str, Any]:
    """One image: ``{"container": ContainerSpec JSON, "python": ..., "tensorflow": "import" |
    "metadata" | None, "run": run id}`` -> what the launcher judges: ``present``, ``pulled``,
    ``digest``, ``tensorflow`` (or ``tf_error``), ``error`` (the image cannot be used here).
    The TensorFlow probe's container (docker/podman) is named and labelled with the run, and
    removed when it does not answer in time (killing its client leaves it running)."""
    spec = rt.ContainerSpec.from_json(item.get("container") or {})
    answer: Dict[str, Any] = {"image": spec.image, "runtime": spec.runtime, "pull": spec.pull}
    node = os.environ.get("SLURMD_NODENAME")
    runtime = spec.adapter
    why = runtime_answers(runtime)
    if why is not None:
        answer["error"] = why
        return answer
    present = _call(runtime.image_present_argv(spec, node), PULL_SECONDS if runtime.slurm_step else QUERY_SECONDS)
    answer["present"] = present[0] == 0
    pull = runtime.pull_argv(spec)
    if pull is not None and (spec.pull == "always" or (spec.pull == "missing" and not answer["present"])):
        code, _, err = _call(pull, PULL_SECONDS)
        if code != 0:
            answer["error"] = "cannot pull it: %s" % _last(err, code)
            if not answer["present"] or spec.pull == "always":
                return answer
        else:
            answer["pulled"], answer["present"] = True, True
    if not answer["present"]:
        answer["error"] = "not present" + (" (pull = never)" if spec.pull == "never" else "")
        return answer
    digest = runtime.image_digest_argv(spec)
    if digest is not None:
        code, out, _ = _call(digest, QUERY_SECONDS)
        answer["digest"] = short_digest(out) if code == 0 else None
    how = item.get("tensorflow")
    if how in ("import", "metadata"):
        name = probe_name(str(item.get("run") or ""))
        labels = {rt.TASK_LABEL: PROBE_TASK}
        if item.get("run"):
            labels = {rt.RUN_LABEL: str(item["run"]), **labels}
        argv = rt.tf_version_argv(spec, str(item.get("python") or "python3"), node, name=name, labels=labels)
        if how == "metadata":
            argv[-1] = METADATA_PROBE  # the probe's code is its last word
        code, out, err = _call(argv, TF_SECONDS)
        if code == 124 and runtime.daemon:  # its client is killed, the container is not
            _call(runtime.remove_argv([name]) or ["true"], QUERY_SECONDS)
        version = rt.parse_tf_version(out)
        if version is not None:
            answer["tensorflow"] = version
        else:
            answer["tf_error"] = _last(err, code)
    return answer


def check_images(items: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Every image of the host's tasks, in order; one's trouble is its own answer's ``error``."""
    answers = []
    for item in items:
        try:
            answers.append(check_image(item))
        except (ValueError, TypeError, KeyError) as exc:
            container = item.get("container") if isinstance(item, dict) else None
            image = container.get("image") if isinstance(container, dict) else None
            answers.append({"image": image, "error": "bad container spec: %s" % exc})
    return answers
