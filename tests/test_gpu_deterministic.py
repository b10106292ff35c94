"""Deterministic float and complex scatter reductions on the GPU (``deterministic=True``).

An update nest whose ordered plan would run long serial chains runs *sorted*
(``schedule_gpu.sort_update_nests``): a radix sort of the update positions by target, then one
thread per target combining its updates in row-major order. The results must be the CPU's, bit
for bit, whatever grid the launches run on; the tests below check that through the host
emulation ("cuda-emu"; ``max_blocks`` bounds the grid so that grid-stride loops take several
turns), check that the plan really is the sorted one, and that NVRTC compiles it.
"""
from __future__ import annotations

import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder
from cinnlite.backends.gpu import GPU_PIPELINE, GPU_PIPELINE_DETERMINISTIC
from cinnlite.ir.evaluate import evaluate
from cinnlite.ir.loopnest import Reduce
from cinnlite.ir.lower import lower_program
from cinnlite.ir.passes import run_pipeline
from cinnlite.ir.schedule_gpu import grid_chain
from cinnlite.ir.transform import top_level, walk_stmt
from cinnlite.runtime import nvrtc

from backends import assert_deterministic_cpu_bits

GRIDS = [None, 1, 3, 0]  # blocks of 256 threads; 0: a thread per item; None: the default


def gpu_kernels(program, deterministic=True):
    return run_pipeline(lower_program(program), GPU_PIPELINE_DETERMINISTIC if deterministic else GPU_PIPELINE).kernels


def assert_cpu_bits(program, feeds, grids=GRIDS):
    return assert_deterministic_cpu_bits(program, feeds, grids)


def values(rng, dtype, shape, reduce):
    """Update data whose combination rounds (sums of normals; products of numbers near 1)."""
    if np.dtype(dtype).kind == "c":
        part = np.float32 if dtype == "complex64" else np.float64
        return (values(rng, part, shape, reduce) + 1j * values(rng, part, shape, reduce)).astype(dtype)
    if reduce == "mul":
        return rng.uniform(0.8, 1.25, shape).astype(dtype)
    return (rng.standard_normal(shape) * 3).astype(dtype)


# -- the programs ---------------------------------------------------------------------------------


def layouts_program(dtype, reduce, mode="wrap"):
    """Scatters along axes 0, 1 and the last, a 1-D scatter, rows of scatter_nd (index_add) and a
    1-D scatter_nd: every update nest serial-heavy (long chains) in its ordered plan. ``reduce``
    may be a tuple: the six scatters for each."""
    reduces = reduce if isinstance(reduce, tuple) else (reduce,)
    b = NetBuilder(f"layouts_{'_'.join(reduces)}")
    x0 = b.create_input(dtype, (9, 6), "x0")
    i0 = b.create_input("int64", (200, 6), "i0")
    u0 = b.create_input(dtype, (200, 6), "u0")
    x1 = b.create_input(dtype, (6, 9), "x1")
    i1 = b.create_input("int32", (6, 200), "i1")
    u1 = b.create_input(dtype, (6, 200), "u1")
    x2 = b.create_input(dtype, (2, 3, 9), "x2")
    i2 = b.create_input("int64", (2, 3, 150), "i2")
    u2 = b.create_input(dtype, (2, 3, 150), "u2")
    x3 = b.create_input(dtype, (11,), "x3")
    i3 = b.create_input("int64", (400,), "i3")
    u3 = b.create_input(dtype, (400,), "u3")
    x4 = b.create_input(dtype, (13, 8), "x4")
    t4 = b.create_input("int64", (300, 1), "t4")
    v4 = b.create_input(dtype, (300, 8), "v4")
    x5 = b.create_input(dtype, (40,), "x5")
    t5 = b.create_input("int32", (500, 1), "t5")
    v5 = b.create_input(dtype, (500,), "v5")
    outs = []
    for r in reduces:
        outs += [b.scatter(x0, i0, u0, axis=0, reduce=r, mode=mode),
                 b.scatter(x1, i1, u1, axis=1, reduce=r, mode=mode),
                 b.scatter(x2, i2, u2, axis=-1, reduce=r, mode=mode),
                 b.scatter(x3, i3, u3, axis=0, reduce=r, mode=mode),
                 b.scatter_nd(x4, t4, v4, reduce=r, mode=mode),
                 b.scatter_nd(x5, t5, v5, reduce=r, mode=mode)]
    return b.build(outs)


def layouts_feeds(dtype, reduce, seed=0, spread=2):
    """Indices from ``-spread * size`` to ``spread * size``: in and out of range, duplicates."""
    rng = np.random.default_rng(seed)

    def ix(size, shape, dt="int64"):
        return rng.integers(-spread * size, spread * size, shape).astype(dt)

    f = dict(x0=values(rng, dtype, (9, 6), reduce), i0=ix(9, (200, 6)), u0=values(rng, dtype, (200, 6), reduce),
             x1=values(rng, dtype, (6, 9), reduce), i1=ix(9, (6, 200), "int32"),
             u1=values(rng, dtype, (6, 200), reduce),
             x2=values(rng, dtype, (2, 3, 9), reduce), i2=ix(9, (2, 3, 150)),
             u2=values(rng, dtype, (2, 3, 150), reduce),
             x3=values(rng, dtype, (11,), reduce), i3=ix(11, (400,)), u3=values(rng, dtype, (400,), reduce),
             x4=values(rng, dtype, (13, 8), reduce), t4=ix(13, (300, 1)), v4=values(rng, dtype, (300, 8), reduce),
             x5=values(rng, dtype, (40,), reduce), t5=ix(40, (500, 1), "int32"), v5=values(rng, dtype, (500,), reduce))
    return f


def one_d_program(dtype, n, size, reduce="add", mode="wrap"):
    b = NetBuilder("one_d")
    x = b.create_input(dtype, (size,), "x")
    t = b.create_input("int64", (n, 1), "t")
    v = b.create_input(dtype, (n,), "v")
    b.scatter_nd(x, t, v, reduce=reduce, mode=mode)
    return b.build()


def one_d_feeds(dtype, n, size, index, seed=0):
    rng = np.random.default_rng(seed)
    return dict(x=values(rng, dtype, (size,), "add"), t=np.asarray(index, np.int64).reshape(n, 1),
                v=values(rng, dtype, (n,), "add"))


# -- bit for bit with the CPU ---------------------------------------------------------------------


@pytest.mark.parametrize("reduce", ["add", "mul"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_every_layout_matches_the_cpu_bit_for_bit(dtype, reduce):
    assert_cpu_bits(layouts_program(dtype, reduce), layouts_feeds(dtype, reduce))


@pytest.mark.parametrize("reduce", ["add", "mul"])
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
def test_complex_reductions_match_the_cpu_bit_for_bit(dtype, reduce):
    exe = assert_cpu_bits(layouts_program(dtype, reduce), layouts_feeds(dtype, reduce, seed=4))
    assert "cl_atomic_add_c" not in exe.source("cuda")


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_float_max_and_min_keep_the_cpu_signed_zeros_and_nans(reduce):
    # max(+0, -0) is -0 and max(-0, +0) is +0: the result depends on the order, so float max
    # and min are ordered (or sorted) too.
    rng = np.random.default_rng(5)
    n, size = 600, 17
    choices = np.array([0.0, -0.0, 0.0, -0.0, 1.0, -1.0, np.nan], np.float32)
    prog = one_d_program("float32", n, size, reduce)
    feeds = dict(x=rng.choice(choices, size), t=rng.integers(0, size, (n, 1)), v=rng.choice(choices, n))
    assert_cpu_bits(prog, feeds)


@pytest.mark.parametrize("mode", ["clip", "wrap", "fill", "raise"])
def test_every_mode_matches_the_cpu_bit_for_bit(mode):
    feeds = layouts_feeds("float32", "add", seed=1, spread=2 if mode != "raise" else 1)
    if mode == "raise":  # every index in range
        for name, size in (("i0", 9), ("i1", 9), ("i2", 9), ("i3", 11), ("t4", 13), ("t5", 40)):
            feeds[name] = feeds[name] % size - (feeds[name] % 2) * size  # negative ones count from the end
    assert_cpu_bits(layouts_program("float32", "add", mode), feeds)


def test_a_bad_index_raises_what_the_cpu_raises():
    prog = one_d_program("float32", 700, 30, mode="raise")
    index = np.arange(700) % 30
    index[[123, 456]] = [30, -31]
    feeds = one_d_feeds("float32", 700, 30, index)
    exe = cl.compile(prog, target="cuda-emu", deterministic=True)
    with pytest.raises(cl.IndexOutOfRangeError) as want:
        cl.compile(prog, target="cpu").run(feeds)
    for blocks in GRIDS:
        exe.max_blocks = blocks
        with pytest.raises(cl.IndexOutOfRangeError) as got:
            exe.run(feeds)
        assert str(got.value) == str(want.value)


@pytest.mark.parametrize("index", ["one_target", "permutation", "runs"])
def test_duplicates_from_none_to_all_on_one_target(index):
    n = 3000
    rng = np.random.default_rng(6)
    indices = {"one_target": np.full(n, 17), "permutation": rng.permutation(n),
               "runs": np.repeat(rng.permutation(100), 30)}[index]
    size = n if index == "permutation" else 100
    assert_cpu_bits(one_d_program("float32", n, size), one_d_feeds("float32", n, size, indices))


def test_heavy_duplicates_in_a_scatter_along_axis_0():
    b = NetBuilder("heavy")
    x = b.create_input("float16", (4, 3), "x")
    i = b.create_input("int64", (500, 3), "i")
    u = b.create_input("float16", (500, 3), "u")
    prog = b.build([b.scatter(x, i, u, axis=0, reduce="add")])
    rng = np.random.default_rng(7)
    assert_cpu_bits(prog, dict(x=values(rng, "float16", (4, 3), "add"), i=np.zeros((500, 3), np.int64),
                               u=values(rng, "float16", (500, 3), "add")))


def test_empty_updates_leave_x():
    prog = one_d_program("float32", 0, 5)
    feeds = one_d_feeds("float32", 0, 5, np.zeros(0, np.int64))
    exe = assert_cpu_bits(prog, feeds)
    assert exe.run(feeds)[prog.outputs[0].name].tobytes() == feeds["x"].tobytes()


@pytest.mark.parametrize("reduce", ["mean", "sub"])
def test_mean_and_sub_match_the_cpu_bit_for_bit(reduce):
    b = NetBuilder(reduce)
    x = b.create_input("float32", (13, 8), "x")
    t = b.create_input("int64", (300, 1), "t")
    v = b.create_input("float32", (300, 8), "v")
    outs = [b.scatter_nd(x, t, v, reduce=reduce, mode="wrap")]
    if reduce == "mean":
        y = b.create_input("float16", (9, 6), "y")
        i = b.create_input("int64", (200, 6), "i")
        u = b.create_input("float16", (200, 6), "u")
        outs.append(b.scatter(y, i, u, axis=0, reduce=reduce, mode="wrap"))
    rng = np.random.default_rng(8)
    feeds = dict(x=values(rng, "float32", (13, 8), "add"), t=rng.integers(-13, 13, (300, 1)),
                 v=values(rng, "float32", (300, 8), "add"))
    if reduce == "mean":
        feeds.update(y=values(rng, "float16", (9, 6), "add"), i=rng.integers(-9, 9, (200, 6)),
                     u=values(rng, "float16", (200, 6), "add"))
    assert_cpu_bits(b.build(outs), feeds)


@pytest.mark.parametrize("reduce", ["add", "mul", "max"])
def test_bfloat16_and_include_self_false_match_the_cpu(reduce):
    b = NetBuilder("bf16")
    x = b.create_input("bfloat16", (9, 6), "x")
    i = b.create_input("int64", (200, 6), "i")
    u = b.create_input("bfloat16", (200, 6), "u")
    y = b.create_input("float32", (40,), "y")
    t = b.create_input("int64", (500,), "t")
    v = b.create_input("float32", (500,), "v")
    prog = b.build([b.scatter(x, i, u, axis=0, reduce=reduce, mode="clip"),
                    b.scatter(y, t, v, axis=0, reduce=reduce, mode="fill", include_self=False)])
    rng = np.random.default_rng(9)
    feeds = dict(x=values(rng, "float32", (9, 6), reduce).astype(cl.as_dtype("bfloat16").np),
                 i=rng.integers(-12, 12, (200, 6)),
                 u=values(rng, "float32", (200, 6), reduce).astype(cl.as_dtype("bfloat16").np),
                 y=values(rng, "float32", (40,), reduce), t=rng.integers(-60, 60, 500),
                 v=values(rng, "float32", (500,), reduce))
    assert_cpu_bits(prog, feeds)


@pytest.mark.parametrize("size", [200, 1000, 70000])  # keys of 8, 10 and 17 bits: 1, 2 and 3 radix passes
def test_one_two_and_three_radix_passes(size):
    n = 2000
    rng = np.random.default_rng(10)
    index = rng.integers(0, size, n)
    index[: n // 2] = rng.integers(0, 20, n // 2)  # many duplicates among the large keys
    assert_cpu_bits(one_d_program("float32", n, size), one_d_feeds("float32", n, size, rng.permutation(index)),
                    grids=[None, 3])


# -- symbolic sizes -------------------------------------------------------------------------------


def symbolic_program():
    b = NetBuilder("sym")
    x = b.create_input("float32", ("N", 3), "x")
    i = b.create_input("int64", ("E", 3), "i")
    u = b.create_input("float32", ("E", 3), "u")
    y = b.create_input("float64", ("N", 4), "y")
    t = b.create_input("int32", ("E", 1), "t")
    v = b.create_input("float64", ("E", 4), "v")
    return b.build([b.scatter(x, i, u, axis=0, reduce="add", mode="wrap"),
                    b.scatter_nd(y, t, v, reduce="mul", mode="clip")])


def symbolic_feeds(e, n):
    rng = np.random.default_rng(e + n)
    return dict(x=values(rng, "float32", (n, 3), "add"), i=rng.integers(-2 * n, 2 * n, (e, 3)),
                u=values(rng, "float32", (e, 3), "add"), y=values(rng, "float64", (n, 4), "mul"),
                t=rng.integers(-n, n + 3, (e, 1)).astype(np.int32), v=values(rng, "float64", (e, 4), "mul"))


def test_symbolic_sizes_match_the_cpu_bit_for_bit():
    prog = symbolic_program()
    cpu = cl.compile(prog, target="cpu", cache=False)
    gpu = cl.compile(prog, target="cuda-emu", cache=False, deterministic=True)
    # N * 3 below 2**8, past 2**8 and past 2**16: one, two and three radix passes run
    for e, n in [(1, 1), (300, 7), (400, 97), (700, 22000)]:
        f = symbolic_feeds(e, n)
        want = cpu.run(f)
        for blocks in (None, 2):
            gpu.max_blocks = blocks
            got = gpu.run(f)
            for name in want:
                assert got[name].tobytes() == want[name].tobytes(), f"{name} E={e} N={n} blocks={blocks}"


def test_symbolic_scratch_is_sized_by_the_call():
    scatter, _ = gpu_kernels(symbolic_program())
    keys = [b for b in scatter.temps if "__keys" in b.name]
    assert len(keys) == 2 and all(b.dtype.name == "int64" and not b.is_static for b in keys)
    # the radix passes cover 40 bits of key; those a call does not need do nothing
    assert len(top_level(scatter.body)) == 1 + 2 + 3 * 5 + 1


# -- the plan -------------------------------------------------------------------------------------


def update_launches(kernel):
    """The launches after the copy of x."""
    return top_level(kernel.body)[1:]


def extents(launch):
    return [l.extent.value for l in grid_chain(launch)[0]]


@pytest.mark.parametrize("size, passes, bits", [(35, 1, 6), (1000, 2, 5), (70000, 3, 6)])
def test_long_chains_are_sorted_in_parallel_launches(size, passes, bits):
    (kernel,) = gpu_kernels(one_d_program("float32", 5000, size))
    launches = update_launches(kernel)
    assert len(launches) == 3 * passes + 3  # zero, keys, 3 per pass, reduce
    assert extents(launches[1]) == [5000]  # keys: a thread per update (the ordered plan had a single one)
    assert all(extents(l) != [1] for l in launches)
    radix = 2**bits
    digits = next(b for b in kernel.temps if b.name.endswith("__digits"))
    assert digits.shape == (-(-5000 // max(radix, 32)), radix)
    # no float atomics: the only Reduces count digits
    reduces = [s for s in walk_stmt(kernel.body) if isinstance(s, Reduce)]
    assert reduces and all(r.buffer.dtype.name == "int32" for r in reduces)
    assert all(b.dtype.name == "int32" for b in kernel.temps)
    src = cl.compile(one_d_program("float32", 5000, size), target="cuda-emu", deterministic=True).source("cuda")
    assert "cl_atomic_add_f32" not in src and "deterministic reductions" in src


def test_rows_of_index_add_sort_rows_and_reduce_every_column_in_parallel():
    b = NetBuilder("index_add")
    x = b.create_input("float32", (100, 64), "x")
    t = b.create_input("int64", (3000, 1), "t")
    v = b.create_input("float32", (3000, 64), "v")
    b.scatter_nd(x, t, v, reduce="add", mode="clip")
    (kernel,) = gpu_kernels(b.build())
    launches = update_launches(kernel)
    assert len(launches) == 3 * 1 + 3
    keys = next(b for b in kernel.temps if b.name.endswith("__keys"))
    assert keys.shape == (3000,)  # one key per row, not per element
    assert extents(launches[1]) == [3000]
    assert extents(launches[-1]) == [3000, 64]  # the first row of each run, every column


def test_short_chains_stay_ordered_and_integers_atomic():
    (kernel,) = gpu_kernels(one_d_program("float32", 10, 35))
    (launch,) = update_launches(kernel)
    assert extents(launch) == [1] and not any(isinstance(s, Reduce) for s in walk_stmt(launch))
    (kernel,) = gpu_kernels(one_d_program("int32", 5000, 35))
    assert len(update_launches(kernel)) == 1
    assert any(isinstance(s, Reduce) and s.combine == "add" for s in walk_stmt(kernel.body))


def test_without_deterministic_float_reductions_stay_atomic():
    (kernel,) = gpu_kernels(one_d_program("float32", 5000, 35), deterministic=False)
    (launch,) = update_launches(kernel)
    assert extents(launch) == [5000] and not kernel.temps
    assert any(isinstance(s, Reduce) and s.combine == "add" for s in walk_stmt(launch))


def test_a_huge_output_gets_int64_keys_and_five_passes():
    b = NetBuilder("huge")
    x = b.create_input("float32", (2**32,), "x")
    t = b.create_input("int64", (1000, 1), "t")
    v = b.create_input("float32", (1000,), "v")
    b.scatter_nd(x, t, v, reduce="add", mode="wrap")
    (kernel,) = gpu_kernels(b.build())
    keys = [t for t in kernel.temps if "__keys" in t.name]
    pos = [t for t in kernel.temps if "__pos" in t.name]
    assert [k.dtype.name for k in keys] == ["int64"] * 2 and [p.dtype.name for p in pos] == ["int32"] * 2
    assert len(update_launches(kernel)) == 3 * 5 + 3  # 33 bits: 5 passes of 7


def test_the_loop_nests_compute_the_cpu_results_in_the_reference_evaluator():
    # Every scratch element is written before it is read, and every access is in bounds.
    for prog, feeds in [(one_d_program("float32", 600, 1000, mode="fill"),
                         one_d_feeds("float32", 600, 1000, np.arange(600) * 7 % 1300 - 150)),
                        (layouts_program("float64", "mul", "clip"), layouts_feeds("float64", "mul", seed=2))]:
        lowered = run_pipeline(lower_program(prog), GPU_PIPELINE_DETERMINISTIC)
        got = evaluate(lowered, feeds, on_error="record")
        want = cl.compile(prog, target="cpu").run(feeds)
        for out in prog.outputs:
            assert got[out.name].tobytes() == want[out.name].tobytes()


# -- NVRTC ----------------------------------------------------------------------------------------


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC (the optional extra `cuda`) is not installed")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "complex64", "complex128"])
def test_nvrtc_compiles_the_sorted_plan(dtype):
    from test_cuda_nvrtc import assert_compiles

    reduces = ("add", "mul", "mean") + (() if dtype.startswith("complex") else ("max", "min"))
    exe = cl.compile(layouts_program(dtype, reduces, "fill"), target="cuda", deterministic=True)
    assert "__digits" in exe.source("cuda")
    assert_compiles(exe)


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC (the optional extra `cuda`) is not installed")
def test_nvrtc_compiles_the_symbolic_sorted_plan():
    from test_cuda_nvrtc import assert_compiles

    exe = cl.compile(symbolic_program(), target="cuda", cache=False, deterministic=True)
    assert "__digits" in exe.source("cuda")
    assert_compiles(exe)
