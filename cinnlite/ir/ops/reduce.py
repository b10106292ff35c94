"""``reduce_sum``, ``reduce_max`` and ``reduce_min``: the sum, largest or smallest element of
``x`` over some axes (numpy's ``sum``/``max``/``min`` with ``keepdims``, ONNX ReduceSum/Max/Min),
in x's dtype; see SEMANTICS.md.

The reduction runs in row-major order of ``x``, so it is the same on every run and every thread
count; float16 and bfloat16 data sum in float32 and are rounded once. max and min propagate NaN
(numpy's ``maximum``/``minimum``); over no elements they give -inf/+inf (floats) or the dtype's
smallest/largest value (integers), the identities of the combine.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import DTypeError, ValidationError
from ..loopnest import Buffer, Cast, Kernel, Load, Reduce, Seq, Store, const
from ..lower import ACCUMULATE_DTYPES, LoopVars, LoweringContext, buffer_of, identity, loop_nest, make_kernel
from ...dtypes import float16, float32
from .common import int_attr, normalize_axis
from .definition import OpDef

#: The dtype a sum accumulates in, where it is not the data dtype.
SUM_DTYPES = {**ACCUMULATE_DTYPES, float16.name: float32}


@dataclass(frozen=True)
class ReduceAttrs:
    """The reduced axes, sorted and non-negative (None only as the builder's default: every axis)."""

    axes: tuple | None = None
    keepdims: bool = False


def _infer_reduce(op):
    def infer(inputs, axes, keepdims):
        return _infer(op, inputs, axes, keepdims)
    infer.__name__ = f"infer_{op}"
    return infer


def _infer(op, inputs, axes, keepdims):
    """Every axis (``axes=None``) or the distinct axes given; a number dtype (ordered for max
    and min)."""
    (x,) = inputs
    if x.dtype.is_bool:
        raise DTypeError(op, "arithmetic on numbers", f"{op} is not defined on bool; cast to a number first",
                         input=x.name)
    if x.dtype.is_complex and op != "reduce_sum":
        raise DTypeError(op, "ordered operands", f"{op} is not defined on {x.dtype}: complex numbers are not ordered",
                         input=x.name)
    if not isinstance(keepdims, bool):
        raise ValidationError(op, "keepdims is a bool", f"keepdims must be True or False, got {keepdims!r}")
    if axes is None:
        axes = tuple(range(x.ndim))
    elif isinstance(axes, (list, tuple)):
        axes = tuple(normalize_axis(op, a, x.ndim, "axes entry") for a in axes)
    else:
        axes = (normalize_axis(op, int_attr(op, "axes", axes), x.ndim, "axes entry"),)
    if len(set(axes)) != len(axes):
        raise ValidationError(op, "axes are distinct", f"axes={list(axes)} repeats an axis")
    axes = tuple(sorted(axes))
    shape = tuple(1 if j in axes else d for j, d in enumerate(x.shape) if keepdims or j not in axes)
    return ReduceAttrs(axes, keepdims), shape, x.dtype


def _lower_reduce(combine):
    def lower(ctx: LoweringContext, node, attrs: ReduceAttrs) -> Kernel:
        return _lower(combine, node, attrs)
    lower.__name__ = f"lower_reduce_{combine}"
    return lower


def _lower(combine, node, attrs: ReduceAttrs) -> Kernel:
    """Start every result at the combine's identity; combine every element of x into its
    result in row-major order; (sums of float16, bfloat16) round the float32 sums once."""
    x, out = buffer_of(node.inputs[0]), buffer_of(node.output)
    wide = SUM_DTYPES.get(out.dtype.name) if combine == "add" else None
    acc = Buffer(f"{out.name}__sum", wide, out.shape) if wide else out
    vars_ = LoopVars()
    z = tuple(vars_.make(len(out.shape)))
    u = tuple(vars_.make(len(x.shape)))
    target = tuple(const(0) if j in attrs.axes else v for j, v in enumerate(u)
                   if attrs.keepdims or j not in attrs.axes)
    stages = [loop_nest(z, out.shape, Store(acc, z, identity(combine, acc.dtype))),
              loop_nest(u, x.shape, Reduce(acc, target, Cast(acc.dtype, Load(x, u)) if wide else Load(x, u), combine))]
    if wide:
        f = tuple(vars_.make(len(out.shape)))
        stages.append(loop_nest(f, out.shape, Store(out, f, Cast(out.dtype, Load(acc, f)))))
    return make_kernel(node, Seq(tuple(stages)), temps=(acc,) if wide else (), pure=False)


REDUCES = tuple(OpDef(f"reduce_{name}", operands=("x",), attrs=ReduceAttrs, infer=_infer_reduce(f"reduce_{name}"),
                      lower=_lower_reduce(combine)) for name, combine in (("sum", "add"), ("max", "max"), ("min", "min")))
