"""How the CPU target builds and loads code: stages that repeat the checks just before them
render as functions with nothing to do, a disk cache hit loads the machine code without
optimising or generating code, and the optimised IR and assembly are made when asked for."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import cinnlite as cl
import cinnlite.backends.cpu as cpu_backend
from cinnlite.codegen.llvm import ROW_COPY_MOVES, stage_plan
from cinnlite.runtime import cache as caches
from cinnlite.runtime import cpu


def take_chain(n, distinct=False):
    """``n`` fused takes of rows, through one index tensor or one each, and the inputs."""
    b = cl.NetBuilder("take_chain")
    x = b.create_input("float32", (50, 8), "x")
    names = [f"i{k}" for k in range(n)] if distinct else ["i"]
    idx = {name: b.create_input("int64", (50,), name) for name in names}
    t = x
    for k in range(n):
        t = b.add(b.take(t, idx[names[k % len(names)]], axis=0), x)
    rng = np.random.default_rng(n)
    arrays = {"x": rng.standard_normal((50, 8)).astype(np.float32)}
    arrays.update({name: rng.integers(-50, 50, 50) for name in names})
    return b.build([t]), arrays


def reference(arrays, n, distinct=False):
    t = arrays["x"]
    for k in range(n):
        t = t[arrays[f"i{k}" if distinct else "i"]] + arrays["x"]
    return t


def loops(text: str, symbol: str) -> int:
    """The number of loop headers in function ``symbol`` of an LLVM module's text."""
    body = re.search(r'define [^@]*@"?%s"?\(.*?\n}\n' % symbol, text, re.S).group(0)
    return body.count(".head:")


@pytest.mark.parametrize("threads", [1, 2])
def test_a_chain_through_one_index_checks_it_once(threads):
    n = 6
    prog, arrays = take_chain(n)
    exe = cl.compile(prog, cache=False, threads=threads)
    np.testing.assert_allclose(exe(**arrays), reference(arrays, n), rtol=1e-6)
    text = exe.source("llvm")
    checks = [info.symbol for info, _ in stage_plan(exe.lowered) if "check" in info.kind]
    # Fused into one kernel, the takes' n identical checks are one (the schedule drops the
    # repeats); a repeat in a later kernel would be an empty stage.
    assert all(loops(text, symbol) == 0 for symbol in checks[1:])
    assert sum(loops(text, symbol) for symbol in checks) == 1
    arrays["i"][7] = 50
    with pytest.raises(cl.IndexOutOfRangeError, match=r"take 'take_0'.*position \(7,\) of input 'i'"):
        exe(**arrays)


def test_checks_of_different_indices_all_run():
    n = 4
    prog, arrays = take_chain(n, distinct=True)
    exe = cl.compile(prog, cache=False)
    np.testing.assert_allclose(exe(**arrays), reference(arrays, n, distinct=True), rtol=1e-6)
    text = exe.source("llvm")
    checks = [info.symbol for info, _ in stage_plan(exe.lowered) if "check" in info.kind]
    assert all(loops(text, symbol) == 1 for symbol in checks)
    arrays["i2"][3] = -51
    with pytest.raises(cl.IndexOutOfRangeError, match=r"position \(3,\) of input 'i2'"):
        exe(**arrays)


def test_a_cache_hit_neither_optimises_nor_generates_code(cache_dir, monkeypatch):
    prog, arrays = take_chain(3)
    first = cl.compile(prog)
    want = first(**arrays)
    opt_text, asm = first.source("llvm_opt"), first.source("asm")
    del first
    caches.MEMORY.clear()

    loading = [True]
    real_optimise, real_build = cpu.optimise, cpu_backend.build_module

    def optimise(*args):
        assert not loading[0], "a cache hit optimised code"
        return real_optimise(*args)

    def build_module(*args):
        assert not loading[0], "a cache hit generated code"
        return real_build(*args)

    monkeypatch.setattr(cpu, "optimise", optimise)
    monkeypatch.setattr(cpu_backend, "build_module", build_module)
    exe = cl.compile(prog)
    np.testing.assert_array_equal(exe(**arrays), want)
    loading[0] = False
    # The optimised module and its assembly are made again when asked for, and are the same.
    assert exe.source("llvm_opt") == opt_text and exe.source("asm") == asm


def _far_gather_programs():
    """A take of rows from a 4 MB table (every index reaches all of it), a take along the last
    axis of the same table (each index reaches one 8 KB row) and a symbolic-size take."""
    b = cl.NetBuilder("far")
    x = b.create_input("float32", (512, 2048), "x")
    i = b.create_input("int32", (64, 2048), "i")
    far = b.build([b.gather(x, i, axis=0)])
    b = cl.NetBuilder("near")
    x = b.create_input("float32", (512, 2048), "x")
    j = b.create_input("int64", (100,), "j")
    near = b.build([b.take(x, j, axis=1)])
    b = cl.NetBuilder("unknown")
    x = b.create_input("float32", ("N",), "x")
    j = b.create_input("int64", (100,), "j")
    unknown = b.build([b.take(x, j)])
    return far, near, unknown


def test_gather_reach_is_what_a_data_index_can_address():
    """``gather_reach``: the extent times the stride (bytes) of every dimension a loaded index
    selects in an innermost loop, the largest; None for a symbolic extent."""
    from cinnlite.ir.schedule_cpu import gather_reach
    from cinnlite.ir.transform import kernel_stages

    reaches = []
    for prog in _far_gather_programs():
        exe = cl.compile(prog, target="cpu")
        stages = [s for k in exe.lowered.kernels for s in kernel_stages(k)]
        reaches.append(max((r for r in map(gather_reach, stages) if r is not None), default=None)
                       if all(gather_reach(s) is not None for s in stages) else None)
    assert reaches == [512 * 2048 * 4, 2048 * 4, None]


def test_far_reaching_gathers_get_the_gather_features(monkeypatch):
    """Where the host's gathers are microcoded, a stage whose gathers reach beyond the L2 cache
    is compiled with the features that allow vector gathers; one within it, or of a symbolic
    reach, keeps the module's. Results are the same either way."""
    monkeypatch.setattr(cpu_backend, "far_gathers", lambda: (cpu._host()[2].replace(cpu.NO_GATHERS, ""), 1 << 20))
    far, near, unknown = _far_gather_programs()
    marked = []
    for prog in (far, near, unknown):
        exe = cl.compile(prog, target="cpu", cache=False)
        marked.append('"target-features"=' in exe.source("llvm"))
    assert marked == [True, False, False]
    rng = np.random.default_rng(8)
    x, i = rng.standard_normal((512, 2048)).astype(np.float32), rng.integers(-512, 512, (64, 2048)).astype(np.int32)
    exe = cl.compile(far, target="cpu", cache=False)
    np.testing.assert_array_equal(exe(x=x, i=i), np.take_along_axis(x, i % 512, axis=0))


def _defined_attributes(text: str) -> dict:
    """Function name -> whether its definition allows vector gathers, for an LLVM module's text."""
    return {line.split('@"')[1].split('"')[0]: '"target-features"=' in line
            for line in text.splitlines() if line.startswith("define")}


@pytest.mark.parametrize("threads", [1, 2])
def test_far_gathers_split_across_threads_are_built_lane_by_lane(monkeypatch, threads):
    """A stage whose gathers reach far, through 64-bit indices, runs whole with vector gathers
    and in chunks on threads from a copy of it without them (``threaded_gathers``): a gather of
    one coordinate each, and one of index tuples, whose copy adds each lane's coordinates
    before they leave the vector (``lane_sum``: a frozen sum). Results are numpy's on one
    thread and two, from small calls (run whole) and big ones (split), with a bad index
    reported from either."""
    from cinnlite.ir.schedule_cpu import threaded_gathers
    from cinnlite.ir.transform import kernel_stages

    monkeypatch.setattr(cpu_backend, "far_gathers", lambda: (cpu._host()[2].replace(cpu.NO_GATHERS, ""), 1 << 20))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((512, 2048)).astype(np.float32)
    b = cl.NetBuilder("rows")
    i = b.create_input("int64", ("M", 2048), "i")
    rows = cl.compile(b.build([b.gather(b.create_input("float32", (512, 2048), "x"), i, axis=0)]),
                      target="cpu", cache=False, threads=threads)
    b = cl.NetBuilder("tuples")
    t = b.create_input("int64", ("M", 2), "t")
    tuples = cl.compile(b.build([b.gather_nd(b.create_input("float32", (512, 2048), "x"), t)]),
                        target="cpu", cache=False, threads=threads)
    for exe, tupled in ((rows, False), (tuples, True)):
        stages = [s for k in exe.lowered.kernels for s in kernel_stages(k)]
        assert any(map(threaded_gathers, stages))
        text = exe.source("llvm")
        marked = _defined_attributes(text)
        split = {name[:-len("_split")] for name in marked if name.endswith("_split")}
        assert len(split) == 1 and all(marked[name] and not marked[name + "_split"] for name in split)
        # What main splits across threads is the copy; what it runs whole is the stage itself.
        assert all(f'@"cinnlite_parallel"(i32 (ptr, i64, i64, ptr)* @"{name}_split"' in text for name in split)
        copies = re.findall(r'define [^@]*@"(\w+)"\(.*?\n}\n', text, re.S)
        frozen = {name for name in copies if "freeze" in re.search(
            r'define [^@]*@"%s"\(.*?\n}\n' % name, text, re.S).group(0)}
        assert frozen == ({name + "_split" for name in split} if tupled else set())
    for m in (3, 4000):
        i = rng.integers(-512, 512, (m, 2048))
        np.testing.assert_array_equal(rows(x=x, i=i), np.take_along_axis(x, i % 512, axis=0))
        t = np.stack([rng.integers(-512, 512, m * 64), rng.integers(-2048, 2048, m * 64)], axis=1)
        np.testing.assert_array_equal(tuples(x=x, t=t), x[t[:, 0], t[:, 1]])
        i[m - 1, 7] = 512
        with pytest.raises(IndexError, match="512"):
            rows(x=x, i=i)


@pytest.mark.parametrize("dtype, index_dtype, axis, attribute", [
    ("float32", "int32", 1, "target-features"), ("int32", "int32", 1, "target-features"),
    ("float32", "int64", 1, None), ("float64", "int32", 1, "prefer-vector-width"),
    ("int64", "int64", 1, "prefer-vector-width"), ("int64", "int64", 0, None), ("float16", "int32", 1, None)])
def test_near_gathers_get_the_attributes_their_lanes_call_for(monkeypatch, dtype, index_dtype, axis, attribute):
    """Within the L2 cache, a gather gets the features that allow vector gathers only where it
    reads 32-bit data through 32-bit indices (``narrow_gathers``), and the vectoriser's
    lane-by-lane gathers prefer 256-bit vectors only for 64-bit data along a row
    (``wide_row_gathers``: along the last axis, not the first); results are numpy's."""
    from cinnlite.ir.schedule_cpu import narrow_gathers, wide_row_gathers
    from cinnlite.ir.transform import kernel_stages

    monkeypatch.setattr(cpu_backend, "far_gathers", lambda: (cpu._host()[2].replace(cpu.NO_GATHERS, ""), 1 << 20))
    shape = (64, 1024) if axis == 1 else (100, 16)
    b = cl.NetBuilder("near")
    x = b.create_input(dtype, shape, "x")
    i = b.create_input(index_dtype, (shape[0] * 2, shape[1]) if axis == 0 else (64, 3000), "i")
    exe = cl.compile(b.build([b.gather(x, i, axis=axis)]), target="cpu", cache=False)
    stages = [s for k in exe.lowered.kernels for s in kernel_stages(k)]
    assert any(map(narrow_gathers, stages)) == (attribute == "target-features")
    assert any(map(wide_row_gathers, stages)) == (attribute == "prefer-vector-width")
    text = exe.source("llvm")
    assert [a for a in ("target-features", "prefer-vector-width") if f'"{a}"=' in text] == [attribute] * bool(attribute)
    rng = np.random.default_rng(3)
    xs = (rng.standard_normal(shape) * 100).astype(dtype)
    n = shape[axis]
    idx = rng.integers(-n, n, (shape[0] * 2, shape[1]) if axis == 0 else (64, 3000)).astype(index_dtype)
    np.testing.assert_array_equal(exe(x=xs, i=idx), np.take_along_axis(xs, idx.astype(np.int64) % n, axis=axis))


def test_a_gather_through_fused_lets_is_seen_as_one():
    """A take of a take, fused: the outer gather's index is a Let of the inner one's value, and
    ``gather_reach`` sees through it (in time linear in the chain, ``test_compiler_scaling``)."""
    from cinnlite.ir.schedule_cpu import gather_reach
    from cinnlite.ir.transform import kernel_stages

    b = cl.NetBuilder("chain")
    x = b.create_input("float32", (4096,), "x")
    i = b.create_input("int32", (1000,), "i")
    j = b.create_input("int32", (50, 3000), "j")
    exe = cl.compile(b.build([b.take(x, b.take(i, j))]), target="cpu", cache=False)
    stages = [s for k in exe.lowered.kernels for s in kernel_stages(k)]
    assert max(map(gather_reach, stages)) == 4096 * 4
    xs = np.arange(4096, dtype=np.float32)
    iv = np.random.default_rng(1).integers(0, 4096, 1000).astype(np.int32)
    jv = np.random.default_rng(2).integers(0, 1000, (50, 3000)).astype(np.int32)
    np.testing.assert_array_equal(exe(x=xs, i=iv, j=jv), xs[iv[jv]])


def _update_order_values(rng, shape, dtype):
    """Updates whose combined bits depend on the order they are combined in: magnitudes far
    apart (a sum in another order rounds differently), signed zeros (max/min), small factors.
    float16 has no -0.0 here: numpy's float16 maximum orders zeros unlike its float32 one (and
    unlike the contract), so the reference would be wrong."""
    if np.dtype(dtype).kind == "i":
        return rng.integers(-3, 4, shape).astype(dtype)
    big, zero = (1e3, 2.0) if dtype == "float16" else (1e8, -0.0)
    return rng.choice(np.array([big, -big, 1.0, -1.0, 0.5, 0.0, zero, 3.0], dtype=dtype), shape)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32"])
@pytest.mark.parametrize("reduce", ["add", "max", "min", "mean", "mul", "none"])
@pytest.mark.parametrize("axis", [0, 1, 2])
def test_scatters_of_distinct_elements_vectorise_in_update_order(dtype, reduce, axis):
    """A scatter along any axis but the last updates distinct elements across its innermost
    loop (the last axis, which the update writes as it is): that loop is marked parallel for
    LLVM (``independent_scatter``); along the last axis it is not, nor where it writes two
    buffers (a mean). Either way every element
    gets its updates in row-major order of the index, bit for bit the reference's, with heavy
    duplication (a few targets per column), on one thread and two."""
    from cinnlite.ir.loopnest import For
    from cinnlite.ir.schedule_cpu import independent_scatter
    from cinnlite.ir.transform import kernel_stages, walk_stmt
    from reference import scatter

    rng = np.random.default_rng(axis * 7 + len(reduce))
    shape = (4, 5, 37)
    index_shape = tuple(40 if d == axis else n for d, n in enumerate(shape))
    x = _update_order_values(rng, shape, dtype)
    index = rng.integers(-shape[axis], shape[axis], index_shape)
    src = _update_order_values(rng, index_shape, dtype)
    if reduce == "none":  # one update per target: which of several wins is the order's
        index = np.broadcast_to(index.take([0], axis=axis) * 0 + 1, index_shape).copy()
    b = cl.NetBuilder("scatter_order")
    out = b.scatter(b.create_input(dtype, shape, "x"), b.create_input("int64", index_shape, "i"),
                    b.create_input(dtype, index_shape, "s"), axis=axis, reduce=reduce)
    program = b.build([out])
    want = scatter(x, index, src, axis=axis, reduce=reduce)
    for threads in (1, 2):
        exe = cl.compile(program, target="cpu", cache=False, threads=threads)
        got = exe(x=x, i=index, s=src)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    loops = [s for k in exe.lowered.kernels for st in kernel_stages(k) for s in walk_stmt(st) if isinstance(s, For)]
    marked = axis != 2 and reduce != "mean"  # a mean writes two buffers, a sum and a count
    assert any(map(independent_scatter, loops)) == marked
    assert ("llvm.loop.parallel_accesses" in exe.source("llvm")) == marked


def test_independent_scatter_needs_the_loop_to_walk_one_coordinate_of_one_element():
    """``independent_scatter`` on hand-made loops: an update of ``out[index[i], j]`` over the
    whole of dimension 1 is independent; not so where the loop runs past that dimension, where
    a Let rebinds the loop's variable, where a read goes through another view of the written
    memory, where the index reads no data, or where two buffers are written."""
    from cinnlite.dtypes import float32, int64
    from cinnlite.ir.loopnest import Buffer, Const, For, Let, Load, Reduce, Seq, Var
    from cinnlite.ir.schedule_cpu import independent_scatter

    out, index, src = Buffer("out", float32, (4, 8)), Buffer("index", int64, (8,)), Buffer("src", float32, (8,))
    i, j = Var("i0"), Var("i1")
    row = Load(index, (j,))

    def update(buffer=out, indices=(row, j), extent=8):
        return For(j, Const(extent, int64), Reduce(buffer, indices, Load(src, (j,)), "add"))

    assert independent_scatter(update())
    assert not independent_scatter(update(extent=16))
    assert not independent_scatter(update(indices=(i, j)))  # no data index: LLVM sees it itself
    rebound = update()
    assert not independent_scatter(For(j, rebound.extent, Let(((j, Const(0, int64)),), rebound.body)))
    view = Buffer("out", float32, (8, 4))
    read_through_view = Reduce(out, (row, j), Load(view, (row, j)), "none")
    assert not independent_scatter(For(j, Const(8, int64), read_through_view))
    second = Buffer("count", float32, (4, 8))
    assert not independent_scatter(For(j, Const(8, int64), Seq((update().body, update(second).body))))


@pytest.mark.parametrize("index_dtype, flag", [("int64", "i64"), ("int32", "i32"), ("int16", "i32")])
def test_the_index_flag_is_as_wide_as_the_indices_it_tests(index_dtype, flag):
    """A stage that tests int64 indices keeps a 64-bit flag (its vector tests then OR in without
    narrowing), one of narrower indices a 32-bit flag; either still reports the first bad
    position on one and two threads."""
    b = cl.NetBuilder("flag")
    x = b.create_input("float32", (300, 64), "x")
    prog = b.build([b.gather(x, b.create_input(index_dtype, (400, 64), "i"), axis=0)])
    rng = np.random.default_rng(3)
    xs, i = rng.random((300, 64)).astype(np.float32), rng.integers(-300, 300, (400, 64)).astype(index_dtype)
    for threads in (1, 2):
        exe = cl.compile(prog, cache=False, threads=threads)
        # The gather stage's flag, and the entry's record of a flagged stage (32 bits).
        assert sorted(re.findall(r"%\"?flagged\"? = alloca (i\d+)", exe.source("llvm"))) == sorted(["i32", flag])
        np.testing.assert_array_equal(exe(x=xs, i=i), np.take_along_axis(xs, i.astype(np.int64) % 300, axis=0))
        bad = i.copy()
        bad[399, 0], bad[250, 7] = 300, -301
        with pytest.raises(cl.IndexOutOfRangeError) as info:
            exe(x=xs, i=bad)
        assert info.value.position == (250, 7) and info.value.value == -301


@pytest.mark.parametrize("rows", [256, 300])
def test_an_int64_check_on_a_power_of_two_axis_flags_by_a_shift(rows):
    """On an axis of 256 rows the check ``uint64(v) + 256 >= 512`` ORs ``(uint64(v) + 256) >> 9``
    into the flag (no compare); on 300 rows it stays a compare. Either way every valid value
    passes and every adversarial one is reported at its position."""
    b = cl.NetBuilder("shifted_flag")
    x = b.create_input("float32", (rows, 16), "x")
    prog = b.build([b.gather(x, b.create_input("int64", (40, 16), "i"), axis=0)])
    exe = cl.compile(prog, cache=False, threads=1)
    assert bool(re.search(r"= lshr i64 %\S+, 9$", exe.source("llvm"), re.M)) == (rows == 256)
    xs = np.random.default_rng(5).random((rows, 16)).astype(np.float32)
    edges = np.zeros((40, 16), np.int64)
    edges[0, :4] = [-rows, rows - 1, -1, 0]
    np.testing.assert_array_equal(exe(x=xs, i=edges), np.take_along_axis(xs, edges % rows, axis=0))
    for value in (rows, -rows - 1, 2 * rows, -2 * rows - 1, 2**62, 2**63 - 1, 2**63 - rows, -2**63,
                  -2**63 + rows, -2**63 + rows - 1):
        bad = edges.copy()
        bad[17, 3] = value
        with pytest.raises(cl.IndexOutOfRangeError) as info:
            exe(x=xs, i=bad)
        assert info.value.position == (17, 3) and info.value.value == value


def test_gather_nd_components_and_uint64_indices_flag_by_a_shift_too():
    """gather_nd's per-component bounds fold to numbers (``simplify`` folds uint64 constants), so
    each component's test on a power-of-two axis is a shift (256 rows: ``>> 9``, 16 columns:
    ``>> 5``); uint64 indices test ``v >= 256`` as ``>> 8``. Bad values in either component, and
    uint64 values past the int64 range, are reported at their position."""
    b = cl.NetBuilder("shifted_flags")
    x = b.create_input("float32", (256, 16), "x")
    prog = b.build([b.gather_nd(x, b.create_input("int64", (40, 2), "t")),
                    b.take(x, b.create_input("uint64", (40,), "u"), axis=0)])
    exe = cl.compile(prog, cache=False, threads=1)
    assert {"5", "8", "9"} <= set(re.findall(r"= lshr i64 %\S+, (\d+)$", exe.source("llvm"), re.M))
    rng = np.random.default_rng(6)
    xs = rng.random((256, 16)).astype(np.float32)
    t = np.stack([rng.integers(-256, 256, 40), rng.integers(-16, 16, 40)], axis=1)
    u = rng.integers(0, 256, 40).astype(np.uint64)
    got_nd, got_take = exe(x=xs, t=t, u=u)
    np.testing.assert_array_equal(got_nd, xs[t[:, 0], t[:, 1]])
    np.testing.assert_array_equal(got_take, xs[u.astype(np.int64)])
    for component, value in ((0, 256), (0, -257), (0, 2**63 - 1), (0, -2**63), (1, 16), (1, -17), (1, 2**62)):
        bad = t.copy()
        bad[17, component] = value
        with pytest.raises(cl.IndexOutOfRangeError) as info:
            exe(x=xs, t=bad, u=u)
        assert info.value.position == (17, component) and info.value.value == value
    for value in (256, 2**63, 2**64 - 1):
        bad = u.copy()
        bad[17] = value
        with pytest.raises(cl.IndexOutOfRangeError) as info:
            exe(x=xs, t=t, u=bad)
        assert info.value.position == (17,) and info.value.value == value


def test_offsets_that_read_data_are_32_bit_below_2_31_elements():
    """The gather's load and the scatter's update (their coordinates read the index) compute
    their offsets in 32 bits where the buffer has fewer than 2**31 elements, every coordinate
    being inside its dimension; at 2**31 elements every offset stays 64-bit. Results, the
    first and last rows and negative indices included, equal numpy's."""
    def program(rows, ops=("gather", "scatter")):
        b = cl.NetBuilder("narrow_offsets")
        x = b.create_input("float32", (rows, 64), "x")
        i = b.create_input("int32", (40, 64), "i")
        u = b.create_input("float32", (40, 64), "u")
        results = {"gather": lambda: b.gather(x, i, axis=0),
                   "scatter": lambda: b.scatter(x, i, u, axis=0, reduce="add")}
        return b.build([results[op]() for op in ops])

    def narrowed(prog):
        return len(re.findall(r"zext i32 %\S+ to i64", cl.compile(prog, cache=False, threads=1).source("llvm")))

    assert narrowed(program(2**25)) == 0
    # The gather's load, twice: in the block of plain positions and in the guarded one
    # (``version_checked_loops``); the scatter's read and write of its target.
    assert (narrowed(program(300, ["gather"])), narrowed(program(300, ["scatter"]))) == (2, 2)
    exe = cl.compile(program(300), cache=False, threads=1)
    rng = np.random.default_rng(8)
    xs, us = rng.random((300, 64)).astype(np.float32), rng.random((40, 64)).astype(np.float32)
    i = rng.integers(-300, 300, (40, 64)).astype(np.int32)
    i[0, :4], i[39, -4:] = [-300, 299, -1, 0], [299, -300, 0, -1]
    gathered, scattered = exe(x=xs, i=i, u=us)
    np.testing.assert_array_equal(gathered, np.take_along_axis(xs, i % 300, axis=0))
    expected = xs.copy()
    np.add.at(expected, (i.astype(np.int64) % 300, np.arange(64)[None, :].repeat(40, 0)), us)
    np.testing.assert_allclose(scattered, expected, rtol=1e-6)


@pytest.mark.parametrize("move_bytes", [32, 64])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int8", "complex64", "bool"])
def test_short_rows_copy_as_runs_of_moves(dtype, move_bytes, monkeypatch):
    """A take of rows of up to eight moves copies each row as a run of vector moves (byte
    vectors as wide as the host's vector registers, at least 32: forced to 32 and 64 here,
    whatever this host has) along the first and a middle axis, odd counts too; longer rows and
    booleans keep their loop. Results, with negative and bad indices under every mode, equal
    numpy's."""
    monkeypatch.setattr(cpu_backend, "vector_bytes", lambda: move_bytes)
    rng = np.random.default_rng(3)
    for width in (2, 3, 7, 13, 61, 64, 65, 120, 300):
        for axis, shape in ((0, (9, width)), (1, (3, 9, width))):
            b = cl.NetBuilder("row_copy")
            x = b.create_input(dtype, shape, "x")
            i = b.create_input("int64", (11,), "i")
            outs = [b.take(x, i, axis=axis, mode=mode) for mode in ("raise", "clip", "wrap")]
            exe = cl.compile(b.build(outs), cache=False, threads=1)
            nbytes = width * np.dtype(dtype).itemsize
            copies = nbytes <= ROW_COPY_MOVES * move_bytes and dtype != "bool"
            llvm = exe.source("llvm")
            assert (" x i8>" in llvm) == copies and "llvm.memcpy" not in llvm, (width, axis)
            assert (f"<{move_bytes} x i8>" in llvm) == (copies and nbytes >= move_bytes), (width, axis)
            xs = (rng.random(shape) * 100 - 50).astype(dtype)
            good = rng.integers(-9, 9, 11)
            good[:2] = [-9, 8]
            for got, mode in zip(exe(x=xs, i=good), ("wrap", "clip", "wrap")):  # raise: as wrap when valid
                np.testing.assert_array_equal(got, np.take(xs, good, axis=axis, mode=mode))
            wild = rng.integers(-30, 30, 11)
            with pytest.raises(cl.IndexOutOfRangeError):
                exe(x=xs, i=wild if np.any((wild < -9) | (wild >= 9)) else wild + 40)


def test_rows_of_a_symbolic_width_copy_as_one_memcpy_of_their_size(cache_dir):
    """A take of rows whose width is a symbol copies each row with one ``llvm.memcpy`` of the
    call's row size (a libc call where the size is not known), along the first and a middle
    axis; results equal numpy's for widths from 1 to 300, and the build loaded from the disk
    cache in a new process gives them too."""
    b = cl.NetBuilder("symbolic_rows")
    x = b.create_input("float32", (3, "N", "W"), "x")
    i = b.create_input("int64", ("M",), "i")
    exe = cl.compile(b.build([b.take(x, i, axis=1), b.take(b.reshape(x, (-1, "W")), i, axis=0)]), threads=1)
    assert "llvm.memcpy" in exe.source("llvm")
    rng = np.random.default_rng(4)
    for width in (1, 2, 13, 61, 64, 300):
        xs = rng.random((3, 9, width)).astype(np.float32)
        idx = rng.integers(-9, 9, 20)
        middle, first = exe(x=xs, i=idx)
        np.testing.assert_array_equal(middle, np.take(xs, idx, axis=1, mode="wrap"))
        np.testing.assert_array_equal(first, np.take(xs.reshape(-1, width), idx, axis=0, mode="wrap"))
    script = ("import numpy as np, cinnlite as cl\n"
              "b = cl.NetBuilder('symbolic_rows')\n"
              "x = b.create_input('float32', (3, 'N', 'W'), 'x')\n"
              "i = b.create_input('int64', ('M',), 'i')\n"
              "outs = [b.take(x, i, axis=1), b.take(b.reshape(x, (-1, 'W')), i, axis=0)]\n"
              "exe = cl.compile(b.build(outs), threads=1)\n"
              "xs = np.arange(3 * 5 * 13, dtype=np.float32).reshape(3, 5, 13)\n"
              "m, f = exe(x=xs, i=np.array([4, -1, 0]))\n"
              "assert (m == xs[:, [4, 4, 0]]).all() and (f == xs.reshape(-1, 13)[[4, 14, 0]]).all()\n"
              "print('ok')\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "CINNLITE_CACHE_DIR": str(cache_dir)})
    assert done.returncode == 0, done.stderr


def _gather_loop_extents(exe) -> list:
    """The extents of the loops of the first stage (the gather; a deferred check follows)."""
    lines = exe.source("lowered").splitlines()
    gather = lines[:next((k for k, line in enumerate(lines) if "deferred_check" in line), len(lines))]
    return [int(n) for line in gather for n in re.findall(r"for \S+ in 0\.\.(\d+) \{", line)]


def _middle_gather(rows, inner, index_dtype, mode="raise"):
    b = cl.NetBuilder("middle_gather")
    x = b.create_input("float32", (5, rows, inner), "x")
    i = b.create_input(index_dtype, (5, 17, inner), "i")
    return b.build([b.gather(x, i, axis=1, mode=mode)])


@pytest.mark.parametrize("inner", [2, 13, 16, 63])
@pytest.mark.parametrize("index_dtype", ["int64", "int32", "uint8"])
def test_short_element_loops_run_as_one_loop(inner, index_dtype):
    """A gather along a middle axis whose inner extent is short runs its two inner loops as one
    loop over their product (``collapse_short_loops``), through every index dtype; results
    equal numpy's with the first, last and negative indices, and a bad index is reported at its
    own position, as with the loops apart."""
    exe = cl.compile(_middle_gather(7, inner, index_dtype), cache=False, threads=1)
    if inner == 16 and index_dtype == "int64":  # a whole_vector_loop, versioned per row
        assert _gather_loop_extents(exe) == [5, 17, 16, 16]
    elif inner in (13, 63) and index_dtype == "int64" and cpu_backend.masked_vectors():
        # a masked_vector_loop (63: versioned), where this host runs them as masked vectors
        assert _gather_loop_extents(exe) == [5, 17] + [inner] * (1 + (inner >= 16))
    else:
        assert _gather_loop_extents(exe) in ([5, 17 * inner], [5 * 17 * inner])
    rng = np.random.default_rng(inner)
    xs = rng.random((5, 7, inner)).astype(np.float32)
    low = 0 if index_dtype == "uint8" else -7
    i = rng.integers(low, 7, (5, 17, inner)).astype(index_dtype)
    i[0, 0, 0], i[4, 16, inner - 1] = low, 6
    np.testing.assert_array_equal(exe(x=xs, i=i), np.take_along_axis(xs, i.astype(np.int64) % 7, axis=1))
    i[3, 9, inner // 2] = 7
    with pytest.raises(cl.IndexOutOfRangeError, match=re.escape(f"position (3, 9, {inner // 2})")):
        exe(x=xs, i=i)


@pytest.mark.parametrize("inner", [16, 32])
@pytest.mark.parametrize("mode", ["raise", "clip", "wrap", "fill"])
def test_short_loops_of_int64_indices_run_as_whole_vectors(inner, mode):
    """A short inner loop of a power-of-two count of 16 or more that gathers through int64
    indices keeps its loop, vectorised as one vector of its count (``whole_vector_loop``); the
    same loop through int32 indices is collapsed. Results are numpy's in every mode."""
    exe = cl.compile(_middle_gather(7, inner, "int64", mode), cache=False, threads=1)
    assert _gather_loop_extents(exe)[:3] == [5, 17, inner]
    assert f'!"llvm.loop.vectorize.width", i32 {inner} ' in exe.source("llvm")
    narrow = cl.compile(_middle_gather(7, inner, "int32", mode), cache=False, threads=1)
    assert _gather_loop_extents(narrow) in ([5, 17 * inner], [5 * 17 * inner])
    rng = np.random.default_rng(inner)
    xs = rng.random((5, 7, inner)).astype(np.float32)
    i = rng.integers(-7, 7, (5, 17, inner)) if mode == "raise" else rng.integers(-20, 20, (5, 17, inner))
    resolved = {"raise": i % 7, "wrap": i % 7, "clip": np.clip(i, 0, 6), "fill": np.where((i >= -7) & (i < 7), i % 7, 0)}
    expected = np.take_along_axis(xs, resolved[mode], axis=1)
    if mode == "fill":
        expected = np.where((i >= -7) & (i < 7), expected, 0)
    np.testing.assert_array_equal(exe(x=xs, i=i), expected)
    np.testing.assert_array_equal(narrow(x=xs, i=i.astype(np.int32)), expected)


@pytest.mark.parametrize("mode", ["raise", "clip", "wrap", "fill"])
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64"])
def test_odd_short_loops_of_int64_indices_run_as_masked_vectors(monkeypatch, dtype, mode):
    """A short inner loop of an odd count above 8 that gathers 4- or 8-byte data through int64
    indices keeps its loop, vectorised in 16-lane vectors, the last one masked
    (``masked_vector_loop``, made so whatever this host is); float16 data, int32 indices, and
    a host without cheap masked gathers (no AVX-512, or microcoded gathers) collapse it.
    Results are numpy's in every mode, along axis 0 and a middle axis, a bad index reported at
    its position."""
    monkeypatch.setattr(cpu_backend, "masked_vectors", lambda: True)
    masked = np.dtype(dtype).itemsize >= 4
    rng = np.random.default_rng(len(dtype) + len(mode))
    for axis, x_shape, i_shape in ((0, (9, 61), (23, 61)), (1, (3, 9, 13), (3, 23, 13))):
        inner = x_shape[-1]
        b = cl.NetBuilder("odd")
        x = b.create_input(dtype, x_shape, "x")
        i = b.create_input("int64", i_shape, "i")
        exe = cl.compile(b.build([b.gather(x, i, axis=axis, mode=mode)]), target="cpu", cache=False, threads=1)
        text = exe.source("llvm")
        assert (inner in _gather_loop_extents(exe)) == masked
        assert ("llvm.loop.vectorize.predicate.enable" in text) == masked
        assert (f'!"llvm.loop.vectorize.width", i32 16 ' in text) == masked
        xs = (rng.standard_normal(x_shape) * 50).astype(dtype)
        idx = rng.integers(-9, 9, i_shape) if mode == "raise" else rng.integers(-30, 30, i_shape)
        resolved = {"raise": idx % 9, "wrap": idx % 9, "clip": np.clip(idx, 0, 8),
                    "fill": np.where((idx >= -9) & (idx < 9), idx % 9, 0)}[mode]
        expected = np.take_along_axis(xs, resolved, axis=axis)
        if mode == "fill":
            expected = np.where((idx >= -9) & (idx < 9), expected, 0)
        np.testing.assert_array_equal(exe(x=xs, i=idx), expected)
        if mode == "raise":
            bad = (0,) * (len(i_shape) - 2) + (17, inner - 1)
            idx[bad] = 9
            with pytest.raises(cl.IndexOutOfRangeError, match=re.escape(f"position {bad}")):
                exe(x=xs, i=idx)
    narrow = cl.compile(_middle_gather(7, 13, "int32"), cache=False, threads=1)
    assert _gather_loop_extents(narrow) in ([5, 17 * 13], [5 * 17 * 13])
    monkeypatch.undo()
    for unmasked_host in (lambda: monkeypatch.setattr(cpu_backend, "vector_masks", lambda: False),
                          lambda: _lane_gather_host(monkeypatch)):
        unmasked_host()
        collapsed = cl.compile(_middle_gather(7, 13, "int64"), cache=False, threads=1)
        assert _gather_loop_extents(collapsed) in ([5, 17 * 13], [5 * 17 * 13])
        assert "predicate.enable" not in collapsed.source("llvm")
        monkeypatch.undo()


@pytest.mark.parametrize("mode", ["clip", "wrap", "fill"])
def test_collapsed_loops_resolve_every_mode(mode):
    """Out-of-range values through a collapsed loop, under each mode, as numpy resolves them
    (``fill``: zeros where the value addresses nothing)."""
    exe = cl.compile(_middle_gather(7, 7, "int64", mode), cache=False, threads=1)
    assert _gather_loop_extents(exe) == [5, 119]
    rng = np.random.default_rng(5)
    xs = rng.random((5, 7, 7)).astype(np.float32)
    i = rng.integers(-20, 20, (5, 17, 7))
    if mode == "fill":
        valid = (i >= -7) & (i < 7)
        expected = np.where(valid, np.take_along_axis(xs, np.where(valid, i % 7, 0), axis=1), 0)
    else:
        expected = np.take_along_axis(xs, np.clip(i, 0, 6) if mode == "clip" else i % 7, axis=1)
    np.testing.assert_array_equal(exe(x=xs, i=i), expected)


def _lane_gather_host(monkeypatch):
    """The CPU backend as on a host whose vector gathers are microcoded (a Zen): gathers within
    the L2 cache (1 MB here) are built lane by lane."""
    monkeypatch.setattr(cpu_backend, "far_gathers", lambda: (cpu._host()[2].replace(cpu.NO_GATHERS, ""), 1 << 20))


def _gather_stage_text(exe) -> str:
    """The LLVM text of the gather's stage (the first function after main)."""
    return re.search(r'define [^@]*@"k_\w+_s0"\(.*?\n}\n', exe.source("llvm"), re.S).group(0)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64", "complex64"])
@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_gathers_in_collapsed_loops_add_up_their_lane_coordinates_first(monkeypatch, dtype, index_dtype):
    """Where gathers are built lane by lane, a gather in a collapsed loop (its index beside the
    loop's column ``w % E``) of 32-bit or wider elements freezes the sum of those coordinates
    and its loop is not interleaved (``gathers_at_divided_position``); narrower elements, and a
    gather of 32-bit data through 32-bit indices (vector gathers), keep LLVM's defaults.
    Results are numpy's, in every mode, a bad index reported at its position."""
    _lane_gather_host(monkeypatch)
    rng = np.random.default_rng(len(dtype) + len(index_dtype))
    applies = np.dtype(dtype).itemsize >= 4 and not (np.dtype(dtype).itemsize == 4 and index_dtype == "int32"
                                                       and dtype != "complex64")
    for inner, mode in ((8, "raise"), (13, "wrap"), (61, "clip"), (8, "fill")):
        b = cl.NetBuilder("middle")
        x = b.create_input(dtype, (4, 9, inner), "x")
        i = b.create_input(index_dtype, (4, 23, inner), "i")
        exe = cl.compile(b.build([b.gather(x, i, axis=1, mode=mode)]), target="cpu", cache=False, threads=1)
        assert _gather_loop_extents(exe)[-1] == 23 * inner  # collapsed
        text = _gather_stage_text(exe)
        assert ("freeze" in text, "llvm.loop.interleave.count" in exe.source("llvm")) == (applies, applies)
        xs = (rng.standard_normal((4, 9, inner)) * 50).astype(dtype)
        idx = rng.integers(-20, 20, (4, 23, inner))
        if mode == "raise":
            idx = np.clip(idx, -9, 8)
            idx[0, 0, 0], idx[3, 22, inner - 1] = -9, 8
        resolved = {"raise": idx % 9, "wrap": idx % 9, "clip": np.clip(idx, 0, 8), "fill": np.where(
            (idx >= -9) & (idx < 9), idx % 9, 0)}[mode]
        expected = np.take_along_axis(xs, resolved, axis=1)
        if mode == "fill":
            expected = np.where((idx >= -9) & (idx < 9), expected, 0)
        np.testing.assert_array_equal(exe(x=xs, i=idx.astype(index_dtype)), expected)
        if mode == "raise":
            idx[2, 5, 3] = 9
            with pytest.raises(cl.IndexOutOfRangeError, match=re.escape("position (2, 5, 3)")):
                exe(x=xs, i=idx.astype(index_dtype))


def test_the_collapsed_gather_rules_need_a_divided_column_and_lane_gathers(monkeypatch):
    """The rules of ``gathers_at_divided_position`` hold for a gather whose column divides the
    loop (along a middle axis, collapsed), not for one whose column is the loop variable (along
    axis 0 or the last axis), nor where the host's vector gathers are not microcoded; through
    the Lets of a fused chain (a gather of a gather's values) too, with numpy's results."""
    from cinnlite.ir.schedule_cpu import interleave_once
    from cinnlite.ir.transform import kernel_stages, walk_stmt

    def build(axis, shape, chained=False):
        b = cl.NetBuilder("g")
        x = b.create_input("float32", shape, "x")
        i = b.create_input("int64", shape, "i")
        index = b.gather(i, i, axis=axis) if chained else i
        return b.build([b.gather(x, index, axis=axis)])

    def once(exe):
        return any(interleave_once(loop) for k in exe.lowered.kernels for s in kernel_stages(k)
                   for loop in walk_stmt(s) if isinstance(loop, cl.ir.loopnest.For))

    _lane_gather_host(monkeypatch)
    rng = np.random.default_rng(2)
    middle, rows = (6, 40, 8), (40, 64)
    for axis, shape, chained, applies in ((1, middle, False, True), (1, middle, True, True),
                                          (0, rows, False, False), (1, rows, False, False)):
        xs, idx = rng.random(shape).astype(np.float32), rng.integers(0, min(shape), shape)
        exe = cl.compile(build(axis, shape, chained), target="cpu", cache=False, threads=1)
        assert once(exe) == applies and ("freeze" in exe.source("llvm")) == applies
        index = np.take_along_axis(idx, idx, axis=axis) if chained else idx
        np.testing.assert_array_equal(exe(x=xs, i=idx), np.take_along_axis(xs, index, axis=axis))
    monkeypatch.setattr(cpu_backend, "far_gathers", lambda: None)
    text = cl.compile(build(1, middle), target="cpu", cache=False, threads=1).source("llvm")
    assert "freeze" not in text and "interleave.count" not in text
