"""`distlaunch resize RUN ROLE=N`: a running job's role grows or shrinks to N tasks, within the
role's min_count..max_count. The supervisor carries it out (launcher/supervise/regrow.py): a
smaller size stops the highest-index tasks on purpose; a bigger one starts tasks on the role's
hosts or on spares. Neither is a failure or a restart."""

from __future__ import annotations

import argparse
import re

from launcher.errors import UserError
from launcher.protocol.controllines import Request
from launcher.runlookup import find_run
from launcher.runstate import load_run_state
from launcher.supervise import controlclient

SIZE = re.compile(r"^([a-z]+)=([0-9]{1,6})$")


def parse_size(text: str) -> tuple[str, int]:
    """``worker=4`` -> ("worker", 4); anything else is one line naming the form."""
    found = SIZE.match(text.strip())
    if found is None:
        raise UserError(f"resize takes ROLE=N, e.g. worker=4; got {text!r}")
    return found.group(1), int(found.group(2))


def run_resize(args: argparse.Namespace) -> int:
    role, count = parse_size(args.size)
    path = find_run(args.run)
    run_id = load_run_state(path).run_id
    answer = controlclient.ask(run_id, Request("resize", role=role, count=count), timeout=15.0)
    if answer is None:
        raise UserError(f"run {run_id} has no live supervisor; `distlaunch attach {run_id}` first, then resize")
    if not answer.ok:
        raise UserError(f"resize of {role} refused: {answer.error}")
    print(f"resizing {role} of {run_id} to {count}; watch it with `distlaunch status {run_id}`")
    return 0
