"""`distlaunch drain RUN HOST`: move a running job off a host before it goes (maintenance, a
preemption the cloud announced). The supervisor stops the host's tasks with their grace, then
places them as for a lost host (a spare, else fewer tasks, else the job fails naming the host)."""

from __future__ import annotations

import argparse

from launcher.errors import UserError
from launcher.protocol.controllines import Request
from launcher.runlookup import find_run
from launcher.runstate import load_run_state
from launcher.supervise import controlclient


def run_drain(args: argparse.Namespace) -> int:
    path = find_run(args.run)
    state = load_run_state(path)
    run_id = state.run_id
    hosts = state.hosts
    if args.host not in hosts:
        raise UserError(f"run {run_id} has no host {args.host!r}; its hosts: {', '.join(sorted(hosts)) or 'none'}")
    reason = args.reason or "drained by the user"
    answer = controlclient.ask(run_id, Request("drain", host=args.host, reason=reason), timeout=15.0)
    if answer is None:
        raise UserError(f"run {run_id} has no live supervisor; `distlaunch attach {run_id}` first, then drain")
    if not answer.ok:
        raise UserError(f"drain of host {args.host} refused: {answer.error}")
    print(f"draining host {args.host} of {run_id}: its tasks stop with their grace, then move; "
          f"watch it with `distlaunch status {run_id}`")
    return 0
