"""The ONNX importer: every supported operator at every opset it was defined in, against ONNX's
reference evaluator, on every backend; and the errors for what it does not import."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import cinnlite as cl  # noqa: E402
from cinnlite.frontend.onnx import (OnnxImportError, OnnxNotInstalledError, from_onnx,  # noqa: E402
                                    import_onnx, tensor_name)

F32, I32, I64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def model(nodes, inputs, outputs, opset, initializers=()):
    graph = helper.make_graph(nodes, "m", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run_both(m, feeds, backend):
    """Outputs of cinnlite and of ONNX's reference evaluator, by ONNX output name."""
    imported = import_onnx(m)
    exe = cl.compile(imported.program, target=backend)
    got = imported.named_outputs(exe.run(imported.feeds(feeds)))
    want = dict(zip([o.name for o in m.graph.output], ReferenceEvaluator(m).run(None, feeds)))
    return got, want


def assert_same(got, want):
    assert set(got) == set(want)
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def rng():
    return np.random.default_rng(0)


# -- every operator at every opset ---------------------------------------------------------------


@pytest.mark.parametrize("opset", [1, 11, 13])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather(backend, opset, axis):
    r = rng()
    x = r.standard_normal((4, 5, 3)).astype(np.float32)
    size = x.shape[axis]
    idx = r.integers(-size, size, (2, 3)).astype(np.int64)
    m = model([helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)],
              [vi("x", F32, x.shape), vi("i", I64, idx.shape)], [vi("y", F32, None)], opset)
    assert_same(*run_both(m, {"x": x, "i": idx}, backend))


def test_gather_scalar_index_int32(backend):
    x = np.arange(12, dtype=np.int64).reshape(3, 4)
    m = model([helper.make_node("Gather", ["x", "i"], ["y"], axis=1)],
              [vi("x", TensorProto.INT64, x.shape), vi("i", I32, ())], [vi("y", TensorProto.INT64, None)], 13)
    got, want = run_both(m, {"x": x, "i": np.array(-1, np.int32)}, backend)
    assert got["y"].shape == (3,)
    assert_same(got, want)


@pytest.mark.parametrize("elem", ["BFLOAT16", "UINT16", "UINT32", "UINT64"])
def test_bfloat16_and_unsigned_data(backend, elem):
    """Element types beyond numpy's own: gathers, a scatter with a reduction and casts, against
    the reference evaluator (bfloat16 arrays are ml_dtypes arrays on both sides)."""
    t = getattr(TensorProto, elem)
    dtype = helper.tensor_dtype_to_np_dtype(t)
    x = (np.arange(12) * 3).reshape(3, 4).astype(dtype)
    u = np.full((2, 4), 2, dtype)
    nodes = [helper.make_node("GatherElements", ["x", "i"], ["g"], axis=0),
             helper.make_node("Gather", ["x", "j"], ["h"], axis=1),
             helper.make_node("ScatterElements", ["x", "i", "u"], ["s"], axis=0, reduction="add"),
             helper.make_node("Cast", ["g"], ["c"], to=F32),
             helper.make_node("Cast", ["c"], ["back"], to=t)]
    m = model(nodes, [vi("x", t, x.shape), vi("i", I64, (2, 4)), vi("j", I32, (3,)), vi("u", t, u.shape)],
              [vi("g", t, None), vi("h", t, None), vi("s", t, None), vi("c", F32, None), vi("back", t, None)], 18)
    feeds = {"x": x, "i": np.array([[0, 1, 2, -1], [1, 1, 0, 2]]), "j": np.array([3, -4, 1], np.int32), "u": u}
    got, want = run_both(m, feeds, backend)
    assert set(got) == set(want)
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_array_equal(got[name].astype(np.float64), want[name].astype(np.float64), err_msg=name)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [0, 1])
def test_gather_elements(backend, opset, axis):
    r = rng()
    x = r.standard_normal((3, 4)).astype(np.float32)
    idx_shape = (2, 4) if axis == 0 else (3, 2)
    idx = r.integers(-x.shape[axis], x.shape[axis], idx_shape).astype(np.int32)
    m = model([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=axis)],
              [vi("x", F32, x.shape), vi("i", I32, idx.shape)], [vi("y", F32, None)], opset)
    assert_same(*run_both(m, {"x": x, "i": idx}, backend))


@pytest.mark.parametrize("opset,batch_dims", [(11, None), (12, 0), (12, 1), (13, 2)])
def test_gather_nd(backend, opset, batch_dims):
    r = rng()
    x = r.standard_normal((2, 3, 4, 5)).astype(np.float32)
    b = batch_dims or 0
    m_len = 4 - b - 1
    idx = np.stack([r.integers(-x.shape[b + k], x.shape[b + k], (2, 3, 2)[:b] + (6,)) for k in range(m_len)],
                   axis=-1).astype(np.int64)
    attrs = {} if batch_dims is None else {"batch_dims": batch_dims}
    m = model([helper.make_node("GatherND", ["x", "i"], ["y"], **attrs)],
              [vi("x", F32, x.shape), vi("i", I64, idx.shape)], [vi("y", F32, None)], opset)
    assert_same(*run_both(m, {"x": x, "i": idx}, backend))


@pytest.mark.parametrize("opset", [9, 10])
def test_scatter_opset9(backend, opset):
    x = np.zeros((3, 3), np.float32)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int64)
    u = np.array([[1.0, 1.1, 1.2], [2.0, 2.1, 2.2]], np.float32)
    m = model([helper.make_node("Scatter", ["x", "i", "u"], ["y"], axis=1)],
              [vi("x", F32, x.shape), vi("i", I64, idx.shape), vi("u", F32, u.shape)], [vi("y", F32, None)], opset)
    exe = cl.compile(from_onnx(m), target=backend)
    want = x.copy()   # the reference evaluator has no opset-9 Scatter
    for p in np.ndindex(idx.shape):
        want[p[0], idx[p]] = u[p]
    np.testing.assert_array_equal(exe(x=x, i=idx, u=u), want)


SCATTER_REDUCTIONS = [(11, None), (13, None), (16, "none"), (16, "add"), (16, "mul"),
                      (18, "none"), (18, "add"), (18, "mul"), (18, "max"), (18, "min")]


@pytest.mark.parametrize("opset,reduction", SCATTER_REDUCTIONS)
def test_scatter_elements(backend, opset, reduction):
    r = rng()
    x = r.integers(-5, 5, (4, 3)).astype(np.float32)
    # Reductions combine duplicate indices; without one, indices are distinct (ONNX leaves the
    # order of duplicate writes unspecified).
    idx = r.integers(-4, 4, (3, 3)) if reduction not in (None, "none") else \
        np.stack([r.permutation(4)[:3] for _ in range(3)], axis=1)
    u = r.integers(-5, 5, idx.shape).astype(np.float32)
    attrs = {"axis": 0} if reduction is None else {"axis": 0, "reduction": reduction}
    m = model([helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], **attrs)],
              [vi("x", F32, x.shape), vi("i", I64, idx.shape), vi("u", F32, u.shape)], [vi("y", F32, None)], opset)
    assert_same(*run_both(m, {"x": x, "i": idx.astype(np.int64), "u": u}, backend))


@pytest.mark.parametrize("opset,reduction", SCATTER_REDUCTIONS)
def test_scatter_nd(backend, opset, reduction):
    r = rng()
    x = r.integers(-5, 5, (4, 3, 2)).astype(np.int32)
    if reduction in (None, "none"):
        idx = np.array([[[1, 2]], [[-1, 0]], [[0, 0]]], np.int64)
    else:
        idx = np.array([[[1, 2]], [[1, 2]], [[-4, -1]]], np.int64)
    u = r.integers(-5, 5, (3, 1, 2)).astype(np.int32)
    attrs = {} if reduction is None else {"reduction": reduction}
    m = model([helper.make_node("ScatterND", ["x", "i", "u"], ["y"], **attrs)],
              [vi("x", I32, x.shape), vi("i", I64, idx.shape), vi("u", I32, u.shape)], [vi("y", I32, None)], opset)
    assert_same(*run_both(m, {"x": x, "i": idx, "u": u}, backend))


# -- TensorScatter ----------------------------------------------------------------------------------


def tensor_scatter_model(past_shape, upd_shape, mode=None, axis=None, with_indices=True, const_indices=None):
    attrs = {k: v for k, v in (("mode", mode), ("axis", axis)) if v is not None}
    inputs = [vi("past", F32, past_shape), vi("update", F32, upd_shape)]
    inits = []
    names = ["past", "update"]
    if const_indices is not None:
        inits.append(onnx.numpy_helper.from_array(np.asarray(const_indices, np.int64), "w"))
        names.append("w")
    elif with_indices:
        inputs.append(vi("w", I64, (past_shape[0],)))
        names.append("w")
    node = helper.make_node("TensorScatter", names, ["present"], **attrs)
    return model([node], inputs, [vi("present", F32, past_shape)], 24, inits)


TS_SHAPES = [  # past, update, axis
    ((3, 6), (3, 2), 1),
    ((2, 3, 5, 4), (2, 3, 2, 4), None),
    ((2, 3, 5, 4), (2, 3, 5, 4), -2),
    ((2, 5, 3), (2, 1, 3), 1),
    ((2, 3, 4, 5), (2, 3, 4, 2), 3),
    ((2, 3, 4, 5), (2, 3, 4, 2), -1),
]


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("past_shape,upd_shape,axis", TS_SHAPES, ids=str)
def test_tensor_scatter_with_run_time_write_indices(backend, mode, past_shape, upd_shape, axis):
    r = rng()
    ax = (axis if axis is not None else -2) % len(past_shape)
    max_len, seq_len = past_shape[ax], upd_shape[ax]
    m = tensor_scatter_model(past_shape, upd_shape, mode=mode, axis=axis)
    imported = import_onnx(m)
    exe = cl.compile(imported.program, target=backend)
    past = r.standard_normal(past_shape).astype(np.float32)
    update = r.standard_normal(upd_shape).astype(np.float32)
    ref = ReferenceEvaluator(m)
    if mode == "linear":
        candidates = [np.zeros(past_shape[0], np.int64),
                      np.full(past_shape[0], max_len - seq_len, np.int64),
                      r.integers(0, max_len - seq_len + 1, past_shape[0])]
    else:
        candidates = [r.integers(-3 * max_len, 3 * max_len, past_shape[0]) for _ in range(3)]
    for w in candidates:
        feeds = {"past": past, "update": update, "w": w.astype(np.int64)}
        got = exe.run(imported.feeds(feeds))["present"]
        np.testing.assert_array_equal(got, ref.run(None, feeds)[0], err_msg=f"write_indices={w}")


@pytest.mark.parametrize("bad", [4, 5, 1000, -1, -3, -4, -8, -9])
def test_tensor_scatter_linear_rejects_write_indices_out_of_range(backend, bad):
    # max_sequence_length 5, sequence_length 2: the valid write indices are 0..3.
    m = tensor_scatter_model((2, 5, 3), (2, 2, 3), mode="linear")
    imported = import_onnx(m)
    exe = cl.compile(imported.program, target=backend)
    feeds = {"past": np.zeros((2, 5, 3), np.float32), "update": np.ones((2, 2, 3), np.float32),
             "w": np.array([1, bad], np.int64)}
    with pytest.raises(IndexError):
        exe.run(imported.feeds(feeds))


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_without_or_with_constant_write_indices(backend, mode):
    r = rng()
    past = r.standard_normal((2, 2, 6, 3)).astype(np.float32)
    update = r.standard_normal((2, 2, 3, 3)).astype(np.float32)
    for m in (tensor_scatter_model(past.shape, update.shape, mode=mode, with_indices=False),
              tensor_scatter_model(past.shape, update.shape, mode=mode, const_indices=[3, 1] if mode == "linear"
                                   else [5, -7])):
        assert_same(*run_both(m, {"past": past, "update": update}, backend))


def test_tensor_scatter_constant_write_indices_out_of_range_is_an_import_error():
    m = tensor_scatter_model((2, 5, 3), (2, 2, 3), mode="linear", const_indices=[0, 4])
    with pytest.raises(OnnxImportError, match=r"write_indices\[1\] = 4 is out of range"):
        from_onnx(m)


def test_tensor_scatter_axis_zero_is_an_error():
    m = tensor_scatter_model((2, 5), (2, 5), axis=0)
    with pytest.raises(OnnxImportError, match="axis cannot be 0"):
        from_onnx(m)


# -- the small operators --------------------------------------------------------------------------


def test_initializers_constants_identity_and_reshape(backend):
    idx = onnx.numpy_helper.from_array(np.array([2, 0], np.int64), "idx")
    shape = helper.make_node("Constant", [], ["shape"], value_ints=[0, -1])
    nodes = [
        shape,
        helper.make_node("Reshape", ["x", "shape"], ["x2"]),                   # (2, 3, 2) -> (2, 6)
        helper.make_node("Cast", ["idx"], ["idx32"], to=I32),                    # folded on a constant
        helper.make_node("Gather", ["x2", "idx32"], ["g"], axis=1),
        helper.make_node("Identity", ["g"], ["out_g"]),
        helper.make_node("Identity", ["x"], ["out_x"]),                          # an input as an output
        helper.make_node("Constant", [], ["c"], value_float=1.5),
        helper.make_node("Identity", ["c"], ["out_c"]),
    ]
    m = model(nodes, [vi("x", F32, (2, 3, 2))],
              [vi("out_g", F32, (2, 2)), vi("out_x", F32, (2, 3, 2)), vi("out_c", F32, ()), vi("c", F32, ())],
              13, [idx])
    x = np.arange(12, dtype=np.float32).reshape(2, 3, 2)
    got, want = run_both(m, {"x": x}, backend)
    assert_same(got, want)
    program = from_onnx(m)
    assert [t.name for t in program.outputs] == ["out_g", "out_x", "out_c", "c"]
    assert [t.name for t in program.inputs] == ["x"]


def test_cast_of_a_computed_tensor(backend):
    m = model([helper.make_node("Gather", ["x", "i"], ["g"], axis=0),
               helper.make_node("Cast", ["g"], ["y"], to=TensorProto.INT32),
               helper.make_node("Cast", ["i"], ["same"], to=I64)],
              [vi("x", F32, (4,)), vi("i", I64, (3,))], [vi("y", I32, (3,)), vi("same", I64, (3,))], 13)
    x = np.array([1.5, -2.7, 3.2, 0.0], np.float32)
    assert_same(*run_both(m, {"x": x, "i": np.array([1, 2, -1], np.int64)}, backend))


def test_reshape_of_an_initializer_and_allowzero(backend):
    data = onnx.numpy_helper.from_array(np.arange(6, dtype=np.float32), "data")
    shape = onnx.numpy_helper.from_array(np.array([3, -1], np.int64), "shape")
    m = model([helper.make_node("Reshape", ["data", "shape"], ["d2"], allowzero=1),
               helper.make_node("GatherElements", ["d2", "i"], ["y"], axis=1)],
              [vi("i", I64, (3, 2))], [vi("y", F32, (3, 2))], 14, [data, shape])
    assert_same(*run_both(m, {"i": np.array([[1, 0], [0, 0], [-1, 1]], np.int64)}, backend))


def test_an_initializer_listed_as_a_graph_input_is_a_constant(backend):
    idx = onnx.numpy_helper.from_array(np.array([[0, 1]], np.int64), "i")
    m = model([helper.make_node("GatherElements", ["x", "i"], ["y"], axis=0)],
              [vi("x", F32, (2, 2)), vi("i", I64, (1, 2))], [vi("y", F32, (1, 2))], 13, [idx])
    imported = import_onnx(m)
    assert [name for name, _ in imported.inputs] == ["x"]
    assert_same(*run_both(m, {"x": np.array([[1, 2], [3, 4]], np.float32)}, backend))


def test_onnx_names_that_are_not_identifiers(backend):
    m = model([helper.make_node("Gather", ["0:input", "/idx"], ["/layer/Gather_output_0"], axis=0),
               helper.make_node("Identity", ["/layer/Gather_output_0"], ["out put"])],
              [vi("0:input", F32, (3,)), vi("/idx", I64, (2,))],
              [vi("/layer/Gather_output_0", F32, (2,)), vi("out put", F32, (2,))], 13)
    got, want = run_both(m, {"0:input": np.array([1, 2, 3], np.float32), "/idx": np.array([2, 0])}, backend)
    assert_same(got, want)
    assert tensor_name("/layer/Gather_output_0") == "_layer/Gather_output_0"
    assert tensor_name("out put") == "out_put"


def test_out_of_range_indices_raise_at_run_time(backend):
    m = model([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)],
              [vi("x", F32, (3,)), vi("i", I64, (2,))], [vi("y", F32, (2,))], 13)
    exe = cl.compile(from_onnx(m), target=backend)
    with pytest.raises(IndexError, match="out of range"):
        exe(x=np.zeros(3, np.float32), i=np.array([0, 3]))


def test_symbolic_dimensions_become_symbols_or_take_given_shapes():
    m = model([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)],
              [vi("x", F32, ("n", 3)), vi("i", I64, (2,))], [vi("y", F32, None)], 13)
    assert [str(d) for d in from_onnx(m).inputs[0].shape] == ["n", "3"]
    program = from_onnx(m, shapes={"x": (5, 3)})
    assert program.inputs[0].shape == (5, 3)
    with pytest.raises(OnnxImportError, match="differs from the model's"):
        from_onnx(m, shapes={"x": (5, 4)})
    with pytest.raises(OnnxImportError, match="not a graph input"):
        from_onnx(m, shapes={"z": (1,)})


# -- errors -----------------------------------------------------------------------------------------


def test_an_unsupported_operator_names_the_node_and_the_op():
    m = model([helper.make_node("Softplus", ["x"], ["y"], name="act1")], [vi("x", F32, (2,))], [vi("y", F32, (2,))], 13)
    with pytest.raises(OnnxImportError, match=r"node 'act1' \(Softplus\): operator Softplus is not supported"):
        from_onnx(m)


def test_an_unnamed_node_is_named_by_its_position_and_output():
    m = model([helper.make_node("Softplus", ["x"], ["probs"])], [vi("x", F32, (2,))], [vi("y", F32, (2,))], 13)
    with pytest.raises(OnnxImportError, match=r"node 0 \(Softplus, output 'probs'\)"):
        from_onnx(m)


def test_an_attribute_the_opset_does_not_define_is_an_error():
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], reduction="add", name="s")
    inputs = [vi("x", F32, (3,)), vi("i", I64, (1,)), vi("u", F32, (1,))]
    with pytest.raises(OnnxImportError, match=r"node 's' \(ScatterElements\): attribute 'reduction' is not defined"):
        from_onnx(model([node], inputs, [vi("y", F32, (3,))], 13))
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="max", name="s")
    with pytest.raises(OnnxImportError, match="reduction 'max' is not defined in opset 16"):
        from_onnx(model([node], [vi("x", F32, (3,)), vi("i", I64, (1, 1)), vi("u", F32, (1,))],
                        [vi("y", F32, (3,))], 16))


def test_an_operator_missing_from_the_opset_is_an_error():
    node = helper.make_node("TensorScatter", ["p", "u"], ["y"], name="kv")
    m = model([node], [vi("p", F32, (1, 4, 2)), vi("u", F32, (1, 1, 2))], [vi("y", F32, (1, 4, 2))], 18)
    with pytest.raises(OnnxImportError, match=r"TensorScatter does not exist in opset 18 .*introduced in opset 24"):
        from_onnx(m)
    node = helper.make_node("Scatter", ["x", "i", "u"], ["y"], name="old")
    m = model([node], [vi("x", F32, (3,)), vi("i", I64, (1,)), vi("u", F32, (1,))], [vi("y", F32, (3,))], 13)
    with pytest.raises(OnnxImportError, match="Scatter is deprecated"):
        from_onnx(m)


def test_other_domains_unsupported_types_and_dynamic_reshape_are_errors():
    node = helper.make_node("Gather", ["x", "i"], ["y"], domain="com.example", name="g")
    m = model([node], [vi("x", F32, (3,)), vi("i", I64, (1,))], [vi("y", F32, (1,))], 13)
    with pytest.raises(OnnxImportError, match="domain 'com.example'"):
        from_onnx(m)
    m = model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", TensorProto.STRING, (3,))],
              [vi("y", TensorProto.STRING, (3,))], 13)
    with pytest.raises(OnnxImportError, match="graph input 'x': element type STRING is not supported"):
        from_onnx(m)
    m = model([helper.make_node("Reshape", ["x", "s"], ["y"], name="r")], [vi("x", F32, (4,)), vi("s", I64, (2,))],
              [vi("y", F32, None)], 13)
    with pytest.raises(OnnxImportError, match=r"node 'r' \(Reshape\): the shape input must be a constant"):
        from_onnx(m)


def test_an_operator_rule_broken_by_the_model_names_the_node():
    m = model([helper.make_node("Gather", ["x", "i"], ["y"], axis=3, name="g")],
              [vi("x", F32, (3,)), vi("i", I64, (1,))], [vi("y", F32, None)], 13)
    with pytest.raises(OnnxImportError, match=r"node 'g' \(Gather\): take: axis=3 is out of range"):
        from_onnx(m)


def test_a_declared_output_shape_that_disagrees_is_a_warning():
    m = model([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)],
              [vi("x", F32, (3,)), vi("i", I64, (2,))], [vi("y", F32, (3,))], 13)
    with pytest.warns(cl.ShapeMismatchWarning, match=r"graph output 'y': the model declares shape \[3\]"):
        program = from_onnx(m)
    assert program.outputs[0].shape == (2,)


def test_bad_model_files(tmp_path):
    with pytest.raises(OnnxImportError, match="no such file"):
        from_onnx(tmp_path / "missing.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\xffnot a model at all")
    with pytest.raises(OnnxImportError, match="cannot read model"):
        from_onnx(junk)
    with pytest.raises(OnnxImportError, match="takes an onnx.ModelProto"):
        from_onnx(42)


def test_a_model_loads_from_a_path_and_from_bytes(tmp_path):
    m = model([helper.make_node("Gather", ["x", "i"], ["y"], axis=0)],
              [vi("x", F32, (3,)), vi("i", I64, (2,))], [vi("y", F32, (2,))], 13)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    assert str(from_onnx(path)) == str(from_onnx(m)) == str(from_onnx(m.SerializeToString()))
    dot = from_onnx(path).to_dot()
    assert dot.startswith("digraph") and '"x" -> "y"' in dot and '"i" -> "y"' in dot


def test_import_cinnlite_does_not_import_onnx():
    code = "import sys, cinnlite, cinnlite.frontend.onnx; assert 'onnx' not in sys.modules, 'onnx imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_clear_error_when_onnx_is_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)   # makes `import onnx` raise ImportError
    with pytest.raises(OnnxNotInstalledError, match=r"pip install 'cinnlite\[onnx\]'"):
        from_onnx("model.onnx")


# -- attributes: every one read by its ONNX type ----------------------------------------------------


def raw_attribute(name, attr_type, **fields):
    """An AttributeProto built field by field, as a damaged or hand-written model may hold it."""
    attr = onnx.AttributeProto(name=name, type=attr_type)
    for key, value in fields.items():
        if isinstance(value, list):
            getattr(attr, key).extend(value)
        elif isinstance(value, onnx.TensorProto):
            getattr(attr, key).CopyFrom(value)
        else:
            setattr(attr, key, value)
    return attr


def node_with(op, inputs, attributes, name="n"):
    node = helper.make_node(op, inputs, ["y"], name=name)
    node.attribute.extend(attributes)
    return node


GATHER_IO = [vi("x", F32, (3, 4)), vi("i", I64, (2, 4))]
SCATTER_IO = [vi("x", F32, (3, 4)), vi("i", I64, (2, 4)), vi("u", F32, (2, 4))]
SCATTER_ND_IO = [vi("x", F32, (3, 4)), vi("i", I64, (2, 1)), vi("u", F32, (2, 4))]
CACHE_IO = [vi("past", F32, (2, 5, 3)), vi("update", F32, (2, 2, 3))]
A = helper.make_attribute
BAD_UTF8 = b"\xff\xfeadd"

# (id, op, opset, inputs, attributes, attribute named in the error, what the error says of it)
BAD_ATTRIBUTES = [
    ("gather-axis-float", "Gather", 13, GATHER_IO, [A("axis", 1.5)], "axis", "must be an INT, got a FLOAT"),
    ("gather-axis-string", "Gather", 13, GATHER_IO, [A("axis", "1")], "axis", "must be an INT, got a STRING"),
    ("gather-axis-undefined", "Gather", 13, GATHER_IO, [raw_attribute("axis", onnx.AttributeProto.UNDEFINED, i=1)],
     "axis", "has no type"),
    ("gather-axis-repeated", "Gather", 1, GATHER_IO, [A("axis", 0), A("axis", 1)], "axis", "is given 2 times"),
    ("gather-elements-axis-ints", "GatherElements", 13, GATHER_IO, [A("axis", [0])], "axis",
     "must be an INT, got INTS"),
    ("gather-nd-batch-dims-float", "GatherND", 12, [vi("x", F32, (3, 4)), vi("i", I64, (3, 1))],
     [A("batch_dims", 1.0)], "batch_dims", "must be an INT, got a FLOAT"),
    ("scatter-axis-float", "Scatter", 9, SCATTER_IO, [A("axis", 0.0)], "axis", "must be an INT, got a FLOAT"),
    ("scatter-elements-axis-string", "ScatterElements", 13, SCATTER_IO, [A("axis", "0")], "axis",
     "must be an INT, got a STRING"),
    ("scatter-elements-reduction-int", "ScatterElements", 18, SCATTER_IO, [A("reduction", 1)], "reduction",
     "must be a STRING, got an INT"),
    ("scatter-elements-reduction-bytes", "ScatterElements", 18, SCATTER_IO, [A("reduction", BAD_UTF8)],
     "reduction", "is not UTF-8 text"),
    ("scatter-elements-repeated", "ScatterElements", 18, SCATTER_IO, [A("reduction", "add"), A("reduction", "mul")],
     "reduction", "is given 2 times"),
    ("scatter-nd-reduction-bytes", "ScatterND", 16, SCATTER_ND_IO, [A("reduction", BAD_UTF8)], "reduction",
     "is not UTF-8 text"),
    ("scatter-nd-reduction-strings", "ScatterND", 18, SCATTER_ND_IO, [A("reduction", ["add"])], "reduction",
     "must be a STRING, got STRINGS"),
    ("scatter-nd-reduction-undefined", "ScatterND", 18, SCATTER_ND_IO,
     [raw_attribute("reduction", onnx.AttributeProto.UNDEFINED, s=b"add")], "reduction", "has no type"),
    ("tensor-scatter-mode-bytes", "TensorScatter", 24, CACHE_IO, [A("mode", b"circ\xffular")], "mode",
     "is not UTF-8 text"),
    ("tensor-scatter-mode-int", "TensorScatter", 24, CACHE_IO, [A("mode", 1)], "mode",
     "must be a STRING, got an INT"),
    ("tensor-scatter-axis-string", "TensorScatter", 24, CACHE_IO, [A("axis", "1")], "axis",
     "must be an INT, got a STRING"),
    ("tensor-scatter-axis-float", "TensorScatter", 24, CACHE_IO, [A("axis", -2.0)], "axis",
     "must be an INT, got a FLOAT"),
    ("cast-to-float", "Cast", 13, [vi("x", F32, (3,))], [A("to", 6.0)], "to", "must be an INT, got a FLOAT"),
    ("cast-to-string", "Cast", 13, [vi("x", F32, (3,))], [A("to", "INT32")], "to", "must be an INT, got a STRING"),
    ("cast-to-missing", "Cast", 13, [vi("x", F32, (3,))], [], "to", "is required"),
    ("cast-to-undefined", "Cast", 13, [vi("x", F32, (3,))], [raw_attribute("to", onnx.AttributeProto.UNDEFINED, i=6)],
     "to", "has no type"),
    ("cast1-to-bytes", "Cast", 1, [vi("x", F32, (3,))], [A("to", b"INT\xff32")], "to", "is not UTF-8 text"),
    ("cast1-to-int", "Cast", 1, [vi("x", F32, (3,))], [A("to", 6)], "to", "must be a STRING, got an INT"),
    ("constant-value-int-float", "Constant", 13, [], [A("value_int", 1.5)], "value_int",
     "must be an INT, got a FLOAT"),
    ("constant-value-ints-string", "Constant", 13, [], [A("value_ints", "1,2")], "value_ints",
     "must be INTS, got a STRING"),
    ("constant-value-float-int", "Constant", 13, [], [A("value_float", 2)], "value_float",
     "must be a FLOAT, got an INT"),
    ("constant-value-floats-ints", "Constant", 13, [], [A("value_floats", [1, 2])], "value_floats",
     "must be FLOATS, got INTS"),
    ("constant-value-undefined", "Constant", 13, [],
     [raw_attribute("value", onnx.AttributeProto.UNDEFINED, t=onnx.numpy_helper.from_array(np.zeros(2, np.float32)))],
     "value", "has no type"),
    ("constant-value-repeated", "Constant", 13, [], [A("value_int", 1), A("value_int", 2)], "value_int",
     "is given 2 times"),
    ("constant-value-string-bytes", "Constant", 13, [], [A("value_string", BAD_UTF8)], "value_string",
     "is not UTF-8 text"),
    ("reshape-allowzero-float", "Reshape", 14, [vi("x", F32, (4,)), vi("s", I64, (1,))], [A("allowzero", 1.0)],
     "allowzero", "must be an INT, got a FLOAT"),
    ("reshape1-shape-string", "Reshape", 1, [vi("x", F32, (4,))], [A("shape", "2,2")], "shape",
     "must be INTS, got a STRING"),
    ("reshape1-shape-missing", "Reshape", 1, [vi("x", F32, (4,))], [], "shape", "is required"),
    ("reshape1-shape-floats", "Reshape", 1, [vi("x", F32, (4,))], [A("shape", [2.0, 2.0])], "shape",
     "must be INTS, got FLOATS"),
    ("gather-axis-reference", "Gather", 13, GATHER_IO, [raw_attribute("axis", onnx.AttributeProto.INT, i=0,
                                                                      ref_attr_name="a")],
     "axis", "refers to the attribute 'a' of an enclosing function"),
]


@pytest.mark.parametrize("case", BAD_ATTRIBUTES, ids=[c[0] for c in BAD_ATTRIBUTES])
def test_a_bad_attribute_is_an_import_error_naming_the_node_and_the_attribute(case):
    _, op, opset, inputs, attributes, attr_name, says = case
    init = []
    if op == "Reshape" and opset >= 5:
        init = [onnx.numpy_helper.from_array(np.array([4], np.int64), "s")]
        inputs = inputs[:1]
    m = model([node_with(op, [v.name for v in inputs] + [t.name for t in init], attributes)], inputs,
              [vi("y", TensorProto.UNDEFINED, None)], opset, init)
    with pytest.raises(OnnxImportError) as info:
        from_onnx(m)
    message = str(info.value)
    assert message.startswith(f"node 'n' ({op}): attribute '{attr_name}' "), message
    assert says in message, message


def test_attributes_of_every_type_the_importer_reads(backend):
    """The typed reads give the values the model holds: every Constant variant, Cast's 'to' as a
    type name (opset 1) and as a number, Reshape's 'shape' attribute (opset 1)."""
    consts = {"value": onnx.numpy_helper.from_array(np.array([1.5, -2], np.float32)), "value_float": 0.25,
              "value_floats": [1.0, 2.5], "value_int": -3, "value_ints": [4, 5]}
    for key, value in consts.items():
        node = helper.make_node("Constant", [], ["y"], **{key: value})
        m = model([node], [], [vi("y", TensorProto.UNDEFINED, None)], 13)
        got, want = run_both(m, {}, backend)
        assert_same(got, want)
    m = model([helper.make_node("Cast", ["x"], ["y"], to="INT32")], [vi("x", F32, (3,))], [vi("y", I32, (3,))], 1)
    exe = cl.compile(from_onnx(m), target=backend)
    np.testing.assert_array_equal(exe(x=np.array([1.5, -2.5, 7], np.float32)), np.array([1, -2, 7], np.int32))
    m = model([helper.make_node("Reshape", ["x"], ["y"], shape=[2, -1])], [vi("x", F32, (4,))],
              [vi("y", F32, (2, 2))], 1)
    assert from_onnx(m).outputs[0].shape == (2, 2)
