"""The compiler scales with the graph: fused code, compile time and recursion depth grow linearly
with the number of operators, however the operators are chained.

Fusion inlines a producer's value into every place its consumer reads it. Written out naively, a
chain of takes repeats each index expression three times per level (the clamp reads it three
times), so code grows as 3**n; these tests hold the compiler to a bounded number of bytes of
generated code per operator instead, and check the numbers and the errors on the way.
"""
from __future__ import annotations

import numpy as np
import pytest

import cinnlite as cl
import reference as R
from cinnlite import NetBuilder
from cinnlite.dtypes import float32, int64
from cinnlite.errors import CompileError
from cinnlite.ir.loopnest import Buffer, Const, For, Kernel, Let, Load, Store, Var
from cinnlite.ir.passes import verify
from cinnlite.ir.printer import kernel_str

ROWS = 12  # not a power of two: mode="raise" then resolves indices with a clamp
CHAIN_LENGTHS = (8, 16, 32)
#: Generated source per operator of a chain, far above what one operator needs and far below
#: what repeating index expressions costs (32 chained takes once made gigabytes).
BYTES_PER_OP = {"llvm": 8192, "cuda": 4096}


def _index_values(mode, rng, shape):
    """Valid values (negative ones too) for "raise"; out-of-range ones as well otherwise."""
    if mode == "raise":
        return rng.integers(-ROWS, ROWS, shape)
    return rng.integers(-2 * ROWS, 2 * ROWS, shape)


def chain(n, op, mode, distinct_indices=False):
    """``n`` takes (rows of x) or gathers (elements), each reading the previous one's result,
    and the arguments with the numpy result. Every link reads its index ``n`` times in a fused
    kernel's expression if nothing is shared."""
    rng = np.random.default_rng(n)
    b = NetBuilder(f"{op}_chain")
    x = b.create_input("float32", (ROWS, 3), "x")
    shape = (ROWS,) if op == "take" else (ROWS, 3)
    names = [f"i{k}" for k in range(n)] if distinct_indices else ["i"]
    handles = {name: b.create_input("int64", shape, name) for name in names}
    args = {"x": rng.standard_normal((ROWS, 3)).astype(np.float32)}
    args.update({name: _index_values(mode, rng, shape) for name in names})
    t, want = x, args["x"]
    for k in range(n):
        name = names[k % len(names)]
        if op == "take":
            t = b.take(t, handles[name], axis=0, mode=mode, fill_value=-1.0)
            want = R.take(want, args[name], axis=0, mode=mode, fill_value=-1.0)
        else:
            t = b.gather(t, handles[name], axis=0, mode=mode, fill_value=-1.0)
            want = R.gather(want, args[name], axis=0, mode=mode, fill_value=-1.0)
    return b.build([t]), args, want


def _source_size(exe, backend):
    return len(exe.source("llvm" if backend == "cpu" else "cuda"))


@pytest.mark.parametrize("mode", ["raise", "clip", "wrap", "fill"])
@pytest.mark.parametrize("op", ["take", "gather"])
def test_chained_indexing_compiles_to_code_linear_in_the_chain(backend, op, mode):
    sizes = {}
    for n in CHAIN_LENGTHS:
        prog, args, want = chain(n, op, mode)
        exe = cl.compile(prog, target=backend, cache=False)
        np.testing.assert_array_equal(exe(**args), want)
        sizes[n] = _source_size(exe, backend)
        assert len(exe.lowered.kernels) == 1  # the whole chain is one fused kernel
    per_op = BYTES_PER_OP["llvm" if backend == "cpu" else "cuda"]
    for n, size in sizes.items():
        assert size <= per_op * n, f"{n} chained {op}s ({mode}) made {size} bytes of source: {sizes}"
    # Linear: doubling the chain doubles the code (plus what every program has).
    assert sizes[32] - sizes[16] <= 2.5 * (sizes[16] - sizes[8]), sizes


@pytest.mark.parametrize("op", ["take", "gather"])
def test_a_bad_index_in_the_middle_of_a_chain_reports_the_same_error_fused_and_unfused(backend, op):
    n, bad = 16, 9
    prog, args, _ = chain(n, op, "raise", distinct_indices=True)
    args[f"i{bad}"].reshape(-1)[5] = ROWS
    args[f"i{bad + 3}"].reshape(-1)[0] = -ROWS - 1  # a later link is bad too: the first one counts
    messages = []
    for fuse in (True, False):
        exe = cl.compile(prog, target=backend, fuse=fuse, cache=False)
        with pytest.raises(cl.IndexOutOfRangeError) as info:
            exe(**args)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    position = "(5,)" if op == "take" else "(1, 2)"
    assert f"{op}_{bad}" in messages[0] and f"'i{bad}'" in messages[0] and position in messages[0], messages[0]


def test_a_value_read_twice_at_every_level_is_computed_once_per_level(backend):
    """``t = t * t + t``: every level reads the previous one three times."""
    b = NetBuilder("powers")
    x = b.create_input("float32", (5,), "x")
    t, want = x, np.linspace(-0.9, 0, 5).astype(np.float32)
    sizes = {}
    for n in range(1, 33):
        t = b.add(b.multiply(t, t), t)
        want = want * want + want
        if n in CHAIN_LENGTHS:
            exe = cl.compile(b.build([t]), target=backend, cache=False)
            np.testing.assert_array_equal(exe(x=np.linspace(-0.9, 0, 5).astype(np.float32)), want)
            sizes[n] = _source_size(exe, backend)
    assert sizes[32] - sizes[16] <= 2.5 * (sizes[16] - sizes[8]), sizes


def test_a_value_read_by_two_consumers_at_every_level_is_not_copied_into_both(backend):
    """``t = max(take(t, i), take(t, j))``: inlining both reads would double the code per level;
    beyond a small size the shared value stays a kernel of its own."""
    rng = np.random.default_rng(0)
    b = NetBuilder("ladder")
    x = b.create_input("float32", (ROWS,), "x")
    i = b.create_input("int64", (ROWS,), "i")
    j = b.create_input("int64", (ROWS,), "j")
    args = dict(x=rng.standard_normal(ROWS).astype(np.float32), i=rng.integers(-ROWS, ROWS, ROWS),
                j=rng.integers(-ROWS, ROWS, ROWS))
    t, want, sizes = x, args["x"], {}
    for n in range(1, 33):
        t = b.maximum(b.take(t, i, mode="raise"), b.take(t, j, mode="clip"))
        want = np.maximum(R.take(want, args["i"]), R.take(want, args["j"], mode="clip"))
        if n in CHAIN_LENGTHS:
            exe = cl.compile(b.build([t]), target=backend, cache=False)
            np.testing.assert_array_equal(exe(**args), want)
            sizes[n] = _source_size(exe, backend)
    assert sizes[32] - sizes[16] <= 2.5 * (sizes[16] - sizes[8]), sizes


def test_an_onnx_model_of_chained_gathers_imports_compiles_and_runs(backend):
    """A model of 32 Gathers, each of the last one's output (ONNX imports them in raise mode)."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from cinnlite.frontend.onnx import import_onnx

    n, names = 32, ["data"] + [f"/layer.{k}/Gather_output_0" for k in range(32)]
    nodes = [helper.make_node("Gather", [names[k], "indices"], [names[k + 1]], axis=0) for k in range(n)]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("data", TensorProto.FLOAT, [ROWS, 3]),
                                               helper.make_tensor_value_info("indices", TensorProto.INT64, [ROWS])],
                              [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, [ROWS, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    assert len(model.SerializeToString()) < 4096
    imported = import_onnx(model)
    exe = cl.compile(imported.program, target=backend, cache=False)
    data, indices = np.arange(ROWS * 3, dtype=np.float32).reshape(ROWS, 3), np.arange(ROWS)[::-1] - 3
    got = imported.named_outputs(exe.run(imported.feeds({"data": data, "indices": indices})))[names[-1]]
    want = data
    for _ in range(n):
        want = want[indices]
    np.testing.assert_array_equal(got, want)


def test_a_thousand_chained_operators_compile_without_deep_recursion(backend):
    """Chains of 500-600 operators once overflowed Python's stack."""
    prog, args, want = long_chain(1000)
    exe = cl.compile(prog, target=backend, cache=False)
    np.testing.assert_allclose(exe(**args), want, rtol=1e-5)


def long_chain(n):
    """``n`` operators: adds, clipped takes, multiplies, wrapped takes, in turn."""
    b = NetBuilder("long")
    x = b.create_input("float32", (8,), "x")
    y = b.create_input("float32", (8,), "y")
    p = b.create_input("int64", (8,), "p")
    args = dict(x=np.linspace(-1, 1, 8).astype(np.float32), y=np.full(8, 0.5, np.float32),
                p=np.array([3, -1, 0, 9, 2, -20, 5, 1]))
    t, want = x, args["x"]
    for k in range(n):
        step = k % 4
        if step == 0:
            t, want = b.add(t, y), want + args["y"]
        elif step == 1:
            t, want = b.take(t, p, mode="clip"), R.take(want, args["p"], mode="clip")
        elif step == 2:
            t, want = b.multiply(t, y), want * args["y"]
        else:
            t, want = b.take(t, p, mode="wrap"), R.take(want, args["p"], mode="wrap")
    return b.build([t]), args, want


@pytest.mark.slow
def test_a_chain_of_ten_thousand_operators_builds_prints_and_compiles():
    prog, args, want = long_chain(10_000)
    assert str(prog).count("\n") == 10_000 + 1
    exe = cl.compile(prog, target="cpu", cache=False)
    assert exe.source("lowered").startswith("kernel ")
    np.testing.assert_allclose(exe(**args), want, rtol=1e-5)


# -- the Let statement -------------------------------------------------------------------------


def _let_kernel(bindings, body_value):
    a, out = Buffer("a", float32, (4,)), Buffer("out", float32, (4,))
    i = Var("i")
    body = For(i, Const(4), Let(tuple(bindings), Store(out, (i,), body_value)))
    return Kernel("k", "test", (a, out), out, body)


def test_let_binds_values_in_order_for_the_rest_of_the_statement():
    i, v, w = Var("i"), Var("v", float32), Var("w", float32)
    a = Buffer("a", float32, (4,))
    k = _let_kernel([(v, Load(a, (i,))), (w, v)], w)
    assert verify(k) is k
    assert "let v = a[i]\n" in kernel_str(k) + "\n" and "out[i] = w" in kernel_str(k)


@pytest.mark.parametrize("bad", ["unbound", "twice", "dtype", "loop var"])
def test_verify_rejects_broken_lets(bad):
    i, v = Var("i"), Var("v", float32)
    a = Buffer("a", float32, (4,))
    bindings, value = {
        "unbound": ([(v, Load(a, (i,)))], Var("w", float32)),
        "twice": ([(v, Load(a, (i,))), (v, Load(a, (i,)))], v),
        "dtype": ([(Var("v", int64), Load(a, (i,)))], Load(a, (i,))),
        "loop var": ([(i, Const(0))], Load(a, (i,))),
    }[bad]
    with pytest.raises(CompileError, match="verifier"):
        verify(_let_kernel(bindings, value))


# -- raise checks folded into a loop -----------------------------------------------------------


@pytest.mark.parametrize("n", [4, 8])
def test_checks_of_one_index_buffer_add_one_flag_per_load_not_per_check(n):
    """``n`` takes with one index tensor: when their checks fold into the fused loop, each load
    of the index gets one flag, not one per check, and flags get no flags of their own (which
    once doubled the flags with every check folded)."""
    b = NetBuilder("same_index")
    x = b.create_input("float32", (ROWS,), "x")
    i = b.create_input("int64", (ROWS,), "i")
    t = x
    for _ in range(n):
        t = b.take(t, i)
    exe = cl.compile(b.build([t]), target="cpu", cache=False)
    assert exe.source("lowered").count("flag_index_error") <= n
    args = dict(x=np.arange(ROWS, dtype=np.float32), i=np.arange(ROWS) - 5)
    args["i"][7] = ROWS
    with pytest.raises(cl.IndexOutOfRangeError, match=r"take 'take_0'.*\(7,\)"):
        exe(**args)
