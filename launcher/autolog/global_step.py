"""TF1's global step, read from a session's graph by each way there is, falling back in turn.

Imported by ``launcher.autolog.patches`` (its ``Session.run`` and ``close`` patches); imports
nothing of TensorFlow itself (the caller passes ``tf``). The ways, in order: what
``tf.compat.v1.train.get_global_step()`` returns (it rejects a resource variable that it finds
by name: its ``global_step:0`` is the handle), the first integer scalar of the GLOBAL_STEP
collection, and the ``global_step`` variable or a read of it the graph already holds. A ref or
resource variable, int32 or int64. A way that raises is passed over for the next one; only when
no way gives a step is the last failure said, once per process (``autolog.degraded``): a script
whose global step a later way finds must not carry a line about ``get_global_step()`` in every
task's log. Autolog stays on either way.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from launcher.autolog import recorder as autolog


def _is_integer_scalar(value: Any) -> bool:
    dtype = getattr(value, "dtype", None)
    shape = getattr(value, "shape", None)
    return bool(getattr(getattr(dtype, "base_dtype", None), "is_integer", False)) \
        and getattr(shape, "rank", None) == 0


def _step_by_get_global_step(tf: Any, graph: Any) -> Any:
    return tf.compat.v1.train.get_global_step(graph)


def _step_by_collection(tf: Any, graph: Any) -> Any:
    return next((s for s in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_STEP) if _is_integer_scalar(s)), None)


def _step_by_name(tf: Any, graph: Any) -> Any:
    """The variable named ``global_step``, or a tensor that reads it (no new op: graphs may be final)."""
    for variable in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES):
        if getattr(getattr(variable, "op", None), "name", None) == "global_step" and _is_integer_scalar(variable):
            return variable
    try:
        output = graph.get_operation_by_name("global_step").outputs[0]
    except (KeyError, ValueError, IndexError):
        return None
    if _is_integer_scalar(output):  # a ref variable's own tensor
        return output
    # a resource variable's handle: a read of it that the graph already holds
    return next((c.outputs[0] for c in output.consumers()
                 if c.type == "ReadVariableOp" and _is_integer_scalar(c.outputs[0])), None)


#: the ways to the global step, in order; one that fails is passed over for the next
_STEP_WAYS = (("get_global_step()", _step_by_get_global_step),
              ("the GLOBAL_STEP collection", _step_by_collection),
              ("the name global_step", _step_by_name))


def read_global_step(tf: Any, run: Callable[..., Any], session: Any) -> Optional[int]:
    """The graph's integer global step (ref or resource variable, int32 or int64), or None."""
    failed: "Optional[tuple[str, Exception]]" = None  # the last way that raised
    for way, find in _STEP_WAYS:
        try:
            global_step = find(tf, session.graph)
            if global_step is None:
                continue
            return int(run(session, global_step, None, None, None))
        except tf.errors.OpError:
            # not initialized yet (a non-chief waiting for the chief), a ps restarting: the
            # script's own run just worked, so try again next interval
            return None
        except Exception as exc:
            failed = (way, exc)
    if failed is not None:
        autolog.degraded("read the global step by %s" % failed[0], failed[1], once="read the global step")
    return None
