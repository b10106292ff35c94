"""The float functions ``exp``, ``log``, ``sqrt``, ``tanh`` and ``sigmoid`` (SEMANTICS.md).

float32 and float64 compute in their own type; float16 and bfloat16 compute in float32 and round
once, as PyTorch does on the CPU. ``sigmoid`` is ``1 / (1 + exp(-x))``.
"""
from __future__ import annotations

from ...dtypes import float32
from ...errors import DTypeError
from ..loopnest import Binary, Cast, Kernel, Math, const
from ..lower import LoweringContext, elementwise_kernel
from .definition import NoAttrs, OpDef


def _sigmoid(x):
    one = const(1.0, x.dtype)
    return Binary("div", one, Binary("add", one, Math("exp", Binary("sub", const(-0.0, x.dtype), x))))


#: The value each function computes from one float32 or float64 operand.
UNARY_VALUES = {
    "exp": lambda x: Math("exp", x),
    "log": lambda x: Math("log", x),
    "sqrt": lambda x: Math("sqrt", x),
    "tanh": lambda x: Math("tanh", x),
    "sigmoid": _sigmoid,
}


def _infer_unary(op):
    def infer(inputs):
        (x,) = inputs
        if not x.dtype.is_float:
            raise DTypeError(op, "float operand", f"{op} is defined on float dtypes, not {x.dtype}; cast first",
                             input=x.name)
        return NoAttrs(), tuple(x.shape), x.dtype
    infer.__name__ = f"infer_{op}"
    return infer


def _lower_unary(op):
    def lower(ctx: LoweringContext, node, attrs: NoAttrs) -> Kernel:
        def value(x):
            if x.dtype.bits >= 32:
                return UNARY_VALUES[op](x)
            return Cast(x.dtype, UNARY_VALUES[op](Cast(float32, x)))
        return elementwise_kernel(node, value)
    lower.__name__ = f"lower_{op}"
    return lower


UNARIES = tuple(OpDef(op, operands=("x",), attrs=NoAttrs, infer=_infer_unary(op), lower=_lower_unary(op))
                for op in UNARY_VALUES)
