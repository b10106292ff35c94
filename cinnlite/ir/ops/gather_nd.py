"""``gather_nd``: elements or slices of ``x`` addressed by index tuples (ONNX GatherND).

The slice form (``dims=None``): ``out[β, ι, ρ] = x[β, index[β, ι, :], ρ]``. The element form
(``dims`` given): ``out[p] = x[p with p[dims[k]] = index[p, k]]``. See SEMANTICS.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import ValidationError
from ..loopnest import Kernel, Store
from ..lower import (IndexValue, LoopVars, LoweringContext, buffer_of, gather_value, loop_nest, make_kernel,
                     tuple_load)
from .common import (check_index_dtype, check_mode, check_nonempty_axis, check_scalar, int_attr, normalize_dims,
                     tuple_index_shape)
from ..symbolic import dims_le, shapes_equal
from .definition import OpDef


@dataclass(frozen=True)
class GatherNdAttrs:
    """``dims`` None (slice form) or a tuple of non-negative axes; ``fill_value`` a Python
    number of x's dtype."""

    batch_dims: int = 0
    dims: tuple | None = None
    index_layout: str = "last"
    mode: str = "raise"
    fill_value: bool | int | float = 0


def infer_gather_nd(inputs, batch_dims, dims, index_layout, mode, fill_value):
    """The rules both forms share, then those of the form ``dims`` selects; x's dtype."""
    x, idx = inputs
    op = "gather_nd"
    check_index_dtype(op, idx, idx.name)
    check_mode(op, mode)
    ishape = tuple_index_shape(op, idx, index_layout)
    b = int_attr(op, "batch_dims", batch_dims)
    fill_value = check_scalar(op, "fill_value", fill_value, x.dtype)
    if dims is not None:
        dims, shape = _element_form(x, idx, ishape, b, dims, mode)
    else:
        shape = _slice_form(x, idx, ishape, b, mode)
    return GatherNdAttrs(b, dims, index_layout, mode, fill_value), tuple(shape), x.dtype


def _element_form(x, idx, ishape, b, dims, mode):
    """The normalised ``dims`` and the output shape of the element form."""
    op, r = "gather_nd", x.ndim
    if b != 0:
        raise ValidationError(op, "batch_dims is 0 with dims", "batch_dims applies to the slice form only")
    dims = normalize_dims(op, dims, r, ishape[-1])
    shape = ishape[:-1]
    if len(shape) != r:
        raise ValidationError(op, "rank(out) == rank(x)",
                              f"index shape {idx.shape} gives an output of rank {len(shape)}, x has rank {r}",
                              input=idx.name)
    for j in range(r):
        if j not in dims and not dims_le(shape[j], x.shape[j]):
            raise ValidationError(op, "out.shape[j] <= x.shape[j] for j not in dims",
                                  f"out.shape[{j}]={shape[j]} > x.shape[{j}]={x.shape[j]}", input=idx.name)
    for d in dims:
        check_nonempty_axis(op, mode, x.shape[d], idx)
    return dims, shape


def _slice_form(x, idx, ishape, b, mode):
    """The output shape of the slice form: the index positions, then the slice."""
    op, r, q, m = "gather_nd", x.ndim, idx.ndim, ishape[-1]
    if not 0 <= b < min(r, q):
        raise ValidationError(op, "batch_dims < min(rank(x), rank(index))",
                              f"batch_dims={b} must be in [0, {min(r, q) - 1}] for ranks x={r}, index={q}")
    if not shapes_equal(x.shape[:b], ishape[:b]):
        raise ValidationError(op, "x.shape[:batch_dims] == index.shape[:batch_dims]",
                              f"batch shapes differ: x {x.shape[:b]} vs index {ishape[:b]}", input=idx.name)
    if m > r - b:
        raise ValidationError(op, "index.shape[-1] <= rank(x) - batch_dims",
                              f"index tuples have length {m}, more than rank(x) - batch_dims = {r - b}",
                              input=idx.name)
    for k in range(m):
        check_nonempty_axis(op, mode, x.shape[b + k], idx)
    return ishape[:-1] + tuple(x.shape[b + m:])


def lower_gather_nd(ctx: LoweringContext, node, attrs: GatherNdAttrs) -> Kernel:
    """A compute over the output, reading ``x`` where the resolved tuple components point."""
    x, idx = (buffer_of(t) for t in node.inputs)
    out = buffer_of(node.output)
    b, dims, layout, mode = attrs.batch_dims, attrs.dims, attrs.index_layout, attrs.mode
    q = len(idx.shape)
    m = idx.shape[0] if layout == "first" else idx.shape[-1]
    o = LoopVars().make(len(out.shape))
    if dims is None:
        outer = o[:q - 1]
        resolved = [IndexValue(tuple_load(idx, layout, outer, k), x.shape[b + k], mode) for k in range(m)]
        x_pos = list(o[:b]) + [r.index for r in resolved] + list(o[q - 1:])
        sizes = tuple(x.shape[b:b + m])
    else:
        resolved = [IndexValue(tuple_load(idx, layout, o, k), x.shape[d], mode) for k, d in enumerate(dims)]
        x_pos = list(o)
        for r, d in zip(resolved, dims):
            x_pos[d] = r.index
        sizes = tuple(x.shape[d] for d in dims)
    value = gather_value(x, x_pos, resolved, attrs.fill_value)
    compute = loop_nest(o, out.shape, Store(out, tuple(o), value))
    tuple_axis = 0 if layout == "first" else q - 1
    body, checks = ctx.with_check(node, mode, idx, sizes, compute, tuple_axis=tuple_axis)
    return make_kernel(node, body, checks=checks)


GATHER_ND = OpDef("gather_nd", operands=("x", "index"), attrs=GatherNdAttrs, infer=infer_gather_nd,
                  lower=lower_gather_nd)
