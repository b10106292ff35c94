"""Operator definitions: attribute normalisation, validation and shape/dtype inference.

Each ``infer_<op>`` takes the input tensors and the user's attributes, checks every rule of
SEMANTICS.md, and returns ``(attrs, shape, dtype)`` with the attributes normalised (negative
axes resolved, defaults filled in). A broken rule raises :class:`ValidationError` or
:class:`DTypeError` naming the operator, the input and the rule.
"""
from __future__ import annotations

import math
import operator

import numpy as np

from ..dtypes import INDEX_DTYPES, DType, as_dtype
from ..errors import DTypeError, ValidationError

MODES = ("raise", "clip", "wrap", "fill")
REDUCTIONS = ("none", "add", "mul", "max", "min", "mean")
INDEX_LAYOUTS = ("last", "first")


def _int_attr(op, name, value, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValidationError(op, f"{name} is an integer", f"{name} must be an integer, got {value!r}")
    return int(value)


def normalize_axis(op, axis, rank, name="axis"):
    axis = _int_attr(op, name, axis)
    if rank == 0:
        raise ValidationError(op, f"{name} in [-r, r-1]", f"{name}={axis} is invalid for a rank-0 input")
    if not -rank <= axis < rank:
        raise ValidationError(op, f"{name} in [-r, r-1]",
                              f"{name}={axis} is out of range for rank {rank}: valid [{-rank}, {rank - 1}]")
    return axis + rank if axis < 0 else axis


def _check_mode(op, mode):
    if mode not in MODES:
        raise ValidationError(op, "mode is one of raise/clip/wrap/fill",
                              f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")


def _check_reduce(op, reduce, dtype):
    if reduce not in REDUCTIONS:
        raise ValidationError(op, "reduce is one of none/add/mul/max/min/mean",
                              f"unknown reduce {reduce!r}; expected one of {', '.join(REDUCTIONS)}")
    if dtype.is_bool and reduce != "none":
        raise DTypeError(op, "bool data: reduce none only",
                         f"reduce={reduce!r} is not defined on bool data; only 'none'")


def _check_index_dtype(op, index, name="index"):
    if index.dtype not in INDEX_DTYPES:
        raise DTypeError(op, "index dtype is int32 or int64",
                         f"index dtype {index.dtype} is not supported; use int32 or int64", input=name)


def _check_layout(op, layout):
    if layout not in INDEX_LAYOUTS:
        raise ValidationError(op, "index_layout is last or first",
                              f"unknown index_layout {layout!r}; expected 'last' or 'first'")


def _check_nonempty_axis(op, mode, size, index, what="axis"):
    """clip and wrap need a position to move to; an empty axis has none."""
    if size == 0 and index.size > 0 and mode in ("clip", "wrap"):
        raise ValidationError(op, f"mode {mode} needs a non-empty {what}",
                              f"mode={mode!r} cannot map indices onto an empty {what} (size 0)",
                              input=index.name)


def check_scalar(op, name, value, dtype: DType):
    """A Python scalar that must be exactly representable in ``dtype``; returns it normalised."""
    if isinstance(value, np.generic):
        value = value.item()
    if dtype.is_bool:
        if not isinstance(value, (bool, int)) or value not in (0, 1):
            raise ValidationError(op, f"{name} fits the dtype", f"{name}={value!r} is not a bool")
        return bool(value)
    if dtype.is_float:
        if not isinstance(value, (bool, int, float)):
            raise ValidationError(op, f"{name} fits the dtype", f"{name}={value!r} is not a number")
        value = float(value)
        if math.isfinite(value) and abs(value) > float(np.finfo(dtype.np).max):
            raise ValidationError(op, f"{name} fits the dtype", f"{name}={value!r} overflows {dtype}")
        return value
    if isinstance(value, float):
        if not value.is_integer():
            raise ValidationError(op, f"{name} fits the dtype",
                                  f"{name}={value!r} is not an integer, and the dtype is {dtype}")
        value = int(value)
    if not isinstance(value, (bool, int)):
        raise ValidationError(op, f"{name} fits the dtype", f"{name}={value!r} is not an integer")
    info = np.iinfo(dtype.np)
    if not info.min <= int(value) <= info.max:
        raise ValidationError(op, f"{name} fits the dtype", f"{name}={value!r} does not fit in {dtype}")
    return int(value)


def _check_shape(op, shape):
    try:
        shape = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise ValidationError(op, "shape is a tuple of integers", f"shape {shape!r} is not a tuple of integers") from None
    if any(d < 0 for d in shape):
        raise ValidationError(op, "dimensions are non-negative", f"shape {shape} has a negative dimension")
    if math.prod(shape) >= 2**63 or any(d >= 2**63 for d in shape):
        raise ValidationError(op, "element count fits int64",
                              f"shape {shape} has more elements than 64-bit index arithmetic can address")
    return shape


# ---------------------------------------------------------------------------------------------


def infer_fill_constant(inputs, shape, value, dtype):
    shape = _check_shape("fill_constant", shape)
    dtype = as_dtype(dtype, "fill_constant")
    value = check_scalar("fill_constant", "value", value, dtype)
    return (("value", value),), shape, dtype


def infer_reshape(inputs, shape):
    (x,) = inputs
    op = "reshape"
    try:
        shape = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise ValidationError(op, "shape is a tuple of integers", f"shape {shape!r} is not a tuple of integers") from None
    if sum(1 for d in shape if d == -1) > 1 or any(d < -1 for d in shape):
        raise ValidationError(op, "at most one -1, others non-negative", f"shape {shape} is invalid")
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        if known == 0 or x.size % known:
            raise ValidationError(op, "element count is kept", f"cannot reshape {x.shape} to {shape}", input=x.name)
        shape = tuple(x.size // known if d == -1 else d for d in shape)
    if math.prod(shape) != x.size:
        raise ValidationError(op, "element count is kept", f"cannot reshape {x.shape} to {shape}", input=x.name)
    return (("shape", shape),), shape, x.dtype


def infer_take(inputs, axis=0, batch_dims=0, mode="raise", fill_value=0):
    x, idx = inputs
    op = "take"
    _check_index_dtype(op, idx, idx.name)
    _check_mode(op, mode)
    r, q = x.ndim, idx.ndim
    axis = normalize_axis(op, axis, r)
    b = _int_attr(op, "batch_dims", batch_dims)
    if not -q <= b <= q:
        raise ValidationError(op, "batch_dims in [-q, q]",
                              f"batch_dims={b} is out of range for an index of rank {q}: valid [{-q}, {q}]")
    b = b + q if b < 0 else b
    if b > axis:
        raise ValidationError(op, "batch_dims <= axis", f"batch_dims={b} is greater than axis={axis}")
    if tuple(x.shape[:b]) != tuple(idx.shape[:b]):
        raise ValidationError(op, "x.shape[:batch_dims] == indices.shape[:batch_dims]",
                              f"batch shapes differ: x {x.shape[:b]} vs indices {idx.shape[:b]}", input=idx.name)
    fill_value = check_scalar(op, "fill_value", fill_value, x.dtype)
    _check_nonempty_axis(op, mode, x.shape[axis], idx)
    shape = tuple(x.shape[:axis]) + tuple(idx.shape[b:]) + tuple(x.shape[axis + 1:])
    attrs = (("axis", axis), ("batch_dims", b), ("mode", mode), ("fill_value", fill_value))
    return attrs, shape, x.dtype


def infer_gather(inputs, axis=0, mode="raise", fill_value=0):
    x, idx = inputs
    op = "gather"
    _check_index_dtype(op, idx, idx.name)
    _check_mode(op, mode)
    r = x.ndim
    axis = normalize_axis(op, axis, r)
    if idx.ndim != r:
        raise ValidationError(op, "rank(index) == rank(x)", f"index has rank {idx.ndim}, x has rank {r}", input=idx.name)
    for j in range(r):
        if j != axis and idx.shape[j] > x.shape[j]:
            raise ValidationError(op, "index.shape[j] <= x.shape[j] for j != axis",
                                  f"index.shape[{j}]={idx.shape[j]} > x.shape[{j}]={x.shape[j]}", input=idx.name)
    fill_value = check_scalar(op, "fill_value", fill_value, x.dtype)
    _check_nonempty_axis(op, mode, x.shape[axis], idx)
    return (("axis", axis), ("mode", mode), ("fill_value", fill_value)), tuple(idx.shape), x.dtype


def index_tuple_shape(idx_shape, layout):
    """The index shape with the tuple axis last, whatever the layout."""
    idx_shape = tuple(idx_shape)
    return idx_shape[1:] + idx_shape[:1] if layout == "first" else idx_shape


def _normalize_dims(op, dims, r, m):
    try:
        dims = tuple(_int_attr(op, "dims", d) for d in dims)
    except TypeError:
        raise ValidationError(op, "dims is a list of axes", f"dims={dims!r} is not a list of integers") from None
    out = []
    for d in dims:
        if not -r <= d < r:
            raise ValidationError(op, "dims are axes of x", f"dims entry {d} is out of range for rank {r}")
        out.append(d + r if d < 0 else d)
    if len(set(out)) != len(out):
        raise ValidationError(op, "dims are distinct", f"dims={list(dims)} repeats an axis")
    if len(out) != m:
        raise ValidationError(op, "index.shape[-1] == len(dims)",
                              f"index tuples have length {m} but dims has {len(out)} entries")
    return tuple(out)


def infer_gather_nd(inputs, batch_dims=0, dims=None, index_layout="last", mode="raise", fill_value=0):
    x, idx = inputs
    op = "gather_nd"
    _check_index_dtype(op, idx, idx.name)
    _check_mode(op, mode)
    _check_layout(op, index_layout)
    r, q = x.ndim, idx.ndim
    if q < 1:
        raise ValidationError(op, "rank(index) >= 1", "index must have at least one axis (the index tuples)",
                              input=idx.name)
    ishape = index_tuple_shape(idx.shape, index_layout)
    m = ishape[-1]
    b = _int_attr(op, "batch_dims", batch_dims)
    fill_value = check_scalar(op, "fill_value", fill_value, x.dtype)
    if dims is not None:
        if b != 0:
            raise ValidationError(op, "batch_dims is 0 with dims", "batch_dims applies to the slice form only")
        dims = _normalize_dims(op, dims, r, m)
        shape = ishape[:-1]
        if len(shape) != r:
            raise ValidationError(op, "rank(out) == rank(x)",
                                  f"index shape {idx.shape} gives an output of rank {len(shape)}, x has rank {r}",
                                  input=idx.name)
        for j in range(r):
            if j not in dims and shape[j] > x.shape[j]:
                raise ValidationError(op, "out.shape[j] <= x.shape[j] for j not in dims",
                                      f"out.shape[{j}]={shape[j]} > x.shape[{j}]={x.shape[j]}", input=idx.name)
        for d in dims:
            _check_nonempty_axis(op, mode, x.shape[d], idx)
    else:
        if not 0 <= b < min(r, q):
            raise ValidationError(op, "batch_dims < min(rank(x), rank(index))",
                                  f"batch_dims={b} must be in [0, {min(r, q) - 1}] for ranks x={r}, index={q}")
        if tuple(x.shape[:b]) != tuple(ishape[:b]):
            raise ValidationError(op, "x.shape[:batch_dims] == index.shape[:batch_dims]",
                                  f"batch shapes differ: x {x.shape[:b]} vs index {ishape[:b]}", input=idx.name)
        if m > r - b:
            raise ValidationError(op, "index.shape[-1] <= rank(x) - batch_dims",
                                  f"index tuples have length {m}, more than rank(x) - batch_dims = {r - b}",
                                  input=idx.name)
        for k in range(m):
            _check_nonempty_axis(op, mode, x.shape[b + k], idx)
        shape = ishape[:-1] + tuple(x.shape[b + m:])
    attrs = (("batch_dims", b), ("dims", dims), ("index_layout", index_layout), ("mode", mode),
             ("fill_value", fill_value))
    return attrs, tuple(shape), x.dtype


def _check_src(op, x, src):
    if src.dtype != x.dtype:
        raise DTypeError(op, "src dtype == x dtype", f"src has dtype {src.dtype}, x has {x.dtype}", input=src.name)


def infer_scatter(inputs, axis=0, reduce="none", mode="raise"):
    x, idx, src = inputs
    op = "scatter"
    _check_index_dtype(op, idx, idx.name)
    _check_src(op, x, src)
    _check_mode(op, mode)
    _check_reduce(op, reduce, x.dtype)
    r = x.ndim
    axis = normalize_axis(op, axis, r)
    if idx.ndim != r:
        raise ValidationError(op, "rank(index) == rank(x)", f"index has rank {idx.ndim}, x has rank {r}", input=idx.name)
    if src.ndim != r:
        raise ValidationError(op, "rank(src) == rank(x)", f"src has rank {src.ndim}, x has rank {r}", input=src.name)
    for j in range(r):
        if idx.shape[j] > src.shape[j]:
            raise ValidationError(op, "index.shape[j] <= src.shape[j]",
                                  f"index.shape[{j}]={idx.shape[j]} > src.shape[{j}]={src.shape[j]}", input=idx.name)
        if j != axis and idx.shape[j] > x.shape[j]:
            raise ValidationError(op, "index.shape[j] <= x.shape[j] for j != axis",
                                  f"index.shape[{j}]={idx.shape[j]} > x.shape[{j}]={x.shape[j]}", input=idx.name)
    _check_nonempty_axis(op, mode, x.shape[axis], idx)
    return (("axis", axis), ("reduce", reduce), ("mode", mode)), tuple(x.shape), x.dtype


def infer_scatter_nd(inputs, dims=None, reduce="none", index_layout="last", mode="raise"):
    x, idx, src = inputs
    op = "scatter_nd"
    _check_index_dtype(op, idx, idx.name)
    _check_src(op, x, src)
    _check_mode(op, mode)
    _check_reduce(op, reduce, x.dtype)
    _check_layout(op, index_layout)
    r, q = x.ndim, idx.ndim
    if q < 1:
        raise ValidationError(op, "rank(index) >= 1", "index must have at least one axis (the index tuples)",
                              input=idx.name)
    ishape = index_tuple_shape(idx.shape, index_layout)
    m = ishape[-1]
    if dims is not None:
        dims = _normalize_dims(op, dims, r, m)
        if src.ndim != r:
            raise ValidationError(op, "rank(src) == rank(x)", f"src has rank {src.ndim}, x has rank {r}",
                                  input=src.name)
        if tuple(ishape[:-1]) != tuple(src.shape):
            raise ValidationError(op, "index.shape == src.shape + (len(dims),)",
                                  f"index shape {idx.shape} does not match src shape {src.shape}", input=idx.name)
        for j in range(r):
            if j not in dims and src.shape[j] > x.shape[j]:
                raise ValidationError(op, "src.shape[j] <= x.shape[j] for j not in dims",
                                      f"src.shape[{j}]={src.shape[j]} > x.shape[{j}]={x.shape[j]}", input=src.name)
        for d in dims:
            _check_nonempty_axis(op, mode, x.shape[d], idx)
    else:
        if m > r:
            raise ValidationError(op, "index.shape[-1] <= rank(x)",
                                  f"index tuples have length {m}, more than rank(x) = {r}", input=idx.name)
        want = tuple(ishape[:-1]) + tuple(x.shape[m:])
        if tuple(src.shape) != want:
            raise ValidationError(op, "src.shape == index.shape[:-1] + x.shape[m:]",
                                  f"src has shape {src.shape}, expected {want}", input=src.name)
        for k in range(m):
            _check_nonempty_axis(op, mode, x.shape[k], idx)
    attrs = (("dims", dims), ("reduce", reduce), ("index_layout", index_layout), ("mode", mode))
    return attrs, tuple(x.shape), x.dtype


ELEMENTWISE_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum")


def broadcast_shapes(op, a, b):
    """numpy broadcasting: align trailing axes; each pair equal or one of them 1."""
    ra, rb = len(a.shape), len(b.shape)
    r = max(ra, rb)
    pa = (1,) * (r - ra) + tuple(a.shape)
    pb = (1,) * (r - rb) + tuple(b.shape)
    out = []
    for j, (da, db) in enumerate(zip(pa, pb)):
        if da != db and da != 1 and db != 1:
            raise ValidationError(op, "shapes broadcast (numpy rules)",
                                  f"shapes {a.shape} and {b.shape} do not broadcast (axis {j - r}: {da} vs {db})",
                                  input=b.name)
        out.append(db if da == 1 else da)
    return tuple(out)


def _infer_binary(op):
    def infer(inputs):
        a, b = inputs
        if a.dtype != b.dtype:
            raise DTypeError(op, "operands have one dtype",
                             f"operands have dtypes {a.dtype} and {b.dtype}; cast one of them first", input=b.name)
        if a.dtype.is_bool and op not in ("maximum", "minimum"):
            raise DTypeError(op, "arithmetic on numbers", f"{op} is not defined on bool; cast to a number first",
                             input=a.name)
        return (), broadcast_shapes(op, a, b), a.dtype
    infer.__name__ = f"infer_{op}"
    return infer


def infer_cast(inputs, dtype):
    (x,) = inputs
    return (("dtype", as_dtype(dtype, "cast")),), tuple(x.shape), as_dtype(dtype, "cast")


INFER = {
    **{op: _infer_binary(op) for op in ELEMENTWISE_BINARY},
    "cast": infer_cast,
    "fill_constant": infer_fill_constant,
    "reshape": infer_reshape,
    "take": infer_take,
    "gather": infer_gather,
    "gather_nd": infer_gather_nd,
    "scatter": infer_scatter,
    "scatter_nd": infer_scatter_nd,
}
