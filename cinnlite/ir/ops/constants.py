"""``fill_constant``: a tensor whose every element is one value."""
from __future__ import annotations

from dataclasses import dataclass

from ...dtypes import as_dtype
from ..loopnest import Kernel, Store, const
from ..lower import LoopVars, LoweringContext, buffer_of, loop_nest, make_kernel
from .common import check_scalar, check_shape
from .definition import OpDef


@dataclass(frozen=True)
class FillConstantAttrs:
    value: bool | int | float


def infer_fill_constant(inputs, shape, value, dtype):
    shape = check_shape("fill_constant", shape)
    dtype = as_dtype(dtype, "fill_constant")
    value = check_scalar("fill_constant", "value", value, dtype)
    return FillConstantAttrs(value), shape, dtype


def lower_fill_constant(ctx: LoweringContext, node, attrs: FillConstantAttrs) -> Kernel:
    """A compute storing the value everywhere."""
    out = buffer_of(node.output)
    vs = LoopVars().make(len(out.shape))
    body = loop_nest(vs, out.shape, Store(out, tuple(vs), const(attrs.value, out.dtype)))
    return make_kernel(node, body)


FILL_CONSTANT = OpDef("fill_constant", operands=(), attrs=FillConstantAttrs, infer=infer_fill_constant,
                      lower=lower_fill_constant)
