"""Keras 3 cannot fit under a multi-worker strategy: which scripts, plans and hosts are told, and how."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.model import Plan
from launcher.plan import build_plan
from launcher.profile.reader import load_profile
from launcher.remote.kerasfit import KerasFit, judge, keras_fit_line
from tests.profiles import Host, build_profile

TUTORIAL = Path(__file__).resolve().parents[2] / "data" / "keras3_mwms_tutorial.py"


@pytest.mark.parametrize(("source", "expected"), [
    # the tutorial: tf.keras, which TF_USE_LEGACY_KERAS=1 turns into tf_keras
    ("import tensorflow as tf\nm = tf.keras.Sequential()\nm.fit(ds)\n", KerasFit(3, True)),
    ("from tensorflow import keras\nm = keras.Sequential()\n\nm.fit(ds)\n", KerasFit(4, True)),
    ("from tensorflow.keras import layers\nmodel.fit(x)\n", KerasFit(2, True)),
    # Keras 3 itself: the variable does not change it (a warning, the script may work around it)
    ("import keras\nm = keras.Sequential()\nm.fit(ds)\n", KerasFit(3, False)),
    ("import tensorflow as tf\nimport keras\ntf.keras\nm.fit(ds)\n", KerasFit(4, False)),
    # tf_keras fits under every strategy; no fit, no Keras, or no Python: nothing to say
    ("import tf_keras as keras\nm.fit(ds)\n", None),
    ("import tensorflow as tf\nm = tf.keras.Sequential()\nm.predict(x)\n", None),
    ("from sklearn.linear_model import Ridge\nRidge().fit(x, y)\n", None),
    ("print 'python 2'\nmodel.fit(x)\n", None),
])
def test_which_scripts_fit_with_keras(source: str, expected: KerasFit | None) -> None:
    assert keras_fit_line(source) == expected


def _plan(tmp_path: Path, strategy: str, workers: int, env: dict[str, str] | None = None,
          script: str = TUTORIAL.name, hosts: int = 1) -> Plan:
    (tmp_path / script).write_text(TUTORIAL.read_text() if script == TUTORIAL.name else "import keras\nm.fit(d)\n")
    names = [Host(name=f"h{i}", address="localhost", transport="local") for i in range(hosts)]
    roles: dict[str, int] = {"worker": workers}
    if strategy == "parameter_server":
        roles = {"chief": 1, "ps": 1, "worker": workers}
    path = build_profile(tmp_path / "p.toml", strategy=strategy, command=f"{{python}} {script} --epochs 2",
                         workdir=tmp_path, env=env, hosts=names, roles=roles)
    profile = load_profile(path)
    return build_plan(profile, {})


def test_the_tutorial_under_two_workers_is_told_the_fix(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "multi_worker_mirrored", 2, hosts=2)
    warnings = judge(plan, {"h0": "2.21.0", "h1": "2.21.0"}, {"h0": True, "h1": True})
    assert warnings == [f"{TUTORIAL.name}:15 calls Keras fit under MultiWorkerMirroredStrategy with 2 workers, which "
                      "Keras 3 (tf.keras since TensorFlow 2.16) cannot run: add TF_USE_LEGACY_KERAS = \"1\" to "
                      "[defaults] env (tf_keras is installed on every host)"]
    # a host without tf_keras is named, with what to install
    warnings = judge(plan, {"h0": "2.21.0", "h1": "2.21.0"}, {"h0": True, "h1": False})
    assert warnings[0].endswith("; install tf_keras on h1 (pip install tf_keras)")
    # hosts not asked (check --no-remote): the fix, and that tf_keras is needed
    warnings = judge(plan, {}, {})
    assert warnings[0].endswith(" (and tf_keras on every host)")


def test_parameter_server_strategy_is_told_too(tmp_path: Path) -> None:
    warnings = judge(_plan(tmp_path, "parameter_server", 1), {"h0": "2.21.0"}, {"h0": True})
    assert len(warnings) == 1 and " under ParameterServerStrategy, " in warnings[0]


@pytest.mark.parametrize(("strategy", "workers", "env", "tensorflow"), [
    ("multi_worker_mirrored", 1, None, "2.21.0"),  # one worker: Keras 3 fits
    ("custom", 2, None, "2.21.0"),  # no strategy distlaunch knows of
    ("multi_worker_mirrored", 2, {"TF_USE_LEGACY_KERAS": "1"}, "2.21.0"),  # the fix
    ("multi_worker_mirrored", 2, {"TF_USE_LEGACY_KERAS": "0"}, "2.21.0"),  # "I use Keras 3 on purpose"
    ("multi_worker_mirrored", 2, None, "2.15.1"),  # tf.keras is Keras 2 before TensorFlow 2.16
])
def test_nothing_is_said_where_keras_3_does_not_fit(tmp_path: Path, strategy: str, workers: int,
                                                    env: dict[str, str] | None, tensorflow: str) -> None:
    assert judge(_plan(tmp_path, strategy, workers, env), {"h0": tensorflow}, {"h0": True}) == []


def test_keras_3_itself_may_work_around_it_and_the_legacy_switch_needs_tf_keras(tmp_path: Path) -> None:
    plan = _plan(tmp_path, "multi_worker_mirrored", 2, script="own.py")
    warnings = judge(plan, {"h0": "2.21.0"}, {"h0": True})
    assert len(warnings) == 1
    assert warnings[0].startswith("own.py:2 calls Keras 3 fit (import keras) under MultiWorkerMirroredStrategy")
    assert 'TF_USE_LEGACY_KERAS = "0"' in warnings[0] and "import tf_keras as keras" in warnings[0]
    legacy = _plan(tmp_path, "multi_worker_mirrored", 2, {"TF_USE_LEGACY_KERAS": "1"})
    assert judge(legacy, {"h0": "2.21.0"}, {"h0": False}) == [
        "TF_USE_LEGACY_KERAS=1 makes tf.keras tf_keras, which h0 lacks: pip install tf_keras there"]
