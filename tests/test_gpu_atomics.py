"""The CUDA backend's atomic updates and its ``mode="raise"`` error record.

- Atomic reductions of every width against numpy, on tensors of 1, 2, 3, 5 ... bytes, in the host
  emulation (and on a GPU where there is one).
- What the compare-and-swap helpers touch: the emulated kernels are built with a watch on every
  ``atomicCAS`` and run on tensors placed at chosen alignments between guard bytes. An element of
  16 bits is swapped on its own; a byte in the aligned 32-bit word where that lies inside the
  tensor, else in the aligned halfword, which reaches one byte outside only at an odd start or an
  odd end.
- ``mode="raise"`` with many bad indices reports what the CPU reports, however the grid runs.
- NVRTC compiles the helpers for every architecture it supports from sm_70 to sm_90.
"""
from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder
from cinnlite.codegen.cuda import render_emu_launcher
from cinnlite.errors import IndexOutOfRangeError
from cinnlite.runtime import cuda as cuda_runtime
from cinnlite.runtime import cuda_emu

try:
    from ml_dtypes import bfloat16
except ImportError:  # pragma: no cover - ml_dtypes comes with the project
    bfloat16 = None

REDUCES = ["none", "add", "mul", "max", "min"]
SIZES = [1, 2, 3, 5, 7, 33]  # elements of the 1-d targets; a (3, 5) target too
GRIDS = [1, 3, None]         # blocks of 256 threads (None: the default)
UPDATES = 400                # into at most 33 elements: chains too long for the ordered strategy

DTYPES = ["int8", "uint8", "bool", "int16", "uint16", "float16", "bfloat16", "float32", "int64", "float64"]


def np_dtype(name):
    return np.dtype(bfloat16) if name == "bfloat16" else np.dtype(name)


def gpu_targets():
    """cuda-emu, and cuda where a GPU is present."""
    return ["cuda-emu", pytest.param("cuda", marks=pytest.mark.gpu)]


def skip_without_gpu(target):
    if target == "cuda" and not cuda_runtime.gpu_available():
        pytest.skip("no CUDA GPU here")


# -- atomic reductions against numpy ----------------------------------------------------------------


def reductions_program(dtype):
    """Every reduction into 1-d targets of SIZES elements and a (3, 5) one, all from one index."""
    b = NetBuilder(f"atomics_{dtype}")
    i = b.create_input("int64", (UPDATES,), "i")
    u = b.create_input(dtype, (UPDATES,), "u")
    rows = b.create_input("int64", (UPDATES, 5), "rows")
    u2 = b.create_input(dtype, (UPDATES, 5), "u2")
    outs = []
    for n in SIZES:
        x = b.create_input(dtype, (n,), f"x{n}")
        outs += [b.scatter(x, i, u, reduce=r, mode="wrap") for r in REDUCES]
    x2 = b.create_input(dtype, (3, 5), "rows_x")
    outs += [b.scatter(x2, rows, u2, axis=0, reduce=r, mode="wrap") for r in REDUCES]
    return b.build(outs)


def exact_values(dtype, shape, rng, reduce):
    """Values whose reductions are exact in any order: small integers (odd ones for mul, whose
    products stay odd, and powers of two near 1 for float mul)."""
    if dtype == "bool":
        return rng.random(shape) < (0.9 if reduce in ("mul", "min") else 0.02)
    if reduce == "mul":
        if np_dtype(dtype).kind == "f" or dtype == "bfloat16":
            return rng.choice([1.0, -1.0, 2.0, 0.5], shape, p=[0.46, 0.46, 0.04, 0.04]).astype(np_dtype(dtype))
        return rng.choice([-3, -1, 1, 3, 5], shape).astype(dtype) if np.dtype(dtype).kind == "i" else \
            rng.choice([1, 3, 5, 7], shape).astype(dtype)
    lo = 0 if np_dtype(dtype).kind in "ub" else -3
    return rng.integers(lo, 4, shape).astype(np_dtype(dtype))


def numpy_scatter(x, index, u, reduce):
    """x with the updates u at rows index (already in range) combined by reduce, in row-major
    order of the updates."""
    out = x.copy()
    if reduce == "none":  # the last update in row-major order wins
        for k in range(len(index)):
            out[index[k]] = u[k]
        return out
    wide = out.astype(np.float64) if out.dtype == np_dtype("bfloat16") else out
    if x.dtype == bool:
        ufunc = np.logical_or if reduce in ("add", "max") else np.logical_and
    else:
        ufunc = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[reduce]
    ufunc.at(wide, index, u.astype(wide.dtype))
    return wide.astype(x.dtype)


@pytest.fixture(scope="module")
def compiled():
    """One executable per (target, dtype), compiled once for the module."""
    cache = {}

    def get(target, dtype):
        if (target, dtype) not in cache:
            cache[target, dtype] = cl.compile(reductions_program(dtype), target=target)
        return cache[target, dtype]
    return get


@pytest.mark.parametrize("target", gpu_targets())
@pytest.mark.parametrize("dtype", DTYPES)
def test_atomic_reductions_match_numpy(compiled, target, dtype):
    skip_without_gpu(target)
    if dtype == "bfloat16" and bfloat16 is None:
        pytest.skip("ml_dtypes is not installed")
    exe = compiled(target, dtype)
    src = exe.source("cuda")
    # The reductions take the atomic path (bool's are max and min; bfloat16 adds and
    # multiplies in a float32 buffer).
    sfx = cl.codegen.cuda._SUFFIX["uint8" if dtype == "bool" else dtype]
    for reduce in ("add", "mul", "max", "min"):
        acc = "f32" if dtype == "bfloat16" and reduce in ("add", "mul") else sfx
        if dtype != "bool" or reduce in ("max", "min"):
            assert f"cl_atomic_{reduce}_{acc}(" in src, reduce

    rng = np.random.default_rng(7)
    i = rng.integers(-100, 100, UPDATES)
    rows = rng.integers(-6, 6, (UPDATES, 5))
    for reduce in REDUCES:
        u, u2 = exact_values(dtype, UPDATES, rng, reduce), exact_values(dtype, (UPDATES, 5), rng, reduce)
        feeds = dict(i=i, u=u, rows=rows, u2=u2, rows_x=exact_values(dtype, (3, 5), rng, reduce))
        feeds.update({f"x{n}": exact_values(dtype, n, rng, reduce) for n in SIZES})
        want = {}
        for n in SIZES:
            want[n] = numpy_scatter(feeds[f"x{n}"], i % n, u, reduce)
        x2 = feeds["rows_x"]
        want2 = np.stack([numpy_scatter(x2[:, c], rows[:, c] % 3, u2[:, c], reduce) for c in range(5)], axis=1)
        blocks = GRIDS if target == "cuda-emu" else [None]
        for grid in blocks:
            exe.max_blocks = grid
            got = exe.run(feeds)
            names = list(got)  # outputs in build order: per size, the reductions in REDUCES order
            r = REDUCES.index(reduce)
            for k, n in enumerate(SIZES):
                np.testing.assert_array_equal(got[names[k * len(REDUCES) + r]], want[n],
                                              err_msg=f"{dtype} {reduce} n={n} grid={grid}", strict=True)
            np.testing.assert_array_equal(got[names[len(SIZES) * len(REDUCES) + r]], want2,
                                          err_msg=f"{dtype} {reduce} (3, 5) grid={grid}", strict=True)
    exe.max_blocks = None


def test_byte_atomics_of_a_symbolic_size_keep_to_the_tensor():
    b = NetBuilder("symbolic_bytes")
    x = b.create_input("int8", ("N",), "x")
    i = b.create_input("int64", (UPDATES,), "i")
    u = b.create_input("int8", (UPDATES,), "u")
    b.scatter(x, i, u, reduce="add", mode="wrap")
    exe = cl.compile(b.build(), target="cuda-emu")
    assert "cl_atomic_add_i8(&" in exe.source("cuda")
    rng = np.random.default_rng(3)
    i_val, u_val = rng.integers(-50, 50, UPDATES), rng.integers(-9, 9, UPDATES).astype(np.int8)
    for n in (1, 2, 3, 5, 6):
        x_val = rng.integers(-9, 9, n).astype(np.int8)
        np.testing.assert_array_equal(exe(x=x_val, i=i_val, u=u_val), numpy_scatter(x_val, i_val % n, u_val, "add"))


# -- what the compare-and-swap helpers touch ----------------------------------------------------------

# Put between the emulation's prelude and the kernels: every atomicCAS the kernels make is watched
# (the lowest and highest byte it covers, and how many of each width there were).
WATCH = r"""
static unsigned long long cl_watch_lo = ~0ULL, cl_watch_hi = 0ULL, cl_watch_count[9];
template <typename T>
static inline T cl_watched_cas(T* p, T expected, T desired) {
    const unsigned long long a = (unsigned long long)p;
    if (a < cl_watch_lo) cl_watch_lo = a;
    if (a + sizeof(T) > cl_watch_hi) cl_watch_hi = a + sizeof(T);
    cl_watch_count[sizeof(T)] += 1;
    return atomicCAS(p, expected, desired);
}
#define atomicCAS cl_watched_cas
extern "C" void cl_watch_reset() {
    cl_watch_lo = ~0ULL; cl_watch_hi = 0ULL;
    for (int k = 0; k < 9; ++k) cl_watch_count[k] = 0;
}
extern "C" unsigned long long cl_watch_get(int k) {
    return k == 0 ? cl_watch_lo : k == 1 ? cl_watch_hi : cl_watch_count[k];
}
"""


def watched_library(exe):
    """The emulation of exe's kernels with every atomicCAS watched."""
    text = cuda_emu.translation_unit(exe.source("cuda"), render_emu_launcher(exe.module))
    marker = '\n#line 1 "cinnlite.cu"\n'
    assert text.count(marker) == 1
    lib = ctypes.CDLL(str(cuda_emu.build_library(text.replace(marker, "\n" + WATCH + marker))))
    lib.cl_watch_get.restype = ctypes.c_ulonglong
    lib.cl_watch_get.argtypes = [ctypes.c_int]
    lib.cinnlite_emu_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
    return lib


def placed(guard, offset, values):
    """values copied into the guard array at byte offset, as a view."""
    view = guard[offset:offset + values.nbytes].view(values.dtype)
    view[...] = values
    return view


@pytest.mark.parametrize("dtype,reduce", [("int8", "add"), ("uint8", "mul"), ("bool", "max"),
                                          ("int16", "add"), ("float16", "add"), ("bfloat16", "max")])
def test_compare_and_swap_stays_inside_the_tensor(dtype, reduce):
    b = NetBuilder(f"guarded_{dtype}")
    x = b.create_input(dtype, ("N",), "x")
    i = b.create_input("int64", (UPDATES,), "i")
    u = b.create_input(dtype, (UPDATES,), "u")
    b.scatter(x, i, u, reduce=reduce, mode="wrap")
    exe = cl.compile(b.build(), target="cuda-emu")
    lib = watched_library(exe)
    table_names = [buf.name for buf in exe.lowered.buffer_table()]
    out_name = exe.lowered.outputs[0].name
    dt = np_dtype(dtype)
    # Every update changes its element (so every one swaps): adds of 1 or -1, products of odd
    # numbers other than 1, the maximum of False and True.
    i_val = np.arange(UPDATES, dtype=np.int64)
    if dtype == "bool":
        u_val = np.ones(UPDATES, bool)
    elif reduce == "mul":
        u_val = np.full(UPDATES, 3, dt)
    elif reduce == "max":
        u_val = (np.arange(UPDATES) + 1).astype(dt)
    else:
        u_val = np.where(np.arange(UPDATES) % 2 == 0, 1, -1).astype(dt)
    checked = 0
    for n in (1, 2, 3, 4, 5, 6, 8, 9):
        i_here = i_val % n
        for misalign in range(0, 4, dt.itemsize):
            x_val = (np.zeros(n, bool) if dtype == "bool" else np.full(n, 1 if reduce == "mul" else -7, dt))
            guard = np.full(256, 0xA5, np.uint8)
            start = (-guard.ctypes.data) % 64 + 64 + misalign  # misalign bytes past a 64-byte boundary
            out = placed(guard, start, np.zeros(n, dt))
            before = guard.copy()
            arrays = {"x": x_val, "i": i_here, "u": u_val, "#N": np.array(n, np.int64), out_name: out}
            missing = set(table_names) - set(arrays)
            assert not missing, missing
            table = (ctypes.c_void_p * len(table_names))(*[arrays[name].ctypes.data for name in table_names])
            errors = np.zeros((1, 4), np.int64)
            for grid in (1, -1):
                lib.cl_watch_reset()
                lib.cinnlite_emu_run(ctypes.addressof(table), errors.ctypes.data, grid)
                label = f"{dtype} n={n} start%4={misalign} grid={grid}"
                np.testing.assert_array_equal(out, numpy_scatter(x_val, i_here, u_val, reduce), err_msg=label)
                rest = np.ones(guard.size, bool)
                rest[start:start + out.nbytes] = False
                np.testing.assert_array_equal(guard[rest], before[rest], err_msg=label)
                lo, hi = out.ctypes.data, out.ctypes.data + out.nbytes
                if dt.itemsize == 1:  # one byte outside, only at an odd start or an odd end
                    lo, hi = lo - lo % 2, hi + hi % 2
                assert (lib.cl_watch_get(0), lib.cl_watch_get(1)) == (lo, hi), label
                if dt.itemsize == 2:
                    assert lib.cl_watch_get(4) == 0 and lib.cl_watch_get(2) > 0, label
                elif misalign == 0 and n % 4 == 0:  # every byte in a whole word of the tensor
                    assert lib.cl_watch_get(2) == 0 and lib.cl_watch_get(4) > 0, label
                checked += 1
    assert checked == 8 * 2 * (4 // dt.itemsize)


def test_compare_and_swap_loops_start_from_a_coherent_read():
    # A plain first read could be a stale L1 line; one whose combination leaves it unchanged
    # would end the loop without a swap. The first read is volatile; later ones come from atomicCAS.
    b = NetBuilder("coherent")
    outs = []
    for dtype in ("int8", "int16", "float32", "float64"):
        x = b.create_input(dtype, (3,), f"x_{dtype}")
        i = b.create_input("int64", (UPDATES,), f"i_{dtype}")
        u = b.create_input(dtype, (UPDATES,), f"u_{dtype}")
        outs.append(b.scatter(x, i, u, reduce="mul", mode="wrap"))
    src = cl.compile(b.build(outs), target="cuda").source("cuda")
    for word in ("unsigned int", "unsigned short", "unsigned long long"):
        assert f"{word} old = *(volatile {word}*)w, assumed;" in src, word
    assert "old = *w" not in src


# -- mode="raise" ---------------------------------------------------------------------------------------


def raise_program():
    b = NetBuilder("raise_many")
    x = b.create_input("float32", (4, 7), "x")
    i = b.create_input("int64", (1 << 16,), "i")
    j = b.create_input("int32", (3, 333), "j")
    k = b.create_input("int16", (500, 7), "k")
    u = b.create_input("float32", (500, 7), "u")
    g = b.take(x, i, axis=1)                                  # 4 x 65536
    outs = [g, b.gather(g, j, axis=0),                         # a second check on another index
            b.scatter(x, b.add(k, b.fill_constant((500, 7), 1, "int16")), u, axis=0, reduce="add")]
    return b.build(outs)


def raise_cases(rng):
    n = 1 << 16
    good = dict(i=rng.integers(-7, 7, n), j=rng.integers(-4, 4, (3, 333)).astype(np.int32),
                k=rng.integers(-5, 3, (500, 7)).astype(np.int16), x=np.zeros((4, 7), np.float32),
                u=np.ones((500, 7), np.float32))
    cases = {"all bad": dict(good, i=rng.integers(7, 1 << 40, n) * rng.choice([-1, 1], n))}
    some = good["i"].copy()
    bad = rng.choice(n, 3000, replace=False)
    some[bad] = rng.integers(8, 100, 3000)
    cases["some bad"] = dict(good, i=some)
    at_end = good["i"].copy()
    at_end[-1] = -8
    cases["bad at the end"] = dict(good, i=at_end)
    later = good["j"].copy()
    later[2, 100:] = 9
    cases["a later check"] = dict(good, j=later)
    both = dict(cases["some bad"], j=later)
    cases["two checks"] = both
    shifted = good["k"].copy()
    shifted[[17, 400], [5, 2]] = 3  # 4 after the add: out of range only for the scatter
    cases["a computed index"] = dict(good, k=shifted)
    return cases


@pytest.mark.parametrize("target", gpu_targets())
def test_many_bad_indices_report_what_the_cpu_reports(target):
    skip_without_gpu(target)
    prog = raise_program()
    cpu = cl.compile(prog, target="cpu")
    exe = cl.compile(prog, target=target)
    for label, feeds in raise_cases(np.random.default_rng(11)).items():
        with pytest.raises(IndexOutOfRangeError) as want:
            cpu.run(feeds)
        for grid in ([1, 3, 0, None] if target == "cuda-emu" else [None]):
            exe.max_blocks = grid
            with pytest.raises(IndexOutOfRangeError) as got:
                exe.run(feeds)
            assert str(got.value) == str(want.value), f"{label}, grid {grid}"
            assert (got.value.input, got.value.position, got.value.value) == \
                (want.value.input, want.value.position, want.value.value), f"{label}, grid {grid}"
    exe.max_blocks = None
    ok = dict(raise_cases(np.random.default_rng(11))["all bad"])
    ok["i"] = np.zeros(1 << 16, np.int64)
    got, want = exe.run(ok), cpu.run(ok)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_the_report_lowers_the_position_without_a_lock_and_stores_the_value_under_it():
    src = cl.compile(raise_program(), target="cuda").source("cuda")
    body = src[src.index("void cl_report_index_error("):]
    body = body[:body.index("\n}\n")]
    # Only a thread that lowered the position goes on to the lock; one waiting leaves once a
    # smaller position is recorded; the lock's holder fences on taking and before freeing it.
    assert "if (atomicMin(record + 0, position) <= position) return;" in body
    assert "if (seen[0] < position) return;" in body
    take, store, free = (body.index("atomicCAS(lock, 0ULL, 1ULL)"), body.index("seen[1] = value"),
                         body.index("atomicExch(lock, 0ULL)"))
    fences = [k for k in range(len(body)) if body.startswith("__threadfence();", k)]
    assert len(fences) == 2 and take < fences[0] < store < fences[1] < free


# -- NVRTC ----------------------------------------------------------------------------------------------


NVRTC_ARCHS = ["sm_70", "sm_75", "sm_80", "sm_90"]


@pytest.mark.parametrize("arch", NVRTC_ARCHS)
def test_nvrtc_compiles_the_atomics_and_the_report(arch):
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC (the optional extra `cuda`) is not installed")
    from cinnlite.runtime import nvrtc

    if int(arch[3:]) not in nvrtc.supported_archs():
        pytest.skip(f"this NVRTC {nvrtc.version()} does not build for {arch}")
    for dtype in ("int8", "bool", "float16", "bfloat16", "uint16", "float64"):
        ptx = nvrtc.compile_cuda(cl.compile(reductions_program(dtype), target="cuda").source("cuda"), arch,
                                 fast=True).ptx
        # 16-bit elements swap 16 bits alone; bytes swap a 32-bit word or a halfword.
        assert bool(re.search(r"atom(\.global)?\.cas\.b16", ptx)) == (dtype != "float64"), dtype
        if dtype in ("float16", "uint16"):
            assert not re.search(r"atom(\.global)?\.cas\.b32", ptx), dtype
    out = nvrtc.compile_cuda(cl.compile(raise_program(), target="cuda").source("cuda"), arch, fast=True)
    assert out.cubin and re.search(r"atom(\.global)?\.min\.s64", out.ptx)
