"""benchmarks/bench_cuda.py without a GPU: its ``--emulate`` dry run runs every workload and
matrix cell on target "cuda-emu", with PyTorch on the CPU, and checks every result against numpy;
CuPy's peers run on a stand-in made of numpy (CuPy follows numpy's indexing), so their
equivalence is checked too. What only a GPU has (CUDA events, exe.time_kernels, the device copy)
is what the real run adds.
"""
from __future__ import annotations

import inspect
import json
import sys
import time
import types
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture
def bench_cuda(monkeypatch, cache_dir):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_cuda
    return bench_cuda


def numpy_cupy():
    """Modules ``cupy`` and ``cupyx`` made of numpy: what the CuPy peers call, with CuPy's
    semantics where they differ from numpy's (take wraps out-of-range indices; the scatters
    refuse the dtypes CuPy refuses)."""
    cp = types.ModuleType("cupy")
    for name in ("arange", "clip", "copyto", "empty", "take_along_axis", "ascontiguousarray"):
        setattr(cp, name, getattr(np, name))
    cp.__version__ = "numpy stand-in"
    cp.asarray = lambda a: np.array(a, copy=True)
    cp.asnumpy = lambda a: np.array(a, copy=True)
    cp.take = lambda a, indices, axis=None, out=None: np.take(a, indices, axis=axis, out=out, mode="wrap")
    cp.get_default_memory_pool = lambda: types.SimpleNamespace(free_all_blocks=lambda: None)
    cp.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(deviceSynchronize=lambda: None))
    cpx = types.ModuleType("cupyx")

    def scatter(ufunc, dtypes):
        def run(a, slices, value):
            if a.dtype.name not in dtypes:
                raise TypeError(f"{ufunc.__name__}: {a.dtype} is not supported")
            ufunc.at(a, slices, value)
        return run

    from gpu_peers import CUPY_SCATTER_DTYPES
    cpx.scatter_add = scatter(np.add, CUPY_SCATTER_DTYPES["add"])
    cpx.scatter_max = scatter(np.maximum, CUPY_SCATTER_DTYPES["max"])
    cpx.scatter_min = scatter(np.minimum, CUPY_SCATTER_DTYPES["min"])
    return cp, cpx


def run_bench(bench_cuda, tmp_path, capsys, *args):
    path = tmp_path / "out.json"
    status = bench_cuda.main(["--emulate", "--quick", "--json", str(path), *args])
    return status, capsys.readouterr().out, json.loads(path.read_text())


def test_the_emulated_run_checks_every_cell_against_numpy(bench_cuda, tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.delenv(bench_cuda.BUDGET_VARIABLE, raising=False)  # the default budget: every cell runs
    cp, cpx = numpy_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setitem(sys.modules, "cupyx", cpx)
    status, out, result = run_bench(bench_cuda, tmp_path, capsys)
    assert status == 0, out
    rows = result["workloads"] + result["matrix"]
    assert [r["id"] for r in result["workloads"]] == list(bench_cuda.WORKLOAD_IDS)
    assert len(result["matrix"]) == len(bench_cuda.gpu_matrix_cells(1 << 14)) and not result["skipped"]
    for row in rows:
        assert not row["errors"], (row["label"], row["errors"])
        for name in ("cinnlite", "torch", "cupy"):
            if name in row["skipped"]:
                continue
            entry = row["impls"][name]
            assert entry["checked"] and entry["checked_after"] and entry["median_s"] > 0, (row["label"], name)
        assert "ratio" in row and "gbps" in row
        assert ("copy_pct" in row) == row["large"]
    # Every row has a PyTorch peer; CuPy lacks only what it lacks (mul, mean, and the dtypes its
    # scatters refuse).
    assert all("torch" in r["impls"] for r in rows)
    lacking = sorted(r["label"] for r in rows if "cupy" in r["skipped"])
    assert lacking == sorted(c.label for c in bench_cuda.gpu_matrix_cells(1 << 14)
                             if c.reduce in ("mul", "mean")
                             or (c.reduce in ("add", "max", "min") and c.dtype == "int64")), lacking
    for section in ("W1-W6", "matrix"):
        assert f"-- {section}: " in out
    assert "geometric mean of cinnlite's speedup over the best peer" in out
    assert "large ones at >= 80% of copy bandwidth" in out
    s = result["matrix_summary"]
    assert s["rows"] == s["checked"] == s["compared"] == len(result["matrix"]) and not s["cinnlite_failed"]
    assert s["geomean"] > 0 and set(s) >= {"worst", "large", "large_fast_fraction", "geomean_vs_torch",
                                           "geomean_vs_cupy"}


def test_a_spent_budget_stops_adding_cells_and_says_so(bench_cuda, tmp_path, capsys):
    status, out, result = run_bench(bench_cuda, tmp_path, capsys, "--only", "matrix", "--budget-seconds", "0")
    assert status == 0
    assert "workloads" not in result and result["matrix"] == []
    assert len(result["skipped"]) == len(bench_cuda.gpu_matrix_cells(1 << 14))
    assert "the budget of 0 s was spent: skipped" in out


def test_a_wrong_result_is_reported_and_not_timed(bench_cuda, tmp_path, capsys, monkeypatch):
    import gpu_peers

    real = gpu_peers.workload_peer

    def off_by_one(lib, wid, case):  # every peer (PyTorch; CuPy too where it is installed)
        peer = real(lib, wid, case)
        return gpu_peers.Peer(lambda: peer.run() + 1, peer.note)

    monkeypatch.setattr(bench_cuda, "workload_peer", off_by_one)
    status, out, result = run_bench(bench_cuda, tmp_path, capsys, "--only", "w")
    assert status == 0  # only cinnlite's failures fail the run
    for row in result["workloads"]:
        assert "disagrees" in row["errors"]["torch"] and "median_s" not in row["impls"].get("torch", {})
        assert row["impls"]["cinnlite"]["checked"] and "ratio" not in row
    assert "torch FAILED" in out


def test_the_cells_cover_the_matrix_and_stay_few(bench_cuda):
    cells = bench_cuda.gpu_matrix_cells(1 << 24)
    assert len(set(cells)) == len(cells) <= 54  # with W1-W6, about 60 programs to compile
    assert {c.op for c in cells} == {"take", "gather", "gather_nd", "scatter", "scatter_nd"}
    assert {c.dtype for c in cells} >= {"float16", "float32", "int32", "int64"}
    assert {c.elements for c in cells} == {1 << 10, 1 << 24}
    assert {c.axis for c in cells if c.op in ("take", "gather")} == {"first", "middle", "last"}
    assert {c.reduce for c in cells if c.op == "scatter"} == {"none", "add", "max", "min", "mul", "mean"}
    assert {c.mode for c in cells} == {"raise", "clip", "wrap"}
    assert {c.extents for c in cells} == {"pow2", "odd"}
    # Each operator's base comes first, so that a budget drops variations, not operators.
    assert {c.op for c in cells[:10]} == {c.op for c in cells}


def test_float_sums_in_the_matrix_are_checked_bit_for_bit(bench_cuda):
    from matrix_cells import Cell, build_case

    rng = bench_cuda.QuantisedRandom(np.random.default_rng(0))
    cell = Cell("scatter", "first", "float16", elements=1 << 14, reduce="add")
    case = build_case(cell, rng, 1)
    check = bench_cuda.cell_check(cell, case)
    check("same", case.reference.copy())
    # Summed in another order (by target, in float64): the same bits.
    x, index, src = (case.arrays[k] for k in ("x", "index", "src"))
    total = x.astype(np.float64)
    np.add.at(total, (index, np.arange(index.shape[1])), src.astype(np.float64))
    check("reordered", total.astype(np.float16))
    off = case.reference.copy()
    off.flat[7] += np.float16(0.125)
    with pytest.raises(AssertionError):
        check("off by an eighth", off)


class OnFakeGpu:
    """An emulated executable standing in for a GPU one: it runs on "cuda-emu" and answers
    ``time_kernels`` and ``device_name``, taking their arguments as CUDAExecutable does."""

    def __init__(self, exe, calls: list, fail_at):
        self.exe, self.symbolic, self.module = exe, exe.symbolic, exe.module
        self.calls, self.fail_at = calls, fail_at

    def run(self, feeds):
        return self.exe.run(feeds)

    def device_name(self):
        return "a fake GPU"

    def time_kernels(self, *args, **kwargs):
        from cinnlite.errors import CinnliteError
        from cinnlite.runtime.cuda import CUDAExecutable

        bound = inspect.signature(CUDAExecutable.time_kernels).bind(self, *args, **kwargs)
        bound.apply_defaults()
        self.calls.append(dict(bound.arguments, self=None))
        if len(self.calls) == self.fail_at:
            raise CinnliteError("CUDA driver: cuEventSynchronize failed: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal "
                                "memory access was encountered")
        return [1e-4] * bound.arguments["repeat"]


def run_on_fake_gpu(bench_cuda, monkeypatch, tmp_path, fail_at=None, *args):
    """bench_cuda.run on a platform that says it is a GPU: cinnlite's executables are
    OnFakeGpu, the device copy takes 50 us, and PyTorch (on the CPU) is timed with events that
    read the clock when recorded."""
    from gpu_peers import EventClock, TorchLib

    import cinnlite as cl
    from cinnlite.runtime import cuda as cuda_runtime

    torch = pytest.importorskip("torch")
    real_compile, copy_signature, calls = cl.compile, inspect.signature(cuda_runtime.device_copy_seconds), []

    def compile_for_the_fake_gpu(program, target, **options):
        assert target == "cuda"
        return OnFakeGpu(real_compile(program, target="cuda-emu", **options), calls, fail_at)

    def copy_seconds(*args, **kwargs):
        bound = copy_signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return [5e-5] * bound.arguments["repeat"]

    class Event:
        def record(self):
            self.t = time.perf_counter()

        def synchronize(self):
            pass

    monkeypatch.setattr(cl, "compile", compile_for_the_fake_gpu)
    monkeypatch.setitem(bench_cuda.LARGE, "quick", 1 << 14)  # the emulation's sizes, the GPU's code
    monkeypatch.setattr(bench_cuda, "WORKLOAD_IDS", ("W1", "W3", "W5"))
    monkeypatch.setattr(cuda_runtime, "device_copy_seconds", copy_seconds)
    lib = TorchLib(torch, "cpu")
    lib.clock = EventClock("fake events", Event, lambda a, b: (b.t - a.t) * 1e3, lib.sync)
    plat = bench_cuda.Platform(True, "cuda", False, libs=[lib])
    path = tmp_path / "gpu.json"
    args = bench_cuda.parse_args(["--quick", "--repeat", "2", "--json", str(path), *args])
    status = bench_cuda.run(plat, args, time.perf_counter())
    return status, json.loads(path.read_text()), calls


def test_the_gpu_path_times_with_the_runtime_and_events(bench_cuda, monkeypatch, tmp_path, capsys):
    status, result, calls = run_on_fake_gpu(bench_cuda, monkeypatch, tmp_path, None, "--match", "first float32 i64 16k")
    out = capsys.readouterr().out
    assert status == 0, out
    assert result["device"] == "a fake GPU"
    rows = result["workloads"] + result["matrix"]
    assert len(result["workloads"]) == 3 and len(result["matrix"]) == 12  # two of them odd extents
    inner = bench_cuda.INNER[True]
    assert calls and all(c["repeat"] == inner and c["warmup"] == 1 for c in calls)
    assert len(calls) == 3 * len(rows)  # a turn a round, the round of warm-up included
    for row in rows:
        assert not row["errors"], row["errors"]
        cinnlite, torch = row["impls"]["cinnlite"], row["impls"]["torch"]
        assert cinnlite["median_s"] == 1e-4 and cinnlite["checked"] and len(cinnlite["samples_s"]) == 2 * inner
        assert torch["checked_after"] and len(torch["samples_s"]) == 2 * inner
        assert row["ratio"] == pytest.approx(torch["median_s"] / 1e-4)
        assert row["copy_pct"] == pytest.approx(50.0) and row["gbps"] == pytest.approx(row["bytes"] / 1e-4 / 1e9)


def test_a_broken_cuda_context_stops_the_run(bench_cuda, monkeypatch, tmp_path, capsys):
    status, result, _ = run_on_fake_gpu(bench_cuda, monkeypatch, tmp_path, 4, "--only", "matrix",
                                        "--match", "first float32 i64 16k")
    out = capsys.readouterr().out
    assert status == 1
    assert [r["label"] for r in result["matrix"]] == ["take first float32 i64 16k", "gather first float32 i64 16k"]
    assert "ILLEGAL_ADDRESS" in result["matrix"][1]["errors"]["cinnlite"]
    assert len(result["skipped"]) == 10 and "stopped early: the CUDA context broke" in out


def test_the_quick_look_at_w4_to_w6_keeps_the_tolerance_of_correctness_check(bench_cuda):
    from correctness import check
    from workloads import WORKLOADS

    workload = WORKLOADS["W4"](True)
    workload.dims = lambda: bench_cuda.EMULATE_DIMS["W4"]
    case = workload.case(np.random.default_rng(0))
    expected = case.reference()
    near = (expected * (1 + 1.5e-5)).astype(np.float32)  # float32 sums in another order, and more
    far = near.copy()
    far.flat[3] += 1e-3
    assert bench_cuda.agrees(near, expected, bench_cuda.WORKLOAD_TOL)
    check(case, expected, near, "near")
    assert not bench_cuda.agrees(far, expected, bench_cuda.WORKLOAD_TOL)
    with pytest.raises(AssertionError):
        check(case, expected, far, "far")


def test_a_dtype_a_peer_refuses_is_not_applicable_rather_than_failed(bench_cuda, tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    cp, cpx = numpy_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setitem(sys.modules, "cupyx", cpx)
    import gpu_peers

    # A CuPy that claims int64 sums, and refuses them when called.
    monkeypatch.setitem(gpu_peers.CUPY_SCATTER_DTYPES, "add", ("float16", "float32", "int32", "int64"))
    status, out, result = run_bench(bench_cuda, tmp_path, capsys, "--only", "matrix", "--match", "int64 i64 16k add")
    assert status == 0
    (row,) = [r for r in result["matrix"] if r["label"] == "scatter first int64 i64 16k add"]
    assert row["skipped"]["cupy"] == "cupy: add: int64 is not supported" and not row["errors"]
    assert "cupy n/a: cupy: add: int64 is not supported" in out


def test_without_a_gpu_it_says_what_is_missing(bench_cuda, capsys):
    from cinnlite.runtime.cuda import gpu_available

    if gpu_available():
        pytest.skip("a GPU is here")
    assert bench_cuda.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("bench_cuda: nothing to measure: TargetUnavailableError: ") and "--emulate" in out
