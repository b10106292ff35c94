"""The comparisons ``equal``, ``not_equal``, ``less``, ``less_equal``, ``greater`` and
``greater_equal``: bool results of same-dtype operands under numpy broadcasting (SEMANTICS.md).

Floats compare as IEEE (and numpy) do: every comparison with NaN is false except ``not_equal``,
which is true. Complex operands are a DTypeError: ``equal`` on them would compare parts, and no
order exists for the others.
"""
from __future__ import annotations

from ...dtypes import bool_
from ...errors import DTypeError
from ..loopnest import Cmp, Kernel
from ..lower import LoweringContext, elementwise_kernel
from .definition import NoAttrs, OpDef
from .elementwise import broadcast_shapes

#: The :class:`~cinnlite.ir.loopnest.Cmp` operation of each comparison.
COMPARISONS = {"equal": "eq", "not_equal": "ne", "less": "lt", "less_equal": "le", "greater": "gt",
               "greater_equal": "ge"}


def _infer_compare(op):
    """The rules of comparison ``op``: one real dtype for both operands, shapes that broadcast."""
    def infer(inputs):
        a, b = inputs
        if a.dtype != b.dtype:
            raise DTypeError(op, "operands have one dtype",
                             f"operands have dtypes {a.dtype} and {b.dtype}; cast one of them first", input=b.name)
        if a.dtype.is_complex:
            raise DTypeError(op, "real operands", f"{op} is not defined on {a.dtype}", input=a.name)
        return NoAttrs(), broadcast_shapes(op, a, b), bool_
    infer.__name__ = f"infer_{op}"
    return infer


def _lower_compare(op):
    def lower(ctx: LoweringContext, node, attrs: NoAttrs) -> Kernel:
        return elementwise_kernel(node, lambda a, b: Cmp(COMPARISONS[op], a, b))
    lower.__name__ = f"lower_{op}"
    return lower


COMPARES = tuple(OpDef(op, operands=("a", "b"), attrs=NoAttrs, infer=_infer_compare(op), lower=_lower_compare(op))
                 for op in COMPARISONS)
