"""The constants: ``fill_constant``, a tensor whose every element is one value, ``iota``, a
tensor whose every element is its position, and ``constant``, a tensor holding a copy of an array.

A ``constant`` is no kernel: its value is data, which the runtimes bind as a buffer."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...dtypes import as_dtype
from ...errors import DTypeError, ValidationError
from ..constant import ConstArray
from ..loopnest import Cast, Kernel, Store, const
from ..lower import LoopVars, LoweringContext, buffer_of, loop_nest, make_kernel
from ..transform import flat_position
from .common import check_scalar, check_shape, normalize_axis
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
class IotaAttrs:
    """The axis whose coordinate each element holds (non-negative), or None: the row-major
    position."""

    axis: int | None = None


def infer_iota(inputs, shape, dtype, axis):
    """Output ``shape`` (symbolic sizes allowed) in ``dtype``, an integer or float dtype."""
    op = "iota"
    shape = check_shape(op, shape)
    dtype = as_dtype(dtype, op)
    if dtype.is_bool or dtype.is_complex:
        raise DTypeError(op, "integer or float dtype", f"iota counts in an integer or float dtype, not {dtype}")
    if axis is not None:
        axis = normalize_axis(op, axis, len(shape))
    return IotaAttrs(axis), shape, dtype


def lower_iota(ctx: LoweringContext, node, attrs: IotaAttrs) -> Kernel:
    """A compute storing each element's coordinate (or flat position), counted in int64 and
    converted as ``cast`` converts."""
    out = buffer_of(node.output)
    vs = LoopVars().make(len(out.shape))
    value = flat_position(vs, out.shape) if attrs.axis is None else vs[attrs.axis]
    if out.dtype != value.dtype:
        value = Cast(out.dtype, value)
    return make_kernel(node, loop_nest(vs, out.shape, Store(out, tuple(vs), value)))


IOTA = OpDef("iota", operands=(), attrs=IotaAttrs, infer=infer_iota, lower=lower_iota)


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
