"""The hosts side by side before a launch: one row per host and what its differences mean.

Each host's preflight answers its Python and TensorFlow versions and its facts
(launcher/agent/hostfacts.py: free space at the outputs and the run dir, free memory, its clock,
its GPUs). ``judge`` turns the rows into warnings and errors: TensorFlow major.minor differing
across hosts breaks a TensorFlow strategy's job (an error unless ``allow_version_skew``), patch
levels and Python differing are warnings, so are low disk space (``min_free_disk``) and a clock
more than ``hostclock.TOLERANCE_S`` off; GPUs a task is given that the host lacks are an error,
GPUs holding other processes' memory a warning or an error (``gpu_busy``); a script that would
``fit`` with Keras 3 under a multi-worker strategy a warning naming the fix (launcher/remote/kerasfit.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from launcher.model import Plan
from launcher.profile.sizes import show_size
from launcher.remote import kerasfit
from launcher.remote.hostclock import TOLERANCE_S


@dataclass
class HostRow:
    """What one host offers the job."""

    host: str
    python: str | None = None
    tensorflow: str | None = None
    #: "CUDA 12.2, cuDNN 8" of a GPU build of TensorFlow (known where `check` imported it)
    cuda: str | None = None
    #: each GPU: index, name, driver, mem_total_bytes, others_pids, others_bytes; None: no NVML there
    gpus: list[dict[str, Any]] | None = None
    #: whether the GPUs were read (a launch reads them only on hosts whose tasks are given GPUs)
    gpus_read: bool = True
    #: free bytes at each path: "outputs" and "run dir" -> (path, bytes)
    disk: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    mem_available_bytes: int | None = None
    #: host clock minus launcher clock, seconds (the answer's travel time makes it a little low)
    clock_offset: float | None = None
    #: the container images the host's tasks run in: reference -> short digest (launcher/remote/imagecheck.py)
    images: dict[str, str | None] = field(default_factory=dict)
    #: the TensorFlow version inside those images
    image_tensorflow: str | None = None
    #: whether tf_keras (Keras 2) is importable by the host's Python; None: not known
    tf_keras: bool | None = None

    def image_summary(self) -> str:
        if not self.images:
            return "-"
        digests = ", ".join(d or ref for ref, d in self.images.items())
        return digests + (f" (TF {self.image_tensorflow})" if self.image_tensorflow else "")

    def gpu_summary(self) -> str:
        if not self.gpus_read:
            return "-"
        if self.gpus is None:
            return "no NVML"
        if not self.gpus:
            return "none"
        names = sorted({str(g.get("name")) for g in self.gpus})
        drivers = sorted({str(g.get("driver")) for g in self.gpus})
        cudas = sorted({str(g.get("cuda")) for g in self.gpus if g.get("cuda")})
        others = sum(int(g.get("others_bytes") or 0) for g in self.gpus)
        return (f"{len(self.gpus)}x {'/'.join(names)}, driver {'/'.join(drivers)}"
                + (f", CUDA {'/'.join(cudas)}" if cudas else "")
                + (f", {show_size(others)} used by others" if others else ""))


def row_from_answer(host: str, answer: Mapping[str, Any], received: float, outputs: str, run_dir: str,
                    version: str | None) -> HostRow:
    """A host's row from its preflight answer (received at ``received``, launcher clock) and its
    version line (``python tensorflow (how) [cuda X cudnn Y]``, launcher/remote/preflight.py)."""
    facts = answer.get("facts") or {}
    words = (version or "").split()
    row = HostRow(host, python=str(answer.get("python") or (words[0] if words else "")) or None)
    if len(words) >= 2 and not words[1].startswith("("):
        row.tensorflow = words[1]
    if "cuda" in words and "cudnn" in words:
        row.cuda = f"CUDA {words[words.index('cuda') + 1]}, cuDNN {words[words.index('cudnn') + 1]}"
    disk = facts.get("disk") or {}
    for label, path in (("outputs", outputs), ("run dir", run_dir)):
        if path:
            row.disk[label] = (path, disk.get(path))
    row.mem_available_bytes = facts.get("mem_available_bytes")
    row.gpus = facts.get("gpus")
    row.tf_keras = facts["tf_keras"] if isinstance(facts.get("tf_keras"), bool) else None
    row.gpus_read = "gpus" in facts
    if isinstance(facts.get("time"), int | float):
        row.clock_offset = float(facts["time"]) - received
    return row


def _major_minor(version: str) -> str:
    return ".".join(version.split(".")[:2])


def _spread(rows: Sequence[HostRow], value: Any) -> str:
    """"2.15.0 on a, b; 2.16.1 on c": which hosts have which value."""
    by_value: dict[str, list[str]] = {}
    for row in rows:
        by_value.setdefault(str(value(row)), []).append(row.host)
    return "; ".join(f"{v} on {', '.join(hosts)}" for v, hosts in by_value.items())


#: the columns compared across hosts: what differs there is flagged
COMPARED = {"PYTHON": lambda r: r.python, "TENSORFLOW": lambda r: r.tensorflow, "CUDA/CUDNN": lambda r: r.cuda,
            "GPUS": lambda r: None if r.gpus is None or not r.gpus_read
            else sorted({(g.get("name"), g.get("driver")) for g in r.gpus}),
            "IMAGE": lambda r: r.image_summary() if r.images else None}


def differing(rows: Sequence[HostRow]) -> list[str]:
    """The compared columns whose value is not the same on every host (hosts that do not know,
    e.g. without TensorFlow for a custom strategy, are left out)."""
    return [name for name, value in COMPARED.items()
            if len({str(value(r)) for r in rows if value(r) is not None}) > 1]


def judge(plan: Plan, rows: Sequence[HostRow]) -> tuple[list[str], list[str]]:
    """(warnings, errors), each one line naming the host(s) and what to do."""
    profile = plan.profile
    warnings: list[str] = []
    errors: list[str] = []
    # a TensorFlow in a container image counts as one more place the job's tasks run
    with_tf = [r for r in rows if r.tensorflow] + [
        HostRow(f"{r.host} (its image)", tensorflow=v) for r in rows if r.image_tensorflow
        for v in r.image_tensorflow.split(", ") if v != r.tensorflow]
    if len({_major_minor(r.tensorflow or "") for r in with_tf}) > 1:
        line = f"TensorFlow differs across hosts ({_spread(with_tf, lambda r: r.tensorflow)})"
        if profile.strategy != "custom" and not profile.allow_version_skew:
            errors.append(f"{line}: the tasks of one job need the same major.minor; install one version "
                          "everywhere (or set allow_version_skew = true)")
        else:
            warnings.append(line)
    elif len({r.tensorflow for r in with_tf}) > 1:
        warnings.append(f"TensorFlow patch levels differ across hosts ({_spread(with_tf, lambda r: r.tensorflow)})")
    for ref in sorted({ref for r in rows for ref in r.images}):
        holders = [r for r in rows if r.images.get(ref)]
        if len({r.images[ref] for r in holders}) > 1:
            spread = _spread(holders, lambda r, ref=ref: r.images[ref])
            warnings.append(f"container image {ref} differs across hosts ({spread}): the same reference holds "
                            "other contents there; pull or load one image everywhere")
    with_py = [r for r in rows if r.python]
    if len({r.python for r in with_py}) > 1:
        warnings.append(f"Python differs across hosts ({_spread(with_py, lambda r: r.python)})")
    with_cuda = [r for r in rows if r.cuda]
    if len({r.cuda for r in with_cuda}) > 1:
        warnings.append(f"TensorFlow's CUDA build differs across hosts ({_spread(with_cuda, lambda r: r.cuda)})")
    for row in rows:
        for label, (path, free) in row.disk.items():
            if free is not None and free < profile.min_free_disk:
                warnings.append(f"host {row.host}: only {show_size(free)} free at {path} ({label}); "
                                f"min_free_disk = {show_size(profile.min_free_disk)}")
        if row.clock_offset is not None and abs(row.clock_offset) > TOLERANCE_S:
            ahead = "ahead of" if row.clock_offset > 0 else "behind"
            warnings.append(f"host {row.host}: clock is {abs(row.clock_offset):.0f} s {ahead} the launcher's; "
                            "event times, stall detection and the timeline depend on it: sync it (NTP)")
    warnings += kerasfit.judge(plan, {r.host: r.tensorflow for r in rows}, {r.host: r.tf_keras for r in rows})
    gpu_warnings, gpu_errors = _judge_gpus(plan, rows)
    return warnings + gpu_warnings, errors + gpu_errors


def _judge_gpus(plan: Plan, rows: Sequence[HostRow]) -> tuple[list[str], list[str]]:
    warnings: list[str] = []
    errors: list[str] = []
    by_host = {r.host: r for r in rows}
    asked: dict[str, dict[int, list[str]]] = {}
    for task in plan.tasks:
        for index in task.gpus:
            asked.setdefault(task.host, {}).setdefault(index, []).append(task.task_id)
    for host, indices in asked.items():
        row = by_host.get(host)
        if row is None:
            continue
        if row.gpus is None:
            warnings.append(f"host {host}: tasks are given GPUs {sorted(indices)} but NVML cannot be read there "
                            "(no pynvml or no driver): their GPUs are not checked")
            continue
        have = {int(g.get("index", -1)): g for g in row.gpus}
        missing = sorted(i for i in indices if i not in have)
        if missing:
            tasks = sorted({t for i in missing for t in indices[i]})
            errors.append(f"host {host} has {len(have)} GPU(s) but {', '.join(tasks)} "
                          f"{'is' if len(tasks) == 1 else 'are'} given GPU {', '.join(map(str, missing))}; "
                          f"fix hosts.{host}.gpus (or the roles' gpus_per_task)")
        for index in sorted(i for i in indices if i in have):
            gpu = have[index]
            used = int(gpu.get("others_bytes") or 0)
            pids = list(gpu.get("others_pids") or [])
            if not used and not pids:
                continue
            line = (f"host {host}: GPU {index}, given to {', '.join(indices[index])}, holds "
                    f"{show_size(used)} of other processes (pids {', '.join(map(str, pids[:5]))})")
            if plan.profile.gpu_busy == "refuse":
                errors.append(f"{line}; stop them or set gpu_busy = \"warn\"")
            else:
                warnings.append(line)
    return warnings, errors


def _clock(offset: float | None) -> str:
    return "?" if offset is None else f"{round(offset, 1) + 0.0:+.1f} s"


def table(rows: Sequence[HostRow]) -> str:
    """One row per host; a compared column whose values differ says "differs" in its header."""
    flagged = set(differing(rows))
    images = any(r.images for r in rows)  # the column only where a task runs in a container
    headers = ["HOST", "PYTHON", "TENSORFLOW", "CUDA/CUDNN", "GPUS", *(["IMAGE"] if images else []), "FREE OUTPUTS",
               "FREE RUN DIR", "FREE MEM", "CLOCK"]
    lines = [[h + (" differs" if h in flagged else "") for h in headers]]
    for r in rows:
        lines.append([r.host, r.python or "?", r.tensorflow or "-", r.cuda or "-", r.gpu_summary(),
                      *([r.image_summary()] if images else []),
                      show_size(r.disk.get("outputs", ("", None))[1]), show_size(r.disk.get("run dir", ("", None))[1]),
                      show_size(r.mem_available_bytes), _clock(r.clock_offset)])
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n"
                   for line in lines)


def as_json(rows: Sequence[HostRow], warnings: Sequence[str], errors: Sequence[str]) -> dict[str, Any]:
    """`check --json`: the rows, which columns differ, and the judgement."""
    return {"hosts": [dict(asdict(r), disk={k: {"path": p, "free_bytes": b} for k, (p, b) in r.disk.items()})
                      for r in rows],
            "differs": [name.lower() for name in differing(rows)], "warnings": list(warnings), "errors": list(errors)}
