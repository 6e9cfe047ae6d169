"""What preflight asks each host about a task's command, and min_uptime from the profile to the plan."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

from launcher.agent.hostcheck import run_checks
from launcher.plan import build_plan
from launcher.profile.reader import ProfileError, load_profile
from launcher.remote.taskcheck import command_needs, host_checks
from tests.profiles import build_profile


@pytest.mark.parametrize("template, needs", [
    ("{python} train.py --steps 10", ("file", "train.py")),
    ("{python} -u -W ignore examples/ps.py", ("file", "examples/ps.py")),
    ("TF_CPP_MIN_LOG_LEVEL=2 {python} -X dev train.py", ("file", "train.py")),
    ("{python} -m pkg.train --lr 0.1", ("module", "pkg.train")),
    ("{python} -c 'print(1)'", None),
    ("{python} train_{role}.py", None),   # a placeholder in the name: not judged
    ("{python} run --fast", None),        # not a .py script: not judged
    ("./train.sh {task}", ("executable", "./train.sh")),
    ("torchrun --nproc 2 x.py", ("executable", "torchrun")),
    ("exec $PROGRAM", None),
    ("cd sub && make", None),
    ("$HOME/bin/train", None),
    ("'unterminated", None),
])
def test_command_needs(template: str, needs: tuple[str, str] | None) -> None:
    assert command_needs(template) == needs


def _profile(tmp_path: Path, worker: dict[str, Any] | None = None) -> Path:
    return build_profile(tmp_path / "p.toml", name="t", strategy="custom", command="{python} train.py",
                         defaults={"python": sys.executable, "min_uptime": 4}, hosts=(),
                         roles={"ps": {}, "worker": {"count": 3, **(worker or {})}})


def test_min_uptime_defaults_and_per_role(tmp_path: Path) -> None:
    plan = build_plan(load_profile(_profile(tmp_path, {"min_uptime": 0.5})))
    assert {t.task_id: t.min_uptime for t in plan.tasks} == {"ps:0": 4.0, "worker:0": 0.5, "worker:1": 0.5,
                                                              "worker:2": 0.5}
    build_profile(tmp_path / "q.toml", name="q", command="true", hosts=(), roles={"worker": {}})
    assert build_plan(load_profile(tmp_path / "q.toml")).tasks[0].min_uptime == 10.0


def test_min_uptime_must_be_a_non_negative_number(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="min_uptime"):
        load_profile(_profile(tmp_path, {"min_uptime": -1}))


def test_checks_are_asked_once_per_role_and_name_the_key_to_fix(tmp_path: Path) -> None:
    plan = build_plan(load_profile(_profile(tmp_path, {"command": "{python} -m pkg.main"})))
    checks = host_checks(plan)["local"]
    kinds = sorted((c["kind"], c["role"], c["key"]) for c in checks)
    assert kinds == [("dir", "ps", "defaults.workdir"), ("dir", "worker", "defaults.workdir"),
                     ("file", "ps", "defaults.command"), ("module", "worker", "roles.worker.command")]


def test_host_side_checks(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "train.py").write_text("")
    (tmp_path / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(tmp_path / "run.sh", 0o644)
    python = sys.executable
    checks = [
        {"kind": "dir", "path": str(tmp_path)},
        {"kind": "dir", "path": str(tmp_path / "train.py")},
        {"kind": "file", "path": "train.py", "workdir": str(tmp_path)},
        {"kind": "file", "path": "trian.py", "workdir": str(tmp_path)},
        {"kind": "file", "path": "trian.py", "workdir": str(tmp_path / "gone")},  # the workdir's line says it
        {"kind": "module", "path": "pkg", "workdir": str(tmp_path), "python": python},
        {"kind": "module", "path": "pkg.nope", "workdir": str(tmp_path), "python": python},
        {"kind": "executable", "path": "./run.sh", "workdir": str(tmp_path)},
        {"kind": "executable", "path": "sh", "workdir": str(tmp_path)},
        {"kind": "executable", "path": "exit", "workdir": str(tmp_path)},  # a shell builtin runs fine
        {"kind": "executable", "path": "no-such-program-anywhere", "workdir": str(tmp_path)},
        {"kind": "dir", "path": "sub"},  # relative: from the cwd given (the host run dir)
    ]
    (tmp_path / "sub").mkdir()
    failed = {(f["kind"], f["path"]): f["problem"] for f in run_checks(checks, str(tmp_path))}
    assert failed == {
        ("dir", str(tmp_path / "train.py")): "is not a directory",
        ("file", "trian.py"): "does not exist",
        ("module", "pkg.nope"): f"is not importable by {python}",
        ("executable", "./run.sh"): "is not executable",
        ("executable", "no-such-program-anywhere"): "is not on the PATH",
    }


def test_module_and_program_are_looked_up_after_the_roles_setup_lines(tmp_path: Path) -> None:
    """A venv activated by `setup` decides what the task can import and run: so does the check."""
    extra = tmp_path / "extra"
    (extra / "bin").mkdir(parents=True)
    (extra / "only_in_setup.py").write_text("")
    (extra / "bin" / "only-in-setup").write_text("#!/bin/sh\n")
    (extra / "bin" / "only-in-setup").chmod(0o755)
    setup = [f"export PYTHONPATH={extra} PATH={extra}/bin:$PATH"]
    base = {"workdir": str(tmp_path), "python": sys.executable}
    checks = [
        {**base, "kind": "module", "path": "only_in_setup", "setup": setup},
        {**base, "kind": "executable", "path": "only-in-setup", "setup": setup, "shell": "bash -c"},
        {**base, "kind": "module", "path": "only_in_setup"},
        {**base, "kind": "module", "path": "json", "setup": ["false"]},
    ]
    failed = [(f["path"], f.get("setup"), f["problem"]) for f in run_checks(checks, str(tmp_path))]
    assert failed == [
        ("only_in_setup", None, f"is not importable by {sys.executable}"),
        ("json", ["false"], "could not be checked: the setup lines failed (exit 97)"),
    ]
