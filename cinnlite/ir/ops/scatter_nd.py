"""``scatter_nd``: a copy of ``x`` with ``src`` combined in at index tuples (ONNX ScatterND).

The slice form (``dims=None``): ``out[index[ι], ρ] = combine(…, src[ι, ρ])``. The element form
(``dims`` given): ``out[t] = combine(out[t], src[p])`` with ``t = p``, ``t[dims[k]] = index[p, k]``.
Updates apply in row-major order of the index positions; see SEMANTICS.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import ValidationError
from ..loopnest import Kernel, Load
from ..lower import IndexValue, LoweringContext, buffer_of, scatter_kernel, tuple_load
from .common import ND_REDUCTIONS, check_nonempty_axis, check_scatter_operands, normalize_dims, tuple_index_shape
from ..symbolic import dims_le, shapes_equal
from .definition import OpDef


@dataclass(frozen=True)
class ScatterNdAttrs:
    """``dims`` None (slice form) or a tuple of non-negative axes."""

    dims: tuple | None = None
    reduce: str = "none"
    index_layout: str = "last"
    mode: str = "raise"
    include_self: bool = True


def infer_scatter_nd(inputs, dims, reduce, index_layout, mode, include_self):
    """The rules both forms share, then those of the form ``dims`` selects; x's shape and dtype."""
    x, idx, src = inputs
    op = "scatter_nd"
    include_self = check_scatter_operands(op, x, idx, src, mode, reduce, include_self, ND_REDUCTIONS)
    ishape = tuple_index_shape(op, idx, index_layout)
    if dims is not None:
        dims = _check_element_form(x, idx, src, ishape, dims, mode)
    else:
        _check_slice_form(x, idx, src, ishape, mode)
    return ScatterNdAttrs(dims, reduce, index_layout, mode, include_self), tuple(x.shape), x.dtype


def _check_element_form(x, idx, src, ishape, dims, mode):
    """The element form's rules; returns the normalised ``dims``."""
    op, r = "scatter_nd", x.ndim
    dims = normalize_dims(op, dims, r, ishape[-1])
    if src.ndim != r:
        raise ValidationError(op, "rank(src) == rank(x)", f"src has rank {src.ndim}, x has rank {r}",
                              input=src.name)
    if not shapes_equal(ishape[:-1], src.shape):
        raise ValidationError(op, "index.shape == src.shape + (len(dims),)",
                              f"index shape {idx.shape} does not match src shape {src.shape}", input=idx.name)
    for j in range(r):
        if j not in dims and not dims_le(src.shape[j], x.shape[j]):
            raise ValidationError(op, "src.shape[j] <= x.shape[j] for j not in dims",
                                  f"src.shape[{j}]={src.shape[j]} > x.shape[{j}]={x.shape[j]}", input=src.name)
    for d in dims:
        check_nonempty_axis(op, mode, x.shape[d], idx)
    return dims


def _check_slice_form(x, idx, src, ishape, mode):
    """The slice form's rules: tuples no longer than rank(x), ``src`` one slice per tuple."""
    op, r, m = "scatter_nd", x.ndim, ishape[-1]
    if m > r:
        raise ValidationError(op, "index.shape[-1] <= rank(x)",
                              f"index tuples have length {m}, more than rank(x) = {r}", input=idx.name)
    want = tuple(ishape[:-1]) + tuple(x.shape[m:])
    if not shapes_equal(src.shape, want):
        raise ValidationError(op, "src.shape == index.shape[:-1] + x.shape[m:]",
                              f"src has shape {src.shape}, expected {want}", input=src.name)
    for k in range(m):
        check_nonempty_axis(op, mode, x.shape[k], idx)


def lower_scatter_nd(ctx: LoweringContext, node, attrs: ScatterNdAttrs) -> Kernel:
    """Copy, then one update per element of ``src``, in row-major order."""
    x, idx, src = (buffer_of(t) for t in node.inputs)
    layout = attrs.index_layout
    q = len(idx.shape)
    m = idx.shape[0] if layout == "first" else idx.shape[-1]
    tuple_axis = 0 if layout == "first" else q - 1
    if attrs.dims is None:
        update, sizes = _slice_updates(x, idx, src, layout, attrs.mode, m)
    else:
        update, sizes = _element_updates(x, idx, src, layout, attrs.mode, attrs.dims)
    return scatter_kernel(ctx, node, attrs, tuple(src.shape), update, idx, sizes, tuple_axis)


def _slice_updates(x, idx, src, layout, mode, m):
    """The slice form: ``src[ι, ρ]`` goes to ``out[index[ι], ρ]``; the addressed axis sizes."""
    q = len(idx.shape)

    def update(u):
        outer, rho = u[:q - 1], u[q - 1:]
        rs = [IndexValue(tuple_load(idx, layout, outer, k), x.shape[k], mode) for k in range(m)]
        return [r.index for r in rs] + list(rho), Load(src, tuple(u)), rs

    return update, tuple(x.shape[:m])


def _element_updates(x, idx, src, layout, mode, dims):
    """The element form: ``src[p]`` goes to ``out[p with p[dims[k]] = index[p, k]]``; the
    addressed axis sizes."""

    def update(u):
        rs = [IndexValue(tuple_load(idx, layout, u, k), x.shape[d], mode) for k, d in enumerate(dims)]
        t = list(u)
        for r, d in zip(rs, dims):
            t[d] = r.index
        return t, Load(src, tuple(u)), rs

    return update, tuple(x.shape[d] for d in dims)


SCATTER_ND = OpDef("scatter_nd", operands=("x", "index", "src"), attrs=ScatterNdAttrs, infer=infer_scatter_nd,
                   lower=lower_scatter_nd)
