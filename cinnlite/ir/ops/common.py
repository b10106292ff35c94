"""The rules several operators share: integer attributes, axes, modes, reductions, index
dtypes and layouts, scalars that must fit a dtype, shapes and ``dims`` lists.

Each check raises :class:`ValidationError` or :class:`DTypeError` naming the operator, the
input and the rule, with the same rule text for every operator that applies it, so that one
rule reads the same wherever it is broken (SEMANTICS.md).
"""
from __future__ import annotations

import math
import operator

import numpy as np

from ...dtypes import INDEX_DTYPES, DType, float_max
from ...errors import DTypeError, ValidationError
from ..symbolic import Dim, is_zero, symbol

MODES = ("raise", "clip", "wrap", "fill")
REDUCTIONS = ("none", "add", "mul", "max", "min", "mean")
#: ``scatter_nd`` also subtracts (TensorFlow's ``tensor_scatter_nd_sub``).
ND_REDUCTIONS = REDUCTIONS + ("sub",)
INDEX_LAYOUTS = ("last", "first")


def int_attr(op, name, value, allow_none=False):
    """``value`` as a Python int; bools, floats and strings are not integers."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ValidationError(op, f"{name} is an integer", f"{name} must be an integer, got {value!r}")
    return int(value)


def normalize_axis(op, axis, rank, name="axis"):
    """An axis of a rank-``rank`` input in ``[-rank, rank-1]``, returned non-negative."""
    axis = int_attr(op, name, axis)
    if rank == 0:
        raise ValidationError(op, f"{name} in [-r, r-1]", f"{name}={axis} is invalid for a rank-0 input")
    if not -rank <= axis < rank:
        raise ValidationError(op, f"{name} in [-r, r-1]",
                              f"{name}={axis} is out of range for rank {rank}: valid [{-rank}, {rank - 1}]")
    return axis + rank if axis < 0 else axis


def check_mode(op, mode):
    """``mode`` is one of :data:`MODES` (the index policy of SEMANTICS.md)."""
    if mode not in MODES:
        raise ValidationError(op, "mode is one of raise/clip/wrap/fill",
                              f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")


def check_reduce(op, reduce, dtype, allowed=REDUCTIONS):
    """``reduce`` is one of ``allowed``; bool data combines as PyTorch's bool reductions do
    (add and max are a logical or, mul and min a logical and) and has no mean or difference."""
    if reduce not in allowed:
        raise ValidationError(op, f"reduce is one of {'/'.join(allowed)}",
                              f"unknown reduce {reduce!r}; expected one of {', '.join(allowed)}")
    if dtype.is_bool and reduce in ("mean", "sub"):
        raise DTypeError(op, "bool data: reduce none/add/mul/max/min",
                         f"reduce={reduce!r} is not defined on bool data")
    if dtype.is_complex and reduce in ("max", "min"):
        raise DTypeError(op, "complex data: reduce none/add/mul/mean/sub",
                         f"reduce={reduce!r} is not defined on {dtype} data: complex numbers are not ordered")


def check_include_self(op, include_self, reduce) -> bool:
    """``include_self`` is a bool, and False only with a reduction (PyTorch's ``scatter_reduce``)."""
    if not isinstance(include_self, (bool, np.bool_)):
        raise ValidationError(op, "include_self is a bool", f"include_self must be True or False, got {include_self!r}")
    if not include_self and reduce in ("none", "sub"):
        raise ValidationError(op, "include_self=False needs a reduction other than sub",
                              f"include_self=False combines the updates without x; reduce={reduce!r} "
                              f"{'overwrites anyway' if reduce == 'none' else 'subtracts them from x'}")
    return bool(include_self)


def check_index_dtype(op, index, name="index"):
    """Index tensors have an integer dtype, signed or unsigned, of any width."""
    if index.dtype not in INDEX_DTYPES:
        raise DTypeError(op, "index dtype is an integer dtype",
                         f"index dtype {index.dtype} is not supported; use an integer dtype "
                         f"({', '.join(d.name for d in INDEX_DTYPES)})", input=name)


def check_layout(op, layout):
    """``index_layout`` is one of :data:`INDEX_LAYOUTS`: where the index tuples run."""
    if layout not in INDEX_LAYOUTS:
        raise ValidationError(op, "index_layout is last or first",
                              f"unknown index_layout {layout!r}; expected 'last' or 'first'")


def check_nonempty_axis(op, mode, size, index, what="axis"):
    """clip and wrap need a position to move to; an empty axis has none."""
    if is_zero(size) and not is_zero(index.size) and mode in ("clip", "wrap"):
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
    if dtype.is_complex:
        if not isinstance(value, (bool, int, float, complex)):
            raise ValidationError(op, f"{name} fits the dtype", f"{name}={value!r} is not a number")
        value = complex(value)
        if any(math.isfinite(v) and abs(v) > float_max(dtype.part) for v in (value.real, value.imag)):
            raise ValidationError(op, f"{name} fits the dtype", f"{name}={value!r} overflows {dtype}")
        return value
    if dtype.is_float:
        if not isinstance(value, (bool, int, float)):
            raise ValidationError(op, f"{name} fits the dtype", f"{name}={value!r} is not a number")
        value = float(value)
        if math.isfinite(value) and abs(value) > float_max(dtype):
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


def shape_dims(op, shape, allow_minus_one=False):
    """A shape as a tuple of sizes: ints, symbol names (``"E"``, made :class:`Dim` symbols) and
    Dims. Negative ints are left for the caller's rules."""
    if isinstance(shape, (str, bytes)):
        raise ValidationError(op, "shape is a tuple of sizes", f"shape {shape!r} is not a tuple of sizes")
    try:
        items = tuple(shape)
    except TypeError:
        raise ValidationError(op, "shape is a tuple of sizes", f"shape {shape!r} is not a tuple of sizes") from None
    out = []
    for d in items:
        if isinstance(d, str):
            try:
                d = symbol(d)
            except ValueError as exc:
                raise ValidationError(op, "a symbolic dimension is an identifier", str(exc)) from None
        elif not isinstance(d, Dim):
            try:
                d = operator.index(d)
            except TypeError:
                raise ValidationError(op, "shape is a tuple of sizes",
                                      f"shape {shape!r} holds {d!r}: a size is an integer or a symbol name") from None
        out.append(d)
    return tuple(out)


def check_shape(op, shape):
    """A shape as a tuple of sizes (ints and symbolic dims): non-negative, with an element count
    64-bit arithmetic can address."""
    shape = shape_dims(op, shape)
    static = [d for d in shape if not isinstance(d, Dim)]
    if any(d < 0 for d in static):
        raise ValidationError(op, "dimensions are non-negative", f"shape {shape} has a negative dimension")
    if math.prod(static) >= 2**63 or any(d >= 2**63 for d in static):
        raise ValidationError(op, "element count fits int64",
                              f"shape {shape} has more elements than 64-bit index arithmetic can address")
    return shape


def static_dim(op, what, d, input=None):
    """A size the operator's loop structure depends on (a tuple length): it must be a number."""
    if isinstance(d, Dim):
        raise ValidationError(op, f"{what} is static", f"{what} is the symbolic size {d}; it must be a number",
                              input=input)
    return d


def tuple_index_shape(op, index, layout):
    """The rules of an index of tuples (``gather_nd``, ``scatter_nd``): a known layout, at least
    one axis, and a tuple length that is a number; returns the shape with the tuple axis last."""
    check_layout(op, layout)
    if index.ndim < 1:
        raise ValidationError(op, "rank(index) >= 1", "index must have at least one axis (the index tuples)",
                              input=index.name)
    shape = index_tuple_shape(index.shape, layout)
    static_dim(op, "the index tuple length", shape[-1], index.name)
    return shape


def index_tuple_shape(idx_shape, layout):
    """The index shape with the tuple axis last, whatever the layout."""
    idx_shape = tuple(idx_shape)
    return idx_shape[1:] + idx_shape[:1] if layout == "first" else idx_shape


def normalize_dims(op, dims, r, m):
    """The element form's ``dims``: distinct axes of a rank-``r`` ``x``, one per tuple component
    (``m`` of them), returned non-negative."""
    try:
        dims = tuple(int_attr(op, "dims", d) for d in dims)
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


def check_src(op, x, src):
    """A scatter's updates have the data dtype."""
    if src.dtype != x.dtype:
        raise DTypeError(op, "src dtype == x dtype", f"src has dtype {src.dtype}, x has {x.dtype}", input=src.name)


def check_scatter_operands(op, x, idx, src, mode, reduce, include_self=True, allowed=REDUCTIONS) -> bool:
    """The rules every scatter shares, in the order its errors are reported: the index dtype,
    the updates' dtype, the mode, the reduction and ``include_self``; returns ``include_self``."""
    check_index_dtype(op, idx, idx.name)
    check_src(op, x, src)
    check_mode(op, mode)
    check_reduce(op, reduce, x.dtype, allowed)
    return check_include_self(op, include_self, reduce)
