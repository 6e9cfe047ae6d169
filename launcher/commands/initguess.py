"""Which ``tf.distribute`` strategy a training script uses, guessed from its source (for ``distlaunch init``).

The source is parsed with ``ast`` and every dotted name it mentions (``tf.distribute.ParameterServerStrategy``,
``tf.compat.v1.train.replica_device_setter``) is matched against the rules below, first rule first.
A script that does not parse (Python 2, a syntax error) is read as text with the same rules.
The guess carries its reason (line and name) so the written profile can say why.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from launcher.model import Strategy

#: (strategy, what it stands for, the last parts of dotted names that give it away), first match wins
RULES: tuple[tuple[Strategy, str, tuple[str, ...]], ...] = (
    ("parameter_server", "ParameterServerStrategy",
     ("ParameterServerStrategy", "ParameterServerStrategyV2", "ClusterCoordinator")),
    ("multi_worker_mirrored", "MultiWorkerMirroredStrategy",
     ("MultiWorkerMirroredStrategy", "CollectiveAllReduceStrategy")),
    ("parameter_server", "a TF1 between-graph script",
     ("train.Server", "distribute.Server", "replica_device_setter")),
)

#: command-line options a TF1 script reads its role from, and the placeholders that fill them
ROLE_FLAGS = (("job_name", "{role}"), ("task_index", "{index}"))
#: options that name where a script keeps checkpoints or models, in the order they are preferred
OUTPUT_FLAGS = ("--checkpoint-dir", "--checkpoint_dir", "--model-dir", "--model_dir", "--output-dir",
                "--output_dir", "--train-dir", "--train_dir", "--logdir", "--log-dir", "--log_dir")


@dataclass(frozen=True)
class Guess:
    """The strategy, why it was chosen, and what the command line of the script needs."""

    strategy: Strategy
    reason: str
    tf1: bool = False  # a between-graph script: ps and workers, worker 0 is its own chief
    role_flags: tuple[str, ...] = field(default=())  # e.g. ("--job_name={role}", "--task_index={index}")
    output_flag: str | None = None  # e.g. "--checkpoint-dir"


def guess_strategy(source: str) -> Guess:
    """The guess for the script whose text is ``source``."""
    names = _names_with_lines(source)
    strategy: Strategy = "custom"
    reason = "no ParameterServerStrategy, MultiWorkerMirroredStrategy or tf.train.Server found in the script"
    tf1 = False
    for index, (rule_strategy, what, suffixes) in enumerate(RULES):
        hit = next(((line, name) for line, name in names if _ends_with_any(name, suffixes)), None)
        if hit is not None:
            strategy, tf1 = rule_strategy, index == len(RULES) - 1
            reason = f"line {hit[0]} uses {hit[1]}" + ("" if what in hit[1] else f" ({what})")
            break
    return Guess(strategy=strategy, reason=reason, tf1=tf1, role_flags=_role_flags(source),
                 output_flag=next((flag for flag in OUTPUT_FLAGS if _mentions_option(source, flag)), None))


def _ends_with_any(name: str, suffixes: tuple[str, ...]) -> bool:
    return any(name == suffix or name.endswith("." + suffix) for suffix in suffixes)


def _names_with_lines(source: str) -> list[tuple[int, str]]:
    """Every dotted name (and ``from X import Y`` as ``X.Y``) in the source, with its line, in order."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return _names_from_text(source)
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute | ast.Name):
            dotted = _dotted(node)
            if dotted:
                found.append((node.lineno, dotted))
        elif isinstance(node, ast.ImportFrom):
            found.extend((node.lineno, f"{node.module or ''}.{alias.name}") for alias in node.names)
    found.sort()
    return found


def _dotted(node: ast.expr) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


_DOTTED_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\s*\.\s*[A-Za-z_][A-Za-z0-9_]*)*")


def _names_from_text(source: str) -> list[tuple[int, str]]:
    found: list[tuple[int, str]] = []
    for number, line in enumerate(source.splitlines(), start=1):
        code = line.split("#", 1)[0]
        found.extend((number, re.sub(r"\s+", "", match.group(0))) for match in _DOTTED_RE.finditer(code))
    return found


def _mentions_option(source: str, option: str) -> bool:
    """Whether the script defines ``option`` (argparse ``"--x"`` or absl/tf.flags ``DEFINE_*("x"``)."""
    if re.search(rf"""["']{re.escape(option)}["']""", source):
        return True
    bare = option.lstrip("-")
    return "_" in bare and re.search(rf"""DEFINE_\w+\(\s*["']{re.escape(bare)}["']""", source) is not None


def _role_flags(source: str) -> tuple[str, ...]:
    """``--job_name={role} --task_index={index}`` when the script reads both options, else nothing."""
    if all(_mentions_option(source, f"--{name}") for name, _ in ROLE_FLAGS):
        return tuple(f"--{name}={value}" for name, value in ROLE_FLAGS)
    return ()
