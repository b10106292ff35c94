"""The elementwise binaries ``add``, ``subtract``, ``multiply``, ``divide``, ``maximum`` and
``minimum``: same-dtype operands under numpy broadcasting (SEMANTICS.md).

Integers wrap around; integer ``divide`` is numpy's floor division with ``x // 0 == 0``; bool
operands are allowed in ``maximum`` and ``minimum`` only, complex ones in all but those two.
"""
from __future__ import annotations

from ...errors import DTypeError, ValidationError
from ..loopnest import Binary, Cmp, Kernel, Select, const
from ..lower import LoweringContext, elementwise_kernel
from ..symbolic import Dim, dims_equal
from .definition import NoAttrs, OpDef


def divide(a, b):
    """Floats: IEEE division. Integers: floor division (numpy ``//``) with ``x // 0 == 0`` and
    ``MIN // -1 == MIN``, written so that no machine division can trap or be undefined."""
    if a.dtype.is_float or a.dtype.is_complex:
        return Binary("div", a, b)
    t = a.dtype
    zero, one = const(0, t), const(1, t)
    if not t.is_signed:
        safe = Select(Cmp("eq", b, zero), one, b)
        return Select(Cmp("eq", b, zero), zero, Binary("div", a, safe))
    minus_one = const(-1, t)
    safe = Select(Binary("or", Cmp("eq", b, zero), Cmp("eq", b, minus_one)), one, b)
    q = Binary("div", a, safe)
    r = Binary("sub", a, Binary("mul", q, safe))
    # Truncation rounded toward zero; floor differs when the remainder's sign differs from b's.
    floor_q = Select(Binary("and", Cmp("ne", r, zero), Cmp("ne", Cmp("lt", r, zero), Cmp("lt", b, zero))),
                     Binary("sub", q, one), q)
    negated = Binary("sub", zero, a)  # a // -1, wrapping at MIN like numpy
    return Select(Cmp("eq", b, zero), zero, Select(Cmp("eq", b, minus_one), negated, floor_q))


#: The scalar each binary computes from its two (broadcast) operand values.
BINARY_VALUES = {
    "add": lambda a, b: Binary("add", a, b),
    "subtract": lambda a, b: Binary("sub", a, b),
    "multiply": lambda a, b: Binary("mul", a, b),
    "divide": divide,
    "maximum": lambda a, b: Binary("max", a, b),
    "minimum": lambda a, b: Binary("min", a, b),
}
ELEMENTWISE_BINARY = tuple(BINARY_VALUES)


def broadcast_shapes(op, a, b):
    """numpy broadcasting: align trailing axes; each pair equal or one of them 1."""
    ra, rb = len(a.shape), len(b.shape)
    r = max(ra, rb)
    pa = (1,) * (r - ra) + tuple(a.shape)
    pb = (1,) * (r - rb) + tuple(b.shape)
    out = []
    for j, (da, db) in enumerate(zip(pa, pb)):
        if da == 1 or db == 1:
            out.append(db if da == 1 else da)
        elif not dims_equal(da, db):
            raise ValidationError(op, "shapes broadcast (numpy rules)",
                                  f"shapes {a.shape} and {b.shape} do not broadcast (axis {j - r}: {da} vs {db})",
                                  input=b.name)
        else:  # equal, or assumed equal: a number says more than a symbol
            out.append(db if isinstance(da, Dim) else da)
    return tuple(out)


def _infer_binary(op):
    """The rules of binary ``op``: one dtype for both operands (a number unless ``op`` is
    maximum or minimum), shapes that broadcast."""
    def infer(inputs):
        a, b = inputs
        if a.dtype != b.dtype:
            raise DTypeError(op, "operands have one dtype",
                             f"operands have dtypes {a.dtype} and {b.dtype}; cast one of them first", input=b.name)
        if a.dtype.is_bool and op not in ("maximum", "minimum"):
            raise DTypeError(op, "arithmetic on numbers", f"{op} is not defined on bool; cast to a number first",
                             input=a.name)
        if a.dtype.is_complex and op in ("maximum", "minimum"):
            raise DTypeError(op, "ordered operands", f"{op} is not defined on {a.dtype}: complex numbers are not "
                             "ordered", input=a.name)
        return NoAttrs(), broadcast_shapes(op, a, b), a.dtype
    infer.__name__ = f"infer_{op}"
    return infer


def _lower_binary(op):
    """The lowering of binary ``op``: a broadcast compute of its :data:`BINARY_VALUES` entry."""
    def lower(ctx: LoweringContext, node, attrs: NoAttrs) -> Kernel:
        return elementwise_kernel(node, BINARY_VALUES[op])
    lower.__name__ = f"lower_{op}"
    return lower


BINARIES = tuple(OpDef(op, operands=("a", "b"), attrs=NoAttrs, infer=_infer_binary(op), lower=_lower_binary(op))
                 for op in ELEMENTWISE_BINARY)
