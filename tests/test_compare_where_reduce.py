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
