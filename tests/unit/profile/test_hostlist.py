"""Host ranges: expanded as Slurm does (compared with the installed `scontrol show hostnames`),
bad ones refused in one line, and a range table in a profile making one host per name."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from launcher.errors import ProfileError
from launcher.profile import hostlist
from launcher.profile.reader import load_profile

#: Slurm's own documentation examples and the forms users write; all valid for scontrol
SLURM_ACCEPTS = ["n[1-3,7]", "tux[0-3,5,7-8]", "r[1-2]n[1-3]", "a,b[1-2]", "x[9-11]", "x[009-011]",
                 "n[01-3]", "n[1-03]", "a[1-2],a[1-2]", "lx[10-12],lx14", "node7", "gpu[0-1],cpu[8-9]"]


def scontrol_hostnames(expression: str, conf: Path) -> list[str]:
    result = subprocess.run(["scontrol", "show", "hostnames", expression], capture_output=True,
                            text=True, timeout=60, env={**os.environ, "SLURM_CONF": str(conf)})
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


@pytest.fixture(scope="module")
def slurm_conf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("scontrol") is None:
        if os.environ.get("DISTLAUNCH_REQUIRE_SLURM") == "1":
            pytest.fail("DISTLAUNCH_REQUIRE_SLURM=1 but scontrol is missing (apt-get install slurm-wlm)")
        pytest.skip("scontrol not installed (apt-get install slurm-wlm)")
    conf = tmp_path_factory.mktemp("slurm") / "slurm.conf"
    # scontrol reads a config before it parses anything; hostnames needs no daemon
    conf.write_text("ClusterName=hostlist\nSlurmctldHost=localhost\n"
                    "NodeName=localhost CPUs=1 State=UNKNOWN\nPartitionName=p Nodes=localhost Default=YES\n")
    return conf


@pytest.mark.parametrize("expression", SLURM_ACCEPTS)
def test_expansion_matches_scontrol(expression: str, slurm_conf: Path) -> None:
    assert hostlist.expand(expression) == scontrol_hostnames(expression, slurm_conf)


def test_a_suffix_after_the_range_is_kept() -> None:
    # pdsh's form; the Slurm 22.05 here rejects it, newer Slurm accepts it the same way
    assert hostlist.expand("gpu[01-03].lab") == ["gpu01.lab", "gpu02.lab", "gpu03.lab"]
    assert hostlist.expand("lx[1-2]-ib") == ["lx1-ib", "lx2-ib"]


@pytest.mark.parametrize(("expression", "complaint"), [
    ("n[3-1]", "runs backwards; write 1-3"),
    ("n[1-2", "never closed"),
    ("n[a]", "not a number or a range"),
    ("a,,b", "empty name between commas"),
    ("n[]", "empty '[]'"),
    ("n[[1]]", "cannot nest"),
    ("n1]", "without '['"),
    ("n[1-999999]", "more than 10000 hosts"),
    ("n[1-10001]", "more than 10000 hosts"),
    ("r[1-5000]n[1-5000]", "more than 10000 hosts"),  # counted before the product is expanded
    ("n[1-6000],m[1-6000]", "more than 10000 hosts"),
])
def test_bad_ranges_are_refused_in_one_line(expression: str, complaint: str) -> None:
    with pytest.raises(hostlist.HostlistError) as caught:
        hostlist.expand(expression)
    assert complaint in str(caught.value) and "\n" not in str(caught.value)


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "p.toml"
    path.write_text('[defaults]\ncommand = "{python} t.py"\n' + body)
    return path


def test_a_range_table_makes_one_host_per_name_and_roles_may_name_the_table(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, """
[ssh]
user = "alice"
[hosts.gpu]
address = "gpu[01-03].lab"
gpus = [0, 1]
ssh_port = 2222
[hosts.head]
address = "head.lab"
[roles.chief]
hosts = ["head"]
[roles.worker]
count = 3
hosts = ["gpu"]
"""))
    assert list(profile.hosts) == ["gpu-01", "gpu-02", "gpu-03", "head"]
    third = profile.hosts["gpu-03"]
    assert (third.address, third.gpus, third.ssh.ssh_port, third.ssh.user, third.group) == (
        "gpu03.lab", (0, 1), 2222, "alice", "gpu")
    assert profile.roles["worker"].hosts == ("gpu-01", "gpu-02", "gpu-03")


def test_ranges_with_several_brackets_and_lists_name_hosts_as_documented(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, """
[hosts.r]
address = "r[1-2]n[1-2]"
[hosts.mix]
address = "a,b[1-2]"
[roles.worker]
count = 1
hosts = ["r"]
"""))
    assert list(profile.hosts) == ["r-1-1", "r-1-2", "r-2-1", "r-2-2", "mix-1", "mix-2", "mix-3"]
    assert [profile.hosts[f"mix-{i}"].address for i in (1, 2, 3)] == ["a", "b1", "b2"]


def test_a_profile_with_a_bad_range_fails_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(ProfileError) as caught:
        load_profile(write(tmp_path, '[hosts.gpu]\naddress = "gpu[16-01]"\n[roles.worker]\n'))
    message = str(caught.value)
    assert "hosts.gpu.address: bad host range" in message and "write 01-16" in message
    assert "p.toml:4" in message and "\n" not in message
