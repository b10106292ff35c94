"""Programs with symbolic sizes on the GPU targets: one compiled module for every size.

Each program runs on ``cuda-emu`` at several sizes (1, primes, a few thousand, and 0, which runs
a static specialisation) against the numpy reference, with the emulation's default grid and with
a grid of 2 blocks, so grid-stride loops take several turns and atomics combine in another
order. NVRTC compiles the CUDA C of every one (the item counts, the split of the flat item and
the strides read the symbol buffers). The runtime of ``target="cuda"`` is tested with symbolic
programs against a stand-in driver in tests/test_cuda_runtime.py.
"""
from __future__ import annotations

import numpy as np
import pytest

import cinnlite as cl
import reference as ref
from cinnlite import NetBuilder
from cinnlite.codegen.cuda import Launch, render_emu_launcher
from cinnlite.ir import codec
from cinnlite.ir.loopnest import Expr
from cinnlite.runtime import cache as caches
from cinnlite.runtime import nvrtc
from cinnlite.runtime.cuda_base import module_fields, module_from_fields

#: (E, N): the update or index count, and the size of the indexed axis. E = 0 runs the static
#: program of those sizes (a specialisation); the others the one shape-generic module.
SIZES = [(1, 1), (7, 5), (13, 11), (3001, 97), (0, 3)]


def _rng(e, n):
    return np.random.default_rng(1000 * e + n)


def _quarters(rng, shape, dtype=np.float32):
    """Floats whose sums and maxima are exact in any order (small multiples of 1/4)."""
    return (rng.integers(-8, 9, shape) / 4).astype(dtype)


# -- the programs: (builder, feeds(E, N), reference(feeds)) -----------------------------------------


def take_program():
    b = NetBuilder("sym_take")
    x = b.create_input("float32", ("N", 5), "x")
    i = b.create_input("int32", ("E",), "i")
    b.take(x, i, axis=0, mode="raise")
    return b.build()


def take_feeds(e, n):
    rng = _rng(e, n)
    return dict(x=rng.standard_normal((n, 5)).astype(np.float32), i=rng.integers(-n, n, e).astype(np.int32))


def take_want(f):
    return ref.take(f["x"], f["i"], axis=0, mode="raise")


def gather_program():
    b = NetBuilder("sym_gather")
    x = b.create_input("float32", ("N", 3), "x")
    i = b.create_input("int64", ("E", 3), "i")
    b.gather(x, i, axis=0, mode="clip")
    return b.build()


def gather_feeds(e, n):
    rng = _rng(e, n)
    return dict(x=rng.standard_normal((n, 3)).astype(np.float32), i=rng.integers(-2 * n, 2 * n, (e, 3)))


def gather_want(f):
    return ref.gather(f["x"], f["i"], axis=0, mode="clip")


def gather_nd_program():
    # Two symbolic axes: the middle axis's stride is a symbol, rendered as a read of it.
    b = NetBuilder("sym_gather_nd")
    x = b.create_input("float32", ("N", "N", 4), "x")
    i = b.create_input("int64", ("E", 2), "i")
    b.gather_nd(x, i, mode="fill", fill_value=-1.5)
    return b.build()


def gather_nd_feeds(e, n):
    rng = _rng(e, n)
    return dict(x=rng.standard_normal((n, n, 4)).astype(np.float32), i=rng.integers(-n - 2, n + 2, (e, 2)))


def gather_nd_want(f):
    return ref.gather_nd(f["x"], f["i"], mode="fill", fill_value=-1.5)


#: Data dtypes per reduction whose results do not depend on the order updates combine in
#: (integer multiplication wraps; float sums of quarters are exact), so results compare equal.
SCATTER_DTYPES = {"none": np.float32, "add": np.float32, "mul": np.int32, "max": np.float32, "min": np.int64,
                  "mean": np.float32}


def scatter_program(reduce):
    dtype = np.dtype(SCATTER_DTYPES[reduce]).name
    b = NetBuilder(f"sym_scatter_{reduce}")
    x = b.create_input(dtype, ("N", 3), "x")
    i = b.create_input("int64", ("E", 3), "i")
    u = b.create_input(dtype, ("E", 3), "u")
    b.scatter(x, i, u, axis=0, reduce=reduce, mode="wrap")
    return b.build()


def scatter_feeds(reduce):
    dtype = SCATTER_DTYPES[reduce]

    def feeds(e, n):
        rng = _rng(e, n)
        if np.dtype(dtype).kind == "f":
            x, u = _quarters(rng, (n, 3), dtype), _quarters(rng, (e, 3), dtype)
        else:
            x, u = rng.integers(-9, 9, (n, 3)).astype(dtype), rng.integers(-9, 9, (e, 3)).astype(dtype)
        return dict(x=x, i=rng.integers(-3 * n, 3 * n, (e, 3)), u=u)
    return feeds


def scatter_want(reduce):
    return lambda f: ref.scatter(f["x"], f["i"], f["u"], axis=0, reduce=reduce, mode="wrap")


def scatter_nd_program():
    b = NetBuilder("sym_scatter_nd")
    x = b.create_input("float32", ("N", 4), "x")
    i = b.create_input("int32", ("E", 1), "i")
    u = b.create_input("float32", ("E", 4), "u")
    b.scatter_nd(x, i, u, reduce="add", mode="raise")
    return b.build()


def scatter_nd_feeds(e, n):
    rng = _rng(e, n)
    return dict(x=_quarters(rng, (n, 4)), i=rng.integers(-n, n, (e, 1)).astype(np.int32), u=_quarters(rng, (e, 4)))


def scatter_nd_want(f):
    return ref.scatter_nd(f["x"], f["i"], f["u"], reduce="add", mode="raise")


def broadcast_program():
    b = NetBuilder("sym_broadcast")
    a = b.create_input("float32", ("E", 1), "a")
    c = b.create_input("float32", ("N",), "c")
    b.multiply(b.add(a, c), a)
    return b.build()


def broadcast_feeds(e, n):
    rng = _rng(e, n)
    return dict(a=rng.standard_normal((e, 1)).astype(np.float32), c=rng.standard_normal(n).astype(np.float32))


def broadcast_want(f):
    return (f["a"] + f["c"]) * f["a"]


def reshape_program():
    b = NetBuilder("sym_reshape")
    x = b.create_input("float32", ("E", 4, 3), "x")
    flat = b.reshape(x, (-1,))
    b.reshape(b.add(flat, flat), (-1, 6))
    return b.build()


def reshape_feeds(e, n):
    return dict(x=_rng(e, n).standard_normal((e, 4, 3)).astype(np.float32))


def reshape_want(f):
    return (f["x"] + f["x"]).reshape(-1, 6)


def chain_program():
    """take -> multiply -> scatter_nd with an index reshaped to (E, 1): the message-passing chain."""
    b = NetBuilder("sym_chain")
    x = b.create_input("float32", ("N", 8), "x")
    i = b.create_input("int32", ("E",), "i")
    d = b.create_input("int64", ("E",), "d")
    m = b.take(x, i, axis=0)
    b.scatter_nd(x, b.reshape(d, ("E", 1)), b.multiply(m, m), reduce="add")
    return b.build()


def chain_feeds(e, n):
    rng = _rng(e, n)
    return dict(x=_quarters(rng, (n, 8)), i=rng.integers(0, n, e).astype(np.int32), d=rng.integers(-n, n, e))


def chain_want(f):
    out = f["x"].copy()
    np.add.at(out, f["d"], f["x"][f["i"]] ** 2)
    return out


PROGRAMS = {
    "take": (take_program, take_feeds, take_want),
    "gather": (gather_program, gather_feeds, gather_want),
    "gather_nd": (gather_nd_program, gather_nd_feeds, gather_nd_want),
    **{f"scatter_{r}": (lambda r=r: scatter_program(r), scatter_feeds(r), scatter_want(r)) for r in SCATTER_DTYPES},
    "scatter_nd": (scatter_nd_program, scatter_nd_feeds, scatter_nd_want),
    "broadcast": (broadcast_program, broadcast_feeds, broadcast_want),
    "reshape": (reshape_program, reshape_feeds, reshape_want),
    "chain": (chain_program, chain_feeds, chain_want),
}


def _assert_matches(got, want, label):
    assert got.shape == want.shape and got.dtype == want.dtype, label
    if got.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=label)
    else:
        np.testing.assert_array_equal(got, want, err_msg=label)


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_symbolic_programs_run_on_the_emulated_gpu_at_every_size(name):
    build, feeds, want = PROGRAMS[name]
    exe = cl.compile(build(), target="cuda-emu", cache=False)
    assert exe.symbolic
    for e, n in SIZES:
        f = feeds(e, n)
        expected = want(f)
        for max_blocks in (None, 2):
            exe.max_blocks = max_blocks
            _assert_matches(exe(**f), expected, f"{name} E={e} N={n} max_blocks={max_blocks}")


def test_a_symbolic_program_compiles_one_module_for_every_size():
    exe = cl.compile(chain_program(), target="cuda-emu", cache=False)
    source = exe.source("cuda")
    assert "sym_E[0LL]" in source and "sym_N[0LL]" in source
    # Item counts are expressions over the symbols, evaluated per call by the host.
    assert any(isinstance(l.items, Expr) for l in exe.module.launches)
    launcher = render_emu_launcher(exe.module)
    assert "(long long*)cl_table[" in launcher
    for e, n in SIZES[:4]:
        f = chain_feeds(e, n)
        _assert_matches(exe(**f), chain_want(f), f"E={e} N={n}")
    assert exe.source("cuda") == source


def test_the_winner_of_a_symbolic_scatter_counts_in_int64():
    exe = cl.compile(scatter_program("none"), target="cuda-emu", cache=False)
    assert "long long* __restrict__ scatter_0__winner" in exe.source("cuda")


def test_symbolic_errors_name_the_first_bad_index_as_the_cpu_does():
    prog = take_program()
    gpu, cpu = cl.compile(prog, target="cuda-emu", cache=False), cl.compile(prog, target="cpu", cache=False)
    f = take_feeds(3001, 97)
    f["i"][1234] = 97
    f["i"][2000] = -98
    for max_blocks in (None, 2):
        gpu.max_blocks = max_blocks
        with pytest.raises(cl.IndexOutOfRangeError) as got:
            gpu(**f)
        with pytest.raises(cl.IndexOutOfRangeError) as want:
            cpu(**f)
        assert str(got.value) == str(want.value) and got.value.position == (1234,)


@pytest.mark.skipif(not nvrtc.available(), reason="NVRTC (the optional extra `cuda13` or `cuda12`) is not installed")
@pytest.mark.parametrize("name", ["gather_nd", "scatter_none", "scatter_mean", "broadcast", "reshape", "chain"])
def test_nvrtc_compiles_the_cuda_c_of_symbolic_programs(name):
    from test_cuda_nvrtc import assert_compiles

    build = PROGRAMS[name][0]
    for deterministic in (False, True):
        assert_compiles(cl.compile(build(), target="cuda", cache=False, deterministic=deterministic))


def test_symbolic_item_counts_round_trip_through_the_cache_codec():
    exe = cl.compile(chain_program(), target="cuda", cache=False)
    fields = module_fields(exe.module)
    back = module_from_fields(codec.loads(*codec.dumps(fields)), exe.module.source)
    assert back == exe.module
    assert all(isinstance(l, Launch) for l in back.launches)


def test_a_symbolic_executable_comes_back_from_the_disk_cache(cache_dir):
    exe = cl.compile(chain_program(), target="cuda-emu")
    launches = exe.module.launches
    caches.MEMORY.clear()
    again = cl.compile(chain_program(), target="cuda-emu")
    assert again is not exe and again.module.launches == launches
    for e, n in SIZES:
        f = chain_feeds(e, n)
        _assert_matches(again(**f), chain_want(f), f"E={e} N={n}")


@pytest.mark.parametrize("name", ["scatter_add", "scatter_mean", "chain"])
def test_deterministic_symbolic_reductions_are_bit_identical_to_the_cpu(name):
    # Ordered update nests: a serial loop of a symbolic extent inside each thread.
    build, feeds, _ = PROGRAMS[name]
    prog = build()
    gpu = cl.compile(prog, target="cuda-emu", cache=False, deterministic=True)
    cpu = cl.compile(prog, target="cpu", cache=False)
    for e, n in SIZES:
        f = feeds(e, n)
        f.update({k: (v + 0.1).astype(v.dtype) for k, v in f.items() if v.dtype.kind == "f"})  # inexact sums
        want = cpu(**f)
        for max_blocks in (None, 2):
            gpu.max_blocks = max_blocks
            assert gpu(**f).tobytes() == want.tobytes(), f"{name} E={e} N={n} max_blocks={max_blocks}"
