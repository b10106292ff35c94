"""The constants: ``fill_constant``, a tensor whose every element is one value, and
``constant``, a tensor holding a copy of an array.

A ``constant`` is no kernel: its value is data, which the runtimes bind as a buffer."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...dtypes import as_dtype
from ...errors import ValidationError
from ..constant import ConstArray
from ..loopnest import Kernel, Store, const
from ..lower import LoopVars, LoweringContext, buffer_of, loop_nest, make_kernel
from .common import check_scalar, check_shape
from .definition import OpDef


@dataclass(frozen=True)
class FillConstantAttrs:
    """The value, a Python number of the output dtype."""

    value: bool | int | float


def infer_fill_constant(inputs, shape, value, dtype):
    """Output ``shape`` and ``dtype``, which must hold ``value`` exactly."""
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


@dataclass(frozen=True)
class ConstantAttrs:
    """A read-only copy of the array, compared and hashed by content."""

    value: ConstArray


def infer_constant(inputs, value, dtype):
    """``value`` as an array (of ``dtype`` if given, which must hold every value exactly)."""
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError) as exc:
        raise ValidationError("constant", "value is a rectangular array", f"cannot make an array: {exc}") from None
    check_shape("constant", arr.shape)
    dt = as_dtype(dtype if dtype is not None else arr.dtype, "constant")
    if dtype is not None and arr.dtype != dt.np:
        try:
            cast = arr.astype(dt.np)
            fits = np.array_equal(cast.astype(arr.dtype), arr)
        except (ValueError, TypeError, OverflowError):  # text, objects: nothing numpy can convert
            fits = False
        if not fits:
            raise ValidationError("constant", "value fits the dtype", f"values do not fit in {dt}")
        arr = cast
    return ConstantAttrs(ConstArray(arr)), tuple(arr.shape), dt


CONSTANT = OpDef("constant", operands=(), attrs=ConstantAttrs, infer=infer_constant, lower=None)
