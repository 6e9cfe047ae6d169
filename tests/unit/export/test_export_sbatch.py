"""`distlaunch export sbatch` with containers: pyxis images imported on every node first, flags shown per role."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from launcher.export.sbatch import sbatch_script
from launcher.profile.reader import load_profile

PROFILE = """
name = "j"
[defaults]
command = "{{python}} train.py"
workdir = "/shared/code"
{container}
[slurm]
nodes = 2
[roles.ps]
{ps}
[roles.worker]
count = 2
"""
IMAGE = "nvcr.io/nvidia/tensorflow:24.01-tf2-py3"


@pytest.fixture(autouse=True)
def _outside_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("SLURM_JOB_ID", "SLURM_JOBID", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(name, raising=False)


def script(tmp_path: Path, container: str = "", ps: str = "") -> str:
    path = tmp_path / "p.toml"
    path.write_text(PROFILE.format(container=container, ps=ps), encoding="utf-8")
    return sbatch_script(load_profile(path))


def test_without_a_container_the_script_only_runs_distlaunch(tmp_path: Path) -> None:
    text = script(tmp_path)
    assert "--container" not in text and "srun --ntasks" not in text
    assert [line for line in text.splitlines() if line and not line.startswith("#")][-1].startswith("exec ")


def test_a_pyxis_image_is_imported_on_every_node_before_distlaunch_starts(tmp_path: Path) -> None:
    text = script(tmp_path, f'container = {{ image = "{IMAGE}", mounts = ["/lustre/data:/data:ro"] }}')
    commands = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert len(commands) == 2 and commands[1].startswith("exec ")
    words = shlex.split(commands[0].split(" || ")[0])
    assert words == ["srun", "--ntasks-per-node=1", "--container-image=nvcr.io#nvidia/tensorflow:24.01-tf2-py3",
                     "true"]
    assert "exit 1" in commands[0]
    shown = next(line for line in text.splitlines() if line.startswith("# worker tasks: srun --overlap"))
    assert "--container-mounts=/shared/code:/shared/code,/lustre/data:/data:ro" in shown
    assert "--container-workdir=/shared/code" in shown
    assert text.count("--container-image=") == 3  # ps and worker share the image: one import


def test_pull_never_and_other_runtimes_import_nothing(tmp_path: Path) -> None:
    text = script(tmp_path, f'container = {{ image = "{IMAGE}", pull = "never" }}',
                  ps='container = { runtime = "apptainer", image = "/images/tf.sif" }')
    assert not [line for line in text.splitlines() if line.startswith("srun")]
    assert "# ps tasks run in apptainer image /images/tf.sif" in text
    assert "# worker tasks: srun --overlap" in text
