"""Keras 3 cannot ``fit`` under a multi-worker strategy: said before anything starts.

TensorFlow 2.16 and later give ``tf.keras`` as Keras 3, whose ``Model.fit`` fails at its first step
under MultiWorkerMirroredStrategy with two workers or more (``ValueError: Attempt to convert a value
(PerReplica:...)``, keras-team/keras#20585) and does not run under ParameterServerStrategy at all.
tf_keras (Keras 2) runs both when ``TF_USE_LEGACY_KERAS=1`` is in the task's environment.

``judge`` warns of a plan that would hit it: such a strategy, a task that would fit with Keras 3 (its
script calls ``.fit(`` and imports Keras or ``tf.keras``, not ``tf_keras``; read where the launcher
can read it), no ``TF_USE_LEGACY_KERAS`` in its env, and TensorFlow 2.16 or later on its host (or a
version not known). One line says the fix, and whether tf_keras is importable on each host
(``tf_keras`` in the host's facts, launcher/agent/hostfacts.py). ``distlaunch init`` writes the
variable into the profiles it makes for such scripts (``keras_fit_line``).
"""

from __future__ import annotations

import ast
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from launcher.model import Plan, TaskSpec

LEGACY_KERAS_ENV = "TF_USE_LEGACY_KERAS"
#: the first TensorFlow whose tf.keras is Keras 3
KERAS3_SINCE = (2, 16)
#: the largest script read for the check, in bytes
MAX_SCRIPT_BYTES = 4 * 2**20


@dataclass(frozen=True)
class KerasFit:
    """Where a script calls Keras ``fit``, and through which Keras."""

    line: int
    #: True: through ``tf.keras`` (which TF_USE_LEGACY_KERAS=1 turns into tf_keras); False: ``import
    #: keras``, Keras 3 itself, which the variable does not change
    tf_keras_able: bool


def keras_fit_line(source: str) -> KerasFit | None:
    """The first ``.fit(`` call of a script that uses Keras as ``tf.keras`` or ``keras`` (not tf_keras,
    which fits under every strategy), or None."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    via_tf = via_keras = False
    fit_lines: list[int] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if any(m.split(".")[0] == "tf_keras" for m in modules):
                return None
            via_keras = via_keras or any(m.split(".")[0] == "keras" for m in modules)
            names = modules + ([f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom)
                               else [])
            via_tf = via_tf or any(n.startswith("tensorflow.keras") for n in names)
        elif isinstance(node, ast.Attribute) and node.attr == "keras":
            via_tf = via_tf or (isinstance(node.value, ast.Name) and node.value.id in ("tf", "tensorflow"))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "fit":
            fit_lines.append(node.lineno)
    if not fit_lines or not (via_tf or via_keras):
        return None
    return KerasFit(min(fit_lines), tf_keras_able=via_tf and not via_keras)


def legacy_keras_on(env: Mapping[str, str]) -> bool:
    return env.get(LEGACY_KERAS_ENV, "").strip().lower() in ("1", "true", "yes")


def keras_chosen(env: Mapping[str, str]) -> bool:
    """The env says which Keras (TF_USE_LEGACY_KERAS set, to "0" by a script that works around Keras
    3's multi-worker fit, as examples/mwms_keras.py does): nothing to tell."""
    return LEGACY_KERAS_ENV in env


def multi_worker_what(plan: Plan) -> str | None:
    """"MultiWorkerMirroredStrategy with 2 workers", "ParameterServerStrategy", or None where Keras 3 fits."""
    strategy = plan.profile.strategy
    if strategy == "parameter_server":
        return "ParameterServerStrategy"
    if strategy == "multi_worker_mirrored":
        n = sum(1 for t in plan.tasks if t.role in ("worker", "chief"))
        return f"MultiWorkerMirroredStrategy with {n} workers" if n >= 2 else None
    return None


def script_of(task: TaskSpec) -> Path | None:
    """The Python script a task's command runs (the first ``.py`` word), as the launcher can reach it."""
    try:
        words = shlex.split(task.command)
    except ValueError:
        return None
    script = next((w for w in words if w.endswith(".py")), None)
    if script is None:
        return None
    path = Path(script).expanduser()
    return path if path.is_absolute() else Path(task.workdir).expanduser() / path


def _read(path: Path) -> str | None:
    try:
        if not path.is_file() or path.stat().st_size > MAX_SCRIPT_BYTES:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _keras3(version: str | None) -> bool:
    """TensorFlow ``version``'s tf.keras is Keras 3 (True where the version is not known)."""
    if not version:
        return True
    try:
        major, minor = (int(p) for p in version.split(".")[:2])
    except ValueError:
        return True
    return (major, minor) >= KERAS3_SINCE


def judge(plan: Plan, tensorflow: Mapping[str, str | None], tf_keras: Mapping[str, bool | None]) -> list[str]:
    """Warnings, one line per script that would fit with Keras 3 under the plan's strategy, naming
    the fix. Warnings, not errors: a script may work around keras-team/keras#20585 itself (as
    examples/mwms_keras.py does); where it does not, its first failure ends the job with the same
    fix as its cause (launcher/telemetry/signatures.py), and any ``TF_USE_LEGACY_KERAS`` in the env
    says the user chose. ``tensorflow``: each host's TensorFlow version (None: not known);
    ``tf_keras``: whether tf_keras is importable there (None: not known)."""
    what = multi_worker_what(plan)
    if what is None:
        return []
    lines = []
    legacy_hosts = sorted({t.host for t in plan.tasks if legacy_keras_on(t.env) and tf_keras.get(t.host) is False
                           and _keras3(tensorflow.get(t.host)) and tensorflow.get(t.host)})
    if legacy_hosts:
        lines.append(f"{LEGACY_KERAS_ENV}=1 makes tf.keras tf_keras, which {', '.join(legacy_hosts)} "
                     f"{'lacks' if len(legacy_hosts) == 1 else 'lack'}: pip install tf_keras there")
    found: dict[Path, list[TaskSpec]] = {}
    for task in plan.tasks:
        if keras_chosen(task.env) or not _keras3(tensorflow.get(task.host)):
            continue
        script = script_of(task)
        if script is not None:
            found.setdefault(script, []).append(task)
    for script, tasks in found.items():
        source = _read(script)
        fit = keras_fit_line(source) if source is not None else None
        if fit is None:
            continue
        hosts = sorted({t.host for t in tasks})
        lacking = [h for h in hosts if tf_keras.get(h) is False]
        known = all(tf_keras.get(h) is True for h in hosts)
        tail = (f"; install tf_keras on {', '.join(lacking)} (pip install tf_keras)" if lacking
                else " (tf_keras is installed on every host)" if known else " (and tf_keras on every host)")
        if fit.tf_keras_able:
            lines.append(f"{script.name}:{fit.line} calls Keras fit under {what}, which Keras 3 (tf.keras since "
                         f"TensorFlow 2.16) cannot run: add {LEGACY_KERAS_ENV} = \"1\" to [defaults] env{tail}")
        else:
            lines.append(f"{script.name}:{fit.line} calls Keras 3 fit (import keras) under {what}, which fails "
                         "unless the script works around keras-team/keras#20585: import tf_keras as keras, or "
                         f"set {LEGACY_KERAS_ENV} = \"0\" in [defaults] env to say it does")
    return lines
