"""The ONNX operators exporters put around the indexing ones (shape arithmetic, layout,
elementwise, comparisons, reductions, matrix products), imported onto cinnlite operators.

Every handler folds its node into a numpy constant when all its inputs are constants (shape
arithmetic: Shape, Gather of a shape, Concat, Range ...), so that what reaches the program is
the data path only. Layout operators whose index pattern is known at import (Slice, Tile,
Transpose, Concat) become ``take`` of a constant index; MatMul is a ``reduce_sum`` of a
broadcast product, which fusion turns into one loop nest.
"""
from __future__ import annotations

import numpy as np

from .onnx_support import OnnxImportError, Value

#: Elementwise binaries and comparisons: (cinnlite builder method, numpy function for folding).
_BINARY = {"Add": ("add", np.add), "Sub": ("subtract", np.subtract), "Mul": ("multiply", np.multiply),
           "Equal": ("equal", np.equal), "Less": ("less", np.less), "Greater": ("greater", np.greater),
           "LessOrEqual": ("less_equal", np.less_equal), "GreaterOrEqual": ("greater_equal", np.greater_equal),
           "And": ("minimum", np.logical_and), "Or": ("maximum", np.logical_or)}

#: Float functions: (cinnlite builder method, numpy function for folding).
_FUNCTIONS = {"Exp": ("exp", np.exp), "Log": ("log", np.log), "Sqrt": ("sqrt", np.sqrt), "Tanh": ("tanh", np.tanh),
              "Sigmoid": ("sigmoid", lambda v: 1 / (1 + np.exp(-v)))}

EXPORTER_OPS = ("Shape", "Size", "Unsqueeze", "Squeeze", "Flatten", "Slice", "Concat", "Expand", "Tile",
                "Transpose", "Range", "ConstantOfShape", "Where", "Not", "Neg", "Abs", "Relu", "LeakyRelu",
                "Reciprocal", "Clip", "Div", "Max", "Min", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin",
                "MatMul", "Gemm", "If", "Softmax", "Pow", "TopK") + tuple(_BINARY) + tuple(_FUNCTIONS)

#: Operators with more than one output: their handlers return a tuple of values.
MULTI_OUTPUT_OPS = ("TopK",)

#: TopK is imported as comparisons of every pair of elements along its axis: up to this many.
TOPK_MAX_AXIS = 64


def _const_ints(ctx, value, what) -> list:
    if value is None:
        return None
    if not value.is_const:
        raise OnnxImportError(f"{ctx.where}: {what} must be a constant (cinnlite imports each call's shapes "
                              "statically, so shape arithmetic folds; this value is computed from data)")
    return [int(v) for v in np.asarray(value.array).reshape(-1)]


def _axis(ctx, axis, rank):
    if not -rank <= axis < rank:
        raise OnnxImportError(f"{ctx.where}: axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


class ExporterOps:
    """Handlers ``_op_<Op>`` for :data:`EXPORTER_OPS`, mixed into the importer."""

    # -- helpers ---------------------------------------------------------------------------------------

    def _static_shape(self, ctx, value) -> tuple:
        shape = value.shape
        if not all(isinstance(d, int) for d in shape):
            raise OnnxImportError(f"{ctx.where}: the input's shape {list(map(str, shape))} is symbolic; cinnlite "
                                  "folds shape arithmetic only for static shapes (give shapes=..., or run the model "
                                  "in cl.onnx.InferenceSession, which imports each call's shapes)")
        return tuple(shape)

    def _taken(self, ctx, value, index: np.ndarray, axis: int, name=None):
        """``value`` along ``axis`` at the constant positions ``index``: folded, or a ``take``."""
        if value.is_const:
            return Value(array=np.take(value.array, index, axis=axis), name=name)
        idx = self.b.constant(np.asarray(index, np.int64))
        return Value(tensor=self.b.take(self._tensor(value), idx, axis=axis, mode="clip", name=name))

    def _reshaped(self, value, shape, name):
        if value.is_const:
            return Value(array=value.array.reshape(shape), name=name)
        return Value(tensor=self.b.reshape(self._tensor(value), tuple(shape), name=name))

    def _axes(self, ctx, ins, attrs, index=1):
        """The ``axes`` of Squeeze/Unsqueeze/Reduce*: an input from opset 13 (18 for the Reduce
        operators other than ReduceSum), an attribute before."""
        if len(ins) > index and ins[index] is not None:
            return _const_ints(ctx, ins[index], "axes")
        return attrs.get("axes", "INTS", None)

    # -- shapes ----------------------------------------------------------------------------------------

    def _op_Shape(self, ctx, ins, attrs):
        shape = self._static_shape(ctx, ins[0])
        start, end = attrs.get("start", "INT", 0), attrs.get("end", "INT", None)
        return Value(array=np.array(shape[slice(start, end)], np.int64), name=ctx.name)

    def _op_Size(self, ctx, ins, attrs):
        return Value(array=np.array(int(np.prod(self._static_shape(ctx, ins[0]))), np.int64), name=ctx.name)

    def _op_ConstantOfShape(self, ctx, ins, attrs):
        shape = _const_ints(ctx, ins[0], "shape")
        value = attrs.get("value", "TENSOR", np.zeros(1, np.float32)).reshape(-1)[0]
        if int(np.prod(shape)) <= 64:
            return Value(array=np.full(shape, value), name=ctx.name)
        return Value(tensor=self.b.fill_constant(tuple(shape), value.item(), value.dtype, name=ctx.name))

    def _op_Range(self, ctx, ins, attrs):
        start, limit, delta = (v for v in ins)
        for v, what in ((start, "start"), (limit, "limit"), (delta, "delta")):
            if not v.is_const:
                raise OnnxImportError(f"{ctx.where}: {what} must be a constant")
        return Value(array=np.arange(start.array.item(), limit.array.item(), delta.array.item(),
                                     dtype=start.array.dtype), name=ctx.name)

    # -- layout ----------------------------------------------------------------------------------------

    def _op_Unsqueeze(self, ctx, ins, attrs):
        shape = list(ins[0].shape)
        rank = len(shape) + len(self._axes(ctx, ins, attrs))
        for a in sorted(_axis(ctx, a, rank) for a in self._axes(ctx, ins, attrs)):
            shape.insert(a, 1)
        return self._reshaped(ins[0], shape, ctx.name)

    def _op_Squeeze(self, ctx, ins, attrs):
        shape = ins[0].shape
        axes = self._axes(ctx, ins, attrs)
        drop = {j for j, d in enumerate(shape) if d == 1} if axes is None else \
            {_axis(ctx, a, len(shape)) for a in axes}
        if any(shape[j] != 1 for j in drop):
            raise OnnxImportError(f"{ctx.where}: squeezes an axis whose size is not 1")
        return self._reshaped(ins[0], [d for j, d in enumerate(shape) if j not in drop], ctx.name)

    def _op_Flatten(self, ctx, ins, attrs):
        shape = ins[0].shape
        axis = attrs.get("axis", "INT", 1)
        axis = axis + len(shape) if axis < 0 else axis
        lead = int(np.prod(shape[:axis])) if all(isinstance(d, int) for d in shape[:axis]) else -1
        return self._reshaped(ins[0], [lead, -1] if lead != -1 else [-1, int(np.prod(shape[axis:]))], ctx.name)

    def _op_Slice(self, ctx, ins, attrs):
        x = ins[0]
        shape = self._static_shape(ctx, x)
        starts, ends = _const_ints(ctx, ins[1], "starts"), _const_ints(ctx, ins[2], "ends")
        axes = _const_ints(ctx, ins[3], "axes") if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
        steps = _const_ints(ctx, ins[4], "steps") if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
        out = x
        for start, end, axis, step in zip(starts, ends, axes, steps):
            axis = _axis(ctx, axis, len(shape))
            index = np.arange(*slice(start, end, step).indices(shape[axis]))
            if len(index) != shape[axis] or step != 1:
                out = self._taken(ctx, out, index, axis)
        if out is x:
            return x
        return self._reshaped(out, out.shape, ctx.name)

    def _op_Concat(self, ctx, ins, attrs):
        parts = [v for v in ins if v is not None]
        axis = _axis(ctx, attrs.get("axis", "INT"), len(parts[0].shape))
        if all(v.is_const for v in parts):
            return Value(array=np.concatenate([v.array for v in parts], axis=axis), name=ctx.name)
        sizes = [self._static_shape(ctx, v)[axis] for v in parts]
        parts = [(v, n) for v, n in zip(parts, sizes) if n > 0]
        total = sum(sizes)
        rank = len(parts[0][0].shape)
        # Positions along the axis as iotas, so that each part's range is a comparison of the
        # loop variable with a number: the CPU schedule splits the loop there and each range
        # computes only its own part (``schedule_cpu._split_at_bounds``).
        position = self.b.iota((total,), "int64")
        along = self.b.iota([total if j == axis else 1 for j in range(rank)], "int64", axis=axis)
        out, offset = None, total
        for v, n in reversed(parts):  # from the last part: each earlier one takes over below its end
            offset -= n
            index = self.b.subtract(position, self.b.fill_constant((), offset, "int64")) if offset else position
            piece = Value(tensor=self.b.take(self._tensor(v), index, axis=axis, mode="clip")) \
                if not v.is_const else self._taken(ctx, v, np.clip(np.arange(total) - offset, 0, n - 1), axis)
            if out is None:
                out = piece
                continue
            below = self.b.less(along, self.b.fill_constant((), offset + n, "int64"))
            out = Value(tensor=self.b.where(below, self._tensor(piece), self._tensor(out)))
        return self._reshaped(out, out.shape, ctx.name)

    def _op_Expand(self, ctx, ins, attrs):
        x, target = ins[0], _const_ints(ctx, ins[1], "shape")
        shape = np.broadcast_shapes(self._static_shape(ctx, x), tuple(target))
        if x.is_const:
            flat = x.array.reshape(-1)
            if int(np.prod(shape)) > 64 and flat.size and (flat == flat[0]).all():
                # A large constant of one value (zeros to scatter into): a fill, not data to read.
                return Value(tensor=self.b.fill_constant(shape, flat[0].item(), flat.dtype, name=ctx.name))
            return Value(array=np.broadcast_to(x.array, shape).copy(), name=ctx.name)
        t = self._tensor(x)
        if tuple(shape) == tuple(t.shape):
            return x
        return Value(tensor=self.b.add(t, self.b.fill_constant(shape, 0, t.dtype), name=ctx.name))

    def _op_Tile(self, ctx, ins, attrs):
        x, repeats = ins[0], _const_ints(ctx, ins[1], "repeats")
        shape = self._static_shape(ctx, x)
        out = x
        for axis, (d, r) in enumerate(zip(shape, repeats)):
            if r != 1:
                out = self._taken(ctx, out, np.tile(np.arange(d), r), axis)
        return self._reshaped(out, out.shape, ctx.name)

    def _op_Transpose(self, ctx, ins, attrs):
        shape = self._static_shape(ctx, ins[0])
        return self._transposed(ctx, ins[0], attrs.get("perm", "INTS", list(range(len(shape)))[::-1]), ctx.name)

    def _transposed(self, ctx, x, perm, name):
        """``x`` with its axes permuted: folded, or a ``take`` of the flat elements in the new order."""
        shape = self._static_shape(ctx, x)
        if x.is_const:
            return Value(array=np.transpose(x.array, perm), name=name)
        if list(perm) == sorted(perm):
            return x
        index = np.arange(int(np.prod(shape))).reshape(shape).transpose(perm).reshape(-1)
        flat = self._taken(ctx, self._reshaped(x, (-1,), None), index, 0)
        return self._reshaped(flat, [shape[p] for p in perm], name)

    # -- elementwise -----------------------------------------------------------------------------------

    def _binary(self, ctx, ins, op):
        method, fold = _BINARY[op]
        a, c = ins
        if a.is_const and c.is_const:
            return Value(array=np.asarray(fold(a.array, c.array)), name=ctx.name)
        return Value(tensor=getattr(self.b, method)(self._tensor(a), self._tensor(c), name=ctx.name))

    def _op_Div(self, ctx, ins, attrs):
        """Floats divide; integers truncate toward zero (ONNX, C), where cinnlite's divide floors."""
        a, c = ins
        if a.is_const and c.is_const:
            if a.array.dtype.kind in "iu":
                q = np.abs(a.array) // np.maximum(np.abs(c.array), 1) * np.sign(a.array) * np.sign(c.array)
                return Value(array=q.astype(a.array.dtype), name=ctx.name)
            return Value(array=np.asarray(a.array / c.array), name=ctx.name)
        b = self.b
        ta, tc = self._tensor(a), self._tensor(c)
        if ta.dtype.is_float or ta.dtype.is_complex or not ta.dtype.is_signed:
            return Value(tensor=b.divide(ta, tc, name=ctx.name))
        floor = b.divide(ta, tc)
        zero, one = b.fill_constant((), 0, ta.dtype), b.fill_constant((), 1, ta.dtype)
        inexact = b.not_equal(b.multiply(floor, tc), ta)
        signs_differ = b.not_equal(b.less(ta, zero), b.less(tc, zero))
        return Value(tensor=b.where(b.minimum(inexact, signs_differ), b.add(floor, one), floor, name=ctx.name))

    def _op_Not(self, ctx, ins, attrs):
        (x,) = ins
        if x.is_const:
            return Value(array=np.logical_not(x.array), name=ctx.name)
        return Value(tensor=self.b.equal(self._tensor(x), self.b.fill_constant((), False, "bool"), name=ctx.name))

    def _op_Neg(self, ctx, ins, attrs):
        (x,) = ins
        if x.is_const:
            return Value(array=np.negative(x.array), name=ctx.name)
        t = self._tensor(x)
        return Value(tensor=self.b.subtract(self.b.fill_constant((), -0.0 if t.dtype.is_float else 0, t.dtype), t,
                                            name=ctx.name))

    def _op_Abs(self, ctx, ins, attrs):
        (x,) = ins
        if x.is_const:
            return Value(array=np.abs(x.array), name=ctx.name)
        t = self._tensor(x)
        zero = self.b.fill_constant((), 0, t.dtype)
        return Value(tensor=self.b.where(self.b.less(t, zero), self.b.subtract(zero, t), t, name=ctx.name))

    def _op_Relu(self, ctx, ins, attrs):
        (x,) = ins
        t = self._tensor(x)
        return Value(tensor=self.b.maximum(t, self.b.fill_constant((), 0, t.dtype), name=ctx.name))

    def _op_LeakyRelu(self, ctx, ins, attrs):
        t = self._tensor(ins[0])
        alpha = self.b.fill_constant((), attrs.get("alpha", "FLOAT", 0.01), t.dtype)
        negative = self.b.less(t, self.b.fill_constant((), 0, t.dtype))
        return Value(tensor=self.b.where(negative, self.b.multiply(t, alpha), t, name=ctx.name))

    def _op_Reciprocal(self, ctx, ins, attrs):
        (x,) = ins
        if x.is_const:
            return Value(array=np.reciprocal(x.array), name=ctx.name)
        t = self._tensor(x)
        return Value(tensor=self.b.divide(self.b.fill_constant((), 1, t.dtype), t, name=ctx.name))

    def _op_Clip(self, ctx, ins, attrs):
        """Bounds from inputs (opset 11+) or attributes; the lower bound, then the upper (as ONNX
        Runtime: a lower bound above the upper gives the upper)."""
        x = ins[0]
        if self.opset < 11:
            bounds = [attrs.get("min", "FLOAT", None), attrs.get("max", "FLOAT", None)]
            bounds = [None if v is None else Value(array=np.array(v, x.np_dtype)) for v in bounds]
        else:
            bounds = list(ins[1:3]) + [None] * (3 - len(ins))
        out = x
        for bound, method, fold in zip(bounds[:2], ("maximum", "minimum"), (np.maximum, np.minimum)):
            if bound is not None:
                out = self._extremum(ctx, [out, bound], method, fold, name=None)
        return self._reshaped(out, out.shape, ctx.name)

    def _extremum(self, ctx, ins, method, fold, name=""):
        name = ctx.name if name == "" else name
        values = [v for v in ins if v is not None]
        if all(v.is_const for v in values):
            out = values[0].array
            for v in values[1:]:
                out = fold(out, v.array)
            return Value(array=np.asarray(out), name=name)
        out = self._tensor(values[0])
        for k, v in enumerate(values[1:]):
            out = getattr(self.b, method)(out, self._tensor(v), name=name if k == len(values) - 2 else None)
        return Value(tensor=out)

    def _op_Max(self, ctx, ins, attrs):
        return self._extremum(ctx, ins, "maximum", np.maximum)

    def _op_Min(self, ctx, ins, attrs):
        return self._extremum(ctx, ins, "minimum", np.minimum)

    def _op_Where(self, ctx, ins, attrs):
        cond, a, c = ins
        if cond.is_const and a.is_const and c.is_const:
            return Value(array=np.where(cond.array, a.array, c.array), name=ctx.name)
        return Value(tensor=self.b.where(self._tensor(cond), self._tensor(a), self._tensor(c), name=ctx.name))

    # -- reductions and products -----------------------------------------------------------------------

    def _reduce_axes(self, ctx, ins, attrs):
        axes = self._axes(ctx, ins, attrs)
        if not axes and attrs.get("noop_with_empty_axes", "INT", 0):
            return []
        return list(range(len(ins[0].shape))) if not axes else axes

    def _op_ReduceSum(self, ctx, ins, attrs):
        axes, keep = self._reduce_axes(ctx, ins, attrs), bool(attrs.get("keepdims", "INT", 1))
        if ins[0].is_const:
            return Value(array=np.sum(ins[0].array, axis=tuple(axes), keepdims=keep), name=ctx.name)
        return Value(tensor=self.b.reduce_sum(self._tensor(ins[0]), axes=axes, keepdims=keep, name=ctx.name))

    def _reduce_extremum(self, ctx, ins, attrs, method, fold):
        axes, keep = self._reduce_axes(ctx, ins, attrs), bool(attrs.get("keepdims", "INT", 1))
        if ins[0].is_const:
            return Value(array=fold(ins[0].array, axis=tuple(axes), keepdims=keep), name=ctx.name)
        return Value(tensor=getattr(self.b, method)(self._tensor(ins[0]), axes=axes, keepdims=keep, name=ctx.name))

    def _op_ReduceMax(self, ctx, ins, attrs):
        return self._reduce_extremum(ctx, ins, attrs, "reduce_max", np.max)

    def _op_ReduceMin(self, ctx, ins, attrs):
        return self._reduce_extremum(ctx, ins, attrs, "reduce_min", np.min)

    def _op_Softmax(self, ctx, ins, attrs):
        """exp(x - max) / sum over ``axis`` (opset 13); before opset 13 over every axis from
        ``axis`` on (the input seen as 2-D)."""
        t = self._tensor(ins[0])
        r = t.ndim
        axis = _axis(ctx, attrs.get("axis", "INT", -1 if self.opset >= 13 else 1), r)
        axes = [axis] if self.opset >= 13 else list(range(axis, r))
        b = self.b
        shifted = b.exp(b.subtract(t, b.reduce_max(t, axes=axes, keepdims=True)))
        return Value(tensor=b.divide(shifted, b.reduce_sum(shifted, axes=axes, keepdims=True), name=ctx.name))

    def _op_Pow(self, ctx, ins, attrs):
        """Powers with a constant exponent that products, square roots and quotients give exactly
        (0.5, 1, 2, 3, -0.5, -1); others are not imported."""
        x, y = ins
        if x.is_const and y.is_const:
            return Value(array=np.power(x.array, y.array), name=ctx.name)
        if not y.is_const or y.array.size != 1 or float(y.array.reshape(-1)[0]) not in (0.5, 1, 2, 3, -0.5, -1):
            raise OnnxImportError(f"{ctx.where}: only constant exponents 0.5, 1, 2, 3, -0.5 and -1 are imported")
        t, e = self._tensor(x), float(y.array.reshape(-1)[0])
        b = self.b
        if not t.dtype.is_float and e != int(e) or e < 0 and not t.dtype.is_float:
            raise OnnxImportError(f"{ctx.where}: exponent {e} of {t.dtype} is not imported")
        base = b.sqrt(t) if abs(e) == 0.5 else t if abs(e) == 1 else b.multiply(t, t) if abs(e) == 2 else \
            b.multiply(b.multiply(t, t), t)
        if e < 0:
            return Value(tensor=b.divide(b.fill_constant((), 1, t.dtype), base, name=ctx.name))
        return Value(tensor=b.reshape(base, tuple(base.shape), name=ctx.name))

    def _op_ReduceMean(self, ctx, ins, attrs):
        axes, keep = self._reduce_axes(ctx, ins, attrs), bool(attrs.get("keepdims", "INT", 1))
        t = self._tensor(ins[0])
        if not t.dtype.is_float:
            raise OnnxImportError(f"{ctx.where}: ReduceMean of {t.dtype} is not imported (floats only)")
        count = int(np.prod([self._static_shape(ctx, ins[0])[a] for a in axes]))
        total = self.b.reduce_sum(t, axes=axes, keepdims=keep)
        return Value(tensor=self.b.divide(total, self.b.fill_constant((), float(count), t.dtype), name=ctx.name))

    def _matmul(self, a, c, name=None):
        """``a @ c`` with numpy's rules (1-D operands promoted and the added axis dropped; batch
        axes broadcast): the sum over k of a broadcast product, one fused loop nest."""
        b = self.b
        ta, tc = self._tensor(a), self._tensor(c)
        a_shape, c_shape = tuple(ta.shape), tuple(tc.shape)
        if len(a_shape) == 1:
            ta = b.reshape(ta, (1,) + a_shape)
        if len(c_shape) == 1:
            tc = b.reshape(tc, c_shape + (1,))
        product = b.multiply(b.reshape(ta, tuple(ta.shape) + (1,)),
                             b.reshape(tc, tuple(tc.shape[:-2]) + (1,) + tuple(tc.shape[-2:])))
        summed = tuple(product.shape[:-2]) + tuple(product.shape[-1:])
        shape = summed
        if len(c_shape) == 1:
            shape = shape[:-1]
        if len(a_shape) == 1:
            shape = shape[:-2] + shape[-1:] if len(c_shape) != 1 else shape[:-1]
        if shape == summed:
            return b.reduce_sum(product, axes=[-2], name=name)
        return b.reshape(b.reduce_sum(product, axes=[-2]), shape, name=name)

    def _op_MatMul(self, ctx, ins, attrs):
        a, c = ins
        if a.is_const and c.is_const:
            return Value(array=np.matmul(a.array, c.array), name=ctx.name)
        return Value(tensor=self._matmul(a, c, name=ctx.name))

    def _op_Gemm(self, ctx, ins, attrs):
        a, c = ins[0], ins[1]
        bias = ins[2] if len(ins) > 2 else None
        alpha, beta = attrs.get("alpha", "FLOAT", 1.0), attrs.get("beta", "FLOAT", 1.0)
        if attrs.get("transA", "INT", 0):
            a = self._transposed(ctx, a, [1, 0], None)
        if attrs.get("transB", "INT", 0):
            c = self._transposed(ctx, c, [1, 0], None)
        scaled, biased = alpha != 1.0, bias is not None and beta != 0.0
        out = self._matmul(a, c, name=None if scaled or biased else ctx.name)
        dtype = out.dtype
        if scaled:
            out = self.b.multiply(out, self.b.fill_constant((), alpha, dtype), name=None if biased else ctx.name)
        if biased:
            term = self._tensor(bias)
            if beta != 1.0:
                term = self.b.multiply(term, self.b.fill_constant((), beta, dtype))
            out = self.b.add(out, term, name=ctx.name)
        return Value(tensor=out)

    def _op_TopK(self, ctx, ins, attrs):
        """The ``k`` largest (or smallest) along ``axis``, and their positions, best first; of
        equal elements the lower position first; NaN is larger than every number (as numpy's
        sort and PyTorch's topk place it). Each element's rank is how many elements beat it,
        counted over every pair (``TOPK_MAX_AXIS`` elements at most), and output slot ``r``
        takes the element of rank ``r``."""
        x = self._tensor(ins[0])
        k = int(_const_ints(ctx, ins[1], "k")[0]) if len(ins) > 1 and ins[1] is not None else attrs.get("k", "INT")
        axis = _axis(ctx, attrs.get("axis", "INT", -1), x.ndim)
        shape = tuple(x.shape)  # other axes may be symbolic; the compared one may not
        n = shape[axis]
        if not isinstance(n, int):
            raise OnnxImportError(f"{ctx.where}: the size of axis {axis} is symbolic ({n}); TopK needs it known "
                                  "(give shapes=..., or run the model in cl.onnx.InferenceSession)")
        if not 0 <= k <= n:
            raise OnnxImportError(f"{ctx.where}: k={k} is outside 0..{n}, the size of axis {axis}")
        if n > TOPK_MAX_AXIS:
            raise OnnxImportError(f"{ctx.where}: TopK over {n} elements (cinnlite imports it up to "
                                  f"{TOPK_MAX_AXIS}; onnxruntime runs it)")
        b = self.b

        def spread(t, at):  # t (n along ``axis``) with a unit axis added after ``axis`` (at=0) or before it
            return b.reshape(t, shape[:axis] + ((1, n) if at else (n, 1)) + shape[axis + 1:])

        def along_pair(values):  # a constant over (axis, axis + 1), unit elsewhere
            return b.constant(values.reshape((1,) * axis + values.shape + (1,) * (x.ndim - axis - 1)))

        # Element i of x at ``axis``, element j at ``axis + 1``: does i beat j?
        theirs, mine = spread(x, 0), spread(x, 1)
        ties = b.equal(theirs, mine)  # bools: maximum is "or", minimum "and"
        if x.dtype.is_float:
            ties = b.maximum(ties, b.minimum(b.not_equal(theirs, theirs), b.not_equal(mine, mine)))
        first = along_pair(np.triu(np.ones((n, n), bool), 1))
        beats = b.maximum(self._beats(theirs, mine, bool(attrs.get("largest", "INT", 1))), b.minimum(ties, first))
        rank = b.reduce_sum(b.cast(beats, "int64"), axes=[axis])  # how many beat j: j's rank, at ``axis``
        # Element j at ``axis``, output slot r at ``axis + 1``: slot r takes the element of rank r.
        chosen = b.equal(spread(rank, 0), along_pair(np.arange(k).reshape(1, k)))
        lowest = -np.inf if x.dtype.is_float else np.iinfo(x.dtype.np).min
        values = b.reduce_max(b.where(chosen, spread(x, 0), b.fill_constant((), lowest, x.dtype)), axes=[axis],
                              name=ctx.name)
        positions = along_pair(np.arange(n).reshape(n, 1))
        indices = b.reduce_sum(b.where(chosen, positions, b.fill_constant((), 0, "int64")), axes=[axis])
        return Value(tensor=values), Value(tensor=indices)

    def _beats(self, a, c, largest: bool):
        """Where ``a`` comes before ``c`` in a TopK's order, ties aside: greater (smaller), NaN
        before numbers when taking the largest, after them when taking the smallest."""
        b = self.b
        if not largest:
            a, c = c, a
        beats = b.greater(a, c)
        if a.dtype.is_float:
            beats = b.maximum(beats, b.minimum(b.not_equal(a, a), b.equal(c, c)))
        return beats


def _binary_handler(op):
    def handler(self, ctx, ins, attrs):
        return self._binary(ctx, ins, op)
    handler.__name__ = f"_op_{op}"
    return handler


def _function_handler(op):
    def handler(self, ctx, ins, attrs):
        method, fold = _FUNCTIONS[op]
        (x,) = ins
        if x.is_const:
            with np.errstate(all="ignore"):
                return Value(array=np.asarray(fold(x.array)).astype(x.array.dtype), name=ctx.name)
        return Value(tensor=getattr(self.b, method)(self._tensor(x), name=ctx.name))
    handler.__name__ = f"_op_{op}"
    return handler


for _op in _BINARY:
    setattr(ExporterOps, f"_op_{_op}", _binary_handler(_op))
for _op in _FUNCTIONS:
    setattr(ExporterOps, f"_op_{_op}", _function_handler(_op))
