"""`local_network`: when an all-local job's tasks get a private network namespace, and what `up`
and `check` say (launcher/commands/localnet.py). The kernel's answer and the machine's other
people are given, so each case is judged on its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.commands.localnet import PRIVATE_LINE, decide, not_eligible
from launcher.errors import UserError
from launcher.model import Plan
from launcher.plan import build_plan
from launcher.profile.reader import load_profile


def _plan(tmp_path: Path, network: str | None = None, hosts: str = "", roles: str = "") -> Plan:
    key = f'local_network = "{network}"\n' if network else ""
    hosts = hosts or '[hosts.local]\naddress = "localhost"\ntransport = "local"\n'
    roles = roles or '[roles.worker]\ncount = 2\nhosts = ["local"]\n'
    path = tmp_path / "job.toml"
    path.write_text(f'name = "net"\nstrategy = "custom"\n{key}[defaults]\ncommand = "true"\n{hosts}{roles}')
    return build_plan(load_profile(path))


def _allowed() -> str | None:
    return None


def _refused() -> str | None:
    return "Operation not permitted"


def test_auto_is_private_only_where_other_people_have_processes(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    alone = decide(plan, "job.toml", people=[], kernel=_allowed)
    assert not alone.private and alone.line == ""  # a machine of one's own keeps its network (downloads work)
    shared = decide(plan, "job.toml", people=[1001], kernel=_allowed)
    assert shared.private and shared.line == PRIVATE_LINE and not shared.warning


def test_auto_on_a_shared_machine_that_refuses_says_why_the_ports_stay_open(tmp_path: Path) -> None:
    said = decide(_plan(tmp_path), "job.toml", people=[1001], kernel=_refused)
    assert not said.private and said.warning
    assert "any local user can reach them" in said.line
    assert "no private network for them: this machine refuses a network namespace of your own " \
           "(Operation not permitted)" in said.line


def test_private_is_refused_in_one_line_where_it_cannot_be_had(tmp_path: Path) -> None:
    refused = r'local_network = "private": this machine refuses .*set local_network = "host"'
    with pytest.raises(UserError, match=refused):
        decide(_plan(tmp_path, "private"), "job.toml", people=[], kernel=_refused)
    two = _plan(tmp_path, "private", hosts='[hosts.a]\naddress = "localhost"\ntransport = "local"\n'
                '[hosts.b]\naddress = "127.0.0.2"\ntransport = "local"\n',
                roles='[roles.worker]\ncount = 2\nhosts = ["a", "b"]\n')
    with pytest.raises(UserError, match=r"needs every task on one local host: the tasks are on more than one"):
        decide(two, "job.toml", people=[], kernel=_allowed)
    assert decide(_plan(tmp_path, "private"), "job.toml", people=[], kernel=_allowed).private


def test_host_never_is_and_still_warns_on_a_shared_machine(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "host")
    said = decide(plan, "job.toml", people=[1001], kernel=_allowed)
    assert not said.private and said.warning and "any local user can reach them" in said.line
    assert decide(plan, "job.toml", people=[], kernel=_allowed).line == ""


def test_tasks_on_another_machine_or_in_a_container_are_not_eligible(tmp_path: Path) -> None:
    remote = _plan(tmp_path, hosts='[hosts.box]\naddress = "10.0.0.5"\n',
                   roles='[roles.worker]\ncount = 1\nhosts = ["box"]\n')
    assert not_eligible(remote) == "tasks run on other machines (box)"
    boxed = _plan(tmp_path, roles='[roles.worker]\ncount = 1\nhosts = ["local"]\n'
                  '[roles.worker.container]\nimage = "tensorflow/tensorflow:2.21.0"\n')
    assert (not_eligible(boxed) or "").startswith("worker:0 run in a container")
    assert not_eligible(_plan(tmp_path)) is None


def test_a_local_host_at_a_lan_address_keeps_the_machines_network(tmp_path: Path) -> None:
    lan = _plan(tmp_path, hosts='[hosts.local]\naddress = "10.1.2.3"\ntransport = "local"\n')
    assert (not_eligible(lan) or "").startswith("the tasks' TF_CONFIG address 10.1.2.3 is not a loopback one")
    assert not_eligible(_plan(tmp_path, hosts='[hosts.local]\naddress = "127.0.0.2"\ntransport = "local"\n')) is None


def test_nobody_is_no_person_but_a_directory_uid_above_60000_is() -> None:
    from launcher.commands.exposure import other_people

    assert other_people(me=1000, uids=lambda: [0, 998, 1000, 65534, 4294967295, 1001, 1500001]) == [1001, 1500001]
