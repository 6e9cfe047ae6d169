"""``distlaunch export sbatch PROFILE``: a batch script that runs the job inside its own allocation.

The script asks Slurm for the nodes and time of the profile's [slurm] table and then runs
``distlaunch up PROFILE --no-tui`` inside the allocation, where the hosts are its nodes and tasks
start as ``srun --overlap`` steps. Paths are absolute: the batch node reads them from the
shared filesystem, as it does the profile and the interpreter.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from launcher.errors import UserError
from launcher.model import Profile
from launcher.profile.reader import load_profile


def sbatch_script(profile: Profile) -> str:
    slurm = profile.slurm
    if slurm is None:
        raise UserError(f"{profile.path}: has no [slurm] table; add one (an empty [slurm] is enough) "
                        "so the job takes its hosts from the allocation")
    options = [f"--job-name={profile.name}", f"--nodes={slurm.nodes or 1}",
               "--output=distlaunch-%x-%j.out"]
    if slurm.time:
        options.append(f"--time={slurm.time}")
    if slurm.partition:
        options.append(f"--partition={slurm.partition}")
    if slurm.account:
        options.append(f"--account={slurm.account}")
    if slurm.gpus_per_node:
        options.append(f"--gpus-per-node={slurm.gpus_per_node}")
    options.extend(slurm.sbatch_args)
    up = [sys.executable, "-m", "launcher.cli", "up", str(profile.path.resolve()), "--no-tui"]
    lines = [
        "#!/bin/sh",
        f"# written by `distlaunch export sbatch {profile.path}`; submit with `sbatch THIS_FILE`",
        *(f"#SBATCH {option}" for option in options),
        "",
        "# distlaunch runs on the first node; every task starts as an `srun --overlap` step",
        f"exec {shlex.join(up)}",
        "",
    ]
    return "\n".join(lines)


def run_export_sbatch(profile_path: Path, output: Path | None) -> int:
    text = sbatch_script(load_profile(profile_path))
    if output is None:
        sys.stdout.write(text)
        return 0
    try:
        output.write_text(text, encoding="utf-8")
        output.chmod(0o755)
    except OSError as exc:
        raise UserError(f"cannot write {output}: {exc.strerror or exc}; give -o a writable path") from exc
    print(f"wrote {output}; submit it with `sbatch {output}`", file=sys.stderr)
    return 0
