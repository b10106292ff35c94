"""The worked examples of SEMANTICS.md ("Examples every backend must reproduce"), on every backend.

Sources: the CINN design document (seed 002), OpenVINO Gather-8 (seed 001), the TensorRT Gather
layer in ND mode (seed 000) and ONNX Gather (seed 003). Expected values are copied from those
documents, not computed.
"""
from __future__ import annotations

import numpy as np
import pytest

import cinnlite as cl

INDEX_DTYPES = ["int32", "int64"]


def run_program(backend, builder, outputs, feeds):
    exe = cl.compile(builder.build(outputs=outputs), target=backend)
    outs = exe.run(feeds)
    return [outs[t.name] for t in outputs]


def assert_exact(got, want, label=""):
    want = np.asarray(want)
    assert got.shape == want.shape, f"{label}: shape {got.shape}, expected {want.shape}"
    assert got.dtype == want.dtype, f"{label}: dtype {got.dtype}, expected {want.dtype}"
    np.testing.assert_array_equal(got, want, err_msg=label)


# -- the CINN design document -------------------------------------------------------------------

CINN_INDEX = [[0, 1, 1], [3, 2, 0]]
CINN_GATHER_AXIS0 = [[0, 4, 5], [9, 7, 2]]
CINN_GATHER_AXIS1_FILL = [[0, 1, 1], [0, 5, 3]]
CINN_GATHER_AXIS1_WRAP = [[0, 1, 1], [3, 5, 3]]
CINN_SCATTER = [[0, 0, 2], [0, 4, 5], [0, 7, 0], [9, 0, 0]]


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_cinn_document_example(backend, dtype, index_dtype):
    b = cl.NetBuilder("cinn_example")
    A = b.create_input(dtype, (4, 3), "A")
    index = b.create_input(index_dtype, (2, 3), "index")
    b1 = b.gather(A, index, axis=0)
    b2_fill = b.gather(A, index, axis=1, mode="fill")
    b2_wrap = b.gather(A, index, axis=1, mode="wrap")
    b3 = b.scatter(b.fill_constant((4, 3), 0, dtype), index, b1, axis=0)
    # The document's equivalent nd forms: gather_nd / scatter_nd with dims=[d] and index[..., None].
    index1 = b.create_input(index_dtype, (2, 3, 1), "index1")
    b1_nd = b.gather_nd(A, index1, dims=[0])
    b3_nd = b.scatter_nd(b.fill_constant((4, 3), 0, dtype), index1, b1_nd, dims=[0])
    outs = [b1, b2_fill, b2_wrap, b3, b1_nd, b3_nd]
    feeds = {"A": np.arange(12, dtype=dtype).reshape(4, 3), "index": np.array(CINN_INDEX, index_dtype),
             "index1": np.array(CINN_INDEX, index_dtype)[..., None]}
    got = run_program(backend, b, outs, feeds)
    want = [CINN_GATHER_AXIS0, CINN_GATHER_AXIS1_FILL, CINN_GATHER_AXIS1_WRAP, CINN_SCATTER,
            CINN_GATHER_AXIS0, CINN_SCATTER]
    labels = ["gather axis 0", "gather axis 1 fill", "gather axis 1 wrap", "scatter", "gather_nd dims=[0]",
              "scatter_nd dims=[0]"]
    for g, w, label in zip(got, want, labels):
        assert_exact(g, np.array(w, dtype), label)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
def test_cinn_document_gather_axis1_raises_by_default(backend, index_dtype):
    """index holds 3 on an axis of size 3: the default mode stops the run."""
    b = cl.NetBuilder("cinn_example_raise")
    A = b.create_input("float32", (4, 3), "A")
    index = b.create_input(index_dtype, (2, 3), "index")
    out = b.gather(A, index, axis=1)
    exe = cl.compile(b.build(outputs=[out]), target=backend)
    with pytest.raises(cl.IndexOutOfRangeError) as info:
        exe(A=np.arange(12, dtype=np.float32).reshape(4, 3), index=np.array(CINN_INDEX, index_dtype))
    err = info.value
    assert isinstance(err, IndexError)
    msg = str(err)
    for part in ("gather", "'index'", "(1, 0)", "3", "[-3, 2]"):
        assert part in msg, f"{part!r} not in {msg!r}"


def test_cinn_document_builder_snippet(backend):
    """The NetBuilder snippet of the document: A (8, 24), index (3, 24), gather then scatter."""
    b = cl.NetBuilder("test_basic")
    a = b.create_input(cl.Float(32), (8, 24), "A")
    i = b.create_input(cl.Int(32), (3, 24), "index")
    g = b.gather(a, i, axis=0)
    assert g.shape == (3, 24)
    z = b.create_input(cl.Float(32), (8, 24), "Z")
    s = b.scatter(z, i, g, axis=0)
    assert s.shape == (8, 24)
    rng = np.random.default_rng(2022)
    A = rng.standard_normal((8, 24)).astype(np.float32)
    Z = np.zeros((8, 24), np.float32)
    rows = np.stack([rng.permutation(8)[:3] for _ in range(24)], axis=1).astype(np.int32)  # distinct per column
    got_g, got_s = run_program(backend, b, [g, s], {"A": A, "index": rows, "Z": Z})
    cols = np.arange(24)
    assert_exact(got_g, A[rows, cols], "gather")
    want = Z.copy()
    want[rows, cols] = A[rows, cols]
    assert_exact(got_s, want, "scatter")


# -- OpenVINO Gather-8 --------------------------------------------------------------------------

OPENVINO_EXAMPLES = {
    1: dict(batch_dims=0, axis=0, indices=[0, 0, 4], data=[1, 2, 3, 4, 5], output=[1, 1, 5]),
    2: dict(batch_dims=1, axis=1, indices=[[0, 0, 4], [4, 0, 0]], data=[[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]],
            output=[[1, 1, 5], [10, 6, 6]]),
    3: dict(batch_dims=2, axis=2,
            indices=[[[0, 0, 4], [4, 0, 0]], [[1, 2, 4], [4, 3, 2]]],
            data=[[[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]], [[11, 12, 13, 14, 15], [16, 17, 18, 19, 20]]],
            output=[[[1, 1, 5], [10, 6, 6]], [[12, 13, 15], [20, 19, 18]]]),
    4: dict(batch_dims=1, axis=2,
            indices=[[1, 2, 4], [4, 3, 2]],
            data=[[[[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16], [17, 18, 19, 20]]],
                  [[[21, 22, 23, 24], [25, 26, 27, 28], [29, 30, 31, 32], [33, 34, 35, 36], [37, 38, 39, 40]]]],
            output=[[[[5, 6, 7, 8], [9, 10, 11, 12], [17, 18, 19, 20]]],
                    [[[37, 38, 39, 40], [33, 34, 35, 36], [29, 30, 31, 32]]]]),
    5: dict(batch_dims=-1, axis=1, indices=[[0, 0, 4], [4, 0, 0]], data=[[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]],
            output=[[1, 1, 5], [10, 6, 6]]),
    6: dict(batch_dims=0, axis=0, indices=[0, -2, -1], data=[1, 2, 3, 4, 5], output=[1, 4, 5]),
    7: dict(batch_dims=0, axis=0, indices=[3, 10, -20], data=[1, 2, 3, 4, 5], output=[4, 0, 0], mode="fill"),
}

OPENVINO_SHAPES = {2: (2, 3), 3: (2, 2, 3), 4: (2, 1, 3, 4), 5: (2, 3)}


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dtype", ["float32", "int32"])
def test_openvino_gather8_examples(backend, dtype, index_dtype):
    b = cl.NetBuilder("openvino_gather8")
    feeds, outs, wants = {}, [], []
    for n, ex in OPENVINO_EXAMPLES.items():
        data = np.array(ex["data"], dtype)
        indices = np.array(ex["indices"], index_dtype)
        x = b.create_input(dtype, data.shape, f"data{n}")
        i = b.create_input(index_dtype, indices.shape, f"indices{n}")
        feeds[f"data{n}"], feeds[f"indices{n}"] = data, indices
        out = b.take(x, i, axis=ex["axis"], batch_dims=ex["batch_dims"], mode=ex.get("mode", "raise"))
        want = np.array(ex["output"], dtype)
        assert out.shape == want.shape == OPENVINO_SHAPES.get(n, want.shape), f"example {n}"
        outs.append(out)
        wants.append(want)
    got = run_program(backend, b, outs, feeds)
    for n, g, w in zip(OPENVINO_EXAMPLES, got, wants):
        assert_exact(g, w, f"OpenVINO Gather-8 example {n}")


def test_openvino_example7_raises_by_default(backend):
    """Example 7 holds out-of-range indices: without mode="fill" it is an error."""
    b = cl.NetBuilder("openvino_gather8_raise")
    x = b.create_input("int32", (5,), "data")
    i = b.create_input("int64", (3,), "indices")
    exe = cl.compile(b.build(outputs=[b.take(x, i, axis=0)]), target=backend)
    with pytest.raises(cl.IndexOutOfRangeError) as info:
        exe(data=np.arange(1, 6, dtype=np.int32), indices=np.array([3, 10, -20], np.int64))
    msg = str(info.value)
    assert "take" in msg and "indices" in msg and "(1,)" in msg and "10" in msg, msg


# -- TensorRT Gather, ND mode -------------------------------------------------------------------


def tensorrt_data(dtype="float32"):
    """data[0, j, k, l] = 100 j + 10 k + l, shape (1, 3, 4, 5)."""
    j, k, l = np.meshgrid(np.arange(3), np.arange(4), np.arange(5), indexing="ij")
    return (100 * j + 10 * k + l).reshape(1, 3, 4, 5).astype(dtype)


TENSORRT_EXAMPLES = [
    # batch_dims (num_elementwise_dims), index, expected output
    # The seed's summary line prints the first value as "1."; its worked explanation (and the
    # formula) give data[0, 0, 1, 2] = 12.
    (1, [[[0, 1, 2], [0, 2, -1]]], [[12, 24]]),
    (2, [[[2, 1], [3, 0], [1, 2]]], [[21, 130, 212]]),
    (3, [[[[0], [0], [0], [0]], [[2], [2], [2], [2]], [[1], [1], [1], [1]]]],
     [[[0, 10, 20, 30], [102, 112, 122, 132], [201, 211, 221, 231]]]),
    (2, [[[2], [3], [1]]],
     [[[20, 21, 22, 23, 24], [130, 131, 132, 133, 134], [210, 211, 212, 213, 214]]]),
]


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dtype", ["float32", "int16"])
def test_tensorrt_gather_nd_examples(backend, dtype, index_dtype):
    b = cl.NetBuilder("tensorrt_gather_nd")
    x = b.create_input(dtype, (1, 3, 4, 5), "data")
    feeds, outs, wants = {"data": tensorrt_data(dtype)}, [], []
    for n, (batch_dims, index, output) in enumerate(TENSORRT_EXAMPLES):
        index = np.array(index, index_dtype)
        i = b.create_input(index_dtype, index.shape, f"index{n}")
        feeds[f"index{n}"] = index
        outs.append(b.gather_nd(x, i, batch_dims=batch_dims))
        wants.append(np.array(output, dtype))
    assert [o.shape for o in outs] == [(1, 2), (1, 3), (1, 3, 4), (1, 3, 5)]
    got = run_program(backend, b, outs, feeds)
    for (batch_dims, _, _), g, w in zip(TENSORRT_EXAMPLES, got, wants):
        assert_exact(g, w, f"TensorRT gather_nd batch_dims={batch_dims}")


TENSORRT_ERRORS = [
    # index shape, batch_dims, a fragment of the rule the message must name
    pytest.param((1, 2, 4), 1, "index.shape[-1] <= rank(x) - batch_dims", id="tuple-longer-than-rank-minus-batch"),
    pytest.param((1, 3, 2), 3, "batch_dims < min(rank(x), rank(index))", id="batch_dims-not-below-min-rank"),
    pytest.param((1, 2, 2), 2, "x.shape[:batch_dims] == index.shape[:batch_dims]", id="batch-shapes-differ"),
]


@pytest.mark.parametrize("index_shape,batch_dims,rule", TENSORRT_ERRORS)
def test_tensorrt_gather_nd_error_conditions(index_shape, batch_dims, rule):
    """The three TensorRT ND-mode checks, each its own error when the operator is added."""
    b = cl.NetBuilder("tensorrt_errors")
    x = b.create_input("float32", (1, 3, 4, 5), "data")
    i = b.create_input("int32", index_shape, "index")
    with pytest.raises(cl.ValidationError) as info:
        b.gather_nd(x, i, batch_dims=batch_dims)
    msg = str(info.value)
    assert "gather_nd" in msg, msg
    assert rule.replace(" ", "") in msg.replace(" ", ""), f"the message does not name the rule {rule!r}: {msg}"


def test_tensorrt_error_messages_are_distinct():
    msgs = []
    for param in TENSORRT_ERRORS:
        index_shape, batch_dims, _ = param.values
        b = cl.NetBuilder("tensorrt_errors")
        x = b.create_input("float32", (1, 3, 4, 5), "data")
        i = b.create_input("int64", index_shape, "index")
        with pytest.raises(cl.ValidationError) as info:
            b.gather_nd(x, i, batch_dims=batch_dims)
        msgs.append(str(info.value))
    assert len(set(msgs)) == 3, msgs


# -- ONNX Gather ----------------------------------------------------------------------------------

ONNX_AXIS0 = dict(
    data=[[1.0, 1.2], [2.3, 3.4], [4.5, 5.7]],
    indices=[[0, 1], [1, 2]],
    output=[[[1.0, 1.2], [2.3, 3.4]], [[2.3, 3.4], [4.5, 5.7]]],
)
ONNX_AXIS1 = dict(
    data=[[1.0, 1.2, 1.9], [2.3, 3.4, 3.9], [4.5, 5.7, 5.9]],
    indices=[[0, 2]],
    output=[[[1.0, 1.9]], [[2.3, 3.9]], [[4.5, 5.9]]],
)


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_onnx_gather_examples(backend, dtype, index_dtype):
    b = cl.NetBuilder("onnx_gather")
    feeds, outs, wants = {}, [], []
    for axis, ex in ((0, ONNX_AXIS0), (1, ONNX_AXIS1)):
        data, indices = np.array(ex["data"], dtype), np.array(ex["indices"], index_dtype)
        x = b.create_input(dtype, data.shape, f"data{axis}")
        i = b.create_input(index_dtype, indices.shape, f"indices{axis}")
        feeds[f"data{axis}"], feeds[f"indices{axis}"] = data, indices
        outs.append(b.take(x, i, axis=axis))
        wants.append(np.array(ex["output"], dtype))
    got = run_program(backend, b, outs, feeds)
    assert_exact(got[0], wants[0], "ONNX Gather axis=0")
    assert_exact(got[1], wants[1], "ONNX Gather axis=1")


def test_onnx_gather_shape_table(backend):
    """The ONNX shape table: a scalar index removes the axis; an (R, S) index replaces it."""
    P, Q, R, S = 4, 3, 2, 5
    rng = np.random.default_rng(13)
    b = cl.NetBuilder("onnx_table")
    pq = rng.standard_normal((P, Q)).astype(np.float32)
    pqr = rng.standard_normal((P, Q, 2)).astype(np.float32)
    x2 = b.create_input("float32", (P, Q), "pq")
    x3 = b.create_input("float32", (P, Q, 2), "pqr")
    scalar = b.create_input("int64", (), "scalar")
    rs0 = b.create_input("int64", (R, S), "rs0")
    rs1 = b.create_input("int32", (R, S), "rs1")
    outs = [b.take(x2, scalar, axis=0), b.take(x3, scalar, axis=1), b.take(x2, rs0, axis=0), b.take(x2, rs1, axis=1)]
    assert [o.shape for o in outs] == [(Q,), (P, 2), (R, S, Q), (P, R, S)]
    feeds = {"pq": pq, "pqr": pqr, "scalar": np.array(-1, np.int64),
             "rs0": rng.integers(-P, P, (R, S)).astype(np.int64), "rs1": rng.integers(-Q, Q, (R, S)).astype(np.int32)}
    got = run_program(backend, b, outs, feeds)
    assert_exact(got[0], pq[-1, :], "data[indices, q]")
    assert_exact(got[1], pqr[:, -1, :], "data[p, indices, r]")
    assert_exact(got[2], pq[feeds["rs0"], :], "data[indices[r, s], q]")
    assert_exact(got[3], pq[:, feeds["rs1"]], "data[p, indices[r, s]]")
