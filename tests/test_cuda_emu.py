"""The CUDA backend run through the host emulation (``target="cuda-emu"``), and what the real GPU
runtime does on a machine without a GPU.

The numerical test matrix (test_ops_numeric.py and friends) runs on "cuda-emu" through the
``backend`` fixture; the tests here cover what is particular to the CUDA backend: deterministic
reductions, grids smaller than the work (grid-stride loops), float16 conversions in software,
the error buffer of ``mode="raise"`` and the errors of missing tools.
"""
from __future__ import annotations

import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder
from cinnlite.errors import CompileError, IndexOutOfRangeError, TargetUnavailableError
from cinnlite.runtime import cuda as cuda_runtime
from cinnlite.runtime import cuda_emu

from backends import assert_deterministic_cpu_bits


GRIDS = [1, 3, 16, 0, None]  # blocks of 256 threads; 0: a thread per item; None: the default


def reduction_program(dtype, reduce, xshape=(7, 5), ishape=(300, 5)):
    b = NetBuilder("red")
    x = b.create_input(dtype, xshape, "x")
    i = b.create_input("int64", ishape, "i")
    u = b.create_input(dtype, ishape, "u")
    t = b.create_input("int32", (ishape[0], 1), "t")
    v = b.create_input(dtype, (ishape[0],), "v")
    outs = [b.scatter(x, i, u, axis=0, reduce=reduce, mode="wrap"),
            b.scatter_nd(b.reshape(x, (xshape[0] * xshape[1],)), t, v, reduce=reduce, mode="wrap")]
    return b.build(outs)


def reduction_inputs(dtype, seed=0, xshape=(7, 5), ishape=(300, 5)):
    rng = np.random.default_rng(seed)
    values = lambda shape: (rng.standard_normal(shape) * 3).astype(dtype)  # noqa: E731 (sums round)
    return dict(x=values(xshape), i=rng.integers(-9, 9, ishape), u=values(ishape),
                t=rng.integers(-40, 40, (ishape[0], 1)).astype(np.int32), v=values((ishape[0],)))


# -- deterministic=True ---------------------------------------------------------------------------


@pytest.mark.parametrize("reduce", ["add", "mul", "max", "min", "mean"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_deterministic_reductions_are_bit_identical_and_match_the_cpu(dtype, reduce):
    # Bit for bit: the order of the combinations is the CPU's row-major order.
    assert_deterministic_cpu_bits(reduction_program(dtype, reduce), reduction_inputs(dtype), GRIDS)


def test_atomic_float_sums_depend_on_the_order_and_stay_close():
    prog = reduction_program("float32", "add", ishape=(3000, 5))
    feeds = reduction_inputs("float32", seed=3, ishape=(3000, 5))
    want = cl.compile(prog, target="cpu").run(feeds)
    exe = cl.compile(prog, target="cuda-emu")
    same_bits = []
    for blocks in GRIDS:
        exe.max_blocks = blocks
        got = exe.run(feeds)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-3)
            same_bits.append(got[name].tobytes() == want[name].tobytes())
    # With one block, thread t adds items t, t + 256, ...: not row-major, so the rounding differs
    # (this is what deterministic=True is for).
    assert not all(same_bits)


# -- grid-stride loops: grids far smaller than the work --------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "int8", "float16", "bool"])
def test_results_do_not_depend_on_the_grid(dtype):
    rng = np.random.default_rng(1)
    b = NetBuilder("grid")
    x = b.create_input(dtype, (40, 33), "x")
    i = b.create_input("int32", (200, 33), "i")
    u = b.create_input(dtype, (200, 33), "u")
    outs = [b.gather(x, i, axis=0, mode="wrap"),
            b.scatter(x, i, u, axis=0, mode="wrap"),                  # many duplicates: last write wins
            b.take(x, i, axis=0, mode="fill", fill_value=1)]
    if dtype != "bool":
        outs += [b.scatter(x, i, u, axis=0, reduce=r, mode="clip") for r in ("max", "min")]
    prog = b.build(outs)
    data = lambda shape: (rng.integers(0, 2, shape).astype(bool) if dtype == "bool"  # noqa: E731
                          else rng.integers(-100, 100, shape).astype(dtype))
    feeds = dict(x=data((40, 33)), i=rng.integers(-60, 60, (200, 33)).astype(np.int32), u=data((200, 33)))
    want = cl.compile(prog, target="cpu").run(feeds)
    exe = cl.compile(prog, target="cuda-emu")
    for blocks in GRIDS:
        exe.max_blocks = blocks
        got = exe.run(feeds)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name} with {blocks} blocks", strict=True)


def test_big_launches_run_on_one_thread_by_default_with_the_same_results():
    # Past 2**22 work items the default grid is one thread; a bounded and a full grid agree.
    rng = np.random.default_rng(2)
    n = 2**22 + 7
    b = NetBuilder("big")
    x = b.create_input("float32", (n,), "x")
    i = b.create_input("int64", (n,), "i")
    outs = [b.take(x, i, mode="wrap"), b.scatter(x, i, x, axis=0, mode="wrap"),
            b.scatter(x, i, x, axis=0, reduce="max", mode="wrap")]
    exe = cl.compile(b.build(outs), target="cuda-emu")
    feeds = dict(x=rng.standard_normal(n).astype(np.float32), i=rng.integers(-2 * n, 2 * n, n))
    results = []
    for blocks in (None, 64, 0):
        exe.max_blocks = blocks
        results.append(exe.run(feeds))
    want = cl.compile(b.build(outs), target="cpu").run(feeds)
    for got in results:
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_last_write_wins_when_every_update_hits_one_element():
    b = NetBuilder("one")
    x = b.create_input("float32", (3,), "x")
    i = b.create_input("int64", (5000,), "i")
    u = b.create_input("float32", (5000,), "u")
    b.scatter(x, i, u, axis=0)
    exe = cl.compile(b.build(), target="cuda-emu")
    u_val = np.arange(5000, dtype=np.float32)
    for blocks in GRIDS:
        exe.max_blocks = blocks
        out = exe(x=np.full(3, -1, np.float32), i=np.ones(5000, np.int64), u=u_val)
        np.testing.assert_array_equal(out, [-1, 4999, -1])


# -- mode="raise": the error buffer ------------------------------------------------------------------


def test_raise_reports_the_first_bad_position_whatever_order_threads_run_in():
    b = NetBuilder("raise")
    x = b.create_input("float32", (4, 600), "x")
    i = b.create_input("int64", (3, 600), "i")
    j = b.create_input("int64", (3, 600), "j")
    g = b.gather(x, i, axis=0)
    b.gather(g, j, axis=0)
    exe = cl.compile(b.build(), target="cuda-emu")
    exe.max_blocks = 1  # thread 0 sees items 0, 256, 512, ... before thread 1 sees item 1
    idx = np.zeros((3, 600), np.int64)
    idx[0, 513] = 9
    idx[0, 2] = -5
    later = np.zeros((3, 600), np.int64)
    later[0, 0] = 7   # the second gather fails too, but the first one runs first
    with pytest.raises(IndexOutOfRangeError) as err:
        exe(x=np.zeros((4, 600), np.float32), i=idx, j=later)
    assert err.value.position == (0, 2) and err.value.value == -5 and err.value.input == "i"
    idx[0, 2] = 0
    with pytest.raises(IndexOutOfRangeError) as err:
        exe(x=np.zeros((4, 600), np.float32), i=idx, j=later)
    assert err.value.position == (0, 513) and err.value.value == 9
    idx[0, 513] = 0
    with pytest.raises(IndexOutOfRangeError) as err:
        exe(x=np.zeros((4, 600), np.float32), i=idx, j=later)
    assert err.value.input == "j" and err.value.position == (0, 0)


# -- float16 in software -----------------------------------------------------------------------------


def cast_program(src_dtype, shape, targets):
    b = NetBuilder("cast")
    x = b.create_input(src_dtype, shape, "x")
    return b.build([b.cast(x, t) for t in targets])


def assert_same_floats(got, want, label):
    assert got.dtype == want.dtype, label
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan, err_msg=label)
    # Bit for bit where not NaN: the sign of zero and every rounding count.
    np.testing.assert_array_equal(got[~nan].view(f"u{got.itemsize}"), want[~nan].view(f"u{want.itemsize}"),
                                  err_msg=label)


def test_every_float16_converts_exactly():
    halves = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    exe = cl.compile(cast_program("float16", halves.shape, ["float32", "float64"]), target="cuda-emu")
    to32, to64 = exe(x=halves)
    with np.errstate(invalid="ignore"):
        assert_same_floats(to32, halves.astype(np.float32), "float16 -> float32")
        assert_same_floats(to64, halves.astype(np.float64), "float16 -> float64")


def _rounding_cases(dtype):
    """Values around every float16 rounding boundary: each float16 value, the midpoints between
    neighbours (ties), and the floats just beside them; plus overflow, subnormals and specials."""
    halves = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    h = halves[np.isfinite(halves)].astype(np.float64)
    h = np.unique(h)
    mids = (h[:-1] + h[1:]) / 2
    base = np.concatenate([h, mids, [65504.0, 65519.99, 65520.0, 65536.0, 1e10, 2.0**-24, 2.0**-25, 2.0**-26,
                                     3 * 2.0**-26, 1e-30, 0.0, -0.0, np.inf, -np.inf, np.nan]])
    base = np.concatenate([base, -base]).astype(dtype)
    nxt = np.nextafter(base, np.array(np.inf, dtype))
    prv = np.nextafter(base, np.array(-np.inf, dtype))
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32 if dtype == np.float32 else np.uint64)
    if dtype == np.float64:
        bits = rng.integers(0, 2**63, 20000, dtype=np.uint64) | (rng.integers(0, 2, 20000, dtype=np.uint64) << 63)
    return np.concatenate([base, nxt, prv, bits.view(dtype)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_float_to_float16_rounds_to_nearest_even(dtype):
    values = _rounding_cases(dtype)
    exe = cl.compile(cast_program(np.dtype(dtype).name, values.shape, ["float16"]), target="cuda-emu")
    with np.errstate(over="ignore", invalid="ignore"):
        assert_same_floats(exe(x=values), values.astype(np.float16), f"{np.dtype(dtype).name} -> float16")


def test_float16_arithmetic_rounds_after_every_operation():
    rng = np.random.default_rng(5)
    a = (rng.standard_normal(5000) * 300).astype(np.float16)
    c = (rng.standard_normal(5000) * 3).astype(np.float16)
    b = NetBuilder("h")
    ta, tc = b.create_input("float16", a.shape, "a"), b.create_input("float16", c.shape, "c")
    ops = ["add", "subtract", "multiply", "divide", "maximum", "minimum"]
    exe = cl.compile(b.build([getattr(b, op)(ta, tc) for op in ops]), target="cuda-emu")
    got = exe(a=a, c=c)
    with np.errstate(all="ignore"):
        wants = [a + c, a - c, a * c, a / c, np.maximum(a, c), np.minimum(a, c)]
    for op, g, w in zip(ops, got, wants):
        assert_same_floats(g, w, op)


def test_float_to_int_casts_saturate_like_the_cpu():
    values = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 2.0**63, -2.0**63, 2.0**31, -2.0**31 - 1, 255.9,
                       256.0, -0.9, -1.5, 127.5, -128.5, 32767.9, -32769.0, 3.7, -3.7, 0.0, -0.0], np.float64)
    targets = ["int8", "int16", "int32", "int64", "uint8", "bool"]
    for src in ("float64", "float32", "float16"):
        with np.errstate(over="ignore"):
            x = values.astype(src)
        prog = cast_program(src, x.shape, targets)
        want = cl.compile(prog, target="cpu")(x=x)
        got = cl.compile(prog, target="cuda-emu")(x=x)
        for t, g, w in zip(targets, got, want):
            np.testing.assert_array_equal(g, w, err_msg=f"{src} -> {t}", strict=True)


# -- tools and their errors ---------------------------------------------------------------------------


def small_program(name="small"):
    b = NetBuilder(name)
    x = b.create_input("float32", (4,), "x")
    i = b.create_input("int64", (2,), "i")
    b.take(x, i)
    return b.build()


def test_compiled_kernels_are_cached_by_content(monkeypatch, tmp_path):
    monkeypatch.setenv("CINNLITE_CACHE_DIR", str(tmp_path))
    a = cl.compile(small_program(), target="cuda-emu")
    b = cl.compile(small_program(), target="cuda-emu")
    assert a._library_path == b._library_path and a._library_path.parent == tmp_path / "cuda-emu"
    assert cl.compile(small_program("other"), target="cuda-emu")._library_path != a._library_path
    np.testing.assert_array_equal(b(x=np.arange(4, dtype=np.float32), i=np.array([3, -4])), [3, 0])


def test_a_missing_host_compiler_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("CINNLITE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.raises(TargetUnavailableError, match=r"\$CXX is '/nonexistent/c\+\+', which was not found"):
        cl.compile(small_program(), target="cuda-emu")
    monkeypatch.delenv("CXX")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(TargetUnavailableError, match="needs a host C\\+\\+ compiler"):
        cl.compile(small_program(), target="cuda-emu")


def test_code_the_host_compiler_rejects_is_a_compile_error(tmp_path, monkeypatch):
    monkeypatch.setenv("CINNLITE_CACHE_DIR", str(tmp_path))
    with pytest.raises(CompileError, match="host C\\+\\+ compiler rejected"):
        cuda_emu.build_library("this is not C++")


def test_running_target_cuda_without_a_gpu_says_so():
    if cuda_runtime.gpu_available():
        pytest.skip("a GPU is present: target='cuda' runs")
    exe = cl.compile(small_program(), target="cuda")
    assert "__global__" in exe.source("cuda")  # compiling needs no GPU
    with pytest.raises(TargetUnavailableError, match="target 'cuda' cannot run.*cuda-emu"):
        exe(x=np.zeros(4, np.float32), i=np.zeros(2, np.int64))
    # Bad inputs are still reported as such first.
    with pytest.raises(cl.InputError):
        exe(x=np.zeros(4, np.float32))


@pytest.mark.gpu
def test_the_gpu_agrees_with_the_emulation():
    if not cuda_runtime.gpu_available():
        pytest.skip("no CUDA GPU here")
    for dtype, reduce in [("float32", "add"), ("float16", "max"), ("int8", "mul"), ("float64", "mean")]:
        prog = reduction_program(dtype, reduce)
        feeds = reduction_inputs(dtype)
        emu = cl.compile(prog, target="cuda-emu", deterministic=True).run(feeds)
        gpu = cl.compile(prog, target="cuda", deterministic=True)
        for _ in range(3):
            got = gpu.run(feeds)
            for name in emu:
                assert got[name].tobytes() == emu[name].tobytes(), f"{dtype} {reduce} {name}"
    times = gpu.time_kernels(feeds, repeat=3)
    assert len(times) == 3 and all(t > 0 for t in times)
