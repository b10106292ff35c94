"""``reshape``: the same elements in row-major order under a new shape (one ``-1`` allowed)."""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass

from ...errors import ValidationError
from ..loopnest import Buffer, For, Kernel, Load, Store, const
from ..lower import LoopVars, LoweringContext, make_kernel
from .definition import OpDef


@dataclass(frozen=True)
class ReshapeAttrs:
    """The output shape, its ``-1`` resolved."""

    shape: tuple


def infer_reshape(inputs, shape):
    """Output ``shape`` (a ``-1`` takes the remaining count), x's dtype."""
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
    return ReshapeAttrs(shape), shape, x.dtype


def lower_reshape(ctx: LoweringContext, node, attrs: ReshapeAttrs) -> Kernel:
    """A flat copy: both buffers viewed as one row-major axis."""
    x, out = node.inputs[0], node.output
    flat_in = Buffer(x.name, x.dtype, (x.size,))
    flat_out = Buffer(out.name, out.dtype, (out.size,))
    (i,) = LoopVars().make(1)
    body = For(i, const(out.size), Store(flat_out, (i,), Load(flat_in, (i,))))
    return make_kernel(node, body)


RESHAPE = OpDef("reshape", operands=("x",), attrs=ReshapeAttrs, infer=infer_reshape, lower=lower_reshape)
