"""Per-host settings in the plan: the data address TF_CONFIG uses, and env under role and defaults."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from launcher.errors import ProfileError
from launcher.plan import build_plan, tf_config
from launcher.profile.reader import load_profile
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
    assert plan.task("ps:0").env == {"NCCL_SOCKET_IFNAME": "ib0", "NCCL_DEBUG": "WARN"}
    assert plan.task("worker:0").env == {"NCCL_SOCKET_IFNAME": "eth1", "NCCL_DEBUG": "WARN"}
    assert plan.task("worker:1").env == {"NCCL_SOCKET_IFNAME": "eth1", "NCCL_DEBUG": "WARN"}


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
