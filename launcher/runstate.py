"""A run's state.json as one typed record: what its supervisor last knew of the job.

The supervisor writes it (``RunState.to_json``, through ``RunDir.write_state``); every reader
(``status``, ``attach``, ``down``, ``logs -f``, ``stacks``, ``profile``, ``drain``, completion,
the TensorBoard export) takes it through ``load_run_state``, which checks every field's type
once (``RunState.from_json``). A field of the wrong type is one line naming the file and the
field, never an internal error halfway through taking a job over. A key an older distlaunch did
not write reads as its default; ``launcher_pid``, the supervisor's pid under the name runs had
before the supervisor was a process of its own, is read here and nowhere else.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from launcher.agent import pid_alive
from launcher.errors import UserError
from launcher.model import HostConfig, SshSettings
from launcher.rundir import STATE_FILE, read_state

T = TypeVar("T")
U = TypeVar("U")


#: how long squeue's word on a remote supervisor's job is taken as still true
SLURM_SEEN_S = 3.0
#: (job id, cluster) -> (monotonic time asked, the job had not ended)
_SLURM_SEEN: dict[tuple[str, str | None], tuple[float, bool]] = {}


class StateFieldError(ValueError):
    """A field of state.json has a type no reader takes."""

    def __init__(self, where: str, wanted: str, value: object) -> None:
        super().__init__(f"field {where} is {_kind(value)}, not {wanted}")
        self.where = where


def _kind(value: object) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
             float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


# -- checked reads: each names the field it reads in what it raises -------------------------------------


def _str(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise StateFieldError(where, "a string", value)
    return value


def _int(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise StateFieldError(where, "an integer", value)
    return value


def _float(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise StateFieldError(where, "a number", value)
    return float(value)


def _bool(value: object, where: str) -> bool:
    if not isinstance(value, bool):
        raise StateFieldError(where, "true or false", value)
    return value


def _obj(value: object, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise StateFieldError(where, "an object", value)
    return value


def _list(value: object, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise StateFieldError(where, "a list", value)
    return value


def _opt(read: Callable[[object, str], T]) -> Callable[[object, str], T | None]:
    def optional(value: object, where: str) -> T | None:
        return None if value is None else read(value, where)
    return optional


def _strs(value: object, where: str) -> list[str]:
    return [_str(item, f"{where}[{i}]") for i, item in enumerate(_list(value, where))]


def _table(value: object, where: str, read: Callable[[object, str], T]) -> dict[str, T]:
    return {key: read(item, f"{where}.{key}") for key, item in _obj(value, where).items()}


def _key(data: Mapping[str, Any], key: str, where: str, read: Callable[[object, str], T], default: U) -> T | U:
    """``data[key]`` read by ``read``; ``default`` where an older distlaunch did not write it, or
    wrote null for a field that has a value when it has none (a task's host: "")."""
    if key not in data or (data[key] is None and default is not None):
        return default
    return read(data[key], f"{where}{key}")


# -- the record -----------------------------------------------------------------------------------------


@dataclass
class HostRecord:
    """How to reach one host of the run again (``runhosts.open_sessions``)."""

    config: dict[str, Any] | None = None  # host_to_json's HostConfig
    base_dir: str = ""
    python: str = ""
    outputs_dir: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"config": self.config, "base_dir": self.base_dir, "python": self.python,
                "outputs_dir": self.outputs_dir}

    @classmethod
    def from_json(cls, data: object, where: str) -> HostRecord:
        d = _obj(data, where)
        w = f"{where}."
        return cls(_key(d, "config", w, _opt(_obj), None), _key(d, "base_dir", w, _str, ""),
                   _key(d, "python", w, _str, ""), _key(d, "outputs_dir", w, _opt(_str), "") or "")


@dataclass
class TaskRecord:
    """One task as the supervisor last knew it."""

    host: str = ""
    slug: str = ""
    address: str = ""
    port: int | None = None
    pid: int | None = None
    state: str = ""
    restarts: int = 0
    incarnation: int | None = None  # None: not recorded (its restarts stand in)
    python: str = ""
    profiler_port: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "slug": self.slug, "address": self.address, "port": self.port, "pid": self.pid,
                "state": self.state, "restarts": self.restarts, "incarnation": self.incarnation,
                "python": self.python, "profiler_port": self.profiler_port}

    @classmethod
    def from_json(cls, data: object, where: str) -> TaskRecord:
        d = _obj(data, where)
        w = f"{where}."
        return cls(_key(d, "host", w, _str, ""), _key(d, "slug", w, _str, ""), _key(d, "address", w, _str, ""),
                   _key(d, "port", w, _opt(_int), None), _key(d, "pid", w, _opt(_int), None),
                   _key(d, "state", w, _str, ""), _key(d, "restarts", w, _opt(_int), 0) or 0,
                   _key(d, "incarnation", w, _opt(_int), None), _key(d, "python", w, _str, ""),
                   _key(d, "profiler_port", w, _opt(_int), None))


@dataclass
class PendingRecord:
    """A group restart scheduled and not yet carried out: `attach` carries it out when due."""

    tasks: list[str]
    due: float
    counted: bool = True  # against max_restarts and backoff_limit (a move after a host left is not)

    def to_json(self) -> dict[str, Any]:
        return {"tasks": list(self.tasks), "due": self.due, "counted": self.counted}

    @classmethod
    def from_json(cls, data: object, where: str) -> PendingRecord:
        d = _obj(data, where)
        w = f"{where}."
        return cls(_key(d, "tasks", w, _strs, []), _key(d, "due", w, _opt(_float), 0.0) or 0.0,
                   _key(d, "counted", w, _bool, True))


@dataclass
class HostStateRecord:
    """A host's state (up / unreachable / lost / drained / spare), why, and since when (wall time)."""

    state: str = "up"
    reason: str = ""
    since: float | None = None
    last_contact_s: float | None = None  # an unreachable host's silence so far, where known

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"state": self.state, "reason": self.reason, "since": self.since}
        if self.last_contact_s is not None:
            out["last_contact_s"] = self.last_contact_s
        return out

    @classmethod
    def from_json(cls, data: object, where: str) -> HostStateRecord:
        d = _obj(data, where)
        w = f"{where}."
        return cls(_key(d, "state", w, _str, "up") or "up", _key(d, "reason", w, _str, ""),
                   _key(d, "since", w, _opt(_float), None), _key(d, "last_contact_s", w, _opt(_float), None))


def _checkpoints(data: object, where: str) -> list[dict[str, Any]]:
    """A task's checkpoints: directory, host, files, step, copy (checked where the keeper reads them)."""
    items = [_obj(item, f"{where}[{i}]") for i, item in enumerate(_list(data, where))]
    for i, d in enumerate(items):
        w = f"{where}[{i}]."
        for key, read in (("task", _str), ("host", _str), ("directory", _str), ("files", _strs),
                          ("step", _opt(_int)), ("copy", _opt(_str))):
            _key(d, key, w, read, None)
    return items


def _move(data: object, where: str) -> dict[str, Any]:
    """One move or shrink (resolved.json's ``moves``): task, from, to (None: dropped), why, ts."""
    d = _obj(data, where)
    w = f"{where}."
    for key, read in (("task", _str), ("from", _str), ("to", _opt(_str)), ("why", _str), ("ts", _float)):
        _key(d, key, w, read, None)
    return d


def _resize(data: object, where: str) -> dict[str, Any]:
    """One change of a role's size (state.json's ``resizes``): role, before, after, why, ts."""
    d = _obj(data, where)
    w = f"{where}."
    for key, read in (("role", _str), ("before", _int), ("after", _int), ("why", _str), ("ts", _float)):
        _key(d, key, w, read, None)
    return d


@dataclass
class SlurmJobRecord:
    """The Slurm job a run was submitted as (`up` outside an allocation): its id, when, and the
    supervisor's node once the job started. Its live state and reason are Slurm's, asked anew
    (``commands/slurmwatch.py``), and told in ``slurm`` events."""

    job_id: str
    submitted: float | None = None
    node: str | None = None  # where the batch script (and so the supervisor) runs, once it does
    cluster: str | None = None  # the cluster sbatch_args named (-M): squeue and scancel are told it too
    #: times Slurm requeued the job (preempted, `scontrol requeue`, its time limit near): each one
    #: ended an allocation, and the run went on in the next (supervise/slurmlife.py)
    requeues: int = 0

    def to_json(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "submitted": self.submitted, "node": self.node, "cluster": self.cluster,
                "requeues": self.requeues}

    @classmethod
    def from_json(cls, data: object, where: str) -> SlurmJobRecord:
        d = _obj(data, where)
        w = f"{where}."
        return cls(_str(d.get("job_id"), f"{w}job_id"), _key(d, "submitted", w, _opt(_float), None),
                   _key(d, "node", w, _opt(_str), None), _key(d, "cluster", w, _opt(_str), None),
                   _key(d, "requeues", w, _opt(_int), 0) or 0)


@dataclass
class RunState:
    """Everything state.json holds (see the module's docstring)."""

    run_id: str
    profile: str | None = None
    overrides_set: list[str] = field(default_factory=list)  # --set items, secrets masked
    overrides_args: list[str] = field(default_factory=list)  # what followed `--`
    name: str | None = None
    strategy: str | None = None
    job_state: str | None = None
    job_reason: str = ""
    job_restarts: int = 0
    outcome: str | None = None
    supervisor_pid: int | None = None  # read from ``launcher_pid`` in files that have only that
    clients: int = 0
    updated: float | None = None
    hosts: dict[str, HostRecord] = field(default_factory=dict)
    tasks: dict[str, TaskRecord] = field(default_factory=dict)
    offsets: dict[str, dict[str, int]] = field(default_factory=dict)  # host -> agent file -> bytes read
    pending_restarts: list[PendingRecord] = field(default_factory=list)
    lost_events: dict[str, int] = field(default_factory=dict)
    host_states: dict[str, HostStateRecord] = field(default_factory=dict)
    host_losses: int = 0
    spares: list[str] | None = None  # None: not recorded (a run from before spares)
    moves: list[dict[str, Any]] = field(default_factory=list)
    left_behind: dict[str, list[str]] = field(default_factory=dict)
    moved_from: dict[str, str] = field(default_factory=dict)
    #: role -> the size an operator asked for with `distlaunch resize` (kept over an attach)
    resize_targets: dict[str, int] = field(default_factory=dict)
    #: every change of a role's size so far, oldest first (``status`` shows them)
    resizes: list[dict[str, Any]] = field(default_factory=list)
    #: task -> the checkpoints it announced, newest last, with where their copies are (supervise/checkpoints.py)
    checkpoints: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    last_contact: dict[str, float] = field(default_factory=dict)  # this boot's monotonic clock
    boot_id: str = ""
    #: role -> {"running": tasks it goes on with, "planned": its count, "min": its min_count}
    roles: dict[str, dict[str, int]] = field(default_factory=dict)
    #: when each phase of the launch ended, per host (launcher/remote/launchclock.py); {} before
    launch: dict[str, Any] = field(default_factory=dict)
    #: the Slurm job `up` submitted for this run (None: not submitted; inside salloc too)
    slurm: SlurmJobRecord | None = None

    def to_json(self) -> dict[str, Any]:
        out = self._fields_json()
        if self.slurm is not None:  # only a submitted run's record has it
            out["slurm"] = self.slurm.to_json()
        return out

    def _fields_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "profile": self.profile,
            "overrides": {"set": list(self.overrides_set), "args": list(self.overrides_args)},
            "name": self.name,
            "strategy": self.strategy,
            "job_state": self.job_state,
            "job_reason": self.job_reason,
            "job_restarts": self.job_restarts,
            "outcome": self.outcome,
            "supervisor_pid": self.supervisor_pid,
            "launcher_pid": self.supervisor_pid,  # the name readers before the supervisor process knew
            "clients": self.clients,
            "updated": self.updated,
            "hosts": {h: r.to_json() for h, r in self.hosts.items()},
            "tasks": {t: r.to_json() for t, r in self.tasks.items()},
            "offsets": self.offsets,
            "pending_restarts": [p.to_json() for p in self.pending_restarts],
            "lost_events": self.lost_events,
            "host_states": {h: r.to_json() for h, r in self.host_states.items()},
            "host_losses": self.host_losses,
            "spares": self.spares,
            "moves": self.moves,
            "left_behind": self.left_behind,
            "moved_from": self.moved_from,
            "resize_targets": self.resize_targets,
            "resizes": self.resizes,
            "checkpoints": self.checkpoints,
            "last_contact": self.last_contact,
            "boot_id": self.boot_id,
            "roles": self.roles,
            "launch": self.launch,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunState:
        """The record of ``data`` (state.json decoded); StateFieldError names the first field of a
        type no reader takes. Missing keys (older runs) read as their defaults."""
        d = data
        overrides = _key(d, "overrides", "", _opt(_obj), None) or {}
        pid = _key(d, "supervisor_pid", "", _opt(_int), None)
        if "supervisor_pid" not in d:
            pid = _key(d, "launcher_pid", "", _opt(_int), None)
        return cls(
            run_id=_str(d.get("run_id"), "run_id"),
            profile=_key(d, "profile", "", _opt(_str), None),
            overrides_set=_key(overrides, "set", "overrides.", _strs, []),
            overrides_args=_key(overrides, "args", "overrides.", _strs, []),
            name=_key(d, "name", "", _opt(_str), None),
            strategy=_key(d, "strategy", "", _opt(_str), None),
            job_state=_key(d, "job_state", "", _opt(_str), None),
            job_reason=_key(d, "job_reason", "", _opt(_str), "") or "",
            job_restarts=_key(d, "job_restarts", "", _opt(_int), 0) or 0,
            outcome=_key(d, "outcome", "", _opt(_str), None),
            supervisor_pid=pid,
            clients=_key(d, "clients", "", _opt(_int), 0) or 0,
            updated=_key(d, "updated", "", _opt(_float), None),
            hosts=_key(d, "hosts", "", lambda v, w: _table(v, w, HostRecord.from_json), {}),
            tasks=_key(d, "tasks", "", lambda v, w: _table(v, w, TaskRecord.from_json), {}),
            offsets=_key(d, "offsets", "", lambda v, w: _table(v, w, lambda o, x: _table(o, x, _int)), {}),
            pending_restarts=_key(d, "pending_restarts", "",
                                  lambda v, w: [PendingRecord.from_json(p, f"{w}[{i}]")
                                                for i, p in enumerate(_list(v, w))], []),
            lost_events=_key(d, "lost_events", "", lambda v, w: _table(v, w, _int), {}),
            host_states=_key(d, "host_states", "", lambda v, w: _table(v, w, HostStateRecord.from_json), {}),
            host_losses=_key(d, "host_losses", "", _opt(_int), 0) or 0,
            spares=_key(d, "spares", "", _opt(_strs), None),
            moves=_key(d, "moves", "", lambda v, w: [_move(m, f"{w}[{i}]") for i, m in enumerate(_list(v, w))], []),
            left_behind=_key(d, "left_behind", "", lambda v, w: _table(v, w, _strs), {}),
            moved_from=_key(d, "moved_from", "", lambda v, w: _table(v, w, _str), {}),
            resize_targets=_key(d, "resize_targets", "", lambda v, w: _table(v, w, _int), {}),
            resizes=_key(d, "resizes", "", lambda v, w: [_resize(m, f"{w}[{i}]") for i, m in enumerate(_list(v, w))],
                         []),
            checkpoints=_key(d, "checkpoints", "", lambda v, w: _table(v, w, _checkpoints), {}),
            last_contact=_key(d, "last_contact", "", lambda v, w: _table(v, w, _float), {}),
            boot_id=_key(d, "boot_id", "", _opt(_str), "") or "",
            roles=_key(d, "roles", "", lambda v, w: _table(v, w, lambda o, x: _table(o, x, _int)), {}),
            launch=_key(d, "launch", "", _obj, {}),
            slurm=_key(d, "slurm", "", _opt(SlurmJobRecord.from_json), None),
        )

    # -- what readers ask of it ---------------------------------------------------------------------

    @property
    def ended(self) -> bool:
        return self.outcome is not None

    def supervisor_here(self) -> bool:
        """Does the run's supervisor run on this machine (its pid means something here)? Not for a
        run submitted to Slurm whose batch job runs on another node."""
        return self.slurm is None or self.slurm.node is None or self.slurm.node == socket.gethostname()

    def supervisor_alive(self) -> bool:
        """Does the run's supervisor still supervise it (its process exists and the run has not
        ended)? On another node (a submitted Slurm job's), while Slurm says its job has not ended
        (asked with a bounded wait; no answer is no reason to think it ended)."""
        if self.supervisor_pid is None or self.outcome is not None:
            return False
        if self.supervisor_here():
            return pid_alive(self.supervisor_pid)
        from launcher.transport import slurmqueue  # only for a run whose supervisor is elsewhere

        assert self.slurm is not None
        key = (self.slurm.job_id, self.slurm.cluster)
        seen = _SLURM_SEEN.get(key)
        if seen is not None and time.monotonic() - seen[0] < SLURM_SEEN_S:
            return seen[1]  # clients poll several times a second: squeue is asked every few seconds
        info = slurmqueue.query(self.slurm.job_id, cluster=self.slurm.cluster)
        alive = info is None or not info.ended
        _SLURM_SEEN[key] = (time.monotonic(), alive)
        return alive

    @property
    def awaiting_slurm(self) -> bool:
        """Submitted to Slurm, and no supervisor has taken the run yet (the job waits to start)."""
        return self.slurm is not None and self.supervisor_pid is None and self.outcome is None

    def supervision(self) -> str | None:
        """How a run that has not ended is watched: "live" (its supervisor runs and a client follows
        it), "supervised" (its supervisor runs, no client), "lost" (no supervisor), "pending" (a
        submitted Slurm job that has not started its supervisor yet); None once ended."""
        if self.outcome is not None:
            return None
        if self.awaiting_slurm:
            return "pending"
        if not self.supervisor_alive():
            return "lost"
        return "live" if self.clients > 0 else "supervised"

    def lost_hosts(self) -> set[str]:
        return {h for h, st in self.host_states.items() if st.state == "lost"}


def load_run_state(path: Path) -> RunState:
    """The run's state.json at ``path`` (a run dir) as a record: read as ``read_state`` reads it
    (the user's own regular file), each field's type checked; one line naming the file and the
    field otherwise."""
    data = read_state(path)
    try:
        return RunState.from_json(data)
    except StateFieldError as exc:
        raise UserError(f"{path / STATE_FILE}: unreadable run state ({exc}); distlaunch cannot use this run: "
                        f"restore the file, or remove the run dir (`rm -r {path}`) once none of its tasks "
                        "runs") from None


def host_to_json(host: HostConfig) -> dict[str, Any]:
    return asdict(host)


def host_from_json(data: dict[str, Any]) -> HostConfig:
    ssh_data = dict(data.get("ssh", {}))
    ssh_data["unset"] = tuple(ssh_data.get("unset", ()))
    ssh = SshSettings(**ssh_data)
    return HostConfig(name=data["name"], address=data["address"], transport=data.get("transport", "ssh"),
                      ssh=ssh, gpus=tuple(data.get("gpus", ())), tf_address=data.get("tf_address"),
                      env=dict(data.get("env") or {}), group=data.get("group"),
                      slurm_job_id=data.get("slurm_job_id"), slurm_het_group=data.get("slurm_het_group"),
                      preemption_notice=data.get("preemption_notice"))
