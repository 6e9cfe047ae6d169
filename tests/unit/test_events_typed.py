"""Typed events (launcher/events.py): one class per kind, its fields declared with their types and
checked once where a line is decoded. Each constructor's JSON is the line it was before the classes
(the wire and events.jsonl are a contract, DESIGN.md section 5), a line decodes to its kind's class
and encodes again byte for byte (unknown fields in their place), and a field of another type, or a
required one missing, is a bad line."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from launcher import events as ev

T = 1700000000.5

#: (the event, its line: what the constructors wrote before the typed classes, byte for byte)
CASES: list[tuple[ev.Event, str]] = [
    (ev.job_event("r1", "Running", "go", ts=T),
     '{"v":2,"ts":1700000000.5,"run":"r1","task":null,"kind":"job","state":"Running","reason":"go"}'),
    (ev.state_event("r1", "worker:0", "failed", host="h1", pid=42, restarts=2, exit_code=1, reason="boom", ts=T,
                    signal="SIGKILL", oom_kill=True, exited_at=T - 1, permanent=True,
                    cause="MemoryError at a.py:1", culprit="ps:0", peak_rss_bytes=1024),
     '{"v":2,"ts":1700000000.5,"run":"r1","task":"worker:0","kind":"state","state":"failed","host":"h1",'
     '"pid":42,"restarts":2,"exit_code":1,"reason":"boom","signal":"SIGKILL","oom_kill":true,'
     '"exited_at":1699999999.5,"permanent":true,"cause":"MemoryError at a.py:1","culprit":"ps:0",'
     '"peak_rss_bytes":1024}'),
    (ev.metric_event("r1", "worker:0", step=7, loss=0.25, values={"acc": 0.5, "bad": float("nan")}, ts=T),
     '{"v":2,"ts":1700000000.5,"run":"r1","task":"worker:0","kind":"metric","step":7,"loss":0.25,'
     '"values":{"acc":0.5}}'),
    (ev.metric_event("r1", "worker:0", step=8, loss=float("-inf"), ts=T),
     '{"v":2,"ts":1700000000.5,"run":"r1","task":"worker:0","kind":"metric","step":8,"loss":null,"values":{},'
     '"nonfinite_loss":"-inf"}'),
    (ev.sample_event("r1", "worker:0", cpu_percent=12.5, rss_bytes=2048,
                     gpus=[{"index": 0, "util_percent": 50.0, "mem_used_bytes": 1, "mem_total_bytes": 2}],
                     source="proc", ts=T, proc_state="R", host={"cpu_percent": 3.0, "cpus": 8}),
     '{"v":2,"ts":1700000000.5,"run":"r1","task":"worker:0","kind":"sample","cpu_percent":12.5,"rss_bytes":2048,'
     '"gpus":[{"index":0,"util_percent":50.0,"mem_used_bytes":1,"mem_total_bytes":2}],"source":"proc",'
     '"proc_state":"R","host":{"cpu_percent":3.0,"cpus":8}}'),
    (ev.placement_event("r1", "worker:0", [{"name": "w", "shape": [2, 2], "dtype": "float32", "bytes": 16,
                                            "device": "/job:ps/task:0", "task": "ps:0"}], ts=T),
     '{"v":2,"ts":1700000000.5,"run":"r1","task":"worker:0","kind":"placement","variables":[{"name":"w",'
     '"shape":[2,2],"dtype":"float32","bytes":16,"device":"/job:ps/task:0","task":"ps:0"}]}'),
    (ev.log_event("r1", "worker:0", "stderr", 'héllo "x"', ts=T),
     '{"v":2,"ts":1700000000.5,"run":"r1","task":"worker:0","kind":"log","stream":"stderr",'
     '"line":"h\\u00e9llo \\"x\\""}'),
    (ev.host_event("r1", "h1", "unreachable", "ssh timed out", ts=T),
     '{"v":2,"ts":1700000000.5,"run":"r1","task":null,"kind":"host","host":"h1","state":"unreachable",'
     '"reason":"ssh timed out"}'),
    (ev.condition_event("r1", "worker:0", "stalled", True, "no step for 60 s", ts=T),
     '{"v":2,"ts":1700000000.5,"run":"r1","task":"worker:0","kind":"condition","condition":"stalled",'
     '"active":true,"reason":"no step for 60 s"}'),
    (ev.action_event("r1", "restart", "worker:0", "cli", ts=T),
     '{"v":2,"ts":1700000000.5,"run":"r1","task":null,"kind":"action","action":"restart","target":"worker:0",'
     '"origin":"cli"}'),
    (ev.stacks_event("r1", "worker:0", "stacks/1.json", suspect="worker:1", frame="wait (a.py:3)",
                     reason="stopped", ts=T),
     '{"v":2,"ts":1700000000.5,"run":"r1","task":"worker:0","kind":"stacks","path":"stacks/1.json",'
     '"suspect":"worker:1","frame":"wait (a.py:3)","reason":"stopped"}'),
    (ev.stacks_event("r1", None, "stacks/2.json", ts=T),
     '{"v":2,"ts":1700000000.5,"run":"r1","task":null,"kind":"stacks","path":"stacks/2.json","suspect":null,'
     '"frame":null,"reason":""}'),
    (ev.checkpoint_event("r1", "worker:0", "/data/ckpt", step=200, epoch=2, files=["checkpoint", "ckpt-2.index"],
                         nbytes=4096, seconds=0.25, api="checkpoint_manager", host="a", ts=T),
     '{"v":2,"ts":1700000000.5,"run":"r1","task":"worker:0","kind":"checkpoint","step":200,"epoch":2,'
     '"directory":"/data/ckpt","files":["checkpoint","ckpt-2.index"],"bytes":4096,"seconds":0.25,'
     '"api":"checkpoint_manager","host":"a"}'),
    (ev.resize_event("r1", "worker", 1, 2, "host c re-admitted after 300 s", ["worker:1"], ts=T),
     '{"v":2,"ts":1700000000.5,"run":"r1","task":null,"kind":"resize","role":"worker","before":1,"after":2,'
     '"reason":"host c re-admitted after 300 s","tasks":["worker:1"],"restart":false}'),
    (ev.slurm_event("r1", "4242", "PENDING", "Resources", start_time=1700000600.0, ts=T),
     '{"v":2,"ts":1700000000.5,"run":"r1","task":null,"kind":"slurm","job_id":"4242","state":"PENDING",'
     '"reason":"Resources","start_time":1700000600.0,"node":null}'),
    (ev.requeued_event("r1", "4242", "Slurm requeued job 4242", 1, "node3", ts=T),
     '{"v":2,"ts":1700000000.5,"run":"r1","task":null,"kind":"requeued","job_id":"4242",'
     '"reason":"Slurm requeued job 4242","requeues":1,"node":"node3"}'),
]


def test_every_kind_has_a_class_and_a_case() -> None:
    assert set(ev.KIND_CLASSES) == set(ev.KINDS)
    assert {event.kind for event, _ in CASES} == set(ev.KINDS)
    assert all(ev.KIND_CLASSES[kind].__name__.lower() == kind + "event" for kind in ev.KINDS)


@pytest.mark.parametrize(("event", "line"), CASES, ids=[f"{n}-{e.kind}" for n, (e, _) in enumerate(CASES)])
def test_each_kind_encodes_as_before_and_decodes_to_its_class(event: ev.Event, line: str) -> None:
    assert type(event) is ev.KIND_CLASSES[event.kind]
    assert event.to_json() == line
    decoded = ev.Event.from_json(line)
    assert type(decoded) is type(event) and decoded == event and decoded.to_json() == line
    assert ev.Event.from_dict(json.loads(line)) == event


def test_the_fields_read_as_typed_attributes() -> None:
    state, metric, sample = (ev.Event.from_json(line) for _, line in CASES[1:3] + CASES[4:5])
    assert isinstance(state, ev.StateEvent) and isinstance(metric, ev.MetricEvent)
    assert isinstance(sample, ev.SampleEvent)
    assert (state.state, state.host, state.pid, state.restarts, state.exit_code) == ("failed", "h1", 42, 2, 1)
    assert (state.cause, state.culprit, state.signal, state.oom_kill, state.permanent) == \
        ("MemoryError at a.py:1", "ps:0", "SIGKILL", True, True)
    assert state.exited_at == T - 1 and state.peak_rss_bytes == 1024
    assert (metric.step, metric.loss, metric.values, metric.nonfinite_loss) == (7, 0.25, {"acc": 0.5}, None)
    assert sample.gpus[0]["index"] == 0 and sample.host == {"cpu_percent": 3.0, "cpus": 8}
    assert (sample.cpu_percent, sample.rss_bytes, sample.source, sample.proc_state) == (12.5, 2048, "proc", "R")


def test_absent_or_null_fields_read_as_their_defaults() -> None:
    line = '{"v":2,"ts":1.5,"run":"r","task":"w:0","kind":"state","state":"running","reason":null}'
    state = ev.Event.from_json(line)
    assert isinstance(state, ev.StateEvent)
    assert (state.reason, state.cause, state.host, state.pid, state.permanent, state.seq) == \
        ("", "", None, None, False, None)
    sample = ev.Event.from_json('{"v":1,"ts":1.5,"run":"r","task":"w:0","kind":"sample"}')
    assert isinstance(sample, ev.SampleEvent) and sample.gpus == [] and sample.source == ""
    sample.gpus.append({})  # a default is the reader's own
    assert sample.gpus == []
    log = ev.Event.from_json('{"v":2,"ts":1.5,"run":"r","task":"w:0","kind":"log","line":"x","seq":3}')
    assert isinstance(log, ev.LogEvent) and (log.stream, log.line, log.seq) == ("stdout", "x", 3)
    job = ev.Event.from_json('{"v":2,"ts":1.5,"run":"r","task":null,"kind":"job","state":"Running"}')
    assert isinstance(job, ev.JobEvent) and job.host_state == {} and job.reason == ""


def test_unknown_fields_are_kept_in_their_place() -> None:
    line = '{"v":2,"ts":1.5,"run":"r","task":"w:0","kind":"state","new":{"a":[1]},"state":"running","seq":4}'
    event = ev.Event.from_json(line)
    assert event.to_json() == line and event.data["new"] == {"a": [1]} and event.seq == 4


def test_event_of_a_kind_is_of_its_class_and_replace_keeps_it() -> None:
    event = ev.Event(ev.CONDITION, "r", "w:0", T, {"condition": "stalled", "active": False, "reason": ""})
    assert isinstance(event, ev.ConditionEvent) and event.active is False
    moved = replace(event, ts=T + 1)
    assert isinstance(moved, ev.ConditionEvent) and moved.ts == T + 1 and moved.condition == "stalled"


def _line(kind: str, **fields: Any) -> str:
    return json.dumps({"v": 2, "ts": T, "run": "r", "task": "w:0", "kind": kind, **fields})


@pytest.mark.parametrize(("line", "why"), [
    (_line("state", state="running", pid=True), "state pid is a bool"),
    (_line("state", state="running", restarts=1.0), "state restarts is a float"),
    (_line("state", state="running", exit_code=2 ** 63), "state exit_code is a int"),
    (_line("state", host="h"), "state lacks state"),
    (_line("log", stream="stdout"), "log lacks line"),
    (_line("condition", condition="stalled", active=1), "condition active is a int"),
    (_line("metric", step=1, values={"a": "x"}), "metric values holds no number"),
    (_line("metric", step="1"), "metric step is a str"),
    (_line("sample", gpus=[{"index": "0"}]), "sample gpus.index is a str"),
    (_line("sample", gpus=[1]), "sample gpus holds a int"),
    (_line("placement", variables=[{"name": 3}]), "placement variables.name is a int"),
    (_line("log", line="x", seq=None), "log seq is a NoneType"),
    (_line("log", line="x", seq="1"), "log seq is a str"),
    (_line("job", state="Running", host_state=[]), "job host_state is a list"),
    (json.dumps({"v": 2, "ts": 1e12, "run": "r", "task": None, "kind": "job", "state": "Running"}), "is no time"),
])
def test_a_field_of_another_type_is_a_bad_line(line: str, why: str) -> None:
    with pytest.raises(ev.EventDecodeError, match=why):
        ev.Event.from_json(line)
    with pytest.raises(ev.EventDecodeError, match=why):
        ev.Event.from_dict(json.loads(line))


def test_the_fields_of_a_class_are_declared_with_their_types() -> None:
    state = ev.StateEvent.pid
    assert state.name == "pid" and state.types == (int, type(None)) and not state.required
    assert ev.LogEvent.line.required and ev.StateEvent.state.required
