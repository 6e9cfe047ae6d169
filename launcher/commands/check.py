"""``distlaunch check`` and ``distlaunch tfconfig``: show what a profile would do, start nothing.

``distlaunch check PROFILE --metrics-sample LOGFILE``: try the profile's ``[metrics]`` regexes
on a saved log before a long job, with exactly the rules the agent applies (launcher/agent/metricregex.py)."""

from __future__ import annotations

import importlib
import importlib.util
import io
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from launcher.agent.metricregex import MetricRegexes
from launcher.commands import localnet
from launcher.commands.exposure import exposure_warnings, firewall_rules
from launcher.errors import HostError, UserError
from launcher.events import REPORT_PREFIX
from launcher.model import SSH_TRANSPORTS, START_ORDER, Overrides, Plan, TaskSpec
from launcher.plan import PICKED_AT_LAUNCH, build_plan, host_port, mask_env, tf_config
from launcher.profile.containeropts import container_warnings
from launcher.profile.hetjob import component_lines
from launcher.profile.overrides import mask_secrets
from launcher.profile.reader import load_profile
from launcher.remote import kerasfit
from launcher.transport import sshconfig


def run_check(profile_path: Path, remote: bool = True, overrides: Overrides | None = None,
              as_json: bool = False, firewall: bool = False) -> int:
    """Validate the profile, print the plan, and (with ``remote``) preflight every host.

    Returns 0 when all is well, 2 when the preflight found problems; profile mistakes raise
    ``ProfileError``, which the CLI prints as one line. ``as_json``: instead of the plan, the
    hosts side by side as one JSON object (launcher/remote/parity.py). ``firewall``: instead,
    the iptables rules that keep other users off the task ports (launcher/commands/exposure.py).
    """
    profile = load_profile(profile_path, overrides)
    plan = build_plan(profile, sshconfig.resolve_addresses(profile))
    if firewall:
        sys.stdout.write(firewall_rules(plan))
        return 0
    shown = io.StringIO()
    print_plan(plan, shown)
    if not as_json:
        sys.stdout.write(mask_secrets(shown.getvalue(), set(plan.profile.secrets)))
    for warning in exposure_warnings(plan):
        print(f"distlaunch: warning: {warning}", file=sys.stderr)
    network = localnet.decide(plan, str(profile_path))
    if network.line:
        print(f"distlaunch: {'warning: ' if network.warning else ''}{network.line}", file=sys.stderr)
    for warning in container_warnings(plan.profile):  # options that undo what distlaunch promises
        print(f"distlaunch: warning: {mask_secrets(warning, set(plan.profile.secrets))}", file=sys.stderr)
    if not remote or importlib.util.find_spec("launcher.remote.preflight") is None:
        for warning in kerasfit.judge(plan, {}, {}):  # the hosts' TensorFlow and tf_keras not known
            print(f"distlaunch: warning: {warning}", file=sys.stderr)
        return 0
    preflight = importlib.import_module("launcher.remote.preflight")
    problems: list[str] = preflight.preflight_plan(plan, as_json)
    for problem in problems:
        print(f"distlaunch: error: {problem}", file=sys.stderr)
    return 2 if problems else 0


def run_tfconfig(profile_path: Path, task: str, overrides: Overrides | None = None) -> int:
    """Print the TF_CONFIG JSON that ``task`` (e.g. ``worker:1``) gets; a port picked at launch
    shows as ``<picked at launch>``, with one line on stderr saying so."""
    profile = load_profile(profile_path, overrides)
    plan = build_plan(profile, sshconfig.resolve_addresses(profile))
    print(json.dumps(tf_config(plan, task, unknown_port=PICKED_AT_LAUNCH), indent=2))
    picked = [t.role for t in plan.tasks if t.in_cluster and t.port is None]
    if picked:
        roles = ", ".join(dict.fromkeys(picked))
        print(f"distlaunch: note: the ports of {roles} are picked at launch (no `port` in their role): "
              "`distlaunch status --json` shows them once the job runs", file=sys.stderr)
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
    if profile.spares:
        out.write(f"spares    {', '.join(profile.spares)}   (run no task at start; on_host_lost = "
                  f"\"{profile.on_host_lost}\", up to {profile.host_loss_limit} hosts lost)\n")
    out.write("\n")
    for line in route_lines(plan):
        out.write(line + "\n")
    if plan.profile.slurm is not None:
        for line in _slurm_lines(plan):
            out.write(line + "\n")
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
    if notify.command or notify.webhook:  # not their text: a webhook URL is a secret
        how = " and ".join(w for w, on in (("command", notify.command), ("webhook", notify.webhook)) if on)
        alerts = ", ".join(notify.on) or "no alerts"
        out.write(f"\nnotify    [notify] {how} on each task failure, at the job's end, and when these start and "
                  f"clear: {alerts} (bounded by {notify.timeout_seconds:g}s)\n")


def route_lines(plan: Plan) -> list[str]:
    """Per SSH host the plan uses (and per spare): where its address leads after ~/.ssh/config
    (user@host:port via jumps), so an alias or a ProxyJump is visible before anything connects."""
    lines = []
    used = dict.fromkeys([*(t.host for t in plan.tasks), *plan.profile.spares])
    for name in used:
        host = plan.profile.hosts[name]
        if host.transport not in SSH_TRANSPORTS:
            continue
        label = f"{name} (spare)" if name in plan.profile.spares else name
        try:
            route = sshconfig.resolve(host)
        except HostError as exc:
            lines.append(f"ssh       {label}: {exc}")
            continue
        client = ", system ssh client" if host.transport == "openssh" else ""
        lines.append(f"ssh       {label}: {host.address} -> {route.describe()} ({route.source}{client})")
    return lines


def _slurm_lines(plan: Plan) -> list[str]:
    slurm = plan.profile.slurm
    assert slurm is not None
    hosts = list(plan.profile.hosts.values())
    components = [f"slurm     {words}" for words in component_lines(slurm)] if slurm.heterogeneous else []
    if components:
        components.insert(0, f"slurm     a heterogeneous job of {len(slurm.components)} components "
                             "(#SBATCH hetjob; each role's tasks start as `srun --het-group` steps of its own)")
    if hosts and hosts[0].slurm_job_id is None:
        return [*components, "slurm     not inside a Slurm allocation: at `up` the hosts are its nodes "
                "(SLURM_JOB_NODELIST); `distlaunch up` here submits the job, or run inside `salloc`, or "
                "`distlaunch export sbatch PROFILE`"]
    lines = [f"slurm     job {hosts[0].slurm_job_id}: {len(hosts)} node(s), tasks start as `srun --overlap` steps"]
    if slurm.heterogeneous and all(h.slurm_het_group is None for h in hosts):
        lines.append(f"slurm     this allocation is not heterogeneous (SLURM_HET_SIZE unset): every role runs on "
                     f"its nodes, not on the {len(slurm.components)} components the profile asks for")
    elif slurm.heterogeneous:
        lines += [f"slurm     component {k}: {', '.join(h.name for h in hosts if h.slurm_het_group == k)}"
                  for k in sorted({h.slurm_het_group for h in hosts if h.slurm_het_group is not None})]
    return [*components[:1], *lines]


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


#: lines printed per regex outcome before the rest is only counted
SHOW_LINES = 40


def profile_patterns(profile_path: Path) -> dict[str, str]:
    metrics = load_profile(profile_path).metrics
    patterns = {k: v for k, v in (("step", metrics.step), ("loss", metrics.loss)) if v}
    patterns.update(metrics.extra)
    return patterns


def _as_shown(raw: str) -> str:
    """A line as the agent sees it: a progress bar's \\r redraws keep only what shows last."""
    text = raw.rstrip("\r\n")
    if "\r" in text:
        parts = [p for p in text.split("\r") if p]
        text = parts[-1] if parts else ""
    return text


def run_metrics_sample(profile_path: Path, log_path: Path, out: TextIO | None = None) -> int:
    """Print what each regex gives per matching line, then a verdict per regex.

    0 when every regex gave a number somewhere in the log; 2 when one never did (or matched
    without a number), so a script can gate a launch on it.
    """
    out = out or sys.stdout
    patterns = profile_patterns(profile_path)
    if not patterns:
        raise UserError(f"{profile_path}: no [metrics] regexes to try; add e.g. "
                        "loss = 'loss[ =:]+(\\S+)' under [metrics]")
    regexes = MetricRegexes(patterns)
    for name, error in regexes.invalid:
        raise UserError(f"{profile_path}: metrics.{name}: invalid regex ({error}); fix it and try again")
    try:
        text = log_path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise UserError(f"{log_path}: cannot read the log ({exc.strerror or exc}); give a saved task "
                        "output, e.g. from `distlaunch logs RUN TASK > task.log`") from None
    gave = dict.fromkeys(patterns, 0)
    missed = dict.fromkeys(patterns, 0)
    shown = 0
    lines = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _as_shown(raw)
        if line.startswith(REPORT_PREFIX):
            continue
        lines += 1
        result = regexes.apply(line)
        if not result.matched and not result.misses:
            continue
        for name in result.matched:
            gave[name] += 1
        for miss in result.misses:
            missed[miss.name] += 1
        if shown >= SHOW_LINES:
            continue
        shown += 1
        parts = []
        if result.step is not None:
            parts.append(f"step={result.step}")
        if result.loss is not None:
            parts.append(f"loss={result.loss:.10g}")
        parts.extend(f"{k}={v:.10g}" for k, v in result.values.items())
        parts.extend(f"{m.name}=NO NUMBER (captured {m.captured!r})" for m in result.misses)
        out.write(f"{log_path.name}:{number}: {'  '.join(parts)}\n    {line}\n")
    if shown >= SHOW_LINES:
        out.write(f"... (first {SHOW_LINES} matching lines shown)\n")
    failed = False
    for name, pattern in patterns.items():
        if gave[name] and not missed[name]:
            verdict = f"ok: a number from {gave[name]} of {lines} lines"
        elif gave[name]:
            verdict = f"a number from {gave[name]} lines, NO number from {missed[name]} matching lines"
            failed = True
        elif missed[name]:
            verdict = (f"matched {missed[name]} lines but never captured a number; "
                       "the group must capture the number itself")
            failed = True
        else:
            verdict = f"matched none of {lines} lines"
            failed = True
        out.write(f"metrics.{name} = '{pattern}': {verdict}\n")
    return 2 if failed else 0
