"""The ``cinnlite`` command line, run as a separate process the way a user runs it."""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

from cinnlite import __version__

try:
    import onnx
    from onnx import TensorProto, helper
except ImportError:          # run and emit read ONNX models; demo, --version and --help do not
    onnx = None

needs_onnx = pytest.mark.skipif(onnx is None, reason="the run and emit commands read ONNX models: pip install onnx")


def cinnlite(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "cinnlite", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300)


def assert_one_line_error(proc, *fragments, status=1):
    assert proc.returncode == status, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    """y = Gather(x, i, axis=0); z = ScatterElements(x, j, u, axis=1, reduction=add); x has a
    symbolic first dimension."""
    nodes = [helper.make_node("Gather", ["x", "i"], ["y"], axis=0, name="gather"),
             helper.make_node("ScatterElements", ["x", "j", "u"], ["z"], axis=1, reduction="add", name="scatter")]
    graph = helper.make_graph(
        nodes, "cli_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ("n", 3)),
         helper.make_tensor_value_info("i", TensorProto.INT64, (2,)),
         helper.make_tensor_value_info("j", TensorProto.INT64, ("n", 2)),
         helper.make_tensor_value_info("u", TensorProto.FLOAT, ("n", 2))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
    path = tmp_path_factory.mktemp("model") / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(path))
    return path


@pytest.fixture(scope="module")
def static_model_path(tmp_path_factory):
    nodes = [helper.make_node("GatherND", ["x", "i"], ["y"], name="gnd")]
    graph = helper.make_graph(nodes, "static",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 3)),
                               helper.make_tensor_value_info("i", TensorProto.INT64, (2, 2))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2,))])
    path = tmp_path_factory.mktemp("model") / "static.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return path


@pytest.fixture()
def inputs(tmp_path):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    arrays = {"x": x, "i": np.array([3, -4], np.int64), "j": np.array([[0, 0], [2, 1], [1, 1], [2, 2]], np.int64),
              "u": np.ones((4, 2), np.float32)}
    files = {}
    for name, arr in arrays.items():
        files[name] = tmp_path / f"{name}.npy"
        np.save(files[name], arr)
    return arrays, files


def input_args(files, names=("x", "i", "j", "u")):
    args = []
    for name in names:
        args += ["--input", f"{name}={files[name]}"]
    return args


def expected(arrays):
    x, i, j, u = arrays["x"], arrays["i"], arrays["j"], arrays["u"]
    z = x.copy()
    for p in np.ndindex(j.shape):
        z[p[0], j[p]] += u[p]
    return {"y": x[i], "z": z}


# -- run ------------------------------------------------------------------------------------------


@needs_onnx
def test_run_prints_and_saves_the_outputs(model_path, inputs, tmp_path):
    arrays, files = inputs
    out_dir = tmp_path / "out"
    proc = cinnlite("run", model_path, *input_args(files), "--output-dir", out_dir)
    assert proc.returncode == 0, proc.stderr
    assert "y: float32[2, 3]" in proc.stdout and "z: float32[4, 3]" in proc.stdout
    for name, want in expected(arrays).items():
        got = np.load(out_dir / f"{name}.npy")
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


@needs_onnx
def test_run_on_the_cuda_target_runs_or_says_why_not_in_one_line(static_model_path, tmp_path):
    np.save(tmp_path / "x.npy", np.arange(12, dtype=np.float32).reshape(4, 3))
    np.save(tmp_path / "i.npy", np.array([[0, 1], [3, 2]], np.int64))
    proc = cinnlite("run", static_model_path, "--input", f"x={tmp_path / 'x.npy'}", "--input",
                    f"i={tmp_path / 'i.npy'}", "--target", "cuda", "--output-dir", tmp_path / "out")
    if proc.returncode == 0:   # a machine with a GPU
        np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), np.array([1, 11], np.float32))
    else:
        assert_one_line_error(proc, "cinnlite run: error:")


@needs_onnx
def test_run_reads_onnx_tensor_files(static_model_path, tmp_path):
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    (tmp_path / "x.pb").write_bytes(onnx.numpy_helper.from_array(x).SerializeToString())
    np.save(tmp_path / "i.npy", np.array([[0, 1], [-1, -1]], np.int64))
    proc = cinnlite("run", static_model_path, "--input", f"x={tmp_path / 'x.pb'}", "--input",
                    f"i={tmp_path / 'i.npy'}", "--output-dir", tmp_path)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), np.array([1, 11], np.float32))


@needs_onnx
def test_run_with_a_bad_model_path(tmp_path, inputs):
    _, files = inputs
    assert_one_line_error(cinnlite("run", tmp_path / "nope.onnx", *input_args(files)),
                          "cinnlite run: error:", "nope.onnx", "no such file")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not protobuf \xff\xff\xff")
    assert_one_line_error(cinnlite("run", junk, *input_args(files)), "cannot read model", "junk.onnx")


@needs_onnx
def test_run_with_a_bad_input_file(model_path, inputs, tmp_path):
    _, files = inputs
    files = dict(files, x=tmp_path / "missing.npy")
    assert_one_line_error(cinnlite("run", model_path, *input_args(files)), "input 'x'", "missing.npy",
                          "no such file")
    text = tmp_path / "text.npy"
    text.write_text("1 2 3\n")
    files["x"] = text
    assert_one_line_error(cinnlite("run", model_path, *input_args(files)), "input 'x'", "not a .npy file")


@needs_onnx
def test_run_with_wrong_or_missing_inputs(model_path, inputs, tmp_path):
    arrays, files = inputs
    assert_one_line_error(cinnlite("run", model_path, *input_args(files, ("x", "i", "j"))),
                          "no --input for 'u'", "x: float32[?, 3]")
    assert_one_line_error(cinnlite("run", model_path, *input_args(files), "--input", f"w={files['x']}"),
                          "the model has no input 'w'")
    assert_one_line_error(cinnlite("run", model_path, *input_args(files), "--input", "x"),
                          "--input 'x' is not of the form NAME=FILE")
    np.save(tmp_path / "i64.npy", arrays["x"].astype(np.float64))
    files64 = dict(files, x=tmp_path / "i64.npy")
    assert_one_line_error(cinnlite("run", model_path, *input_args(files64)), "input 'x'", "float32", "float64")
    np.save(tmp_path / "bad_i.npy", np.array([4, 0], np.int64))
    files_oob = dict(files, i=tmp_path / "bad_i.npy")
    assert_one_line_error(cinnlite("run", model_path, *input_args(files_oob)), "index 4", "out of range")


def _softplus_model(tmp_path):
    """y = Gather(Softplus(Softplus(x)), i): two nodes cinnlite does not import, one it does."""
    nodes = [helper.make_node("Softplus", ["x"], ["s"], name="act"), helper.make_node("Softplus", ["s"], ["t"]),
             helper.make_node("Gather", ["t", "i"], ["y"], axis=0, name="pick")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3,)),
                                           helper.make_tensor_value_info("i", TensorProto.INT64, (2,))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2,))])
    path = tmp_path / "softplus.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    np.save(tmp_path / "x.npy", np.array([-1.0, 0.0, 2.0], np.float32))
    np.save(tmp_path / "i.npy", np.array([2, 0], np.int64))
    return path, [f"x={tmp_path / 'x.npy'}", f"i={tmp_path / 'i.npy'}"]


@needs_onnx
def test_run_puts_what_cinnlite_lacks_on_onnxruntime_and_explains(tmp_path):
    pytest.importorskip("onnxruntime")
    path, inputs = _softplus_model(tmp_path)
    proc = cinnlite("run", path, "--input", inputs[0], "--input", inputs[1], "--explain")
    assert proc.returncode == 0, proc.stderr
    softplus = np.log1p(np.exp(np.log1p(np.exp(np.array([2.0, -1.0])))))
    got = [float(v) for v in re.search(r"\[([^\]]*)\]", proc.stdout.split("y: float32[2]")[1]).group(1).split(",")]
    np.testing.assert_allclose(got, softplus, rtol=1e-6)
    assert "1 of 3 nodes run in cinnlite" in proc.stdout
    assert "act (Softplus): operator Softplus is not supported" in proc.stdout
    assert "pick (Gather)" in proc.stdout


@needs_onnx
def test_run_without_onnxruntime_lists_every_operator_it_lacks(tmp_path):
    path, inputs = _softplus_model(tmp_path)
    blocker = tmp_path / "blocked" / "onnxruntime"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ImportError('onnxruntime is not installed')\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(blocker.parent)] + sys.path))
    proc = subprocess.run([sys.executable, "-m", "cinnlite", "run", str(path), "--input", inputs[0], "--input",
                           inputs[1]], capture_output=True, text=True, timeout=300, env=env)
    assert_one_line_error(proc, "needs onnxruntime", "Softplus x2")


# -- emit -----------------------------------------------------------------------------------------

CPU_STAGES = {"graph": "program static", "lowered": "for ", "llvm": "define", "llvm_opt": "define", "asm": ""}


@needs_onnx
@pytest.mark.parametrize("stage", list(CPU_STAGES))
def test_emit_each_cpu_stage(static_model_path, stage):
    proc = cinnlite("emit", static_model_path, "--target", "cpu", "--stage", stage)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() and CPU_STAGES[stage] in proc.stdout


@needs_onnx
@pytest.mark.parametrize("stage", ["graph", "lowered", "cuda", "ptx"])
def test_emit_each_cuda_stage(static_model_path, stage):
    proc = cinnlite("emit", static_model_path, "--target", "cuda", "--stage", stage)
    if proc.returncode == 0:
        marker = {"graph": "program static", "lowered": "for ", "cuda": "__global__", "ptx": ".entry"}[stage]
        assert marker in proc.stdout
    else:   # e.g. PTX where NVRTC is not installed
        assert_one_line_error(proc, "cinnlite emit: error:")


@needs_onnx
def test_emit_dot(model_path):
    proc = cinnlite("emit", model_path, "--stage", "dot", "--shape", "x=4,3", "--shape", "j=4,2", "--shape", "u=4,2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith('digraph "cli_model"')
    assert '"x" -> "y"' in proc.stdout and '"i" -> "y"' in proc.stdout and '"u" -> "z"' in proc.stdout


@needs_onnx
def test_emit_keeps_symbolic_dimensions_or_takes_shapes(model_path):
    proc = cinnlite("emit", model_path, "--stage", "graph")
    assert proc.returncode == 0, proc.stderr
    assert "x: float32[n, 3]" in proc.stdout
    proc = cinnlite("emit", model_path, "--shape", "x=4,3", "--shape", "j=4,2", "--shape", "u=4,2")
    assert proc.returncode == 0, proc.stderr
    assert "x: float32[4, 3]" in proc.stdout
    assert_one_line_error(cinnlite("emit", model_path, "--shape", "x=4;3"), "--shape 'x=4;3'")


@needs_onnx
def test_emit_an_unknown_stage(static_model_path):
    assert_one_line_error(cinnlite("emit", static_model_path, "--stage", "bytecode"),
                          "unknown stage 'bytecode'", "llvm_opt", "ptx", "dot")
    assert_one_line_error(cinnlite("emit", static_model_path, "--target", "cpu", "--stage", "ptx"),
                          "target 'cpu' has no stage 'ptx'")


@needs_onnx
def test_emit_a_bad_model_path(tmp_path):
    assert_one_line_error(cinnlite("emit", tmp_path / "none.onnx", "--stage", "llvm"), "none.onnx", "no such file")


# -- the command line itself ----------------------------------------------------------------------


@pytest.mark.parametrize("command", [[], ["demo"], ["run"], ["emit"]])
def test_help(command):
    proc = cinnlite(*command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: cinnlite")
    words = {"": ["demo", "run", "emit"], "demo": ["numpy"], "run": ["--input", "--target", "--output-dir"],
             "emit": ["--stage", "--target", "dot"]}
    for word in words[command[0] if command else ""]:
        assert word in proc.stdout


def test_usage_errors_are_one_line():
    assert_one_line_error(cinnlite("run"), "cinnlite run: error:", "MODEL.onnx", status=2)
    assert_one_line_error(cinnlite("emit", "m.onnx", "--target", "tpu"), "invalid choice: 'tpu'", status=2)
    assert_one_line_error(cinnlite("frobnicate"), "invalid choice", status=2)


def test_version_is_the_package_version():
    proc = cinnlite("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"cinnlite {__version__}"
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", __version__)


def demo_sections(stdout: str) -> dict:
    """The demo's output as {section title: its lines}; the lines before the first title are
    under "" and the closing check line under "check"."""
    sections, title = {"": []}, ""
    for line in stdout.splitlines():
        if line.startswith("== ") and line.endswith(" =="):
            title = line[3:-3]
            sections[title] = []
        elif line.startswith("every operator"):
            sections["check"] = [line]
        elif line:
            sections[title].append(line)
    return sections


def test_demo_tells_its_story_on_one_screen():
    proc = cinnlite("demo")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) <= 75, proc.stdout
    sections = demo_sections(proc.stdout)
    titles = list(sections)
    assert [t.split(":")[0].split(" of ")[0] for t in titles] == [
        "", "graph", "hot loop nest", "optimised LLVM IR", "time", "check"], titles
    graph, nest, ir, times = (sections[t] for t in titles[1:5])

    assert graph[0].startswith("program message_passing(") and any("scatter_nd(" in line for line in graph)
    # One kernel after fusion; its hot stage in full, the other stages folded onto one line each.
    assert nest[0].startswith("kernel scatter_nd_0(") and sum(line.startswith("kernel ") for line in nest) == 1
    assert sum("{ ... }" in line for line in nest) >= 2 and any("# parallel_rows" in line for line in nest)
    assert nest[-1].startswith("where n(v) = ") and any(re.search(r"x\[n\(src\[[^]]*\]\), i3\]", line) for line in nest)
    # The hot loop's basic blocks from the optimised module, not the whole module.
    assert re.fullmatch(r"[-\w.$]+:", ir[0]) and 3 <= len(ir) <= 30, ir
    assert not any(line.startswith("define") or "!alias.scope" in line for line in ir)
    assert any(re.search(r"<\d+ x float>", line) for line in ir), "the hot loop is vectorised"

    rows = {line.split()[0]: line for line in times}
    assert re.match(r"cinnlite +\d+\.\d\d ms +1\.0x  one fused kernel; (bit-identical|equal)", rows["cinnlite"])
    assert re.match(r"numpy +\d+\.\d\d ms +\d+\.\dx  np\.add\.at", rows["numpy"])
    assert re.match(r"torch +(\d+\.\d\d ms +\d+\.\dx |not installed)", rows["torch"])
    assert sections["check"][0].endswith("matches numpy")
