"""A catalogue of invalid programs. Each must fail when the operator is added (or, for the few
whole-program rules, at build or compile time) with a cinnlite exception that names the
operator and the broken rule: ``ValidationError`` or ``DTypeError`` with ``.op``, ``.rule`` and
both in the message. Never an ``IndexError``, ``AttributeError``, ``KeyError`` or anything else
from deep inside the library.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import cinnlite as cl
from cinnlite import CinnliteError, DTypeError, ValidationError

# Rule names, exactly as the operator definitions spell them.
AXIS_RANGE = "axis in [-r, r-1]"
AXIS_INT = "axis is an integer"
INDEX_DTYPE = "index dtype is an integer dtype"
MODE = "mode is one of raise/clip/wrap/fill"
REDUCE = "reduce is one of none/add/mul/max/min/mean"
ND_REDUCE = "reduce is one of none/add/mul/max/min/mean/sub"
BOOL_REDUCE = "bool data: reduce none/add/mul/max/min"
LAYOUT = "index_layout is last or first"
OPERANDS = "operands are tensors of this builder"
FILL_FITS = "fill_value fits the dtype"


def X(b, shape=(4, 3), dtype="float32", name="x"):
    return b.create_input(dtype, shape, name)


def I(b, shape=(2, 3), dtype="int64", name="idx"):
    return b.create_input(dtype, shape, name)


def S(b, shape=(2, 3), dtype="float32", name="src"):
    return b.create_input(dtype, shape, name)


# Each entry: (id, operator, rule, exception class, function(builder) that adds the bad operator)
CATALOGUE = [
    # -- take --------------------------------------------------------------------------------
    ("take-float-index", "take", INDEX_DTYPE, DTypeError, lambda b: b.take(X(b), I(b, dtype="float32"))),
    ("take-bool-index", "take", INDEX_DTYPE, DTypeError, lambda b: b.take(X(b), I(b, dtype="bool"))),
    ("take-float16-index", "take", INDEX_DTYPE, DTypeError, lambda b: b.take(X(b), I(b, dtype="float16"))),
    ("take-axis-too-big", "take", AXIS_RANGE, ValidationError, lambda b: b.take(X(b), I(b), axis=2)),
    ("take-axis-too-negative", "take", AXIS_RANGE, ValidationError, lambda b: b.take(X(b), I(b), axis=-3)),
    ("take-axis-huge", "take", AXIS_RANGE, ValidationError, lambda b: b.take(X(b), I(b), axis=2**63)),
    ("take-rank0-x", "take", AXIS_RANGE, ValidationError, lambda b: b.take(X(b, ()), I(b))),
    ("take-axis-float", "take", AXIS_INT, ValidationError, lambda b: b.take(X(b), I(b), axis=1.0)),
    ("take-axis-str", "take", AXIS_INT, ValidationError, lambda b: b.take(X(b), I(b), axis="0")),
    ("take-axis-bool", "take", AXIS_INT, ValidationError, lambda b: b.take(X(b), I(b), axis=True)),
    ("take-batch-dims-too-big", "take", "batch_dims in [-q, q]", ValidationError,
     lambda b: b.take(X(b, (2, 3, 4)), I(b, (2, 3)), axis=2, batch_dims=3)),
    ("take-batch-dims-too-negative", "take", "batch_dims in [-q, q]", ValidationError,
     lambda b: b.take(X(b, (2, 3, 4)), I(b, (2, 3)), axis=2, batch_dims=-3)),
    ("take-batch-dims-float", "take", "batch_dims is an integer", ValidationError,
     lambda b: b.take(X(b, (2, 3, 4)), I(b, (2, 3)), axis=2, batch_dims=1.0)),
    ("take-batch-dims-none", "take", "batch_dims is an integer", ValidationError,
     lambda b: b.take(X(b), I(b), batch_dims=None)),
    ("take-batch-dims-after-axis", "take", "batch_dims <= axis", ValidationError,
     lambda b: b.take(X(b, (2, 3, 4)), I(b, (2, 3)), axis=0, batch_dims=1)),
    ("take-batch-shape-mismatch", "take", "x.shape[:batch_dims] == indices.shape[:batch_dims]", ValidationError,
     lambda b: b.take(X(b, (2, 3, 4)), I(b, (3, 3)), axis=1, batch_dims=1)),
    ("take-batch-shape-mismatch-negative", "take", "x.shape[:batch_dims] == indices.shape[:batch_dims]",
     ValidationError, lambda b: b.take(X(b, (2, 3, 4)), I(b, (2, 4, 5)), axis=2, batch_dims=-1)),
    ("take-unknown-mode", "take", MODE, ValidationError, lambda b: b.take(X(b), I(b), mode="nearest")),
    ("take-mode-uppercase", "take", MODE, ValidationError, lambda b: b.take(X(b), I(b), mode="RAISE")),
    ("take-mode-none", "take", MODE, ValidationError, lambda b: b.take(X(b), I(b), mode=None)),
    ("take-mode-unhashable", "take", MODE, ValidationError, lambda b: b.take(X(b), I(b), mode=["clip"])),
    ("take-fill-value-overflows-int8", "take", FILL_FITS, ValidationError,
     lambda b: b.take(X(b, dtype="int8"), I(b), mode="fill", fill_value=300)),
    ("take-fill-value-negative-uint8", "take", FILL_FITS, ValidationError,
     lambda b: b.take(X(b, dtype="uint8"), I(b), mode="fill", fill_value=-1)),
    ("take-fill-value-fraction-int", "take", FILL_FITS, ValidationError,
     lambda b: b.take(X(b, dtype="int32"), I(b), mode="fill", fill_value=0.5)),
    ("take-fill-value-str", "take", FILL_FITS, ValidationError,
     lambda b: b.take(X(b), I(b), mode="fill", fill_value="zero")),
    ("take-fill-value-bool-2", "take", FILL_FITS, ValidationError,
     lambda b: b.take(X(b, dtype="bool"), I(b), mode="fill", fill_value=2)),
    ("take-fill-value-overflows-float16", "take", FILL_FITS, ValidationError,
     lambda b: b.take(X(b, dtype="float16"), I(b), mode="fill", fill_value=1e6)),
    ("take-clip-empty-axis", "take", "mode clip needs a non-empty axis", ValidationError,
     lambda b: b.take(X(b, (0, 3)), I(b), mode="clip")),
    ("take-wrap-empty-axis", "take", "mode wrap needs a non-empty axis", ValidationError,
     lambda b: b.take(X(b, (3, 0)), I(b), axis=1, mode="wrap")),
    ("take-numpy-operand", "take", OPERANDS, ValidationError, lambda b: b.take(np.zeros((4, 3)), I(b))),
    ("take-foreign-tensor", "take", OPERANDS, ValidationError,
     lambda b: b.take(X(b), I(cl.NetBuilder("other")))),
    ("take-none-operand", "take", OPERANDS, ValidationError, lambda b: b.take(X(b), None)),
    # -- gather ------------------------------------------------------------------------------
    ("gather-float-index", "gather", INDEX_DTYPE, DTypeError, lambda b: b.gather(X(b), I(b, dtype="float64"))),
    ("gather-rank-mismatch", "gather", "rank(index) == rank(x)", ValidationError,
     lambda b: b.gather(X(b), I(b, (6,)))),
    ("gather-rank-mismatch-higher", "gather", "rank(index) == rank(x)", ValidationError,
     lambda b: b.gather(X(b), I(b, (2, 3, 1)))),
    ("gather-index-wider-than-x", "gather", "index.shape[j] <= x.shape[j] for j != axis", ValidationError,
     lambda b: b.gather(X(b), I(b, (2, 4)), axis=0)),
    ("gather-index-taller-than-x", "gather", "index.shape[j] <= x.shape[j] for j != axis", ValidationError,
     lambda b: b.gather(X(b), I(b, (5, 3)), axis=-1)),
    ("gather-axis-out-of-range", "gather", AXIS_RANGE, ValidationError, lambda b: b.gather(X(b), I(b), axis=-3)),
    ("gather-rank0", "gather", AXIS_RANGE, ValidationError, lambda b: b.gather(X(b, ()), I(b, ()))),
    ("gather-unknown-mode", "gather", MODE, ValidationError, lambda b: b.gather(X(b), I(b), mode="ignore")),
    ("gather-fill-value-overflows", "gather", FILL_FITS, ValidationError,
     lambda b: b.gather(X(b, dtype="int16"), I(b), mode="fill", fill_value=2**15)),
    ("gather-clip-empty-axis", "gather", "mode clip needs a non-empty axis", ValidationError,
     lambda b: b.gather(X(b, (0, 3)), I(b, (2, 3)), mode="clip")),
    ("gather-operand-swapped", "gather", OPERANDS, ValidationError, lambda b: b.gather(X(b), "idx")),
    # -- gather_nd ---------------------------------------------------------------------------
    ("gather_nd-float-index", "gather_nd", INDEX_DTYPE, DTypeError,
     lambda b: b.gather_nd(X(b), I(b, (2, 2), dtype="float32"))),
    ("gather_nd-rank0-index", "gather_nd", "rank(index) >= 1", ValidationError, lambda b: b.gather_nd(X(b), I(b, ()))),
    ("gather_nd-batch-dims-too-big", "gather_nd", "batch_dims < min(rank(x), rank(index))", ValidationError,
     lambda b: b.gather_nd(X(b, (2, 3)), I(b, (2, 1)), batch_dims=2)),
    ("gather_nd-batch-dims-negative", "gather_nd", "batch_dims < min(rank(x), rank(index))", ValidationError,
     lambda b: b.gather_nd(X(b, (2, 3)), I(b, (2, 1)), batch_dims=-1)),
    ("gather_nd-batch-dims-float", "gather_nd", "batch_dims is an integer", ValidationError,
     lambda b: b.gather_nd(X(b, (2, 3)), I(b, (2, 1)), batch_dims=0.0)),
    ("gather_nd-batch-shape-mismatch", "gather_nd", "x.shape[:batch_dims] == index.shape[:batch_dims]",
     ValidationError, lambda b: b.gather_nd(X(b, (2, 3, 4)), I(b, (3, 1)), batch_dims=1)),
    ("gather_nd-tuple-too-long", "gather_nd", "index.shape[-1] <= rank(x) - batch_dims", ValidationError,
     lambda b: b.gather_nd(X(b, (4, 3)), I(b, (2, 3)))),
    ("gather_nd-tuple-too-long-batch", "gather_nd", "index.shape[-1] <= rank(x) - batch_dims", ValidationError,
     lambda b: b.gather_nd(X(b, (2, 4, 3)), I(b, (2, 3)), batch_dims=1)),
    ("gather_nd-tuple-too-long-first", "gather_nd", "index.shape[-1] <= rank(x) - batch_dims", ValidationError,
     lambda b: b.gather_nd(X(b, (4, 3)), I(b, (3, 2)), index_layout="first")),
    ("gather_nd-unknown-layout", "gather_nd", LAYOUT, ValidationError,
     lambda b: b.gather_nd(X(b), I(b, (2, 1)), index_layout="middle")),
    ("gather_nd-unknown-mode", "gather_nd", MODE, ValidationError,
     lambda b: b.gather_nd(X(b), I(b, (2, 1)), mode="wraparound")),
    ("gather_nd-dims-with-batch-dims", "gather_nd", "batch_dims is 0 with dims", ValidationError,
     lambda b: b.gather_nd(X(b), I(b, (4, 3, 1)), dims=[0], batch_dims=1)),
    ("gather_nd-dims-out-of-range", "gather_nd", "dims are axes of x", ValidationError,
     lambda b: b.gather_nd(X(b), I(b, (4, 3, 1)), dims=[2])),
    ("gather_nd-dims-too-negative", "gather_nd", "dims are axes of x", ValidationError,
     lambda b: b.gather_nd(X(b), I(b, (4, 3, 1)), dims=[-3])),
    ("gather_nd-dims-repeated", "gather_nd", "dims are distinct", ValidationError,
     lambda b: b.gather_nd(X(b), I(b, (4, 3, 2)), dims=[0, -2])),
    ("gather_nd-dims-length", "gather_nd", "index.shape[-1] == len(dims)", ValidationError,
     lambda b: b.gather_nd(X(b), I(b, (4, 3, 2)), dims=[0])),
    ("gather_nd-dims-not-a-list", "gather_nd", "dims is a list of axes", ValidationError,
     lambda b: b.gather_nd(X(b), I(b, (4, 3, 1)), dims=0)),
    ("gather_nd-dims-float-entry", "gather_nd", "dims is an integer", ValidationError,
     lambda b: b.gather_nd(X(b), I(b, (4, 3, 1)), dims=[0.0])),
    ("gather_nd-dims-output-rank", "gather_nd", "rank(out) == rank(x)", ValidationError,
     lambda b: b.gather_nd(X(b), I(b, (4, 1)), dims=[0])),
    ("gather_nd-dims-output-too-big", "gather_nd", "out.shape[j] <= x.shape[j] for j not in dims", ValidationError,
     lambda b: b.gather_nd(X(b), I(b, (2, 5, 1)), dims=[0])),
    ("gather_nd-clip-empty-axis", "gather_nd", "mode clip needs a non-empty axis", ValidationError,
     lambda b: b.gather_nd(X(b, (4, 0)), I(b, (2, 2)), mode="clip")),
    ("gather_nd-fill-value-fraction", "gather_nd", FILL_FITS, ValidationError,
     lambda b: b.gather_nd(X(b, dtype="int64"), I(b, (2, 1)), mode="fill", fill_value=1.5)),
    # -- scatter -----------------------------------------------------------------------------
    ("scatter-float-index", "scatter", INDEX_DTYPE, DTypeError,
     lambda b: b.scatter(X(b), I(b, dtype="float32"), S(b))),
    ("scatter-src-dtype", "scatter", "src dtype == x dtype", DTypeError,
     lambda b: b.scatter(X(b), I(b), S(b, dtype="float64"))),
    ("scatter-index-rank", "scatter", "rank(index) == rank(x)", ValidationError,
     lambda b: b.scatter(X(b), I(b, (6,)), S(b))),
    ("scatter-src-rank", "scatter", "rank(src) == rank(x)", ValidationError,
     lambda b: b.scatter(X(b), I(b), S(b, (2, 3, 1)))),
    ("scatter-index-bigger-than-src", "scatter", "index.shape[j] <= src.shape[j]", ValidationError,
     lambda b: b.scatter(X(b), I(b, (3, 3)), S(b, (2, 3)))),
    ("scatter-index-wider-than-x", "scatter", "index.shape[j] <= x.shape[j] for j != axis", ValidationError,
     lambda b: b.scatter(X(b), I(b, (2, 4)), S(b, (2, 4)))),
    ("scatter-axis-out-of-range", "scatter", AXIS_RANGE, ValidationError,
     lambda b: b.scatter(X(b), I(b), S(b), axis=2)),
    ("scatter-rank0", "scatter", AXIS_RANGE, ValidationError,
     lambda b: b.scatter(X(b, ()), I(b, ()), S(b, ()))),
    ("scatter-unknown-reduce", "scatter", REDUCE, ValidationError,
     lambda b: b.scatter(X(b), I(b), S(b), reduce="sum")),
    ("scatter-reduce-none-object", "scatter", REDUCE, ValidationError,
     lambda b: b.scatter(X(b), I(b), S(b), reduce=None)),
    ("scatter-reduce-prod", "scatter", REDUCE, ValidationError,
     lambda b: b.scatter(X(b), I(b), S(b), reduce="prod")),
    ("scatter-bool-mean", "scatter", BOOL_REDUCE, DTypeError,
     lambda b: b.scatter(X(b, dtype="bool"), I(b), S(b, dtype="bool"), reduce="mean")),
    ("scatter_nd-bool-sub", "scatter_nd", BOOL_REDUCE, DTypeError,
     lambda b: b.scatter_nd(X(b, dtype="bool"), I(b), S(b, dtype="bool"), reduce="sub")),
    ("scatter-sub", "scatter", REDUCE, ValidationError,
     lambda b: b.scatter(X(b), I(b), S(b), reduce="sub")),
    ("scatter-include-self-none", "scatter", "include_self=False needs a reduction other than sub", ValidationError,
     lambda b: b.scatter(X(b), I(b), S(b), include_self=False)),
    ("scatter_nd-include-self-not-bool", "scatter_nd", "include_self is a bool", ValidationError,
     lambda b: b.scatter_nd(X(b), I(b), S(b), reduce="add", include_self="no")),
    ("scatter-unknown-mode", "scatter", MODE, ValidationError,
     lambda b: b.scatter(X(b), I(b), S(b), mode="drop")),
    ("scatter-wrap-empty-axis", "scatter", "mode wrap needs a non-empty axis", ValidationError,
     lambda b: b.scatter(X(b, (0, 3)), I(b), S(b), mode="wrap")),
    ("scatter-src-not-a-tensor", "scatter", OPERANDS, ValidationError,
     lambda b: b.scatter(X(b), I(b), np.zeros((2, 3), np.float32))),
    # -- scatter_nd --------------------------------------------------------------------------
    ("scatter_nd-float-index", "scatter_nd", INDEX_DTYPE, DTypeError,
     lambda b: b.scatter_nd(X(b), I(b, (2, 1), dtype="float16"), S(b, (2, 3)))),
    ("scatter_nd-src-dtype", "scatter_nd", "src dtype == x dtype", DTypeError,
     lambda b: b.scatter_nd(X(b), I(b, (2, 1)), S(b, (2, 3), dtype="int32"))),
    ("scatter_nd-rank0-index", "scatter_nd", "rank(index) >= 1", ValidationError,
     lambda b: b.scatter_nd(X(b), I(b, ()), S(b, (4, 3)))),
    ("scatter_nd-tuple-too-long", "scatter_nd", "index.shape[-1] <= rank(x)", ValidationError,
     lambda b: b.scatter_nd(X(b), I(b, (2, 3)), S(b, (2,)))),
    ("scatter_nd-src-shape", "scatter_nd", "src.shape == index.shape[:-1] + x.shape[m:]", ValidationError,
     lambda b: b.scatter_nd(X(b), I(b, (2, 1)), S(b, (2, 4)))),
    ("scatter_nd-src-shape-rank", "scatter_nd", "src.shape == index.shape[:-1] + x.shape[m:]", ValidationError,
     lambda b: b.scatter_nd(X(b), I(b, (2, 1)), S(b, (2,)))),
    ("scatter_nd-src-shape-first", "scatter_nd", "src.shape == index.shape[:-1] + x.shape[m:]", ValidationError,
     lambda b: b.scatter_nd(X(b), I(b, (1, 2)), S(b, (1, 3)), index_layout="first")),
    ("scatter_nd-dims-src-rank", "scatter_nd", "rank(src) == rank(x)", ValidationError,
     lambda b: b.scatter_nd(X(b), I(b, (2, 1)), S(b, (2,)), dims=[0])),
    ("scatter_nd-dims-index-shape", "scatter_nd", "index.shape == src.shape + (len(dims),)", ValidationError,
     lambda b: b.scatter_nd(X(b), I(b, (2, 2, 1)), S(b, (2, 3)), dims=[0])),
    ("scatter_nd-dims-src-too-big", "scatter_nd", "src.shape[j] <= x.shape[j] for j not in dims", ValidationError,
     lambda b: b.scatter_nd(X(b), I(b, (2, 4, 1)), S(b, (2, 4)), dims=[0])),
    ("scatter_nd-dims-repeated", "scatter_nd", "dims are distinct", ValidationError,
     lambda b: b.scatter_nd(X(b), I(b, (2, 3, 2)), S(b, (2, 3)), dims=[1, 1])),
    ("scatter_nd-dims-out-of-range", "scatter_nd", "dims are axes of x", ValidationError,
     lambda b: b.scatter_nd(X(b), I(b, (2, 3, 1)), S(b, (2, 3)), dims=[5])),
    ("scatter_nd-dims-length", "scatter_nd", "index.shape[-1] == len(dims)", ValidationError,
     lambda b: b.scatter_nd(X(b), I(b, (2, 3, 1)), S(b, (2, 3)), dims=[0, 1])),
    ("scatter_nd-unknown-reduce", "scatter_nd", ND_REDUCE, ValidationError,
     lambda b: b.scatter_nd(X(b), I(b, (2, 1)), S(b, (2, 3)), reduce="avg")),
    ("scatter_nd-bool-mean", "scatter_nd", BOOL_REDUCE, DTypeError,
     lambda b: b.scatter_nd(X(b, dtype="bool"), I(b, (2, 1)), S(b, (2, 3), dtype="bool"), reduce="mean")),
    ("scatter_nd-unknown-layout", "scatter_nd", LAYOUT, ValidationError,
     lambda b: b.scatter_nd(X(b), I(b, (2, 1)), S(b, (2, 3)), index_layout="row")),
    ("scatter_nd-unknown-mode", "scatter_nd", MODE, ValidationError,
     lambda b: b.scatter_nd(X(b), I(b, (2, 1)), S(b, (2, 3)), mode=0)),
    ("scatter_nd-clip-empty-axis", "scatter_nd", "mode clip needs a non-empty axis", ValidationError,
     lambda b: b.scatter_nd(X(b, (0, 3)), I(b, (2, 1)), S(b, (2, 3)), mode="clip")),
    # -- inputs, constants, reshape, build ---------------------------------------------------
    ("create_input-complex256", "create_input", "supported dtypes", DTypeError,
     lambda b: b.create_input(np.clongdouble, (2,), "c")),
    ("create_input-longdouble", "create_input", "supported dtypes", DTypeError,
     lambda b: b.create_input(np.longdouble, (2,), "c")),
    ("create_input-not-a-dtype", "create_input", "supported dtypes", DTypeError,
     lambda b: b.create_input("float8", (2,), "c")),
    ("create_input-object-dtype", "create_input", "supported dtypes", DTypeError,
     lambda b: b.create_input(object, (2,), "c")),
    ("create_input-negative-dim", "create_input", "dimensions are non-negative", ValidationError,
     lambda b: b.create_input("float32", (2, -1), "c")),
    ("create_input-float-dim", "create_input", "shape is a tuple of sizes", ValidationError,
     lambda b: b.create_input("float32", (2.5,), "c")),
    ("create_input-shape-none", "create_input", "shape is a tuple of sizes", ValidationError,
     lambda b: b.create_input("float32", None, "c")),
    ("create_input-shape-int", "create_input", "shape is a tuple of sizes", ValidationError,
     lambda b: b.create_input("float32", 3, "c")),
    ("create_input-bad-name", "create_input", "names are identifiers", ValidationError,
     lambda b: b.create_input("float32", (2,), "1x")),
    ("create_input-empty-name", "create_input", "names are identifiers", ValidationError,
     lambda b: b.create_input("float32", (2,), "")),
    ("create_input-name-not-str", "create_input", "names are identifiers", ValidationError,
     lambda b: b.create_input("float32", (2,), 7)),
    ("create_input-duplicate-name", "create_input", "names are unique", ValidationError,
     lambda b: (b.create_input("float32", (2,), "c"), b.create_input("int64", (3,), "c"))),
    ("take-duplicate-output-name", "take", "names are unique", ValidationError,
     lambda b: b.take(X(b), I(b), name="x")),
    ("fill_constant-value-overflows", "fill_constant", "value fits the dtype", ValidationError,
     lambda b: b.fill_constant((2,), 256, "uint8")),
    ("fill_constant-value-str", "fill_constant", "value fits the dtype", ValidationError,
     lambda b: b.fill_constant((2,), "one", "float32")),
    ("fill_constant-bad-dtype", "fill_constant", "supported dtypes", DTypeError,
     lambda b: b.fill_constant((2,), 0, np.clongdouble)),
    ("fill_constant-complex-overflows", "fill_constant", "value fits the dtype", ValidationError,
     lambda b: b.fill_constant((2,), 1j * 1e39, "complex64")),
    ("fill_constant-negative-dim", "fill_constant", "dimensions are non-negative", ValidationError,
     lambda b: b.fill_constant((-2,), 0, "float32")),
    ("reshape-count", "reshape", "element count is kept", ValidationError, lambda b: b.reshape(X(b), (5, 2))),
    ("reshape-two-minus-one", "reshape", "at most one -1, others non-negative", ValidationError,
     lambda b: b.reshape(X(b), (-1, -1))),
    ("reshape-not-ints", "reshape", "shape is a tuple of sizes", ValidationError,
     lambda b: b.reshape(X(b), (3.0, 4))),
    ("constant-too-big-for-int8", "constant", "value fits the dtype", ValidationError,
     lambda b: b.constant([1, 300], dtype="int8")),
    ("constant-fraction-for-int", "constant", "value fits the dtype", ValidationError,
     lambda b: b.constant(np.array([1.5]), dtype="int32")),
    ("constant-strings", "constant", "supported dtypes", DTypeError, lambda b: b.constant(["a", "b"])),
    ("constant-objects", "constant", "supported dtypes", DTypeError, lambda b: b.constant([None, 1])),
    ("constant-strings-as-int8", "constant", "value fits the dtype", ValidationError,
     lambda b: b.constant(["a"], dtype="int8")),
    ("constant-strings-as-float32", "constant", "value fits the dtype", ValidationError,
     lambda b: b.constant(["a"], dtype="float32")),
    ("constant-ragged", "constant", None, ValidationError, lambda b: b.constant([[1, 2], [3]])),
    ("add-dtype-mismatch", "add", "operands have one dtype", DTypeError,
     lambda b: b.add(X(b), X(b, dtype="float64", name="y"))),
    ("add-no-broadcast", "add", "shapes broadcast (numpy rules)", ValidationError,
     lambda b: b.add(X(b), X(b, (3, 4), name="y"))),
    ("subtract-bool", "subtract", "arithmetic on numbers", DTypeError,
     lambda b: b.subtract(X(b, dtype="bool"), X(b, dtype="bool", name="y"))),
    ("cast-to-complex256", "cast", "supported dtypes", DTypeError, lambda b: b.cast(X(b), np.clongdouble)),
    ("cast-complex-to-real", "cast", "complex casts only to complex", DTypeError,
     lambda b: b.cast(X(b, dtype="complex64"), "float64")),
    ("cast-complex-to-bool", "cast", "complex casts only to complex", DTypeError,
     lambda b: b.cast(X(b, dtype="complex128"), "bool")),
    ("maximum-complex", "maximum", "ordered operands", DTypeError,
     lambda b: b.maximum(X(b, dtype="complex64"), X(b, dtype="complex64", name="y"))),
    ("minimum-complex", "minimum", "ordered operands", DTypeError,
     lambda b: b.minimum(X(b, dtype="complex128"), X(b, dtype="complex128", name="y"))),
    ("scatter-complex-max", "scatter", "complex data: reduce none/add/mul/mean/sub", DTypeError,
     lambda b: b.scatter(X(b, dtype="complex64"), I(b), S(b, dtype="complex64"), reduce="max")),
    ("scatter_nd-complex-min", "scatter_nd", "complex data: reduce none/add/mul/mean/sub", DTypeError,
     lambda b: b.scatter_nd(X(b, dtype="complex128"), I(b, (2, 1)), S(b, (2, 3), dtype="complex128"), reduce="min")),
    ("maximum-numpy-operand", "maximum", OPERANDS, ValidationError, lambda b: b.maximum(X(b), np.ones((4, 3)))),
    ("build-no-outputs", "build", "a program has outputs", ValidationError, lambda b: b.build()),
    ("build-output-twice", "build", "outputs are distinct", ValidationError,
     lambda b: (lambda y: b.build(outputs=[y, y]))(b.take(X(b), I(b)))),
    ("build-foreign-output", "build", OPERANDS, ValidationError,
     lambda b: b.build(outputs=[X(cl.NetBuilder("other"))])),
    ("equal-dtype-mismatch", "equal", "operands have one dtype", DTypeError,
     lambda b: b.equal(X(b), X(b, dtype="float64", name="y"))),
    ("less-complex", "less", "real operands", DTypeError,
     lambda b: b.less(X(b, dtype="complex64"), X(b, dtype="complex64", name="y"))),
    ("greater-no-broadcast", "greater", "shapes broadcast (numpy rules)", ValidationError,
     lambda b: b.greater(X(b), X(b, (2, 3), name="y"))),
    ("where-float-condition", "where", "condition is bool", DTypeError, lambda b: b.where(X(b), X(b, name="a"),
                                                                                       X(b, name="c"))),
    ("where-dtype-mismatch", "where", "operands have one dtype", DTypeError,
     lambda b: b.where(X(b, dtype="bool"), X(b, name="a"), X(b, dtype="int32", name="c"))),
    ("where-no-broadcast", "where", "shapes broadcast (numpy rules)", ValidationError,
     lambda b: b.where(X(b, (5, 1), dtype="bool"), X(b, name="a"), X(b, name="c"))),
    ("reduce_sum-axis-range", "reduce_sum", "axes entry in [-r, r-1]", ValidationError,
     lambda b: b.reduce_sum(X(b), axes=[2])),
    ("reduce_sum-axis-float", "reduce_sum", "axes entry is an integer", ValidationError,
     lambda b: b.reduce_sum(X(b), axes=[0.5])),
    ("reduce_sum-axes-repeat", "reduce_sum", "axes are distinct", ValidationError,
     lambda b: b.reduce_sum(X(b), axes=[1, -1])),
    ("reduce_sum-bool", "reduce_sum", "arithmetic on numbers", DTypeError, lambda b: b.reduce_sum(X(b, dtype="bool"))),
    ("reduce_sum-keepdims-int", "reduce_sum", "keepdims is a bool", ValidationError,
     lambda b: b.reduce_sum(X(b), keepdims=1)),
    ("exp-int", "exp", "float operand", DTypeError, lambda b: b.exp(X(b, dtype="int32"))),
    ("sigmoid-complex", "sigmoid", "float operand", DTypeError, lambda b: b.sigmoid(X(b, dtype="complex64"))),
    ("reduce_max-complex", "reduce_max", "ordered operands", DTypeError,
     lambda b: b.reduce_max(X(b, dtype="complex64"))),
    ("reduce_min-bool", "reduce_min", "arithmetic on numbers", DTypeError, lambda b: b.reduce_min(X(b, dtype="bool"))),
    ("iota-complex", "iota", "integer or float dtype", DTypeError, lambda b: b.iota((3,), "complex64")),
    ("iota-axis-range", "iota", AXIS_RANGE, ValidationError, lambda b: b.iota((3,), "int32", axis=1)),
    ("iota-negative-size", "iota", "dimensions are non-negative", ValidationError, lambda b: b.iota((-2,), "int32")),
]


@pytest.mark.parametrize("case_id,op,rule,exc,make", CATALOGUE, ids=[c[0] for c in CATALOGUE])
def test_invalid_program_raises_a_cinnlite_error_naming_op_and_rule(case_id, op, rule, exc, make):
    b = cl.NetBuilder("invalid")
    try:
        make(b)
    except CinnliteError as e:
        err = e
    except Exception as e:  # noqa: BLE001 - the finding is what escaped
        pytest.fail(f"{case_id}: {type(e).__module__}.{type(e).__name__} escaped instead of a cinnlite error: {e}")
    else:
        pytest.fail(f"{case_id}: the invalid program was accepted")
    assert isinstance(err, exc), f"{case_id}: expected {exc.__name__}, got {type(err).__name__}: {err}"
    assert err.op == op, f"{case_id}: the error names operator {err.op!r}, expected {op!r}: {err}"
    if rule is None:  # no rule of this name exists yet: any named rule will do
        assert isinstance(err.rule, str) and err.rule, f"{case_id}: the error names no rule: {err}"
        rule = err.rule
    assert err.rule == rule, f"{case_id}: the error names rule {err.rule!r}, expected {rule!r}: {err}"
    text = str(err)
    assert text.startswith(op) and f"[rule: {rule}]" in text, text
    # Also catchable as the builtin a Python user would expect.
    assert isinstance(err, ValueError if exc is ValidationError else TypeError)


def test_catalogue_covers_every_operator_and_rule_family():
    ops = {c[1] for c in CATALOGUE}
    assert {"take", "gather", "gather_nd", "scatter", "scatter_nd", "create_input", "fill_constant",
            "reshape", "build"} <= ops
    assert len({c[0] for c in CATALOGUE}) == len(CATALOGUE), "case ids are unique"


def test_a_failed_operator_leaves_the_builder_usable():
    """A rejected operator adds nothing: the builder builds and runs the valid program."""
    b = cl.NetBuilder("after_error")
    x, i = X(b), I(b)
    with pytest.raises(ValidationError):
        b.take(x, i, axis=5, name="bad")
    y = b.take(x, i, axis=0, name="bad")  # the name was not claimed by the failed call
    exe = cl.compile(b.build())
    xs = np.arange(12, dtype=np.float32).reshape(4, 3)
    idx = np.array([[0, 1, 2], [3, -1, -4]])
    np.testing.assert_array_equal(exe(x=xs, idx=idx), xs[[[0, 1, 2], [3, 3, 0]]])
    assert [n.op for n in exe.program.nodes] == ["take"] and y.name == "bad"


# -- whole-program and compile-time errors ----------------------------------------------------


def _small_program():
    b = cl.NetBuilder("p")
    return b.build(outputs=[b.take(X(b), I(b))])


@pytest.mark.parametrize("kwargs,needle", [
    (dict(target="tpu"), "tpu"),
    (dict(target=None), "None"),
    (dict(opt_level=7), "opt_level"),
    (dict(opt_level="3"), "opt_level"),
    (dict(threads="four"), "threads"),
    (dict(threads=[2]), "threads"),
], ids=["target-tpu", "target-None", "opt_level-7", "opt_level-str", "threads-str", "threads-list"])
def test_bad_compile_options_raise_a_cinnlite_error(kwargs, needle):
    with pytest.raises(CinnliteError, match=needle):
        cl.compile(_small_program(), **kwargs)


@pytest.mark.parametrize("thing", [None, "program", 42, cl.NetBuilder("unbuilt")])
def test_compiling_something_that_is_not_a_program_is_a_cinnlite_error(thing):
    with pytest.raises(CinnliteError, match="Program"):
        cl.compile(thing)


@pytest.mark.parametrize("make", [lambda: cl.Float(8), lambda: cl.Int(128), lambda: cl.UInt(128),
                                  lambda: cl.as_dtype(ml_dtypes.float8_e4m3fn), lambda: cl.as_dtype(np.clongdouble),
                                  lambda: cl.Complex(32)],
                         ids=["Float8", "Int128", "UInt128", "float8_e4m3fn", "complex256", "Complex32"])
def test_unsupported_dtypes_are_dtype_errors(make):
    with pytest.raises(DTypeError, match=r"\[rule: supported dtypes\]"):
        make()


@pytest.mark.parametrize("shape", [(2**63,), (2**64 + 3, 1), (2**32, 2**32), (2**40, 2**40, 2**40)],
                         ids=["dim-2^63", "dim-2^64", "count-2^64", "count-2^120"])
def test_shapes_beyond_64_bit_index_arithmetic_are_rejected(shape):
    """All index arithmetic is 64-bit: a dimension or element count that does not fit in int64
    cannot be addressed. The program must be rejected with a cinnlite error at build or compile
    time, not compiled into code whose sizes have silently wrapped around."""
    def build_and_compile():
        b = cl.NetBuilder("huge")
        x = b.fill_constant(shape, 1.0, "float32")
        i = b.create_input("int64", (2,), "i")
        return cl.compile(b.build(outputs=[b.take(x, i, axis=0, mode="clip")]))

    with pytest.raises(CinnliteError):
        build_and_compile()
