"""A run's hosts again, from its state.json: a session for each, for attach, down and prune.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from launcher.commands import notice
from launcher.errors import HostError, HostGone
from launcher.remote.preflight import PreflightError
from launcher.remote.session import HostSession
from launcher.runstate import HostRecord, RunState, host_from_json
from launcher.transport import make_host


def open_sessions(state: RunState, gone: list[str] | None = None
                  ) -> tuple[dict[str, HostSession], dict[str, str]]:
    """A session for every host of a run from its state.json, each connected if it answers;
    also host name -> why it did not (those sessions are there, unconnected). With ``gone``, a
    host that no longer exists (a Slurm allocation that ended, every step with it) is left out
    and its reason listed there instead."""
    sessions: dict[str, HostSession] = {}
    problems: dict[str, str] = {}

    def connect(item: tuple[str, HostRecord]) -> None:
        name, info = item
        config = host_from_json(info.config or {})
        host = make_host(config, on_notice=notice, run_id=state.run_id)
        sessions[name] = HostSession(config, host, state.run_id, info.base_dir, info.python, info.outputs_dir)
        try:
            host.connect()
        except HostGone as exc:
            if gone is None:
                problems[name] = str(exc)
            else:
                gone.append(str(exc))
                del sessions[name]
        except HostError as exc:
            problems[name] = str(exc)

    hosts = list(state.hosts.items())
    if hosts:
        with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
            list(pool.map(connect, hosts))
    return {name: sessions[name] for name, _ in hosts if name in sessions}, problems


def connect_sessions(state: RunState, gone: list[str] | None = None) -> dict[str, HostSession]:
    """Reconnect to every host of a run from its state.json; any host that does not answer is an
    error, but one that no longer exists when ``gone`` is given (see ``open_sessions``)."""
    sessions, problems = open_sessions(state, gone)
    lost = state.lost_hosts()
    for host in sorted(lost & set(problems)):  # lost for good: its agent stopped the run's tasks by itself
        notice(f"host {host} was lost ({problems.pop(host)}); not reached: its agent stopped the run's "
               "tasks there when the supervisor went silent, and it starts nothing of the run again")
        sessions.pop(host, None)
    if problems:
        for s in sessions.values():
            s.host.close()
        raise PreflightError(list(problems.values()))
    return sessions
