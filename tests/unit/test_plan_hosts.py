"""Per-host settings in the plan: the data address TF_CONFIG uses, and env under role and defaults."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

import pytest

from launcher.errors import ProfileError
from launcher.plan import GRPC_OPTIONS_ENV, PSS_GRPC_OPTIONS, build_plan, tf_config
from launcher.profile.reader import load_profile
from launcher.transport import sshconfig
from tests.integration.jobtools import cli

PROFILE = """
name = "hosts"
[defaults]
command = "python3 train.py --me {host}"
env = { NCCL_DEBUG = "WARN" }
[hosts.head]
address = "head"
tf_address = "10.1.0.5"
env = { NCCL_SOCKET_IFNAME = "ib0", NCCL_DEBUG = "INFO" }
[hosts.gpu2]
address = "gpu2.lab"
[roles.ps]
hosts = ["head"]
[roles.worker]
count = 2
hosts = ["head", "gpu2"]
env = { NCCL_SOCKET_IFNAME = "eth1" }
"""


@pytest.fixture
def path(tmp_path: Path) -> Path:
    p = tmp_path / "hosts.toml"
    p.write_text(PROFILE)
    return p


def test_tf_config_and_host_placeholder_use_the_data_address(path: Path) -> None:
    plan = build_plan(load_profile(path))
    assert tf_config(plan, "worker:1", {"ps:0": 2222, "worker:0": 2223, "worker:1": 2224})["cluster"] == {
        "ps": ["10.1.0.5:2222"], "worker": ["10.1.0.5:2223", "gpu2.lab:2224"]}
    assert plan.task("ps:0").command == "python3 train.py --me 10.1.0.5"
    out = cli("tfconfig", str(path), "worker:0", "--set", "roles.worker.port=2300", "--set", "roles.ps.port=2200")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["cluster"]["worker"][0].startswith("10.1.0.5:")


def test_host_env_lies_under_role_and_defaults(path: Path) -> None:
    plan = build_plan(load_profile(path))
    # ParameterServerStrategy: gRPC keepalive, so that a worker whose host vanishes fails fast (issue 55)
    grpc = {GRPC_OPTIONS_ENV: PSS_GRPC_OPTIONS} if plan.profile.strategy == "parameter_server" else {}
    assert plan.task("ps:0").env == {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_DEBUG": "WARN", **grpc}
    assert plan.task("worker:0").env == {"NCCL_SOCKET_IFNAME": "eth1", "NCCL_DEBUG": "WARN", **grpc}
    assert plan.task("worker:1").env == {"NCCL_SOCKET_IFNAME": "eth1", "NCCL_DEBUG": "WARN", **grpc}
    assert "grpc.keepalive_time_ms=5000" in grpc.get(GRPC_OPTIONS_ENV, "grpc.keepalive_time_ms=5000")


def test_a_pss_task_gets_grpc_keepalive_unless_the_profile_sets_its_own(tmp_path: Path) -> None:
    """Without keepalive, a worker whose host vanishes holds the coordinator for TCP's timeout (issue 55)."""
    p = tmp_path / "ps.toml"
    p.write_text('name = "k"\nstrategy = "parameter_server"\n[defaults]\ncommand = "python t.py"\n'
                 '[roles.ps]\ncount = 1\n[roles.chief]\ncount = 1\n[roles.worker]\ncount = 2\n'
                 '[roles.worker.env]\nTF_GRPC_DEFAULT_OPTIONS = "grpc.keepalive_time_ms=9000"\n')
    plan = build_plan(load_profile(p))
    assert plan.task("chief:0").env[GRPC_OPTIONS_ENV] == PSS_GRPC_OPTIONS
    assert plan.task("worker:1").env[GRPC_OPTIONS_ENV] == "grpc.keepalive_time_ms=9000"


def test_an_empty_tf_address_is_refused(path: Path) -> None:
    path.write_text(PROFILE.replace('tf_address = "10.1.0.5"', 'tf_address = " "'))
    with pytest.raises(ProfileError, match=r"hosts.toml:8: hosts.head.tf_address: is empty"):
        load_profile(path)


def test_an_ssh_config_alias_never_reaches_tf_config_its_host_name_does(tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text("Host head-alias\n    HostName 10.9.8.7\n    User trainer\n")
    path = tmp_path / "alias.toml"
    path.write_text(f"""
name = "alias"
[defaults]
command = "python3 train.py"
[ssh]
ssh_config = "{config}"
[hosts.head]
address = "head-alias"
[hosts.fast]
address = "head-alias"
tf_address = "192.168.77.7"
[roles.ps]
hosts = ["head"]
port = 2200
[roles.worker]
hosts = ["fast"]
port = 2300
""")
    out = cli("tfconfig", str(path), "worker:0")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["cluster"] == {"ps": ["10.9.8.7:2200"], "worker": ["192.168.77.7:2300"]}


def test_building_the_plan_runs_nothing_the_transport_resolves_aliases_before(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``ssh -G`` is the transport's, run before the plan is built: ``build_plan`` starts no process.
    The ``ssh`` first on PATH here is a real program that writes down every call and answers as
    ``ssh -G`` does (the alias's HostName from the file, the name itself from ``-F /dev/null``)."""
    calls = tmp_path / "ssh-calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(f"""#!/bin/sh
echo "$*" >> {shlex.quote(str(calls))}
if [ "$3" = /dev/null ]; then echo "hostname $5"; else echo "hostname 10.9.8.7"; fi
""")
    (bin_dir / "ssh").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    config = tmp_path / "ssh_config"
    config.write_text("Host head-alias\n    HostName 10.9.8.7\n")
    path = tmp_path / "pure.toml"
    path.write_text(f"""
name = "pure"
[defaults]
command = "python3 train.py --me {{host}}"
[ssh]
ssh_config = "{config}"
[hosts.head]
address = "head-alias"
[hosts.fast]
address = "fast-alias"
tf_address = "192.168.77.7"
[hosts.spare]
address = "spare-alias"
[roles.ps]
hosts = ["head"]
port = 2200
[roles.worker]
hosts = ["fast"]
port = 2300
""")
    profile = load_profile(path)

    plan = build_plan(profile)
    assert not calls.exists(), calls.read_text()
    assert plan.task("ps:0").address == "head-alias"  # nothing resolved: the address as written

    addresses = sshconfig.resolve_addresses(profile)  # only the host a role uses without a tf_address
    assert calls.read_text().splitlines() == [f"-G -F {config} -- head-alias", "-G -F /dev/null -- head-alias"]
    assert addresses == {"head": "10.9.8.7"}

    calls.unlink()
    plan = build_plan(profile, addresses)
    assert not calls.exists(), calls.read_text()
    assert plan.task("ps:0").command == "python3 train.py --me 10.9.8.7"
    assert tf_config(plan, "worker:0")["cluster"] == {"ps": ["10.9.8.7:2200"], "worker": ["192.168.77.7:2300"]}
