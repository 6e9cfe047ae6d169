"""The local run directory: everything a run leaves on the launcher's machine.

    <run dir>/events.jsonl      every event (DESIGN.md section 5), one per line, flushed as it comes
    <run dir>/logs/<slug>.log   each task's output, stdout and stderr interleaved as they arrived
    <run dir>/state.json        hosts, tasks, pids, ports and stream offsets: enough for `down`,
                                `status` and `attach` from another terminal
    <run dir>/hosts/<host>/     the host run dir of local hosts (agents write here)
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from launcher.errors import UserError
from launcher.events import LOG, Event, EventDecodeError
from launcher.model import HostConfig, SshSettings
from launcher.paths import runs_root

EVENTS_FILE = "events.jsonl"
STATE_FILE = "state.json"
DOWN_MARKER = "down-requested"


def new_run_id(profile_name: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(c if c.isalnum() or c in "-_" else "-" for c in profile_name)[:40] or "run"
    return f"{safe}-{stamp}-{secrets.token_hex(2)}"


class RunDir:
    """Writes (and reads back) one run's files. Writers are thread-safe."""

    def __init__(self, path: Path, run_id: str) -> None:
        self.path = path
        self.run_id = run_id
        self._lock = threading.Lock()
        self._events: IO[str] | None = None
        self._logs: dict[str, IO[str]] = {}

    @classmethod
    def create(cls, run_id: str, path: Path | None = None) -> RunDir:
        target = path if path is not None else runs_root() / run_id
        target = target.expanduser().resolve()
        (target / "logs").mkdir(parents=True, exist_ok=True)
        rd = cls(target, run_id)
        latest = runs_root() / "latest"
        if path is None or target.parent == runs_root().resolve():
            try:
                if latest.is_symlink() or latest.exists():
                    latest.unlink()
                latest.symlink_to(target)
            except OSError:
                pass
        return rd

    @classmethod
    def open(cls, path: Path) -> RunDir:
        state = read_state(path)
        return cls(path, str(state["run_id"]))

    # -- writing ------------------------------------------------------------------------------

    def append(self, event: Event, line: str | None = None) -> None:
        """Record ``event``; ``line`` is its JSON text when it arrived as such (not encoded again)."""
        line = line if line is not None else event.to_json()
        with self._lock:
            if self._events is None:
                self._events = (self.path / EVENTS_FILE).open("a", encoding="utf-8")
            self._events.write(line + "\n")
            self._events.flush()
            if event.kind == LOG and event.task:
                fh = self._logs.get(event.task)
                if fh is None:
                    slug = event.task.replace(":", "-")
                    fh = (self.path / "logs" / f"{slug}.log").open("a", encoding="utf-8")
                    self._logs[event.task] = fh
                fh.write(str(event.get("line", "")) + "\n")
                fh.flush()

    def write_state(self, state: dict[str, Any]) -> None:
        tmp = self.path / (STATE_FILE + ".tmp")
        with self._lock:
            tmp.write_text(json.dumps(state, indent=2, sort_keys=True), encoding="utf-8")
            os.replace(tmp, self.path / STATE_FILE)

    def close(self) -> None:
        with self._lock:
            if self._events is not None:
                self._events.close()
                self._events = None
            for fh in self._logs.values():
                fh.close()
            self._logs.clear()

    def host_dir(self, host: str) -> Path:
        return self.path / "hosts" / host

    @property
    def events_path(self) -> Path:
        return self.path / EVENTS_FILE

    def log_path(self, task_id: str) -> Path:
        return self.path / "logs" / f"{task_id.replace(':', '-')}.log"


def read_state(path: Path) -> dict[str, Any]:
    try:
        data: dict[str, Any] = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: not a distlaunch run directory (no {STATE_FILE})") from None
    except ValueError as exc:
        raise UserError(f"{path / STATE_FILE}: unreadable run state ({exc})") from None
    return data


def read_events(path: Path) -> Iterator[Event]:
    """The events of a run dir, skipping a torn last line."""
    try:
        fh = (path / EVENTS_FILE).open(encoding="utf-8")
    except FileNotFoundError:
        return
    with fh:
        for line in fh:
            if not line.endswith("\n"):
                break
            try:
                yield Event.from_json(line)
            except EventDecodeError:
                continue


def find_run(ref: str | None) -> Path:
    """A run dir from a run id, a path, or (None) the most recent run."""
    root = runs_root()
    if ref is None:
        latest = root / "latest"
        if latest.exists():
            return latest.resolve()
        candidates = [p for p in root.glob("*") if (p / STATE_FILE).exists()] if root.is_dir() else []
        if not candidates:
            raise UserError(f"no runs yet under {root}; start one with `distlaunch up PROFILE`")
        return max(candidates, key=lambda p: p.stat().st_mtime)
    as_path = Path(ref).expanduser()
    if (as_path / STATE_FILE).exists():
        return as_path.resolve()
    if (root / ref / STATE_FILE).exists():
        return (root / ref).resolve()
    raise UserError(f"no run {ref!r} (give a run id from `distlaunch status` or a run directory)")


def host_to_json(host: HostConfig) -> dict[str, Any]:
    return asdict(host)


def host_from_json(data: dict[str, Any]) -> HostConfig:
    ssh_data = dict(data.get("ssh", {}))
    ssh_data["unset"] = tuple(ssh_data.get("unset", ()))
    ssh = SshSettings(**ssh_data)
    return HostConfig(name=data["name"], address=data["address"], transport=data.get("transport", "ssh"),
                      ssh=ssh, gpus=tuple(data.get("gpus", ())), tf_address=data.get("tf_address"),
                      group=data.get("group"), slurm_job_id=data.get("slurm_job_id"))
