"""``reshape``: the same elements in row-major order under a new shape (one ``-1`` allowed)."""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import ValidationError
from ..loopnest import Buffer, For, Kernel, Load, Store, as_expr
from ..symbolic import Dim, dim_expr, dims_equal, exact_div, prod
from .common import shape_dims
from ..lower import LoopVars, LoweringContext, make_kernel
from .definition import OpDef


@dataclass(frozen=True)
class ReshapeAttrs:
    """The output shape, its ``-1`` resolved."""

    shape: tuple


def infer_reshape(inputs, shape):
    """Output ``shape`` (a ``-1`` takes the remaining count; symbolic sizes allowed), x's dtype."""
    (x,) = inputs
    op = "reshape"
    shape = shape_dims(op, shape)
    static = [d for d in shape if not isinstance(d, Dim)]
    if sum(1 for d in static if d == -1) > 1 or any(d < -1 for d in static):
        raise ValidationError(op, "at most one -1, others non-negative", f"shape {_text(shape)} is invalid")
    if -1 in static:
        known = prod(d for d in shape if isinstance(d, Dim) or d != -1)
        rest = exact_div(x.size, known)
        if known == 0 or rest is None:
            raise ValidationError(op, "element count is kept", f"cannot reshape {_text(x.shape)} to {_text(shape)}",
                                  input=x.name)
        shape = tuple(rest if not isinstance(d, Dim) and d == -1 else d for d in shape)
    if not dims_equal(prod(shape), x.size):
        raise ValidationError(op, "element count is kept", f"cannot reshape {_text(x.shape)} to {_text(shape)}",
                              input=x.name)
    return ReshapeAttrs(shape), shape, x.dtype


def _text(shape) -> str:
    """A shape as the errors show it: a tuple of numbers, symbols named."""
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def lower_reshape(ctx: LoweringContext, node, attrs: ReshapeAttrs) -> Kernel:
    """A flat copy: both buffers viewed as one row-major axis."""
    x, out = node.inputs[0], node.output
    flat_in = Buffer(x.name, x.dtype, (dim_expr(x.size),))
    flat_out = Buffer(out.name, out.dtype, (dim_expr(out.size),))
    (i,) = LoopVars().make(1)
    body = For(i, as_expr(flat_out.shape[0]), Store(flat_out, (i,), Load(flat_in, (i,))))
    return make_kernel(node, body)


RESHAPE = OpDef("reshape", operands=("x",), attrs=ReshapeAttrs, infer=infer_reshape, lower=lower_reshape)
