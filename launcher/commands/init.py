"""``distlaunch init [SCRIPT]``: a commented profile for the user's own training script.

The strategy is guessed from the script (``initguess``) and said, with why, in a comment; the roles
are sized by ``--ps``/``--workers``/``--chief`` or the strategy's usual shape; the hosts are this
machine (``transport = "local"``) or the SSH hosts of ``--hosts`` (names and ranges, as in
``[hosts.X] address``), with the code synced to them. The file is written only where none is
(``--force`` overwrites), and what it holds passes ``distlaunch check`` as it stands.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

from launcher.agent.containeradapters import ADAPTERS, DEFAULT_RUNTIME
from launcher.agent.containerrt import image_problem
from launcher.commands.initguess import Guess, guess_strategy
from launcher.errors import UserError
from launcher.model import RESTART_POLICIES
from launcher.profile import hostlist
from launcher.remote import kerasfit
from launcher.remote.kerasfit import keras_fit_line

#: what each strategy restarts when a task fails (launcher/supervise/policy.py), for the profile's comments
RECOVERY = {
    "parameter_server": "a failed worker restarts alone (the coordinator re-runs its steps); a failed ps "
                        "restarts together with the chief, which must restore from its checkpoint; a failed "
                        "chief restarts alone",
    "multi_worker_mirrored": "any failed worker restarts the whole worker group (collectives cannot go on "
                             "with a missing peer); keep checkpoints (BackupAndRestore) to resume",
    "custom": "a failed task restarts alone",
    "tf1": "a failed task restarts alone; workers that lose a ps fail and restart too, and worker 0 "
           "(the chief of a between-graph job) restores from its checkpoint",
}
SYNC_EXCLUDES = ("data/", "*.ckpt", "__pycache__/", ".venv/")
_NAME_RE = re.compile(r"[^A-Za-z0-9_.-]+")


#: the runtimes ``init --runtime`` offers: not pyxis (a Slurm step), as init writes no Slurm profile
INIT_RUNTIMES = tuple(name for name, adapter in ADAPTERS.items() if not adapter.slurm_step)


@dataclass(frozen=True)
class Image:
    """``--image`` and ``--runtime``: the container every task runs in."""

    image: str
    runtime: str = DEFAULT_RUNTIME


@dataclass(frozen=True)
class Shape:
    """How many tasks of each role."""

    chief: int
    workers: int
    ps: int


def run_init(script: str | None, *, hosts: str | None, ps: int | None, workers: int | None,
             chief: bool | None, output: str | None, force: bool, image: str | None = None,
             runtime: str | None = None) -> int:
    """The verb: write the profile, say where and what to run next."""
    container = container_choice(image, runtime)
    if script is None:
        raise UserError("name your training script: distlaunch init train.py "
                        "(`distlaunch init --help` lists its options)")
    path = Path(script)
    try:
        source = path.read_bytes().decode("utf-8", errors="replace")
    except FileNotFoundError:
        raise UserError(f"{script}: no such file; give the path of your training script") from None
    except OSError as exc:
        raise UserError(f"{script}: cannot read it: {exc.strerror or exc}") from None
    target = Path(output) if output else Path(f"{path.stem}.toml")
    if target.exists() and not force:
        raise UserError(f"{target} exists; pass --force to overwrite it, or -o another file")
    guess = guess_strategy(source)
    host_tables = parse_hosts(hosts) if hosts is not None else []
    if workers is None and hosts:  # one worker per host given
        workers = len(hostlist.expand(hosts))
    shape = role_shape(guess, ps=ps, workers=workers, chief=chief)
    fit = keras_fit_line(source) if guess.strategy != "custom" else None
    text = profile_text(path, target, guess, shape, host_tables, container,
                        keras_fit=fit.line if fit is not None and fit.tf_keras_able else None)
    try:
        target.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{target}: cannot write the profile: {exc.strerror or exc}; give -o a writable "
                        "path") from None
    where = f"SSH hosts {hosts}" if hosts else "this machine"
    if container is not None:
        where += f", in {container.runtime} image {container.image}"
    print(f"wrote {target}: {guess.strategy} ({guess.reason}); {describe(shape)} on {where}")
    print(f"next: distlaunch check {shlex.quote(str(target))}   then: distlaunch up {shlex.quote(str(target))}")
    return 0


def container_choice(image: str | None, runtime: str | None) -> Image | None:
    """``--image`` / ``--runtime`` checked as the profile reader will check them."""
    if image is None:
        if runtime is not None:
            raise UserError(f"--runtime {runtime} needs --image: name the image the tasks run in")
        return None
    runtime = runtime or DEFAULT_RUNTIME
    if runtime not in INIT_RUNTIMES:
        raise UserError(f"--runtime {runtime}: use one of {', '.join(INIT_RUNTIMES)} (pyxis is for Slurm profiles)")
    problem = image_problem(image, runtime)
    if problem is not None:
        raise UserError(f"--image {problem}")
    return Image(image=image, runtime=runtime)


def role_shape(guess: Guess, *, ps: int | None, workers: int | None, chief: bool | None) -> Shape:
    """The tasks per role: what was asked, else the strategy's usual shape; impossible ones refused."""
    for flag, value in (("--ps", ps), ("--workers", workers)):
        if value is not None and value < 0:
            raise UserError(f"{flag} {value}: give a count of 0 or more")
    if guess.strategy == "multi_worker_mirrored" and ps:
        raise UserError("--ps: MultiWorkerMirroredStrategy has no parameter servers; leave --ps out "
                        "(or use ParameterServerStrategy in the script)")
    if guess.strategy == "parameter_server":
        default_chief = not guess.tf1  # TF1 between-graph: worker 0 is the chief
        shape = Shape(chief=int(default_chief if chief is None else chief),
                      workers=2 if workers is None else workers, ps=1 if ps is None else ps)
        if shape.ps == 0:
            raise UserError("--ps 0: a parameter_server job needs at least one ps task; give --ps 1 or more")
        if shape.workers == 0:
            raise UserError("--workers 0: a parameter_server job needs at least one worker; give --workers 1 "
                            "or more")
        if not guess.tf1 and not shape.chief:
            raise UserError("--no-chief: ParameterServerStrategy needs a chief (its coordinator); leave "
                            "--no-chief out")
        return shape
    default_workers = 2 if guess.strategy == "multi_worker_mirrored" else 1
    shape = Shape(chief=int(bool(chief)), workers=default_workers if workers is None else workers, ps=ps or 0)
    if not shape.chief and not shape.workers:
        raise UserError("--workers 0 without --chief leaves no task to run; give --workers 1 or --chief")
    return shape


def describe(shape: Shape) -> str:
    parts = [f"{count} {role}{'s' if count != 1 and role == 'worker' else ''}"
             for role, count in (("chief", shape.chief), ("worker", shape.workers), ("ps", shape.ps)) if count]
    return ", ".join(parts)


def parse_hosts(expression: str) -> list[tuple[str, str]]:
    """``--hosts`` as (table name, address) pairs: one table per comma item, a range item one table
    (``node[01-04]`` -> ``[hosts.node]`` making node-01 .. node-04)."""
    if not expression.strip():
        raise UserError("--hosts is empty; give host names like gpu1,gpu2 or node[01-04], or leave it out "
                        "to run on this machine")
    if "@" in expression:
        raise UserError(f"--hosts {expression}: give host names only; set the login user in the profile's "
                        "[ssh] user (or in ~/.ssh/config)")
    try:
        hostlist.expand(expression)
    except hostlist.HostlistError as exc:
        raise UserError(f"--hosts: {exc}") from None
    tables: list[tuple[str, str]] = []
    depth, start = 0, 0
    for i, char in enumerate(expression + ","):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and not depth:
            item = expression[start:i]
            start = i + 1
            base = _NAME_RE.sub("-", item.split("[", 1)[0]).strip("-.") or "host"
            name, n = base, 2
            while any(name == taken for taken, _ in tables):
                name, n = f"{base}{n}", n + 1
            tables.append((name, item))
    return tables


def _q(value: str) -> str:
    """A TOML basic string."""
    return json.dumps(value, ensure_ascii=False)


def _list(values: list[str]) -> str:
    return "[" + ", ".join(_q(v) for v in values) + "]"


def job_name(script: Path) -> str:
    return _NAME_RE.sub("-", script.stem).strip("-.") or "job"


def command_for(script: Path, guess: Guess, profile_dir: Path, ssh: bool) -> tuple[str, str, str]:
    """(command, workdir, source for [sync]): the script as run from the user's current folder."""
    cwd = Path.cwd().resolve()
    script = script.resolve()
    project = cwd if script.is_relative_to(cwd) else script.parent
    run_path = script.relative_to(project).as_posix()
    rel_project = Path(os.path.relpath(project, profile_dir.resolve())).as_posix()
    words = ["{python}", shlex.quote(run_path), *guess.role_flags]
    if guess.output_flag:
        words += [guess.output_flag, "{outputs}/ckpt"]
    workdir = f"~/distlaunch-code/{job_name(script)}" if ssh else rel_project
    return " ".join(words), workdir, rel_project


def profile_text(script: Path, target: Path, guess: Guess, shape: Shape, hosts: list[tuple[str, str]],
                 container: Image | None = None, keras_fit: int | None = None) -> str:
    """The whole profile, comments included. ``keras_fit``: the line where the script calls Keras
    ``fit``, which needs tf_keras under this strategy (launcher/remote/kerasfit.py)."""
    ssh = bool(hosts)
    command, workdir, source = command_for(script, guess, target.parent, ssh)
    quoted_target = shlex.quote(str(target))
    lines = [
        f"# A distlaunch profile for {script.name}, written by `distlaunch init`. Change anything:",
        f"#   distlaunch check {quoted_target}    # validate, preflight the hosts, print the plan",
        f"#   distlaunch up    {quoted_target}    # launch and watch it live",
        "# Editors check it after `distlaunch schema -o distlaunch-profile.schema.json` and a first line",
        "# `#:schema ./distlaunch-profile.schema.json`. Every key: the docs site's \"Key reference\" page",
        "# (\"The profile, by example\" shows them at work); `distlaunch init --help` for init's options.",
        "",
        f"name = {_q(job_name(script))}",
        f"# Guessed from {script.name}: {guess.reason}.",
        *textwrap.wrap("On failure: " + RECOVERY["tf1" if guess.tf1 else guess.strategy] + ".", 98, initial_indent="# ",
                       subsequent_indent="# "),
        f"strategy = {_q(guess.strategy)}   # parameter_server | multi_worker_mirrored | custom",
        'success_policy = "chief"        # the job succeeds when chief:0 exits 0 (no chief: worker:0)',
        "backoff_limit = 10              # restarts the whole job may spend",
        "",
        "[defaults]",
        "# Placeholders: {python} {role} {index} {task} {host} {port} {run_dir} {outputs}. Every task gets",
        "# its TF_CONFIG in the environment. {outputs} (~/distlaunch/outputs/<name> on each host) outlives",
        "# runs: keep checkpoints there and a restarted or repeated job resumes.",
    ]
    if guess.role_flags:
        lines.append("# The script reads its role from --job_name/--task_index, so the command passes them.")
    if not guess.output_flag:
        lines.append("# Tell the script where to checkpoint, e.g. append: --checkpoint-dir {outputs}/ckpt")
    lines.append(f"command = {_q(command)}")
    where_python = "in the image" if container else "on the hosts"
    if ssh:
        lines += [
            f"workdir = {_q(workdir)}   # on each host; [sync] fills it",
            f'python = "python3"              # the interpreter {where_python}; it must import tensorflow',
        ]
    else:
        lines.append(f"workdir = {_q(workdir)}                   # relative to this file: where you ran "
                     "distlaunch init")
        lines.append('python = "python3"              # the interpreter in the image; it must import tensorflow'
                     if container else
                     "# python: left out, tasks use the interpreter distlaunch runs under; set it to use another.")
    if keras_fit is not None:
        lines += [f"# {script.name}:{keras_fit} calls Keras fit, which Keras 3 (tf.keras since TensorFlow 2.16) cannot",
                  "# run under this strategy; TF_USE_LEGACY_KERAS = \"1\" runs it with tf_keras (Keras 2), which",
                  "# every host then needs (pip install tf_keras).",
                  f'env = {{ TF_CPP_MIN_LOG_LEVEL = "2", {kerasfit.LEGACY_KERAS_ENV} = "1" }}']
    else:
        lines.append('env = { TF_CPP_MIN_LOG_LEVEL = "2" }')
    lines += [
        f'restart = "on-failure"          # {" | ".join(RESTART_POLICIES)}',
        "max_restarts = 3                # per task",
        "",
    ]
    if container is not None:
        lines += _container_text(container)
    lines += _hosts_text(hosts, source)
    host_names = [name for name, _ in hosts] or ["local"]
    for role, count, note in (("chief", shape.chief, "the coordinator; it decides when the job has succeeded"),
                              ("ps", shape.ps, "parameter servers: they hold the variables"),
                              ("worker", shape.workers, "they compute the steps")):
        if count:
            lines += [f"{f'[roles.{role}]':<32}# {note}", f"count = {count}",
                      f"hosts = {_list(host_names)}" + ("   # spread over these in order" if ssh else ""), ""]
    lines.append("# Ports are picked free at launch; set port = N in a role to fix them (task i gets N + i).")
    if guess.strategy == "custom":
        lines += ["", "# Step and loss come from TensorFlow and Keras by themselves (autolog). A script that only",
                  "# prints them is read with regexes on its output (try them on a saved log with:",
                  f"# distlaunch check {quoted_target} --metrics-sample LOG):",
                  "# [metrics]", "# step = 'step[ :=]+(\\d+)'", "# loss = 'loss[ :=]+(\\S+)'"]
    return "\n".join(lines) + "\n"


def _container_text(container: Image) -> list[str]:
    return [
        "[defaults.container]            # every task runs in this image, on the host's network; the workdir,",
        "                                # {outputs} and the run dir are mounted at the same paths",
        f"image = {_q(container.image)}",
        f"runtime = {_q(container.runtime):<22}# docker | podman | apptainer | enroot (Slurm: pyxis)",
        'pull = "missing"                # never | missing | always: when each host fetches the image',
        '# mounts = ["/data:/data:ro"]   # more host folders inside, SRC:DST[:ro]',
        '# options = ["--shm-size=8g"]   # extra flags for the runtime, one argument per item',
        "",
    ]


def _hosts_text(hosts: list[tuple[str, str]], source: str) -> list[str]:
    if not hosts:
        return ["# One host: this machine, without SSH.", "[hosts.local]", 'address = "localhost"',
                'transport = "local"', ""]
    lines = [
        "[sync]                          # your code to each host's workdir before any task starts",
        f"source = {_q(source)}                    # on this machine, relative to this file",
        f"exclude = {_list(list(SYNC_EXCLUDES))}",
        "",
        "[ssh]",
        "# user = \"alice\"                # default: you; ~/.ssh/config is read as OpenSSH does",
        'known_hosts = "~/.ssh/known_hosts"',
        'host_key_policy = "reject"      # an unknown host key is refused: add it with ssh-keyscan first',
        "",
    ]
    for name, address in hosts:
        key = name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else _q(name)
        lines += [f"[hosts.{key}]", f"address = {_q(address)}"
                  + ("   # a range: one host per name" if hostlist.has_ranges(address) else ""), ""]
    return lines
