"""The agent's side of autolog and of the metrics regexes: real agents from the real zipapp,
running real (tiny, TensorFlow-free) task scripts."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path


def logs(evs: list[dict]) -> list[str]:
    return [e["line"] for e in evs if e["kind"] == "log"]


def metrics(evs: list[dict]) -> list[dict]:
    return [e for e in evs if e["kind"] == "metric"]


def test_regex_capturing_sentence_punctuation_still_gives_the_number(host):
    line = "Epoch: 0, accuracy: 0.099442, train_loss: 2.533713."
    evs = host.run_to_end(host.task(f"echo '{line}'", metrics={"loss": r"train_loss: ([-+0-9.eE]+)"}))
    assert [m["loss"] for m in metrics(evs)] == [2.533713]
    assert not any("distlaunch agent" in line for line in logs(evs))


def test_regex_capturing_text_warns_once_naming_regex_text_and_line(host):
    evs = host.run_to_end(host.task("echo 'lr=high'; echo 'lr=low'; echo 'step 3'",
                                    metrics={"lr": r"lr=(\w+)", "step": r"step (\d+)"}))
    warnings = [line for line in logs(evs) if "metrics regex lr" in line]
    assert len(warnings) == 1, logs(evs)
    assert "'high'" in warnings[0] and "line: lr=high" in warnings[0]
    assert [m["step"] for m in metrics(evs)] == [3]
    assert next(e for e in evs if e["kind"] == "log" and "metrics regex lr" in e["line"])["stream"] == "stderr"


def test_regex_that_never_matches_is_named_once_when_the_task_ends(host):
    evs = host.run_to_end(host.task("echo one; echo two", metrics={"step": r"global step: (\d+)"}))
    warnings = [line for line in logs(evs) if "metrics regex step" in line]
    assert len(warnings) == 1 and "matched none of this task's 2 output lines" in warnings[0]
    assert evs[-1]["state"] == "succeeded"


def test_explicit_report_and_regex_win_over_autolog_for_the_same_name(host):
    (host.root / "script.py").write_text(textwrap.dedent("""
        import json
        def line(**m):
            print('@distlaunch ' + json.dumps(dict(kind="metric", **m)))
        line(step=None, loss=0.5, values={"acc": 0.9})                  # explicit report
        line(step=10, loss=9.0, values={"acc": 0.1, "lr": 0.01}, source="autolog")
        print("my_metric 7")                                            # the [metrics] regex
        line(step=11, loss=None, values={"my_metric": 1.0}, source="autolog")
        line(step=None, loss=None, values={"acc": 0.2}, source="autolog")   # nothing left: no event
        def placed(device, **extra):
            print('@distlaunch ' + json.dumps(dict(kind="placement", variables=[
                {"name": "w", "shape": [1], "dtype": "float32", "bytes": 4, "device": device, "task": ""}], **extra)))
        placed("/cpu:0", source="autolog")    # before any explicit placement: kept
        placed("/job:ps/task:0")              # report_placement()
        placed("/cpu:1", source="autolog")    # after it: dropped
    """))
    evs = host.run_to_end(host.task(f"{sys.executable} script.py", metrics={"my_metric": r"my_metric (\d+)"}))
    got = [(m["step"], m["loss"], m["values"]) for m in metrics(evs)]
    assert got == [(None, 0.5, {"acc": 0.9}), (10, None, {"lr": 0.01}), (None, None, {"my_metric": 7.0}),
                   (11, None, {})]
    placed = [e["variables"][0]["device"] for e in evs if e["kind"] == "placement"]
    assert placed == ["/cpu:0", "/job:ps/task:0"]


SITE_PROBE = textwrap.dedent("""
    import sys
    from launcher.autolog import hook as autolog_hook
    print("hook", any(isinstance(f, autolog_hook.WatchFinder) for f in sys.meta_path))
    print("tensorflow imported", "tensorflow" in sys.modules or "keras" in sys.modules)
    print("user site", getattr(sys.modules.get("sitecustomize"), "MARK", None))
""")


def _user_site(root: Path) -> Path:
    site = root / "user_site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("MARK = 'ran'\nprint('user sitecustomize ran')\n")
    return site


def test_autolog_hook_is_installed_without_importing_tensorflow_and_chains_the_user_sitecustomize(host):
    (host.root / "probe.py").write_text(SITE_PROBE)
    site = _user_site(host.root)
    evs = host.run_to_end(host.task(f"{sys.executable} probe.py", env={"PYTHONPATH": str(site)}))
    assert logs(evs) == ["user sitecustomize ran", "hook True", "tensorflow imported False", "user site ran"]


def test_autolog_false_leaves_the_path_and_the_user_sitecustomize_alone(host):
    (host.root / "probe.py").write_text(SITE_PROBE)
    site = _user_site(host.root)
    evs = host.run_to_end(host.task(f"{sys.executable} probe.py", env={"PYTHONPATH": str(site)}, autolog=False))
    assert logs(evs) == ["user sitecustomize ran", "hook False", "tensorflow imported False", "user site ran"]


def test_an_error_inside_the_instrumentation_warns_once_and_the_script_runs_on(host):
    # a "keras" whose API autolog does not know (here: a Callback that is no class) stands in
    # for any version the patches break on
    fake = host.root / "fake" / "keras"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("import types\ncallbacks = types.SimpleNamespace(Callback=5)\n"
                                      "class Model:\n    def fit(self):\n        return 'trained'\n")
    (host.root / "script.py").write_text("import keras\nprint(keras.Model().fit())\nimport keras\n")
    evs = host.run_to_end(host.task(f"{sys.executable} script.py", env={"PYTHONPATH": str(host.root / "fake")}))
    lines = logs(evs)
    warnings = [line for line in lines if line.startswith("distlaunch autolog:")]
    assert len(warnings) == 1 and "autolog is off" in warnings[0], lines
    assert "trained" in lines and evs[-1]["state"] == "succeeded"


def test_spec_sends_the_sampling_interval_to_the_task(host):
    probe = "import os; print(os.environ['DISTLAUNCH_SAMPLE_INTERVAL'])"
    evs = host.run_to_end(host.task(f'{sys.executable} -c "{probe}"', sample_interval=0.25))
    assert logs(evs) == ["0.25"]
