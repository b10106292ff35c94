#!/usr/bin/env python3
"""GPU throughput of cinnlite's gathers and scatters, against PyTorch and CuPy on the same GPU
and against the device's copy bandwidth.

Two parts (``--only w|matrix``; both by default):

- ``w``: the workloads W1-W6 of the README, with the inputs, numpy references and cinnlite
  programs of workloads.py (bench.py times the same on the CPU);
- ``matrix``: operators (take, gather, gather_nd, scatter, scatter_nd) x axes x data dtypes
  (float16, float32, int32, int64) x index dtypes x sizes (1 k and 16 M elements) x modes and
  reductions, the cells of matrix_cells.py walked as a covering design around a base of float32
  data and int64 indices. The cells run most telling first (each operator's base, then the other
  axes, the dtypes, the modes and reductions), so a budget that runs out drops variations rather
  than whole operators.

Peers: PyTorch (torch.cuda) and CuPy, each where it has the operation (gpu_peers.py; a peer that is
not installed is skipped and said so). Every result is checked against numpy before it is timed
and again after: gathers, integer work, max, min and last-write-wins exactly; float sums exactly
too in the matrix, whose float data are multiples of 1/8 (their sums are exact in any order,
float16 included); the matrix's mul and mean, and W4-W6 (float32 sums against a float64
reference), within a tolerance. A failing implementation is reported and left out of the timing;
the exit status is 1 when cinnlite failed anywhere.

Timing: after a round of warm-up, the implementations, the device copy included, take turns
round by round (``--repeat`` rounds, 5 by default, the order reversed every other round); in its
turn each makes one untimed call, then 6 timed ones, each between two CUDA events: ``exe.time_kernels`` for cinnlite (inputs
already on the device), ``torch.cuda.Event`` for PyTorch, ``cupy.cuda.Event`` for CuPy. A time is
the median of an implementation's samples. Cells of 1 k elements measure launch latency more than memory
(the events enclose the host's launch calls). "vs best" is the best peer's time over cinnlite's
(> 1: cinnlite faster); GB/s is the cell's minimal traffic over cinnlite's time; "% copy" is a
device-to-device copy of the same bytes (``device_copy_seconds``) over cinnlite's time.

    python benchmarks/bench_cuda.py                       # W1-W6 and the matrix (about 2 minutes)
    python benchmarks/bench_cuda.py --quick               # smaller sizes, fewer rounds: a smoke run
    python benchmarks/bench_cuda.py --only matrix --json out.json --budget-seconds 120
    CINNLITE_BENCH_BUDGET_S=60 python benchmarks/bench_cuda.py   # the default budget, from the environment
    python benchmarks/bench_cuda.py --emulate --quick     # no GPU: target "cuda-emu", PyTorch on the CPU

``--emulate`` runs every cell and workload at tiny sizes on ``target="cuda-emu"`` (the same CUDA
C, run on the CPU), PyTorch on the CPU and CuPy only where it imports, timed with
``time.perf_counter``: a dry run of the programs, the references and the peers' equivalence; its
times mean nothing.
"""
from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform as py_platform
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

import cinnlite as cl
from correctness import check as check_workload
from gpu_peers import CupyLib, PerfClock, TorchLib, cell_peer, workload_peer
from machine import cpu_model, git_revision
from matrix import fmt_time
from matrix_cells import Cell, build_case, cell_axis, cinnlite_program
from workloads import SEED, WORKLOADS

WORKLOAD_IDS = ("W1", "W2", "W3", "W4", "W5", "W6")
SMALL = 1 << 10
LARGE = {"full": 1 << 24, "quick": 1 << 20, "emulate": 1 << 14}
#: W1-W6 at tiny sizes for --emulate (the dims() of each workload: see workloads.py).
EMULATE_DIMS = {"W1": (1_000, 16, 2_000), "W2": (32, 512, 128), "W3": (128, 128, 4_000),
                "W4": (200, 16, 4_000), "W5": (32, 512, 128), "W6": (2_000, 16, 20_000)}
INNER = {True: 6, False: 2}  # timed calls per turn: on a GPU, in the emulation
#: (atol, rtol) of correctness.check for W4-W6, float32 sums against float64 references.
WORKLOAD_TOL = (1e-5, 2e-5)
FAST_PCT = 80.0               # the share of the copy bandwidth a large cell should reach
#: Seconds after which no workload or cell starts, where neither --budget-seconds nor the
#: variable BUDGET_VARIABLE (for runs that cannot pass the option: a smoke script that calls
#: the benchmark as it is) says otherwise.
DEFAULT_BUDGET_S = 240.0
BUDGET_VARIABLE = "CINNLITE_BENCH_BUDGET_S"
NO_SUCH_OPERATION = "no such operation"
#: Errors after which the CUDA context is unusable: nothing later can be measured.
STICKY = ("ILLEGAL_ADDRESS", "illegal memory access", "LAUNCH_FAILED", "unspecified launch failure",
          "misaligned address", "ILLEGAL_INSTRUCTION")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=("w", "matrix"), help="only the workloads W1-W6, or only the matrix")
    p.add_argument("--quick", action="store_true", help="W1-W6 at bench.py's --quick sizes, matrix cells of at "
                                                        "most 1 M elements, 4 rounds")
    p.add_argument("--repeat", type=int, default=None,
                   help="rounds of turns (default 5; 4 with --quick, 2 with --emulate); 6 timed calls a turn on a GPU")
    p.add_argument("--budget-seconds", type=float, default=None,
                   help=f"start no workload or cell after this many seconds (default: ${BUDGET_VARIABLE}, "
                        f"else {DEFAULT_BUDGET_S:g})")
    p.add_argument("--match", help="only matrix cells whose label contains this text")
    p.add_argument("--cache", action="store_true",
                   help="compile through cinnlite's compile caches, as users do: a structure compiled at a second "
                        "size gets a shape-generic build (default: cache=False, every program built for its own "
                        "sizes)")
    p.add_argument("--emulate", action="store_true",
                   help='no GPU needed: target "cuda-emu", PyTorch on the CPU, tiny sizes, perf_counter times')
    p.add_argument("--json", metavar="PATH", help="write every row (times, samples, ratios, notes) as JSON")
    args = p.parse_args(argv)
    if args.repeat is None:
        args.repeat = 2 if args.emulate else 4 if args.quick else 5
    args.repeat = max(1, args.repeat)
    if args.budget_seconds is None:
        text = os.environ.get(BUDGET_VARIABLE, "").strip()
        try:
            args.budget_seconds = float(text) if text else DEFAULT_BUDGET_S
        except ValueError:
            p.error(f"{BUDGET_VARIABLE}={text!r} is not a number of seconds")
    return args


# -- the platform: where cinnlite and the peers run ---------------------------------------------


@dataclass
class Platform:
    gpu: bool
    target: str
    cache: bool
    libs: list = field(default_factory=list)     # TorchLib / CupyLib that run here
    missing: dict = field(default_factory=dict)  # peer name -> why it does not run
    device: str = ""
    broken: str = ""                             # a sticky CUDA error: stop measuring

    @property
    def inner(self) -> int:
        return INNER[self.gpu]

    def release(self, large: bool):
        """Free what a row left on the device. Reference counting frees the executables and the
        peers' arrays; a full collection (0.1 s with PyTorch loaded) is a safety net for the GPU
        memory of large rows only."""
        gc.collect(2 if large and self.gpu else 0)
        for lib in self.libs:
            lib.release()


def make_platform(args) -> Platform | None:
    """The platform of this run, or None (said why) when there is no GPU to measure."""
    if args.emulate:
        plat = Platform(False, "cuda-emu", args.cache, device=f"{cpu_model()} (emulation: cuda-emu)")
    else:
        from cinnlite.runtime.cuda import gpu_available
        if not gpu_available():
            print(f"bench_cuda: nothing to measure: {why_no_gpu()} (--emulate runs the same rows on the CPU)")
            return None
        plat = Platform(True, "cuda", args.cache)
    try:
        import torch
        if plat.gpu and not torch.cuda.is_available():
            plat.missing["torch"] = "torch.cuda.is_available() is False"
        else:
            plat.libs.append(TorchLib(torch, "cuda" if plat.gpu else "cpu"))
            if plat.gpu:
                plat.device = torch.cuda.get_device_name(0)
    except Exception as exc:  # ImportError, or a broken install
        plat.missing["torch"] = f"{type(exc).__name__}: {exc}"
    try:
        import cupy
        import cupyx
        cupy.arange(2).sum()  # imports and runs on the GPU
        plat.libs.append(CupyLib(cupy, cupyx, plat.gpu))
    except Exception as exc:
        plat.missing["cupy"] = f"{type(exc).__name__}: {exc}"[:200]
    return plat


def why_no_gpu() -> str:
    """What running a one-element program on target "cuda" says is missing."""
    b = cl.NetBuilder("probe")
    x = b.create_input("float32", (1,), "x")
    try:
        cl.compile(b.build([b.take(x, b.constant(np.zeros(1, np.int64)), axis=0)]), target="cuda").run(
            {"x": np.zeros(1, np.float32)})
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "gpu_available() is False"


# -- one implementation, timed ------------------------------------------------------------------


@dataclass
class Timed:
    name: str
    time: object          # (n) -> n seconds, after one untimed call
    result: object        # () -> the last result as a numpy array (None for the copy)
    note: str = ""
    info: dict = field(default_factory=dict)


def only_output(outputs: dict) -> np.ndarray:
    (value,) = outputs.values()
    return value


def cinnlite_timed(plat: Platform, program, feeds: dict) -> Timed:
    t0 = time.perf_counter()
    exe = cl.compile(program, target=plat.target, cache=plat.cache)
    t1 = time.perf_counter()
    state = {"first": only_output(exe.run(feeds))}  # on a GPU: NVRTC, module load, allocation
    t2 = time.perf_counter()
    if plat.gpu and not plat.device:
        plat.device = exe.device_name()

    def result():
        first = state.pop("first", None)
        return first if first is not None else only_output(exe.run(feeds))

    if plat.gpu:
        def timer(n):
            return exe.time_kernels(feeds, repeat=n, warmup=1)
        note = "exe.time_kernels"
    else:
        def timer(n):
            return PerfClock().time(lambda: exe.run(feeds), n)
        note = "exe.run (emulation)"
    info = {"compile_s": t1 - t0, "first_run_s": t2 - t1, "build": "shape-generic" if exe.symbolic else "static",
            "launches": len(getattr(getattr(exe, "module", None), "launches", ()))}
    return Timed("cinnlite", timer, result, note, info)


class Unsupported(Exception):
    """A library refused the operation for these inputs (CuPy's scatters for some dtypes)."""


def peer_timed(lib, make) -> Timed | None:
    """A peer (gpu_peers.py) made and run once, or None where the library lacks the operation."""
    peer = make()
    if peer is None:
        return None
    last = {}

    def run():
        last["r"] = peer.run()
    try:
        run()
    except TypeError as exc:  # how CuPy and PyTorch refuse a dtype
        raise Unsupported(f"{lib.name}: {exc}") from exc
    return Timed(lib.name, lambda n: lib.clock.time(run, n), lambda: lib.get(last["r"]), peer.note)


def copy_timed(plat: Platform, nbytes: int) -> Timed:
    """A copy of nbytes / 2 bytes (it reads and writes each, moving nbytes): the ceiling."""
    half = max(8, nbytes // 2)
    if plat.gpu:
        from cinnlite.runtime.cuda import device_copy_seconds
        return Timed("copy", lambda n: device_copy_seconds(half, repeat=n), None, f"cuMemcpyDtoD of {half} bytes")
    src = np.ones(half // 4, np.float32)
    dst = np.empty_like(src)
    return Timed("copy", lambda n: PerfClock().time(lambda: np.copyto(dst, src), n), None, "np.copyto (emulation)")


def interleaved(ready: list, rounds: int, inner: int, row: dict) -> dict:
    """Samples per implementation: ``rounds`` turns each after a discarded round of warm-up, the
    order reversed every other round. One that raises is reported in ``row`` and drops out."""
    samples = {impl.name: [] for impl in ready}
    live = list(ready)
    for k in range(-1, rounds):
        for impl in (live if k % 2 == 0 else live[::-1]):
            try:
                times = impl.time(inner)
                if k >= 0:
                    samples[impl.name] += times
            except Exception as exc:
                row["errors"][impl.name] = f"while timing: {type(exc).__name__}: {exc}"[:300]
                live.remove(impl)
    return {name: s for name, s in samples.items() if name not in row["errors"]}


def new_row(label: str, kind: str, nbytes: int, large: bool, **fields) -> dict:
    return {"label": label, "kind": kind, "bytes": nbytes, "large": large, **fields,
            "impls": {}, "errors": {}, "skipped": {}}


def measure(row: dict, makers: list, check, plat: Platform, args):
    """Make every implementation (``makers``: (name, factory)), check its first result, time the
    ones that agree with the copy ceiling in interleaved rounds, check them again, summarise."""
    t0 = time.perf_counter()
    ready = []
    for name, make in makers:
        try:
            impl = make()
            if impl is None:
                row["skipped"][name] = NO_SUCH_OPERATION
                continue
            check(name, impl.result())
            row["impls"][name] = {"note": impl.note, "checked": True, **impl.info}
            ready.append(impl)
        except Unsupported as exc:
            row["skipped"][name] = str(exc)[:200]
        except Exception as exc:  # a failing implementation is reported, never fatal
            row["errors"][name] = f"{type(exc).__name__}: {exc}"[:300]
    if ready:
        ready.append(copy_timed(plat, row["bytes"]))
        samples = interleaved(ready, args.repeat, plat.inner, row)
        for impl in ready:
            if impl.name not in samples:
                continue
            median = statistics.median(samples[impl.name])
            if impl.name == "copy":
                row["copy_s"] = median
                continue
            row["impls"][impl.name].update(median_s=median, samples_s=samples[impl.name])
            try:
                check(impl.name, impl.result())
                row["impls"][impl.name]["checked_after"] = True
            except Exception as exc:
                row["errors"][impl.name] = f"after timing: {type(exc).__name__}: {exc}"[:300]
    ready = None
    for err in row["errors"].values():
        if plat.gpu and any(s in err for s in STICKY):
            plat.broken = err
    summarise(row)
    row["wall_s"] = time.perf_counter() - t0


def summarise(row: dict):
    timed = {k: v["median_s"] for k, v in row["impls"].items() if "median_s" in v and k not in row["errors"]}
    cl_t = timed.get("cinnlite")
    if cl_t is None:
        return
    row["gbps"] = row["bytes"] / cl_t / 1e9
    if "copy_s" in row:
        row["copy_pct"] = 100.0 * row["copy_s"] / cl_t
    peers = {k: v for k, v in timed.items() if k != "cinnlite"}
    if peers:
        row["best_peer"] = min(peers, key=peers.get)
        row["ratio"] = peers[row["best_peer"]] / cl_t
        row["ratios"] = {k: v / cl_t for k, v in peers.items()}


# -- W1-W6 ----------------------------------------------------------------------------------------


def within_budget(items, label, plat: Platform, deadline: float, skipped: list):
    """The items in turn while the budget lasts and the CUDA context works; the others are named
    in ``skipped``."""
    for item in items:
        if time.perf_counter() > deadline or plat.broken:
            skipped.append(label(item))
        else:
            yield item


def add_row(rows: list, label: str, kind: str, make_row, plat: Platform):
    """``make_row()`` appended to ``rows`` and printed; an error outside the implementations (in
    making the inputs, say) becomes a row of its own, never the end of the run."""
    try:
        row = make_row()
    except Exception as exc:
        row = new_row(label, kind, 0, False)
        row["errors"]["setup"] = f"{type(exc).__name__}: {exc}"[:300]
    rows.append(row)
    print_row(row, plat)
    plat.release(row["large"])


def workload_rows(plat: Platform, args, deadline: float, rows: list, skipped: list):
    for wid in within_budget(WORKLOAD_IDS, str, plat, deadline, skipped):
        add_row(rows, wid, "workload", lambda wid=wid: workload_row(plat, args, wid), plat)


def workload_row(plat: Platform, args, wid: str) -> dict:
    workload = WORKLOADS[wid](args.quick or args.emulate)
    if args.emulate:
        dims = EMULATE_DIMS[wid]
        workload.dims = lambda: dims
    case = workload.case(np.random.default_rng(SEED))
    expected = case.reference()
    row = new_row(f"{wid} {workload.title}", "workload", case.bytes_moved, True, id=wid, shapes=case.shapes)
    makers = [("cinnlite", lambda: cinnlite_timed(plat, workload.cinnlite_program(case), case.arrays))]
    makers += [(lib.name, lambda lib=lib: peer_timed(lib, lambda: workload_peer(lib, wid, case))) for lib in plat.libs]
    tol = None if case.exact else WORKLOAD_TOL

    def check(name, got):
        if not agrees(np.asarray(got), expected, tol):
            check_workload(case, expected, got, f"{wid} {name}")
    measure(row, makers, check, plat, args)
    return row


# -- the matrix -----------------------------------------------------------------------------------


def gpu_matrix_cells(large: int) -> list:
    """The cells in the order they run: each operator's base (float32, int64 indices, first axis
    or index rows) small and large; the other axes; the data and index dtypes; the modes and
    the reductions; odd extents (no power of two, no multiple of a vector's lanes)."""
    S, L = SMALL, large
    base = [Cell(op, axis, elements=n, reduce=reduce)
            for op, axis, reduce in (("take", "first", "-"), ("gather", "first", "-"), ("gather_nd", "slices", "-"),
                                     ("scatter", "first", "add"), ("scatter_nd", "slices", "add"))
            for n in (S, L)]
    axes = [Cell("take", "middle", elements=L), Cell("take", "last", elements=L), Cell("take", "last", elements=S),
            Cell("gather", "middle", elements=L), Cell("gather", "last", elements=L),
            Cell("gather", "last", elements=S), Cell("gather_nd", "elements", elements=L),
            Cell("gather_nd", "elements", elements=S), Cell("gather_nd", "batch", elements=L),
            Cell("scatter", "last", elements=L, reduce="add"), Cell("scatter", "middle", elements=L, reduce="add")]
    others = ("float16", "int32", "int64")
    dtypes = ([Cell("take", "first", d, elements=L) for d in others]
              + [Cell("take", "first", index_dtype="int32", elements=L)]
              + [Cell("gather", "last", d, elements=L) for d in others]
              + [Cell("gather_nd", "elements", "float16", elements=L)]
              + [Cell(op, axis, d, elements=L, reduce="add") for op, axis in (("scatter", "first"),
                                                                             ("scatter_nd", "slices"))
                 for d in others])
    modes = ([Cell("take", "first", elements=L, mode=m) for m in ("clip", "wrap")]
             + [Cell("scatter", "first", elements=L, reduce=r) for r in ("none", "max", "min", "mul", "mean")]
             + [Cell("scatter", "last", elements=L, reduce="none")]
             + [Cell("scatter_nd", "slices", elements=L, reduce=r) for r in ("none", "max", "min")])
    odd = [Cell(op, axis, elements=L, reduce=reduce, extents="odd")
           for op, axis, reduce in (("take", "first", "-"), ("take", "middle", "-"), ("gather", "middle", "-"),
                                    ("gather", "last", "-"), ("scatter", "first", "add"))]
    return base + axes + dtypes + modes + odd


class QuantisedRandom:
    """A numpy Generator whose ``random()`` gives multiples of 1/32: matrix_cells draws float data
    as ``random() * 4 - 2``, which become multiples of 1/8 in [-2, 2), exact in float16, whose
    sums of up to 128 terms are exact in float16 and float32 in any order. So a scatter that adds
    can be checked bit for bit against numpy whatever order the GPU's atomics take."""

    def __init__(self, rng):
        self._rng = rng

    def random(self, *args, **kwargs):
        return np.floor(self._rng.random(*args, **kwargs) * 32) / 32

    def __getattr__(self, name):
        return getattr(self._rng, name)


def cell_check(cell, case):
    """The check of a cell's results: bit for bit, except float mul and mean (a relative
    tolerance of 64 ulp) and float sums of data that are not multiples of 1/8 (64 ulp of the
    largest magnitude)."""
    expected = case.reference
    tol = None
    if expected.dtype.kind == "f" and cell.reduce in ("add", "mean", "mul"):
        eighths = all(np.array_equal(a * 8, np.round(a * 8)) for k, a in case.arrays.items() if k != "index")
        if cell.reduce != "add" or not eighths:
            tol = 64 * float(np.finfo(expected.dtype).eps)
            tol = (tol * max(1.0, float(np.abs(expected).max(initial=0))), tol)

    def check(name, got):
        got = np.asarray(got)
        if got.shape != expected.shape or got.dtype != expected.dtype:
            raise AssertionError(f"{name}: {got.dtype} {got.shape}, expected {expected.dtype} {expected.shape}")
        if agrees(got, expected, tol):
            return
        message = f"{cell.label}: {name} disagrees with numpy"
        if tol is None:
            np.testing.assert_array_equal(got, expected, err_msg=message)
        else:
            np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), atol=tol[0],
                                       rtol=tol[1], err_msg=message)
        raise AssertionError(message)
    return check


def agrees(got: np.ndarray, expected: np.ndarray, tol=None) -> bool:
    """Whether ``got`` equals ``expected`` (``tol`` None) or is within ``tol`` = (atol, rtol) of
    it as np.testing.assert_allclose counts it: a quick first look, since np.testing's
    assertions take about a second for 16 M elements; when it fails, they say where."""
    if got.shape != expected.shape:
        return False
    if tol is None:
        return got.dtype == expected.dtype and np.array_equal(got, expected, equal_nan=expected.dtype.kind == "f")
    err = np.abs(got.astype(np.float64) - expected)
    return bool(np.all(err <= tol[0] + tol[1] * np.abs(expected.astype(np.float64))))


def matrix_rows(plat: Platform, args, deadline: float, rows: list, skipped: list):
    size = "emulate" if args.emulate else "quick" if args.quick else "full"
    cells = [c for c in gpu_matrix_cells(LARGE[size]) if not args.match or args.match in c.label]
    rng = QuantisedRandom(np.random.default_rng(SEED))
    for cell in within_budget(cells, lambda c: c.label, plat, deadline, skipped):
        add_row(rows, cell.label, "cell", lambda cell=cell: cell_row(plat, args, cell, rng, LARGE[size]), plat)


def cell_row(plat: Platform, args, cell, rng, large: int) -> dict:
    case = build_case(cell, rng, 1)
    axis, arrays = cell_axis(cell), case.arrays
    row = new_row(cell.label, "cell", case.bytes_moved, cell.elements >= large, op=cell.op,
                  shapes={k: list(v.shape) for k, v in arrays.items()})
    makers = [("cinnlite", lambda: cinnlite_timed(plat, cinnlite_program(cell, axis, arrays), arrays))]
    makers += [(lib.name, lambda lib=lib: peer_timed(lib, lambda: cell_peer(lib, cell, axis, arrays, case.out_shape)))
               for lib in plat.libs]
    measure(row, makers, cell_check(cell, case), plat, args)
    if not row["large"]:
        row.pop("copy_pct", None)  # a copy of a few kB measures a launch, not bandwidth
    return row


# -- the report -----------------------------------------------------------------------------------


def print_header(plat: Platform, args):
    peers = [f"{lib.name} {lib.version} ({lib.clock.name})" for lib in plat.libs]
    peers += [f"{name} skipped: {why}" for name, why in plat.missing.items()]
    print(f"bench_cuda: {plat.device or 'GPU'}; target {plat.target!r}; "
          f"{'compile caches on (shape-generic builds for later sizes)' if plat.cache else 'static builds'}")
    print(f"peers: {'; '.join(peers) or 'none'}")
    print(f"cinnlite {getattr(cl, '__version__', '?')} ({git_revision() or 'no git'}), numpy {np.__version__}, "
          f"python {py_platform.python_version()}; host {cpu_model()}")
    print(f"timing: {args.repeat} rounds x {plat.inner} calls per implementation, interleaved; medians; "
          f"budget {args.budget_seconds:g} s" + ("; EMULATION: times mean nothing" if not plat.gpu else ""))
    print()


def table_header(first: str, plat: Platform):
    names = ["cinnlite"] + [lib.name for lib in plat.libs]
    print(f"{first:<44}" + "".join(f" {n:>10}" for n in names) + f" {'vs best':<13} {'GB/s':>7} {'% copy':>7}")


def print_row(row: dict, plat: Platform):
    text = f"{row['label']:<44}"
    for name in ["cinnlite"] + [lib.name for lib in plat.libs]:
        entry = row["impls"].get(name, {})
        if name in row["errors"]:
            cell = "FAILED"
        elif "median_s" in entry:
            cell = fmt_time(entry["median_s"])
        else:
            cell = "n/a" if name in row["skipped"] else "-"
        text += f" {cell:>10}"
    text += f" {row['ratio']:6.2f}x {row['best_peer']:<5}" if "ratio" in row else f" {'':>13}"
    text += f" {row['gbps']:7.1f}" if "gbps" in row else f" {'':>7}"
    text += f" {row['copy_pct']:6.0f}%" if "copy_pct" in row else ""
    if row["impls"].get("cinnlite", {}).get("build") == "shape-generic":
        text += "  (shape-generic build)"
    print(text, flush=True)
    for name, err in row["errors"].items():
        print(f"    {name} FAILED: {err[:240]}", flush=True)
    for name, why in row["skipped"].items():
        if why != NO_SUCH_OPERATION:
            print(f"    {name} n/a: {why}", flush=True)


def geomean(values) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def summary(rows: list) -> dict:
    compared = [r for r in rows if "ratio" in r]
    out = {"rows": len(rows), "compared": len(compared),
           "checked": sum(1 for r in rows if r["impls"].get("cinnlite", {}).get("checked")),
           "cinnlite_failed": [r["label"] for r in rows if "cinnlite" in r["errors"]],
           "setup_failed": [r["label"] for r in rows if "setup" in r["errors"]]}
    if compared:
        worst = min(compared, key=lambda r: r["ratio"])
        out.update(geomean=geomean(r["ratio"] for r in compared),
                   worst=[worst["label"], worst["ratio"], worst["best_peer"]],
                   below_1=sum(1 for r in compared if r["ratio"] < 1.0))
        for peer in sorted({p for r in compared for p in r["ratios"]}):
            vs = [r["ratios"][peer] for r in compared if peer in r["ratios"]]
            out[f"geomean_vs_{peer}"] = [geomean(vs), len(vs)]
    large = [r for r in rows if r["large"] and "copy_pct" in r]
    if large:
        low = min(large, key=lambda r: r["copy_pct"])
        fast = sum(1 for r in large if r["copy_pct"] >= FAST_PCT)
        out.update(large=len(large), large_fast=fast, large_fast_fraction=fast / len(large),
                   lowest_copy_pct=[low["label"], low["copy_pct"]])
    compile_s = [r["impls"]["cinnlite"]["compile_s"] + r["impls"]["cinnlite"]["first_run_s"]
                 for r in rows if "compile_s" in r["impls"].get("cinnlite", {})]
    out["cinnlite_compile_s"] = sum(compile_s)
    return out


def print_summary(title: str, s: dict):
    print(f"-- {title}: {s['rows']} rows, {s['checked']} with cinnlite checked against numpy, "
          f"{s['compared']} compared with a peer; cinnlite failed in {len(s['cinnlite_failed'])}"
          + (f" ({', '.join(s['cinnlite_failed'])})" if s["cinnlite_failed"] else "")
          + (f"; could not set up {', '.join(s['setup_failed'])}" if s["setup_failed"] else ""))
    if "geomean" in s:
        per_peer = ", ".join(f"{k[len('geomean_vs_'):]} {v[0]:.2f}x over {v[1]}"
                             for k, v in s.items() if k.startswith("geomean_vs_"))
        print(f"   geometric mean of cinnlite's speedup over the best peer: {s['geomean']:.2f}x ({per_peer})")
        print(f"   worst: {s['worst'][0]}: {s['worst'][1]:.2f}x vs {s['worst'][2]}; below 1.0x: {s['below_1']}")
    if "large" in s:
        print(f"   large ones at >= {FAST_PCT:.0f}% of copy bandwidth: {s['large_fast']} of {s['large']} "
              f"({100 * s['large_fast_fraction']:.0f}%); lowest {s['lowest_copy_pct'][1]:.0f}% "
              f"({s['lowest_copy_pct'][0]})")
    print(f"   cinnlite compile + first run: {s['cinnlite_compile_s']:.1f} s in all")


def main(argv=None) -> int:
    args = parse_args(argv)
    start = time.perf_counter()
    plat = make_platform(args)
    if plat is None:
        return 0
    return run(plat, args, start)


def run(plat: Platform, args, start: float) -> int:
    """Both parts on ``plat``; the JSON is written whatever happens, with what was measured."""
    deadline = start + args.budget_seconds
    warnings.filterwarnings("ignore", message="index_reduce", category=UserWarning)  # PyTorch's "beta" note
    print_header(plat, args)
    result = {"device": plat.device, "target": plat.target, "gpu": plat.gpu,
              "peers": {lib.name: lib.version for lib in plat.libs}, "missing_peers": plat.missing,
              "config": {"repeat": args.repeat, "inner": plat.inner, "quick": args.quick, "emulate": args.emulate,
                         "cache": args.cache, "budget_s": args.budget_seconds, "seed": SEED,
                         "fast_pct": FAST_PCT},
              "cinnlite_git": git_revision(), "skipped": []}
    try:
        for part, title, rows in (("w", "W1-W6", workload_rows), ("matrix", "matrix", matrix_rows)):
            if args.only not in (None, part):
                continue
            key = "workloads" if part == "w" else "matrix"
            table_header("workload" if part == "w" else "matrix cell", plat)
            result[key] = []
            rows(plat, args, deadline, result[key], result["skipped"])
            result[f"{key}_summary"] = summary(result[key])
            print_summary(title, result[f"{key}_summary"])
            print()
    finally:
        result["device"] = plat.device
        result["total_s"] = time.perf_counter() - start
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1, default=str)
    if plat.broken:
        print(f"stopped early: the CUDA context broke ({plat.broken[:200]})")
    if result["skipped"]:
        why = "after the CUDA error" if plat.broken else f"the budget of {args.budget_seconds:g} s was spent"
        print(f"{why}: skipped {len(result['skipped'])} ({', '.join(result['skipped'])})")
    print(f"total {result['total_s']:.0f} s")
    rows = result.get("workloads", []) + result.get("matrix", [])
    failed = any({"cinnlite", "setup"} & set(r["errors"]) for r in rows)
    return 1 if failed or plat.broken else 0


if __name__ == "__main__":
    sys.exit(main())
