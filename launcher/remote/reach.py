"""Reachability between hosts before anything starts: every host opens TCP to every other host's
task ports at the addresses TF_CONFIG will use, while those hosts hold them open.

The launcher's side of launcher/agent/reachcheck.py. Each host's preflight verb holds its tasks' ports
(phase 1, its answer names them); here every host is sent the pairs it must reach on the same
channel (phase 2) and answers which failed. Both launch paths use this: the one exec per host
(the channel becomes the follow channel, whose next line lets the ports go) and the step-by-step
one (`check`, Slurm, [sync]: the channel is closed afterwards). A single-host plan has no pairs.
"""

from __future__ import annotations

from collections.abc import Mapping

from launcher.agent.reachcheck import CONNECT_SECONDS
from launcher.model import Plan
from launcher.plan import host_port
from launcher.protocol.agentlines import ReachAnswer, ReachRequest, decode_agent
from launcher.remote.channel import AgentChannel
from launcher.remote.hostpool import each_host

#: how long a host may take to answer, beyond the connections' own timeout
ANSWER_SLACK_SECONDS = 15.0

_HINTS = {"timed out": "timed out: a firewall?", "refused": "refused"}


def hosts_of(plan: Plan) -> list[str]:
    return list(dict.fromkeys(t.host for t in plan.tasks))


def needs_reach(plan: Plan) -> bool:
    """Whether there is anything between hosts to prove (local hosts count: they have addresses)."""
    return len(hosts_of(plan)) > 1


def targets(plan: Plan, ports: Mapping[str, int], source: str) -> list[dict[str, object]]:
    """What ``source`` must reach: every other host's cluster tasks at their TF_CONFIG address."""
    return [{"task": t.task_id, "host": t.host, "address": t.address, "port": ports[t.task_id], "token": t.host}
            for t in plan.tasks if t.host != source and t.in_cluster and t.task_id in ports]


def describe(source: str, failure: Mapping[str, object], plan: Plan) -> str:
    """One failing pair in one line, with what to fix."""
    error = str(failure.get("error", "failed"))
    where = host_port(str(failure.get("address")), int(str(failure.get("port"))))
    peer = str(failure.get("host"))
    task = str(failure.get("task"))
    role = task.split(":")[0]
    return (f"host {source} cannot reach {task} at {where} ({_HINTS.get(error, error)}); let TCP from "
            f"{source} to roles.{role}'s ports on {peer} through, or fix hosts.{peer}.tf_address")


def check_reach(plan: Plan, ports: Mapping[str, int], channels: Mapping[str, AgentChannel]) -> list[str]:
    """Send each host its pairs, all hosts at once; one problem line per pair that failed (none
    when the plan has a single host). The hosts keep holding their ports after this."""
    if not needs_reach(plan):
        return []
    timeout = CONNECT_SECONDS + ANSWER_SLACK_SECONDS

    def ask(source: str) -> list[str]:
        channel = channels[source]
        line = ReachRequest(targets(plan, ports, source)).line()
        try:
            answer_line = channel.ask(line, ReachAnswer.PREFIX, timeout)
        except TimeoutError:
            return [f"host {source}: the reach check did not answer within {timeout:g} s"]
        if answer_line is None:
            detail = (channel.stderr_tail().strip().splitlines() or ["the agent ended"])[-1]
            return [f"host {source}: the reach check ended without an answer: {detail}"]
        answer = decode_agent(answer_line)
        if not isinstance(answer, ReachAnswer):
            return [f"host {source}: the reach check answered {answer_line[:200]!r}"]
        if answer.error:
            return [f"host {source}: the reach check failed: {answer.error}"]
        return [describe(source, failure, plan) for failure in answer.failed]

    sources = [h for h in hosts_of(plan) if h in channels]
    results = each_host(ask, sources)
    return [problem for problems in results for problem in problems]


def pair_count(plan: Plan, ports: Mapping[str, int]) -> int:
    return sum(len(targets(plan, ports, h)) for h in hosts_of(plan)) if needs_reach(plan) else 0
