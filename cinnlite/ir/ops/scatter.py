"""``scatter``: a copy of ``x`` with ``src`` combined in along one axis at ``index`` (ONNX
ScatterElements, ``torch.scatter_reduce``).

For every position ``p`` of ``index`` in row-major order, ``t = p`` with ``t[axis] = index[p]``
and ``out[t] = combine(out[t], src[p])``; see SEMANTICS.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import ValidationError
from ..loopnest import Kernel, Load
from ..lower import IndexValue, LoweringContext, buffer_of, scatter_kernel
from .common import check_nonempty_axis, check_scatter_operands, normalize_axis
from ..symbolic import dims_le
from .definition import OpDef


@dataclass(frozen=True)
class ScatterAttrs:
    """``axis`` non-negative."""

    axis: int = 0
    reduce: str = "none"
    mode: str = "raise"
    include_self: bool = True


def infer_scatter(inputs, axis, reduce, mode, include_self):
    """Output x's shape and dtype."""
    x, idx, src = inputs
    op = "scatter"
    include_self = check_scatter_operands(op, x, idx, src, mode, reduce, include_self)
    r = x.ndim
    axis = normalize_axis(op, axis, r)
    if idx.ndim != r:
        raise ValidationError(op, "rank(index) == rank(x)", f"index has rank {idx.ndim}, x has rank {r}", input=idx.name)
    if src.ndim != r:
        raise ValidationError(op, "rank(src) == rank(x)", f"src has rank {src.ndim}, x has rank {r}", input=src.name)
    for j in range(r):
        if not dims_le(idx.shape[j], src.shape[j]):
            raise ValidationError(op, "index.shape[j] <= src.shape[j]",
                                  f"index.shape[{j}]={idx.shape[j]} > src.shape[{j}]={src.shape[j]}", input=idx.name)
        if j != axis and not dims_le(idx.shape[j], x.shape[j]):
            raise ValidationError(op, "index.shape[j] <= x.shape[j] for j != axis",
                                  f"index.shape[{j}]={idx.shape[j]} > x.shape[{j}]={x.shape[j]}", input=idx.name)
    check_nonempty_axis(op, mode, x.shape[axis], idx)
    return ScatterAttrs(axis, reduce, mode, include_self), tuple(x.shape), x.dtype


def lower_scatter(ctx: LoweringContext, node, attrs: ScatterAttrs) -> Kernel:
    """Copy, then one update per index position: ``src`` at that position, into ``out`` at the
    position with its ``axis`` coordinate replaced by the resolved index."""
    x, idx, src = (buffer_of(t) for t in node.inputs)
    axis, mode = attrs.axis, attrs.mode

    def update(u):
        r = IndexValue(Load(idx, tuple(u)), x.shape[axis], mode)
        t = list(u)
        t[axis] = r.index
        return t, Load(src, tuple(u)), [r]

    return scatter_kernel(ctx, node, attrs, idx.shape, update, idx, (x.shape[axis],))


SCATTER = OpDef("scatter", operands=("x", "index", "src"), attrs=ScatterAttrs, infer=infer_scatter,
                lower=lower_scatter)
