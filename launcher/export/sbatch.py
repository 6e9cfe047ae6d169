"""``distlaunch export sbatch PROFILE``: a batch script that runs the job inside its own allocation.

The script asks Slurm for the nodes and time of the profile's [slurm] table and then runs
``distlaunch up PROFILE --no-tui`` inside the allocation, where the hosts are its nodes and tasks
start as ``srun --overlap`` steps. Paths are absolute: the batch node reads them from the
shared filesystem, as it does the profile and the interpreter.

Roles in a pyxis container: the script first imports each registry image on every node (one
``srun --container-image=IMAGE true`` per image, unless ``pull = "never"``), so a bad image fails
the job before any task starts, and its comments show the pyxis flags each task's step gets.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from launcher.agent.containeradapters import is_image_file, pyxis_image
from launcher.errors import UserError
from launcher.model import Profile, SlurmComponent
from launcher.plan import build_plan
from launcher.profile.hetjob import component_lines, component_options
from launcher.profile.reader import load_profile
from launcher.transport.slurmqueue import RUN_COMMENT


@dataclass(frozen=True)
class SubmittedRun:
    """What `up` adds when it submits the script itself: the run the batch job continues (its id
    and dir, on the shared filesystem), the --set items and arguments of the command line, and
    where Slurm writes the batch script's own output."""

    run_id: str
    run_dir: Path
    sets: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    output: Path | None = None


def sbatch_script(profile: Profile, run: SubmittedRun | None = None) -> str:
    slurm = profile.slurm
    if slurm is None:
        raise UserError(f"{profile.path}: has no [slurm] table; add one (an empty [slurm] is enough) "
                        "so the job takes its hosts from the allocation")
    output = str(run.output) if run is not None and run.output is not None else "distlaunch-%x-%j.out"
    options = [f"--job-name={profile.name}", f"--output={output}"]
    if slurm.account:
        options.append(f"--account={slurm.account}")
    if run is not None:  # how `up` finds the job again if sbatch's answer is lost (a run id is no secret)
        options.append(f"--comment={RUN_COMMENT}{run.run_id}")
        options.append("--open-mode=append")  # a requeued job's batch output follows the first one's
    if run is not None:  # requeueable whatever the cluster's JobRequeue: a preemption or a node failure
        options.append("--requeue")  # requeues it, and the run goes on (an exported script's rerun is a new run)
    if not slurm.heterogeneous:  # the job's nodes: [slurm]'s, or those of the one role that names its own
        only = slurm.components[0] if slurm.components else SlurmComponent(roles=())
        options += component_options(slurm, only)
    options.extend(slurm.sbatch_args)  # last: the user's word on any option wins
    directives = [f"#SBATCH {option}" for option in options]
    if slurm.heterogeneous:  # one component per role that names its own partition, nodes or GPUs
        for index, (component, words) in enumerate(zip(slurm.components, component_lines(slurm), strict=True)):
            if index:
                directives.append("#SBATCH hetjob")
            directives.append(f"# {words}")
            directives += [f"#SBATCH {option}" for option in component_options(slurm, component)]

    up = [sys.executable, "-m", "launcher.cli", "up", str(profile.path.resolve()), "--no-tui"]
    if run is not None:  # the batch job continues the run `up` made when it submitted: one run, one dir
        up += ["--run-id", run.run_id, "--run-dir", str(run.run_dir), "--continue-submitted"]
        for item in run.sets:
            up += ["--set", item]
        if run.args:
            up += ["--", *run.args]
    written = (f"# written by `distlaunch up {profile.path}`, which submitted it as run {run.run_id}" if run is not None
               else f"# written by `distlaunch export sbatch {profile.path}`; submit with `sbatch THIS_FILE`")
    same = []
    if run is not None:  # the distlaunch that submitted the run runs it, wherever the job starts
        here = shlex.quote(str(Path(__file__).resolve().parents[2]))
        same = [f"export PYTHONPATH={here}${{PYTHONPATH:+:$PYTHONPATH}}"]
    lines = [
        "#!/bin/sh",
        written,
        *directives,
        "",
        *container_lines(profile),
        "# distlaunch runs on the first node; every task starts as an `srun --overlap` step",
        *same,
        f"exec {shlex.join(up)}",
        "",
    ]
    return "\n".join(lines)


def container_lines(profile: Profile) -> list[str]:
    """The pre-import of each pyxis image and, per containerised role, its step's container flags."""
    plan = build_plan(profile)
    lines: list[str] = []
    imports: list[str] = []
    for role in profile.roles.values():
        spec = role.settings.container
        task = next((t for t in plan.tasks if t.role == role.name), None)
        if spec is None or task is None:
            continue
        runtime = spec.adapter
        if not runtime.slurm_step:
            lines.append(f"# {role.name} tasks run in {spec.runtime} image {spec.image}")
            continue
        argv = runtime.run_argv(spec, name=f"dl-RUN-{role.name}-INDEX-N", labels={}, env_names=[],
                                mounts=[task.workdir], workdir=task.workdir, gpus=None, user=None, command=[])
        flags = [a for a in argv if a.startswith(("--container-image", "--container-mounts", "--container-workdir"))]
        lines += [f"# {role.name} tasks: srun --overlap {shlex.join(flags)} ...",
                  "#   (the run dir and {outputs} are mounted too; TF_CONFIG and DISTLAUNCH_* pass by name)"]
        image = pyxis_image(spec.image)
        if spec.pull != "never" and not is_image_file(spec.image) and image not in imports:
            imports.append(image)
    if imports:
        lines.append("# each container image is imported on every node before any task starts (enroot caches "
                     "its layers)")
        for image in imports:
            quoted = shlex.quote(f"--container-image={image}")
            lines.append(f"srun --ntasks-per-node=1 {quoted} true || "
                         f"{{ echo {shlex.quote(f'distlaunch: cannot start {image} on every node')} >&2; exit 1; }}")
    return [*lines, ""] if lines else []


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
