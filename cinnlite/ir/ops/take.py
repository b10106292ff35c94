"""``take``: slices of ``x`` along one axis, picked by ``indices`` (ONNX Gather, ``np.take``).

``out[p, i, r] = x[p, indices[p[:b], i], r]`` with ``b = batch_dims``; see SEMANTICS.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import ValidationError
from ..loopnest import Kernel, Load, Store
from ..lower import IndexValue, LoopVars, LoweringContext, buffer_of, gather_value, loop_nest, make_kernel
from .common import check_index_dtype, check_mode, check_nonempty_axis, check_scalar, int_attr, normalize_axis
from ..symbolic import shapes_equal
from .definition import OpDef


@dataclass(frozen=True)
class TakeAttrs:
    """``axis`` and ``batch_dims`` non-negative; ``fill_value`` a Python number of x's dtype."""

    axis: int = 0
    batch_dims: int = 0
    mode: str = "raise"
    fill_value: bool | int | float = 0


def infer_take(inputs, axis, batch_dims, mode, fill_value):
    """Output ``x.shape[:axis] + indices.shape[batch_dims:] + x.shape[axis+1:]``, x's dtype."""
    x, idx = inputs
    op = "take"
    check_index_dtype(op, idx, idx.name)
    check_mode(op, mode)
    r, q = x.ndim, idx.ndim
    axis = normalize_axis(op, axis, r)
    b = int_attr(op, "batch_dims", batch_dims)
    if not -q <= b <= q:
        raise ValidationError(op, "batch_dims in [-q, q]",
                              f"batch_dims={b} is out of range for an index of rank {q}: valid [{-q}, {q}]")
    b = b + q if b < 0 else b
    if b > axis:
        raise ValidationError(op, "batch_dims <= axis", f"batch_dims={b} is greater than axis={axis}")
    if not shapes_equal(x.shape[:b], idx.shape[:b]):
        raise ValidationError(op, "x.shape[:batch_dims] == indices.shape[:batch_dims]",
                              f"batch shapes differ: x {x.shape[:b]} vs indices {idx.shape[:b]}", input=idx.name)
    fill_value = check_scalar(op, "fill_value", fill_value, x.dtype)
    check_nonempty_axis(op, mode, x.shape[axis], idx)
    shape = tuple(x.shape[:axis]) + tuple(idx.shape[b:]) + tuple(x.shape[axis + 1:])
    return TakeAttrs(axis, b, mode, fill_value), shape, x.dtype


def lower_take(ctx: LoweringContext, node, attrs: TakeAttrs) -> Kernel:
    """A compute over the output; batch positions address both ``x`` and ``indices``."""
    x, idx = (buffer_of(t) for t in node.inputs)
    out = buffer_of(node.output)
    axis, b, mode = attrs.axis, attrs.batch_dims, attrs.mode
    q = len(idx.shape)
    o = LoopVars().make(len(out.shape))
    idx_pos = tuple(o[:b]) + tuple(o[axis:axis + q - b])
    r = IndexValue(Load(idx, idx_pos), x.shape[axis], mode)
    x_pos = list(o[:axis]) + [r.index] + list(o[axis + q - b:])
    value = gather_value(x, x_pos, [r], attrs.fill_value)
    compute = loop_nest(o, out.shape, Store(out, tuple(o), value))
    body, checks = ctx.with_check(node, mode, idx, (x.shape[axis],), compute)
    return make_kernel(node, body, checks=checks)


TAKE = OpDef("take", operands=("x", "indices"), attrs=TakeAttrs, infer=infer_take, lower=lower_take)
