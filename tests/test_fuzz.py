"""Randomized differential test: random programs on every backend against independent references.

Each draw picks an operator form (take, gather, gather_nd slice and element forms, scatter,
scatter_nd slice and element forms), a data dtype, an index dtype, a mode and (for scatters) a
reduction, then ranks 0-6, shapes with size-0 and size-1 dimensions, axes and batch_dims (negative
spellings too), dims, index layouts, fill values and index values (in range, negative, out of
range, the index dtype's extremes). Sometimes an operand is itself computed (a take, a reshape or
a fill_constant in front), and sometimes every intermediate is an output too, so fused and
materialised producers are both exercised.

Every output is compared with the numpy reference (``tests/reference.py``); where installed,
the operator's result is also compared with PyTorch (``index_select``, ``gather``, ``scatter``,
``scatter_reduce``) and with ONNX's reference evaluator (``Gather``, ``GatherElements``,
``GatherND``, ``ScatterElements``, ``ScatterND``) on the draws those libraries define. In
``mode="raise"`` the error must name an index input, the first bad position in row-major order
and the bad value; inputs must never change.

The draws run in a child process, so a crash is reported (with the draw that caused it) instead
of killing the test run. The run is seeded and its length is a number of draws, so that
``pytest -q`` checks the same programs on every machine, however fast:

- ``CINNLITE_FUZZ_DRAWS`` or ``pytest --fuzz-draws=N``: draws per backend (default
  ``DEFAULT_DRAWS``).
- ``CINNLITE_FUZZ_SEED`` or ``pytest --fuzz-seed=N``: the seed (default fixed); draw ``k`` of
  seed ``s`` is always the same program and data.
- ``CINNLITE_FUZZ_SECONDS`` or ``pytest --fuzz-seconds=N``: an opt-in soak run that draws until
  N seconds per backend are spent instead (at least the fixed draws). Its reach depends on the
  machine's speed, which is why the default run never uses it.

On a failure the draw is shrunk (the same choices re-drawn with fewer and smaller dimensions,
then simpler values) and printed as a self-contained Python snippet.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SEED = 20240611
DEFAULT_DRAWS = 200  # per backend; every draw compiles a program, some several

KINDS = ("take", "gather", "gather_nd", "gather_nd_dims", "scatter", "scatter_nd", "scatter_nd_dims")
DATA_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64")
INDEX_DTYPES = ("int32", "int64")
MODES = ("raise", "clip", "wrap", "fill")
REDUCTIONS = ("none", "add", "mul", "max", "min", "mean")
GATHERS = ("take", "gather", "gather_nd")
MAX_RANK, MAX_DIM = 6, 5
ELEMENT_CAP = 600  # per tensor: the numpy reference visits elements one by one
BIG_ELEMENT_CAP = 1 << 17  # big draws: enough work for the backends to split across threads


# =================================================================================================
# A draw: input arrays and a short list of NetBuilder calls
# =================================================================================================


@dataclass
class Step:
    out: str
    method: str          # a NetBuilder method
    args: tuple          # names of tensors
    kwargs: dict


@dataclass
class Spec:
    inputs: dict                      # name -> np.ndarray
    steps: list
    outputs: list                     # names
    choices: dict = field(default_factory=dict)

    @property
    def main(self) -> Step:
        return self.steps[-1]

    def size(self) -> tuple:
        """What shrinking minimises: total elements, then total rank."""
        return (sum(a.size for a in self.inputs.values()), sum(a.ndim for a in self.inputs.values()))


# -- shapes and values --------------------------------------------------------------------------


def rand_dim(rng, maxd: int) -> int:
    u = rng.random()
    if u < 0.05:
        return 0
    if u < 0.30 or maxd <= 1:
        return min(1, maxd)
    return int(rng.integers(2, maxd + 1))


def rand_shape(rng, rank: int, maxd: int) -> tuple:
    return tuple(rand_dim(rng, maxd) for _ in range(rank))


def at_most(rng, n: int) -> int:
    """A size no bigger than ``n``: usually ``n`` itself."""
    return n if rng.random() < 0.7 else int(rng.integers(0, n + 1))


def small_signed(rng, shape, dtype, lo, hi):
    info = np.iinfo(dtype)
    return rng.integers(max(lo, int(info.min)), min(hi, int(info.max)) + 1, size=shape).astype(dtype)


def data(rng, shape, dtype: str, kind: str) -> np.ndarray:
    return np.array(_data(rng, shape, dtype, kind), dtype=dtype).reshape(shape)


def _data(rng, shape, dtype: str, kind: str) -> np.ndarray:
    """Values of ``dtype``. kind: "any" (full integer range; floats with inf, -0.0 and NaN),
    "nonan" (as any, no NaN), "small" (sums exact in any float dtype), "factors" (powers of
    two: products exact)."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        if kind in ("small", "factors"):
            return small_signed(rng, shape, dt, -3, 3)
        info = np.iinfo(dt)
        if rng.random() < 0.5:
            return small_signed(rng, shape, dt, -20, 20)
        return rng.integers(int(info.min), int(info.max), size=shape, endpoint=True).astype(dt)
    if kind == "small":
        return (rng.integers(-16, 17, size=shape) / 4).astype(dt)
    if kind == "factors":
        return rng.choice(np.array([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0]), size=shape).astype(dt)
    with np.errstate(over="ignore"):
        values = np.asarray(rng.standard_normal(shape) * 10).astype(dt)
    specials = np.array([np.inf, -np.inf, -0.0, 0.0] + ([np.nan] if kind == "any" else []), dtype=dt)
    spots = rng.random(values.shape) < 0.08
    values[spots] = specials[rng.integers(len(specials), size=int(spots.sum()))]
    return values


def index_values(rng, shape, sizes, dtype: str, in_range: bool) -> np.ndarray:
    """Index values for ``shape``; ``sizes`` is an array broadcastable to ``shape`` holding the
    size of the axis each element addresses. Out of range (unless ``in_range``): ``size``,
    ``size+1``, ``-size-1``, far beyond on both sides, the dtype's extremes, anything."""
    sizes = np.broadcast_to(np.asarray(sizes, dtype=np.int64), shape).astype(np.int64)
    info = np.iinfo(dtype)
    inside = rng.integers(-(2**62), 2**62, size=shape) % np.maximum(2 * sizes, 1) - sizes
    p_bad = 0.0 if in_range else float(rng.choice([0.1, 0.3, 1.0]))
    bad = (rng.random(shape) < p_bad) | (sizes == 0)
    candidates = np.stack([sizes, sizes + 1, -sizes - 1, 3 * sizes + 2, -3 * sizes - 5,
                           np.full(shape, int(info.min)), np.full(shape, int(info.max)),
                           rng.integers(int(info.min), int(info.max), size=shape, endpoint=True)])
    pick = rng.integers(0, len(candidates), size=shape)
    out_of_range = np.take_along_axis(candidates, pick[None], axis=0)[0]
    return np.where(bad, out_of_range, inside).astype(dtype)


def fill_value_for(rng, dtype: str):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return bool(rng.random() < 0.5)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return int(rng.choice([0, 1, 7, int(info.max), int(info.min)]))
    return float(rng.choice([0.0, -2.5, 1.0e3, np.inf, np.nan]))


# -- the operator forms ---------------------------------------------------------------------------


def choose(rng, k: int) -> dict:
    """The discrete choices of draw ``k``: operator form and data dtype cycle, the rest is random."""
    kind = KINDS[k % len(KINDS)]
    dtype = DATA_DTYPES[(k // len(KINDS)) % len(DATA_DTYPES)]
    if rng.random() < 0.3:
        dtype = str(rng.choice(DATA_DTYPES))
    c = dict(kind=kind, dtype=dtype, index_dtype=str(rng.choice(INDEX_DTYPES)), mode=str(rng.choice(MODES)),
             layout=str(rng.choice(["last", "first"])), in_range=bool(rng.random() < 0.6),
             x_producer=str(rng.choice(["input", "input", "input", "take", "reshape", "fill"])),
             src_producer=str(rng.choice(["input", "input", "input", "take", "fill"])),
             index_producer=str(rng.choice(["input", "input", "input", "input", "take"])),
             tiny_axes=bool(rng.random() < 0.1),
             all_outputs=bool(rng.random() < 0.35), negative_attrs=bool(rng.random() < 0.4),
             axis_none=bool(rng.random() < 0.12), big=bool(rng.random() < 0.07),
             options=dict(opt_level=int(rng.choice([0, 2, 3, 3])), threads=[None, None, 1, 3][int(rng.integers(4))],
                          fuse=bool(rng.random() < 0.75)))
    c["reduce"] = "none" if dtype == "bool" else str(rng.choice(REDUCTIONS))
    if c["mode"] == "raise" and rng.random() < 0.5:
        c["in_range"] = True
    if c["tiny_axes"]:
        # A raise-mode chain into axes of size 0 and 1: the computed index is out of range
        # wherever the axis is empty, and the producer's own bad index must still be the error.
        c.update(index_producer="take", mode="raise", producer_mode="raise")
    return c


def _neg(rng, value: int, n: int, allow: bool) -> int:
    """``value`` or its negative spelling ``value - n``."""
    return value - n if allow and rng.random() < 0.5 else value


def _tuple_sizes(x_shape, axes, layout, index_shape):
    """Per-element addressed sizes for an index whose tuple axis holds components ``axes``."""
    comp = np.array([x_shape[a] for a in axes], dtype=np.int64)
    if layout == "first":
        return comp.reshape((len(axes),) + (1,) * (len(index_shape) - 1))
    return comp


def realize(rng, c: dict, max_rank: int = MAX_RANK, max_dim: int = MAX_DIM) -> Spec:
    """Shapes, attributes and values for the choices ``c`` within the given caps."""
    for _attempt in range(200):
        if _attempt == 100:
            c = dict(c, big=False)
        spec = _realize_once(rng, c, max_rank, max_dim)
        if spec is not None:
            return spec
        max_dim = max(1, max_dim - 1) if _attempt % 3 == 2 else max_dim
    raise AssertionError("could not draw shapes within the element cap")


def _realize_once(rng, c, max_rank, max_dim):
    kind, mode, layout, neg = c["kind"], c["mode"], c["layout"], c["negative_attrs"]
    big = c.get("big", False)
    if big:
        max_rank = min(max_rank, 3)

    def dim():
        """A dimension; in big draws mostly 8-63, so that work splits across threads; with
        ``tiny_axes`` only 0 or 1."""
        if c.get("tiny_axes"):
            return int(rng.random() < 0.6)
        return int(rng.integers(8, 64)) if big and rng.random() < 0.8 else rand_dim(rng, max_dim)

    def shape_of(rank):
        return tuple(dim() for _ in range(rank))

    need_nonempty = mode in ("clip", "wrap")
    kw = dict(mode=mode)
    src_shape = None

    def ranked(lo):
        return int(rng.integers(min(lo, max_rank), max_rank + 1))

    if kind == "take":
        r = ranked(0 if c["axis_none"] else 1)
        x_shape = list(shape_of(r))
        q = int(rng.integers(0, min(4, max_rank) + 1))
        if c["axis_none"] or r == 0:
            kw["axis"] = None
            b = 0
            if need_nonempty:
                x_shape = [max(1, d) for d in x_shape]
            idx_shape = shape_of(q)
            sizes = math.prod(x_shape)
        else:
            axis = int(rng.integers(0, r))
            b = int(rng.integers(0, min(q, axis) + 1))
            if need_nonempty:
                x_shape[axis] = max(1, x_shape[axis])
            idx_shape = tuple(x_shape[:b]) + shape_of(q - b)
            kw["axis"] = _neg(rng, axis, r, neg)
            kw["batch_dims"] = _neg(rng, b, q, neg)
            sizes = x_shape[axis]
        out_size = math.prod(idx_shape)
        if kw["axis"] is not None:
            out_size = math.prod(x_shape[:axis]) * math.prod(idx_shape[b:]) * math.prod(x_shape[axis + 1:])
        index_sizes = sizes
    elif kind == "gather":
        r = ranked(1)
        x_shape = list(shape_of(r))
        axis = int(rng.integers(0, r))
        if need_nonempty:
            x_shape[axis] = max(1, x_shape[axis])
        idx_shape = tuple(dim() if j == axis else at_most(rng, x_shape[j]) for j in range(r))
        kw["axis"] = _neg(rng, axis, r, neg)
        index_sizes = x_shape[axis]
        out_size = math.prod(idx_shape)
    elif kind == "gather_nd":
        r = ranked(1)
        x_shape = list(shape_of(r))
        b = int(rng.integers(0, r))
        m = int(rng.integers(0, r - b + 1)) if rng.random() < 0.2 else int(rng.integers(min(1, r - b), r - b + 1))
        if need_nonempty:
            for k in range(m):
                x_shape[b + k] = max(1, x_shape[b + k])
        lead = tuple(x_shape[:b]) + shape_of(int(rng.integers(0, 3)))
        idx_shape = lead + (m,)
        kw.update(batch_dims=b, index_layout=layout)
        index_sizes = _tuple_sizes(x_shape, range(b, b + m), "last", idx_shape)
        out_size = math.prod(lead) * math.prod(x_shape[b + m:])
    elif kind == "gather_nd_dims":
        r = ranked(1) if rng.random() < 0.95 else 0
        x_shape = list(shape_of(r))
        n_dims = int(rng.integers(min(1, r), r + 1))
        dims = [int(d) for d in rng.permutation(r)[:n_dims]]
        if need_nonempty:
            for d in dims:
                x_shape[d] = max(1, x_shape[d])
        out_shape = tuple(dim() if j in dims else at_most(rng, x_shape[j]) for j in range(r))
        idx_shape = out_shape + (n_dims,)
        kw.update(dims=[_neg(rng, d, r, neg) for d in dims], index_layout=layout)
        index_sizes = _tuple_sizes(x_shape, dims, "last", idx_shape)
        out_size = math.prod(out_shape)
    elif kind == "scatter":
        r = ranked(1)
        x_shape = list(shape_of(r))
        axis = int(rng.integers(0, r))
        if need_nonempty:
            x_shape[axis] = max(1, x_shape[axis])
        idx_shape = tuple(dim() if j == axis else at_most(rng, x_shape[j]) for j in range(r))
        src_shape = tuple(d + (int(rng.integers(0, 2)) if rng.random() < 0.3 else 0) for d in idx_shape)
        kw.update(axis=_neg(rng, axis, r, neg), reduce=c["reduce"])
        index_sizes = x_shape[axis]
        out_size = math.prod(x_shape)
    elif kind == "scatter_nd":
        r = ranked(0)
        x_shape = list(shape_of(r))
        m = int(rng.integers(0, r + 1)) if rng.random() < 0.2 else int(rng.integers(min(1, r), r + 1))
        if need_nonempty:
            for k in range(m):
                x_shape[k] = max(1, x_shape[k])
        lead = shape_of(int(rng.integers(0, 3)))
        idx_shape = lead + (m,)
        src_shape = lead + tuple(x_shape[m:])
        kw.update(reduce=c["reduce"], index_layout=layout)
        index_sizes = _tuple_sizes(x_shape, range(m), "last", idx_shape)
        out_size = math.prod(x_shape)
    elif kind == "scatter_nd_dims":
        r = ranked(1)
        x_shape = list(shape_of(r))
        n_dims = int(rng.integers(1, r + 1))
        dims = [int(d) for d in rng.permutation(r)[:n_dims]]
        if need_nonempty:
            for d in dims:
                x_shape[d] = max(1, x_shape[d])
        src_shape = tuple(dim() if j in dims else at_most(rng, x_shape[j]) for j in range(r))
        idx_shape = src_shape + (n_dims,)
        kw.update(dims=[_neg(rng, d, r, neg) for d in dims], reduce=c["reduce"], index_layout=layout)
        index_sizes = _tuple_sizes(x_shape, dims, "last", idx_shape)
        out_size = math.prod(x_shape)
    else:  # pragma: no cover
        raise AssertionError(kind)

    x_shape = tuple(x_shape)
    sizes_all = [math.prod(x_shape), math.prod(idx_shape), out_size] + ([math.prod(src_shape)] if src_shape else [])
    if max(sizes_all) > (BIG_ELEMENT_CAP if big else ELEMENT_CAP):
        return None

    # Values. Index values are drawn with the tuple axis last, then laid out.
    idx = index_values(rng, idx_shape, index_sizes, c["index_dtype"], c["in_range"])
    if kind in ("gather_nd", "gather_nd_dims", "scatter_nd", "scatter_nd_dims") and layout == "first":
        idx = np.ascontiguousarray(np.moveaxis(idx, -1, 0))
    reduce = kw.get("reduce")
    if kind in GATHERS or kind == "gather_nd_dims":
        kind_of_data = "any"
        if mode == "fill":
            kw["fill_value"] = fill_value_for(rng, c["dtype"])
    else:
        kind_of_data = {"none": "any", "add": "small", "mean": "small", "mul": "factors",
                        "max": "nonan", "min": "nonan"}[reduce]
        if np.dtype(c["dtype"]).kind in "iu":
            kind_of_data = "any"  # integer results do not depend on the order (a mean sums in int64)
    dtype = c["dtype"]
    inputs = {"x": data(rng, x_shape, dtype, kind_of_data), "idx": idx}
    if src_shape is not None:
        inputs["src"] = data(rng, src_shape, dtype, kind_of_data)

    c = dict(c, data_kind=kind_of_data)
    method = {"gather_nd_dims": "gather_nd", "scatter_nd_dims": "scatter_nd"}.get(kind, kind)
    args = ("x", "idx", "src") if src_shape is not None else ("x", "idx")
    steps = []
    renamed = _add_producers(rng, c, inputs, steps)
    steps.append(Step("out", method, tuple(renamed.get(a, a) for a in args), kw))
    outputs = [s.out for s in steps] if c["all_outputs"] else ["out"]
    return Spec(inputs, steps, outputs, dict(c))


def _add_producers(rng, c, inputs, steps):
    """Replace some operands by computed tensors holding the same kind of values."""
    renamed = {}
    if c["x_producer"] != "input":
        x = inputs.pop("x")
        renamed["x"] = "x_made"
        if c["x_producer"] == "fill" or x.size == 0:
            value = x.reshape(-1)[0].item() if x.size else (False if x.dtype == np.bool_ else 0)
            if isinstance(value, float) and not math.isfinite(value):
                value = 1.5
            steps.append(Step("x_made", "fill_constant", (), dict(shape=x.shape, value=value, dtype=x.dtype.name)))
        elif c["x_producer"] == "reshape" or x.ndim == 0:
            inputs["x_flat"] = x.reshape(-1)
            steps.append(Step("x_made", "reshape", ("x_flat",), dict(shape=x.shape)))
        else:
            _take_producer(rng, c, inputs, steps, x, "x", "x_made")
    if c["src_producer"] != "input" and "src" in inputs:
        s = inputs.pop("src")
        renamed["src"] = "src_made"
        if c["src_producer"] == "fill" or s.ndim == 0 or s.size == 0:
            value = s.reshape(-1)[0].item() if s.size else (False if s.dtype == np.bool_ else 1)
            if isinstance(value, float) and not math.isfinite(value):
                value = -0.5
            steps.append(Step("src_made", "fill_constant", (), dict(shape=s.shape, value=value, dtype=s.dtype.name)))
        else:
            _take_producer(rng, c, inputs, steps, s, "src", "src_made")
    if c["index_producer"] == "take" and inputs["idx"].ndim >= 1 and inputs["idx"].size > 0:
        _take_producer(rng, c, inputs, steps, inputs.pop("idx"), "idx", "idx_made")
        renamed["idx"] = "idx_made"
    return renamed


def _take_producer(rng, c, inputs, steps, want, base, out):
    """``out = take(base_src, perm, axis=0, mode=...)`` where the rows of ``base_src`` include
    every row of ``want`` (so the consumer sees the same values) plus a few others."""
    rows = want.shape[0]
    extra = int(rng.integers(0, 3))
    order = rng.permutation(rows + extra)
    source = np.empty((rows + extra,) + want.shape[1:], want.dtype)
    for k in range(rows + extra):
        source[order[k]] = want[k] if k < rows else want[k % rows]
    perm = order[:rows].astype(c["index_dtype"])
    mode = c.get("producer_mode") or str(rng.choice(MODES))
    if rng.random() < 0.5:
        perm = np.where(perm >= 0, perm - (rows + extra), perm).astype(c["index_dtype"])  # negative spelling
    if mode != "raise" and rng.random() < 0.3:
        perm = perm + (rows + extra) * (int(mode == "wrap") * 3)  # still lands on the same rows
    if mode == "fill" and rows > 0 and rng.random() < 0.5:
        perm = perm.copy()
        perm[int(rng.integers(rows))] = rows + extra + 5  # a filled row: the consumer sees fill values
    if mode == "raise" and rows > 0 and rng.random() < (0.6 if c.get("tiny_axes") else 0.2):
        perm = perm.copy()
        perm[int(rng.integers(rows))] = -(rows + extra) - 1  # a producer error
    inputs[f"{base}_rows"] = source
    inputs[f"{base}_perm"] = perm
    kw = dict(axis=0, mode=mode)
    if mode == "fill":
        kw["fill_value"] = 0 if want.dtype != np.bool_ else False
    steps.append(Step(out, "take", (f"{base}_rows", f"{base}_perm"), kw))


# =================================================================================================
# Evaluating a draw: reference, cinnlite, PyTorch, ONNX
# =================================================================================================


def addressed_sizes(step: Step, env) -> np.ndarray | None:
    """For an indexing step, the size addressed by each element of its index (broadcastable)."""
    if step.method not in ("take", "gather", "gather_nd", "scatter", "scatter_nd"):
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
    return _tuple_sizes(x.shape, axes, layout, idx.shape)


def first_bad(step: Step, env):
    """(position, value) of the first out-of-range index value in row-major order, or None."""
    sizes = addressed_sizes(step, env)
    idx = env[step.args[1]].astype(np.int64)
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
    import reference as R

    env = dict(spec.inputs)
    errors, poisoned = [], set()
    for st in spec.steps:
        if any(a in poisoned for a in st.args):
            poisoned.add(st.out)
            continue
        if st.method in ("take", "gather", "gather_nd", "scatter", "scatter_nd") and st.kwargs.get("mode") == "raise":
            bad = first_bad(st, env)
            if bad is not None:
                errors.append((st.args[1], bad[0], bad[1]))
                poisoned.add(st.out)
                continue
        args = [env[a] for a in st.args]
        if st.method == "fill_constant":
            env[st.out] = np.full(st.kwargs["shape"], st.kwargs["value"], dtype=st.kwargs["dtype"])
        elif st.method == "reshape":
            env[st.out] = args[0].reshape(st.kwargs["shape"])
        else:
            with np.errstate(all="ignore"):
                env[st.out] = getattr(R, st.method)(*args, **st.kwargs)
    return env, errors


def compile_options(spec: Spec) -> dict:
    """The draw's compile options that this cinnlite's ``compile`` takes."""
    import inspect

    import cinnlite as cl

    accepted = inspect.signature(cl.compile).parameters
    return {k: v for k, v in spec.choices.get("options", {}).items() if k in accepted}


def build(spec: Spec, backend: str):
    import cinnlite as cl

    b = cl.NetBuilder("fuzz")
    t = {name: b.create_input(arr.dtype.name, arr.shape, name) for name, arr in spec.inputs.items()}
    for st in spec.steps:
        t[st.out] = getattr(b, st.method)(*[t[a] for a in st.args], **st.kwargs, name=st.out)
    return cl.compile(b.build(outputs=[t[o] for o in spec.outputs]), target=backend, **compile_options(spec))


class Failure(Exception):
    """A draw that cinnlite gets wrong. ``category`` is what shrinking must preserve."""

    def __init__(self, category: str, message: str):
        super().__init__(f"{category}: {message}")
        self.category = category
        self.message = message


def same(got, want, exact=True) -> str | None:
    """None if equal, else a description. NaN equals NaN; floats compare exactly unless not exact."""
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if got.dtype.kind == "f":
        g, w = got.astype(np.float64), want.astype(np.float64)
        both_nan = np.isnan(g) & np.isnan(w)
        if exact:
            ok = both_nan | (g == w)
        else:
            tol = {2: 2e-3, 4: 1e-5, 8: 1e-12}[got.dtype.itemsize]
            with np.errstate(invalid="ignore"):
                ok = both_nan | (g == w) | (np.abs(g - w) <= tol * np.maximum(np.abs(w), 1.0))
    else:
        ok = got == want
    if ok.all():
        return None
    p = tuple(int(i) for i in np.argwhere(~ok)[0]) if ok.ndim else ()
    return f"{int((~ok).sum())} element(s) differ; first at {p}: got {got[p]!r}, expected {want[p]!r}"


def revalue(rng, spec: Spec, in_range: bool) -> Spec:
    """The same program with new values: data inputs re-drawn with the draw's kind of data, index
    inputs that a step reads directly re-drawn for the sizes that step addresses."""
    inputs = dict(spec.inputs)
    shapes_env = dict(spec.inputs)
    for st in spec.steps:  # only the shapes of computed tensors matter here
        if st.method == "fill_constant":
            shapes_env[st.out] = np.zeros(st.kwargs["shape"], st.kwargs["dtype"])
        elif st.method == "reshape":
            shapes_env[st.out] = shapes_env[st.args[0]].reshape(st.kwargs["shape"])
        elif st.out == "out":
            break
        else:
            x, i = shapes_env[st.args[0]], shapes_env[st.args[1]]
            shapes_env[st.out] = np.zeros((i.shape[0],) + x.shape[1:], x.dtype)
    readers = {st.args[1]: st for st in spec.steps if len(st.args) >= 2}
    for name, arr in spec.inputs.items():
        if name in readers:
            st = readers[name]
            sizes = addressed_sizes(st, shapes_env)
            inputs[name] = index_values(rng, arr.shape, sizes, arr.dtype.name, in_range)
        elif name.endswith("_rows") and name.startswith("idx"):
            continue  # rows of a computed index keep their values
        elif arr.dtype.kind != "i" or name in ("x", "src", "x_flat", "x_rows", "src_rows"):
            inputs[name] = data(rng, arr.shape, arr.dtype.name, spec.choices.get("data_kind", "any"))
    return Spec(inputs, spec.steps, spec.outputs, spec.choices)


def check(spec: Spec, backend: str, externals=True, stats=None, variants=0, rng=None):
    """Raise Failure if cinnlite disagrees with a reference on this draw, or (with ``variants``)
    on the same compiled program run on that many re-drawn sets of values. The Failure's
    ``spec`` is the set of values that failed."""
    try:
        exe = build(spec, backend)
    except Exception as e:  # noqa: BLE001 - every draw is a valid program
        f = Failure("build or compile failed", f"{type(e).__module__}.{type(e).__name__}: {e}")
        f.spec = spec
        raise f from e
    runs = [spec] + [revalue(rng, spec, in_range=bool(v % 2)) for v in range(variants)]
    for s in runs:
        try:
            run_and_compare(exe, s, externals, stats)
        except Failure as f:
            f.spec = s
            raise
        if stats is not None:
            stats["runs"] = stats.get("runs", 0) + 1


def run_and_compare(exe, spec: Spec, externals, stats):
    import cinnlite as cl

    env, errors = reference_eval(spec)
    feeds = {k: v.copy() for k, v in spec.inputs.items()}
    try:
        got = exe.run(feeds)
        raised = None
    except cl.IndexOutOfRangeError as e:
        got, raised = None, e
    except Exception as e:  # noqa: BLE001
        raise Failure("unexpected exception", f"{type(e).__module__}.{type(e).__name__}: {e}\n"
                      + "".join(traceback.format_exception(e)[-3:])) from e
    for name, arr in spec.inputs.items():
        if same(feeds[name], arr) is not None:
            raise Failure("input modified", f"input {name!r} changed during the call")
    if errors:
        if raised is None:
            raise Failure("no IndexError", f"expected an IndexOutOfRangeError for one of {errors}")
        found = (raised.input, tuple(raised.position), raised.value)
        if found not in [(n, tuple(p), v) for n, p, v in errors]:
            raise Failure("wrong IndexError", f"raised {raised} -> {found}; acceptable: {errors}")
        if stats is not None:
            stats["raised"] = stats.get("raised", 0) + 1
        return
    if raised is not None:
        raise Failure("unexpected IndexError", str(raised))
    for name in spec.outputs:
        diff = same(got[name], env[name])
        if diff is not None:
            raise Failure("wrong result", f"output {name!r}: {diff}")
    if externals:
        for lib, fn in (("torch", torch_value), ("onnx", onnx_value)):
            try:
                value = fn(spec.main, env)
            except ExternalCannot as why:
                if stats is not None:
                    stats.setdefault(f"{lib} skipped", {}).setdefault(str(why), 0)
                    stats[f"{lib} skipped"][str(why)] += 1
                continue
            diff = same(got["out"], value, exact=False)
            if diff is not None:
                raise Failure(f"differs from {lib}", diff)
            if stats is not None:
                stats[f"{lib} compared"] = stats.get(f"{lib} compared", 0) + 1


# -- external references ---------------------------------------------------------------------------


class ExternalCannot(Exception):
    """The external library does not define (or cannot evaluate) this draw."""


def _norm_axis(axis, r):
    return axis + r if axis < 0 else axis


def _resolved(step: Step, env, allow_negative: bool):
    """The main step's index with every out-of-range value resolved by the mode (clip, wrap),
    or ExternalCannot where the mode has no counterpart elsewhere (raise, fill). In-range
    negative values stay negative only if ``allow_negative``."""
    raw = env[step.args[1]].astype(np.int64)
    sizes = np.broadcast_to(addressed_sizes(step, env), raw.shape).astype(np.int64)
    inside = (raw >= -sizes) & (raw < sizes)
    mode = step.kwargs.get("mode", "raise")
    if inside.all():
        return raw if allow_negative else np.where(raw < 0, raw + sizes, raw)
    if mode in ("raise", "fill"):
        raise ExternalCannot(f"{mode} with an out-of-range index")
    if mode == "clip":
        out = np.where(raw < -sizes, 0, np.where(raw >= sizes, sizes - 1, raw))
    else:
        out = np.where(inside, raw, raw % np.maximum(sizes, 1))
    return out if allow_negative else np.where(out < 0, out + sizes, out)


def _tuples_last(step, idx):
    return np.moveaxis(idx, 0, -1) if step.kwargs.get("index_layout", "last") == "first" else idx


def _scatter_targets(step: Step, env, idx):
    """The flat target of every update (element scatters) or every tuple (nd slice scatters)."""
    x = env[step.args[0]]
    if step.method == "scatter":
        axis = _norm_axis(step.kwargs.get("axis", 0), x.ndim)
        grid = list(np.indices(idx.shape, sparse=False))
        grid[axis] = idx
        return np.ravel_multi_index(tuple(grid), x.shape).reshape(-1)
    tl = _tuples_last(step, idx)
    m = tl.shape[-1]
    return np.ravel_multi_index(tuple(tl[..., k] for k in range(m)), x.shape[:m]).reshape(-1)


def _has_duplicates(targets) -> bool:
    return len(np.unique(targets)) != len(targets)


def torch_value(step: Step, env):
    try:
        import torch
    except ImportError:
        raise ExternalCannot("torch is not installed") from None
    x = env[step.args[0]]
    kw = step.kwargs
    if any(a.size == 0 for a in (x, env[step.args[1]])):
        raise ExternalCannot("empty tensors")

    def T(a):
        return torch.from_numpy(np.array(a, copy=True))

    try:
        if step.method == "take":
            idx = env[step.args[1]]
            b = kw.get("batch_dims", 0)
            if (b + idx.ndim if b < 0 else b) != 0:
                raise ExternalCannot("index_select has no batch_dims")
            axis = kw.get("axis", 0)
            xs = x.reshape(-1) if axis is None else x
            axis = 0 if axis is None else _norm_axis(axis, x.ndim)
            pos = _resolved(step, env, allow_negative=False)
            out = T(xs).index_select(axis, T(pos.reshape(-1)))
            return out.reshape(xs.shape[:axis] + idx.shape + xs.shape[axis + 1:]).numpy()
        if step.method == "gather":
            pos = _resolved(step, env, allow_negative=False)
            return torch.gather(T(x), _norm_axis(kw.get("axis", 0), x.ndim), T(pos)).numpy()
        if step.method == "scatter":
            pos = _resolved(step, env, allow_negative=False)
            src = env[step.args[2]]
            axis = _norm_axis(kw.get("axis", 0), x.ndim)
            reduce = kw.get("reduce", "none")
            if reduce == "none":
                if _has_duplicates(_scatter_targets(step, env, pos)):
                    raise ExternalCannot("torch.scatter is undefined for duplicate targets")
                return T(x).scatter(axis, T(pos), T(src)).numpy()
            if reduce == "mean" and x.dtype.kind in "iu":
                raise ExternalCannot("torch's integer mean floors; ours rounds toward zero")
            name = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin", "mean": "mean"}[reduce]
            return T(x).scatter_reduce(axis, T(pos), T(src), reduce=name, include_self=True).numpy()
    except RuntimeError as e:
        if "not implemented for" in str(e):
            raise ExternalCannot(f"torch: {str(e).splitlines()[0]}") from None
        raise
    raise ExternalCannot(f"torch has no counterpart of {step.method} in this form")


def onnx_value(step: Step, env):
    try:
        from onnx import helper
        from onnx.reference import ReferenceEvaluator
    except ImportError:
        raise ExternalCannot("onnx is not installed") from None
    x, idx = env[step.args[0]], env[step.args[1]]
    kw = step.kwargs
    if x.size == 0 or idx.size == 0 or x.ndim == 0:
        raise ExternalCannot("empty or rank-0 tensors")
    if any(d == 0 for d in idx.shape):
        raise ExternalCannot("empty index")
    mode = kw.get("mode", "raise")
    pos = _resolved(step, env, allow_negative=mode in ("raise", "fill"))
    feeds = {"x": x}
    attrs = {}
    if step.method == "take":
        b = kw.get("batch_dims", 0)
        if (b + idx.ndim if b < 0 else b) != 0:
            raise ExternalCannot("ONNX Gather has no batch_dims")
        axis = kw.get("axis", 0)
        if axis is None:
            feeds["x"], axis = x.reshape(-1), 0
        op, feeds["i"], attrs = "Gather", pos.astype(idx.dtype), dict(axis=axis)
    elif step.method == "gather":
        axis = _norm_axis(kw.get("axis", 0), x.ndim)
        if any(idx.shape[j] != x.shape[j] for j in range(x.ndim) if j != axis):
            raise ExternalCannot("the ONNX reference's GatherElements needs equal cross-sections")
        op, feeds["i"], attrs = "GatherElements", pos.astype(idx.dtype), dict(axis=axis)
    elif step.method == "gather_nd":
        if kw.get("dims") is not None:
            raise ExternalCannot("ONNX GatherND has no element form")
        tl = _tuples_last(step, pos)
        if tl.shape[-1] == 0:
            raise ExternalCannot("empty index tuples")
        op, feeds["i"], attrs = "GatherND", np.ascontiguousarray(tl).astype(np.int64), dict(batch_dims=kw.get("batch_dims", 0))
    elif step.method in ("scatter", "scatter_nd"):
        reduce = kw.get("reduce", "none")
        if reduce == "mean":
            raise ExternalCannot("ONNX has no mean reduction")
        if step.method == "scatter_nd" and kw.get("dims") is not None:
            raise ExternalCannot("ONNX ScatterND has no element form")
        if reduce == "none" and _has_duplicates(_scatter_targets(step, env, _resolved(step, env, False))):
            raise ExternalCannot("ONNX leaves duplicate targets undefined for reduction none")
        src = env[step.args[2]]
        if step.method == "scatter":
            axis = _norm_axis(kw.get("axis", 0), x.ndim)
            op, attrs = "ScatterElements", dict(axis=axis, reduction=reduce)
            feeds["i"] = pos.astype(idx.dtype)
            feeds["u"] = np.ascontiguousarray(src[tuple(slice(0, n) for n in idx.shape)])
        else:
            tl = _tuples_last(step, pos)
            if tl.shape[-1] == 0:
                raise ExternalCannot("empty index tuples")
            op, attrs = "ScatterND", dict(reduction=reduce)
            feeds["i"], feeds["u"] = np.ascontiguousarray(tl).astype(np.int64), src
    else:
        raise ExternalCannot(f"ONNX has no counterpart of {step.method}")
    names = list(feeds)
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "fuzz",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(feeds[n].dtype), feeds[n].shape) for n in names],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(x.dtype), None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    try:
        with np.errstate(all="ignore"):
            return np.asarray(ReferenceEvaluator(model).run(None, feeds)[0])
    except Exception as e:  # noqa: BLE001 - the evaluator's own limits are not cinnlite's
        raise ExternalCannot(f"onnx.reference raised {type(e).__name__}") from None


# =================================================================================================
# Shrinking and reproducers
# =================================================================================================

SHRINK_CAPS = [(1, 1), (1, 2), (2, 1), (2, 2), (1, 3), (2, 3), (3, 2), (3, 3), (4, 2), (4, 3), (5, 4), (6, 5)]


def fails_with(spec, backend, category) -> Failure | None:
    try:
        check(spec, backend)
    except Failure as f:
        return f if f.category == category else None
    except Exception:  # noqa: BLE001 - a candidate the harness cannot evaluate is no reproducer
        return None
    return None


def shrink(spec: Spec, failure: Failure, backend: str, seed, seconds=30.0, check_fn=None):
    """A smaller draw that fails the same way: the same choices re-drawn under growing caps
    (fewest and smallest dimensions first), then producers dropped, then simpler values."""
    check_fn = check_fn or (lambda s: fails_with(s, backend, failure.category))
    deadline = time.monotonic() + seconds
    best, best_failure = spec, failure
    choices = {k: v for k, v in spec.choices.items()}
    variants = [choices]
    if choices.get("big"):
        variants.insert(0, dict(choices, big=False))
    if any(choices.get(k) != "input" for k in ("x_producer", "src_producer", "index_producer")) or choices.get("all_outputs"):
        variants.insert(0, dict(choices, x_producer="input", src_producer="input", index_producer="input",
                                all_outputs=False))
    for c in variants:
        for caps in SHRINK_CAPS:
            if time.monotonic() > deadline:
                break
            found = None
            for sub in range(8):
                try:
                    cand = realize(np.random.default_rng([*seed, 7919, caps[0], caps[1], sub]), dict(c), *caps)
                except AssertionError:
                    continue
                if cand.size() >= best.size():
                    continue
                f = check_fn(cand)
                if f is not None:
                    found = (cand, f)
                    break
            if found:
                best, best_failure = found
                break
        else:
            continue
        break
    # Simpler values, one input at a time.
    for name in list(best.inputs):
        for simpler in _simpler_values(best.inputs[name], name):
            if time.monotonic() > deadline:
                break
            cand = Spec(dict(best.inputs, **{name: simpler}), best.steps, best.outputs, best.choices)
            f = check_fn(cand)
            if f is not None:
                best, best_failure = cand, f
                break
    return best, best_failure


def _simpler_values(arr, name):
    if arr.size == 0:
        return []
    if arr.dtype.kind in "iu" and ("idx" in name or "perm" in name):
        return [np.zeros_like(arr), np.clip(arr, -2, 2).astype(arr.dtype)]
    if arr.dtype == np.bool_:
        return [np.zeros_like(arr)]
    return [np.zeros_like(arr), (np.arange(arr.size) % 7).astype(arr.dtype).reshape(arr.shape)]


def _literal(arr: np.ndarray) -> str:
    return f"np.array({arr.tolist()!r}, dtype={arr.dtype.name!r}).reshape({arr.shape!r})"


def _kwargs_text(kw: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kw.items())


def reproducer(spec: Spec, backend: str, note: str = "", expected: bool = True) -> str:
    """A self-contained script that rebuilds the draw, runs it and (with ``expected``) checks
    the reference result."""
    env, errors = reference_eval(spec) if expected else ({}, [])
    lines = ["# " + line for line in note.splitlines()] + [
        "import numpy as np",
        "from numpy import nan, inf",
        "import cinnlite as cl",
        "",
        'b = cl.NetBuilder("repro")',
    ]
    for name, arr in spec.inputs.items():
        lines.append(f"{name} = b.create_input({arr.dtype.name!r}, {arr.shape!r}, {name!r})")
    for st in spec.steps:
        args = ", ".join(list(st.args) + ([_kwargs_text(st.kwargs)] if st.kwargs else []))
        lines.append(f"{st.out} = b.{st.method}({args}, name={st.out!r})")
    options = "".join(f", {k}={v!r}" for k, v in compile_options(spec).items())
    lines.append(f"exe = cl.compile(b.build(outputs=[{', '.join(spec.outputs)}]), target={backend!r}{options})")
    lines.append("inputs = {")
    for name, arr in spec.inputs.items():
        lines.append(f"    {name!r}: {_literal(arr)},")
    lines.append("}")
    if not expected:
        lines.append("print(exe.run(inputs))")
    elif errors:
        lines += ["# expected: IndexOutOfRangeError for one of (input, position, value):",
                  f"# {errors}",
                  "try:",
                  "    exe.run(inputs)",
                  "    raise AssertionError('no IndexOutOfRangeError')",
                  "except cl.IndexOutOfRangeError as e:",
                  "    print(e)",
                  f"    assert (e.input, tuple(e.position), e.value) in {[(n, tuple(p), v) for n, p, v in errors]!r}"]
    else:
        lines.append("got = exe.run(inputs)")
        for name in spec.outputs:
            lines.append(f"expected_{name} = {_literal(env[name])}  # numpy reference")
            lines.append(f"print({name!r}, got[{name!r}].tolist())")
            lines.append(f"np.testing.assert_array_equal(got[{name!r}], expected_{name})")
    return "\n".join(lines) + "\n"


# =================================================================================================
# The run (in a child process) and the test
# =================================================================================================


def child_main(backend: str, draws: int, seed: int, workdir: str, seconds: float | None = None,
               max_failures: int = 3):
    """Check draws ``0 .. draws-1`` (with ``seconds``, go on drawing until they are spent);
    write result.json into ``workdir``. Before each draw, current.py holds its reproducer, so a
    crash can be reported with it."""
    start = time.monotonic()
    stats = {"draws": 0, "kinds": {}, "modes": {}, "dtypes": {}}
    failures, seen = [], set()
    k = 0

    def more():
        return k < draws or (seconds is not None and time.monotonic() - start < seconds)

    while more() and len(failures) < max_failures:
        rng = np.random.default_rng([seed, k])
        c = choose(rng, k)
        spec = realize(rng, c)
        with open(os.path.join(workdir, "current.py"), "w") as f:
            f.write(reproducer(spec, backend, note=f"draw {k} of seed {seed} on {backend}", expected=False))
        try:
            check(spec, backend, stats=stats, variants=2, rng=rng)
        except Failure as fail:
            if fail.category not in seen:
                seen.add(fail.category)
                small, small_fail = shrink(fail.spec, fail, backend, seed=[seed, k])
                text = reproducer(small, backend, note=(
                    f"{small_fail.category}: {small_fail.message}\n"
                    f"(shrunk from draw {k} of CINNLITE_FUZZ_SEED={seed}, backend {backend})"))
                path = os.path.join(workdir, f"reproducer_draw{k}.py")
                with open(path, "w") as f:
                    f.write(text)
                failures.append(dict(draw=k, category=fail.category, message=small_fail.message,
                                     original=fail.message, path=path,
                                     reproducer=text if len(text) < 20000 else text[:3000] + "\n# ... (the whole script is in the file)"))
        except Exception as e:  # noqa: BLE001 - a fault of the test harness, reported as such
            failures.append(dict(draw=k, category="harness error", message=str(e), original="".join(
                traceback.format_exception(e)), reproducer=reproducer(spec, backend, expected=False)))
            seen.add("harness error")
        stats["draws"] += 1
        for key, value in (("kinds", c["kind"]), ("modes", c["mode"]), ("dtypes", c["dtype"])):
            stats[key][value] = stats[key].get(value, 0) + 1
        k += 1
    stats["seconds"] = round(time.monotonic() - start, 1)
    with open(os.path.join(workdir, "result.json"), "w") as f:
        json.dump(dict(stats=stats, failures=failures), f, indent=1, default=str)


def fuzz_seconds(config) -> float | None:
    """The soak run's seconds per backend, or None for the fixed number of draws."""
    value = config.getoption("--fuzz-seconds", default=None) or os.environ.get("CINNLITE_FUZZ_SECONDS")
    return float(value) if value else None


def fuzz_draws(config) -> int:
    value = config.getoption("--fuzz-draws", default=None) or os.environ.get("CINNLITE_FUZZ_DRAWS")
    return int(value) if value not in (None, "") else DEFAULT_DRAWS


def fuzz_seed(config) -> int:
    value = config.getoption("--fuzz-seed", default=None) or os.environ.get("CINNLITE_FUZZ_SEED")
    return int(value) if value not in (None, "") else DEFAULT_SEED


def test_randomized_differential(backend, request, tmp_path):
    seconds, seed = fuzz_seconds(request.config), fuzz_seed(request.config)
    draws = fuzz_draws(request.config)
    code = (f"import sys; sys.path.insert(0, {HERE!r}); import test_fuzz; "
            f"test_fuzz.child_main({backend!r}, {draws!r}, {seed!r}, {str(tmp_path)!r}, {seconds!r})")
    env = dict(os.environ, CINNLITE_CACHE_DIR="off")  # every draw goes through the whole compiler
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=(seconds or 0) * 4 + draws * 10 + 600)
    current = tmp_path / "current.py"
    if proc.returncode != 0:
        pytest.fail(f"the fuzz process died with return code {proc.returncode} "
                    f"(negative: signal {-proc.returncode}) on this draw:\n\n"
                    f"{current.read_text() if current.exists() else '(none)'}\n{proc.stderr[-4000:]}")
    result = json.loads((tmp_path / "result.json").read_text())
    stats, failures = result["stats"], result["failures"]
    print(f"fuzz {backend}: seed {seed}, {json.dumps(stats)}")
    if failures:
        report = [f"{len(failures)} kind(s) of failure in {stats['draws']} draws (seed {seed}, {backend}):"]
        for f in failures:
            report.append(f"\n--- {f['category']} (draw {f['draw']}): {f['original'][:2000]}\n"
                          f"minimal reproducer ({f.get('path', 'not saved')}):\n{f['reproducer']}")
        pytest.fail("\n".join(report), pytrace=False)
    for lib in ("torch", "onnx"):
        if _installed(lib):
            assert stats.get(f"{lib} compared", 0) > 0, f"no draw was compared with {lib}: {stats}"


def _installed(name):
    try:
        __import__(name)
        return True
    except ImportError:
        return False


# -- the harness itself ----------------------------------------------------------------------------


def test_draws_are_valid_and_reproducible():
    """The first draws cover every form and dtype, are valid programs (the builder accepts them),
    and the same seed gives the same draw."""
    import cinnlite as cl

    kinds, dtypes, modes = set(), set(), set()
    for k in range(len(KINDS) * len(DATA_DTYPES)):
        specs = []
        for _ in range(2):
            rng = np.random.default_rng([1, k])
            specs.append(realize(rng, choose(rng, k)))
        a, b = specs
        assert repr([(s.method, s.args, s.kwargs) for s in a.steps]) == repr([(s.method, s.args, s.kwargs) for s in b.steps])
        assert list(a.inputs) == list(b.inputs)
        for name in a.inputs:
            np.testing.assert_array_equal(a.inputs[name], b.inputs[name], strict=True)
        nb = cl.NetBuilder("valid")
        t = {n: nb.create_input(arr.dtype.name, arr.shape, n) for n, arr in b.inputs.items()}
        for st in b.steps:
            t[st.out] = getattr(nb, st.method)(*[t[x] for x in st.args], **st.kwargs, name=st.out)
        assert t["out"].shape == reference_eval(b)[0].get("out", np.zeros(t["out"].shape)).shape
        kinds.add(b.choices["kind"])
        dtypes.add(b.choices["dtype"])
        modes.add(b.choices["mode"])
    assert kinds == set(KINDS) and dtypes == set(DATA_DTYPES) and modes == set(MODES)


def test_reproducers_run_and_pass_on_correct_draws(backend):
    for k in range(6):
        rng = np.random.default_rng([5, k])
        spec = realize(rng, choose(rng, k))
        namespace = {}
        exec(compile(reproducer(spec, backend), f"<draw {k}>", "exec"), namespace)  # noqa: S102


def test_shrinker_finds_a_smaller_failing_draw():
    """With a fake failure (any gather whose x has a dimension of size >= 2), shrinking returns a
    draw that still fails and is no bigger, and its reproducer is plain Python."""
    def fake_check(spec):
        if spec.main.method == "gather" and any(d >= 2 for d in spec.inputs.get("x", np.zeros(0)).shape):
            return Failure("wrong result", "fake")
        return None

    for k in range(200):
        rng = np.random.default_rng([3, k])
        c = choose(rng, k)
        if c["kind"] != "gather":
            continue
        spec = realize(rng, c)
        if fake_check(spec) is None or spec.size()[0] < 20:
            continue
        small, _ = shrink(spec, fake_check(spec), "cpu", seed=[3, k], seconds=10, check_fn=fake_check)
        assert fake_check(small) is not None
        assert small.size() < spec.size()
        compile(reproducer(small, "cpu"), "<repro>", "exec")
        return
    pytest.fail("no suitable draw for the shrinker test")


def test_check_reports_wrong_results_and_missing_errors(monkeypatch):
    """The comparison itself: an executable that returns zeros, or that never raises, fails."""
    import test_fuzz

    class Zeros:
        def __init__(self, spec):
            self.env, _ = reference_eval(spec)
            self.spec = spec

        def run(self, feeds):
            return {name: np.zeros_like(self.env[name]) if name in self.env else None for name in self.spec.outputs}

    monkeypatch.setattr(test_fuzz, "build", lambda spec, backend: Zeros(spec))
    seen = set()
    for k in range(300):
        rng = np.random.default_rng([11, k])
        spec = realize(rng, choose(rng, k))
        env, errors = reference_eval(spec)
        if errors:
            kind = "no IndexError"
        elif env["out"].size and np.any(env["out"] != 0):
            kind = "wrong result"
        else:
            continue
        with pytest.raises(Failure) as info:
            check(spec, "cpu", externals=False)
        assert info.value.category == kind
        seen.add(kind)
        if len(seen) == 2:
            return
    pytest.fail(f"found draws of only these kinds: {seen}")
