"""Where a failure or a hang is: the innermost frame of the user's program, never distlaunch's own
(autolog's tf.function wrapper, report, the agent, from the zipapp or a checkout), the standard
library or installed packages, as long as the user has a frame in the stack."""

from __future__ import annotations

import pytest

from launcher.agent import stackmodel as sm
from launcher.supervise.stackcapture import _where
from launcher.telemetry.causes import last_traceback

ZIPAPP = "/home/u/.local/state/distlaunch/runs/r1/hosts/gpu1/agent.pyz"


def traceback_through(*frames: tuple[str, int, str], exc: str = "ValueError: bad shape") -> list[str]:
    lines = ["Traceback (most recent call last):"]
    for file, line, function in frames:
        lines += [f'  File "{file}", line {line}, in {function}', "    code()"]
    return [*lines, exc]


MAIN = ("/home/u/job/main.py", 110, "train_step")
LOOP = ("/home/u/job/main.py", 140, "<module>")
TF = ("/venv/lib/python3.11/site-packages/tensorflow/python/util/traceback_utils.py", 153, "error_handler")


@pytest.mark.parametrize("own", [
    "launcher/autolog/patches.py",  # the zipapp's compiled files name their sources relative to it
    f"{ZIPAPP}/launcher/autolog/patches.py",
    "/work/distlaunch/launcher/autolog/recorder.py",  # autolog from a checkout
    "launcher/report.py",
    "/usr/lib/python3/dist-packages/launcher/report.py",
    "/opt/venv/lib/python3.11/site-packages/distlaunch_site/sitecustomize.py",
    "distlaunch_site/sitecustomize.py",
    f"{ZIPAPP}/launcher/agent/runner.py",
    "launcher/events.py",
])
def test_distlaunchs_own_frame_is_never_the_place(own: str) -> None:
    tb = last_traceback(traceback_through(LOOP, MAIN, (own, 242, "__call__"), TF))
    assert tb is not None and tb.where == "main.py:110"
    assert sm.user_frame(sm.ThreadStack("MainThread", "1", [
        sm.Frame(LOOP[2], LOOP[0], LOOP[1]), sm.Frame(MAIN[2], MAIN[0], MAIN[1]), sm.Frame("__call__", own, 242),
    ])) == sm.Frame(MAIN[2], MAIN[0], MAIN[1])


def test_the_real_frozen_peer_traceback_names_the_scripts_line_not_autologs_wrapper() -> None:
    """TensorFlow 2.21's traceback through autolog's tf.function wrapper (tests/data/causes/)."""
    from tests.unit.telemetry.test_cause_culprit import corpus

    tb = last_traceback(corpus("mwms_frozen_peer.txt"))
    assert tb is not None and (tb.exc_type, tb.where) == ("UnavailableError", "mwms_tutorial_loop.py:55")


def test_the_standard_library_and_packages_are_skipped_and_a_users_dir_called_launcher_is_not() -> None:
    lib = traceback_through(LOOP, MAIN, ("/usr/lib/python3.11/threading.py", 320, "wait"),
                            ("/usr/lib64/python3.12/queue.py", 180, "get"), TF)
    tb = last_traceback(lib)
    assert tb is not None and tb.where == "main.py:110"
    own_name = traceback_through(("/home/u/launcher/train.py", 7, "<module>"), TF)
    tb = last_traceback(own_name)
    assert tb is not None and tb.where == "train.py:7"


def test_without_a_user_frame_the_innermost_frame_is_named() -> None:
    tb = last_traceback(traceback_through(("<frozen runpy>", 198, "_run_module_as_main"),
                                          ("launcher/autolog/patches.py", 242, "__call__")))
    assert tb is not None and tb.where == "patches.py:242"


def test_a_stall_line_and_the_odd_one_outs_frame_point_at_the_users_code() -> None:
    """The frame a stall's condition ends with (stackcapture._where) and the suspect's reason."""
    def stuck(task: str, *inner: sm.Frame) -> sm.TaskStacks:
        frames = [sm.Frame(LOOP[2], LOOP[0], LOOP[1]), *inner]
        return sm.TaskStacks(task, "h", 1, sm.SLEEPING, threads=[sm.ThreadStack("MainThread", "1", frames)])

    wrapped = (sm.Frame(MAIN[2], MAIN[0], MAIN[1]), sm.Frame("__call__", "launcher/autolog/patches.py", 242),
               sm.Frame("wait", "/usr/lib/python3.11/threading.py", 320))
    odd = stuck("worker:2", *wrapped)
    assert _where(odd) == "train_step (main.py:110)"
    others = [stuck(f"worker:{i}", sm.Frame("step", "/home/u/job/main.py", 90)) for i in range(2)]
    found = sm.suspect([*others, odd])
    assert found is not None and found[0] == "worker:2" and found[1].endswith("(in train_step (main.py:110))")
