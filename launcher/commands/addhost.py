"""`distlaunch add-host RUN HOST`: a host joins a running job as a spare, once it passed the same
preflight as a re-admitted host (supervise/hostjoin.py). Roles grow onto it by the grow policy: a
role below its target at once, and ``distlaunch resize RUN ROLE=N`` to make one bigger."""

from __future__ import annotations

import argparse

from launcher.errors import UserError
from launcher.protocol.controllines import Request
from launcher.runlookup import find_run
from launcher.runstate import load_run_state
from launcher.supervise import controlclient

#: how long the client waits: connecting, uploading the agent and checking python and TensorFlow
ADD_TIMEOUT_S = 300.0


def run_add_host(args: argparse.Namespace) -> int:
    path = find_run(args.run)
    run_id = load_run_state(path).run_id
    print(f"... adding {args.host} to {run_id}: connecting and checking it (python, TensorFlow, paths)",
          flush=True)
    answer = controlclient.ask(run_id, Request("add_host", host=args.host), timeout=ADD_TIMEOUT_S)
    if answer is None:
        raise UserError(f"run {run_id} has no live supervisor; `distlaunch attach {run_id}` first, then add-host")
    if not answer.ok:
        raise UserError(f"add-host refused: {answer.error}")
    print(f"{args.host} is a spare of {run_id}; grow onto it with `distlaunch resize {run_id} ROLE=N` "
          "(a role below its target grows by the grow policy)")
    return 0
