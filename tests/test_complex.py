"""complex64 and complex128 on every backend, against numpy, the reference's part-by-part
arithmetic (``reference.complex_parts_op``) and PyTorch.

The contract (SEMANTICS.md, "Data types"): add and subtract part by part; multiply by the plain
formula ``(ar*br - ai*bi) + (ar*bi + ai*br)i`` with every product and sum rounded (numpy's
multiply where the CPU has no fused multiply-add; numpy's loops use one where it has); divide as
numpy divides (Smith's method); casts between the complex dtypes part by part, from a real dtype
into the real part, never from complex to real; scatters none/add/mul/mean/sub, no max/min.
"""
from __future__ import annotations

import numpy as np
import pytest

import cinnlite as cl
import reference as R
from cinnlite import NetBuilder

COMPLEX = ["complex64", "complex128"]
REAL = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
        "float32", "float64"]


def assert_same_parts(got, want, label):
    """Equal dtypes; each part NaN where the other's is, else bit for bit (the sign of zero too)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, f"{label}: {got.dtype}{got.shape} vs {want.dtype}{want.shape}"
    for part in ("real", "imag"):
        g, w = np.ascontiguousarray(getattr(got, part)), np.ascontiguousarray(getattr(want, part))
        nan = np.isnan(w)
        np.testing.assert_array_equal(np.isnan(g), nan, err_msg=f"{label} ({part}): NaN")
        u = f"u{g.dtype.itemsize}"
        np.testing.assert_array_equal(g[~nan].view(u), w[~nan].view(u), err_msg=f"{label} ({part})")


def special_values(dtype, n, seed):
    """Random parts over many magnitudes, with zeros of both signs, infinities, NaN and huge and
    tiny parts mixed in, so that every branch of the division and every overflow is reached."""
    rng = np.random.default_rng(seed)
    part = np.float32 if dtype == "complex64" else np.float64
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 1e30, -1e-30, 3e38, 1e-40], part)

    def parts():
        with np.errstate(over="ignore"):
            v = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(part)
        spots = rng.random(n) < 0.2
        v[spots] = specials[rng.integers(len(specials), size=int(spots.sum()))]
        return v

    out = np.empty(n, dtype)
    out.real, out.imag = parts(), parts()
    return out


@pytest.mark.parametrize("dtype", COMPLEX)
def test_arithmetic_part_by_part(backend, dtype):
    a, c = special_values(dtype, 4000, 1), special_values(dtype, 4000, 2)
    b = NetBuilder("cx")
    ta, tc = b.create_input(dtype, a.shape, "a"), b.create_input(dtype, c.shape, "c")
    ops = {"add": "add", "subtract": "sub", "multiply": "mul", "divide": "div"}
    exe = cl.compile(b.build([getattr(b, op)(ta, tc) for op in ops]), target=backend)
    for (op, part_op), got in zip(ops.items(), exe(a=a, c=c)):
        assert_same_parts(got, R.complex_elementwise(part_op, a, c), op)
        with np.errstate(all="ignore"):
            numpy_result = getattr(np, op)(a, c)
        if op != "multiply":
            # numpy itself, exactly (its multiply loops fuse multiply-adds on CPUs that have them)
            assert_same_parts(got, numpy_result, f"{op} against numpy")


def test_broadcasting_and_scalars(backend):
    a = np.array([[1 + 2j], [3 - 4j]], np.complex128)
    c = np.array([0.5j, -2, 1 + 1j], np.complex128)
    b = NetBuilder("bc")
    ta, tc = b.create_input("complex128", a.shape, "a"), b.create_input("complex128", c.shape, "c")
    k = b.fill_constant((3,), 2 - 1j, "complex128")
    exe = cl.compile(b.build([b.multiply(ta, tc), b.divide(ta, k), b.add(b.constant(np.array([1j, 2, 3])), tc)]),
                     target=backend)
    prod, quot, plus = exe(a=a, c=c)
    assert_same_parts(prod, R.complex_elementwise("mul", a, c), "multiply")
    assert_same_parts(quot, a / np.full(3, 2 - 1j), "divide")
    assert_same_parts(plus, np.array([1j, 2, 3]) + c, "add a constant")


@pytest.mark.parametrize("dst", COMPLEX)
def test_real_dtypes_cast_into_the_real_part(backend, dst):
    rng = np.random.default_rng(4)
    b = NetBuilder("to_complex")
    arrays = {}
    for src in REAL:
        if src == "bool":
            arrays[src] = rng.random(50) < 0.5
        elif np.dtype(src).kind in "iu":
            info = np.iinfo(src)
            arrays[src] = np.concatenate([np.array([info.min, info.max, 0], src),
                                          rng.integers(info.min, info.max, 47, endpoint=True, dtype=src)])
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                arrays[src] = np.concatenate([np.array([np.nan, np.inf, -0.0]), rng.standard_normal(47) * 1e5]).astype(src)
    ins = {src: b.create_input(src, (50,), f"x_{src}") for src in REAL}
    exe = cl.compile(b.build([b.cast(ins[src], dst) for src in REAL]), target=backend)
    got = exe.run({f"x_{src}": a for src, a in arrays.items()})
    part = np.float32 if dst == "complex64" else np.float64
    for src, out in zip(REAL, (got[o.name] for o in exe.lowered.outputs)):
        with np.errstate(invalid="ignore"):
            want = np.empty(50, dst)
            want.real, want.imag = arrays[src].astype(part), 0.0  # as numpy's astype: the real part
        assert_same_parts(out, want, f"{src} -> {dst}")
        if src != "bfloat16":
            assert_same_parts(out, arrays[src].astype(dst), f"{src} -> {dst} (numpy's astype)")


def test_complex_dtypes_cast_part_by_part(backend):
    x64, x128 = special_values("complex64", 500, 5), special_values("complex128", 500, 6)
    b = NetBuilder("cc")
    t64, t128 = b.create_input("complex64", x64.shape, "a"), b.create_input("complex128", x128.shape, "c")
    exe = cl.compile(b.build([b.cast(t64, "complex128"), b.cast(t128, "complex64"), b.cast(t64, "complex64")]),
                     target=backend)
    wide, narrow, same = exe(a=x64, c=x128)
    assert_same_parts(wide, x64.astype(np.complex128), "complex64 -> complex128")
    with np.errstate(over="ignore"):
        assert_same_parts(narrow, x128.astype(np.complex64), "complex128 -> complex64")
    assert_same_parts(same, x64, "complex64 -> complex64")


@pytest.mark.parametrize("dtype", COMPLEX)
def test_gathers_move_both_parts_and_fill_with_a_complex_value(backend, dtype):
    x = special_values(dtype, 60, 7).reshape(5, 12)
    b = NetBuilder("g")
    tx = b.create_input(dtype, x.shape, "x")
    ti = b.create_input("int64", (3, 12), "i")
    tt = b.create_input("uint8", (4, 2), "t")
    outs = [b.gather(tx, ti, axis=0, mode="fill", fill_value=1.5 - 2j), b.take(tx, ti, axis=1, mode="wrap"),
            b.gather_nd(tx, tt, mode="clip")]
    exe = cl.compile(b.build(outs), target=backend)
    i = np.array([[0, 4, -1, 7, 2, 3, 1, 0, -5, 9, 4, 4]] * 3, np.int64)
    t = np.array([[0, 1], [4, 11], [250, 3], [2, 200]], np.uint8)
    g, w, n = exe(x=x, i=i, t=t)
    assert_same_parts(g, R.gather(x, i, axis=0, mode="fill", fill_value=1.5 - 2j), "gather fill")
    assert_same_parts(w, R.take(x, i, axis=1, mode="wrap"), "take wrap")
    assert_same_parts(n, R.gather_nd(x, t, mode="clip"), "gather_nd clip")


def gaussian_integers(rng, shape, dtype, lo=-4, hi=4):
    """Small integer parts: sums and products are exact in any order."""
    out = np.empty(shape, dtype)
    out.real, out.imag = rng.integers(lo, hi, shape, endpoint=True), rng.integers(lo, hi, shape, endpoint=True)
    return out


SCATTERS = [("none", True), ("add", True), ("mul", True), ("mean", True), ("add", False), ("mul", False),
            ("mean", False)]


@pytest.mark.parametrize("dtype", COMPLEX)
@pytest.mark.parametrize("deterministic", [False, True])
def test_scatters_against_the_reference_and_pytorch(backend, dtype, deterministic):
    """Every reduction complex data has, with and without x, against the reference; add, mul
    and mean against PyTorch's scatter_reduce too. Many updates per element, so that the GPU
    passes take the atomic path for add (one atomic add per part); mul always runs ordered."""
    if deterministic and backend == "cpu":
        pytest.skip("the CPU is deterministic anyway")
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(8)
    n = 600
    b = NetBuilder("sc")
    tx = b.create_input(dtype, (4, 3), "x")
    ts = b.create_input(dtype, (n, 3), "s")
    ti = b.create_input("int64", (n, 3), "i")
    tj = b.create_input("int32", (n, 1), "j")
    outs = [b.scatter(tx, ti, ts, reduce=r, include_self=inc) for r, inc in SCATTERS]
    outs.append(b.scatter_nd(tx, tj, ts, reduce="sub"))
    exe = cl.compile(b.build(outs), target=backend, deterministic=deterministic)
    if backend != "cpu":
        source = exe.source("cuda")
        assert (f"cl_atomic_add_c{dtype[7:]}(" in source) != deterministic
        assert "cl_atomic_mul_c" not in source
    for trial in range(3):
        x = gaussian_integers(rng, (4, 3), dtype)
        s = gaussian_integers(rng, (n, 3), dtype)
        # mul: mostly units (1, -1, i, -i), so that 150 products stay in range and exact
        units = np.array([1, -1, 1j, -1j, 1 + 1j], dtype)[rng.choice(5, (n, 3), p=[0.3, 0.3, 0.2, 0.19, 0.01])]
        i, j = rng.integers(-4, 4, (n, 3)), rng.integers(0, 4, (n, 1)).astype(np.int32)
        feeds = dict(x=x, i=i, j=j)
        for k, (reduce, include_self) in enumerate(SCATTERS):
            src = units if reduce == "mul" else s
            got = exe.run(dict(feeds, s=src))[outs[k].name]
            label = f"{dtype} {reduce} include_self={include_self}"
            if include_self:
                assert_same_parts(got, R.scatter(x, i, src, reduce=reduce), label)
            if reduce != "none":
                pos = np.where(i < 0, i + 4, i)
                want = torch.from_numpy(x).scatter_reduce(0, torch.from_numpy(pos), torch.from_numpy(src),
                                                          reduce={"add": "sum", "mul": "prod", "mean": "mean"}[reduce],
                                                          include_self=include_self).numpy()
                if reduce == "mean":  # PyTorch divides by the count its own way: the last bit may differ
                    np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=f"{label} against PyTorch")
                else:
                    assert_same_parts(got, want, f"{label} against PyTorch")
        got = exe.run(dict(feeds, s=s))[outs[-1].name]
        assert_same_parts(got, R.scatter_nd(x, j, s, reduce="add") - 2 * (R.scatter_nd(x, j, s, reduce="add") - x),
                          "scatter_nd sub")


def test_subtracting_keeps_the_signs_of_zero_parts(backend):
    """sub is x + (-u) with u negated exactly: -0.0 - 0.0 stays -0.0 in both parts."""
    b = NetBuilder("sub")
    tx = b.create_input("complex64", (2,), "x")
    ti = b.create_input("int64", (2, 1), "i")
    ts = b.create_input("complex64", (2,), "s")
    exe = cl.compile(b.build([b.scatter_nd(tx, ti, ts, reduce="sub")]), target=backend)
    x = np.array([complex(-0.0, -0.0), complex(1.0, -0.0)], np.complex64)
    s = np.array([complex(0.0, 0.0), complex(-0.0, 0.0)], np.complex64)
    got = exe(x=x, i=np.array([[0], [1]]), s=s)
    want = np.empty(2, np.complex64)
    want.real, want.imag = np.array([-0.0, 1.0], np.float32), np.array([-0.0, -0.0], np.float32)
    assert_same_parts(got, want, "sub")


def test_mean_divides_the_complex128_sum_as_numpy(backend):
    """The sum of x and the updates in complex128, divided by the count as numpy divides a complex
    number by a real one (a complex division), rounded once to complex64."""
    b = NetBuilder("mean")
    tx = b.create_input("complex64", (3,), "x")
    ti = b.create_input("int32", (5,), "i")
    ts = b.create_input("complex64", (5,), "s")
    exe = cl.compile(b.build([b.scatter(tx, ti, ts, reduce="mean")]), target=backend)
    x = np.array([5 + 7j, 1e30 + 1j, np.inf + 1j], np.complex64)
    s = np.array([0.1 + 0.2j, 3e29 - 1j, 2, 1, 0.5j], np.complex64)
    i = np.array([0, 1, 0, 2, 0], np.int32)
    got = exe(x=x, i=i, s=s)
    sums = np.array([5 + 7j + np.complex128(s[0]) + 2 + 0.5j, 1e30 + 1j + np.complex128(s[1]), np.inf + 1j + 1],
                    np.complex128)
    sums[0] = np.complex128(x[0]) + np.complex128(s[0]) + np.complex128(s[2]) + np.complex128(s[4])
    sums[1] = np.complex128(x[1]) + np.complex128(s[1])
    with np.errstate(invalid="ignore"):
        want = (sums / np.array([4, 2, 2])).astype(np.complex64)
    assert_same_parts(got, want, "mean")
    assert np.isnan(got[2].imag)  # (inf + 2i) / 2 as numpy divides: inf + nan i
