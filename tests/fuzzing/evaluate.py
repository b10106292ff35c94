"""The numpy reference run of a draw, and the index errors a ``raise``-mode run must report.

``reference_eval`` runs every step through ``tests/reference.py`` (an independent element by
element implementation of the semantics), stopping each chain of steps at the first step whose
index is out of range in ``mode="raise"``; such a step's first bad position (row-major) and
value are the acceptable errors.
"""
from __future__ import annotations

import numpy as np

from fuzzing.spec import INDEXING_METHODS, Spec, Step
from fuzzing.values import tuple_sizes


def addressed_sizes(step: Step, env) -> np.ndarray | None:
    """For an indexing step, the size addressed by each element of its index (broadcastable)."""
    if step.method not in INDEXING_METHODS:
        return None
    x, idx = env[step.args[0]], env[step.args[1]]
    kw = step.kwargs
    if step.method == "take":
        if kw.get("axis", 0) is None:
            return np.array(x.size)
        return np.array(x.shape[kw.get("axis", 0)])
    if step.method in ("gather", "scatter"):
        return np.array(x.shape[kw.get("axis", 0)])
    layout = kw.get("index_layout", "last")
    m = idx.shape[0] if layout == "first" else idx.shape[-1]
    if kw.get("dims") is not None:
        axes = [d % x.ndim for d in kw["dims"]]
    else:
        b = kw.get("batch_dims", 0)
        axes = list(range(b, b + m))
    return tuple_sizes(x.shape, axes, layout, idx.shape)


def first_bad(step: Step, env):
    """(position, value) of the first out-of-range index value in row-major order, or None."""
    sizes = addressed_sizes(step, env)
    idx = env[step.args[1]].astype(object)  # Python integers: uint64 values keep their true value
    sizes = np.broadcast_to(sizes, idx.shape)
    bad = (idx < -sizes) | (idx >= sizes)
    if not bad.any():
        return None
    flat = int(np.argmax(bad.reshape(-1)))
    pos = tuple(int(p) for p in np.unravel_index(flat, idx.shape)) if idx.ndim else ()
    return pos, int(idx.reshape(-1)[flat])


def reference_eval(spec: Spec):
    """Run the draw through the numpy reference. Returns (values by name, acceptable errors):
    acceptable errors are ``(index input name, position, value)`` for every step that would
    stop the run in ``mode="raise"`` and does not depend on a step that already stopped it."""
    env = dict(spec.inputs)
    errors, poisoned = [], set()
    for st in spec.steps:
        if any(a in poisoned for a in st.args):
            poisoned.add(st.out)
            continue
        if st.method in INDEXING_METHODS and st.kwargs.get("mode") == "raise":
            bad = first_bad(st, env)
            if bad is not None:
                errors.append((st.args[1], bad[0], bad[1]))
                poisoned.add(st.out)
                continue
        env[st.out] = _reference_step(st, [env[a] for a in st.args])
    return env, errors


def _reference_step(st: Step, args: list) -> np.ndarray:
    import reference as R

    if st.method == "fill_constant":
        return np.full(st.kwargs["shape"], st.kwargs["value"], dtype=st.kwargs["dtype"])
    if st.method == "reshape":
        return args[0].reshape(st.kwargs["shape"])
    with np.errstate(all="ignore"):
        return getattr(R, st.method)(*args, **st.kwargs)
