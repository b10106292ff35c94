"""Real models, exported from PyTorch, run through ``cl.onnx.InferenceSession`` and ``cinnlite run``
and compared with onnxruntime; the operators exporters write around the gathers, one by one."""
from __future__ import annotations

import contextlib
import io
import subprocess
import sys

import numpy as np
import pytest

import cinnlite as cl

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
from onnx import TensorProto, helper  # noqa: E402

import onnx_corpus  # noqa: E402
from cinnlite.frontend.onnx import from_onnx  # noqa: E402

ENTRIES = {e.name: e for e in onnx_corpus.CORPUS}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Each corpus model exported once, on first use."""
    paths: dict = {}

    def path_of(name):
        if name not in paths:
            path = tmp_path_factory.mktemp("corpus") / f"{name}.onnx"
            with contextlib.redirect_stdout(io.StringIO()):
                onnx_corpus.export(ENTRIES[name], str(path))
            paths[name] = str(path)
        return paths[name]
    return path_of


def _feeds(entry, scale, seed):
    return {k: v.numpy() for k, v in entry.make_inputs(scale, seed).items()}


def _assert_matches_onnxruntime(path, feed, got):
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feed)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", list(ENTRIES))
def test_every_model_matches_onnxruntime_at_several_sizes(backend, exported, name):
    entry = ENTRIES[name]
    path = exported(name)
    session = cl.onnx.InferenceSession(path, target=backend)
    for scale, seed in ((1, 1), (3, 2), (2, 3)):
        feed = _feeds(entry, scale, seed)
        _assert_matches_onnxruntime(path, feed, session.run(None, feed))
    report = session.explain()
    if entry.in_cinnlite:
        assert all(s.kind == "cinnlite" for s in session.segments), report
        assert "0 on onnxruntime" in report.splitlines()[0]
    else:
        assert any(s.kind == "cinnlite" for s in session.segments) and "onnxruntime" in report


@pytest.mark.parametrize("name", list(ENTRIES))
def test_every_model_runs_from_the_command_line(exported, tmp_path, name):
    entry = ENTRIES[name]
    path = exported(name)
    feed = _feeds(entry, 2, 4)
    args = []
    for k, v in feed.items():
        np.save(tmp_path / f"{k}.npy", v)
        args += ["--input", f"{k}={tmp_path / f'{k}.npy'}"]
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "cinnlite", "run", path, *args, "--output-dir", str(out),
                           "--explain"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "nodes run in cinnlite" in proc.stdout
    names = [o.name for o in cl.onnx.InferenceSession(path).get_outputs()]
    _assert_matches_onnxruntime(path, feed, [np.load(out / f"{n}.npy") for n in names])


def test_session_interface_follows_onnxruntime(exported):
    path = exported("graphsage")
    mine, theirs = cl.onnx.InferenceSession(path), ort.InferenceSession(path)
    assert [(a.name, a.type, a.shape) for a in mine.get_inputs()] == \
        [(a.name, a.type, a.shape) for a in theirs.get_inputs()]
    assert [(a.name, a.type) for a in mine.get_outputs()] == [(a.name, a.type) for a in theirs.get_outputs()]
    feed = _feeds(ENTRIES["graphsage"], 1, 0)
    (only,) = mine.run([theirs.get_outputs()[0].name], feed)
    np.testing.assert_allclose(only, theirs.run(None, feed)[0], rtol=2e-5, atol=2e-5)
    with pytest.raises(cl.InputError, match="missing input"):
        mine.run(None, {"x": feed["x"]})
    with pytest.raises(cl.InputTypeError, match="expected dtype float32"):
        mine.run(None, {**feed, "x": feed["x"].astype(np.float64)})
    with pytest.raises(cl.InputError, match="expected shape"):
        mine.run(None, {**feed, "x": feed["x"][:, :3]})
    with pytest.raises(cl.InputError, match="no output"):
        mine.run(["nope"], feed)
    # After calls that passed: a feed of the right count under another name, and a value that
    # is not an array, are still named as what they are.
    renamed = {**{k: v for k, v in feed.items() if k != "x"}, "features": feed["x"]}
    with pytest.raises(cl.InputError, match="missing input.*'x'.*unknown input.*'features'"):
        mine.run(None, renamed)
    with pytest.raises(cl.InputTypeError, match="input 'x': expected dtype float32, got object"):
        mine.run(None, {**feed, "x": None})
    # Other sizes of the graph's open axes are checked again and served.
    other = _feeds(ENTRIES["graphsage"], 2, 1)
    np.testing.assert_allclose(mine.run(None, other)[0], theirs.run(None, other)[0], rtol=2e-5, atol=2e-5)
    with pytest.raises(cl.InputError, match="expected shape"):
        mine.run(None, {**other, "x": other["x"][:, :3]})


# -- the operators around the gathers, one node each ---------------------------------------------------

F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
RNG = np.random.default_rng(0)
X = RNG.standard_normal((3, 4)).astype(np.float32)
Y = RNG.standard_normal((4,)).astype(np.float32)
INTS = np.array([[7, -7, 6], [-6, 5, 0]], np.int64)
INTS_B = np.array([[2, 2, -4], [4, -3, 1]], np.int64)


def _i64(*values):
    return np.array(values, np.int64)


# (id, op, data inputs, constant inputs (initializers), attributes, opset)
CASES = [
    ("shape", "Shape", {"x": X}, {}, {}, 18), ("shape-slice", "Shape", {"x": X}, {}, {"start": 1}, 18),
    ("size", "Size", {"x": X}, {}, {}, 18),
    ("unsqueeze", "Unsqueeze", {"x": X}, {"axes": _i64(0, -1)}, {}, 18),
    ("unsqueeze-attr", "Unsqueeze", {"x": X}, {}, {"axes": [1]}, 11),
    ("squeeze", "Squeeze", {"x": X[None, :, None]}, {"axes": _i64(0)}, {}, 18),
    ("squeeze-all", "Squeeze", {"x": X[None, :, None]}, {}, {}, 18),
    ("flatten", "Flatten", {"x": X[None]}, {}, {"axis": 2}, 18),
    ("slice", "Slice", {"x": X}, {"starts": _i64(1, -1), "ends": _i64(3, -5), "axes": _i64(0, 1),
                                  "steps": _i64(1, -2)}, {}, 18),
    ("slice-clamped", "Slice", {"x": X}, {"starts": _i64(-100), "ends": _i64(100), "axes": _i64(1)}, {}, 18),
    ("concat", "Concat", {"x": X, "z": X[:, :2] * 2}, {}, {"axis": 1}, 18),
    ("concat-rows", "Concat", {"x": X, "z": X[:1]}, {}, {"axis": -2}, 18),
    ("expand", "Expand", {"x": Y}, {"shape": _i64(3, 1)}, {}, 18),
    ("tile", "Tile", {"x": X}, {"repeats": _i64(2, 3)}, {}, 18),
    ("transpose", "Transpose", {"x": X}, {}, {}, 18),
    ("transpose-perm", "Transpose", {"x": np.arange(24, dtype=np.float32).reshape(2, 3, 4)}, {},
     {"perm": [1, 2, 0]}, 18),
    ("where", "Where", {"c": X > 0, "x": X, "y": Y}, {}, {}, 18),
    ("equal", "Equal", {"x": INTS, "y": INTS_B}, {}, {}, 18), ("less", "Less", {"x": X, "y": Y}, {}, {}, 18),
    ("greater", "Greater", {"x": X, "y": Y}, {}, {}, 18),
    ("less-equal", "LessOrEqual", {"x": INTS, "y": INTS_B}, {}, {}, 18),
    ("greater-equal", "GreaterOrEqual", {"x": X, "y": Y}, {}, {}, 18),
    ("not", "Not", {"x": X > 0}, {}, {}, 18), ("and", "And", {"x": X > 0, "y": Y > 0}, {}, {}, 18),
    ("or", "Or", {"x": X > 0, "y": Y > 0}, {}, {}, 18),
    ("add", "Add", {"x": X, "y": Y}, {}, {}, 18), ("sub", "Sub", {"x": X, "y": Y}, {}, {}, 18),
    ("mul", "Mul", {"x": X, "y": Y}, {}, {}, 18), ("div", "Div", {"x": X, "y": Y}, {}, {}, 18),
    ("div-int", "Div", {"x": INTS, "y": INTS_B}, {}, {}, 18),
    ("neg", "Neg", {"x": X}, {}, {}, 18), ("neg-int", "Neg", {"x": INTS}, {}, {}, 18),
    ("abs", "Abs", {"x": X}, {}, {}, 18), ("relu", "Relu", {"x": X}, {}, {}, 18),
    ("leaky-relu", "LeakyRelu", {"x": X}, {}, {"alpha": 0.3}, 18),
    ("reciprocal", "Reciprocal", {"x": X}, {}, {}, 18),
    ("clip", "Clip", {"x": X}, {"lo": np.array(-0.5, np.float32), "hi": np.array(0.5, np.float32)}, {}, 18),
    ("max", "Max", {"x": X, "y": Y, "z": -X}, {}, {}, 18), ("min", "Min", {"x": X, "y": Y}, {}, {}, 18),
    ("reduce-sum", "ReduceSum", {"x": X}, {"axes": _i64(1)}, {"keepdims": 0}, 18),
    ("reduce-sum-all", "ReduceSum", {"x": X}, {}, {}, 18),
    ("reduce-max", "ReduceMax", {"x": X}, {"axes": _i64(1)}, {}, 18),
    ("reduce-min", "ReduceMin", {"x": X}, {}, {"axes": [0], "keepdims": 0}, 13),
    ("exp", "Exp", {"x": X}, {}, {}, 18), ("log", "Log", {"x": np.abs(X) + 0.1}, {}, {}, 18),
    ("sqrt", "Sqrt", {"x": np.abs(X)}, {}, {}, 18), ("tanh", "Tanh", {"x": X}, {}, {}, 18),
    ("sigmoid", "Sigmoid", {"x": X}, {}, {}, 18), ("softmax", "Softmax", {"x": X}, {}, {}, 18),
    ("softmax-axis0", "Softmax", {"x": X}, {}, {"axis": 0}, 13),
    ("softmax-coerced", "Softmax", {"x": X[None]}, {}, {"axis": 1}, 11),
    ("pow-2", "Pow", {"x": X}, {"e": np.array(2.0, np.float32)}, {}, 18),
    ("pow-half", "Pow", {"x": np.abs(X)}, {"e": np.array(-0.5, np.float32)}, {}, 18),
    ("reduce-mean", "ReduceMean", {"x": X}, {"axes": _i64(0)}, {}, 18),
    ("reduce-mean-attr", "ReduceMean", {"x": X}, {}, {"axes": [-1], "keepdims": 0}, 13),
    ("matmul", "MatMul", {"x": X, "w": RNG.standard_normal((4, 5)).astype(np.float32)}, {}, {}, 18),
    ("matmul-batch", "MatMul", {"x": RNG.standard_normal((2, 3, 4)).astype(np.float32), "w": Y}, {}, {}, 18),
    ("matmul-vector", "MatMul", {"x": Y, "w": RNG.standard_normal((2, 4, 3)).astype(np.float32)}, {}, {}, 18),
    ("gemm", "Gemm", {"x": X, "w": RNG.standard_normal((5, 4)).astype(np.float32),
                      "c": RNG.standard_normal((5,)).astype(np.float32)}, {}, {"transB": 1, "alpha": 0.5,
                                                                               "beta": 2.0}, 18),
    ("gemm-trans-a", "Gemm", {"x": X.T.copy(), "w": RNG.standard_normal((4, 2)).astype(np.float32)}, {},
     {"transA": 1}, 18),
]


def _model(graph, opset: int):
    """A model of ``graph`` at ``opset``, of the oldest IR version that opset needs: the onnx
    package writes its newest by default, which an older onnxruntime refuses ("Unsupported model
    IR version")."""
    opsets = [helper.make_opsetid("", opset)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=helper.find_min_ir_version_for(opsets))


def _case_model(op, data, consts, attrs, opset):
    onnx_type = helper.np_dtype_to_tensor_dtype
    inputs = [helper.make_tensor_value_info(n, onnx_type(a.dtype), a.shape) for n, a in data.items()]
    inits = [onnx.numpy_helper.from_array(a, n) for n, a in consts.items()]
    node = helper.make_node(op, list(data) + list(consts), ["out"], name="node", **attrs)
    graph = helper.make_graph([node], "case", inputs, [helper.make_value_info("out", onnx.TypeProto())], inits)
    return _model(graph, opset)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_operator_imports_and_matches_onnxruntime(backend, case):
    _, op, data, consts, attrs, opset = case
    model = _case_model(op, data, consts, attrs, opset)
    program = from_onnx(model)  # no onnxruntime: the node itself is imported
    got = cl.compile(program, target=backend).run({t.name: data[t.name] for t in program.inputs})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, data)[0]
    (value,) = got.values()
    assert value.dtype == want.dtype and value.shape == want.shape
    np.testing.assert_allclose(value, want, rtol=1e-5, atol=1e-6)


def test_shape_arithmetic_on_constants_folds_into_no_kernel():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape: every value but the data is known at
    import, so the program is one reshape."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [onnx.numpy_helper.from_array(np.array(0, np.int64), "zero"),
             onnx.numpy_helper.from_array(_i64(0), "zero1"), onnx.numpy_helper.from_array(_i64(-1), "minus_one")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, (3, 2, 2))],
                              [helper.make_tensor_value_info("y", F32, None)], inits)
    program = from_onnx(_model(graph, 18))
    assert [n.op for n in program.nodes] == ["reshape"] and program.outputs[0].shape == (3, 4)


def _if_model(condition_from_data: bool):
    """y = If(cond, then: x + 1, else: x * 2); cond is Shape(x)[0] > 2, or a graph input."""
    then = helper.make_graph([helper.make_node("Add", ["x", "one"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", F32, None)],
                             [onnx.numpy_helper.from_array(np.array(1, np.float32), "one")])
    other = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", F32, None)],
                              [onnx.numpy_helper.from_array(np.array(2, np.float32), "two")])
    inputs = [helper.make_tensor_value_info("x", F32, ("n",))]
    nodes = [helper.make_node("If", ["cond"], ["y"], then_branch=then, else_branch=other, name="branch")]
    inits = []
    if condition_from_data:
        inputs.append(helper.make_tensor_value_info("cond", BOOL, ()))
    else:
        nodes[:0] = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Gather", ["s", "zero"], ["n"]),
                     helper.make_node("Greater", ["n", "two_i"], ["cond"])]
        inits = [onnx.numpy_helper.from_array(np.array(0, np.int64), "zero"),
                 onnx.numpy_helper.from_array(np.array(2, np.int64), "two_i")]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", F32, ("n",))], inits)
    return _model(graph, 18)


def test_an_if_whose_condition_is_known_at_import_is_folded():
    model = _if_model(condition_from_data=False)
    session = cl.onnx.InferenceSession(model)
    for n in (2, 5):
        x = np.arange(n, dtype=np.float32)
        (y,) = session.run(None, {"x": x})
        np.testing.assert_array_equal(y, x + 1 if n > 2 else x * 2)
    assert all(s.kind == "cinnlite" for s in session.segments)
    program = from_onnx(model, shapes={"x": (4,)})
    ops = [n.op for n in program.nodes]
    assert "add" in ops and "multiply" not in ops  # only the branch taken


def test_an_if_on_data_runs_on_onnxruntime():
    session = cl.onnx.InferenceSession(_if_model(condition_from_data=True))
    x = np.arange(3, dtype=np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x, "cond": np.array(False)})[0], x * 2)
    assert "could not import" in session.explain() and "condition is computed from data" in session.explain()


def test_every_supported_operator_has_a_handler():
    """SUPPORTED_OPS is what the partition trusts: each entry is imported by a handler (If by
    the importer's folding)."""
    from cinnlite.frontend.onnx import SUPPORTED_OPS, _Importer
    assert [op for op in SUPPORTED_OPS if op != "If" and not hasattr(_Importer, f"_op_{op}")] == []


def _topk_model(dtype, shape, k, attrs, opset=18):
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    inputs = [helper.make_tensor_value_info("x", elem, shape)]
    inits = [onnx.numpy_helper.from_array(np.array([k], np.int64), "k")] if opset >= 10 else []
    if opset < 10:
        attrs = {**attrs, "k": k}
    node = helper.make_node("TopK", ["x", "k"] if opset >= 10 else ["x"], ["values", "indices"], **attrs)
    outputs = [helper.make_tensor_value_info("values", elem, None),
               helper.make_tensor_value_info("indices", TensorProto.INT64, None)]
    graph = helper.make_graph([node], "topk", inputs, outputs, inits)
    return _model(graph, opset)


TOPK_CASES = [((6, 4), 2, {}, 18), ((6, 4), 4, {"largest": 0}, 18), ((3, 7, 2), 3, {"axis": 1}, 18),
              ((9,), 9, {"axis": 0, "largest": 0}, 11), ((2, 5), 0, {}, 18), ((4, 64), 5, {"axis": -1}, 18),
              ((5, 3), 2, {"axis": 0}, 1)]


def _topk_reference(x, k, axis, largest):
    """numpy's TopK in cinnlite's order: best first, of equal elements the lower position first,
    NaN above every number (first when taking the largest, last when taking the smallest)."""
    moved = np.moveaxis(x, axis, -1)
    if largest:  # a stable ascending sort of the reversed axis, read backwards
        order = moved.shape[-1] - 1 - np.argsort(moved[..., ::-1], axis=-1, kind="stable")[..., ::-1]
    else:
        order = np.argsort(moved, axis=-1, kind="stable")
    order = order[..., :k]
    values = np.take_along_axis(moved, order, axis=-1)
    return np.moveaxis(values, -1, axis), np.moveaxis(order.astype(np.int64), -1, axis)


# Before opset 11 TopK takes k as an attribute, and floats only.
@pytest.mark.parametrize("dtype,shape,k,attrs,opset", [
    (dtype, *case) for case in TOPK_CASES for dtype in ("float32", "float64", "int32", "int64")
    if case[3] >= 11 or dtype.startswith("float")], ids=str)
def test_topk_matches_numpy_and_onnxruntime_with_ties_and_nan(backend, dtype, shape, k, attrs, opset):
    """Few distinct values, so that ties decide the order (the lower position first), and for
    floats NaN and infinities. Every input against numpy's stable sort; the inputs without NaN
    against onnxruntime too (its order of NaN differs between its versions)."""
    rng = np.random.default_rng(len(shape) + k)
    x = rng.integers(-3, 4, shape).astype(dtype)
    inputs = [x]
    if np.dtype(dtype).kind == "f":
        x.reshape(-1)[:4] = [np.nan, np.inf, -np.inf, np.nan]  # two NaNs: tied, the lower position first
        inputs.append(np.where(np.isnan(x), 0, x).astype(dtype))
    model = _topk_model(dtype, shape, k, attrs, opset)
    program = from_onnx(model)
    exe = cl.compile(program, target=backend)
    axis = attrs.get("axis", -1) % len(shape)
    for data in inputs:
        got = list(exe.run({program.inputs[0].name: data}).values())
        wants = [_topk_reference(data, k, axis, attrs.get("largest", 1))]
        if not np.isnan(data).any():
            wants.append(ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
                         .run(None, {"x": data}))
        for want in wants:
            for g, w in zip(got, want):
                assert g.dtype == w.dtype and g.shape == w.shape
                np.testing.assert_array_equal(g, w)


def test_topk_over_a_long_axis_runs_on_onnxruntime():
    model = _topk_model("float32", (3, 100), 4, {})
    session = cl.onnx.InferenceSession(model)
    x = np.random.default_rng(0).standard_normal((3, 100)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(session.run(None, {"x": x}), want):
        np.testing.assert_array_equal(g, w)
    assert "TopK over 100 elements" in session.explain()


def test_values_only_a_later_segment_reads_are_made_there():
    """x -> Abs -> CumSum (onnxruntime) -> Add(., Neg(x) * 2): Neg and Mul read only the graph
    input, so the order could run them first, but only the last segment reads them: they run
    there, fused with the Add, instead of crossing between segments as whole arrays."""
    nodes = [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["n"]),
             helper.make_node("Mul", ["n", "two"], ["m"]), helper.make_node("CumSum", ["a", "axis"], ["c"]),
             helper.make_node("Add", ["c", "m"], ["y"])]
    inits = [onnx.numpy_helper.from_array(np.array(2, np.float32), "two"),
             onnx.numpy_helper.from_array(np.array(0, np.int64), "axis")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, ("n",))],
                              [helper.make_tensor_value_info("y", F32, ("n",))], inits)
    model = _model(graph, 18)
    session = cl.onnx.InferenceSession(model)
    x = np.arange(-3, 4, dtype=np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], np.cumsum(np.abs(x)) - 2 * x)
    kinds = [(s.kind, [n.op_type for n in s.nodes]) for s in session.segments]
    assert kinds == [("cinnlite", ["Abs"]), ("onnxruntime", ["CumSum"]), ("cinnlite", ["Neg", "Mul", "Add"])]


def test_topk_takes_symbolic_sizes_off_its_axis_and_names_a_symbolic_axis():
    program = from_onnx(_topk_model("float32", ("N", 5), 3, {}))
    exe = cl.compile(program)
    for rows in (4, 1, 0):
        x = np.random.default_rng(rows).standard_normal((rows, 5)).astype(np.float32)
        values, indices = exe.run({program.inputs[0].name: x}).values()
        order = np.argsort(-x, axis=1, kind="stable")[:, :3]
        np.testing.assert_array_equal(indices, order)
        np.testing.assert_array_equal(values, np.take_along_axis(x, order, axis=1))
    with pytest.raises(cl.CinnliteError, match="size of axis 1 is symbolic"):
        from_onnx(_topk_model("float32", (2, "M"), 1, {}))


def test_a_node_stays_where_moving_it_would_make_a_bigger_value_cross():
    """x -> Abs -> a; a -> Neg -> CumSum (onnxruntime); ReduceSum(a) is read only after the
    CumSum, but moving it there would carry all of ``a`` across instead of one number."""
    nodes = [helper.make_node("Abs", ["x"], ["a"]), helper.make_node("Neg", ["a"], ["n"]),
             helper.make_node("ReduceSum", ["a"], ["total"], keepdims=0),
             helper.make_node("CumSum", ["n", "axis"], ["c"]),
             helper.make_node("Add", ["c", "total"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, ("n",))],
                              [helper.make_tensor_value_info("y", F32, ("n",))],
                              [onnx.numpy_helper.from_array(np.array(0, np.int64), "axis")])
    session = cl.onnx.InferenceSession(_model(graph, 18))
    x = np.arange(-3, 4, dtype=np.float32)
    np.testing.assert_array_equal(session.run(None, {"x": x})[0], np.cumsum(-np.abs(x)) + np.abs(x).sum())
    kinds = [(s.kind, [n.op_type for n in s.nodes]) for s in session.segments]
    assert kinds == [("cinnlite", ["Abs", "Neg", "ReduceSum"]), ("onnxruntime", ["CumSum"]), ("cinnlite", ["Add"])]
