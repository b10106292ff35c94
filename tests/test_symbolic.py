"""Symbolic dimensions: one compiled program for every size, on every backend, against numpy.

Sizes cover 0 (which runs the static specialisation), 1, primes and a large one; mismatched
sizes raise the named error and leave the inputs untouched; compiling a static program at a
second size compiles one shape-generic version that every later size reuses, in this process
and through the disk cache in the next.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import cinnlite as cl
from cinnlite.backends.cpu import masked_vectors
from cinnlite.errors import IndexOutOfRangeError, InputError, ValidationError

SIZES = (0, 1, 2, 7, 13, 101, 4099)


def _rng(seed=0):
    return np.random.default_rng(seed)


def _message_passing():
    """take rows by source, square, scatter-add into destinations: E edges over N nodes."""
    b = cl.NetBuilder("mp")
    x = b.create_input(cl.Float(32), ("N", 8), "x")
    src = b.create_input(cl.Int(32), ("E",), "src")
    dst = b.create_input(cl.Int(64), ("E", 1), "dst")
    m = b.take(x, src, axis=0)
    return b.build([b.scatter_nd(x, dst, b.multiply(m, m), reduce="add")])


def _message_passing_ref(x, src, dst):
    out = x.astype(np.float64).copy()
    np.add.at(out, dst[:, 0], x[src].astype(np.float64) ** 2)
    return out


def test_symbolic_shapes_are_inferred_and_printed():
    b = cl.NetBuilder("s")
    x = b.create_input(cl.Float(32), ("N", 64), "x")
    i = b.create_input(cl.Int(32), ("E",), "i")
    t = b.take(x, i, axis=0)
    assert [str(d) for d in t.shape] == ["E", "64"]
    r = b.reshape(t, (-1,))
    assert [str(d) for d in r.shape] == ["64*E"]
    back = b.reshape(r, ("E", -1))
    assert [str(d) for d in back.shape] == ["E", "64"]
    f = b.fill_constant(("E", 2), 1.0, "float32")
    assert [str(d) for d in f.shape] == ["E", "2"]
    text = str(b.build([back, f]))
    assert "x: float32[N, 64]" in text and "take_0: float32[E, 64]" in text


@pytest.mark.parametrize("E", SIZES)
def test_message_passing_every_size(backend, E):
    exe = cl.compile(_message_passing(), target=backend)
    rng = _rng(E)
    n = 5 if E < 100 else 300
    x = rng.standard_normal((n, 8)).astype(np.float32)
    src = rng.integers(-n, n, E).astype(np.int32)
    dst = rng.integers(0, n, (E, 1))
    got = exe(x=x, src=src, dst=dst)
    np.testing.assert_allclose(got, _message_passing_ref(x, src, dst), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("mode", ["raise", "clip", "wrap", "fill"])
@pytest.mark.parametrize("rows,cols,n", [(1, 1, 1), (3, 5, 7), (17, 3, 0), (64, 2, 129), (5, 0, 4)])
def test_take_modes_every_size(backend, mode, rows, cols, n):
    b = cl.NetBuilder("t")
    x = b.create_input(cl.Int(64), ("R", "C"), "x")
    i = b.create_input(cl.Int(32), ("N",), "i")
    exe = cl.compile(b.build([b.take(x, i, axis=0, mode=mode, fill_value=-9)]), target=backend)
    rng = _rng(rows * 100 + n)
    xv = rng.integers(-50, 50, (rows, cols))
    lo, hi = (-rows, rows) if mode == "raise" else (-2 * rows - 1, 2 * rows + 2)
    iv = rng.integers(lo, hi, n).astype(np.int32)
    if mode == "fill":
        valid = (iv >= -rows) & (iv < rows)
        want = np.where(valid[:, None], xv[np.where(valid, iv, 0)], -9)
    else:
        want = np.take(xv, iv, axis=0, mode=mode)
    np.testing.assert_array_equal(exe(x=xv, i=iv), want)


@pytest.mark.parametrize("reduce", ["none", "add", "mul", "max", "min", "mean"])
@pytest.mark.parametrize("n", [1, 6, 211])
def test_scatter_reductions_symbolic(backend, reduce, n):
    b = cl.NetBuilder("sc")
    x = b.create_input(cl.Float(64), ("M", 3), "x")
    idx = b.create_input(cl.Int(64), ("U", 3), "idx")
    src = b.create_input(cl.Float(64), ("U", 3), "src")
    exe = cl.compile(b.build([b.scatter(x, idx, src, axis=0, reduce=reduce)]), target=backend,
                     deterministic=True)
    rng = _rng(n)
    m = max(2, n // 3)
    xv = rng.uniform(0.5, 2, (m, 3))
    iv = rng.integers(0, m, (n, 3)) if reduce != "none" else np.tile(rng.permutation(m)[:1], (n, 3))
    sv = rng.uniform(0.5, 2, (n, 3))
    import torch
    t = torch.from_numpy(xv.copy())
    if reduce == "none":
        t.scatter_(0, torch.from_numpy(iv), torch.from_numpy(sv))
    else:
        name = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin", "mean": "mean"}[reduce]
        t.scatter_reduce_(0, torch.from_numpy(iv), torch.from_numpy(sv), name, include_self=True)
    np.testing.assert_allclose(exe(x=xv, idx=iv, src=sv), t.numpy(), rtol=1e-12)


def test_gather_and_gather_nd_symbolic(backend):
    b = cl.NetBuilder("g")
    x = b.create_input(cl.Float(32), ("B", "L", 4), "x")
    gi = b.create_input(cl.Int(32), ("B", "K", 4), "gi")
    ni = b.create_input(cl.Int(64), ("B", "K", 1), "ni")
    g = b.gather(x, gi, axis=1)
    nd = b.gather_nd(x, ni, batch_dims=1)
    exe = cl.compile(b.build([g, nd]), target=backend)
    for bs, ln, k in [(1, 1, 1), (2, 7, 3), (3, 13, 11), (2, 5, 0)]:
        rng = _rng(bs * 31 + ln)
        xv = rng.standard_normal((bs, ln, 4)).astype(np.float32)
        giv = rng.integers(0, ln, (bs, k, 4)).astype(np.int32)
        niv = rng.integers(-ln, ln, (bs, k, 1))
        got_g, got_nd = exe(x=xv, gi=giv, ni=niv)
        np.testing.assert_array_equal(got_g, np.take_along_axis(xv, giv, axis=1))
        want_nd = np.stack([xv[j][np.where(niv[j, :, 0] < 0, niv[j, :, 0] + ln, niv[j, :, 0])] for j in range(bs)])
        np.testing.assert_array_equal(got_nd, want_nd.reshape(bs, k, 4))


def test_elementwise_broadcast_and_reshape_symbolic(backend):
    b = cl.NetBuilder("e")
    a = b.create_input(cl.Float(64), ("N", 1), "a")
    c = b.create_input(cl.Float(64), (1, "M"), "c")
    s = b.add(a, c)
    flat = b.reshape(s, (-1,))
    exe = cl.compile(b.build([s, flat]), target=backend)
    for n, m in [(1, 1), (3, 7), (17, 2)]:
        av, cv = _rng(n).standard_normal((n, 1)), _rng(m).standard_normal((1, m))
        got, got_flat = exe(a=av, c=cv)
        np.testing.assert_array_equal(got, av + cv)
        np.testing.assert_array_equal(got_flat, (av + cv).reshape(-1))


def test_one_name_one_size_error_names_the_symbol(backend):
    exe = cl.compile(_message_passing(), target=backend)
    x = np.ones((4, 8), np.float32)
    src, dst = np.zeros(3, np.int32), np.zeros((5, 1), np.int64)
    before = (x.copy(), src.copy(), dst.copy())
    with pytest.raises(InputError, match=r"symbolic size E: input 'dst' has 5 at axis 0, but input 'src' has 3"):
        exe(x=x, src=src, dst=dst)
    for a, b in zip((x, src, dst), before):
        np.testing.assert_array_equal(a, b)


def test_static_dimension_of_a_symbolic_input_is_checked(backend):
    exe = cl.compile(_message_passing(), target=backend)
    with pytest.raises(InputError, match=r"input 'x': expected shape \(N, 8\), got \(4, 9\)"):
        exe(x=np.ones((4, 9), np.float32), src=np.zeros(3, np.int32), dst=np.zeros((3, 1), np.int64))


def test_run_time_rules_raise_the_static_programs_errors(backend):
    """A rule the symbols leave open (E <= N for a gather's non-axis dimension) is an
    assumption; a call that breaks it raises the operator's own error."""
    b = cl.NetBuilder("r")
    x = b.create_input(cl.Float(32), ("N", 4), "x")
    i = b.create_input(cl.Int(32), ("E", 4), "i")
    prog = b.build([b.gather(x, i, axis=1)])
    assert "assume E <= N" in str(prog)
    exe = cl.compile(prog, target=backend)
    x_v, i_v = np.ones((3, 4), np.float32), np.zeros((5, 4), np.int32)
    with pytest.raises(ValidationError, match=r"index.shape\[0\]=5 > x.shape\[0\]=3"):
        exe(x=x_v, i=i_v)
    np.testing.assert_array_equal(exe(x=np.ones((6, 4), np.float32), i=np.zeros((5, 4), np.int32)),
                                  np.ones((5, 4), np.float32))


def test_out_of_range_index_error_uses_the_call_sizes(backend):
    exe = cl.compile(_message_passing(), target=backend)
    src = np.array([0, 1, 9, 2], np.int32)
    with pytest.raises(IndexOutOfRangeError) as info:
        exe(x=np.ones((4, 8), np.float32), src=src, dst=np.zeros((4, 1), np.int64))
    assert info.value.position == (2,) and info.value.value == 9 and info.value.size == 4


def test_clip_on_an_empty_symbolic_axis_raises_at_run_time(backend):
    b = cl.NetBuilder("c")
    x = b.create_input(cl.Float(32), ("N",), "x")
    i = b.create_input(cl.Int(32), (3,), "i")
    exe = cl.compile(b.build([b.take(x, i, mode="clip")]), target=backend)
    with pytest.raises(ValidationError, match="mode clip needs a non-empty axis"):
        exe(x=np.ones(0, np.float32), i=np.zeros(3, np.int32))


def test_symbols_must_be_input_sizes():
    b = cl.NetBuilder("u")
    b.fill_constant(("Q",), 1.0, "float32", name="f")
    with pytest.raises(ValidationError, match="symbolic size Q of 'f' is no input's dimension"):
        b.build()


def test_index_tuple_length_must_be_static():
    b = cl.NetBuilder("nd")
    x = b.create_input(cl.Float(32), (4, 4), "x")
    i = b.create_input(cl.Int(32), (3, "K"), "i")
    with pytest.raises(ValidationError, match="index tuple length is the symbolic size K"):
        b.gather_nd(x, i)


def _static_mp(E, N=30):
    b = cl.NetBuilder("mp_static")
    x = b.create_input(cl.Float(32), (N, 8), "x")
    src = b.create_input(cl.Int(32), (E,), "src")
    dst = b.create_input(cl.Int(64), (E, 1), "dst")
    m = b.take(x, src, axis=0)
    return b.build([b.scatter_nd(x, dst, b.multiply(m, m), reduce="add")])


def test_second_size_compiles_one_generic_program(backend, cache_dir):
    first = cl.compile(_static_mp(11), target=backend)
    assert not first.symbolic
    second = cl.compile(_static_mp(12), target=backend)
    assert second.symbolic
    assert [str(d) for d in second.program.inputs[1].shape] == ["src_0"]
    for E in (13, 50, 3):
        assert cl.compile(_static_mp(E), target=backend) is second
    rng = _rng(3)
    for E in (12, 40, 0):
        x = rng.standard_normal((30, 8)).astype(np.float32)
        src, dst = rng.integers(0, 30, E).astype(np.int32), rng.integers(0, 30, (E, 1))
        exe = cl.compile(_static_mp(E), target=backend)
        np.testing.assert_allclose(exe(x=x, src=src, dst=dst), _message_passing_ref(x, src, dst),
                                   rtol=1e-5, atol=1e-4)


def test_generic_program_comes_from_the_disk_cache_in_a_new_process(cache_dir):
    cl.compile(_static_mp(21))
    cl.compile(_static_mp(22))
    code = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(__file__.rsplit('/', 1)[0])!r})
        import time
        from test_symbolic import _static_mp
        import cinnlite as cl
        from cinnlite import compiler
        calls = []
        original = compiler.lower
        compiler.STAGES = tuple((n, s if n != "lower" else (lambda job: (calls.append(1), original(job))))
                                for n, s in compiler.STAGES)
        exe = cl.compile(_static_mp(77))
        print(exe.symbolic, len(calls))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "CINNLITE_CACHE_DIR": str(cache_dir)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "0"]


def test_sizes_fixed_by_attributes_do_not_generalise(cache_dir):
    def prog(n):
        b = cl.NetBuilder("fixed")
        x = b.create_input(cl.Float(32), (n,), "x")
        return b.build([b.add(x, b.fill_constant((n,), 1.0, "float32"))])
    cl.compile(prog(5))
    exe = cl.compile(prog(6))
    assert not exe.symbolic
    np.testing.assert_array_equal(exe(x=np.zeros(6, np.float32)), np.ones(6, np.float32))


def test_onnx_dim_param_becomes_a_symbol(backend):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from cinnlite.frontend.onnx import from_onnx
    node = helper.make_node("Gather", ["table", "ids"], ["out"], axis=0)
    graph = helper.make_graph([node], "emb",
                              [helper.make_tensor_value_info("table", TensorProto.FLOAT, [10, 4]),
                               helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch", None])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["batch", None, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    prog = from_onnx(model)
    assert [str(d) for d in prog.inputs[1].shape] == ["batch", "ids_1"]
    exe = cl.compile(prog, target=backend)
    table = _rng(1).standard_normal((10, 4)).astype(np.float32)
    for shape in [(1, 1), (3, 5), (7, 2)]:
        ids = _rng(shape[0]).integers(-10, 10, shape)
        np.testing.assert_array_equal(exe(table=table, ids=ids), table[ids])


def test_power_of_two_indexed_axes_run_their_static_specialisation():
    """A raise-mode gather over a symbolic axis masks instead of clamping where the axis is a
    power of two: the compiler runs the static program of those sizes there, and the generic
    code elsewhere; both compute the same."""
    b = cl.NetBuilder("p2")
    x = b.create_input(cl.Float(32), ("R", 4), "x")
    i = b.create_input(cl.Int(64), ("M", 2), "i")
    exe = cl.compile(b.build([b.gather_nd(x, i)]))
    for rows in (8, 7, 16, 1):
        rng = np.random.default_rng([rows, 5])
        xv = rng.standard_normal((rows, 4)).astype(np.float32)
        iv = np.stack([rng.integers(-rows, rows, 9), rng.integers(-4, 4, 9)], axis=1)
        np.testing.assert_array_equal(exe(x=xv, i=iv), xv[iv[:, 0], iv[:, 1]])
    served = {shapes[0][0]: plan.specialised is not None for shapes, plan in exe._shapes.by_shapes.items()}
    assert served == {8: True, 7: False, 16: True, 1: True}


def _short_row_gather():
    """A gather along a middle axis of short inner rows: its static code merges the two inner
    loops and the generic code cannot (their counts are symbols)."""
    b = cl.NetBuilder("hot")
    x = b.create_input(cl.Float(32), ("A", "N", "C"), "x")
    i = b.create_input(cl.Int(64), ("A", "M", "C"), "i")
    return b.build([b.gather(x, i, axis=1)])


def _short_row_case(shape, seed):
    rng = _rng(seed)
    a, n, m, c = shape
    x = rng.standard_normal((a, n, c)).astype(np.float32)
    i = rng.integers(-n, n, (a, m, c))
    return x, i, np.take_along_axis(x, np.where(i < 0, i + n, i), axis=1)


def test_hot_sizes_run_their_static_specialisation(monkeypatch, cache_dir):
    """Once the calls of one set of sizes have moved CINNLITE_HOT_SIZE_BYTES on the generic code, those
    sizes run their static build (on the CPU, whose static code is faster): results and errors
    stay the static program's, on the fast path, with out= and on the general path; sizes called
    less keep the generic code."""
    from cinnlite.runtime.executable import Executable
    monkeypatch.setenv("CINNLITE_HOT_SIZE_BYTES", "200000")
    exe = cl.compile(_short_row_gather())
    x, i, want = _short_row_case((3, 50, 70, 13), 1)
    moved = x.nbytes + i.nbytes + want.nbytes
    calls = [lambda: exe(x=x, i=i), lambda: exe(x=x, i=i, out=np.empty_like(want)),
             lambda: Executable.__call__(exe, x=x, i=i)]
    for k in range(-(-200_000 // moved) + 3):
        np.testing.assert_array_equal(calls[k % 3](), want)
        plan = exe._shapes.by_shapes[(x.shape, i.shape)]
        assert (plan.specialised is not None) == ((k + 1) * moved >= 200_000), k
    assert not plan.specialised.symbolic
    # A rule of constant counts only: its inner loops merged, or, where masked vector gathers
    # are cheap, the row of 13 a masked vector loop.
    if masked_vectors():
        assert "llvm.loop.vectorize.predicate.enable" in plan.specialised.source("llvm")
    else:
        assert "for i1_i2" in plan.specialised.source("lowered")
    bad = i.copy()
    bad[2, 5, 7] = 50
    with pytest.raises(IndexOutOfRangeError, match=r"index 50 at position \(2, 5, 7\) of input 'i'"):
        exe(x=x, i=bad)
    x2, i2, want2 = _short_row_case((2, 30, 40, 11), 2)
    np.testing.assert_array_equal(exe(x=x2, i=i2), want2)
    assert exe._shapes.by_shapes[(x2.shape, i2.shape)].specialised is None


def test_sizes_never_turn_hot_with_hot_size_bytes_0(monkeypatch, cache_dir):
    monkeypatch.setenv("CINNLITE_HOT_SIZE_BYTES", "0")
    exe = cl.compile(_short_row_gather())
    x, i, want = _short_row_case((2, 9, 5, 3), 5)
    for _ in range(3):
        np.testing.assert_array_equal(exe(x=x, i=i), want)
    assert exe._shapes.by_shapes[(x.shape, i.shape)].specialised is None


def test_a_hot_size_leaves_the_generic_pool(monkeypatch, cache_dir):
    """The generic code's buffer pool lets go of the blocks of sizes that turn hot: the static
    build has its own, and the memory would be held twice."""
    monkeypatch.setenv("CINNLITE_HOT_SIZE_BYTES", str(10 << 20))
    b = cl.NetBuilder("pooled")
    x = b.create_input(cl.Float(32), ("N", 1000), "x")
    i = b.create_input(cl.Int(64), ("E",), "i")
    exe = cl.compile(b.build([b.take(x, i, axis=0)]))
    xv, iv = np.ones((7, 1000), np.float32), np.arange(600) % 7  # 2.4 MB out: the pool's
    held = lambda pool: sum(len(shelf) for shelf in pool._blocks.values())  # noqa: E731
    exe(x=xv, i=iv)
    assert held(exe._pool) == 1
    for _ in range(4):
        exe(x=xv, i=iv)
    plan = exe._shapes.by_shapes[(xv.shape, iv.shape)]
    assert plan.specialised is not None and held(exe._pool) == 0 and held(plan.specialised._pool) >= 1


@pytest.mark.parametrize("value, hot", [("0", False), ("1", True), (" 5 ", True), ("-1", None), ("1e9", None)])
def test_hot_size_bytes_takes_a_number_of_bytes(monkeypatch, cache_dir, value, hot):
    """A number of bytes (0: never); anything else warns, naming the variable, and keeps the
    default (so these small calls stay generic)."""
    monkeypatch.setenv("CINNLITE_HOT_SIZE_BYTES", value)
    exe = cl.compile(_short_row_gather())
    x, i, want = _short_row_case((2, 9, 5, 3), 6)
    if hot is None:
        with pytest.warns(RuntimeWarning, match="CINNLITE_HOT_SIZE_BYTES"):
            exe(x=x, i=i)
    for _ in range(2):
        np.testing.assert_array_equal(exe(x=x, i=i), want)
    assert (exe._shapes.by_shapes[(x.shape, i.shape)].specialised is not None) == bool(hot)


def test_a_hot_size_compiles_once_whatever_threads_call_it(monkeypatch, cache_dir):
    import threading

    x, i, want = _short_row_case((2, 20, 30, 7), 3)
    monkeypatch.setenv("CINNLITE_HOT_SIZE_BYTES", str(3 * (x.nbytes + i.nbytes + want.nbytes)))
    exe = cl.compile(_short_row_gather())
    compiled = []
    compile_static = exe._shapes.compile_static
    exe._shapes.compile_static = lambda *a, **k: compiled.append(1) or compile_static(*a, **k)
    exe(x=x, i=i)  # the sizes get their plan; the third call makes them hot
    assert not compiled
    failures = []

    def caller():
        for _ in range(20):
            if not np.array_equal(exe(x=x, i=i), want):
                failures.append("wrong result")
    threads = [threading.Thread(target=caller) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures and len(compiled) == 1


def test_hot_sizes_stay_generic_where_the_backend_does_not_specialise(monkeypatch, cache_dir):
    monkeypatch.setenv("CINNLITE_HOT_SIZE_BYTES", "1")
    exe = cl.compile(_short_row_gather(), target="cuda-emu")
    x, i, want = _short_row_case((2, 9, 5, 3), 4)
    for _ in range(3):
        np.testing.assert_array_equal(exe(x=x, i=i), want)
    assert exe._shapes.by_shapes[(x.shape, i.shape)].specialised is None


def test_a_generic_version_serves_only_the_sizes_it_left_symbolic(cache_dir):
    """Two sizes of a structure that differ in one input make only that size a symbol; a third
    size that differs in another input compiles its own program rather than reusing it."""
    def prog(rows, n):
        b = cl.NetBuilder("serves")
        x = b.create_input(cl.Float(32), (rows, 2), "x")
        i = b.create_input(cl.Int(64), (n,), "i")
        return b.build([b.take(x, i, axis=0)])
    cl.compile(prog(50, 3))
    generic = cl.compile(prog(50, 5))
    assert generic.symbolic and generic.program.inputs[0].shape == (50, 2)
    other = cl.compile(prog(7, 5))
    assert other is not generic
    x = np.arange(14, dtype=np.float32).reshape(7, 2)
    np.testing.assert_array_equal(other(x=x, i=np.array([6, 0, -1, 2, 3])), x[[6, 0, -1, 2, 3]])


def test_raise_checks_leave_symbolic_loops_vectorised():
    """A raise-mode check flags a bad index without a branch (the flag ORs in), so the loop of
    a symbolic gather is vectorised as the static one is: a conditional store of the flag left
    the symbolic loop scalar, at half the speed."""
    import re

    b = cl.NetBuilder("flag_vec")
    x = b.create_input(cl.Float(32), ("R", 64), "x")
    i = b.create_input(cl.Int(64), ("M", 64), "i")
    exe = cl.compile(b.build([b.gather(x, i, axis=0)]), target="cpu")
    text = exe.source("llvm_opt")
    stage = re.search(r"define [^@]*@k_gather_0_s0\(.*?\n}\n", text, re.S).group(0)
    assert re.search(r"<\d+ x i64>", stage), "the gather's index loop was not vectorised"
    rng = np.random.default_rng(3)
    xv, iv = rng.standard_normal((37, 64)).astype(np.float32), rng.integers(-37, 37, (11, 64))
    np.testing.assert_array_equal(exe(x=xv, i=iv), np.take_along_axis(xv, iv % 37, axis=0))
    with pytest.raises(IndexOutOfRangeError):
        exe(x=xv, i=np.where(iv == iv[5, 7], 37, iv))
