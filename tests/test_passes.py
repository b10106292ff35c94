"""The loop-nest passes as IR: what each does to a kernel, checked on the text and the nodes,
plus the results the CPU gets from them."""
import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder
from cinnlite.dtypes import float32, int64
from cinnlite.errors import CompileError
from cinnlite.ir.loopnest import (Binary, Buffer, Cmp, Const, FlagIndexError, For, If, Kernel, Let, Load,
                                  ReportIndexError, Select, Seq, Store, Var)
from cinnlite.ir.passes import remove_unit_loops, simplify, verify
from cinnlite.ir.schedule_cpu import schedule_cpu
from cinnlite.ir.transform import walk_stmt


def kernel(body, *bufs):
    return Kernel("k", "test", tuple(bufs), bufs[-1], body)


def test_remove_unit_loops_substitutes_zero_and_drops_empty_loops():
    a, out = Buffer("a", float32, (1, 4)), Buffer("out", float32, (1, 4))
    i, j = Var("i"), Var("j")
    body = Seq((For(i, Const(1), For(j, Const(4), Store(out, (i, j), Load(a, (i, j))))),
                For(Var("z"), Const(0), Store(out, (Const(0), Const(0)), Const(1.0, float32)))))
    got = remove_unit_loops(kernel(body, a, out)).body
    assert got == For(j, Const(4), Store(out, (Const(0), j), Load(a, (Const(0), j))))


def test_simplify_folds_integer_identities_and_constants():
    out = Buffer("out", int64, (8,))
    i = Var("i")
    index = Binary("add", Binary("mul", Const(0), Const(4)), Binary("mul", i, Const(1)))
    got = simplify(kernel(For(i, Const(8), Store(out, (index,), Binary("add", Const(2), Const(3)))), out)).body
    assert got == For(i, Const(8), Store(out, (i,), Const(5)))


@pytest.mark.parametrize("bad", ["unbound", "rank", "dtype"])
def test_verify_rejects_broken_ir(bad):
    a, out = Buffer("a", float32, (4,)), Buffer("out", float32, (4,))
    i = Var("i")
    store = {
        "unbound": Store(out, (Var("nope"),), Load(a, (i,))),
        "rank": Store(out, (i, i), Load(a, (i,))),
        "dtype": Store(out, (i,), Const(1, int64)),
    }[bad]
    with pytest.raises(CompileError, match="verifier"):
        verify(kernel(For(i, Const(4), store), a, out))


def gather_program(mode="raise", n=(20, 10)):
    b = NetBuilder("g")
    x = b.create_input("float32", (n[0], 30), "x")
    i = b.create_input("int64", n, "i")
    return b.build([b.gather(x, i, axis=1, mode=mode)])


def test_raise_check_is_folded_into_the_gather_loop():
    text = cl.compile(gather_program(), cache=False).source("lowered")
    assert "flag_index_error(check=0)" in text
    assert "# deferred_check" in text and "# parallel_check" not in text
    # the flag sits in the compute loop, the precise check after it
    assert text.index("flag_index_error") < text.index("deferred_check")


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_folded_check_reports_the_first_bad_position(threads):
    exe = cl.compile(gather_program(n=(4000, 10)), threads=threads, cache=False)  # big enough to split
    x = np.arange(120000, dtype=np.float32).reshape(4000, 30)
    i = np.random.default_rng(0).integers(-30, 30, (4000, 10))
    np.testing.assert_array_equal(exe(x=x, i=i), np.take_along_axis(x, i % 30, axis=1))
    i[3500, 2], i[700, 9], i[700, 8] = 30, -31, 99
    with pytest.raises(cl.IndexOutOfRangeError) as info:
        exe(x=x, i=i)
    assert info.value.position == (700, 8) and info.value.value == 99


def assert_first_bad(exe, feeds: dict, bads):
    """For each ``{position: value}`` of ``bads`` set into a copy of ``feeds["i"]``, the call
    raises and reports the first of those positions and its value."""
    for bad in bads:
        j = feeds["i"].copy()
        for k, v in bad.items():
            j[k] = v
        with pytest.raises(cl.IndexOutOfRangeError) as info:
            exe(**dict(feeds, i=j))
        first = min(bad)
        assert info.value.position == first and info.value.value == bad[first]


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("symbolic", [False, True])
@pytest.mark.parametrize("middle", [False, True])
def test_an_index_read_again_for_every_row_is_tested_in_the_first_pass(threads, symbolic, middle):
    """A take along the last (or middle) axis reads its whole index once per row: the first row
    of each thread's chunk tests it, the other rows copy with no test; numpy's results and the
    first bad position whichever rows the threads share out."""
    b = NetBuilder("last")
    shape = (3, 400, 30) if middle else (400, 30)
    x = b.create_input("float32", shape, "x")
    i = b.create_input("int64", ("N",) if symbolic else (5000,), "i")
    axis = len(shape) - 1 if not middle else 1
    exe = cl.compile(b.build([b.take(x, i, axis=axis)]), threads=threads, cache=False)
    stage = exe.lowered.kernels[0].body
    stage = stage.stmts[0] if isinstance(stage, Seq) else stage
    assert isinstance(stage.body, If) and "range_begin" in str(stage.body.cond)
    assert not any(isinstance(s, If) and isinstance(s.then, FlagIndexError) for s in walk_stmt(stage.body.orelse))
    rng = np.random.default_rng(3)
    x = rng.integers(-8, 8, shape).astype(np.float32)
    extent = shape[axis]
    for n in ([5000] if not symbolic else [5000, 1, 77]):
        idx = rng.integers(-extent, extent, n)
        np.testing.assert_array_equal(exe(x=x, i=idx), np.take(x, idx % extent, axis=axis))
    assert_first_bad(exe, {"x": x, "i": rng.integers(-extent, extent, 5000)},
                     ({(4999,): extent}, {(70,): -extent - 1, (4000,): 99}))


def test_stage_work_counts_the_branch_that_runs():
    """An iteration runs one branch of an if/else: the stage's work is the larger, not both
    (a first pass that tests beside its copies does not double a take's work)."""
    from cinnlite.ir.schedule_cpu import stage_work
    out = Buffer("out", float32, (10, 5))
    i, j = Var("i"), Var("j")
    store = Store(out, (i, j), Const(1.0, float32))
    branches = If(Cmp("eq", i, Const(0)), For(j, Const(5), store), For(j, Const(3), store))
    assert stage_work(For(i, Const(10), branches, "parallel")) == 50
    assert stage_work(For(i, Const(10), If(Cmp("eq", i, Const(0)), For(j, Const(5), store)), "parallel")) == 50


def take_rows_exe(rows, threads=1, symbolic=False, middle=False):
    """A take of 8-wide rows (along the middle axis of a 3-D tensor where ``middle``): a loop
    that tests one index per iteration and then copies a slice."""
    b = NetBuilder("rows")
    shape = (3, 50, 8) if middle else (50, 8)
    x = b.create_input("float32", shape, "x")
    i = b.create_input("int64", ("R",) if symbolic else (rows,), "i")
    return cl.compile(b.build([b.take(x, i, axis=1 if middle else 0)]), threads=threads, cache=False)


def check_blocks(exe):
    """The loops of an executable's kernels that hold nothing but index flags."""
    from cinnlite.ir.loopnest import FlagIndexError, Seq

    def flags_only(body):
        stmts = body.stmts if isinstance(body, Seq) else (body,)
        return all(isinstance(s, If) and isinstance(s.then, FlagIndexError) for s in stmts)
    return [loop for k in exe.lowered.kernels for loop in walk_stmt(k.body) if isinstance(loop, For) and flags_only(loop.body)]


def expected_block(rows, symbolic, middle):
    """The block ``_block_size`` picks: 64 in an inner loop; in the stage's own loop (split
    across threads) at most rows / 64, so that at least 64 blocks are shared out, and none
    below 8; for a symbolic size, an expression."""
    if symbolic:
        return "symbolic"
    size = 64 if middle else min(64, rows // 64)
    return size if size >= 8 and rows > size else None


@pytest.mark.parametrize("rows", [64 * 40, 64 * 64 * 3 + 13, 100])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("symbolic", [False, True])
@pytest.mark.parametrize("middle", [False, True])
def test_slice_loops_test_their_indices_in_blocks(rows, threads, symbolic, middle):
    """A block of slices is preceded by a loop that only tests their indices; the results, and
    the first bad position reported, are those of numpy's take whatever block (the last,
    shorter one included) holds the bad value, for every size of a symbolic program."""
    exe = take_rows_exe(rows, threads, symbolic, middle)
    blocks = check_blocks(exe)
    want = expected_block(rows, symbolic, middle)
    assert len(blocks) == (want is not None)
    if isinstance(want, int):
        extent = blocks[0].extent
        last_block_shorter = isinstance(extent, Binary) and extent.op == "min" and Const(want) in (extent.a, extent.b)
        assert extent == Const(want) or last_block_shorter
    axis = 1 if middle else 0
    x = np.arange(3 * 400 if middle else 400, dtype=np.float32).reshape((3, 50, 8) if middle else (50, 8))
    for n in ([rows] if not symbolic else [rows, 0, 1, 65, 129]):
        i = np.random.default_rng(n).integers(-50, 50, n)
        np.testing.assert_array_equal(exe(x=x, i=i), np.take(x, i, axis=axis))
    i = i if not symbolic else np.random.default_rng(rows).integers(-50, 50, rows)
    assert_first_bad(exe, {"x": x, "i": i},
                     ({(rows - 1,): 50}, {(0,): -51, (rows - 1,): 99}, {(rows // 2,): 77, (rows - 2,): -60}))


def test_a_split_loop_keeps_blocks_enough_for_every_thread():
    """The stage's own loop is what threads share: blocked, it keeps at least 64 blocks."""
    for rows in (600, 4096, 5000, 100000):
        (block,) = check_blocks(take_rows_exe(rows))
        stage = next(s for k in take_rows_exe(rows).lowered.kernels for s in k.body.stmts
                     if isinstance(s, For) and s.kind == "parallel")
        assert stage.extent.value >= 64 and stage.extent.value * 64 >= rows


def test_element_loops_keep_their_flag_beside_the_element():
    """A gather of single elements has no slice loop to block: LLVM vectorises its flag with
    the elements."""
    exe = cl.compile(gather_program(n=(4000, 10)), cache=False)
    assert "flag_index_error" in exe.source("lowered") and check_blocks(exe) == []


def scatter_exe(reduce, axis, symbolic=False, threads=1):
    b = NetBuilder("s")
    x = b.create_input("float32", (3, 50), "x")
    shape = ("R", "C") if symbolic else ((3, 200) if axis == 1 else (120, 50))
    i = b.create_input("int64", shape, "i")
    u = b.create_input("float32", shape, "u")
    return cl.compile(b.build([b.scatter(x, i, u, axis=axis, reduce=reduce)]), threads=threads, cache=False)


def scatter_reference(x, i, u, reduce, axis):
    """Every update in row-major order of the index, the mean as sum over count."""
    out, count = x.astype(np.float64), np.ones(x.shape)
    for pos in np.ndindex(*i.shape):
        target = list(pos)
        target[axis] = i[pos] % x.shape[axis]
        target = tuple(target)
        if reduce == "none":
            out[target] = u[pos]
        elif reduce == "max":
            out[target] = max(out[target], u[pos])
        else:
            out[target] += u[pos]
            count[target] += 1
    return (out / count if reduce == "mean" else out).astype(np.float32)


@pytest.mark.parametrize("reduce", ["none", "add", "max", "mean"])
@pytest.mark.parametrize("symbolic", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_scatter_element_loops_that_stay_scalar_test_their_indices_in_blocks(reduce, symbolic, threads):
    """Along the last axis two updates of a row may meet one element, so the update loop stays
    scalar: its indices are tested in blocks in front of it, with the same results and the same
    first bad position, whatever block (the last, shorter one included) holds it."""
    exe = scatter_exe(reduce, 1, symbolic, threads)
    assert len(check_blocks(exe)) == 1
    rng = np.random.default_rng(7)
    x = rng.integers(-8, 8, (3, 50)).astype(np.float32)
    for cols in ([200] if not symbolic else [200, 1, 64, 129]):
        i = rng.integers(-50, 50, (3, cols))
        u = rng.integers(-8, 8, i.shape).astype(np.float32)
        np.testing.assert_allclose(exe(x=x, i=i, u=u), scatter_reference(x, i, u, reduce, 1), rtol=1e-6)
    assert_first_bad(exe, {"x": x, "i": rng.integers(-50, 50, (3, 200)), "u": np.ones((3, 200), np.float32)},
                     ({(2, 199): 50}, {(0, 70): -51, (2, 5): 99}, {(1, 130): 77, (1, 198): -60}))


def _other_scalar_scatters():
    """(name, program, inputs, numpy reference) of scatters whose update loop stays scalar
    other than along the last axis: a 1-D scatter, a scatter_nd of element pairs, and a mean
    along axis 0 (its two written buffers keep it from being vectorised)."""
    rng = np.random.default_rng(11)
    cases = []
    b = NetBuilder("flat")
    x, i, u = (b.create_input(d, sh, n) for d, sh, n in (("float32", (50,), "x"), ("int64", (300,), "i"),
                                                         ("float32", (300,), "u")))
    feeds = {"x": rng.integers(-8, 8, 50).astype(np.float32), "i": rng.integers(-50, 50, 300),
             "u": rng.integers(-8, 8, 300).astype(np.float32)}
    want = feeds["x"].copy()
    np.add.at(want, feeds["i"] % 50, feeds["u"])
    cases.append(("flat", b.build([b.scatter(x, i, u, axis=0, reduce="add")]), feeds, want))
    b = NetBuilder("pairs")
    x, i, u = (b.create_input(d, sh, n) for d, sh, n in (("float32", (5, 10), "x"), ("int64", (300, 2), "i"),
                                                         ("float32", (300,), "u")))
    idx = np.stack([rng.integers(-5, 5, 300), rng.integers(-10, 10, 300)], axis=1)
    feeds = {"x": rng.integers(-8, 8, (5, 10)).astype(np.float32), "i": idx, "u": rng.integers(-8, 8, 300).astype(np.float32)}
    want = feeds["x"].copy()
    np.add.at(want, (idx[:, 0] % 5, idx[:, 1] % 10), feeds["u"])
    cases.append(("pairs", b.build([b.scatter_nd(x, i, u, reduce="add")]), feeds, want))
    b = NetBuilder("mean0")
    x, i, u = (b.create_input(d, sh, n) for d, sh, n in (("float32", (3, 100), "x"), ("int64", (4, 100), "i"),
                                                         ("float32", (4, 100), "u")))
    feeds = {"x": rng.integers(-8, 8, (3, 100)).astype(np.float32), "i": rng.integers(-3, 3, (4, 100)),
             "u": rng.integers(-8, 8, (4, 100)).astype(np.float32)}
    want = scatter_reference(feeds["x"], feeds["i"], feeds["u"], "mean", 0)
    cases.append(("mean0", b.build([b.scatter(x, i, u, axis=0, reduce="mean")]), feeds, want))
    return cases


@pytest.mark.parametrize("case", _other_scalar_scatters(), ids=lambda c: c[0])
@pytest.mark.parametrize("threads", [1, 2])
def test_other_scalar_scatters_test_their_indices_in_blocks(case, threads):
    name, program, feeds, want = case
    exe = cl.compile(program, threads=threads, cache=False)
    assert len(check_blocks(exe)) == 1
    np.testing.assert_allclose(exe(**feeds), want, rtol=1e-6)
    first, later = {"flat": ((250,), (290,)), "pairs": ((250, 0), (270, 1)), "mean0": ((3, 80), (3, 95))}[name]
    bad = dict(feeds, i=feeds["i"].copy())
    bad["i"][first], bad["i"][later] = 1000, -1000
    with pytest.raises(cl.IndexOutOfRangeError) as info:
        exe(**bad)
    assert info.value.position == first and info.value.value == 1000


@pytest.mark.parametrize("depth", [2, 3])
@pytest.mark.parametrize("symbolic", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_gathers_of_index_tuples_test_them_in_blocks(depth, symbolic, threads):
    """A gather_nd of elements tests every coordinate of a tuple: its tests run in blocks in
    front of the element loop, with numpy's results and the first bad position (the tuple's row
    and coordinate) whatever block (the last, shorter one included) holds it."""
    shape = (5, 10, 3)[:depth]
    b = NetBuilder("tuples")
    x = b.create_input("float32", shape, "x")
    i = b.create_input("int64", ("N", depth) if symbolic else (5000, depth), "i")
    exe = cl.compile(b.build([b.gather_nd(x, i)]), threads=threads, cache=False)
    assert len(check_blocks(exe)) == 1
    rng = np.random.default_rng(depth)
    x = rng.integers(-8, 8, shape).astype(np.float32)
    for n in ([5000] if not symbolic else [5000, 1, 64, 129]):
        idx = np.stack([rng.integers(-s, s, n) for s in shape], axis=1)
        np.testing.assert_array_equal(exe(x=x, i=idx), x[tuple((idx % shape).T)])
    idx = np.stack([rng.integers(-s, s, 5000) for s in shape], axis=1)
    assert_first_bad(exe, {"x": x, "i": idx},
                     ({(4999, depth - 1): 10}, {(70, 0): -6, (4000, 1): 99}, {(2500, 1): 10, (2500, 0): -60}))


def test_gathers_of_32_bit_index_tuples_keep_their_flag_beside_the_element():
    """LLVM reads tuples of 32-bit indices as vectors and tests them with the gather's own
    arithmetic: nothing to block."""
    b = NetBuilder("tuples32")
    x, i = b.create_input("float32", (5, 10), "x"), b.create_input("int32", (5000, 2), "i")
    assert check_blocks(cl.compile(b.build([b.gather_nd(x, i)]), cache=False)) == []


def test_scatters_of_distinct_elements_keep_their_flag_beside_the_update():
    """Along axis 0 the updates of a row meet distinct elements and LLVM vectorises the loop,
    its flag with it: nothing to block."""
    assert check_blocks(scatter_exe("add", 0)) == []


def test_checks_of_values_read_under_a_condition_stay_eager():
    """In message passing the gathered rows are read only for the updates of a thread's rows,
    so the source index is not read whole by the update loop: its check must stay in front."""
    b = NetBuilder("mp")
    x = b.create_input("float32", (5, 2), "x")
    src = b.create_input("int64", (7,), "src")
    dst = b.create_input("int64", (7, 1), "dst")
    out = b.scatter_nd(b.fill_constant((5, 2), 0.0, "float32"), dst, b.take(x, src), reduce="add")
    exe = cl.compile(b.build([out]), cache=False)
    text = exe.source("lowered")
    assert "# parallel_check" in text  # src: checked up front
    assert "flag_index_error(check=1)" in text  # dst: read whole by the update loop
    for src_v, dst_v, want in ((9, 0, "'src'"), (0, 9, "'dst'"), (9, 9, "'src'")):
        s, d = np.zeros(7, np.int64), np.zeros((7, 1), np.int64)
        s[3], d[4, 0] = src_v, dst_v
        with pytest.raises(cl.IndexOutOfRangeError, match=want):
            exe(x=np.zeros((5, 2), np.float32), src=s, dst=d)


def test_folding_checks_changes_no_result_or_error_against_unfused_programs():
    rng = np.random.default_rng(5)
    for mode in ("raise", "clip"):
        prog = gather_program(mode, n=(20, 10))
        x = rng.standard_normal((20, 30)).astype(np.float32)
        i = rng.integers(-35, 35, (20, 10))
        results = []
        for fuse in (True, False):
            exe = cl.compile(prog, fuse=fuse, cache=False)
            try:
                results.append(("ok", exe(x=x, i=i).tobytes()))
            except cl.IndexOutOfRangeError as e:
                results.append(("error", str(e)))
        assert results[0] == results[1]


def test_a_repeated_check_is_dropped_unless_a_stage_between_writes_what_it_reads():
    idx, out = Buffer("idx", int64, (4,)), Buffer("out", int64, (4,))

    def check(check_id, name):
        c, v = Var(f"c{name}"), Var(f"v{name}")
        bad = Cmp("ge", v, Const(9))
        return For(c, Const(4), Let(((v, Load(idx, (c,))),), If(bad, ReportIndexError(check_id, c, v))))

    i = Var("i")
    write_idx = For(i, Const(4), Store(idx, (i,), Const(1)))
    write_out = For(i, Const(4), Store(out, (i,), Load(idx, (i,))))

    def checks_left(*stages):
        body = schedule_cpu(kernel(Seq(stages), idx, out)).body
        return sum(isinstance(x, ReportIndexError) for x in walk_stmt(body))

    assert checks_left(check(0, "a"), check(1, "b"), write_out) == 1  # the same test, other names
    assert checks_left(check(0, "a"), write_idx, check(1, "b"), write_out) == 2  # idx changed between


def rows_program(op, shape, count):
    """A take or a gather along the last axis of ``shape``, ``count`` indices per row."""
    b = NetBuilder("rows")
    x = b.create_input("float32", shape, "x")
    if op == "take":
        i = b.create_input("int64", (count,), "i")
        return b.build([b.take(x, i, axis=len(shape) - 1)])
    i = b.create_input("int64", shape[:-1] + (count,), "i")
    return b.build([b.gather(x, i, axis=len(shape) - 1)])


def prefetch_loops(lowered):
    from cinnlite.ir.loopnest import Prefetch
    return [s for k in lowered.kernels for s in walk_stmt(k.body) if isinstance(s, For) and isinstance(s.body, Prefetch)]


@pytest.mark.parametrize("op", ["take", "gather"])
def test_rows_gathered_at_random_are_prefetched_in_order(op):
    """Rows of 4 KB read at 300 random places each: the row's 64 lines are prefetched in front
    of every gather loop; the evaluator (which checks every prefetch address) and the CPU, on
    one and two threads, give numpy's results."""
    from cinnlite.backends.cpu import CPU_PIPELINE
    from cinnlite.ir.evaluate import evaluate
    from cinnlite.ir.lower import lower_program
    from cinnlite.ir.passes import run_pipeline
    program = rows_program(op, (8, 1024), 300)
    lowered = run_pipeline(lower_program(program), CPU_PIPELINE)
    loops = prefetch_loops(lowered)
    assert loops and all(loop.extent == Const(64) and loop.body.buffer.name == "x" for loop in loops)
    rng = np.random.default_rng(5)
    x = rng.random((8, 1024)).astype(np.float32)
    i = rng.integers(-1024, 1024, (300,) if op == "take" else (8, 300))
    want = np.take(x, i % 1024, axis=1) if op == "take" else np.take_along_axis(x, i % 1024, axis=1)
    np.testing.assert_array_equal(evaluate(lowered, {"x": x, "i": i})[program.outputs[0].name], want)
    for threads in (1, 2):
        exe = cl.compile(program, threads=threads, cache=False)
        assert prefetch_loops(exe.lowered)
        np.testing.assert_array_equal(exe(x=x, i=i), want)


@pytest.mark.parametrize("shape, count, axis", [((8, 64), 300, 1), ((2, 65536), 100, 1), ((1024, 8), 300, 0)],
                         ids=["short rows", "sparse reads", "rows picked by the index"])
def test_rows_read_sparsely_or_short_are_not_prefetched(shape, count, axis):
    b = NetBuilder("rows")
    x = b.create_input("float32", shape, "x")
    i = b.create_input("int64", (count,), "i")
    assert prefetch_loops(cl.compile(b.build([b.take(x, i, axis=axis)]), cache=False).lowered) == []


def test_a_row_gathered_block_by_block_is_not_prefetched_for_every_block():
    """``for r { for t { for j { out[r, 64 t + j] = x[r, i[r, 64 t + j]] } } }``: the loop over
    ``j`` runs once per block of a row, not once per row, so prefetching the row in front of it
    would repeat for every block; without the loop over blocks, the row is prefetched."""
    from cinnlite.ir.loopnest import Prefetch
    from cinnlite.ir.schedule_cpu import stream_rows
    x, i, out = Buffer("x", float32, (4, 1024)), Buffer("i", int64, (4, 512)), Buffer("out", float32, (4, 512))
    r, t, j = Var("r"), Var("t"), Var("j")

    def gather(col):
        return For(j, Const(64) if col != j else Const(512), Store(out, (r, col), Load(x, (r, Load(i, (r, col))))))
    blocked = For(r, Const(4), For(t, Const(8), gather(Binary("add", Binary("mul", t, Const(64)), j))), "parallel")
    whole = For(r, Const(4), gather(j), "parallel")

    def prefetches(body):
        return [s for s in walk_stmt(stream_rows(kernel(body, x, i, out)).body) if isinstance(s, Prefetch)]
    assert prefetches(blocked) == []
    assert [p.indices[0] for p in prefetches(whole)] == [r]


def far_program(kind, rows, symbolic=False):
    """A gather along axis 0 (``elements``), a take of rows, gather_nd of element pairs, or a
    gather along the middle axis, from a table of ``rows`` rows (a symbol where ``symbolic``);
    the index input is ``i``."""
    b = NetBuilder(kind)
    n = "R" if symbolic else rows
    if kind == "middle":
        x = b.create_input("float32", (2, n, 16), "x")
        return b.build([b.gather(x, b.create_input("int64", (2, 300, 16), "i"), axis=1)])
    x = b.create_input("float32", (n, 64), "x")
    if kind == "elements":
        return b.build([b.gather(x, b.create_input("int64", (300, 64), "i"), axis=0)])
    if kind == "rows":
        return b.build([b.take(x, b.create_input("int64", (3000,), "i"), axis=0)])
    return b.build([b.gather_nd(x, b.create_input("int64", (3000, 2), "i"))])


def far_inputs(kind, rows, rng):
    x = rng.random((2, rows, 16) if kind == "middle" else (rows, 64)).astype(np.float32)
    if kind == "pairs":
        i = np.stack([rng.integers(-rows, rows, 3000), rng.integers(-64, 64, 3000)], axis=1)
        return x, i, x[i[:, 0] % rows, i[:, 1] % 64]
    if kind == "rows":
        i = rng.integers(-rows, rows, 3000)
        return x, i, np.take(x, i % rows, axis=0)
    i = rng.integers(-rows, rows, (2, 300, 16) if kind == "middle" else (300, 64))
    return x, i, np.take_along_axis(x, i % rows, axis=1 if kind == "middle" else 0)


FAR_KINDS = ["elements", "rows", "pairs", "middle"]
#: Per kind: (lines one pass of the gather loop reads, the first bad positions to report). The
#: pairs are tested in blocks of 46 (3000 in 66 blocks, the last one shorter).
FAR_SHAPES = {"elements": (64, [{(299, 63): 5000, (150, 0): -5001}]), "rows": (4, [{(2999,): 5000}]),
              "pairs": (46, [{(2999, 1): 64, (2000, 0): -5001}]), "middle": (16, [{(1, 299, 15): 5000}])}


@pytest.mark.parametrize("kind", FAR_KINDS)
def test_far_gathers_prefetch_what_later_passes_read(kind, monkeypatch):
    """Gathers from a table beyond ``PREFETCH_MIN_BYTES`` (lowered here to 64 KB): in front of
    each gather loop, a loop that prefetches the elements (or a row's lines) some passes ahead,
    its index reads clamped into the index; the evaluator, which checks every prefetch address,
    and the CPU on one and two threads give numpy's results and the first bad position."""
    from cinnlite.backends.cpu import CPU_PIPELINE
    from cinnlite.ir import schedule_cpu
    from cinnlite.ir.evaluate import evaluate
    from cinnlite.ir.lower import lower_program
    from cinnlite.ir.passes import run_pipeline
    monkeypatch.setattr(schedule_cpu, "PREFETCH_MIN_BYTES", 64 << 10)
    monkeypatch.setattr(schedule_cpu, "PREFETCH_MIN_ROW_BYTES", 64 << 10)
    program = far_program(kind, 5000)
    lowered = run_pipeline(lower_program(program), CPU_PIPELINE)
    lines, bads = FAR_SHAPES[kind]
    assert [(loop.extent, loop.body.buffer.name) for loop in prefetch_loops(lowered)] == [(Const(lines), "x")]
    x, i, want = far_inputs(kind, 5000, np.random.default_rng(9))
    np.testing.assert_array_equal(evaluate(lowered, {"x": x, "i": i})[program.outputs[0].name], want)
    for threads in (1, 2):
        exe = cl.compile(program, threads=threads, cache=False)
        assert len(prefetch_loops(exe.lowered)) == 1
        np.testing.assert_array_equal(exe(x=x, i=i), want)
        assert_first_bad(exe, {"x": x, "i": i}, bads)


@pytest.mark.parametrize("kind", FAR_KINDS)
def test_gathers_from_a_table_the_caches_hold_are_not_prefetched(kind):
    assert prefetch_loops(cl.compile(far_program(kind, 5000), cache=False).lowered) == []


@pytest.mark.parametrize("kind", ["elements", "rows"])
def test_a_symbolic_table_is_prefetched_from_when_the_call_finds_it_far(kind):
    """With a symbolic number of rows the prefetch loop runs from ``PREFETCH_MIN_BYTES`` (rows:
    ``PREFETCH_MIN_ROW_BYTES``) into the call and not below: numpy's results on either side of
    the bound, on two threads."""
    from cinnlite.ir import schedule_cpu
    bound = schedule_cpu.PREFETCH_MIN_ROW_BYTES if kind == "rows" else schedule_cpu.PREFETCH_MIN_BYTES
    from cinnlite.runtime.shapes import size_value
    exe = cl.compile(far_program(kind, 0, symbolic=True), threads=2, cache=False)
    (loop,) = prefetch_loops(exe.lowered)
    assert isinstance(loop.extent, Select) and loop.extent.b == Const(0) and loop.extent.cond.op == "ge"
    for rows in (bound // 256 - 1, bound // 256):
        runs = size_value(loop.extent.cond.a, {"#R": rows}) >= size_value(loop.extent.cond.b, {})
        assert runs == (rows * 256 >= bound)  # the table's bytes against the bound
        x, i, want = far_inputs(kind, rows, np.random.default_rng(rows))
        np.testing.assert_array_equal(exe(x=x, i=i), want)


def test_rows_are_prefetched_from_a_nearer_table_than_elements():
    """A row's lines cost one prefetch per 64 bytes, an element a prefetch of its own: from a
    12 MB table a take of rows prefetches, a gather of elements does not."""
    from cinnlite.ir import schedule_cpu
    rows = 12 << 12  # 64 float32 elements a row: 12 MB
    assert schedule_cpu.PREFETCH_MIN_ROW_BYTES <= rows * 256 < schedule_cpu.PREFETCH_MIN_BYTES
    assert len(prefetch_loops(cl.compile(far_program("rows", rows), cache=False).lowered)) == 1
    assert prefetch_loops(cl.compile(far_program("elements", rows), cache=False).lowered) == []


def test_gathers_behind_a_scatters_row_guard_are_not_prefetched(monkeypatch):
    """``scatter_nd(zeros, dst, take(x, src))`` split by output row: each thread runs the update
    loop only for the rows of its range (an if on ``dst``), so the passes ahead may never run it
    and no prefetch goes there, however far ``x`` is; numpy's results on two threads."""
    from cinnlite.ir import schedule_cpu
    monkeypatch.setattr(schedule_cpu, "PREFETCH_MIN_BYTES", 0)
    monkeypatch.setattr(schedule_cpu, "PREFETCH_MIN_ROW_BYTES", 0)
    b = NetBuilder("messages")
    x = b.create_input("float32", (500, 64), "x")
    src, dst = b.create_input("int64", (3000,), "src"), b.create_input("int64", (3000, 1), "dst")
    out = b.scatter_nd(b.fill_constant((500, 64), 0.0, "float32"), dst, b.take(x, src, axis=0), reduce="add")
    exe = cl.compile(b.build([out]), threads=2, cache=False)
    assert any(s.kind == "parallel_rows" for k in exe.lowered.kernels for s in walk_stmt(k.body) if isinstance(s, For))
    assert prefetch_loops(exe.lowered) == []
    rng = np.random.default_rng(4)
    xs, s, d = rng.random((500, 64)).astype(np.float32), rng.integers(-500, 500, 3000), rng.integers(0, 500, (3000, 1))
    want = np.zeros((500, 64), np.float32)
    np.add.at(want, d[:, 0], xs[s % 500])
    np.testing.assert_allclose(exe(x=xs, src=s, dst=d), want, rtol=1e-5)


def test_a_chain_of_index_loads_moves_ahead_once():
    """``x[i[j[o, k]]]`` moved a pass ahead: ``o`` becomes ``o + 1`` once, in ``j``'s coordinate,
    which alone is clamped (``i``'s coordinate is a loaded value, bounded by its own clamp); a
    block loop whose last block is shorter clamps what its moved variable reaches too."""
    from cinnlite.ir.printer import expr_str
    from cinnlite.ir.schedule_cpu import _moved_ahead
    x, i, j = Buffer("x", float32, (50, 8)), Buffer("i", int64, (40,)), Buffer("j", int64, (30, 8))
    o, k, a = Var("o"), Var("k"), Var("a")
    indices = (Load(i, (Load(j, (o, k)),)), k)
    (row, col) = _moved_ahead(x, indices, {o: Binary("add", o, Const(1)), k: a}, short_last=False)
    assert expr_str(row) == "i[j[max(min((o + 1), 29), 0), a]]" and col == a
    (row, col) = _moved_ahead(x, indices, {o: Binary("add", o, Const(1)), k: a}, short_last=True)
    assert expr_str(row) == "i[j[max(min((o + 1), 29), 0), max(min(a, 7), 0)]]" and expr_str(col) == "max(min(a, 7), 0)"
    assert _moved_ahead(x, (Load(i, (o,)), o), {o: Binary("add", o, Const(1)), k: a}, short_last=False) is None


def test_a_long_chain_of_fused_gathers_prefetches_only_short_indices(monkeypatch):
    """Forty fused gathers through one index, every table counted far: written out, the index
    of the outermost gather would repeat every link (exponentially many nodes); the loads whose
    indices exceed ``PREFETCH_MAX_NODES`` get no prefetch, the program compiles and gives
    numpy's result."""
    from cinnlite.ir import schedule_cpu
    from cinnlite.ir.transform import expr_size
    monkeypatch.setattr(schedule_cpu, "PREFETCH_MIN_BYTES", 0)
    monkeypatch.setattr(schedule_cpu, "PREFETCH_MIN_ROW_BYTES", 0)
    b = NetBuilder("chain")
    y = x = b.create_input("float32", (50, 8), "x")
    i = b.create_input("int64", (50, 8), "i")
    for _ in range(40):
        y = b.gather(y, i, axis=0)
    exe = cl.compile(b.build([y]), cache=False)
    loops = prefetch_loops(exe.lowered)
    assert loops and all(expr_size(e, schedule_cpu.PREFETCH_MAX_NODES) <= schedule_cpu.PREFETCH_MAX_NODES
                         for loop in loops for e in loop.body.indices)
    # Every load of every innermost loop is looked at in time bounded by the cap (written out
    # in full, the outermost one's index would not fit in memory).
    inner = [s for k in exe.lowered.kernels for s in walk_stmt(k.body) if isinstance(s, For)
             and not any(isinstance(x, For) for x in walk_stmt(s.body))]
    assert sum(len(list(schedule_cpu._indirect_loads(loop))) for loop in inner) >= 1
    rng = np.random.default_rng(8)
    xs, idx = rng.random((50, 8)).astype(np.float32), rng.integers(-50, 50, (50, 8))
    want = xs
    for _ in range(40):
        want = np.take_along_axis(want, idx % 50, axis=0)
    np.testing.assert_array_equal(exe(x=xs, i=idx), want)
