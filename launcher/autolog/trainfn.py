"""A train function known by what it does, not only by an optimizer (issue 46 §1).

``patches`` wraps every ``tf.function`` call and compares ``moved`` around it: a call during
which it moved did, while its function was traced (or run eagerly), something that trains. What
moves it, and how strongly each says "this function trains" (kept on the outermost function
being called, ``steptime.calling``):

- ``OPTIMIZER``: a Keras / tf_keras optimizer's ``apply_gradients`` (``patches``);
- ``GRADIENTS``: ``GradientTape.gradient`` (a loop that updates its variables itself, as
  TensorFlow's "basic training loops" guide teaches: ``w.assign_sub(lr * g)``);
- ``INPUT``: ``next(iterator)`` on a ``tf.data`` iterator (the graph's ``IteratorGetNext``).

A function that applies or takes gradients trains. One that only reads an iterator trains while
no function that takes gradients is known: a loop of such calls (an inference loop) gets its
steps and split too, and an evaluation beside a train function is no step (one known to train
by its input alone stops being one when a function that takes gradients comes).

Where no optimizer and no global step give a step, the train calls are counted as steps
(``StepReader.read_step``: ``step (calls)`` on the launcher's side). Nothing here adds an op to
any graph: the user's function stays as written. Stdlib-only at import, Python >= 3.9.
"""

from __future__ import annotations

import functools
import weakref
from typing import Any, Callable, List

from launcher.autolog import recorder as autolog
from launcher.autolog import steptime

OPTIMIZER, GRADIENTS, INPUT = 3, 2, 1
#: the attribute on a tf.function that holds the strongest of the above its calls did
BY = "_distlaunch_trains_by"
#: bumped by each of the above (patches' wrapper compares it around every tf.function call)
moved = [0]
#: the strongest level of a train function so far, and the functions known by their input only
_strongest = [0]
_by_input: "List[weakref.ref[Any]]" = []


def note(level: int) -> None:
    """Something that trains happened now: on the function being called, if any. Never raises."""
    moved[0] += 1
    try:
        fn = steptime.calling.__dict__.get("fn")
        marks = getattr(fn, "__dict__", None)
        if marks is not None and marks.get(BY, 0) < level:
            marks[BY] = level
    except Exception as exc:
        autolog.fail("train function recognition", exc)


def trains(fn: Any) -> bool:
    """Whether ``fn``, whose call just moved ``moved``, is a train function (from now on)."""
    level = fn.__dict__.get(BY)
    if level is None:  # nested in the function being called: what it did is that function's
        return False
    if level >= GRADIENTS:
        if _strongest[0] < GRADIENTS:
            for ref in _by_input:  # an evaluation read its input before training began
                other = ref()
                if other is not None:
                    other.__dict__.pop(steptime.TRAIN_MARK, None)
            del _by_input[:]
        _strongest[0] = max(_strongest[0], level)
        return True
    if _strongest[0] >= GRADIENTS:
        return False
    _strongest[0] = max(_strongest[0], level)
    _by_input.append(weakref.ref(fn))
    return True


def install(module: Callable[[str], Any], wrap: Callable[..., None]) -> None:
    """Watch ``GradientTape.gradient`` and the iterator reads (after ``stepwatch``, which times them)."""
    backprop = module("tensorflow.python.eager.backprop")
    wrap(getattr(backprop, "GradientTape", None), "gradient", _noting(GRADIENTS))
    gen_dataset = module("tensorflow.python.ops.gen_dataset_ops")
    for name in ("iterator_get_next", "iterator_get_next_as_optional"):
        original = getattr(gen_dataset, name, None) if gen_dataset is not None else None
        if original is not None and not getattr(original, "_distlaunch_noted", False):
            wrapper = functools.wraps(original)(_noting(INPUT, only_in_calls=True)(original))
            wrapper._distlaunch_noted = True  # type: ignore[attr-defined]
            setattr(gen_dataset, name, wrapper)


def _noting(level: int, only_in_calls: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        def noted(*args: Any, **kwargs: Any) -> Any:
            # a Python loop's own iterator reads eagerly between calls: no function's
            if not only_in_calls or steptime.calling.__dict__.get("fn") is not None:
                note(level)
            return original(*args, **kwargs)
        return noted
    return make
