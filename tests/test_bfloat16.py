"""bfloat16 on every backend, against ml_dtypes (conversions, arithmetic) and PyTorch (scatter
reductions), bit for bit.

The contract (SEMANTICS.md, "Data types"): a value converts to bfloat16 through float32, each
step rounded to nearest even (PyTorch's conversion; ml_dtypes' before 0.7), NaN stays NaN; arithmetic is
the float32 result rounded to bfloat16; a scatter's add and mul accumulate in float32 and round
once at the end (PyTorch's scatter_reduce on the CPU), mean sums in float32, max and min are
exact.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import cinnlite as cl
import reference as R
from cinnlite import NetBuilder

# numpy's casts warn about the NaN and overflow these tests convert on purpose.
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning",
                                        "ignore:overflow encountered:RuntimeWarning")
BF16 = np.dtype(ml_dtypes.bfloat16)
INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]


def every_bfloat16() -> np.ndarray:
    return np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(BF16)


def assert_same_bits(got, want, label, nan_sign=True):
    """Equal dtypes; NaN where the other is NaN (with its sign, unless ``nan_sign`` is False);
    every other value bit for bit, the sign of zero included."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype, f"{label}: dtype {got.dtype}, expected {want.dtype}"
    as_float = lambda a: a.astype(np.float64)  # noqa: E731 - exact for every float dtype here
    nan = np.isnan(as_float(want))
    np.testing.assert_array_equal(np.isnan(as_float(got)), nan, err_msg=f"{label}: NaN")
    signed = slice(None) if nan_sign else ~nan
    np.testing.assert_array_equal(np.signbit(as_float(got))[signed], np.signbit(as_float(want))[signed],
                                  err_msg=f"{label}: sign")
    unsigned = f"u{got.dtype.itemsize}"
    np.testing.assert_array_equal(got[~nan].view(unsigned), want[~nan].view(unsigned), err_msg=label)


def through_float32(x: np.ndarray) -> np.ndarray:
    """``x`` converted to bfloat16 as SEMANTICS.md says: to float32, then to bfloat16, each to
    nearest even (ml_dtypes' own conversion of a float64 or an integer rounds once from 0.7)."""
    return x.astype(np.float32).astype(BF16)


def cast_all(backend, x: np.ndarray, targets):
    b = NetBuilder("cast")
    t = b.create_input(x.dtype, x.shape, "x")
    exe = cl.compile(b.build([b.cast(t, d) for d in targets]), target=backend)
    out = exe(x=x)
    return out if isinstance(out, tuple) else (out,)


def rounding_cases(dtype) -> np.ndarray:
    """Values at and around every bfloat16 rounding boundary in ``dtype``: every bfloat16 value,
    the midpoints between neighbours (ties) and the values just beside them; random bit
    patterns (NaNs with payloads included); overflow and subnormals."""
    b = every_bfloat16()
    finite = np.unique(b[np.isfinite(b.astype(np.float64))].astype(np.float64))
    mids = (finite[:-1] + finite[1:]) / 2
    base = np.concatenate([finite, mids, [3.4e38, 3.3961e38, 1e39, 2.0**-133, 2.0**-134, 3 * 2.0**-135, 1e-45,
                                          np.inf, -np.inf, np.nan]])
    with np.errstate(over="ignore"):
        base = base.astype(dtype)
    nxt = np.nextafter(base, np.array(np.inf, dtype))
    prv = np.nextafter(base, np.array(-np.inf, dtype))
    rng = np.random.default_rng(3)
    if dtype == np.float32:
        bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)
    else:
        bits = rng.integers(0, 2**63, 20000, dtype=np.uint64) | (rng.integers(0, 2, 20000, dtype=np.uint64) << 63)
    return np.concatenate([base, nxt, prv, bits.view(dtype)])


# -- conversions -------------------------------------------------------------------------------------


def test_every_bfloat16_converts_exactly_to_the_wider_floats(backend):
    x = every_bfloat16()
    to32, to64, back = cast_all(backend, x, ["float32", "float64", "bfloat16"])
    assert_same_bits(to32, x.astype(np.float32), "bfloat16 -> float32")
    assert_same_bits(to64, x.astype(np.float64), "bfloat16 -> float64")
    assert_same_bits(back, x, "bfloat16 -> bfloat16")


def test_every_bfloat16_converts_to_float16_as_ml_dtypes(backend):
    x = every_bfloat16()
    (got,) = cast_all(backend, x, ["float16"])
    with np.errstate(over="ignore"):
        assert_same_bits(got, x.astype(np.float16), "bfloat16 -> float16")


@pytest.mark.parametrize("src", [np.float32, np.float64])
def test_floats_round_to_nearest_even_bfloat16_through_float32(backend, src):
    """float64 rounds to float32 first, as PyTorch converts (and ml_dtypes before 0.7, which
    rounds once); NaN stays NaN."""
    x = rounding_cases(src)
    (got,) = cast_all(backend, x, ["bfloat16"])
    assert_same_bits(got, through_float32(x), f"{np.dtype(src).name} -> bfloat16")


def test_every_float16_converts_to_bfloat16_as_ml_dtypes(backend):
    x = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    (got,) = cast_all(backend, x, ["bfloat16"])
    assert_same_bits(got, x.astype(BF16), "float16 -> bfloat16")


@pytest.mark.parametrize("src", INTS + ["bool"])
def test_integers_convert_to_bfloat16_through_float32(backend, src):
    """Integers round to float32 first: 2**24 + 2**16 + 1 gives 2**24, not 2**24 + 2**17."""
    if src == "bool":
        x = np.array([True, False, True])
    else:
        info = np.iinfo(src)
        rng = np.random.default_rng(11)
        special = [0, 1, 2**24 + 2**16 + 1, 2**60 + 2**52 + 2**36 + 1, 255, 256, 257, 32767, 65535, 2**31 - 1,
                   2**32 - 1, 2**63 - 1, -1, -129, int(info.min), int(info.max)]
        values = [v for v in special if info.min <= v <= info.max]
        x = np.concatenate([np.array(values, dtype=src),
                            rng.integers(info.min, info.max, 5000, endpoint=True, dtype=src)])
    (got,) = cast_all(backend, x, ["bfloat16"])
    assert_same_bits(got, through_float32(x), f"{src} -> bfloat16")


def test_bfloat16_to_integers_saturates_and_nan_gives_zero(backend):
    x = every_bfloat16()
    got = cast_all(backend, x, INTS + ["bool"])
    f = x.astype(np.float64)
    for dst, g in zip(INTS, got):
        lo, hi = int(np.iinfo(dst).min), int(np.iinfo(dst).max)
        # Toward zero, saturated; NaN gives 0 (int() of a float truncates exactly).
        want = [0 if np.isnan(v) else (hi if v > 0 else lo) if np.isinf(v) else min(max(int(v), lo), hi) for v in f]
        np.testing.assert_array_equal(g, np.array(want, dtype=dst), err_msg=f"bfloat16 -> {dst}")
    np.testing.assert_array_equal(got[-1], f != 0, err_msg="bfloat16 -> bool")  # NaN gives True


# -- arithmetic --------------------------------------------------------------------------------------


def test_bfloat16_arithmetic_is_the_float32_result_rounded(backend):
    rng = np.random.default_rng(5)
    a = (rng.standard_normal(5000) * 300).astype(BF16)
    c = (rng.standard_normal(5000) * 3).astype(BF16)
    a[:6] = np.array([np.nan, np.inf, -np.inf, 3e38, -0.0, 1e-40], BF16)
    c[:6] = np.array([1.0, -np.inf, 2.0, 3e38, 0.0, 1e-40], BF16)
    b = NetBuilder("bf")
    ta, tc = b.create_input(BF16, a.shape, "a"), b.create_input(BF16, c.shape, "c")
    ops = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]
    exe = cl.compile(b.build([getattr(b, op)(ta, tc) for op in ops]), target=backend)
    got = exe(a=a, c=c)
    with np.errstate(all="ignore"):
        wants = [a + c, a - c, a * c, a / c, np.maximum(a, c), np.minimum(a, c)]
    # A NaN that arithmetic makes (inf - inf) has the hardware's sign: negative on x86, positive
    # on NVIDIA GPUs (docs/SEMANTICS.md); its NaN-ness and every other bit are compared.
    for op, g, w in zip(ops, got, wants):
        assert_same_bits(g, w, op, nan_sign=False)


# -- gathers and scatters ------------------------------------------------------------------------------


def test_gathers_move_bits_and_round_the_fill_value(backend):
    x = every_bfloat16().reshape(256, 256)
    b = NetBuilder("g")
    tx = b.create_input(BF16, x.shape, "x")
    ti = b.create_input("int32", (300,), "i")
    outs = [b.take(tx, ti, axis=1, mode="fill", fill_value=0.1), b.take(tx, ti, axis=0, mode="wrap")]
    exe = cl.compile(b.build(outs), target=backend)
    idx = np.arange(-20, 280, dtype=np.int32)
    fill, wrapped = exe(x=x, i=idx)
    assert_same_bits(fill, R.take(x, idx, axis=1, mode="fill", fill_value=0.1), "take fill")
    assert fill[0, -1] == np.array(0.1, BF16)  # the bfloat16 nearest 0.1
    assert_same_bits(wrapped, R.take(x, idx, axis=0, mode="wrap"), "take wrap")


def test_bfloat16_constants_round_through_float32_as_pytorch(backend):
    """A constant, a fill value and a scalar operand of bfloat16 are the value rounded to
    float32 and then to bfloat16, as a cast rounds it and PyTorch converts it: values one
    rounding apart (``2**24 + 2**16 + 1``, ``1 + 2**-8 + 2**-30``) give PyTorch's."""
    torch = pytest.importorskip("torch")
    values = [2.0**24 + 2**16 + 1, 1 + 2.0**-8 + 2**-30, -(1 + 2.0**-8 + 2**-40), 0.1, 3.3e38, 1e-40]
    want = torch.tensor(values, dtype=torch.float64).to(torch.bfloat16).view(torch.int16).numpy().view(BF16)
    b = NetBuilder("consts")
    x, i = b.create_input(BF16, (1,), "x"), b.create_input("int32", (1,), "i")
    outs = [b.fill_constant((1,), v, "bfloat16") for v in values]
    outs += [b.take(x, i, mode="fill", fill_value=v) for v in values]
    exe = cl.compile(b.build(outs), target=backend)
    got = exe(x=np.zeros(1, BF16), i=np.array([5], np.int32))
    assert_same_bits(np.concatenate(got[:len(values)]), want, "fill_constant")
    assert_same_bits(np.concatenate(got[len(values):]), want, "fill_value")


def test_the_reference_evaluator_converts_to_bfloat16_through_float32():
    """The loop-nest evaluator (``cinnlite.ir.evaluate``), which the pass tests compare every
    pass with, converts to bfloat16 as the backends do: through float32."""
    from cinnlite.ir.evaluate import evaluate
    from cinnlite.ir.lower import lower_program

    ints = np.array([2**24 + 2**16 + 1, -(2**24 + 2**16 + 1), 2**60 + 2**52 + 2**36 + 1, 257], np.int64)
    floats = rounding_cases("float64")[::97]
    b = NetBuilder("casts")
    outs = [b.cast(b.create_input(a.dtype, a.shape, name), "bfloat16") for name, a in (("i", ints), ("f", floats))]
    got = evaluate(lower_program(b.build(outs)), {"i": ints, "f": floats})
    assert_same_bits(got[outs[0].name], through_float32(ints), "int64 -> bfloat16")
    assert_same_bits(got[outs[1].name], through_float32(floats), "float64 -> bfloat16")


def test_a_big_bfloat16_output_keeps_its_dtype(backend):
    """Outputs of a megabyte and more come from the buffer pool: still bfloat16 arrays."""
    x = (np.arange(1 << 20) % 1000).astype(BF16)
    b = NetBuilder("big")
    tx = b.create_input(BF16, x.shape, "x")
    ti = b.create_input("int64", x.shape, "i")
    exe = cl.compile(b.build([b.gather(tx, ti, axis=0)]), target=backend)
    idx = np.arange(x.size, dtype=np.int64)[::-1].copy()
    for _ in range(2):
        got = exe(x=x, i=idx)
        assert got.dtype == BF16
        assert_same_bits(got, x[::-1], "gather")


TORCH_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def _torch_scatter_reduce(x, idx, src, reduce, include_self):
    torch = pytest.importorskip("torch")
    t = lambda a: torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)  # noqa: E731 - exact
    out = t(x).scatter_reduce(0, torch.from_numpy(idx), t(src), reduce=TORCH_REDUCE[reduce],
                              include_self=include_self)
    return out.float().numpy().astype(BF16)


@pytest.mark.parametrize("deterministic", [False, True])
def test_scatter_reductions_match_pytorch(backend, deterministic):
    """add and mul accumulate in float32 and round once (as PyTorch's CPU scatter_reduce), max and
    min are exact; with and without x. Values whose sums and products round, with duplicates."""
    if deterministic and backend == "cpu":
        pytest.skip("the CPU is deterministic anyway")
    rng = np.random.default_rng(17)
    b = NetBuilder("sr")
    tx = b.create_input(BF16, (4, 3), "x")
    ts = b.create_input(BF16, (12, 3), "s")
    ti = b.create_input("int64", (12, 3), "i")
    forms = [(r, inc) for r in TORCH_REDUCE for inc in (True, False)]
    outs = [b.scatter(tx, ti, ts, reduce=r, include_self=inc) for r, inc in forms]
    outs.append(b.scatter(tx, ti, ts, reduce="mean"))
    exe = cl.compile(b.build(outs), target=backend, deterministic=deterministic)
    for trial in range(20):
        x = (rng.standard_normal((4, 3)) * 10).astype(BF16)
        s = (rng.standard_normal((12, 3)) * (1.5 if trial % 2 else 10)).astype(BF16)
        i = rng.integers(0, 4, (12, 3))
        if not deterministic and backend != "cpu":
            # The GPU's atomics combine in any order: quarters and powers of two, whose float32
            # sums and products are exact, and no -0.0 (whether min(0.0, -0.0) is -0.0 depends
            # on the order too).
            x = (np.round(x.astype(np.float32) * 4) / 4 + np.float32(0)).astype(BF16)
            s = rng.choice(np.array([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0]), (12, 3)).astype(BF16)
        got = exe(x=x, s=s, i=i)
        for (r, inc), g in zip(forms, got):
            assert_same_bits(g, _torch_scatter_reduce(x, i, s, r, inc), f"scatter {r} include_self={inc}")
        assert_same_bits(got[-1], R.scatter(x, i, s, reduce="mean"), "scatter mean")


def test_mean_and_add_sum_in_float32(backend):
    """4096 ones into an element holding 1: a bfloat16 sum would stop at 256."""
    n = 4096
    b = NetBuilder("wide")
    tx = b.create_input(BF16, (2,), "x")
    ti = b.create_input("int32", (n,), "i")
    ts = b.create_input(BF16, (n,), "s")
    exe = cl.compile(b.build([b.scatter(tx, ti, ts, reduce="mean"), b.scatter(tx, ti, ts, reduce="add"),
                              b.scatter_nd(tx, b.reshape(ti, (n, 1)), ts, reduce="sub")]), target=backend)
    mean, add, sub = exe(x=np.ones(2, BF16), i=np.zeros(n, np.int32), s=np.ones(n, BF16))
    assert_same_bits(mean, np.ones(2, BF16), "mean")
    assert_same_bits(add, np.array([4097, 1], np.float32).astype(BF16), "add")
    assert_same_bits(sub, np.array([-4095, 1], np.float32).astype(BF16), "sub")
