"""The fusion pass: gathers, fills, reshapes and elementwise operators are inlined into their
consumers, results stay identical, and errors still name the right operator."""
import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder


def message_passing(n_nodes=50, n_edges=400, width=8):
    b = NetBuilder("mp")
    x = b.create_input("float32", (n_nodes, width), "x")
    src = b.create_input("int64", (n_edges,), "src")
    dst = b.create_input("int64", (n_edges,), "dst")
    zeros = b.fill_constant((n_nodes, width), 0.0, "float32")
    msg = b.take(x, src, axis=0)
    out = b.scatter_nd(zeros, b.reshape(dst, (n_edges, 1)), msg, reduce="add")
    return b.build([out])


def test_message_passing_is_one_kernel_without_intermediates():
    exe = cl.compile(message_passing(), target="cpu")
    lowered = exe.lowered
    assert len(lowered.kernels) == 1
    assert lowered.intermediates == ()
    text = exe.source("lowered")
    assert "take_0[" not in text and "fill_constant_0[" not in text and "reshape_0[" not in text
    assert "x[" in text  # the gathered rows are read straight from x inside the scatter loop


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_fused_results_equal_unfused_and_numpy(threads):
    rng = np.random.default_rng(3)
    prog = message_passing()
    x = rng.standard_normal((50, 8)).astype(np.float32)
    src, dst = rng.integers(-50, 50, 400), rng.integers(0, 50, 400)
    fused = cl.compile(prog, target="cpu", threads=threads)(x=x, src=src, dst=dst)
    unfused = cl.compile(prog, target="cpu", fuse=False)(x=x, src=src, dst=dst)
    want = np.zeros((50, 8), np.float32)
    np.add.at(want, dst, np.take(x, src, axis=0))
    np.testing.assert_array_equal(fused, unfused)
    np.testing.assert_allclose(fused, want, rtol=1e-5, atol=1e-5)


def test_error_in_a_fused_gather_names_the_gather():
    exe = cl.compile(message_passing(), target="cpu")
    src = np.zeros(400, np.int64)
    src[17] = 50
    with pytest.raises(cl.IndexOutOfRangeError) as info:
        exe(x=np.zeros((50, 8), np.float32), src=src, dst=np.zeros(400, np.int64))
    msg = str(info.value)
    assert "take" in msg and "'src'" in msg and "(17,)" in msg and "50" in msg


def test_outputs_are_never_inlined_away():
    b = NetBuilder("two")
    x = b.create_input("float32", (6, 2), "x")
    i = b.create_input("int32", (4,), "i")
    t = b.take(x, i, axis=0)
    y = b.multiply(t, t)
    exe = cl.compile(b.build([t, y]), target="cpu")
    X = np.arange(12, dtype=np.float32).reshape(6, 2)
    I = np.array([5, 0, -1, 2], np.int32)
    got_t, got_y = exe(x=X, i=I)
    np.testing.assert_array_equal(got_t, X[I])
    np.testing.assert_array_equal(got_y, X[I] * X[I])


def test_chain_of_elementwise_ops_fuses_into_one_loop():
    b = NetBuilder("chain")
    x = b.create_input("float64", (10, 3), "x")
    y = b.cast(b.maximum(b.add(x, x), b.fill_constant((3,), 1.0, "float64")), "float32")
    exe = cl.compile(b.build([y]), target="cpu")
    assert len(exe.lowered.kernels) == 1
    X = np.linspace(-3, 3, 30).reshape(10, 3)
    np.testing.assert_array_equal(exe(x=X), np.maximum(X + X, 1.0).astype(np.float32))


@pytest.mark.parametrize("first", ["i1", "i2"])
def test_errors_of_several_fused_producers_keep_the_unfused_order(first):
    """Two gathers feed one scatter and both have a bad index: whatever is fused, the error is
    the one the unfused program reports (the operator that runs first)."""
    b = NetBuilder("p")
    d1 = b.create_input("float32", (6, 4), "d1")
    d2 = b.create_input("float32", (6, 4), "d2")
    i1 = b.create_input("int64", (5,), "i1")
    i2 = b.create_input("int64", (3,), "i2")
    idx = b.create_input("int64", (3,), "idx")
    if first == "i1":
        x, s = b.take(d1, i1, axis=0), b.take(d2, i2, axis=0)
    else:
        s, x = b.take(d2, i2, axis=0), b.take(d1, i1, axis=0)
    prog = b.build(outputs=[b.scatter_nd(x, b.reshape(idx, (3, 1)), s, reduce="add")])
    args = dict(d1=np.ones((6, 4), np.float32), d2=np.ones((6, 4), np.float32),
                i1=np.array([0, 1, 9, 2, 3]), i2=np.array([0, 99, 1]), idx=np.array([0, 1, 7]))
    messages = []
    for kw in ({"fuse": False}, {}, {"threads": 1}):
        with pytest.raises(cl.IndexOutOfRangeError) as info:
            cl.compile(prog, cache=False, **kw)(**args)
        messages.append(str(info.value))
    assert messages[0] == messages[1] == messages[2]
    assert f"'{first}'" in messages[0]
