"""[slurm]'s keys of issue 57 §2: time_limit_action and its margin, and the sbatch options
distlaunch sets itself (the job's comment finds a run's job again, append keeps every requeue's
batch output), refused in sbatch_args as one line naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.errors import ProfileError
from launcher.export.sbatch import SubmittedRun, sbatch_script
from launcher.profile.reader import load_profile


def _profile(tmp_path: Path, slurm: str) -> Path:
    path = tmp_path / "job.toml"
    path.write_text(f'name = "s"\nstrategy = "custom"\n[defaults]\ncommand = "run"\n[roles.chief]\ncount = 1\n'
                    f"[slurm]\n{slurm}\n")
    return path


def test_time_limit_action_and_its_margin(tmp_path: Path) -> None:
    profile = load_profile(_profile(tmp_path, 'time = "01:00:00"\ntime_limit_action = "requeue"\n'
                                              "time_limit_margin_seconds = 120"))
    assert profile.slurm is not None
    assert (profile.slurm.time_limit_action, profile.slurm.time_limit_margin_seconds) == ("requeue", 120.0)
    script = sbatch_script(profile, SubmittedRun("r1", tmp_path / "run", (), (), output=tmp_path / "run" / "o"))
    assert "#SBATCH --requeue" in script and "#SBATCH --open-mode=append" in script
    default = load_profile(_profile(tmp_path, ""))
    assert default.slurm is not None and default.slurm.time_limit_action is None
    assert default.slurm.time_limit_margin_seconds == 300.0
    assert "--requeue" not in sbatch_script(default)
    with pytest.raises(ProfileError, match="time_limit_action"):
        load_profile(_profile(tmp_path, 'time_limit_action = "kill"'))


@pytest.mark.parametrize("arg", ["--comment=mine", "--open-mode=truncate"])
def test_options_distlaunch_sets_itself_are_refused_in_sbatch_args(tmp_path: Path, arg: str) -> None:
    name, value = arg.split("=")
    with pytest.raises(ProfileError, match=rf"sbatch_args: {name}: distlaunch sets the job's {name} itself") as err:
        load_profile(_profile(tmp_path, f'sbatch_args = ["{arg}"]'))
    assert value not in str(err.value)  # the value is never shown: it may be a secret from ${env:...}
