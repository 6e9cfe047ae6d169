"""Every profile in cluster_profiles/ is valid and plans what its comments promise."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from launcher.cli import main
from launcher.plan import build_plan
from launcher.profile.reader import load_profile

PROFILES = Path(__file__).resolve().parents[3] / "cluster_profiles"
REQUIRED = ("local", "ssh-localhost", "two-hosts", "gpu", "mwms", "legacy-regex")


def test_the_promised_profiles_ship() -> None:
    shipped = {p.stem for p in PROFILES.glob("*.toml")}
    assert set(REQUIRED) <= shipped


@pytest.mark.parametrize("path", sorted(PROFILES.glob("*.toml")), ids=lambda p: p.name)
def test_shipped_profile_passes_check(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--no-remote", str(path)]) == 0
    out, err = capsys.readouterr()
    assert "TASK" in out
    assert err == ""  # shipped profiles use private addresses only


def test_local_profile_picks_its_ports_at_launch(capsys: pytest.CaptureFixture[str]) -> None:
    """Two `make demo` on one machine must not collide on fixed ports: the demo's ports are picked
    free at launch, and `tfconfig` says so."""
    assert all(t.port is None for t in build_plan(load_profile(PROFILES / "local.toml")).tasks)
    assert main(["tfconfig", str(PROFILES / "local.toml"), "worker:1"]) == 0
    picked = "localhost:<picked at launch>"
    assert json.loads(capsys.readouterr().out) == {
        "cluster": {
            "chief": [picked],
            "worker": [picked, picked],
            "ps": [picked],
        },
        "task": {"type": "worker", "index": 1},
    }


def test_local_profile_runs_from_the_repo_root() -> None:
    plan = build_plan(load_profile(PROFILES / "local.toml"))
    assert plan.profile.name == "local-ps"
    assert {t.workdir for t in plan.tasks} == {str(PROFILES.parent)}
    assert all(t.restart == "on-failure" for t in plan.tasks)
    assert plan.profile.orphan_grace_seconds == 30


def test_gpu_profile_gives_each_worker_its_own_gpu() -> None:
    plan = build_plan(load_profile(PROFILES / "gpu.toml"))
    per_host: dict[str, list[str]] = {}
    for task in plan.tasks:
        if task.role == "worker":
            per_host.setdefault(task.host, []).append(task.env["CUDA_VISIBLE_DEVICES"])
        else:
            assert task.env["CUDA_VISIBLE_DEVICES"] == ""
    assert per_host == {"gpu1": ["0", "1"], "gpu2": ["0", "1"]}


def test_legacy_regex_profile_metrics_match_its_output() -> None:
    metrics = load_profile(PROFILES / "legacy-regex.toml").metrics
    assert metrics.step is not None and metrics.loss is not None
    step = re.search(metrics.step, "global step: 42, loss = 0.125")
    loss = re.search(metrics.loss, "global step: 42, loss = 0.125")
    assert step is not None and step.group(1) == "42"
    assert loss is not None and float(loss.group(1)) == 0.125


def test_range_profile_makes_sixteen_hosts() -> None:
    profile = load_profile(PROFILES / "host-ranges.toml")
    assert list(profile.hosts) == [f"gpu-{i}" for i in range(1, 17)]
    assert profile.hosts["gpu-16"].address == "10.0.1.16"
    assert profile.roles["worker"].hosts == tuple(profile.hosts)


def test_slurm_profile_outside_an_allocation(monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """By design it checks offline (a placeholder host and a line saying why) and exports."""
    for var in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(var, raising=False)
    assert main(["check", "--no-remote", str(PROFILES / "slurm.toml")]) == 0
    assert "not inside a Slurm allocation" in capsys.readouterr().out
    assert main(["export", "sbatch", str(PROFILES / "slurm.toml")]) == 0
    script = capsys.readouterr().out
    assert "#SBATCH --nodes=2" in script and "#SBATCH --time=01:00:00" in script


def test_slurm_profile_inside_an_allocation_spreads_roles_over_its_nodes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[07-08]")
    monkeypatch.setenv("SLURM_GPUS_ON_NODE", "2")
    plan = build_plan(load_profile(PROFILES / "slurm.toml"))
    assert {t.task_id: t.host for t in plan.tasks} == {
        "ps:0": "gpu07", "worker:0": "gpu07", "worker:1": "gpu08", "chief:0": "gpu07"}
    assert plan.profile.hosts["gpu08"].gpus == (0, 1)
    assert plan.profile.hosts["gpu08"].slurm_job_id == "42"


#: a command argument or path that keeps what must outlive the run (checkpoints, models, outputs)
_KEPT_IN_RUN_DIR = re.compile(
    r"(?i)(checkpoint|ckpt|model|output|save|export|log_?dir)[\w-]*[ =:\"']*\{run_dir\}"
    r"|\{run_dir\}/[\w./-]*(checkpoint|ckpt|model|output|save|export)")
_SHIPPED_TEXT = sorted([*PROFILES.glob("*.toml"), *(PROFILES.parent / "examples").iterdir(),
                        PROFILES.parent / "README.md", *(PROFILES.parent / "docs").glob("*.md")])


@pytest.mark.parametrize("path", _SHIPPED_TEXT, ids=lambda p: str(p.relative_to(PROFILES.parent)))
def test_nothing_shipped_keeps_checkpoints_models_or_outputs_in_the_run_dir(path: Path) -> None:
    """``down`` and ``prune`` delete run dirs: what must outlive a run goes under ``{outputs}``."""
    found = [f"{path.name}:{number}: {line.strip()}"
             for number, line in enumerate(path.read_text().splitlines(), 1) if _KEPT_IN_RUN_DIR.search(line)]
    assert not found, "use {outputs} instead of {run_dir}:\n" + "\n".join(found)
