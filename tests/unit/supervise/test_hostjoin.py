"""What `add-host` and ``host_discovery`` take a host to be (launcher/profile/addedhost.py) and what the
discovery command's output gives (launcher.supervise.hostjoin.py); the running job's side is in
tests/integration/test_add_host.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from launcher.errors import ProfileError, UserError
from launcher.model import Profile
from launcher.profile.addedhost import added_host
from launcher.profile.reader import load_profile
from launcher.supervise.hostjoin import HostAdder, run_discovery

PROFILE = '''name = "j"
strategy = "custom"
[defaults]
command = "run"
[ssh]
user = "trainer"
identity_file = "~/.ssh/lab"
host_key_policy = "accept-new"
[hosts.a]
address = "10.0.0.1"
[hosts.spare-b]
address = "10.0.0.2"
user = "other"
[roles.worker]
hosts = ["a"]
'''


@pytest.fixture
def profile(tmp_path: Path) -> Profile:
    path = tmp_path / "j.toml"
    path.write_text(PROFILE)
    return load_profile(path)


def test_a_host_of_the_profile_is_taken_as_written(profile: Profile) -> None:
    host = added_host(profile, "spare-b")
    assert (host.address, host.ssh.user) == ("10.0.0.2", "other")


def test_an_address_is_a_new_ssh_host_with_the_profiles_ssh_settings(profile: Profile) -> None:
    host = added_host(profile, "10.0.0.9")
    assert (host.name, host.address, host.transport) == ("10.0.0.9", "10.0.0.9", "ssh")
    assert (host.ssh.user, host.ssh.host_key_policy, host.ssh.identity_file) == ("trainer", "accept-new",
                                                                                "~/.ssh/lab")
    own = added_host(profile, "root@gpu7.lab:2222")
    assert (own.name, own.ssh.user, own.ssh.ssh_port) == ("gpu7.lab", "root", 2222)


@pytest.mark.parametrize("spec", ["no such host!", "a@b@c", "host:notaport", "..", "-x"])
def test_what_is_no_host_is_one_line(profile: Profile, spec: str) -> None:
    with pytest.raises((UserError, ProfileError)) as err:
        added_host(profile, spec)
    assert "\n" not in str(err.value)


def test_the_discovery_commands_lines_are_hosts(tmp_path: Path) -> None:
    listed = tmp_path / "hosts"
    listed.write_text("# the pool\nb\n\n  c  \nb\n")
    assert run_discovery(f"cat {listed}") == (["b", "c"], None)
    names, problem = run_discovery("echo b; exit 3")
    assert names == [] and problem is not None and "failed" in problem  # a failing command adds nothing
    names, problem = run_discovery("/nonexistent/discover")
    assert names == [] and problem is not None


def test_host_discovery_is_no_slurm_key(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('name = "s"\nstrategy = "custom"\nhost_discovery = "cat hosts"\n[defaults]\ncommand = "run"\n'
                    "[roles.worker]\n[slurm]\n")
    with pytest.raises(ProfileError, match="host_discovery: a Slurm job's hosts"):
        load_profile(path)


def _joiner(profile: Profile, used: tuple[str, ...] = ("a",)) -> HostAdder:
    from types import SimpleNamespace

    from launcher.plan import build_plan

    plan = build_plan(profile)
    sessions = {name: SimpleNamespace(config=profile.hosts[name]) for name in used}
    sup = SimpleNamespace(plan=plan, sessions=sessions, finishing=False)
    return HostAdder(sup, SimpleNamespace(gone=set()), None)  # type: ignore[arg-type]


def test_a_machine_already_in_the_job_is_refused_under_any_name(profile: Profile) -> None:
    joiner = _joiner(profile)
    same = added_host(profile, "other@10.0.0.1")
    assert joiner.refusal(dataclasses.replace(same, ssh=profile.hosts["a"].ssh)) == \
        "10.0.0.1 is host a of the job already"
    assert joiner.refusal(profile.hosts["a"]) == "host a is already a host of the job"
    assert joiner.refusal(profile.hosts["spare-b"]) is None
    with pytest.raises(UserError, match=r"'spare-b' is \[hosts.spare-b\] of the profile"):
        added_host(profile, "root@spare-b")  # a name of the profile's is that host, as written


def test_a_gpu_job_takes_no_host_by_address(tmp_path: Path) -> None:
    path = tmp_path / "g.toml"
    path.write_text(PROFILE.replace('hosts = ["a"]', 'hosts = ["a"]\ngpus_per_task = 1').replace(
        'address = "10.0.0.1"', 'address = "10.0.0.1"\ngpus = [0]'))
    profile = load_profile(path)
    refused = _joiner(profile).refusal(added_host(profile, "10.0.0.9"))
    assert refused is not None and "no GPUs listed" in refused


def test_a_slurm_nodes_hosts_have_run_dirs_of_their_own() -> None:
    from types import SimpleNamespace

    from launcher.model import HostConfig
    from launcher.remote.session import remote_base_dir

    home = SimpleNamespace(home=lambda: "/home/u")
    dirs = {remote_base_dir(home, HostConfig(name=n, address="n1", transport="slurm"), "r1", None)  # type: ignore[arg-type]
            for n in ("n1", "n1-het1")}
    assert dirs == {"/home/u/.cache/distlaunch/runs/r1/hosts/n1", "/home/u/.cache/distlaunch/runs/r1/hosts/n1-het1"}
    ssh = remote_base_dir(home, HostConfig(name="a", address="a"), "r1", None)  # type: ignore[arg-type]
    assert ssh == "/home/u/.cache/distlaunch/runs/r1"
