"""Command-line parsing only: each verb calls into the module that does the work.

User mistakes (``UserError``) become one line on stderr and exit code 2; anything else is an
internal error: a short message plus the path of the log holding the traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from launcher import __version__
from launcher.errors import UserError
from launcher.paths import log_internal_error
from launcher.profile.overrides import is_secret, overrides_from
from launcher.telemetry.timeline import TIMELINE_KINDS

Handler = Callable[[argparse.Namespace], int]


def _check(args: argparse.Namespace) -> int:
    if args.metrics_sample:
        from launcher.commands.check import run_metrics_sample

        return run_metrics_sample(Path(args.profile), Path(args.metrics_sample))
    from launcher.commands.check import run_check

    return run_check(Path(args.profile), remote=not args.no_remote, overrides=overrides_from(args),
                     as_json=args.json, firewall=args.firewall)


def _tfconfig(args: argparse.Namespace) -> int:
    from launcher.commands.check import run_tfconfig

    return run_tfconfig(Path(args.profile), args.task, overrides=overrides_from(args))


def _up(args: argparse.Namespace) -> int:
    from launcher.commands.up import run_up

    return run_up(args)


def _down(args: argparse.Namespace) -> int:
    from launcher.commands.down import run_down

    return run_down(args)


def _prune(args: argparse.Namespace) -> int:
    from launcher.commands.down import run_prune

    return run_prune(args)


def _status(args: argparse.Namespace) -> int:
    from launcher.commands.status import run_status

    return run_status(args)


def _runs(args: argparse.Namespace) -> int:
    if args.tui and not args.json:
        from launcher.commands.runsscreen import run_runs_screen

        return run_runs_screen()
    from launcher.commands.status import run_runs

    return run_runs(args)


def _logs(args: argparse.Namespace) -> int:
    from launcher.commands.logs import run_logs

    return run_logs(args)


def _stacks(args: argparse.Namespace) -> int:
    from launcher.commands.stacks import run_stacks

    return run_stacks(args)


def _profile(args: argparse.Namespace) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from launcher.commands.profile import run_profile

    return run_profile(args)


def _add_host(args: argparse.Namespace) -> int:
    from launcher.commands.addhost import run_add_host

    return run_add_host(args)


def _resize(args: argparse.Namespace) -> int:
    from launcher.commands.resize import run_resize

    return run_resize(args)


def _drain(args: argparse.Namespace) -> int:
    from launcher.commands.drain import run_drain

    return run_drain(args)


def _restart(args: argparse.Namespace) -> int:
    from launcher.commands.down import run_restart

    return run_restart(args)


def _attach(args: argparse.Namespace) -> int:
    from launcher.commands.attach import run_attach

    return run_attach(args)


def _events(args: argparse.Namespace) -> int:
    from launcher.commands.status import run_events

    return run_events(args)


def _replay(args: argparse.Namespace) -> int:
    from launcher.commands.attach import run_replay

    return run_replay(args)


def _export(args: argparse.Namespace) -> int:
    if args.target == "sbatch":
        from launcher.export.sbatch import run_export_sbatch

        return run_export_sbatch(Path(args.profile), Path(args.output) if args.output else None)
    if args.target == "jobset":
        from launcher.export.jobset import run_export_jobset

        return run_export_jobset(Path(args.profile), image=args.image, namespace=args.namespace, queue=args.queue,
                                 suspend=args.suspend, output=Path(args.output) if args.output else None)
    from launcher.export.tfjob import run_export_tfjob

    return run_export_tfjob(Path(args.profile), image=args.image, namespace=args.namespace,
                            output=Path(args.output) if args.output else None)


def _schema(args: argparse.Namespace) -> int:
    from launcher.profile.schema import run_schema

    return run_schema(Path(args.output) if args.output else None)


def _export_tensorboard(args: argparse.Namespace) -> int:
    from launcher.export.tensorboard import run_export_tensorboard

    return run_export_tensorboard(args.run, Path(args.dir))


def _init(args: argparse.Namespace) -> int:
    from launcher.commands.init import run_init

    return run_init(args.script, hosts=args.hosts, ps=args.ps, workers=args.workers, chief=args.chief,
                    output=args.output, force=args.force, image=args.image, runtime=args.runtime)


def _completion(args: argparse.Namespace) -> int:
    from launcher.commands.completion import run_completion

    return run_completion(args.shell)


def _add_overrides(p: argparse.ArgumentParser, args: bool = True) -> None:
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="sets",
                   help="change one profile key for this run (dotted, e.g. roles.worker.count=8); repeatable")
    if args:  # filled by main() from what follows "--": argparse would mix it up with the positionals
        p.set_defaults(args=[])
        p.epilog = "Arguments after -- are appended to every task's command for this run."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="distlaunch",
        description="Launch distributed TensorFlow jobs from a cluster profile and watch them live.",
    )
    parser.add_argument("--version", action="version", version=f"distlaunch {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)

    p = sub.add_parser("check", help="validate a profile, preflight its hosts, print the plan")
    p.add_argument("profile", help="cluster profile (TOML)")
    p.add_argument("--no-remote", action="store_true", help="validate only; do not contact hosts")
    p.add_argument("--metrics-sample", metavar="LOGFILE",
                   help="instead: run the profile's [metrics] regexes over a saved log and show what each gives")
    p.add_argument("--json", action="store_true",
                   help="print the hosts side by side (versions, GPUs, free space, clocks) as JSON, not the plan")
    p.add_argument("--firewall", action="store_true",
                   help="instead: print iptables rules that let only you and the job's hosts reach its task ports")
    _add_overrides(p)
    p.set_defaults(handler=_check)

    p = sub.add_parser("up", help="launch a job and show it live")
    p.add_argument("profile", help="cluster profile (TOML)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--no-tui", action="store_true", help="plain progress lines instead of the dashboard")
    mode.add_argument("--json", action="store_true", help="print the event stream as JSON lines")
    p.add_argument("--detach", action="store_true", help="start the job and return; tasks keep running")
    p.add_argument("--run-dir", help="where to keep this run's events, logs and state")
    p.add_argument("--run-id", help="use this run id instead of a generated one")
    # the batch script of a submitted run: continue that run only, never start one of its own
    p.add_argument("--continue-submitted", action="store_true", help=argparse.SUPPRESS)
    _add_overrides(p)
    p.set_defaults(handler=_up)

    p = sub.add_parser("down", help="stop everything of a run, on every host")
    p.add_argument("run", nargs="?", help="run id or run directory (default: the most recent run)")
    p.add_argument("--keep-host-files", action="store_true",
                   help="leave the run's files on the hosts (agent logs, event files); outputs are always kept")
    p.set_defaults(handler=_down)

    p = sub.add_parser("prune", help="remove finished runs here and on their hosts (never outputs)")
    p.add_argument("runs", nargs="*", metavar="RUN",
                   help="remove just these runs (run id or run directory), even one kept outside the state dir")
    p.add_argument("--keep", type=int, default=None, metavar="N", help="keep the N newest finished runs")
    p.add_argument("--older-than", type=float, default=None, metavar="DAYS",
                   help="only runs whose last activity is older than DAYS")
    p.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    p.set_defaults(handler=_prune)

    p = sub.add_parser("status", help="what runs, where, in what state")
    p.add_argument("run", nargs="?", help="run id or run directory (default: the most recent run)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=_status)

    p = sub.add_parser("runs", help="every run on this machine, newest first")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--tui", action="store_true",
                   help="a screen of the runs (what `distlaunch` alone opens in a terminal): Enter attaches "
                        "to a run that is going, replays one that ended")
    p.set_defaults(handler=_runs)

    p = sub.add_parser("logs", help="one task's output, or every task's merged in time order (--all)")
    p.add_argument("run", help="run id or run directory")
    p.add_argument("task", nargs="?", default=None, help="task id, e.g. worker:1 (or --all)")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing new output")
    p.add_argument("--all", action="store_true", help="every task's lines in time order, each with its time and task")
    p.add_argument("--grep", metavar="REGEX", default=None, help="with --all: only lines this regex finds")
    p.add_argument("--task", dest="task_filter", action="append", metavar="TASK",
                   help="with --all: only these tasks or roles (worker:1, ps; repeatable or comma-separated)")
    p.add_argument("--stderr", action="store_true", help="with --all: only lines the tasks wrote to stderr")
    p.add_argument("--level", choices=("all", "stderr", "warn"), default=None,
                   help="with --all: stderr (as --stderr), or warn: warnings, errors and tracebacks on either "
                        "stream (the dashboard's level=warn)")
    p.set_defaults(handler=_logs)

    p = sub.add_parser("restart", help="restart one task by hand")
    p.add_argument("run", help="run id or run directory")
    p.add_argument("task", help="task id, e.g. worker:1")
    p.set_defaults(handler=_restart)

    p = sub.add_parser("drain", help="move the job off a host before it goes (its tasks stop, then move)")
    p.add_argument("run", help="run id or run directory")
    p.add_argument("host", help="the host's name in the profile")
    p.add_argument("--reason", help="why (shown in status and the events)")
    p.set_defaults(handler=_drain)

    p = sub.add_parser("resize", help="grow or shrink a role of a running job (within min_count..max_count)")
    p.add_argument("run", help="run id or run directory")
    p.add_argument("size", help="ROLE=N, e.g. worker=4")
    p.set_defaults(handler=_resize)

    p = sub.add_parser("add-host", help="add a host to a running job as a spare (after its preflight)")
    p.add_argument("run", help="run id or run directory")
    p.add_argument("host", help="a host of the profile's [hosts] the run does not use, or [user@]address[:port]")
    p.set_defaults(handler=_add_host)

    p = sub.add_parser("attach", help="follow a running job again (its dashboard); take it over if its supervisor died")
    p.add_argument("run", nargs="?", help="run id or run directory (default: the most recent run)")
    p.add_argument("--no-tui", action="store_true", help="plain progress lines instead of the dashboard")
    p.add_argument("--json", action="store_true", help="the events as JSON lines, history first (no dashboard)")
    p.set_defaults(handler=_attach)

    p = sub.add_parser("events", help="the job's timeline: state changes, exits, restarts, conditions, actions")
    p.add_argument("run", nargs="?", help="run id or run directory (default: the most recent run)")
    p.add_argument("--json", action="store_true", help="one JSON object per entry")
    p.add_argument("--kind", choices=TIMELINE_KINDS, help="only entries of this kind")
    p.add_argument("--task", help="only entries about this task, e.g. worker:1")
    p.set_defaults(handler=_events)

    p = sub.add_parser("stacks", help="every live task's Python stacks and process state")
    p.add_argument("targets", nargs="*", metavar="[RUN] [TASK...]",
                   help="run id or run directory (default: the most recent run), then task ids (default: all)")
    p.add_argument("--native", action="store_true", help="with py-spy: native frames too (C/C++, gRPC, collectives)")
    p.add_argument("--json", action="store_true", help="a JSON list of every task's capture")
    p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS", help="how long hosts may take (10)")
    p.set_defaults(handler=_stacks)

    p = sub.add_parser("profile", help="a TensorFlow profiler capture of the tasks at once, with its analysis")
    p.add_argument("targets", nargs="*", metavar="[RUN] [TASK...]",
                   help="run id or run directory (default: the most recent run), then task ids (default: "
                        "every running task)")
    p.add_argument("--seconds", default="2", metavar="S", help="how long to capture (default 2)")
    p.add_argument("--json", action="store_true", help="the analysis as one JSON object")
    p.set_defaults(handler=_profile)

    p = sub.add_parser("replay", help="re-play a finished run's events in the dashboard")
    p.add_argument("run", nargs="?", help="run id or run directory (default: the most recent run)")
    p.add_argument("--speed", type=float, default=1.0, help="playback speed factor (default 1.0)")
    p.set_defaults(handler=_replay)

    p = sub.add_parser("tfconfig", help="print the TF_CONFIG a task gets")
    p.add_argument("profile", help="cluster profile (TOML)")
    p.add_argument("task", help="task id, e.g. worker:1")
    _add_overrides(p, args=False)
    p.set_defaults(handler=_tfconfig)

    p = sub.add_parser("init", help="write a commented profile for your own training script")
    p.add_argument("script", nargs="?", help="your training script (.py); its strategy is guessed from it")
    p.add_argument("--hosts", metavar="H1,H2|RANGE",
                   help="SSH hosts to run on, e.g. gpu1,gpu2 or node[01-04] (default: this machine)")
    p.add_argument("--ps", type=int, metavar="N", help="parameter server tasks (parameter_server: default 1)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="worker tasks (default: one per --hosts host, else 2; 1 for a script of no known strategy)")
    p.add_argument("--chief", action=argparse.BooleanOptionalAction, default=None,
                   help="a chief task (default: with ParameterServerStrategy only)")
    p.add_argument("-o", "--output", default=None, metavar="FILE",
                   help="where to write the profile (default: SCRIPT's name with .toml, here)")
    p.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    p.add_argument("--image", default=None, metavar="IMAGE",
                   help="run every task in this container image (a [defaults.container] table)")
    p.add_argument("--runtime", default=None, metavar="RUNTIME",
                   help="the container runtime for --image: docker (default), podman, apptainer, enroot")
    p.set_defaults(handler=_init)

    p = sub.add_parser("schema", help="print the profile's JSON Schema (for editors: taplo, VS Code)")
    p.add_argument("-o", "--output", default=None, help="write to FILE instead of stdout")
    p.set_defaults(handler=_schema)

    p = sub.add_parser("completion", help="print the shell completion hook (bash, zsh, fish)")
    p.add_argument("shell", choices=("bash", "zsh", "fish"), help="the shell to complete in")
    p.set_defaults(handler=_completion)

    p = sub.add_parser("export", help="convert a profile for another system")
    exp = p.add_subparsers(dest="target", metavar="TARGET", required=True)
    for target, what in (("tfjob", "a Kubeflow TFJob manifest (YAML)"),
                         ("jobset", "a Kubernetes JobSet manifest (YAML), TF_CONFIG from stable pod names")):
        t = exp.add_parser(target, help=what)
        t.add_argument("profile", help="cluster profile (TOML)")
        t.add_argument("--image", default=None,
                       help="container image of every pod (default: each role's container image in the profile, "
                            "else tensorflow/tensorflow:latest)")
        t.add_argument("--namespace", default=None, help="Kubernetes namespace")
        if target == "jobset":
            t.add_argument("--queue", default=None,
                           help="Kueue LocalQueue to submit to (adds its label; starts suspended)")
            t.add_argument("--suspend", action="store_true", help="write it suspended, to be started later")
        t.add_argument("-o", "--output", default=None, help="write to FILE instead of stdout")
        t.set_defaults(handler=_export)
    t = exp.add_parser("sbatch", help="a Slurm batch script that runs the job in its own allocation")
    t.add_argument("profile", help="cluster profile (TOML) with a [slurm] table")
    t.add_argument("-o", "--output", default=None, help="write to FILE instead of stdout")
    t.set_defaults(handler=_export)
    t = exp.add_parser("tensorboard", help="a run's metrics as TensorBoard event files, one run per task")
    t.add_argument("run", help="run id or run directory")
    t.add_argument("dir", help="TensorBoard log directory to write into (DIR/<run id>/<task>/)")
    t.set_defaults(handler=_export_tensorboard)
    return parser


def loggable_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with the value of every ``--set`` of a secret-looking env name masked: the log
    keeps how distlaunch was called, never a token."""
    out: list[str] = []
    after_set = False
    for arg in argv:
        item = arg.split("=", 1)[1] if arg.startswith("--set=") else arg if after_set else None
        if item is not None:
            key, sep, _value = item.partition("=")
            if sep and is_secret(key.rsplit(".", 1)[-1]):
                masked = f"{key}=****"
                arg = f"--set={masked}" if arg.startswith("--set=") else masked
        out.append(arg)
        after_set = arg == "--set"
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    if "_ARGCOMPLETE" in os.environ:  # the shell asks for completions (launcher/commands/completion.py)
        from launcher.commands.completion import complete

        complete(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    if not argv and not extra:
        if sys.stdin.isatty() and sys.stdout.isatty() and not os.environ.get("DISTLAUNCH_NO_RUNS_SCREEN"):
            argv = ["runs", "--tui"]  # `distlaunch` alone in a terminal: every run in one screen
        else:  # elsewhere the verbs, not only "VERB is required"
            parser.print_help(sys.stderr)
            return 2
    args = parser.parse_args(argv)
    if extra:
        if not hasattr(args, "args"):
            parser.error(f"{args.verb} takes no arguments after --")
        args.args = extra
    handler: Handler = args.handler
    try:
        return handler(args)
    except UserError as exc:
        print(f"distlaunch: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("distlaunch: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except Exception as exc:
        log = log_internal_error(f"--- distlaunch {' '.join(loggable_argv(argv))}")
        print(f"distlaunch: internal error: {type(exc).__name__}: {exc} (details in {log})", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
