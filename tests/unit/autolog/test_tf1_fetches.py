"""Autolog's TF1 ``Session.run`` wrapper against real TensorFlow graphs, in this process.

Nothing is patched for good: ``tf1session.install`` gets a ``wrap`` that keeps each wrapper's
maker, and the tests build wrappers around the real ``BaseSession.run`` (or a spy that calls it)
and ``Optimizer.minimize``. Each graph is its own ``tf.Graph`` (eager stays on for the rest of
the process). What autolog reports is taken from ``tf1session.note``.
"""

from __future__ import annotations

import collections
import importlib
import math
from collections.abc import Callable
from typing import Any

import pytest

from launcher.autolog import recorder, tf1session, trainloss
from launcher.autolog.global_step import read_global_step

tf = pytest.importorskip("tensorflow")
v1 = tf.compat.v1
BaseSession = importlib.import_module("tensorflow.python.client.session").BaseSession
Optimizer = importlib.import_module("tensorflow.python.training.optimizer").Optimizer

_makes: dict[tuple[str, str], Callable[..., Any]] = {}


def _keep(owner: Any, attr: str, make: Callable[..., Any]) -> None:
    _makes[(owner.__name__, attr)] = make


tf1session.install(tf, _keep, importlib.import_module)
Pair = collections.namedtuple("Pair", "train step")


@pytest.fixture
def noted(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What autolog notes; every run is due (interval 0), nothing said before."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(tf1session, "note", lambda **kw: calls.append(kw))
    monkeypatch.setattr(recorder.reader, "interval", 0.0)
    monkeypatch.setattr(recorder._state, "degraded", set())
    monkeypatch.setattr(recorder._state, "on", True)
    monkeypatch.setattr(tf1session, "_value_names", set())
    return calls


class Model:
    """A tiny regression graph: ``train`` from ``minimize(loss)`` (through autolog's wrapper)."""

    def __init__(self, loss_of: Callable[[Any, Any], Any] = lambda error, graph: tf.reduce_mean(error)) -> None:
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.step = v1.train.get_or_create_global_step()
            self.x = v1.placeholder(tf.float32, [None, 3])
            self.w = v1.get_variable("w", [3, 1], initializer=v1.ones_initializer())
            error = tf.square(tf.matmul(self.x, self.w) - 1.0)
            self.loss = loss_of(error, self.graph)
            minimize = _makes[("Optimizer", "minimize")](Optimizer.minimize)
            self.train = minimize(v1.train.GradientDescentOptimizer(0.01), self.loss, global_step=self.step)
            init = v1.global_variables_initializer()
        self.session = v1.Session(graph=self.graph)
        self.session.run(init)
        self.feed = {self.x: [[1.0, 2.0, 3.0], [0.5, 0.5, 0.5]]}


def wrapped_run(spy: list[Any] | None = None) -> Callable[..., Any]:
    def original(session: Any, fetches: Any, *rest: Any) -> Any:
        if spy is not None:
            spy.append(fetches)
        return BaseSession.run(session, fetches, *rest)
    return _makes[("BaseSession", "run")](original)


def shape_of(value: Any) -> Any:
    """The structure of a result with its leaves' types (the values change with every step)."""
    if isinstance(value, dict):
        return type(value), [(k, shape_of(v)) for k, v in value.items()]
    if isinstance(value, (list, tuple)):
        return type(value), [shape_of(v) for v in value]
    return type(value)


STRUCTURES = {
    "list": lambda m: [m.train, m.step],
    "tuple": lambda m: (m.train, m.step),
    "namedtuple": lambda m: Pair(m.train, m.step),
    "dict": lambda m: {"train": m.train, "step": m.step},
    "ordered dict": lambda m: collections.OrderedDict(train=m.train, step=m.step),
    "single train op": lambda m: m.train,
    "nested, as MonitoredSession runs it": lambda m: {"caller": [m.train, (m.step,)], "hook": m.step},
}


@pytest.mark.parametrize("structure", list(STRUCTURES))
def test_a_train_op_run_without_its_loss_gets_it_fetched_and_the_script_the_same_structure(
        structure: str, noted: list[dict[str, Any]]) -> None:
    model = Model()
    fetches = STRUCTURES[structure](model)
    plain = BaseSession.run(model.session, fetches, model.feed)
    expected_loss = float(BaseSession.run(model.session, model.loss, model.feed))
    before = int(BaseSession.run(model.session, model.step))
    spy: list[Any] = []
    got = wrapped_run(spy)(model.session, fetches, model.feed)
    assert shape_of(got) == shape_of(plain)
    assert int(BaseSession.run(model.session, model.step)) == before + 1  # the step ran once
    assert spy[0][0] is fetches and spy[0][1] is model.loss  # [fetches, loss]; then the step read
    losses = [call["loss"] for call in noted if call.get("loss") is not None]
    assert len(losses) == 1 and math.isclose(float(losses[0]), expected_loss, rel_tol=1e-6), (losses, expected_loss)
    assert not recorder._state.degraded


def test_a_loss_the_script_fetches_itself_is_read_from_its_result_not_fetched_twice(
        noted: list[dict[str, Any]]) -> None:
    model = Model()
    spy: list[Any] = []
    fetches = {"out": [model.train, model.loss], "at": model.step}
    got = wrapped_run(spy)(model.session, fetches, model.feed)
    assert spy[0] is fetches  # exactly what the script asked for (then the step read)
    assert [call["loss"] for call in noted if call.get("loss") is not None] == [got["out"][1]]


@pytest.mark.parametrize("extra", ["a placeholder the step does not feed", "a stateful check"])
def test_a_loss_that_needs_more_than_the_step_is_not_fetched(extra: str, noted: list[dict[str, Any]]) -> None:
    """Fetching it could fail where the script's step does not (a missing feed, a NaN check)."""
    def loss_of(error: Any, graph: Any) -> Any:
        if extra == "a stateful check":
            return tf.debugging.check_numerics(tf.reduce_mean(error), "loss")
        unfed = v1.placeholder(tf.float32, [], name="unfed")
        return tf.reduce_mean(error) + tf.stop_gradient(unfed)

    model = Model(loss_of)
    spy: list[Any] = []
    fetches = [model.train, model.step]
    got = wrapped_run(spy)(model.session, fetches, model.feed)
    assert spy[0] is fetches and got[0] is None
    assert all(call.get("loss") is None for call in noted)
    assert not recorder._state.degraded


def test_a_fetch_that_cannot_be_built_falls_back_to_the_plain_run_said_once(
        noted: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    model = Model()
    with tf.Graph().as_default():
        elsewhere = tf.constant(1.0)  # not an element of the session's graph: refused before any op ran
    monkeypatch.setattr(trainloss, "loss_to_add", lambda entry, op, graph: elsewhere)
    run = wrapped_run()
    for expected in (1, 2):
        got = run(model.session, [model.train, model.step], model.feed)
        assert got[0] is None and int(BaseSession.run(model.session, model.step)) == expected  # one step each
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("distlaunch autolog:")]
    assert len(said) == 1 and "could not fetch a TF1 train op's loss alongside it (ValueError" in said[0], said
    assert recorder._state.on


def test_the_loss_of_a_session_of_another_graph_is_not_fetched() -> None:
    model = Model()
    entry = trainloss.graphs[model.graph]
    assert trainloss.loss_to_add(entry, model.train, model.graph) is model.loss
    assert trainloss.loss_to_add(entry, model.train, tf.Graph()) is None


def test_apply_gradients_of_compute_gradients_and_of_clipped_ones_remember_the_loss() -> None:
    compute = _makes[("Optimizer", "compute_gradients")](Optimizer.compute_gradients)
    apply = _makes[("Optimizer", "apply_gradients")](Optimizer.apply_gradients)
    for clip in (False, True):
        graph = tf.Graph()
        with graph.as_default():
            w = v1.get_variable("w", [2], initializer=v1.ones_initializer())
            loss = tf.reduce_sum(tf.square(w - 3.0))
            opt = v1.train.GradientDescentOptimizer(0.1)
            grads, variables = zip(*compute(opt, loss), strict=True)
            if clip:
                grads, _ = tf.clip_by_global_norm(list(grads), 1.0)
            train = apply(opt, zip(grads, variables, strict=True))  # a zip, read twice
        assert trainloss.graphs[graph].by_op[train]() is loss, clip


def test_a_scalar_fetched_alone_after_training_is_a_value_by_its_name_not_the_loss(
        noted: list[dict[str, Any]]) -> None:
    model = Model(lambda error, graph: tf.reduce_mean(error, name="cross_entropy"))
    run = wrapped_run()
    run(model.session, [model.train, model.step], model.feed)
    noted.clear()
    value = run(model.session, model.loss, model.feed)  # right after training: kept until close
    assert all("values" not in call for call in noted) and all(call.get("loss") is None for call in noted)
    _makes[("BaseSession", "close")](BaseSession.close)(model.session)
    assert [call["values"] for call in noted if call.get("values")] == [{"cross_entropy": value}]
    assert all(call.get("loss") is None for call in noted)


def test_a_lone_scalar_before_more_training_is_no_value_and_at_most_eight_names_are_kept(
        noted: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    model = Model()
    with model.graph.as_default():
        scalars = [tf.reduce_sum(model.w * float(k), name=f"s{k}") for k in range(10)]
    run = wrapped_run()
    run(model.session, model.train, model.feed)
    run(model.session, scalars[0], model.feed)
    run(model.session, model.train, model.feed)  # training went on: s0 was no value
    monkeypatch.setattr(tf1session, "quiet_s", lambda: 0.0)  # long after training: values at once
    run(model.session, model.step)  # an integer: no value
    for scalar in scalars[1:]:
        run(model.session, scalar)
    _makes[("BaseSession", "close")](BaseSession.close)(model.session)
    names = [name for call in noted for name in call.get("values") or {}]
    assert names == [f"s{k}" for k in range(1, 9)], names


def test_the_global_step_is_said_only_when_every_way_failed_and_then_once(
        noted: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]) -> None:
    """get_global_step() rejects a resource ``global_step`` (TypeError); the name finds it."""
    found = tf.Graph()
    with found.as_default():
        step = tf.Variable(7, name="global_step", trainable=False)
        init = v1.global_variables_initializer()
    unreadable = tf.Graph()
    with unreadable.as_default():
        tf.Variable(7.0, name="global_step", trainable=False)  # a float: no way takes it
        init_unreadable = v1.global_variables_initializer()
    with v1.Session(graph=found) as sess, v1.Session(graph=unreadable) as other:
        sess.run(init)
        other.run(init_unreadable)
        assert step.op.type == "VarHandleOp"
        assert [read_global_step(tf, BaseSession.run, sess) for _ in range(3)] == [7, 7, 7]
        assert "distlaunch autolog:" not in capsys.readouterr().err
        assert [read_global_step(tf, BaseSession.run, other) for _ in range(3)] == [None, None, None]
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("distlaunch autolog:")]
    assert len(said) == 1 and "could not read the global step by get_global_step() (TypeError" in said[0], said
