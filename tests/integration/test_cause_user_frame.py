"""A failure raised through an autolog-wrapped ``tf.function`` call is placed at the script's line:
autolog's wrapper (``launcher/autolog/patches.py``, from the agent's zipapp) sits between the
training loop and TensorFlow in every such traceback, and is distlaunch's frame, not the user's."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.jobtools import read_events
from tests.integration.test_causes import one_task_profile, up_failing

pytestmark = pytest.mark.slow

SCRIPT = """import tensorflow as tf


@tf.function
def scale(x):
    tf.debugging.assert_positive(x, message="x must be positive")
    return x * 2.0


print(float(scale(tf.constant(1.0))), flush=True)
scale(tf.constant(-1.0))
"""
FAILING_LINE = 11


@pytest.mark.timeout(200)
def test_a_tf_function_failure_names_the_scripts_line_not_autologs_wrapper(tmp_path: Path) -> None:
    (tmp_path / "scale.py").write_text(SCRIPT)
    assert SCRIPT.splitlines()[FAILING_LINE - 1] == "scale(tf.constant(-1.0))"
    out, failed = up_failing(tmp_path, one_task_profile(tmp_path, "{python} scale.py"), "it-cause-tffunc")
    output = [e["line"] for e in read_events(tmp_path / "run") if e["kind"] == "log"]
    assert any("launcher/autolog/patches.py" in line for line in output), output  # the wrapper was in the way
    assert failed["cause"] == f"InvalidArgumentError: Graph execution error at scale.py:{FAILING_LINE}"
    assert f"root cause: worker:0 failed first (exit code 1: {failed['cause']})" in out
