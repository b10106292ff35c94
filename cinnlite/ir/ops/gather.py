"""``gather``: elements of ``x`` along one axis (ONNX GatherElements, ``torch.gather``).

``out[i] = x[i with i[axis] = index[i]]``, an output of ``index``'s shape; see SEMANTICS.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import ValidationError
from ..loopnest import Kernel, Load, Store
from ..lower import IndexValue, LoopVars, LoweringContext, buffer_of, gather_value, loop_nest, make_kernel
from .common import check_index_dtype, check_mode, check_nonempty_axis, check_scalar, normalize_axis
from ..symbolic import dims_le
from .definition import OpDef


@dataclass(frozen=True)
class GatherAttrs:
    """``axis`` non-negative; ``fill_value`` a Python number of x's dtype."""

    axis: int = 0
    mode: str = "raise"
    fill_value: bool | int | float = 0


def infer_gather(inputs, axis, mode, fill_value):
    """Output ``index.shape``, x's dtype."""
    x, idx = inputs
    op = "gather"
    check_index_dtype(op, idx, idx.name)
    check_mode(op, mode)
    r = x.ndim
    axis = normalize_axis(op, axis, r)
    if idx.ndim != r:
        raise ValidationError(op, "rank(index) == rank(x)", f"index has rank {idx.ndim}, x has rank {r}", input=idx.name)
    for j in range(r):
        if j != axis and not dims_le(idx.shape[j], x.shape[j]):
            raise ValidationError(op, "index.shape[j] <= x.shape[j] for j != axis",
                                  f"index.shape[{j}]={idx.shape[j]} > x.shape[{j}]={x.shape[j]}", input=idx.name)
    fill_value = check_scalar(op, "fill_value", fill_value, x.dtype)
    check_nonempty_axis(op, mode, x.shape[axis], idx)
    return GatherAttrs(axis, mode, fill_value), tuple(idx.shape), x.dtype


def lower_gather(ctx: LoweringContext, node, attrs: GatherAttrs) -> Kernel:
    """A compute over the output (the index's shape), reading ``x`` at the resolved index."""
    x, idx = (buffer_of(t) for t in node.inputs)
    out = buffer_of(node.output)
    axis, mode = attrs.axis, attrs.mode
    o = LoopVars().make(len(out.shape))
    r = IndexValue(Load(idx, tuple(o)), x.shape[axis], mode)
    x_pos = list(o)
    x_pos[axis] = r.index
    value = gather_value(x, x_pos, [r], attrs.fill_value)
    compute = loop_nest(o, out.shape, Store(out, tuple(o), value))
    body, checks = ctx.with_check(node, mode, idx, (x.shape[axis],), compute)
    return make_kernel(node, body, checks=checks)


GATHER = OpDef("gather", operands=("x", "index"), attrs=GatherAttrs, infer=infer_gather, lower=lower_gather)
