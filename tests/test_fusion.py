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


def _index_chain(consumer: str, axis_size: int):
    """``consumer(x, take(rows, perm, mode="raise"))`` where ``x``'s indexed axis has
    ``axis_size`` elements: every index the consumer sees is out of range when the axis is empty,
    and in range or not when it has one element."""
    b = NetBuilder(f"chain_{consumer}")
    x_shape = (axis_size, 3)
    rows = b.create_input("int64", (3, 2, 2) if consumer in ("gather_nd", "scatter_nd") else (3, 2), "idx_rows")
    perm = b.create_input("int64", (2,), "idx_perm")
    x = b.fill_constant(shape=x_shape, value=1.0, dtype="float32", name="x_made")
    idx = b.take(rows, perm, axis=0, mode="raise", name="idx_made")
    if consumer == "take":
        out = b.take(x, idx, axis=0, mode="raise", name="out")
    elif consumer == "gather":
        out = b.gather(x, idx, axis=0, mode="raise", name="out")
    elif consumer == "gather_nd":
        out = b.gather_nd(x, idx, dims=[0, 1], index_layout="last", mode="raise", name="out")
    elif consumer == "scatter":
        src = b.fill_constant(shape=(2, 2), value=2.0, dtype="float32", name="src_made")
        out = b.scatter(x, idx, src, axis=0, reduce="add", mode="raise", name="out")
    else:
        src = b.fill_constant(shape=(2, 2), value=2.0, dtype="float32", name="src_made")
        out = b.scatter_nd(x, idx, src, dims=[0, 1], reduce="add", mode="raise", name="out")
    return b.build(outputs=[out]), rows.shape


@pytest.mark.parametrize("consumer", ["take", "gather", "gather_nd", "scatter", "scatter_nd"])
@pytest.mark.parametrize("axis_size", [0, 1])
@pytest.mark.parametrize("bad_at", [0, 1])
def test_fused_raise_chain_blames_the_input_not_the_intermediate(backend, consumer, axis_size, bad_at):
    """A raise-mode take computes the index of a raise-mode consumer whose indexed axis is empty
    or has one element. The take's bad index comes first in program order, so the error names
    the take and its input, fused or not, never the computed index."""
    prog, rows_shape = _index_chain(consumer, axis_size)
    perm = np.array([0, 0], np.int64)
    perm[bad_at] = 5241456836771968094
    args = dict(idx_rows=np.zeros(rows_shape, np.int64), idx_perm=perm)
    messages = []
    for fuse in (True, False):
        with pytest.raises(cl.IndexOutOfRangeError) as info:
            cl.compile(prog, target=backend, fuse=fuse, cache=False)(**args)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    assert "'idx_perm'" in messages[0] and f"({bad_at},)" in messages[0]
    assert "5241456836771968094" in messages[0] and "idx_made'" in messages[0]


def test_fused_reproducer_from_a_randomized_draw_names_the_producer(backend):
    """The shrunk draw on which fused and unfused errors once differed."""
    b = NetBuilder("repro")
    rows = b.create_input("int64", (3, 2, 2), "idx_rows")
    perm = b.create_input("int64", (2,), "idx_perm")
    x = b.fill_constant(shape=(0, 3), value=False, dtype="bool", name="x_made")
    made = b.take(rows, perm, axis=0, mode="raise", name="idx_made")
    out = b.gather_nd(x, made, mode="raise", dims=[0, 1], index_layout="last", name="out")
    exe = cl.compile(b.build(outputs=[out]), target=backend, cache=False)
    with pytest.raises(cl.IndexOutOfRangeError) as info:
        exe.run({"idx_rows": np.zeros((3, 2, 2), np.int64),
                 "idx_perm": np.array([5241456836771968094, -2035659344438825369])})
    msg = str(info.value)
    assert msg.startswith("take 'idx_made'") and "'idx_perm'" in msg and "(0,)" in msg
    assert "5241456836771968094" in msg
