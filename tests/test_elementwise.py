"""Elementwise operators with numpy broadcasting, against numpy, on every backend."""
import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder
from reference import is_float

DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16", "float32",
          "float64"]
SHAPES = [((3, 1, 4), (5, 1)), ((2, 3), (2, 3)), ((), (4,)), ((0, 3), (1, 3)), ((1,), (2, 1, 1, 1, 3))]
OPS = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply,
    "maximum": np.maximum, "minimum": np.minimum,
}


def _data(rng, dtype, shape, small=False):
    if is_float(dtype):
        return (rng.standard_normal(shape) * (4 if small else 50)).astype(dtype)
    info = np.iinfo(dtype)
    lo, hi = (max(info.min, -6), min(info.max, 6)) if small else (info.min, info.max)
    return rng.integers(lo, hi, shape, endpoint=True, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_binary_ops_broadcast_like_numpy(backend, dtype, shapes):
    rng = np.random.default_rng(hash((dtype, str(shapes))) % 2**32)
    b = NetBuilder("ew")
    a = b.create_input(dtype, shapes[0], "a")
    c = b.create_input(dtype, shapes[1], "c")
    names = list(OPS) + ["divide"]
    outs = [getattr(b, op)(a, c) for op in names]
    exe = cl.compile(b.build(outs), target=backend)
    A, C = _data(rng, dtype, shapes[0]), _data(rng, dtype, shapes[1], small=True)
    if not is_float(dtype):
        C[C == 0] = 0  # zero divisors stay: x // 0 is defined as 0
    got = exe(a=A, c=C)
    with np.errstate(all="ignore"):
        want = [OPS[op](A, C) for op in OPS]
        want.append(A / C if is_float(dtype) else np.floor_divide(A, C))
    for op, g, w in zip(names, got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, op
        if dtype == "bfloat16":  # each operation in float32, rounded to bfloat16: as ml_dtypes, exactly
            np.testing.assert_array_equal(g.astype(np.float32), w.astype(np.float32), err_msg=op)
        elif is_float(dtype):
            np.testing.assert_allclose(g, w, rtol=1e-3 if dtype == "float16" else 1e-6, err_msg=op)
        else:
            np.testing.assert_array_equal(g, w, err_msg=op)


@pytest.mark.parametrize("dtype", ["uint8", "uint16", "uint32", "uint64"])
def test_unsigned_divide_is_floor_division_and_zero_divisors_give_zero(backend, dtype):
    info = np.iinfo(dtype)
    b = NetBuilder("udiv")
    a = b.create_input(dtype, (8,), "a")
    c = b.create_input(dtype, (8,), "c")
    exe = cl.compile(b.build([b.divide(a, c)]), target=backend)
    A = np.array([7, 7, 0, info.max, info.max, info.max, 5, 1], dtype)
    C = np.array([2, 0, 3, 1, 2, info.max, 0, info.max], dtype)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(exe(a=A, c=C), np.floor_divide(A, C))


def test_integer_divide_edge_cases(backend):
    b = NetBuilder("div")
    a = b.create_input("int32", (8,), "a")
    c = b.create_input("int32", (8,), "c")
    exe = cl.compile(b.build([b.divide(a, c)]), target=backend)
    A = np.array([7, -7, 7, -7, 0, np.iinfo(np.int32).min, 5, -1], np.int32)
    C = np.array([2, 2, -2, -2, 3, -1, 0, 0], np.int32)
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(exe(a=A, c=C), np.floor_divide(A, C))


@pytest.mark.parametrize("src", DTYPES + ["bool"])
def test_cast_matches_astype_in_range(backend, src):
    """One program per source dtype, casting to every dtype."""
    rng = np.random.default_rng(7)
    dsts = [d for d in DTYPES + ["bool"] if d != src]
    b = NetBuilder("cast")
    x = b.create_input(src, (4, 5), "x")
    exe = cl.compile(b.build([b.cast(x, dst) for dst in dsts]), target=backend)
    if src == "bool":
        X = rng.integers(0, 2, (4, 5)).astype(bool)
    elif is_float(src):
        X = (rng.standard_normal((4, 5)) * 3).astype(src)  # within every integer type's range
    else:
        X = rng.integers(0, 100, (4, 5)).astype(src)
    for dst, got in zip(dsts, exe(x=X)):
        if is_float(src) and np.dtype(dst).kind == "u":
            continue  # negative floats are out of an unsigned range: the saturating test has them
        assert got.dtype == np.dtype(dst)
        want = X.astype(dst)
        if dst == "bfloat16":  # compared as float32, which holds every value
            got, want = got.astype(np.float32), want.astype(np.float32)
        np.testing.assert_array_equal(got, want, err_msg=f"{src} -> {dst}")


def saturating_cast(values, dst):
    """The contract's float -> integer cast: toward zero, saturated to the range, NaN is 0."""
    info = np.iinfo(dst)
    out = []
    for v in np.asarray(values, np.float64).reshape(-1):
        if np.isnan(v):
            out.append(0)
        elif np.isinf(v):
            out.append(int(info.max) if v > 0 else int(info.min))
        else:
            out.append(min(max(int(v), int(info.min)), int(info.max)))  # int() truncates exactly
    return np.array(out, dtype=dst)


@pytest.mark.parametrize("src", ["float16", "bfloat16", "float32", "float64"])
def test_float_to_integer_casts_saturate_and_nan_gives_zero(backend, src):
    """Every integer dtype, unsigned ones included: negative values give 0, values past the top
    the maximum, NaN 0, and values just inside either bound convert exactly."""
    ints = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
    special = [np.nan, np.inf, -np.inf, -0.0, 0.0, -0.5, -1.0, -1.5, 0.99, 1.5, 3.9, -3.9, 255.5, 256.0, -129.0,
               65504.0, -65504.0, 2.0**31, -(2.0**31), 2.0**32, 2.0**32 - 2**9, 2.0**63, -(2.0**63), 2.0**64,
               2.0**64 - 2**11, 1e30, -1e30]
    with np.errstate(over="ignore"):
        X = np.array(special, np.float64).astype(src)  # float16: the large ones become inf
    b = NetBuilder("sat")
    x = b.create_input(src, X.shape, "x")
    exe = cl.compile(b.build([b.cast(x, d) for d in ints]), target=backend)
    for dst, got in zip(ints, exe(x=X)):
        np.testing.assert_array_equal(got, saturating_cast(X, dst), err_msg=f"{src} -> {dst}")


def test_float_to_int_cast_saturates(backend):
    b = NetBuilder("sat")
    x = b.create_input("float32", (5,), "x")
    exe = cl.compile(b.build([b.cast(x, "int8")]), target=backend)
    got = exe(x=np.array([1e9, -1e9, np.nan, 3.9, -3.9], np.float32))
    np.testing.assert_array_equal(got, np.array([127, -128, 0, 3, -3], np.int8))


def test_nan_propagates_through_maximum_and_minimum(backend):
    b = NetBuilder("nan")
    a = b.create_input("float64", (3,), "a")
    c = b.create_input("float64", (3,), "c")
    exe = cl.compile(b.build([b.maximum(a, c), b.minimum(a, c)]), target=backend)
    A, C = np.array([np.nan, 1.0, 2.0]), np.array([0.0, np.nan, 1.0])
    mx, mn = exe(a=A, c=C)
    np.testing.assert_array_equal(mx, np.maximum(A, C))
    np.testing.assert_array_equal(mn, np.minimum(A, C))


@pytest.mark.parametrize("bad", [((3,), (4,)), ((2, 3), (3, 2))])
def test_shapes_that_do_not_broadcast_are_rejected(bad):
    b = NetBuilder("bad")
    a, c = b.create_input("float32", bad[0], "a"), b.create_input("float32", bad[1], "c")
    with pytest.raises(cl.ValidationError, match="broadcast"):
        b.add(a, c)


def test_mixed_dtypes_are_rejected():
    b = NetBuilder("bad")
    a, c = b.create_input("float32", (2,), "a"), b.create_input("float64", (2,), "c")
    with pytest.raises(cl.DTypeError, match="one dtype"):
        b.multiply(a, c)


def test_bool_arithmetic_is_rejected():
    b = NetBuilder("bad")
    a = b.create_input("bool", (2,), "a")
    with pytest.raises(cl.DTypeError, match="bool"):
        b.add(a, a)
