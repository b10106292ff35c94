"""Comparisons, ``where``, ``iota`` and ``reduce_sum`` against numpy, on every backend."""
import ml_dtypes
import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder
from reference import is_float

DTYPES = ["bool", "int8", "int32", "int64", "uint8", "uint64", "float16", "bfloat16", "float32", "float64"]
SHAPES = [((3, 1, 4), (5, 1)), ((2, 3), (2, 3)), ((), (4,)), ((0, 3), (1, 3))]
COMPARE = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
           "greater": np.greater, "greater_equal": np.greater_equal}


def _data(rng, dtype, shape):
    """Few distinct values, so that ties occur; floats with NaN, infinities and a signed zero."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    values = rng.integers(-3, 4, shape)
    if dtype.startswith("uint"):
        values = np.abs(values)
    out = values.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)
    if is_float(dtype) and out.size >= 4:
        out.reshape(-1)[:4] = np.array([np.nan, np.inf, -np.inf, -0.0]).astype(out.dtype)
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_comparisons_and_where_broadcast_like_numpy(backend, dtype, shapes):
    rng = np.random.default_rng(abs(hash((dtype, str(shapes)))) % 2**32)
    b = NetBuilder("cmp")
    a, c = b.create_input(dtype, shapes[0], "a"), b.create_input(dtype, shapes[1], "c")
    outs = [getattr(b, op)(a, c) for op in COMPARE]
    outs.append(b.where(outs[2], a, c))
    exe = cl.compile(b.build(outs), target=backend)
    A, C = _data(rng, dtype, shapes[0]), _data(rng, dtype, shapes[1])
    got = exe(a=A, c=C)
    for op, g in zip(COMPARE, got):
        want = COMPARE[op](A.astype(np.float32) if dtype == "bfloat16" else A,
                           C.astype(np.float32) if dtype == "bfloat16" else C)
        assert g.dtype == np.bool_ and g.shape == want.shape, op
        np.testing.assert_array_equal(g, want, err_msg=op)
    want = np.where(got[2], A, C)
    assert got[-1].dtype == want.dtype
    np.testing.assert_array_equal(got[-1].view(np.uint8), want.view(np.uint8))  # bit for bit: NaN and -0.0


def test_where_broadcasts_all_three_operands(backend):
    b = NetBuilder("where3")
    cond = b.create_input("bool", (4, 1, 1), "cond")
    a, c = b.create_input("float32", (1, 3, 1), "a"), b.create_input("float32", (2,), "c")
    exe = cl.compile(b.build([b.where(cond, a, c)]), target=backend)
    rng = np.random.default_rng(0)
    C, A, X = rng.random((4, 1, 1)) < 0.5, rng.random((1, 3, 1), np.float32), rng.random(2, np.float32)
    np.testing.assert_array_equal(exe(cond=C, a=A, c=X), np.where(C, A, X))


@pytest.mark.parametrize("dtype", ["int8", "int32", "uint64", "float16", "bfloat16", "float32", "float64",
                                   "complex64"])
@pytest.mark.parametrize("axes,keepdims", [(None, False), ((0,), True), ((1,), False), ((0, 2), False),
                                           ((-1,), True), ((), False)], ids=str)
def test_reduce_sum_is_numpys_sum_in_the_data_dtype(backend, dtype, axes, keepdims):
    rng = np.random.default_rng(7)
    shape = (3, 4, 5)
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    if dtype.startswith("complex"):
        x = (rng.integers(-4, 5, shape) + 1j * rng.integers(-4, 5, shape)).astype(dtype)
    elif dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype)  # sums wrap around
    else:
        x = (rng.integers(-16, 17, shape) / 4).astype(np_dtype)  # exact sums in any order
    b = NetBuilder("sum")
    t = b.create_input(dtype, shape, "x")
    exe = cl.compile(b.build([b.reduce_sum(t, axes=axes, keepdims=keepdims)]), target=backend)
    got = exe(x=x)
    want = x.astype(np.float64).sum(axis=axes, keepdims=keepdims).astype(np_dtype) if is_float(dtype) else \
        x.sum(axis=axes, keepdims=keepdims, dtype=dtype)
    assert got.dtype == np.dtype(np_dtype) and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_reduce_sum_of_float16_accumulates_in_float32(backend):
    b = NetBuilder("sum16")
    t = b.create_input("float16", (4096,), "x")
    exe = cl.compile(b.build([b.reduce_sum(t)]), target=backend)
    # 1 + 4095 * 2**-11: a float16 running sum would stop growing at 2**11 * 2**-11 = 1.
    x = np.full(4096, 2.0 ** -11, np.float16)
    x[0] = 1.0
    assert float(exe(x=x)) == float(np.float16(1 + 4095 * 2.0 ** -11))


def test_reduce_sum_over_symbolic_sizes(backend):
    b = NetBuilder("symsum")
    t = b.create_input("float64", ("N", 3), "x")
    exe = cl.compile(b.build([b.reduce_sum(t, axes=0), b.reduce_sum(t, axes=1, keepdims=True)]), target=backend)
    for n in (0, 1, 7):
        x = np.arange(n * 3, dtype=np.float64).reshape(n, 3)
        got = exe(x=x)
        np.testing.assert_array_equal(got[0], x.sum(0))
        np.testing.assert_array_equal(got[1], x.sum(1, keepdims=True))


@pytest.mark.parametrize("dtype", ["int8", "int64", "uint16", "float32", "bfloat16"])
def test_iota_holds_positions_and_coordinates(backend, dtype):
    b = NetBuilder("iota")
    t = b.create_input("float32", ("N", 3), "x")
    outs = [b.iota(t.shape, dtype), b.iota((2, "N", 3), dtype, axis=1), b.iota((4,), dtype, axis=-1)]
    exe = cl.compile(b.build(outs), target=backend)
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    for n in (1, 5):
        got = exe(x=np.zeros((n, 3), np.float32))
        np.testing.assert_array_equal(got[0], np.arange(3 * n).reshape(n, 3).astype(np_dtype))
        np.testing.assert_array_equal(got[1], np.broadcast_to(np.arange(n)[None, :, None], (2, n, 3)).astype(np_dtype))
        np.testing.assert_array_equal(got[2], np.arange(4).astype(np_dtype))
        assert got[0].dtype == np.dtype(np_dtype)


@pytest.mark.parametrize("build,rule", [
    (lambda b, f, i: b.equal(f, i), "operands have one dtype"),
    (lambda b, f, i: b.less(b.cast(f, "complex64"), b.cast(f, "complex64")), "real operands"),
    (lambda b, f, i: b.where(f, f, f), "condition is bool"),
    (lambda b, f, i: b.where(b.equal(f, f), f, i), "operands have one dtype"),
    (lambda b, f, i: b.where(b.equal(f, f), f, b.create_input("float32", (5,), "z")), "shapes broadcast"),
    (lambda b, f, i: b.reduce_sum(f, axes=(0, 0)), "axes are distinct"),
    (lambda b, f, i: b.reduce_sum(f, axes=2), "axes entry in [-r, r-1]"),
    (lambda b, f, i: b.reduce_sum(b.equal(f, f)), "arithmetic on numbers"),
    (lambda b, f, i: b.reduce_sum(f, keepdims=1), "keepdims is a bool"),
    (lambda b, f, i: b.iota((2, 3), "bool"), "integer or float dtype"),
    (lambda b, f, i: b.iota((2, 3), "int32", axis=2), "axis in [-r, r-1]"),
    (lambda b, f, i: b.iota((-1,), "int32"), "dimensions are non-negative"),
])
def test_broken_rules_name_the_rule(build, rule):
    b = NetBuilder("bad")
    f, i = b.create_input("float32", (2, 3), "f"), b.create_input("int32", (2, 3), "i")
    with pytest.raises((cl.ValidationError, cl.DTypeError)) as info:
        build(b, f, i)
    assert rule in str(info.value)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_float_functions_are_numpys(backend, dtype):
    """float32/float64 within a few ulp of numpy; float16 and bfloat16 computed in float32 and
    rounded once."""
    b = NetBuilder("functions")
    t = b.create_input(dtype, (12,), "x")
    names = ("exp", "log", "sqrt", "tanh", "sigmoid")
    exe = cl.compile(b.build([getattr(b, n)(t) for n in names]), target=backend)
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype
    x = np.array([-30, -2.5, -1, -0.0, 0.0, 1e-3, 0.5, 1, 3, 20, np.inf, np.nan]).astype(np_dtype)
    got = exe(x=x)
    wide = x.astype(np.float32 if np.dtype(np_dtype).itemsize <= 2 else np_dtype)
    with np.errstate(all="ignore"):
        want = [np.exp(wide), np.log(wide), np.sqrt(wide), np.tanh(wide), 1 / (1 + np.exp(-wide))]
    for name, g, w in zip(names, got, want):
        assert g.dtype == np.dtype(np_dtype), name
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np_dtype).astype(np.float64),
                                   rtol=1e-2 if np.dtype(np_dtype).itemsize <= 2 else 4e-7, err_msg=name)


@pytest.mark.parametrize("dtype", ["int8", "uint64", "float16", "float32", "float64"])
@pytest.mark.parametrize("axes,keepdims", [(None, False), ((0, 2), True), ((1,), False), ((), False)], ids=str)
def test_reduce_max_and_min_are_numpys(backend, dtype, axes, keepdims):
    rng = np.random.default_rng(3)
    x = (rng.standard_normal((3, 4, 5)) * 50).astype(dtype) if "float" in dtype else \
        rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, (3, 4, 5), endpoint=True, dtype=dtype)
    if "float" in dtype:
        x[1, 2, 3] = np.nan  # propagates, as numpy's max
    b = NetBuilder("extremes")
    t = b.create_input(dtype, x.shape, "x")
    exe = cl.compile(b.build([b.reduce_max(t, axes=axes, keepdims=keepdims),
                              b.reduce_min(t, axes=axes, keepdims=keepdims)]), target=backend)
    got = exe(x=x)
    np.testing.assert_array_equal(got[0], x.max(axis=axes, keepdims=keepdims))
    np.testing.assert_array_equal(got[1], x.min(axis=axes, keepdims=keepdims))


@pytest.mark.parametrize("dtype", ["int8", "int32", "float16", "float32", "float64"])
@pytest.mark.parametrize("columns", [1, 3, 36, 63, 64, 65, 100, 257])
def test_reductions_over_a_middle_axis_match_numpy_at_every_row_width(backend, dtype, columns):
    """Row widths around the CPU's register blocks (64 float32, 32 float64, 256 int8: whole
    blocks, halving blocks, leftovers). Sums of quarters are exact in any order; int8 wraps."""
    rng = np.random.default_rng(columns)
    x = (rng.integers(-64, 65, (3, 9, columns)) / 4).astype(dtype)
    b = NetBuilder("middle")
    t = b.create_input(dtype, x.shape, "x")
    exe = cl.compile(b.build([b.reduce_sum(t, axes=1), b.reduce_max(t, axes=1), b.reduce_min(t, axes=1)]),
                     target=backend)
    total, top, bottom = exe(x=x)
    wide = np.float32 if dtype == "float16" else x.dtype  # float16 sums accumulate in float32
    np.testing.assert_array_equal(total, x.astype(wide).sum(axis=1, dtype=wide).astype(dtype))
    np.testing.assert_array_equal(top, x.max(axis=1))
    np.testing.assert_array_equal(bottom, x.min(axis=1))


def test_matrix_products_of_symbolic_sizes_match_numpy(backend):
    """A product as ONNX's MatMul imports it (multiply, then reduce_sum over the shared axis),
    with the rows, the shared axis and the output columns all symbolic."""
    b = NetBuilder("matmul")
    a, m = b.create_input("float64", ("R", "K", 1), "a"), b.create_input("float64", (1, "K", "C"), "m")
    exe = cl.compile(b.build([b.reduce_sum(b.multiply(a, m), axes=1)]), target=backend)
    rng = np.random.default_rng(5)
    for rows, k, c in ((4, 3, 100), (1, 7, 31), (5, 2, 33), (2, 1, 0), (3, 5, 64)):
        A, M = rng.standard_normal((rows, k, 1)), rng.standard_normal((1, k, c))
        np.testing.assert_allclose(exe(a=A, m=M), A[:, :, 0] @ M[0], rtol=1e-12, atol=1e-12)


def test_a_row_reduction_accumulates_in_blocks_on_the_cpu():
    b = NetBuilder("blocks")
    t = b.create_input("float32", (8, 16, 100), "x")
    lowered = cl.compile(b.build([b.reduce_sum(t, axes=1)]), cache=False).source("lowered")
    # 100 columns: one block of 64 (256 bytes), then blocks of 32 and 4, each under the reduced loop.
    assert "_block in 0..1" in lowered and "_left32 in 0..32" in lowered and "_left4 in 0..4" in lowered


@pytest.mark.parametrize("compare", ["less", "less_equal", "greater", "greater_equal"])
@pytest.mark.parametrize("bound", [-1, 0, 3, 6, 10])
def test_where_over_a_coordinate_bound_matches_numpy(backend, compare, bound):
    """``where(coordinate <op> bound, a, b)``, the form of a concatenation: the CPU schedule
    splits the loop at the bound (outside the axis: one range)."""
    rng = np.random.default_rng(bound + 20)
    a, c = rng.standard_normal((4, 2, 10)).astype(np.float32), rng.standard_normal((4, 2, 10)).astype(np.float32)
    b = NetBuilder("split")
    ta, tc = b.create_input("float32", a.shape, "a"), b.create_input("float32", c.shape, "c")
    mask = getattr(b, compare)(b.iota((1, 1, 10), axis=2), b.fill_constant((), bound, "int64"))
    exe = cl.compile(b.build([b.where(mask, b.exp(ta), b.sqrt(b.multiply(tc, tc)))]), target=backend)
    want = np.where(COMPARE[compare](np.arange(10), bound), np.exp(a), np.sqrt(c * c))
    np.testing.assert_allclose(exe(a=a, c=c), want, rtol=1e-6)


def test_a_select_of_a_coordinate_splits_the_loop_on_the_cpu():
    b = NetBuilder("cat")
    ta, tc = b.create_input("float32", (4, 8), "a"), b.create_input("float32", (4, 3), "c")
    position = b.iota((11,), "int64")
    left = b.take(ta, position, axis=1, mode="clip")
    right = b.take(tc, b.subtract(position, b.fill_constant((), 8, "int64")), axis=1, mode="clip")
    joined = b.where(b.less(b.iota((1, 11), axis=1), b.fill_constant((), 8, "int64")), left, right)
    exe = cl.compile(b.build([joined]), cache=False)
    lowered = exe.source("lowered")
    assert "in 0..8 {" in lowered and "_from8 in 0..3 {" in lowered and "select((" not in lowered.split("_from8")[1]
    a, c = np.arange(32, dtype=np.float32).reshape(4, 8), -np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_array_equal(exe(a=a, c=c), np.concatenate([a, c], axis=1))


@pytest.mark.parametrize("dtype", ["int32", "float32", "float64"])
@pytest.mark.parametrize("rows,columns", [(37, 16), (8, 4), (33, 3), (5, 8), (64, 32), (9, 1)])
def test_narrow_row_reductions_match_numpy_for_every_row_count(backend, dtype, rows, columns):
    """Rows of a narrow reduction run interleaved on the CPU (four rows of 16 float32, eight of
    4): whole tiles, rows left over, and fewer rows than one tile; static and symbolic rows."""
    rng = np.random.default_rng(rows * columns)
    x = (rng.integers(-64, 65, (rows, 6, columns)) / 4).astype(dtype)
    for shape in ((rows, 6, columns), ("N", 6, columns)):
        b = NetBuilder("narrow")
        t = b.create_input(dtype, shape, "x")
        exe = cl.compile(b.build([b.reduce_sum(t, axes=1), b.reduce_max(t, axes=1)]), target=backend)
        total, top = exe(x=x)
        np.testing.assert_array_equal(total, x.sum(axis=1, dtype=x.dtype))
        np.testing.assert_array_equal(top, x.max(axis=1))


def test_a_narrow_row_reduction_interleaves_rows_on_the_cpu():
    b = NetBuilder("tiles")
    t = b.create_input("float32", (10, 7, 16), "x")
    lowered = cl.compile(b.build([b.reduce_sum(t, axes=1)]), cache=False).source("lowered")
    # 16 float32 columns: four rows to a 256-byte block; 10 rows: two tiles, two rows left.
    assert "_tile in 0..2 {" in lowered and "_left in 0..2 {" in lowered
