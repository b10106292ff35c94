"""The CUDA backend's text and IR: what the GPU passes produce and what the renderer writes.

Apart from the stages of "cuda-emu", these tests need neither a GPU nor NVRTC nor a C++
compiler: ``target="cuda"`` compiles to CUDA C on any machine, and only running it needs a GPU.
"""
from __future__ import annotations

import re

import jinja2
import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder
from cinnlite.codegen import c_family
from cinnlite.codegen import cuda as cuda_codegen
from cinnlite.errors import CompileError
from cinnlite.ir.loopnest import For, Reduce, Store
from cinnlite.ir.lower import lower_program
from cinnlite.backends.gpu import GPU_PIPELINE, GPU_PIPELINE_DETERMINISTIC
from cinnlite.ir.passes import run_pipeline
from cinnlite.ir.schedule_gpu import CHECK_SERIAL_ITEMS, grid_chain, verify_gpu
from cinnlite.ir.transform import top_level, walk_stmt


def gather_program(shape=(4, 3), index_shape=(2, 3), mode="raise"):
    b = NetBuilder("g")
    x = b.create_input("float32", shape, "x")
    i = b.create_input("int64", index_shape, "i")
    b.gather(x, i, axis=0, mode=mode)
    return b.build()


def scatter_program(reduce="none", dtype="float32", xshape=(5, 4), ishape=(40, 4), axis=0, mode="clip"):
    b = NetBuilder("s")
    x = b.create_input(dtype, xshape, "x")
    i = b.create_input("int32", ishape, "i")
    u = b.create_input(dtype, ishape, "u")
    b.scatter(x, i, u, axis=axis, reduce=reduce, mode=mode)
    return b.build()


def kernels_of(source: str) -> list:
    return re.findall(r'extern "C" __global__ void __launch_bounds__\(\d+\)\n(\w+)\(', source)


def gpu_kernels(program, deterministic=False):
    lowered = lower_program(program)
    pipeline = GPU_PIPELINE_DETERMINISTIC if deterministic else GPU_PIPELINE
    return run_pipeline(lowered, pipeline).kernels


# -- templates ------------------------------------------------------------------------------------


def test_templates_share_one_strict_environment():
    env = c_family.TEMPLATES
    assert env.undefined is jinja2.StrictUndefined
    with pytest.raises(jinja2.UndefinedError):
        env.get_template("kernel.cu.j2").render(name="k")  # everything else missing


def test_every_kernel_has_launch_bounds_64_bit_indexing_and_a_grid_stride_loop():
    exe = cl.compile(gather_program(), target="cuda")
    src = exe.source("cuda")
    names = kernels_of(src)
    assert names == [l.name for l in exe.module.launches] and names
    for name in names:
        body = src[src.index(f"\n{name}("):]
        body = body[:body.index("\n}\n")]
        assert "const long long cl_stride = (long long)gridDim.x * (long long)blockDim.x;" in body
        assert ("long long cl_first = (long long)blockIdx.x * (long long)blockDim.x + "
                "(long long)threadIdx.x;") in body
        unroll = cuda_codegen.ITEMS_IN_FLIGHT
        # Groups of ITEMS_IN_FLIGHT consecutive grid-stride items while whole groups remain, then one at a time.
        assert (f"for (; cl_first + {unroll - 1}LL * cl_stride < cl_items; cl_first += {unroll}LL * cl_stride)"
                in body)
        calls = re.findall(r"cl_body\((cl_first(?: \+ \d+LL \* cl_stride)?)\);", body)
        assert calls == ["cl_first"] + [f"cl_first + {u}LL * cl_stride" for u in range(1, unroll)] + ["cl_first"]
        assert "for (; cl_first < cl_items; cl_first += cl_stride)" in body
    # Every index variable is 64-bit; no 32-bit loop counters anywhere.
    declared = re.findall(r"const (\w[\w ]*?) ([ci]\d+) = cl_item", src)
    assert declared and all(t == "long long" for t, _ in declared)
    assert not re.search(r"\bfor \(int\b", src)


def test_sizes_past_2_31_render_as_64_bit_constants():
    # Rendering only: nothing is allocated, so the shapes may be huge.
    b = NetBuilder("big")
    x = b.create_input("float32", (3, 2**31 + 3), "x")
    i = b.create_input("int64", (2, 2**31 + 3), "i")
    b.gather(x, i, axis=0, mode="clip")
    exe = cl.compile(b.build(), target="cuda")
    src = exe.source("cuda")
    items = 2 * (2**31 + 3)
    assert f"const long long cl_items = {items}LL;" in src
    assert f"cl_item / {2**31 + 3}LL" in src and f"* {2**31 + 3}LL" in src
    assert exe.module.launches[0].items == items


def test_launch_plan_describes_every_launch_in_order():
    exe = cl.compile(scatter_program("add", mode="raise"), target="cuda")
    src = exe.source("cuda")
    plan = re.findall(r"^//\s+\d+\. (\w+)  items=(\d+)  args=\(([^)]*)\)", src, re.M)
    assert [(n, int(k)) for n, k, _ in plan] == [(l.name, l.items) for l in exe.module.launches]
    for (_, _, args), launch in zip(plan, exe.module.launches):
        expected = list(launch.buffers) + (["errors"] if launch.errors else [])
        assert [a.strip() for a in args.split(",")] == expected
    assert "error buffer: 1 x 4 int64" in src


def test_raise_mode_records_the_smallest_position_in_the_error_buffer():
    src = cl.compile(gather_program(mode="raise"), target="cuda").source("cuda")
    assert "while (atomicCAS(lock, 0ULL, 1ULL) != 0ULL)" in src
    assert re.search(r"cl_report_index_error\(cl_errors, 0, \(\(c0 \* 3LL\) \+ c1\), i\[c0 \* 3LL \+ c1\]\);", src)
    assert "long long* __restrict__ cl_errors" in src
    # The compute after the check still bounds the index, so no mode reads out of bounds: a
    # clamp, or on this power-of-two axis (size 4) a modulo brought into [0, 4).
    assert re.search(r"x\[\(\(\(i\[[^]]+\] % 4LL\) < 0LL\) \? \(\(i\[[^]]+\] % 4LL\) \+ 4LL\) : "
                     r"\(i\[[^]]+\] % 4LL\)\)", src) or "cl_min_i64(cl_max_i64(" in src


def test_read_only_buffers_are_const_and_restrict():
    src = cl.compile(gather_program(mode="clip"), target="cuda").source("cuda")
    assert "const float* __restrict__ x" in src
    assert "const long long* __restrict__ i" in src
    assert re.search(r"[^t] float\* __restrict__ gather_0", src)


def test_buffer_names_that_are_not_c_identifiers_are_renamed():
    b = NetBuilder("names")
    x = b.create_input("float32", (4,), "int")
    i = b.create_input("int32", (3,), "my.index/0")
    b.take(x, i, mode="wrap", name="i0")  # clashes with a loop variable name
    src = cl.compile(b.build(), target="cuda").source("cuda")
    assert "const float* __restrict__ b_int" in src
    assert "const int* __restrict__ my_index_0" in src
    assert "float* __restrict__ i0_" in src


def test_helpers_are_emitted_only_when_used():
    plain = cl.compile(gather_program(mode="clip"), target="cuda").source("cuda")
    assert "cl_h2f" not in plain and "atomicCAS" not in plain
    half = cl.compile(scatter_program("add", dtype="float16"), target="cuda").source("cuda")
    assert "cl_half cl_f2h(float f)" in half and "float cl_h2f(cl_half h)" in half, half[:3000]
    assert "void cl_atomic_add_f16(cl_half* p, cl_half v)" in half and "atomicCAS(w, assumed, desired)" in half


@pytest.mark.parametrize("reduce,dtype,native", [
    ("add", "float32", "atomicAdd(p, v)"), ("add", "float64", "atomicAdd(p, v)"),
    ("add", "int64", "atomicAdd((unsigned long long*)p, (unsigned long long)v)"),
    ("max", "int32", "atomicMax(p, v)"), ("min", "int64", "atomicMin(p, v)"),
    ("mul", "float32", None), ("max", "float64", None), ("min", "int8", None), ("add", "uint8", None),
    ("mul", "int16", None),
])
def test_reductions_are_atomic_by_default(reduce, dtype, native):
    src = cl.compile(scatter_program(reduce, dtype=dtype), target="cuda").source("cuda")
    sfx = cuda_codegen._SUFFIX[dtype]
    assert f"cl_atomic_{reduce}_{sfx}(&" in src
    if native:
        assert native in src
    else:
        assert "atomicCAS(w, assumed, desired)" in src


def test_float_constants_are_exact():
    b = NetBuilder("consts")
    for dtype, value in [("float32", 0.1), ("float64", 0.1), ("float16", 0.1), ("float32", float("inf")),
                         ("float64", float("-inf")), ("float32", float("nan")), ("int64", -2**63), ("int8", -5)]:
        b.fill_constant((2,), value, dtype)
    src = cl.compile(b.build(), target="cuda").source("cuda")
    assert f"= {float(np.float32(0.1))!r}f;" in src           # the float32 nearest to 0.1
    assert "= 0.1;" in src
    assert f"((cl_half)0x{int(np.float16(0.1).view(np.uint16)):04x}u)" in src
    assert "__uint_as_float(0x7f800000u)" in src
    assert "__longlong_as_double((long long)0xfff0000000000000ULL)" in src
    assert "(-9223372036854775807LL - 1LL)" in src
    assert "((signed char)-5)" in src


# -- the GPU passes -------------------------------------------------------------------------------


def test_scatter_without_reduction_gets_a_winner_per_element():
    (kernel,) = gpu_kernels(scatter_program("none"))
    verify_gpu(kernel)
    winner = next(t for t in kernel.temps if t.name.endswith("__winner"))
    assert winner.dtype.name == "int32" and winner.shape == (5, 4)
    reduces = [s for s in walk_stmt(kernel.body) if isinstance(s, Reduce)]
    assert reduces and all(r.combine == "max" and r.buffer == winner for r in reduces)
    launches = top_level(kernel.body)
    # copy + winner reset fused, then claim, then the winners' writes
    assert len(launches) == 3
    first = [s for s in walk_stmt(launches[0]) if isinstance(s, Store)]
    assert {s.buffer.name for s in first} == {"scatter_0", winner.name}
    writes = [s for s in walk_stmt(launches[2]) if isinstance(s, Store)]
    assert [s.buffer.name for s in writes] == ["scatter_0"]


def test_a_huge_update_space_gets_an_int64_winner():
    b = NetBuilder("huge")
    x = b.create_input("float32", (3,), "x")
    i = b.create_input("int64", (2**31, 1), "i")
    u = b.create_input("float32", (2**31,), "u")
    b.scatter_nd(x, i, u, mode="wrap")
    (kernel,) = gpu_kernels(b.build())
    winner = next(t for t in kernel.temps if t.name.endswith("__winner"))
    assert winner.dtype.name == "int64"


def test_deterministic_float_reductions_run_short_chains_serially_in_row_major_order():
    (kernel,) = gpu_kernels(scatter_program("add", ishape=(16, 4)), deterministic=True)
    launches = top_level(kernel.body)
    update = launches[-1]
    grid, body = grid_chain(update)
    # The column variable separates targets: it is the grid; the row loop runs inside, serially.
    assert len(grid) == 1 and grid[0].extent.value == 4
    inner = [s for s in walk_stmt(body) if isinstance(s, For)]
    assert len(inner) == 1 and inner[0].kind == "serial" and inner[0].extent.value == 16
    assert not any(isinstance(s, Reduce) for s in walk_stmt(update))
    # Without deterministic=True the same nest is atomic.
    (kernel,) = gpu_kernels(scatter_program("add"))
    assert any(isinstance(s, Reduce) and s.combine == "add" for s in walk_stmt(kernel.body))


def test_deterministic_float_reductions_sort_long_chains_by_target():
    (kernel,) = gpu_kernels(scatter_program("add"), deterministic=True)  # chains of 40 rows
    launches = top_level(kernel.body)
    assert len(launches) > 3
    # The last launch combines runs of updates: one work item per update (40 x 4), no serial loop
    # of 40 and no float atomic anywhere.
    grid, body = grid_chain(launches[-1])
    assert [l.extent.value for l in grid] == [160]
    assert not any(isinstance(s, For) and s.kind == "serial" and getattr(s.extent, "value", 0) == 40
                   for s in walk_stmt(kernel.body))
    assert not any(isinstance(s, Reduce) and s.buffer.dtype.is_float for s in walk_stmt(kernel.body))


def test_deterministic_integer_reductions_stay_atomic():
    (kernel,) = gpu_kernels(scatter_program("add", dtype="int32"), deterministic=True)
    assert any(isinstance(s, Reduce) and s.combine == "add" for s in walk_stmt(kernel.body))


def test_deterministic_reduction_without_a_separating_loop_is_sorted_not_serial():
    b = NetBuilder("nd")
    x = b.create_input("float32", (5,), "x")
    i = b.create_input("int64", (70, 1), "i")
    u = b.create_input("float32", (70,), "u")
    b.scatter_nd(x, i, u, reduce="add", mode="wrap")
    (kernel,) = gpu_kernels(b.build(), deterministic=True)
    grid, body = grid_chain(top_level(kernel.body)[-1])
    assert [l.extent.value for l in grid] == [70]  # every update a work item, not one thread
    assert "cl_atomic_add_f32" in cl.compile(b.build(), target="cuda").source("cuda")
    src = cl.compile(b.build(), target="cuda", deterministic=True).source("cuda")
    assert "cl_atomic_add_f32" not in src and "deterministic reductions" in src


def _update_launch(program):
    (kernel,) = gpu_kernels(program)
    return kernel, top_level(kernel.body)[-1]


def test_short_serial_chains_run_ordered_without_atomics_or_winner():
    for reduce in ("none", "add", "max"):
        kernel, update = _update_launch(scatter_program(reduce, ishape=(16, 4)))
        grid, body = grid_chain(update)
        assert [l.extent.value for l in grid] == [4]
        assert not any(isinstance(s, Reduce) for s in walk_stmt(kernel.body)), reduce
        assert not any(t.name.endswith("__winner") for t in kernel.temps)


def test_few_updates_into_a_huge_output_need_no_winner_buffer():
    # 40 updates, 2**31 + 3 output elements: a winner per element would cost 8 GiB.
    b = NetBuilder("few")
    x = b.create_input("uint8", (4, 2**29 + 1), "x")
    i = b.create_input("int64", (4, 10), "i")
    u = b.create_input("uint8", (4, 10), "u")
    b.scatter(x, i, u, axis=1, mode="wrap")
    kernel, update = _update_launch(b.build())
    assert not kernel.temps and [l.extent.value for l in grid_chain(update)[0]] == [4]


def test_many_independent_chains_run_ordered():
    kernel, update = _update_launch(scatter_program("none", xshape=(3, 2**17), ishape=(100, 2**17)))
    assert [l.extent.value for l in grid_chain(update)[0]] == [2**17] and not kernel.temps


def gather_nd_program(depth: int, tuples=6):
    b = NetBuilder("gnd")
    x = b.create_input("float32", (2,) * depth, "x")
    i = b.create_input("int64", (tuples, depth), "i")
    b.gather_nd(x, i)
    return b.build()


def test_a_check_of_a_symbolic_count_of_tuples_fuses_into_the_gather_too():
    """The tuple count "M" is known only per call: the check's grid (M) and the gather's compare
    as the same expression, so they share one launch, and every call size reports the smallest
    bad position as the CPU does."""
    program = gather_nd_program(3, tuples="M")
    (kernel,) = gpu_kernels(program)
    (launch,) = top_level(kernel.body)
    assert [(l.kind, l.extent.value) for l in walk_stmt(grid_chain(launch)[1]) if isinstance(l, For)] == [("serial", 3)]
    x = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    cpu, emu = cl.compile(program, target="cpu"), cl.compile(program, target="cuda-emu")
    for m in (3, 5, 33):  # the two bad tuples differ: m // 2 < m - 1
        index = np.random.default_rng(m).integers(-2, 2, (m, 3))
        assert np.array_equal(np.asarray(emu(x=x, i=index)), x[tuple(index.T)])
        index[m // 2, 2], index[m - 1, 0] = 2, -3
        messages = []
        for exe in (cpu, emu):
            with pytest.raises(cl.IndexOutOfRangeError) as err:
                exe(x=x, i=index)
            messages.append(str(err.value))
        assert messages[0] == messages[1] and f"position ({m // 2}, 2)" in messages[0]


@pytest.mark.parametrize("depth", [2, CHECK_SERIAL_ITEMS, CHECK_SERIAL_ITEMS + 1])
def test_gather_nd_checks_each_short_index_tuple_in_the_gather_launch(depth):
    """A thread checks a whole tuple of up to ``CHECK_SERIAL_ITEMS`` indices inside the gather's
    launch, which reads the same tuple; a longer tuple keeps a check launch over every index.
    Either way the smallest bad position is the one reported, as on the CPU."""
    program = gather_nd_program(depth)
    (kernel,) = gpu_kernels(program)
    launches = top_level(kernel.body)
    fused = depth <= CHECK_SERIAL_ITEMS
    assert len(launches) == (1 if fused else 2)
    grid, body = grid_chain(launches[0])
    assert [l.extent.value for l in grid] == ([6] if fused else [6, depth])
    serial = [s for s in walk_stmt(body) if isinstance(s, For)]
    assert [(l.kind, l.extent.value) for l in serial] == ([("serial", depth)] if fused else [])
    index = np.zeros((6, depth), np.int64)
    index[4, depth - 1], index[2, 1], index[5, 0] = 3, -3, 7  # the first bad one: (2, 1)
    x = np.arange(2**depth, dtype=np.float32).reshape((2,) * depth)
    messages = []
    for target in ("cpu", "cuda-emu"):
        with pytest.raises(cl.IndexOutOfRangeError) as err:
            cl.compile(program, target=target)(x=x, i=index)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and "position (2, 1)" in messages[0]
    index[:] = -1
    index[3] = 0
    expected = np.full(6, x[(-1,) * depth])
    expected[3] = x[(0,) * depth]
    assert np.array_equal(np.asarray(cl.compile(program, target="cuda-emu")(x=x, i=index)), expected)


def test_verify_gpu_rejects_an_unscheduled_scatter_update():
    lowered = lower_program(scatter_program("none"))
    with pytest.raises(CompileError, match="not bound to the grid|without a winner"):
        verify_gpu(lowered.kernels[0])


def test_the_renderer_refuses_a_scatter_update_without_a_winner():
    lowered = lower_program(scatter_program("none"))
    from cinnlite.ir.schedule_gpu import schedule_gpu

    scheduled = lowered.__class__(**{**lowered.__dict__, "kernels": tuple(schedule_gpu(k) for k in lowered.kernels)})
    with pytest.raises(CompileError, match="winner"):
        cuda_codegen.CUDARenderer().render(scheduled)


# -- stages -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["cuda", "cuda-emu"])
def test_stages(target):
    exe = cl.compile(gather_program(), target=target)
    assert exe.stages == ("graph", "lowered", "cuda", "ptx")
    assert "# gpu.grid" in exe.source("lowered")
    with pytest.raises(ValueError, match="stages: graph, lowered, cuda, ptx"):
        exe.source("llvm")


def test_pass_dumps_are_stages():
    exe = cl.compile(scatter_program("none"), target="cuda", dump_passes=True)
    assert "lowered:scatter_last_write_wins" in exe.stages
    assert "__winner" in exe.source("lowered:scatter_last_write_wins")
