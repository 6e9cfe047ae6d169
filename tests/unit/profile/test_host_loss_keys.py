"""The profile keys of losing a host (issue 45): spares, host_lost_seconds, on_host_lost,
max_host_losses, a role's min_count and each host's preemption_notice; their defaults, and every
mistake in them refused as one line naming the file, the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cli import main
from launcher.errors import ProfileError
from launcher.model import Overrides, Profile
from launcher.profile.reader import load_profile

#: three local hosts: "a" and "b" run the tasks, "s" is free to be a spare
BASE = """{top}
[defaults]
command = "run"
{defaults}
[hosts.a]
address = "localhost"
transport = "local"
[hosts.b]
address = "127.0.0.1"
transport = "local"
[hosts.s]
address = "localhost"
transport = "local"
{hosts}
[roles.ps]
count = 1
hosts = ["a"]
{ps}
[roles.worker]
count = 3
hosts = ["a", "b"]
{worker}
"""


def write(tmp_path: Path, top: str = "", defaults: str = "", hosts: str = "", ps: str = "",
          worker: str = "") -> Path:
    path = tmp_path / "p.toml"
    path.write_text(BASE.format(top=top, defaults=defaults, hosts=hosts, ps=ps, worker=worker), encoding="utf-8")
    return path


def load(tmp_path: Path, *sets: str, **parts: str) -> Profile:
    return load_profile(write(tmp_path, **parts), Overrides(sets=sets))


def refused(tmp_path: Path, *sets: str, **parts: str) -> str:
    """The one-line error of the profile made of ``parts`` (and ``--set`` items ``sets``)."""
    with pytest.raises(ProfileError) as caught:
        load(tmp_path, *sets, **parts)
    message = str(caught.value)
    assert "\n" not in message
    if not sets:
        assert message.startswith(f"{tmp_path / 'p.toml'}:"), message
    return message


# ---- defaults -----------------------------------------------------------------------------------

def test_without_the_keys_no_spares_and_a_host_lost_after_120s_is_replaced_once(tmp_path: Path) -> None:
    profile = load(tmp_path)
    assert profile.spares == ()
    assert profile.host_lost_seconds == 120.0
    assert profile.on_host_lost == "replace"
    assert profile.max_host_losses is None and profile.host_loss_limit == 1
    assert all(host.preemption_notice is None for host in profile.hosts.values())


def test_the_keys_as_written(tmp_path: Path) -> None:
    profile = load(tmp_path, top='spares = ["s"]\nhost_lost_seconds = 300\non_host_lost = "shrink"\n'
                   "max_host_losses = 0\norphan_grace_seconds = 30")
    assert profile.spares == ("s",)
    assert profile.host_lost_seconds == 300.0 and isinstance(profile.host_lost_seconds, float)
    assert profile.on_host_lost == "shrink"
    assert profile.max_host_losses == 0 and profile.host_loss_limit == 0


def test_host_loss_limit_defaults_to_one_more_than_the_spares(tmp_path: Path) -> None:
    profile = load(tmp_path, top='spares = ["s", "t"]', hosts='[hosts.t]\naddress = "localhost"\ntransport = "local"')
    assert profile.spares == ("s", "t")
    assert profile.max_host_losses is None and profile.host_loss_limit == 3
    assert load(tmp_path, top='spares = ["s"]\nmax_host_losses = 5').host_loss_limit == 5


def test_min_count_defaults_to_1_for_parameter_server_workers_and_count_for_the_rest(tmp_path: Path) -> None:
    roles = load(tmp_path, "roles.ps.count=2", 'roles.ps.hosts=["a", "b"]').roles  # ps tasks: parameter_server
    assert (roles["worker"].min_count, roles["ps"].min_count) == (1, 2)
    roles = load(tmp_path, top='strategy = "parameter_server"\n[roles.chief]\nhosts = ["b"]').roles
    assert (roles["worker"].min_count, roles["chief"].min_count) == (1, 1)
    for strategy in ("multi_worker_mirrored", "custom"):
        assert load(tmp_path, top=f'strategy = "{strategy}"').roles["worker"].min_count == 3, strategy


def test_min_count_as_written_and_0_for_a_role_without_tasks(tmp_path: Path) -> None:
    roles = load(tmp_path, top='strategy = "multi_worker_mirrored"', worker="min_count = 2").roles
    assert roles["worker"].min_count == roles["worker"].fewest == 2
    assert load(tmp_path, worker="min_count = 3").roles["worker"].min_count == 3
    # count = 0 by --set must not trip over the file's min_count: nothing to keep, so 0
    roles = load(tmp_path, "roles.ps.count=0", top='strategy = "multi_worker_mirrored"', ps="min_count = 1").roles
    assert (roles["ps"].count, roles["ps"].min_count) == (0, 0)


def test_preemption_notice_per_host_wins_over_the_default_of_defaults(tmp_path: Path) -> None:
    hosts = load(tmp_path, defaults='preemption_notice = "curl -sf http://169.254.169.254/preempt"',
                 hosts='[hosts.own]\naddress = "localhost"\ntransport = "local"\npreemption_notice = "test -e /x"'
                 ).hosts
    assert hosts["own"].preemption_notice == "test -e /x"
    assert {hosts[name].preemption_notice for name in ("a", "b", "s")} == {"curl -sf http://169.254.169.254/preempt"}


def test_preemption_notice_under_ssh_is_every_hosts_default_too(tmp_path: Path) -> None:
    hosts = load(tmp_path, top='[ssh]\npreemption_notice = "check-notice"').hosts
    assert {host.preemption_notice for host in hosts.values()} == {"check-notice"}
    path = tmp_path / "local.toml"  # no [hosts]: the one local host gets it as well
    path.write_text('[defaults]\ncommand = "run"\npreemption_notice = "n"\n[roles.worker]\n', encoding="utf-8")
    assert load_profile(path).hosts["local"].preemption_notice == "n"


RANGES = """
[hosts.gpu]
address = "gpu[1-4]"
transport = "local"
[hosts.spare]
address = "sp[1-2]"
transport = "local"
[roles.worker]
count = 4
"""


def test_spares_name_a_host_range_by_its_table_and_roles_leave_spares_out(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text('spares = ["spare"]\n[defaults]\ncommand = "run"\n' + RANGES + 'hosts = ["gpu"]\n',
                    encoding="utf-8")
    profile = load_profile(path)
    assert profile.spares == ("spare-1", "spare-2")
    assert profile.roles["worker"].hosts == ("gpu-1", "gpu-2", "gpu-3", "gpu-4")
    # one host range, no hosts key: the role spreads over all of it but the spares
    path.write_text('spares = ["gpu-4"]\n[defaults]\ncommand = "run"\n[hosts.gpu]\naddress = "gpu[1-4]"\n'
                    'transport = "local"\n[roles.worker]\ncount = 3\n', encoding="utf-8")
    profile = load_profile(path)
    assert profile.spares == ("gpu-4",)
    assert profile.roles["worker"].hosts == ("gpu-1", "gpu-2", "gpu-3")
    path.write_text('spares = ["gpu-4"]\n[defaults]\ncommand = "run"\n' + RANGES + 'hosts = ["gpu"]\n',
                    encoding="utf-8")
    assert load_profile(path).roles["worker"].hosts == ("gpu-1", "gpu-2", "gpu-3")


def test_spares_are_nodes_of_the_slurm_allocation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "slurm.toml"
    path.write_text('spares = ["n4"]\n[defaults]\ncommand = "run"\n[slurm]\n[roles.worker]\ncount = 3\n',
                    encoding="utf-8")
    for name in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(name, raising=False)
    assert load_profile(path).spares == ()  # outside the allocation its nodes are not known yet
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-4]")
    profile = load_profile(path)
    assert profile.spares == ("n4",)
    assert profile.roles["worker"].hosts == ("n1", "n2", "n3")
    path.write_text(path.read_text().replace('"n4"', '"n9"'), encoding="utf-8")
    with pytest.raises(ProfileError, match='spares: host "n9" is not defined'):
        load_profile(path)


def test_set_overrides_the_new_keys(tmp_path: Path) -> None:
    profile = load(tmp_path, "host_lost_seconds=90", "roles.worker.min_count=2", 'spares=["s"]',
                   "on_host_lost=fail", "max_host_losses=4", 'hosts.s.preemption_notice="test -e /x"')
    assert (profile.host_lost_seconds, profile.roles["worker"].min_count, profile.spares) == (90.0, 2, ("s",))
    assert (profile.on_host_lost, profile.host_loss_limit) == ("fail", 4)
    assert profile.hosts["s"].preemption_notice == "test -e /x"
    message = refused(tmp_path, "host_lost_seconds=30")
    assert message.startswith("--set host_lost_seconds: ") and "orphan_grace_seconds (60)" in message
    assert refused(tmp_path, "roles.worker.min_count=9").startswith("--set roles.worker.min_count: is 9")


def test_check_lists_the_spares(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, top='spares = ["s"]')
    assert main(["check", "--no-remote", str(path)]) == 0
    out = capsys.readouterr().out
    assert 'spares    s   (run no task at start; on_host_lost = "replace", up to 2 hosts lost)' in out
    assert not any(line.split()[1] == "s" for line in out.splitlines() if line.startswith(("ps:", "worker:")))


# ---- mistakes -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("parts", "expected"), [
    ({"top": 'spares = ["gpu9"]'}, 'spares: host "gpu9" is not defined; valid: a, b, s (or add [hosts.gpu9])'),
    ({"top": 'spares = ["b"]'}, 'roles.worker.hosts: names "b", a spare, which runs no task at start; remove it '
     "from this role's hosts or from spares"),
    ({"top": 'spares = ["s", "s"]'}, 'spares: lists host "s" twice; list each spare once'),
    ({"top": 'spares = "s"'}, 'spares: expected a list of host names like ["gpu9"], got "s"'),
    ({"top": "spares = [1]"}, 'spares: expected a list of host names like ["gpu9"], got [1]'),
    ({"top": "orphan_grace_seconds = 300\nhost_lost_seconds = 120"}, "host_lost_seconds: host_lost_seconds (120) "
     "must be more than orphan_grace_seconds (300), so a lost host's tasks have stopped before they run elsewhere; "
     "raise host_lost_seconds above 300 or lower orphan_grace_seconds"),
    ({"top": "host_lost_seconds = 60"}, "host_lost_seconds: host_lost_seconds (60) must be more than "
     "orphan_grace_seconds (60)"),
    ({"top": "host_lost_seconds = 0"}, "host_lost_seconds: must be > 0, got 0"),
    ({"top": 'host_lost_seconds = "2m"'}, 'host_lost_seconds: expected a number, got "2m"'),
    ({"top": 'on_host_lost = "retry"'}, 'on_host_lost: "retry" is not one of replace, shrink, fail'),
    ({"top": "on_host_lost = 1"}, "on_host_lost: expected a string, got 1; put it in quotes"),
    ({"top": "max_host_losses = -1"}, "max_host_losses: must be >= 0, got -1"),
    ({"top": "max_host_losses = 1.5"}, "max_host_losses: expected an integer, got 1.5"),
    ({"worker": "min_count = 4"}, "roles.worker.min_count: is 4, more than count (3); give 1 to 3, the fewest "
     "worker tasks the job may go on with"),
    ({"worker": "min_count = 0"}, "roles.worker.min_count: must be >= 1, got 0"),
    ({"worker": 'min_count = "two"'}, 'roles.worker.min_count: expected an integer, got "two"'),
    ({"ps": "min_count = 2"}, "roles.ps.min_count: is 2, more than count (1)"),
    ({"worker": 'preemption_notice = "x"'}, "roles.worker.preemption_notice: is a host's, not a role's; set it "
     "under [hosts.NAME], or under [defaults] for every host"),
    ({"defaults": 'preemption_notice = "  "'}, "defaults.preemption_notice: is empty; give a shell command that "
     "exits 0 when the host is about to go, or leave the key out"),
    ({"hosts": '[hosts.t]\naddress = "x"\npreemption_notice = ""'}, "hosts.t.preemption_notice: is empty"),
    ({"defaults": "preemption_notice = 3"}, "defaults.preemption_notice: expected a string, got 3"),
    ({"defaults": 'preemption_notice = "a"', "top": '[ssh]\npreemption_notice = "b"'},
     "ssh.preemption_notice: is also set under [defaults]; keep the hosts' default notice in one of the two "
     "tables"),
    # each key only in its own table
    ({"top": 'preemption_notice = "x"'}, "preemption_notice: unknown key in the top level"),
    ({"defaults": "min_count = 1"}, "defaults.min_count: unknown key in [defaults]"),
    # a top-level key under a table: TOML put it there (issue 56)
    ({"defaults": 'spares = ["s"]'}, "defaults.spares: a top-level key, not one of [defaults]: move it above "
     "the first [table]"),
    ({"hosts": '[hosts.t]\naddress = "x"\nhost_lost_seconds = 10'}, "hosts.t.host_lost_seconds: a top-level "
     "key, not one of [hosts.t]: move it above the first [table]"),
    ({"worker": 'on_host_lost = "fail"'}, "roles.worker.on_host_lost: a top-level key, not one of "
     "[roles.worker]: move it above the first [table]"),
])
def test_mistakes_are_one_line_naming_the_key_and_the_fix(tmp_path: Path, parts: dict[str, str],
                                                         expected: str) -> None:
    assert expected in refused(tmp_path, **parts)


def test_spare_listed_by_its_name_and_its_range(tmp_path: Path) -> None:
    path = tmp_path / "r.toml"
    path.write_text('spares = ["spare", "spare-2"]\n[defaults]\ncommand = "run"\n' + RANGES, encoding="utf-8")
    with pytest.raises(ProfileError, match=r'spares: lists host "spare-2" twice \(as "spare" and as "spare-2"\)'):
        load_profile(path)


@pytest.mark.parametrize(("spares", "hosts", "expected"), [
    ('["gpu", "spare"]', "", "spares: names every host, so the worker tasks have none to run on; leave at least "
     "one host out of spares"),
    ('["gpu"]', 'hosts = ["gpu"]', "roles.worker.hosts: holds only spares; list a host that is not in spares"),
])
def test_roles_need_a_host_that_is_no_spare(tmp_path: Path, spares: str, hosts: str, expected: str) -> None:
    path = tmp_path / "r.toml"
    path.write_text(f'spares = {spares}\n[defaults]\ncommand = "run"\n' + RANGES + hosts + "\n", encoding="utf-8")
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    assert expected in str(caught.value)


def test_a_mistake_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, top='spares = ["gpu9"]')
    assert main(["check", "--no-remote", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and "Traceback" not in err
    assert f'{path}:1: spares: host "gpu9" is not defined' in err


def test_left_out_host_lost_seconds_follows_a_long_orphan_grace(tmp_path: Path) -> None:
    """A profile written before the key, with a long orphan grace, still loads: the default is
    120 s, or the grace + 60 s where that is more."""
    path = tmp_path / "p.toml"
    base = ('name = "g"\n{top}\n[defaults]\ncommand = "true"\n[hosts.local]\naddress = "localhost"\n'
            'transport = "local"\n[roles.worker]\nhosts = ["local"]\n')
    path.write_text(base.format(top="orphan_grace_seconds = 300"))
    assert load_profile(path).host_lost_seconds == 360
    path.write_text(base.format(top="orphan_grace_seconds = 30"))
    assert load_profile(path).host_lost_seconds == 120


# ---- checkpoint copies (issue 54 §4) ------------------------------------------------------------

def test_checkpoint_copies_keep_two_at_50mib_per_second_unless_told(tmp_path: Path) -> None:
    profile = load(tmp_path)
    assert profile.checkpoint_copies_kept == 2 and profile.checkpoint_copy_bandwidth == 50 * 1024**2
    told = load(tmp_path, top='checkpoint_copies_kept = 3\ncheckpoint_copy_bandwidth = "10 MB/s"')
    assert told.checkpoint_copies_kept == 3 and told.checkpoint_copy_bandwidth == 10_000_000
    assert load(tmp_path, top="checkpoint_copy_bandwidth = 0").checkpoint_copy_bandwidth == 0
    assert load(tmp_path, top='checkpoint_copy_bandwidth = "1GiB"').checkpoint_copy_bandwidth == 1024**3
    assert profile.checkpoint_copy_percent == 5
    assert load(tmp_path, top="checkpoint_copy_percent = 100").checkpoint_copy_percent == 100


@pytest.mark.parametrize(("top", "words"), [
    ('checkpoint_copy_bandwidth = "fast"', 'a rate like "50MiB/s"'),
    ("checkpoint_copy_bandwidth = -1", 'a rate like "50MiB/s"'),
    ("checkpoint_copies_kept = 0", "checkpoint_copies_kept"),
    ("checkpoint_copy_percent = 0", "checkpoint_copy_percent"),
    ("checkpoint_copy_percent = 101", "checkpoint_copy_percent"),
    ("checkpoint_copy_percent = 2.5", "checkpoint_copy_percent"),
])
def test_a_wrong_checkpoint_copy_key_is_one_line(tmp_path: Path, top: str, words: str) -> None:
    assert words in refused(tmp_path, top=top)
