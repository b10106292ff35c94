"""``cast``: every element converted to another dtype, like numpy's ``astype`` (SEMANTICS.md):
float to integer truncates toward zero and saturates (NaN gives 0); to bool is ``x != 0``; a real
value becomes a complex one with imaginary part 0, and a complex one converts only to complex."""
from __future__ import annotations

from dataclasses import dataclass

from ...dtypes import DType, as_dtype
from ...errors import DTypeError
from ..loopnest import Cast, Kernel
from ..lower import LoweringContext, elementwise_kernel
from .definition import OpDef


@dataclass(frozen=True)
class CastAttrs:
    """The target dtype."""

    dtype: DType


def infer_cast(inputs, dtype):
    """Output x's shape in ``dtype``, any supported dtype."""
    (x,) = inputs
    dtype = as_dtype(dtype, "cast")
    if x.dtype.is_complex and not dtype.is_complex:
        raise DTypeError("cast", "complex casts only to complex",
                         f"cannot cast {x.dtype} to {dtype}: it would drop the imaginary part", input=x.name)
    return CastAttrs(dtype), tuple(x.shape), dtype


def lower_cast(ctx: LoweringContext, node, attrs: CastAttrs) -> Kernel:
    """A compute converting each element (the renderers give :class:`Cast` numpy's meaning)."""
    return elementwise_kernel(node, lambda x: Cast(attrs.dtype, x))


CAST = OpDef("cast", operands=("x",), attrs=CastAttrs, infer=infer_cast, lower=lower_cast)
