"""Blocks of checked indices run without their guards where every index of the block is a
plain position (``schedule_cpu.version_checked_loops``): results, reported errors and the IR
shape, on every index dtype, static and symbolic sizes, full and partial blocks."""
import re

import numpy as np
import pytest

import cinnlite as cl
from cinnlite.ir.evaluate import evaluate
from cinnlite.ir.loopnest import Binary, Buffer, Cmp, Const, Every, Load, Var
from cinnlite.ir.transform import stmt_exprs, walk_expr, walk_stmt
from cinnlite.ir.lower import checked_bound, out_of_range
from cinnlite.ir.symbolic import symbol_buffer
from cinnlite import dtypes

INDEX_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64"]


def _take(n, m, index_dtype, dtype="float32", mode="raise", symbolic=False):
    b = cl.NetBuilder("take")
    x = b.create_input(dtype, ("N",) if symbolic else (n,), "x")
    i = b.create_input(index_dtype, ("M",) if symbolic else (m,), "i")
    b.take(x, i, axis=0, mode=mode)
    return b.build()


def _gather_rows(rows, n, width, index_dtype, dtype="float32"):
    b = cl.NetBuilder("gather")
    x = b.create_input(dtype, (n, width), "x")
    i = b.create_input(index_dtype, (rows, width), "i")
    b.gather(x, i, axis=0)
    return b.build()


def _indices(rng, n, m, index_dtype):
    """Valid indices of ``index_dtype`` for an axis of ``n``: negative ones in the first few
    blocks only, where the dtype has them, so that both kinds of block run."""
    i = rng.integers(0, n, m)
    if np.dtype(index_dtype).kind == "i":
        i[: min(m, 300): 7] -= n
    return i.astype(index_dtype)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("n", [100, 128])  # an odd size, a power of two
@pytest.mark.parametrize("m", [16, 200, 1000, 4096])  # one short block, a tail, whole blocks
def test_takes_through_versioned_blocks_equal_numpy(index_dtype, n, m):
    exe = cl.compile(_take(n, m, index_dtype), cache=False, threads=1)
    rng = np.random.default_rng(n * m)
    x = rng.random(n).astype(np.float32)
    i = _indices(rng, n, m, index_dtype)
    np.testing.assert_array_equal(exe(x=x, i=i), np.take(x, i.astype(np.int64)))


@pytest.mark.parametrize("index_dtype", ["int32", "int64", "uint64"])
@pytest.mark.parametrize("n", [100, 128])
@pytest.mark.parametrize("where", [0, 255, 256, 700, 999])  # a block's first and last lanes, the tail
def test_a_bad_index_in_any_lane_is_reported_at_its_position(index_dtype, n, where):
    exe = cl.compile(_take(n, 1000, index_dtype), cache=False, threads=2)
    x = np.arange(n, dtype=np.float32)
    bad_values = [n, n + 1, np.iinfo(index_dtype).max]
    if np.dtype(index_dtype).kind == "i":
        bad_values += [-n - 1, np.iinfo(index_dtype).min]
    for bad in bad_values:
        i = (np.arange(1000) % n).astype(index_dtype)
        i[where] = bad
        with pytest.raises(cl.IndexOutOfRangeError, match=re.escape(f"index {int(bad)} at position ({where},)")):
            exe(x=x, i=i)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int64", "bool"])
@pytest.mark.parametrize("width", [61, 64])
def test_gathers_along_axis_0_equal_numpy(dtype, width):
    exe = cl.compile(_gather_rows(300, 97, width, "int64", dtype), cache=False, threads=2)
    rng = np.random.default_rng(width)
    x = (rng.random((97, width)) * 100).astype(dtype)
    i = rng.integers(0, 97, (300, width))
    i[5, 3], i[299, width - 1] = -1, -97
    np.testing.assert_array_equal(exe(x=x, i=i), np.take_along_axis(x, i % 97, axis=0))
    i[200, 7] = 97
    with pytest.raises(cl.IndexOutOfRangeError, match=re.escape("position (200, 7)")):
        exe(x=x, i=i)


@pytest.mark.parametrize("index_dtype", ["int32", "int64", "uint64"])
def test_symbolic_sizes_version_their_blocks_too(index_dtype):
    exe = cl.compile(_take(0, 0, index_dtype, symbolic=True), cache=False, threads=2)
    assert "every(" in exe.source("lowered")
    rng = np.random.default_rng(3)
    for n, m in [(5, 3), (100, 1000), (128, 4096), (1000, 70000)]:
        x = rng.random(n).astype(np.float32)
        i = _indices(rng, n, m, index_dtype)
        np.testing.assert_array_equal(exe(x=x, i=i), np.take(x, i.astype(np.int64)))
        i[m - 1] = n
        with pytest.raises(cl.IndexOutOfRangeError, match=re.escape(f"position ({m - 1},)")):
            exe(x=x, i=i)


def test_the_fast_block_reads_the_index_as_it_is():
    """The versioned block addresses ``x`` by the index itself: no select, no remainder; the
    other block keeps the flag and the guarded position."""
    text = cl.compile(_take(1000, 4096, "int64"), cache=False, threads=1).source("lowered")
    # A loop split across threads keeps 64 blocks at least: 4096 / 64.
    assert re.search(r"if every\(i0_valid in 0\.\.64: \(uint64\(i\[.*\]\) < uint64\(1000\)\)\) \{", text)
    fast = re.search(r"for i0_fast in 0\.\.64 \{\n(.*)\n", text).group(1)
    assert re.fullmatch(r"\s*take_0\[.*\] = x\[i\[\(\(i0_cblock \* 64\) \+ i0_fast\)\]\]", fast)
    assert "flag_index_error" in text and "select(" in text


@pytest.mark.parametrize("mode", ["clip", "wrap", "fill"])
def test_other_modes_have_nothing_to_version(mode):
    exe = cl.compile(_take(100, 1000, "int64", mode=mode), cache=False, threads=1)
    assert "every(" not in exe.source("lowered")
    x = np.arange(100, dtype=np.float32)
    i = np.arange(-300, 700, dtype=np.int64)
    expected = {"clip": np.take(x, i, mode="clip"), "wrap": np.take(x, i, mode="wrap"),
                "fill": np.where((i >= -100) & (i < 100), np.take(x, i, mode="wrap"), 0)}[mode]
    np.testing.assert_array_equal(exe(x=x, i=i), expected)


def test_the_pass_keeps_what_the_ir_computes():
    """The loop nests after the pass, run by the reference evaluator, give numpy's results and
    report the bad index at its position."""
    exe = cl.compile(_take(100, 600, "int64"), cache=False, threads=1)
    assert any(isinstance(e, Every) for k in exe.lowered.kernels for st in walk_stmt(k.body)
               for top in stmt_exprs(st) for e in walk_expr(top))
    rng = np.random.default_rng(1)
    x = rng.random(100).astype(np.float32)
    i = _indices(rng, 100, 600, "int64")
    np.testing.assert_array_equal(evaluate(exe.lowered, {"x": x, "i": i})["take_0"], np.take(x, i))
    i[300] = 100
    with pytest.raises(cl.IndexOutOfRangeError, match=re.escape("position (300,)")):
        evaluate(exe.lowered, {"x": x, "i": i})


@pytest.mark.parametrize("dtype", [dtypes.int8, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint32,
                                   dtypes.uint64])
def test_checked_bound_reads_back_every_test_out_of_range_builds(dtype):
    raw = Load(Buffer("i", dtype, (10,)), (Var("v"),))
    for size in (7, 4096, Load(symbol_buffer("N"), ())):
        assert checked_bound(out_of_range(raw, size)) == (raw, size)
    # Conditions of other shapes: not a test of an index against a size.
    assert checked_bound(Cmp("lt", raw, raw)) is None
    assert checked_bound(Cmp("gt", raw, Const(7, dtype))) is None
    assert checked_bound(Cmp("ge", Binary("add", raw, raw), raw)) is None


def _scatter_add(axis, rows=64, width=61):
    b = cl.NetBuilder("scatter")
    x = b.create_input("float32", (rows, width), "x")
    i = b.create_input("int64", (300, width) if axis == 0 else (rows, 300), "i")
    u = b.create_input("float32", (300, width) if axis == 0 else (rows, 300), "u")
    b.scatter(x, i, u, axis=axis, reduce="add")
    return b.build()


def test_which_loops_are_versioned():
    """Element gathers and scalar scatters are; a collapsed loop's divided column, a scatter
    whose updates vectorise and blocks of row copies keep their tests as they were."""
    def versioned(program):
        return "every(" in cl.compile(program, cache=False, threads=1).source("lowered")
    b = cl.NetBuilder("middle")
    x = b.create_input("float32", (4, 9, 13), "x")
    b.gather(x, b.create_input("int64", (4, 23, 13), "i"), axis=1)
    assert not versioned(b.build())
    b = cl.NetBuilder("rows")
    b.take(b.create_input("float32", (100, 64), "x"), b.create_input("int64", (4096,), "i"), axis=0)
    assert not versioned(b.build())
    assert not versioned(_scatter_add(0))
    assert versioned(_scatter_add(1))
    assert versioned(_take(100, 1000, "int64"))


def test_a_scalar_scatter_through_versioned_blocks_equals_numpy():
    exe = cl.compile(_scatter_add(1), cache=False, threads=2)
    rng = np.random.default_rng(9)
    x, u = rng.random((64, 61)).astype(np.float32), rng.random((64, 300)).astype(np.float32)
    i = rng.integers(0, 61, (64, 300))
    i[3, 5], i[63, 299] = -1, -61
    expected = x.copy()
    np.add.at(expected, (np.arange(64)[:, None].repeat(300, 1), i % 61), u)
    np.testing.assert_allclose(exe(x=x, i=i, u=u), expected, rtol=1e-5)
    i[40, 256] = 61
    with pytest.raises(cl.IndexOutOfRangeError, match=re.escape("position (40, 256)")):
        exe(x=x, i=i, u=u)
