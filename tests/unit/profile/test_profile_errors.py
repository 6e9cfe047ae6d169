"""Every kind of bad profile gives exit code 2 and one line naming the file, the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cli import main

HOST = """
[hosts.local]
address = "localhost"
transport = "local"
"""

GOOD_HEAD = f"""
name = "t"
[defaults]
command = "{{python}} train.py"
{HOST}
"""


def check_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> tuple[Path, str]:
    """Write ``text`` as a profile, run ``check --no-remote`` on it; return (path, the one stderr line)."""
    path = tmp_path / "bad.toml"
    path.write_text(text, encoding="utf-8")
    code = main(["check", "--no-remote", str(path)])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert str(path) in lines[0]
    assert out == ""  # nothing planned or printed for a bad profile
    return path, lines[0]


def line_of(text: str, content: str) -> int:
    return text.splitlines().index(content) + 1


def test_malformed_toml_names_line_and_column(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, line = check_error(tmp_path, capsys, 'name = "t"\n[defaults]\ncommand = \n')
    assert f"{path}:3:11: invalid TOML" in line


def test_unknown_key_suggests_the_close_one(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, line = check_error(tmp_path, capsys, 'name = "t"\n[defaults]\ncomand = "x"\n' + HOST
                             + "[roles.worker]\n")
    assert f"{path}:3: defaults.comand: unknown key" in line
    assert 'did you mean "command"?' in line


def test_unknown_top_level_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, 'stratgy = "custom"\n' + GOOD_HEAD + "[roles.worker]\n")
    assert 'stratgy: unknown key in the top level; did you mean "strategy"?' in line


def test_unknown_role_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, GOOD_HEAD + "[roles.worker]\ngpus_per_tsk = 1\n")
    assert 'roles.worker.gpus_per_tsk: unknown key in [roles.worker]; did you mean "gpus_per_task"?' in line


def test_wrong_type_names_the_value(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = GOOD_HEAD + '[roles.worker]\ncount = "two"\n'
    path, line = check_error(tmp_path, capsys, text)
    number = line_of(text, 'count = "two"')
    assert line.endswith(f'{path}:{number}: roles.worker.count: expected an integer, got "two"')


def test_role_on_undefined_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, GOOD_HEAD + '[roles.worker]\nhosts = ["locl"]\n')
    assert 'roles.worker.hosts: host "locl" is not defined; did you mean "local"?' in line


def test_negative_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, GOOD_HEAD + "[roles.worker]\ncount = -1\n")
    assert "roles.worker.count: must be >= 0, got -1" in line


def test_two_chiefs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, GOOD_HEAD + "[roles.chief]\ncount = 2\n")
    assert "roles.chief.count: a job has at most one chief" in line


def test_two_tasks_on_one_port_after_base_port_rule(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    # worker:0 -> 2221, worker:1 -> 2222, which the ps already has.
    _, line = check_error(tmp_path, capsys, GOOD_HEAD + "[roles.ps]\nport = 2222\n"
                          "[roles.worker]\ncount = 2\nport = 2221\n")
    assert "roles.worker.port: worker:1 and ps:0 both use localhost:2222" in line


def test_same_port_on_different_hosts_is_fine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "ok.toml"
    path.write_text(GOOD_HEAD + '[hosts.b]\naddress = "10.0.0.2"\n'
                    '[roles.worker]\ncount = 2\nhosts = ["local", "b"]\nport = 2222\n', encoding="utf-8")
    assert main(["check", "--no-remote", str(path)]) == 0
    assert "10.0.0.2:2222" in capsys.readouterr().out


def test_more_gpus_than_the_host_offers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = GOOD_HEAD.replace('transport = "local"', 'transport = "local"\ngpus = [0, 1]')
    _, line = check_error(tmp_path, capsys, text + "[roles.worker]\ncount = 3\ngpus_per_task = 1\n")
    assert 'roles.worker.gpus_per_task: tasks on host "local" ask for 3 GPUs but it offers 2' in line


def test_master_role_hints_chief(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, GOOD_HEAD + "[roles.master]\n")
    assert "roles.master:" in line
    assert "[roles.chief]" in line


def test_unknown_role(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, GOOD_HEAD + "[roles.workers]\n")
    assert 'roles.workers: unknown role; did you mean "worker"?' in line


def test_no_chief_and_no_workers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, GOOD_HEAD + "[roles.ps]\n[roles.worker]\ncount = 0\n")
    assert "roles: no chief and no workers" in line


def test_empty_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = GOOD_HEAD + '[roles.worker]\ncommand = "  "\n'
    path, line = check_error(tmp_path, capsys, text)
    number = line_of(text, 'command = "  "')
    assert f"{path}:{number}: roles.worker.command: is empty" in line


def test_missing_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, HOST + "[roles.worker]\n")
    assert "roles.worker.command: no command for this role" in line


def test_bad_restart_policy_lists_valid_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, GOOD_HEAD + '[roles.worker]\nrestart = "sometimes"\n')
    assert "roles.worker.restart:" in line
    assert "never, on-failure, always, exit-code" in line


@pytest.mark.parametrize(("snippet", "key"), [
    ('strategy = "horovod"\n', "strategy"),
    ('success_policy = "any"\n', "success_policy"),
])
def test_bad_top_level_choice(tmp_path: Path, capsys: pytest.CaptureFixture[str], snippet: str,
                              key: str) -> None:
    _, line = check_error(tmp_path, capsys, snippet + GOOD_HEAD + "[roles.worker]\n")
    assert f":1: {key}: " in line
    assert "is not one of" in line


def test_bad_host_key_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, GOOD_HEAD + '[ssh]\nhost_key_policy = "auto-add"\n'
                          "[roles.worker]\n")
    assert 'ssh.host_key_policy: "auto-add" is not one of reject, accept-new' in line


def test_bad_host_key_policy_per_host(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, GOOD_HEAD.replace(
        'transport = "local"', 'transport = "local"\nhost_key_policy = "yes"') + "[roles.worker]\n")
    assert "hosts.local.host_key_policy:" in line


def test_bad_transport(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, GOOD_HEAD.replace('"local"\n', '"sshh"\n') + "[roles.worker]\n")
    assert 'hosts.local.transport: "sshh" is not one of ssh, openssh, local; did you mean "ssh"?' in line


def test_metrics_regex_that_does_not_compile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, GOOD_HEAD + "[roles.worker]\n[metrics]\nstep = 'step (\\d+'\n")
    assert "metrics.step: bad regex:" in line


def test_metrics_regex_without_group(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, GOOD_HEAD + "[roles.worker]\n[metrics]\nloss = 'loss \\S+'\n")
    assert "metrics.loss: the regex has no capture group" in line


def test_unknown_placeholder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, GOOD_HEAD + '[roles.worker]\ncommand = "run {rol} ${HOME}"\n')
    assert 'roles.worker.command: unknown placeholder {rol}; did you mean "{role}"?' in line


def test_env_value_must_be_a_string(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, GOOD_HEAD.replace(
        "[defaults]\n", "[defaults]\nenv = { TF_CPP_MIN_LOG_LEVEL = 2 }\n") + "[roles.worker]\n")
    assert "defaults.env.TF_CPP_MIN_LOG_LEVEL: expected a string, got 2" in line


def test_host_without_address(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, line = check_error(tmp_path, capsys, GOOD_HEAD + "[hosts.gpu1]\ngpus = [0]\n[roles.worker]\n"
                          'hosts = ["gpu1"]\n')
    assert "hosts.gpu1: has no address" in line


def test_file_not_found(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nope.toml"
    code = main(["check", "--no-remote", str(path)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.splitlines() == [f"distlaunch: error: {path}: profile not found; check the path "
                                "(ready ones are in cluster_profiles/)"]


def test_tfconfig_unknown_task_lists_valid_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.toml"
    path.write_text(GOOD_HEAD + "[roles.worker]\ncount = 2\nport = 2300\n", encoding="utf-8")
    assert main(["tfconfig", str(path), "worker:5"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [f"distlaunch: error: no task 'worker:5' in {path}; "
                                "valid task ids: worker:0, worker:1"]


def test_tfconfig_port_picked_at_launch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.toml"
    path.write_text(GOOD_HEAD + "[roles.worker]\ncount = 2\n", encoding="utf-8")
    # the plan, with what stands for the ports (issue 56: init's profiles have none fixed), and a note
    assert main(["tfconfig", str(path), "worker:0"]) == 0
    out, err = capsys.readouterr()
    assert '"localhost:<picked at launch>"' in out
    assert err == ("distlaunch: note: the ports of worker are picked at launch (no `port` in their role): "
                   "`distlaunch status --json` shows them once the job runs\n")


@pytest.mark.parametrize(("table", "key", "value"), [
    ("[defaults]\ncommand = \"true\"\n", "straggler_ratio", "0.7"),
    ("[hosts.local]\naddress = \"localhost\"\ntransport = \"local\"\n", "spares", '["b"]'),
])
def test_a_top_level_key_under_a_table_says_to_move_it(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         table: str, key: str, value: str) -> None:
    name = table.splitlines()[0].strip("[]")
    _, err = check_error(tmp_path, capsys, 'name = "x"\n' + table + f"{key} = {value}\n"
                         + '[hosts.h]\naddress = "localhost"\ntransport = "local"\n[roles.worker]\nhosts = ["h"]\n')
    assert err.endswith(f"{name}.{key}: a top-level key, not one of [{name}]: move it above the first [table] "
                        "of the profile"), err
