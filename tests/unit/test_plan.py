"""Profile -> Plan: order, spreading, base ports, GPUs, placeholders and TF_CONFIG."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from launcher.model import Plan
from launcher.plan import PortUnresolved, build_plan, mask_env, render_command, tf_config
from launcher.profile.reader import load_profile
from tests.profiles import Host, build_profile, local_host, ssh_host

COMMAND = ("{python} train.py --role {role} --index {index} --task {task} --host {host} "
           "--port {port} --out {run_dir} ${HOME}")
CLUSTER = """
name = "c"
[defaults]
command = "@COMMAND@"
[hosts.a]
address = "10.0.0.1"
gpus = [0, 1, 2]
[hosts.b]
address = "10.0.0.2"
gpus = [5, 7]
[roles.chief]
hosts = ["b"]
port = 4000
[roles.ps]
count = 2
hosts = ["a", "b"]
port = 2000
[roles.worker]
count = 3
hosts = ["a", "b"]
port = 3000
gpus_per_task = 1
[roles.evaluator]
hosts = ["a"]
port = 4100
gpus_per_task = 1
""".replace("@COMMAND@", COMMAND)


@pytest.fixture
def plan(tmp_path: Path) -> Plan:
    path = tmp_path / "c.toml"
    path.write_text(CLUSTER, encoding="utf-8")
    return build_plan(load_profile(path))


def test_tasks_in_start_order_then_index(plan: Plan) -> None:
    assert [t.task_id for t in plan.tasks] == [
        "ps:0", "ps:1", "worker:0", "worker:1", "worker:2", "evaluator:0", "chief:0"]
    assert isinstance(plan.tasks, tuple)


def test_tasks_spread_round_robin_with_base_ports(plan: Plan) -> None:
    where = {t.task_id: (t.host, t.address, t.port) for t in plan.tasks}
    assert where["ps:0"] == ("a", "10.0.0.1", 2000)
    assert where["ps:1"] == ("b", "10.0.0.2", 2000)
    assert where["worker:0"] == ("a", "10.0.0.1", 3000)
    assert where["worker:1"] == ("b", "10.0.0.2", 3000)
    assert where["worker:2"] == ("a", "10.0.0.1", 3001)  # second worker on a: base + 1


def test_gpus_are_handed_out_per_host(plan: Plan) -> None:
    gpus = {t.task_id: (t.gpus, t.env.get("CUDA_VISIBLE_DEVICES")) for t in plan.tasks}
    assert gpus["worker:0"] == ((0,), "0")
    assert gpus["worker:1"] == ((5,), "5")  # physical indices from the host's list
    assert gpus["worker:2"] == ((1,), "1")
    assert gpus["evaluator:0"] == ((2,), "2")
    # CPU tasks on GPU hosts are kept off the GPUs
    assert gpus["ps:0"] == ((), "")
    assert gpus["chief:0"] == ((), "")


def test_no_cuda_visible_devices_on_hosts_without_gpus(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[defaults]\ncommand = "x"\n[roles.worker]\n', encoding="utf-8")
    (task,) = build_plan(load_profile(path)).tasks
    assert "CUDA_VISIBLE_DEVICES" not in task.env


def test_multi_gpu_tasks(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[defaults]\ncommand = "x"\n[hosts.g]\naddress = "10.0.0.9"\ngpus = [0, 1, 2, 3]\n'
                    "[roles.worker]\ncount = 2\ngpus_per_task = 2\n", encoding="utf-8")
    tasks = build_plan(load_profile(path)).tasks
    assert [t.env["CUDA_VISIBLE_DEVICES"] for t in tasks] == ["0,1", "2,3"]


def test_placeholders_filled_except_launch_time_ones(plan: Plan) -> None:
    task = plan.task("worker:1")
    assert task.python == "python3"  # ssh host without a python key
    assert task.command == ("python3 train.py --role worker --index 1 --task worker:1 --host 10.0.0.2 "
                            "--port {port} --out {run_dir} ${HOME}")
    rendered = render_command(task.command, port=3000, run_dir="/tmp/my run")
    assert rendered.endswith("--port 3000 --out '/tmp/my run' ${HOME}")


def test_local_python_and_workdir(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "p.toml"
    build_profile(path, name=None, command="{python} x.py", workdir="..",
                  hosts=[local_host("l"), ssh_host("s", "127.0.0.1")],
                  roles={"worker": {"count": 2, "workdir": "{profile_dir}/../w"}, "chief": {"hosts": ["l"]}})
    plan = build_plan(load_profile(path))
    chief = plan.task("chief:0")
    assert chief.python == sys.executable
    assert chief.workdir == str(tmp_path.resolve())  # relative to the profile's directory
    assert plan.task("worker:1").workdir == str(tmp_path.resolve() / "w")  # ssh: {profile_dir} expanded
    assert plan.task("worker:1").python == "python3"


def test_tf_config_format(plan: Plan) -> None:
    config = tf_config(plan, "worker:1")
    assert config == {
        "cluster": {
            "chief": ["10.0.0.2:4000"],
            "worker": ["10.0.0.1:3000", "10.0.0.2:3000", "10.0.0.1:3001"],
            "ps": ["10.0.0.1:2000", "10.0.0.2:2000"],
        },
        "task": {"type": "worker", "index": 1},
    }
    assert list(config) == ["cluster", "task"]


def test_evaluator_is_not_in_cluster(plan: Plan) -> None:
    config = tf_config(plan, "evaluator:0")
    assert "evaluator" not in config["cluster"]
    assert config["task"] == {"type": "evaluator", "index": 0}
    assert not plan.task("evaluator:0").in_cluster


def test_launch_ports_override_and_unresolved_ports(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[defaults]\ncommand = "x"\n[roles.worker]\ncount = 2\n[roles.chief]\nport = 7000\n',
                    encoding="utf-8")
    plan = build_plan(load_profile(path))
    with pytest.raises(PortUnresolved, match=r"task worker:0 has no port; .* roles\.worker\.port"):
        tf_config(plan, "chief:0")
    shown = tf_config(plan, "chief:0", unknown_port="<picked at launch>")  # distlaunch tfconfig
    assert shown["cluster"] == {"chief": ["localhost:7000"],
                                "worker": ["localhost:<picked at launch>", "localhost:<picked at launch>"]}
    config = tf_config(plan, "chief:0", ports={"worker:0": 7001, "worker:1": 7002, "chief:0": 7100})
    assert config["cluster"] == {"chief": ["localhost:7100"], "worker": ["localhost:7001", "localhost:7002"]}


def test_roles_without_tasks_are_left_out_of_cluster(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text('[defaults]\ncommand = "x"\n[roles.ps]\ncount = 0\n[roles.chief]\nport = 7000\n',
                    encoding="utf-8")
    plan = build_plan(load_profile(path))
    assert [t.task_id for t in plan.tasks] == ["chief:0"]
    assert tf_config(plan, "chief:0") == {"cluster": {"chief": ["localhost:7000"]},
                                          "task": {"type": "chief", "index": 0}}


def test_ipv6_addresses_are_bracketed(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    build_profile(path, name=None, command="x", hosts=[Host("v6", "::1")], roles={"worker": {"port": 7000}},
                  role_hosts=False)
    assert tf_config(build_plan(load_profile(path)), "worker:0")["cluster"] == {"worker": ["[::1]:7000"]}


def test_mask_env() -> None:
    env = {"WANDB_API_KEY": "k", "github_token": "t", "DB_PASSWORD": "p", "MY_SECRET_X": "s",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    assert mask_env(env) == {"WANDB_API_KEY": "****", "github_token": "****", "DB_PASSWORD": "****",
                             "MY_SECRET_X": "****", "TF_CPP_MIN_LOG_LEVEL": "2"}
