"""``cast``: every element converted to another dtype, like numpy's ``astype`` (SEMANTICS.md):
float to integer truncates toward zero and saturates (NaN gives 0); to bool is ``x != 0``."""
from __future__ import annotations

from dataclasses import dataclass

from ...dtypes import DType, as_dtype
from .definition import OpDef


@dataclass(frozen=True)
class CastAttrs:
    dtype: DType


def infer_cast(inputs, dtype):
    (x,) = inputs
    dtype = as_dtype(dtype, "cast")
    return CastAttrs(dtype), tuple(x.shape), dtype


CAST = OpDef("cast", operands=("x",), attrs=CastAttrs, infer=infer_cast)
