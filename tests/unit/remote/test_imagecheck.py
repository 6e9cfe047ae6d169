"""Containerised tasks in the plan and the preflight, judged on data (launcher/plan.py,
launcher/remote/imagecheck.py, parity.py, taskcheck.py): `{python}` is the image's, the host agent
keeps a host interpreter, each host is asked about its images once, a missing image is one line
naming host and image, and the parity table shows digest and TensorFlow inside, flagging differences."""

from __future__ import annotations

import sys
from pathlib import Path

from launcher.model import Plan
from launcher.plan import agent_python, build_plan, task_container
from launcher.profile.reader import load_profile
from launcher.remote.imagecheck import add_images, container_checks, containerised_only, image_problems
from launcher.remote.parity import HostRow, judge, table
from launcher.remote.taskcheck import host_checks
from tests.profiles import Host, build_profile, ssh_host


def plan_of(tmp_path: Path, strategy: str = "parameter_server", ssh: bool = False) -> Plan:
    host_b = ssh_host("b", "10.0.0.3") if ssh else Host("b", "127.0.0.3")
    path = build_profile(tmp_path / "p.toml", name="images", strategy=strategy, command="{python} -m trainer.main",
                         defaults={"container": {"image": "team/tf:2.21"}}, hosts=[Host("a", "127.0.0.2"), host_b],
                         roles={"ps": {"hosts": ["a"], "container": False}, "worker": {"count": 2, "hosts": ["b"]},
                                "chief": {"hosts": ["a"]}})
    return build_plan(load_profile(path))


def test_python_is_the_images_and_the_agent_keeps_a_host_interpreter(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    by_id = {t.task_id: t for t in plan.tasks}
    assert by_id["worker:0"].python == "python3" and by_id["worker:0"].command.startswith("python3 -m")
    assert by_id["ps:0"].python == sys.executable  # bare, local: the launcher's own
    assert task_container(plan, by_id["ps:0"]) is None
    assert task_container(plan, by_id["worker:1"]).image == "team/tf:2.21"  # type: ignore[union-attr]
    assert agent_python(plan, "a") == sys.executable  # the bare ps' python
    assert agent_python(plan, "b") == sys.executable  # only containers, a local host
    assert agent_python(plan_of(tmp_path, ssh=True), "b") == "python3"
    assert containerised_only(plan, "b") and not containerised_only(plan, "a")


def test_each_host_is_asked_about_its_images_once(tmp_path: Path) -> None:
    checks = container_checks(plan_of(tmp_path), "metadata")
    assert checks == {
        "a": [{"container": {"image": "team/tf:2.21", "runtime": "docker", "mounts": [], "options": [],
                             "pull": "missing"}, "python": "python3", "tensorflow": "metadata"}],
        "b": [{"container": {"image": "team/tf:2.21", "runtime": "docker", "mounts": [], "options": [],
                             "pull": "missing"}, "python": "python3", "tensorflow": "metadata"}],
    }
    custom = container_checks(plan_of(tmp_path, strategy="custom"), "import")
    assert custom["b"][0]["tensorflow"] is None


def test_a_containerised_roles_module_is_not_looked_up_on_the_host(tmp_path: Path) -> None:
    checks = host_checks(plan_of(tmp_path))
    kinds = {(c["kind"], c["role"]) for host in checks.values() for c in host}
    assert ("module", "ps") in kinds  # bare: the host's interpreter must import it
    assert ("module", "worker") not in kinds and ("module", "chief") not in kinds
    assert ("dir", "worker") in kinds  # the workdir is mounted from the host: it must exist there


def test_image_problems_are_one_line_naming_host_and_image() -> None:
    answer = {"containers": [
        {"image": "team/tf:2.21", "runtime": "docker", "error": "not present (pull = never)"},
        {"image": "team/tf:old", "runtime": "docker", "error": "cannot pull it: Error response from daemon: denied"},
        {"image": "x.sif", "runtime": "apptainer", "error": "apptainer is not installed here (not on the PATH)"},
        {"image": "team/tf:cpu", "runtime": "docker", "tf_error": "ModuleNotFoundError: No module named 'tensorflow'"},
        {"image": "ok", "runtime": "docker", "digest": "1a2b3c4d5e6f", "tensorflow": "2.21.0"},
    ]}
    problems = image_problems("gpu1", answer)
    assert problems == [
        'host gpu1: container image team/tf:2.21 is not present and pull = "never"; load it there (docker pull / '
        'load) or set container.pull = "missing"',
        "host gpu1: container image team/tf:old is not present and docker cannot pull it (Error response from "
        "daemon: denied); fix container.image, or load it there",
        "host gpu1: cannot use container image x.sif: apptainer is not installed here (not on the PATH); fix the "
        "runtime there or container.runtime",
        "host gpu1: `import tensorflow` fails in container image team/tf:cpu (ModuleNotFoundError: No module named "
        "'tensorflow'); use an image with TensorFlow or fix `python`",
    ]
    assert image_problems("gpu1", {}) == []


def test_parity_shows_digest_and_tensorflow_inside_and_flags_a_digest_that_differs(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    rows = [HostRow("a", python="3.11.7", tensorflow="2.21.0"), HostRow("b", python="3.11.7", tensorflow="2.15.0")]
    add_images(rows[0], {"containers": [{"image": "team/tf:2.21", "digest": "1a2b3c4d5e6f", "tensorflow": "2.21.0"}]},
               containerised=False)
    add_images(rows[1], {"containers": [{"image": "team/tf:2.21", "digest": "ffff00001111", "tensorflow": "2.21.0"}]},
               containerised=True)
    assert rows[1].tensorflow == "2.21.0"  # the host's own TensorFlow does not matter where all run in the image
    assert rows[0].tensorflow == "2.21.0" and rows[0].images == {"team/tf:2.21": "1a2b3c4d5e6f"}
    text = table(rows)
    header, first, second = text.splitlines()
    assert "IMAGE differs" in header
    assert "1a2b3c4d5e6f (TF 2.21.0)" in first and "ffff00001111 (TF 2.21.0)" in second
    warnings, errors = judge(plan, rows)
    assert errors == []
    assert any(w.startswith("container image team/tf:2.21 differs across hosts (1a2b3c4d5e6f on a; ffff00001111 "
                            "on b)") for w in warnings), warnings
    same = [HostRow("a"), HostRow("b")]
    for row in same:
        add_images(row, {"containers": [{"image": "team/tf:2.21", "digest": "1a2b3c4d5e6f"}]}, containerised=True)
    assert "IMAGE differs" not in table(same) and not any("differs" in w for w in judge(plan, same)[0])
    assert "IMAGE" not in table([HostRow("a"), HostRow("b")])  # no container: no column


def test_a_tensorflow_in_an_image_that_differs_from_the_hosts_is_version_skew(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    row = HostRow("a", python="3.11.7", tensorflow="2.15.0")  # the bare ps' TensorFlow
    add_images(row, {"containers": [{"image": "team/tf:2.21", "digest": "1a2b3c4d5e6f", "tensorflow": "2.21.0"}]},
               containerised=False)
    _, errors = judge(plan, [row])
    assert errors == ["TensorFlow differs across hosts (2.15.0 on a; 2.21.0 on a (its image)): the tasks of one job "
                      "need the same major.minor; install one version everywhere (or set allow_version_skew = true)"]
