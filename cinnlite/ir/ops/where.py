"""``where``: ``a`` where ``condition`` holds, ``b`` elsewhere, the three broadcast together
(numpy's ``where``, ONNX Where)."""
from __future__ import annotations

from types import SimpleNamespace

from ...errors import DTypeError
from ..loopnest import Kernel, Select
from ..lower import LoweringContext, elementwise_kernel
from .definition import NoAttrs, OpDef
from .elementwise import broadcast_shapes


def infer_where(inputs):
    """A bool condition, one dtype for ``a`` and ``b``; the shape of all three broadcast."""
    cond, a, b = inputs
    op = "where"
    if not cond.dtype.is_bool:
        raise DTypeError(op, "condition is bool", f"condition has dtype {cond.dtype}; compare it to get a bool",
                         input=cond.name)
    if a.dtype != b.dtype:
        raise DTypeError(op, "operands have one dtype",
                         f"a and b have dtypes {a.dtype} and {b.dtype}; cast one of them first", input=b.name)
    values = SimpleNamespace(shape=broadcast_shapes(op, a, b), name=b.name)
    return NoAttrs(), broadcast_shapes(op, cond, values), a.dtype


def lower_where(ctx: LoweringContext, node, attrs: NoAttrs) -> Kernel:
    """A compute selecting per element (both operands are plain loads, so reading both is safe)."""
    return elementwise_kernel(node, lambda cond, a, b: Select(cond, a, b))


WHERE = OpDef("where", operands=("condition", "a", "b"), attrs=NoAttrs, infer=infer_where, lower=lower_where)
