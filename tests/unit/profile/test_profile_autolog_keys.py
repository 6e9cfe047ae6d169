"""The profile keys of autolog and the watchdogs: autolog, stall_seconds, on_stall, straggler_ratio."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.cli import main
from launcher.plan import build_plan
from launcher.profile.reader import load_profile

BASE = """
[defaults]
command = "run"
{defaults}
[hosts.h]
address = "localhost"
transport = "local"
[roles.ps]
count = 1
{ps}
[roles.worker]
count = 2
{worker}
"""


def load(tmp_path: Path, defaults: str = "", ps: str = "", worker: str = "", top: str = "") -> object:
    path = tmp_path / "p.toml"
    path.write_text(top + BASE.format(defaults=defaults, ps=ps, worker=worker), encoding="utf-8")
    return load_profile(path)


def test_defaults_autolog_on_stall_warn_after_600s_and_off_for_ps(tmp_path: Path) -> None:
    profile = load(tmp_path)
    plan = build_plan(profile)
    worker, ps = plan.task("worker:0"), plan.task("ps:0")
    assert (worker.autolog, worker.stall_seconds, worker.on_stall) == (True, 600.0, "warn")
    assert ps.stall_seconds == 0.0
    assert profile.straggler_ratio == 0.7 and profile.straggler_seconds == 30.0
    assert load(tmp_path, top="straggler_seconds = 5\n").straggler_seconds == 5.0


def test_defaults_apply_to_every_role_but_ps_unless_ps_says_so(tmp_path: Path) -> None:
    profile = load(tmp_path, defaults='autolog = false\nstall_seconds = 30\non_stall = "restart"')
    plan = build_plan(profile)
    assert (plan.task("worker:1").autolog, plan.task("worker:1").stall_seconds,
            plan.task("worker:1").on_stall) == (False, 30.0, "restart")
    assert plan.task("ps:0").stall_seconds == 0.0 and plan.task("ps:0").autolog is False
    explicit = build_plan(load(tmp_path, defaults="stall_seconds = 30", ps="stall_seconds = 90",
                               worker="autolog = true"))
    assert explicit.task("ps:0").stall_seconds == 90.0 and explicit.task("worker:0").autolog is True


@pytest.mark.parametrize(("where", "text", "culprit"), [
    ("defaults", 'on_stall = "reboot"', "on_stall"),
    ("defaults", 'autolog = "no"', "autolog"),
    ("worker", "stall_seconds = -1", "stall_seconds"),
    ("top", "straggler_ratio = -0.5\n", "straggler_ratio"),
    ("top", "straggler_seconds = 0\n", "straggler_seconds"),
])
def test_bad_values_are_one_line_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                 where: str, text: str, culprit: str) -> None:
    path = tmp_path / "p.toml"
    parts = {"defaults": "", "ps": "", "worker": ""}
    top = text if where == "top" else ""
    if where != "top":
        parts[where] = text
    path.write_text(top + BASE.format(**parts), encoding="utf-8")
    assert main(["check", "--no-remote", str(path)]) == 2
    out, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and culprit in err and "Traceback" not in err and out == ""


def test_checkpoint_dir_is_per_role_with_the_tasks_placeholders_filled(tmp_path: Path) -> None:
    """Issue 54 §1: a directory autolog cannot see, watched by the agent; {outputs} is filled at launch."""
    plan = build_plan(load(tmp_path, defaults='checkpoint_dir = "ckpt/{task}"',
                           worker='checkpoint_dir = "{outputs}/ckpt-{role}-{index}"'))
    assert plan.task("ps:0").checkpoint_dir == "ckpt/ps:0"
    assert plan.task("worker:1").checkpoint_dir == "{outputs}/ckpt-worker-1"
    assert build_plan(load(tmp_path)).task("worker:0").checkpoint_dir == ""


def test_checkpoint_dir_with_an_unknown_placeholder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="checkpoint_dir"):
        load(tmp_path, worker='checkpoint_dir = "ckpt/{port}"')
