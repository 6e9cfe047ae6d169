"""Which loss each TF1 train op was built from, and where a loss is in a ``Session.run``'s fetches.

Imported by ``launcher.autolog.tf1session`` (its ``install`` passes TensorFlow's classes in); imports
nothing of TensorFlow itself. ``tf.compat.v1.train.Optimizer``'s ``minimize(loss)``, and
``apply_gradients`` of gradients that ``compute_gradients(loss)`` returned (or, when they were
transformed on the way, of the only loss the graph's optimizers were given), remember each train
op's loss: weakly, per graph, so that a graph's lifetime stays its own. Everything here runs at
graph building, or at most once per read interval; a failure is said once (``degraded``) and the
loss is not fetched.

Stdlib-only at import, Python >= 3.9.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Any, Callable, Dict, List, Optional, Set

from launcher.autolog import recorder as autolog

#: a loss is fetched alongside when it needs at most these many ops that its train op does not
#: (the final reduction and its constants: the gradient of a mean does not need the mean itself)
MAX_EXTRA_OPS = 32
#: a train op's inputs are walked once; beyond this many ops its loss is not fetched
MAX_WALK_OPS = 200_000
#: the fetches looked into for a train op: this deep, this many leaves
MAX_FETCH_DEPTH = 4
MAX_FETCH_LEAVES = 32
#: distinct losses remembered per graph (the fallback for transformed gradients needs exactly one)
MAX_LOSSES = 8
#: placeholders: an added fetch that needs one the step does not would fail for want of a feed
_PLACEHOLDERS = frozenset(("Placeholder", "PlaceholderV2"))
ADD_LOSS = "fetch a TF1 train op's loss alongside it"

#: TensorFlow's classes (``Tensor``, ``Operation``, ``OpError``), set by ``tf1session.install``
types: Dict[str, Any] = {}


def quietly(what: str, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, or None after saying once that ``what`` failed (autolog stays on)."""
    try:
        return fn(*args)
    except Exception as exc:
        autolog.degraded(what, exc)
        return None


# -- which loss each train op was built from -----------------------------------------------------


class GraphLosses:
    """One graph's train ops and their losses, all weakly: the graph holds its ops, not we."""

    def __init__(self) -> None:
        self.by_op: "weakref.WeakKeyDictionary[Any, weakref.ref[Any]]" = weakref.WeakKeyDictionary()
        self.by_grad: "weakref.WeakKeyDictionary[Any, weakref.ref[Any]]" = weakref.WeakKeyDictionary()
        self.losses: "List[weakref.ref[Any]]" = []
        #: per train op: whether its loss may be fetched alongside (see ``_needs_nothing_more``)
        self.addable: "weakref.WeakKeyDictionary[Any, bool]" = weakref.WeakKeyDictionary()


graphs: "weakref.WeakKeyDictionary[Any, GraphLosses]" = weakref.WeakKeyDictionary()


def graph_tensor(value: Any) -> Any:
    """The graph of a graph-mode tensor, else None (an eager tensor, a callable loss)."""
    if not isinstance(value, types["Tensor"]):
        return None
    try:
        return value.graph
    except AttributeError:  # eager tensors have no graph
        return None


def _entry(graph: Any) -> GraphLosses:
    entry = graphs.get(graph)
    if entry is None:
        entry = graphs[graph] = GraphLosses()
    return entry


def _note_gradients(loss: Any, grads_and_vars: Any) -> None:
    graph = graph_tensor(loss)
    if graph is None:
        return
    entry = _entry(graph)
    ref = weakref.ref(loss)
    for grad, _ in grads_and_vars:
        if grad is not None:
            with contextlib.suppress(TypeError):  # not weakly referenceable: not remembered
                entry.by_grad[grad] = ref
    entry.losses = [r for r in entry.losses if r() is not None]
    if all(r() is not loss for r in entry.losses) and len(entry.losses) < MAX_LOSSES:
        entry.losses.append(ref)


def _note_applied(grads_and_vars: Any, op: Any) -> None:
    if not isinstance(op, types["Operation"]):
        return
    entry = graphs.get(op.graph)
    if entry is None:  # no compute_gradients in this graph: gradients from tf.gradients()
        return
    found: "Dict[int, weakref.ref[Any]]" = {}
    for grad, _ in grads_and_vars:
        try:
            ref = entry.by_grad.get(grad) if grad is not None else None
        except TypeError:
            ref = None
        if ref is not None and ref() is not None:
            found[id(ref())] = ref
    live = [r for r in entry.losses if r() is not None]
    if len(found) == 1:
        entry.by_op[op] = next(iter(found.values()))
    elif not found and len(live) == 1:  # clipped or otherwise transformed gradients of one loss
        entry.by_op[op] = live[0]


def _note_train_op(loss: Any, op: Any) -> None:
    graph = graph_tensor(loss)
    if graph is not None and isinstance(op, types["Operation"]) and op.graph is graph:
        _entry(graph).by_op[op] = weakref.ref(loss)


def patch_optimizer(cls: Any, wrap: Callable[..., None]) -> None:
    """Wrap ``compute_gradients``, ``apply_gradients`` and ``minimize`` of TF1's ``Optimizer``. A
    subclass with an ``apply_gradients`` of its own (``SyncReplicasOptimizer``) inherits
    ``minimize``, whose wrapper remembers what it returns."""
    def make_compute(original: Callable[..., Any]) -> Callable[..., Any]:
        def compute_gradients(self: Any, loss: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, loss, *args, **kwargs)
            if autolog._state.on:
                quietly("remember a TF1 optimizer's loss", _note_gradients, loss, result)
            return result
        return compute_gradients

    def make_apply(original: Callable[..., Any]) -> Callable[..., Any]:
        def apply_gradients(self: Any, grads_and_vars: Any, *args: Any, **kwargs: Any) -> Any:
            if autolog._state.on and not isinstance(grads_and_vars, (list, tuple)):
                # a zip is read twice: TF's apply_gradients makes it a tuple first thing too;
                # what cannot be made one, TF is left to say what is wrong with it
                with contextlib.suppress(Exception):
                    grads_and_vars = tuple(grads_and_vars)
            result = original(self, grads_and_vars, *args, **kwargs)
            if autolog._state.on and isinstance(grads_and_vars, (list, tuple)):
                quietly("remember a TF1 optimizer's loss", _note_applied, grads_and_vars, result)
            return result
        return apply_gradients

    def make_minimize(original: Callable[..., Any]) -> Callable[..., Any]:
        def minimize(self: Any, loss: Any, *args: Any, **kwargs: Any) -> Any:
            result = original(self, loss, *args, **kwargs)
            if autolog._state.on:
                quietly("remember a TF1 optimizer's loss", _note_train_op, loss, result)
            return result
        return minimize

    wrap(cls, "compute_gradients", make_compute)
    wrap(cls, "apply_gradients", make_apply)
    wrap(cls, "minimize", make_minimize)


# -- fetches -------------------------------------------------------------------------------------


def _leaves(fetches: Any, depth: int = 0, out: Optional[List[Any]] = None) -> List[Any]:
    """The leaves of a fetch structure (lists, tuples, namedtuples, dicts), a bounded number."""
    if out is None:
        out = []
    if isinstance(fetches, dict):
        fetches = list(fetches.values())
    if isinstance(fetches, (list, tuple)):
        if depth < MAX_FETCH_DEPTH:
            for item in fetches:
                if len(out) >= MAX_FETCH_LEAVES:
                    break
                _leaves(item, depth + 1, out)
    elif len(out) < MAX_FETCH_LEAVES:
        out.append(fetches)
    return out


def train_op_in(fetches: Any, entry: GraphLosses) -> Any:
    """The first remembered train op among the fetches, or None."""
    operation = types["Operation"]
    for leaf in _leaves(fetches):
        if isinstance(leaf, operation) and leaf in entry.by_op:
            return leaf
    return None


def fetches_loss(fetches: Any, loss: Any) -> bool:
    """Whether the script fetches the loss itself (the tensor, or its name)."""
    return any(leaf is loss or (isinstance(leaf, str) and leaf == loss.name) for leaf in _leaves(fetches))


def value_of(fetches: Any, result: Any, loss: Any) -> Any:
    """The loss's value in ``result``, walked in step with ``fetches`` (the same structure)."""
    return find(fetches, result, lambda f: f is loss or (isinstance(f, str) and f == loss.name), 0)


def find(fetches: Any, result: Any, match: Callable[[Any], bool], depth: int) -> Any:
    """The first value in ``result`` whose fetch matches, walking both structures in step."""
    if match(fetches):
        return result
    if depth >= MAX_FETCH_DEPTH:
        return None
    if isinstance(fetches, dict) and isinstance(result, dict):
        pairs = [(fetches[k], result.get(k)) for k in fetches]
    elif isinstance(fetches, (list, tuple)) and isinstance(result, (list, tuple)):
        pairs = [(fetches[i], result[i]) for i in range(min(len(fetches), len(result)))]
    else:
        return None
    for fetch, value in pairs:
        found = find(fetch, value, match, depth + 1)
        if found is not None:
            return found
    return None


def _ops_above(starts: List[Any], stop: "Set[Any]", limit: int) -> "Optional[Set[Any]]":
    """The ops ``starts`` need (inputs and control inputs, not those in ``stop``); None past ``limit``."""
    seen: "Set[Any]" = set()
    todo = [op for op in starts if op not in stop]
    while todo:
        op = todo.pop()
        if op in seen:
            continue
        seen.add(op)
        if len(seen) > limit:
            return None
        for before in [t.op for t in op.inputs] + list(op.control_inputs):
            if before not in seen and before not in stop:
                todo.append(before)
    return seen


def _needs_nothing_more(train_op: Any, loss: Any) -> bool:
    """Whether fetching ``loss`` with ``train_op`` runs only a few stateless ops more, no
    placeholder, on devices the step uses: then it cannot fail where the step alone would not."""
    if loss.graph is not train_op.graph or not loss.graph.is_fetchable(loss):
        return False
    needed = _ops_above([train_op], set(), MAX_WALK_OPS)
    if needed is None:
        return False
    extra = _ops_above([loss.op], needed, MAX_EXTRA_OPS)
    if extra is None:
        return False
    devices = {op.device for op in needed} | {""}
    return all(op.type not in _PLACEHOLDERS and not op.op_def.is_stateful and op.device in devices
               for op in extra)


def loss_to_add(entry: GraphLosses, train_op: Any, graph: Any) -> Any:
    """The loss tensor to fetch alongside ``train_op`` in a session of ``graph``, or None."""
    ref = entry.by_op.get(train_op)
    loss = ref() if ref is not None else None
    if loss is None or loss.graph is not graph:
        return None
    addable = entry.addable.get(train_op)
    if addable is None:
        addable = entry.addable[train_op] = bool(quietly(ADD_LOSS, _needs_nothing_more, train_op, loss))
    return loss if addable else None
