"""A task's ``@distlaunch`` checkpoint line becomes a ``checkpoint`` event of its host, or one
malformed-line warning: never an exception in the agent's reader."""

from __future__ import annotations

from launcher import events as ev
from launcher.agent.output import OutputInterpreter
from launcher.agent.spec import AgentSpec


def _interpret(*lines: str) -> list[ev.Event]:
    out: list[ev.Event] = []
    spec = AgentSpec(run="r1", task="worker:1", command="python t.py", workdir="/home/u/job", host="b")
    interpreter = OutputInterpreter(spec, out.append)
    for line in lines:
        interpreter.handle("stdout", line)
    return out


def test_a_checkpoint_line_is_an_event_of_the_tasks_host_with_its_directory_made_absolute() -> None:
    [event] = _interpret('@distlaunch {"kind":"checkpoint","directory":"ckpt","step":300,"epoch":3,'
                         '"files":["checkpoint","ckpt-3.index"],"bytes":4096,"seconds":0.5,"api":"checkpoint_manager"}')
    assert isinstance(event, ev.CheckpointEvent)
    assert (event.task, event.host, event.directory) == ("worker:1", "b", "/home/u/job/ckpt")
    assert (event.step, event.epoch, event.files, event.bytes, event.seconds, event.api) == (
        300, 3, ["checkpoint", "ckpt-3.index"], 4096, 0.5, "checkpoint_manager")
    assert ev.Event.from_json(event.to_json()).to_dict() == event.to_dict()


def test_an_absolute_directory_is_kept() -> None:
    [event] = _interpret('@distlaunch {"kind":"checkpoint","directory":"/data/run/backup","step":7}')
    assert isinstance(event, ev.CheckpointEvent) and event.directory == "/data/run/backup"


def test_a_malformed_checkpoint_line_is_one_warning() -> None:
    [event] = _interpret('@distlaunch {"kind":"checkpoint","directory":"ckpt","step":"ten"}')
    assert isinstance(event, ev.LogEvent) and "malformed" in event.line and "step" in event.line
    [event] = _interpret('@distlaunch {"kind":"checkpoint","step":3}')
    assert isinstance(event, ev.LogEvent) and "directory" in event.line


def test_a_script_that_announces_its_checkpoints_is_believed_over_autolog() -> None:
    """autolog's line of a save comes first (once per save); from the script's first own line on,
    autolog's are dropped: one event per checkpoint, with the step the script gave."""
    auto = '@distlaunch {"kind":"checkpoint","directory":"ckpt","files":["ckpt-%d.index"],"source":"autolog"}'
    own = '@distlaunch {"kind":"checkpoint","directory":"ckpt","step":%d,"files":["ckpt-%d.index"]}'
    seen = _interpret(auto % 20, own % (20, 20), auto % 40, own % (40, 40))
    assert [(e.step, e.files) for e in seen if isinstance(e, ev.CheckpointEvent)] == [
        (None, ["ckpt-20.index"]), (20, ["ckpt-20.index"]), (40, ["ckpt-40.index"])]
    only_autolog = _interpret(auto % 20, auto % 40)
    assert [e.files for e in only_autolog if isinstance(e, ev.CheckpointEvent)] == [
        ["ckpt-20.index"], ["ckpt-40.index"]]
    # the script's own export elsewhere leaves autolog's backups in their directory reported
    backup = '@distlaunch {"kind":"checkpoint","directory":"backup","files":["b-%d.index"],"source":"autolog"}'
    export = '@distlaunch {"kind":"checkpoint","directory":"export","step":5,"files":["model.keras"]}'
    mixed = _interpret(backup % 1, export, backup % 2)
    assert [e.directory.rsplit("/", 1)[-1] for e in mixed if isinstance(e, ev.CheckpointEvent)] == [
        "backup", "export", "backup"]
