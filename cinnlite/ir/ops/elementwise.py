"""The elementwise binaries ``add``, ``subtract``, ``multiply``, ``divide``, ``maximum`` and
``minimum``: same-dtype operands under numpy broadcasting (SEMANTICS.md).

Integers wrap around; integer ``divide`` is numpy's floor division with ``x // 0 == 0``; bool
operands are allowed in ``maximum`` and ``minimum`` only.
"""
from __future__ import annotations

from ...errors import DTypeError, ValidationError
from .definition import NoAttrs, OpDef

ELEMENTWISE_BINARY = ("add", "subtract", "multiply", "divide", "maximum", "minimum")


def broadcast_shapes(op, a, b):
    """numpy broadcasting: align trailing axes; each pair equal or one of them 1."""
    ra, rb = len(a.shape), len(b.shape)
    r = max(ra, rb)
    pa = (1,) * (r - ra) + tuple(a.shape)
    pb = (1,) * (r - rb) + tuple(b.shape)
    out = []
    for j, (da, db) in enumerate(zip(pa, pb)):
        if da != db and da != 1 and db != 1:
            raise ValidationError(op, "shapes broadcast (numpy rules)",
                                  f"shapes {a.shape} and {b.shape} do not broadcast (axis {j - r}: {da} vs {db})",
                                  input=b.name)
        out.append(db if da == 1 else da)
    return tuple(out)


def _infer_binary(op):
    def infer(inputs):
        a, b = inputs
        if a.dtype != b.dtype:
            raise DTypeError(op, "operands have one dtype",
                             f"operands have dtypes {a.dtype} and {b.dtype}; cast one of them first", input=b.name)
        if a.dtype.is_bool and op not in ("maximum", "minimum"):
            raise DTypeError(op, "arithmetic on numbers", f"{op} is not defined on bool; cast to a number first",
                             input=a.name)
        return NoAttrs(), broadcast_shapes(op, a, b), a.dtype
    infer.__name__ = f"infer_{op}"
    return infer


BINARIES = tuple(OpDef(op, operands=("a", "b"), attrs=NoAttrs, infer=_infer_binary(op)) for op in ELEMENTWISE_BINARY)
