"""What a valid profile loads into: defaults, overrides and merges as DESIGN.md section 4 says."""

from __future__ import annotations

from pathlib import Path

from launcher.model import SshSettings
from launcher.profile.checks import key_lines
from launcher.profile.reader import load_profile


def write(tmp_path: Path, text: str, name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_when_keys_are_left_out(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, """
[defaults]
command = "run"
[hosts.h]
address = "10.0.0.1"
[roles.worker]
"""))
    assert profile.name == "p"  # the file's stem
    assert profile.strategy == "multi_worker_mirrored"
    assert profile.success_policy == "chief"
    assert profile.backoff_limit == 10
    assert profile.orphan_grace_seconds == 60.0
    assert profile.sample_interval == 1.0
    worker = profile.roles["worker"]
    assert worker.count == 1
    assert worker.hosts == ("h",)  # the only host
    assert worker.port is None
    assert worker.gpus_per_task == 0
    s = worker.settings
    assert (s.python, s.workdir, s.env, s.restart, s.max_restarts, s.grace_seconds) == (
        None, ".", {}, "on-failure", 3, 10.0)
    host = profile.hosts["h"]
    assert host.transport == "ssh"
    assert host.ssh == SshSettings(user=None, identity_file=None, known_hosts="~/.ssh/known_hosts",
                                   host_key_policy="reject", connect_timeout=10.0, ssh_port=22,
                                   ssh_config="~/.ssh/config", unset=host.ssh.unset)
    assert "ssh_port" in host.ssh.unset and "user" in host.ssh.unset  # ~/.ssh/config may set them
    assert profile.metrics.step is None and profile.metrics.extra == {}


def test_strategy_defaults_to_parameter_server_with_ps_tasks(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, """
[defaults]
command = "run"
[roles.ps]
[roles.chief]
"""))
    assert profile.strategy == "parameter_server"
    # no [hosts]: everything runs here
    assert profile.hosts["local"].transport == "local"
    assert list(profile.roles) == ["chief", "ps"]  # in ROLES order


def test_every_key_is_read(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, """
name = "job"
strategy = "custom"
success_policy = "all_workers"
backoff_limit = 4
orphan_grace_seconds = 5
sample_interval = 0.5

[defaults]
command = "{python} a.py"
python = "python3.11"
workdir = "/srv"
env = { A = "1", B = "2" }
restart = "always"
max_restarts = 7
grace_seconds = 2.5

[ssh]
user = "alice"
identity_file = "~/.ssh/k"
known_hosts = "/etc/kh"
host_key_policy = "accept-new"
connect_timeout = 3
ssh_port = 2200
ssh_config = "/etc/ssh/cfg"

[hosts.a]
address = "10.0.0.1"
gpus = [2, 3]
[hosts.b]
address = "10.0.0.2"
user = "bob"
ssh_port = 22
gpus = [0]

[roles.worker]
count = 3
hosts = ["a", "b"]
port = 5000
gpus_per_task = 1
command = "{python} b.py {role}"
env = { B = "override", C = "3" }
restart = "exit-code"

[metrics]
step = 'step (\\d+)'
loss = 'loss=(\\S+)'
accuracy = 'acc=(\\S+)'
"""))
    assert (profile.name, profile.strategy, profile.success_policy) == ("job", "custom", "all_workers")
    assert (profile.backoff_limit, profile.orphan_grace_seconds, profile.sample_interval) == (4, 5.0, 0.5)
    assert profile.defaults.env == {"A": "1", "B": "2"}
    a, b = profile.hosts["a"], profile.hosts["b"]
    assert a.ssh == SshSettings("alice", "~/.ssh/k", "/etc/kh", "accept-new", 3.0, 2200, "/etc/ssh/cfg",
                               unset=())
    assert a.gpus == (2, 3)
    assert (b.ssh.user, b.ssh.ssh_port, b.ssh.identity_file) == ("bob", 22, "~/.ssh/k")
    worker = profile.roles["worker"]
    assert (worker.count, worker.hosts, worker.port, worker.gpus_per_task) == (3, ("a", "b"), 5000, 1)
    s = worker.settings
    assert s.command == "{python} b.py {role}"
    assert s.env == {"A": "1", "B": "override", "C": "3"}  # merged key by key
    assert (s.python, s.workdir, s.restart, s.max_restarts, s.grace_seconds) == (
        "python3.11", "/srv", "exit-code", 7, 2.5)
    assert profile.metrics.step == "step (\\d+)"
    assert profile.metrics.loss == "loss=(\\S+)"
    assert profile.metrics.extra == {"accuracy": "acc=(\\S+)"}


def test_key_lines_finds_tables_keys_and_inline_keys() -> None:
    lines = key_lines('name = "x"\n\n[defaults]\nenv = { A = "1", "B.C" = "2" }\n[roles.worker]\na.b = 1\n')
    assert lines[("name",)] == 1
    assert lines[("defaults",)] == 3
    assert lines[("defaults", "env", "A")] == 4
    assert lines[("defaults", "env", "B.C")] == 4
    assert lines[("roles", "worker", "a", "b")] == 6
