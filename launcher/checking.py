"""``distlaunch check`` and ``distlaunch tfconfig``: show what a profile would do, start nothing."""

from __future__ import annotations

import importlib
import importlib.util
import io
import ipaddress
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from launcher.errors import HostError
from launcher.model import SSH_TRANSPORTS, START_ORDER, Plan, TaskSpec
from launcher.plan import build_plan, host_port, mask_env, tf_config
from launcher.profile import load_profile
from launcher.profile_overrides import Overrides, mask_secrets
from launcher.transport import sshconfig


def run_check(profile_path: Path, remote: bool = True, overrides: Overrides | None = None,
              as_json: bool = False) -> int:
    """Validate the profile, print the plan, and (with ``remote``) preflight every host.

    Returns 0 when all is well, 2 when the preflight found problems; profile mistakes raise
    ``ProfileError``, which the CLI prints as one line. ``as_json``: instead of the plan, the
    hosts side by side as one JSON object (launcher/parity.py).
    """
    plan = build_plan(load_profile(profile_path, overrides))
    shown = io.StringIO()
    print_plan(plan, shown)
    if not as_json:
        sys.stdout.write(mask_secrets(shown.getvalue(), set(plan.profile.secrets)))
    for warning in exposure_warnings(plan):
        print(f"distlaunch: warning: {warning}", file=sys.stderr)
    if not remote or importlib.util.find_spec("launcher.preflight") is None:
        return 0
    preflight = importlib.import_module("launcher.preflight")
    problems: list[str] = preflight.preflight_plan(plan, as_json)
    for problem in problems:
        print(f"distlaunch: error: {problem}", file=sys.stderr)
    return 2 if problems else 0


def run_tfconfig(profile_path: Path, task: str, overrides: Overrides | None = None) -> int:
    """Print the TF_CONFIG JSON that ``task`` (e.g. ``worker:1``) gets."""
    plan = build_plan(load_profile(profile_path, overrides))
    print(json.dumps(tf_config(plan, task), indent=2))
    return 0


def print_plan(plan: Plan, out: TextIO) -> None:
    """A short header, one aligned row per task, then each role's env with secrets masked."""
    profile = plan.profile
    out.write(f"profile   {profile.path}\n")
    out.write(f"job       {profile.name}\n")
    out.write(f"strategy  {profile.strategy}   success: {_success_rule(plan)}   "
              f"backoff limit: {profile.backoff_limit}\n")
    out.write(f"outputs   {profile.outputs}   (on each host, {{outputs}} in commands; down and prune keep it)\n\n")
    rows = [("TASK", "HOST", "ADDRESS:PORT", "GPUS", "COMMAND")]
    rows += [(t.task_id, t.host, _endpoint(t), ",".join(map(str, t.gpus)) or "-", t.command)
             for t in plan.tasks]
    out.write(_table(rows))
    out.write("\n")
    for line in route_lines(plan):
        out.write(line + "\n")
    if plan.profile.slurm is not None:
        out.write(_slurm_line(plan) + "\n")
    for role in (profile.roles[name] for name in START_ORDER if name in profile.roles):
        if role.count == 0:
            continue
        settings = role.settings
        env = mask_env({k: v for k, v in settings.env.items() if k != "CUDA_VISIBLE_DEVICES"})
        shown = " ".join(f"{k}={v}" for k, v in env.items()) or "-"
        workdir = ", ".join(dict.fromkeys(t.workdir for t in plan.tasks if t.role == role.name))
        out.write(f"{role.name:<10} restart={settings.restart} max_restarts={settings.max_restarts} "
                  f"workdir={workdir} env: {shown}\n")
    notify = profile.notify
    if notify.command:  # not its text: a webhook URL in it is a secret
        out.write(f"\nnotify    [notify] command on each task failure and at the job's end "
                  f"(killed after {notify.timeout_seconds:g}s)\n")


def route_lines(plan: Plan) -> list[str]:
    """Per SSH host the plan uses: where its address leads after ~/.ssh/config (user@host:port via
    jumps), so an alias or a ProxyJump is visible before anything connects."""
    lines = []
    used = dict.fromkeys(t.host for t in plan.tasks)
    for name in used:
        host = plan.profile.hosts[name]
        if host.transport not in SSH_TRANSPORTS:
            continue
        try:
            route = sshconfig.resolve(host)
        except HostError as exc:
            lines.append(f"ssh       {name}: {exc}")
            continue
        client = ", system ssh client" if host.transport == "openssh" else ""
        lines.append(f"ssh       {name}: {host.address} -> {route.describe()} ({route.source}{client})")
    return lines


def _slurm_line(plan: Plan) -> str:
    hosts = list(plan.profile.hosts.values())
    if hosts and hosts[0].slurm_job_id is None:
        return ("slurm     not inside a Slurm allocation: at `up` the hosts are its nodes "
                "(SLURM_JOB_NODELIST); run inside `salloc`, or `distlaunch export sbatch PROFILE`")
    return (f"slurm     job {hosts[0].slurm_job_id}: {len(hosts)} node(s), "
            "tasks start as `srun --overlap` steps")


def _success_rule(plan: Plan) -> str:
    """The success policy in words, naming the task that decides it."""
    if plan.profile.success_policy == "all_workers":
        return "all_workers (every worker exits 0)"
    decider = "chief:0" if any(t.role == "chief" for t in plan.tasks) else "worker:0"
    return f"chief ({decider} exits 0)"


def _endpoint(task: TaskSpec) -> str:
    return host_port(task.address, task.port) if task.port is not None else f"{task.address}:auto"


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = []
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip() + "\n")
    return "".join(lines)


def exposure_warnings(plan: Plan) -> list[str]:
    """One line per address that is a public IP: TensorFlow's gRPC ports have no authentication.

    Host names are not resolved (check must not depend on DNS); only IP literals are judged.
    """
    warnings = []
    seen: dict[str, list[str]] = {}
    for task in plan.tasks:
        seen.setdefault(task.address, []).append(task.task_id)
    for address, task_ids in seen.items():
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            continue
        if ip.is_private or ip.is_loopback or ip.is_link_local:
            continue
        warnings.append(f"{', '.join(task_ids)} listen on {address}, not a private address; "
                        "TensorFlow's gRPC ports have no authentication: use a private network")
    return warnings
