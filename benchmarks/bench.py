#!/usr/bin/env python3
"""Benchmarks: cinnlite against numpy, PyTorch and Apache TVM on gather/scatter workloads.

Every workload is run by cinnlite and by every peer that is installed (numpy always; PyTorch and
Apache TVM when importable). All results are checked against an independent numpy reference
before any number is printed. For each workload and implementation the script reports the
median time, the effective bandwidth (the workload's minimal bytes moved divided by the time),
cinnlite's speed relative to the peers, and the percentage of a plain memory copy of the same
number of bytes (``np.copyto`` into a preallocated array), which serves as the bandwidth ceiling.

W6 additionally reports peak memory, measured in a fresh subprocess per implementation; W7
reports the per-call overhead in microseconds; W8 reports compile time (cold, and from the disk
cache in a new process). See benchmarks/README.md for the definitions.

    python benchmarks/bench.py                 # full sizes
    python benchmarks/bench.py --quick         # ~10x smaller, a smoke run
    python benchmarks/bench.py --only W1,W3 --repeat 20 --json out.json --markdown
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import inspect
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SEED = 20240607
WORKLOAD_IDS = ("W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8")

# ------------------------------------------------------------------------------------------------
# Optional peers. Imported lazily so that thread settings are applied first.
# ------------------------------------------------------------------------------------------------

torch = None
tvm = None
_TVM_ERROR = None
_TORCH_ERROR = None


def import_peers(threads: int, want_torch: bool = True, want_tvm: bool = True):
    """Import PyTorch and TVM if installed, with ``threads`` worker threads each."""
    global torch, tvm, _TVM_ERROR, _TORCH_ERROR
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))
    if want_torch:
        try:
            import torch as _torch
            _torch.set_num_threads(threads)
            torch = _torch
        except Exception as exc:  # ImportError, or a broken install
            _TORCH_ERROR = f"{type(exc).__name__}: {exc}"
    if want_tvm:
        try:
            import tvm as _tvm
            from tvm import te, topi  # noqa: F401  (the API the TVM peer needs)
            tvm = _tvm
        except Exception as exc:
            _TVM_ERROR = f"{type(exc).__name__}: {exc}"


# ------------------------------------------------------------------------------------------------
# Machine description
# ------------------------------------------------------------------------------------------------

def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def core_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def total_memory_gib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _version(modname: str):
    try:
        mod = __import__(modname)
        return getattr(mod, "__version__", "?")
    except Exception:
        return None


def git_revision():
    try:
        rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return (rev + ("+dirty" if dirty else "")) if rev else None
    except Exception:
        return None


def host_cpu_name() -> str:
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    return llvm.get_host_cpu_name()


def machine_info(threads: int) -> dict:
    import cinnlite
    return {
        "cpu": cpu_model(),
        "llvm_cpu": host_cpu_name(),
        "cores": core_count(),
        "threads": threads,
        "memory_gib": total_memory_gib(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "torch": torch.__version__ if torch is not None else None,
        "tvm": tvm.__version__ if tvm is not None else None,
        "llvmlite": _version("llvmlite"),
        "cinnlite": getattr(cinnlite, "__version__", "?"),
        "cinnlite_git": git_revision(),
        "loadavg_start": load_average(),
    }


def load_average():
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return None


def print_machine(info: dict):
    print(f"machine : {info['cpu']} (LLVM cpu {info['llvm_cpu']}), {info['cores']} cores, "
          f"{info['memory_gib']} GiB RAM; benchmarks use {info['threads']} threads")
    print(f"python {info['python']}  numpy {info['numpy']}  "
          f"torch {info['torch'] or 'not installed'}  tvm {info['tvm'] or 'not installed'}  "
          f"llvmlite {info['llvmlite']}  cinnlite {info['cinnlite']} ({info['cinnlite_git'] or 'no git'})")
    load = info.get("loadavg_start")
    if load:
        busy = load[0] > 0.5 * info["cores"]
        print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}"
              + ("  (other processes are using the cores: expect noisy timings)" if busy else ""))
    if torch is None:
        print(f"  PyTorch peer skipped: {_TORCH_ERROR}")
    if tvm is None:
        print(f"  TVM peer skipped: {_TVM_ERROR}")
    print()


# ------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------

def aligned_empty(shape, dtype, align: int = 64) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an ``align``-byte boundary
    (TVM's zero-copy DLPack import requires 64; it costs the others nothing)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    offset = (-raw.ctypes.data) % align
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)


def aligned(a: np.ndarray) -> np.ndarray:
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


def rand_f32(rng, shape) -> np.ndarray:
    out = aligned_empty(shape, np.float32)
    out[...] = rng.random(shape, dtype=np.float32)
    return out


def rand_idx(rng, high: int, shape) -> np.ndarray:
    out = aligned_empty(shape, np.int64)
    out[...] = rng.integers(0, high, size=shape, dtype=np.int64)
    return out


def fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return f"{n:.1f} GB"


@contextlib.contextmanager
def quiet_stderr():
    """Silence C-level stderr (TVM logs a warning for every take in its unchecked mode)."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, ValueError, OSError):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(fd)
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), fd)
    try:
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


def best_of(fn, calls: int = 3) -> float:
    """The fastest of a few calls, in seconds (for picking a schedule, not for reporting)."""
    best = float("inf")
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


# ------------------------------------------------------------------------------------------------
# cinnlite and TVM drivers
# ------------------------------------------------------------------------------------------------

def cinnlite_compile(program, threads: int):
    """``cl.compile(program, target="cpu", threads=threads)`` (threads only if accepted)."""
    import cinnlite as cl
    kwargs = {"target": "cpu"}
    if "threads" in inspect.signature(cl.compile).parameters:
        kwargs["threads"] = threads
    return cl.compile(program, **kwargs)


def tvm_target(threads: int):
    return tvm.target.Target({"kind": "llvm", "mcpu": host_cpu_name(), "num-cores": threads})


VECTOR_LANES = 16


def tvm_schedule_variants():
    """Names of the loop schedules tried for a TVM injective operator (the fastest is kept)."""
    return ("parallel+vectorize", "parallel")


def tvm_build(inputs, output, threads: int, variant: str = "parallel+vectorize"):
    """Build a TE operator with a hand schedule: the outer loops fused and parallel, the innermost
    loop vectorised (``parallel+vectorize``) or left to LLVM (``parallel``)."""
    from tvm import te, s_tir

    func = te.create_prim_func(list(inputs) + [output])
    sch = s_tir.Schedule(func)
    block = sch.get_sblock(output.op.name)
    loops = sch.get_loops(block)
    if len(loops) == 1:
        outer, inner = sch.split(loops[0], factors=[None, VECTOR_LANES])
    else:
        outer = sch.fuse(*loops[:-1]) if len(loops) > 2 else loops[0]
        inner = loops[-1]
    sch.parallel(outer)
    if variant == "parallel+vectorize":
        # Vectorise a short inner piece: a whole 1024-wide row as one vector makes LLVM crawl.
        if len(loops) > 1:
            _, inner = sch.split(inner, factors=[None, VECTOR_LANES])
        sch.vectorize(inner)
    return tvm.build(sch.mod, target=tvm_target(threads))["main"]


def tvm_tensor(a: np.ndarray):
    """A TVM tensor sharing memory with ``a`` (DLPack), or a copy where that is refused."""
    try:
        return tvm.runtime.from_dlpack(a)
    except Exception:
        return tvm.runtime.tensor(np.ascontiguousarray(a))


def tvm_peer(make_op, arrays: list, out_shape, out_dtype, threads: int):
    """Build ``make_op`` (placeholders -> output tensor) for every schedule variant, keep the
    fastest, and return ``(run, result)`` closures over preallocated TVM tensors."""
    from tvm import te

    args = [tvm_tensor(a) for a in arrays]
    out = tvm.runtime.empty(tuple(out_shape), str(np.dtype(out_dtype)), tvm.cpu())
    best = None
    for variant in tvm_schedule_variants():
        try:
            with quiet_stderr():
                placeholders = [te.placeholder(a.shape, str(a.dtype), name=f"in{k}") for k, a in enumerate(arrays)]
                fn = tvm_build(placeholders, make_op(*placeholders), threads, variant)
        except Exception:
            continue
        fn(*args, out)
        t = best_of(lambda: fn(*args, out))
        if best is None or t < best[0]:
            best = (t, fn, variant)
    if best is None:
        raise RuntimeError("no TVM schedule variant could be built")
    _, fn, variant = best

    def run():
        fn(*args, out)
        return out

    return run, (lambda: out.numpy()), f"schedule {variant}"


# ------------------------------------------------------------------------------------------------
# Workloads
# ------------------------------------------------------------------------------------------------

@dataclass
class Impl:
    """One implementation of a workload: ``run()`` does the work once, ``result()`` returns the
    last result as a numpy array (for the correctness check, outside the timed loop)."""
    name: str
    run: object
    result: object
    note: str = ""


@dataclass
class Case:
    arrays: dict                      # name -> numpy array (the cinnlite input names)
    bytes_moved: int                  # minimal bytes read + written (see bytes_formula)
    bytes_formula: str
    shapes: str
    exact: bool                       # gathers are exact; reductions get a tolerance
    reference: object = None          # () -> the expected result (numpy, float64 where it sums)
    extra: dict = field(default_factory=dict)


class Workload:
    id = "W?"
    title = ""
    peers_text = ""

    def __init__(self, quick: bool):
        self.quick = quick

    def case(self, rng) -> Case:
        raise NotImplementedError

    def cinnlite_program(self, case: Case):
        raise NotImplementedError

    def peers(self, case: Case, threads: int) -> list:
        """(name, factory) pairs; a factory returns an Impl (or raises when unavailable)."""
        return []


def _cinnlite_impl(workload: Workload, case: Case, threads: int) -> Impl:
    program = workload.cinnlite_program(case)
    exe = cinnlite_compile(program, threads)
    arrays = case.arrays
    last = {}

    def run():
        last["out"] = exe(**arrays)
        return last["out"]

    return Impl("cinnlite", run, lambda: last["out"], "output allocated by every call")


class TakeRows(Workload):
    id, title = "W1", "take rows, axis 0"
    peers_text = "torch.index_select, np.take, TVM topi.take"

    def dims(self):
        return (5_000, 128, 10_000) if self.quick else (50_000, 128, 100_000)

    def case(self, rng):
        rows, cols, n = self.dims()
        x, idx = rand_f32(rng, (rows, cols)), rand_idx(rng, rows, (n,))
        moved = n * 8 + 2 * n * cols * 4
        return Case({"x": x, "idx": idx}, moved, "idx (n*8) + gathered rows read (n*d*4) + out written (n*d*4)",
                    f"x {x.shape}, idx {idx.shape}", True, lambda: x[idx])

    def cinnlite_program(self, case):
        from cinnlite import NetBuilder
        x, idx = case.arrays["x"], case.arrays["idx"]
        b = NetBuilder("w1_take")
        xt = b.create_input("float32", x.shape, "x")
        it = b.create_input("int64", idx.shape, "idx")
        return b.build([b.take(xt, it, axis=0)])

    def peers(self, case, threads):
        x, idx = case.arrays["x"], case.arrays["idx"]
        out_shape = (idx.shape[0], x.shape[1])

        def numpy_impl():
            out = aligned_empty(out_shape, np.float32)
            return Impl("numpy", lambda: np.take(x, idx, axis=0, out=out, mode="clip"), lambda: out,
                        "np.take(out=, mode='clip')")

        def torch_impl():
            xt, it = torch.from_numpy(x), torch.from_numpy(idx)
            out = torch.empty(out_shape, dtype=torch.float32)
            return Impl("torch", lambda: torch.index_select(xt, 0, it, out=out), lambda: out.numpy(),
                        "index_select(out=)")

        def tvm_impl():
            from tvm import topi
            run, result, note = tvm_peer(lambda a, i: topi.take(a, i, axis=0), [x, idx], out_shape,
                                         np.float32, threads)
            return Impl("tvm", run, result, "topi.take mode=fast, " + note)

        return [("numpy", numpy_impl), ("torch", torch_impl), ("tvm", tvm_impl)]


class GatherElements(Workload):
    id, title = "W2", "gather elements, axis 1"
    peers_text = "torch.gather, np.take_along_axis, TVM topi.gather"

    def dims(self):
        return (256, 4096, 1024) if self.quick else (2048, 4096, 1024)

    def case(self, rng):
        rows, cols, k = self.dims()
        x, idx = rand_f32(rng, (rows, cols)), rand_idx(rng, cols, (rows, k))
        moved = idx.size * (8 + 4 + 4)
        return Case({"x": x, "index": idx}, moved, "index (m*8) + gathered elements read (m*4) + out written (m*4)",
                    f"x {x.shape}, index {idx.shape}", True, lambda: np.take_along_axis(x, idx, axis=1))

    def cinnlite_program(self, case):
        from cinnlite import NetBuilder
        x, idx = case.arrays["x"], case.arrays["index"]
        b = NetBuilder("w2_gather")
        xt = b.create_input("float32", x.shape, "x")
        it = b.create_input("int64", idx.shape, "index")
        return b.build([b.gather(xt, it, axis=1)])

    def peers(self, case, threads):
        x, idx = case.arrays["x"], case.arrays["index"]

        def numpy_impl():
            last = {}

            def run():
                last["out"] = np.take_along_axis(x, idx, axis=1)
            return Impl("numpy", run, lambda: last["out"], "take_along_axis (no out=)")

        def torch_impl():
            xt, it = torch.from_numpy(x), torch.from_numpy(idx)
            out = torch.empty(idx.shape, dtype=torch.float32)
            return Impl("torch", lambda: torch.gather(xt, 1, it, out=out), lambda: out.numpy(), "gather(out=)")

        def tvm_impl():
            from tvm import topi
            run, result, note = tvm_peer(lambda a, i: topi.gather(a, 1, i), [x, idx], idx.shape, np.float32, threads)
            return Impl("tvm", run, result, "topi.gather, " + note)

        return [("numpy", numpy_impl), ("torch", torch_impl), ("tvm", tvm_impl)]


class GatherND(Workload):
    id, title = "W3", "gather_nd, index tuples of 2"
    peers_text = "numpy / torch advanced indexing, TVM topi.gather_nd"

    def dims(self):
        return (1024, 1024, 100_000) if self.quick else (1024, 1024, 1_000_000)

    def case(self, rng):
        rows, cols, n = self.dims()
        x = rand_f32(rng, (rows, cols))
        idx = aligned_empty((n, 2), np.int64)
        idx[:, 0] = rng.integers(0, rows, n)
        idx[:, 1] = rng.integers(0, cols, n)
        moved = n * (2 * 8 + 4 + 4)
        return Case({"x": x, "index": idx}, moved, "index (n*2*8) + elements read (n*4) + out written (n*4)",
                    f"x {x.shape}, index {idx.shape}", True, lambda: x[idx[:, 0], idx[:, 1]])

    def cinnlite_program(self, case):
        from cinnlite import NetBuilder
        x, idx = case.arrays["x"], case.arrays["index"]
        b = NetBuilder("w3_gather_nd")
        xt = b.create_input("float32", x.shape, "x")
        it = b.create_input("int64", idx.shape, "index")
        return b.build([b.gather_nd(xt, it)])

    def peers(self, case, threads):
        x, idx = case.arrays["x"], case.arrays["index"]

        def numpy_impl():
            last = {}

            def run():
                last["out"] = x[idx[:, 0], idx[:, 1]]
            return Impl("numpy", run, lambda: last["out"], "x[idx[:, 0], idx[:, 1]]")

        def torch_impl():
            xt, it = torch.from_numpy(x), torch.from_numpy(idx)
            last = {}

            def run():
                last["out"] = xt[it[:, 0], it[:, 1]]
            return Impl("torch", run, lambda: last["out"].numpy(), "x[idx[:, 0], idx[:, 1]]")

        def tvm_impl():
            from tvm import topi
            # TVM takes the tuple along the first axis of the index; transposed once, untimed.
            idx_t = aligned(idx.T)
            run, result, note = tvm_peer(lambda a, i: topi.gather_nd(a, i), [x, idx_t], (idx.shape[0],),
                                         np.float32, threads)
            return Impl("tvm", run, result, "topi.gather_nd, index (2, n), " + note)

        return [("numpy", numpy_impl), ("torch", torch_impl), ("tvm", tvm_impl)]


class ScatterNDAddRows(Workload):
    id, title = "W4", "scatter_nd add rows (duplicates)"
    peers_text = "torch.index_add_, np.add.at"

    def dims(self):
        return (1_000, 128, 20_000) if self.quick else (10_000, 128, 200_000)

    def case(self, rng):
        rows, cols, n = self.dims()
        idx, src = rand_idx(rng, rows, (n, 1)), rand_f32(rng, (n, cols))

        def reference():
            out = np.zeros((rows, cols), np.float64)
            np.add.at(out, idx[:, 0], src)
            return out

        moved = n * 8 + n * cols * 4 + rows * cols * 4
        return Case({"index": idx, "src": src}, moved, "index (n*8) + src read (n*d*4) + out written once (r*d*4)",
                    f"zeros ({rows}, {cols}), index {idx.shape}, src {src.shape}", False, reference,
                    {"shape": (rows, cols)})

    def cinnlite_program(self, case):
        from cinnlite import NetBuilder
        idx, src = case.arrays["index"], case.arrays["src"]
        b = NetBuilder("w4_scatter_nd_add")
        zeros = b.fill_constant(case.extra["shape"], 0.0, "float32")
        it = b.create_input("int64", idx.shape, "index")
        st = b.create_input("float32", src.shape, "src")
        return b.build([b.scatter_nd(zeros, it, st, reduce="add")])

    def peers(self, case, threads):
        idx, src = case.arrays["index"], case.arrays["src"]
        shape = case.extra["shape"]
        flat = idx[:, 0]  # a contiguous view: (n, 1) and (n,) share the same memory

        def numpy_impl():
            out = aligned_empty(shape, np.float32)

            def run():
                out.fill(0)
                np.add.at(out, flat, src)
            return Impl("numpy", run, lambda: out, "out.fill(0); np.add.at")

        def torch_impl():
            it, st = torch.from_numpy(flat), torch.from_numpy(src)
            out = torch.empty(shape, dtype=torch.float32)

            def run():
                out.zero_()
                out.index_add_(0, it, st)
            return Impl("torch", run, lambda: out.numpy(), "out.zero_(); index_add_")

        return [("numpy", numpy_impl), ("torch", torch_impl)]


class ScatterAddAxis1(Workload):
    id, title = "W5", "scatter add, axis 1"
    peers_text = "torch.scatter_add_"

    def dims(self):
        return (256, 4096, 1024) if self.quick else (2048, 4096, 1024)

    def case(self, rng):
        rows, cols, k = self.dims()
        idx, src = rand_idx(rng, cols, (rows, k)), rand_f32(rng, (rows, k))

        def reference():
            out = np.zeros((rows, cols), np.float64)
            np.add.at(out, (np.arange(rows)[:, None], idx), src)
            return out

        moved = idx.size * (8 + 4) + rows * cols * 4
        return Case({"index": idx, "src": src}, moved, "index (m*8) + src read (m*4) + out written once (r*c*4)",
                    f"zeros ({rows}, {cols}), index {idx.shape}, src {src.shape}", False, reference,
                    {"shape": (rows, cols)})

    def cinnlite_program(self, case):
        from cinnlite import NetBuilder
        idx, src = case.arrays["index"], case.arrays["src"]
        b = NetBuilder("w5_scatter_add")
        zeros = b.fill_constant(case.extra["shape"], 0.0, "float32")
        it = b.create_input("int64", idx.shape, "index")
        st = b.create_input("float32", src.shape, "src")
        return b.build([b.scatter(zeros, it, st, axis=1, reduce="add")])

    def peers(self, case, threads):
        idx, src = case.arrays["index"], case.arrays["src"]
        shape = case.extra["shape"]

        def numpy_impl():
            out = aligned_empty(shape, np.float32)
            rows = np.arange(shape[0])[:, None]

            def run():
                out.fill(0)
                np.add.at(out, (rows, idx), src)
            return Impl("numpy", run, lambda: out, "out.fill(0); np.add.at(out, (rows, index), src)")

        def torch_impl():
            it, st = torch.from_numpy(idx), torch.from_numpy(src)
            out = torch.empty(shape, dtype=torch.float32)

            def run():
                out.zero_()
                out.scatter_add_(1, it, st)
            return Impl("torch", run, lambda: out.numpy(), "out.zero_(); scatter_add_")

        return [("numpy", numpy_impl), ("torch", torch_impl)]


class MessagePassing(Workload):
    id, title = "W6", "message passing: scatter_nd(take)"
    peers_text = "torch index_select + index_add_; np.take + np.add.at"

    def dims(self):
        return (10_000, 64, 100_000) if self.quick else (100_000, 64, 1_000_000)

    def case(self, rng):
        nodes, feat, edges = self.dims()
        x = rand_f32(rng, (nodes, feat))
        src, dst = rand_idx(rng, nodes, (edges,)), rand_idx(rng, nodes, (edges,))

        def reference():
            out = np.zeros((nodes, feat), np.float64)
            np.add.at(out, dst, x[src])
            return out

        moved = 2 * edges * 8 + edges * feat * 4 + nodes * feat * 4
        # dst is given to cinnlite as dst[:, None] (a view): the index tuples of scatter_nd.
        return Case({"x": x, "src": src, "dst": dst[:, None]}, moved,
                    "src + dst (2*e*8) + gathered rows read (e*d*4) + out written once (n*d*4); "
                    "the e*d intermediate of the unfused form is not counted",
                    f"x {x.shape}, src/dst ({edges},), out ({nodes}, {feat})", False, reference,
                    {"shape": (nodes, feat), "intermediate_bytes": edges * feat * 4,
                     "output_bytes": nodes * feat * 4})

    def cinnlite_program(self, case):
        from cinnlite import NetBuilder
        x, src, dst = case.arrays["x"], case.arrays["src"], case.arrays["dst"]
        b = NetBuilder("w6_message_passing")
        xt = b.create_input("float32", x.shape, "x")
        st = b.create_input("int64", src.shape, "src")
        dt = b.create_input("int64", dst.shape, "dst")
        messages = b.take(xt, st, axis=0)
        zeros = b.fill_constant(case.extra["shape"], 0.0, "float32")
        return b.build([b.scatter_nd(zeros, dt, messages, reduce="add")])

    def peers(self, case, threads):
        x, src, dst = case.arrays["x"], case.arrays["src"], case.arrays["dst"][:, 0]
        shape = case.extra["shape"]

        def numpy_impl():
            out = aligned_empty(shape, np.float32)
            msg = aligned_empty((src.shape[0], shape[1]), np.float32)

            def run():
                np.take(x, src, axis=0, out=msg, mode="clip")
                out.fill(0)
                np.add.at(out, dst, msg)
            return Impl("numpy", run, lambda: out, "np.take(out=) + out.fill(0) + np.add.at")

        def torch_impl():
            xt, st, dt = (torch.from_numpy(a) for a in (x, src, dst))
            out = torch.empty(shape, dtype=torch.float32)
            msg = torch.empty((src.shape[0], shape[1]), dtype=torch.float32)

            def run():
                torch.index_select(xt, 0, st, out=msg)
                out.zero_()
                out.index_add_(0, dt, msg)
            return Impl("torch", run, lambda: out.numpy(), "index_select(out=) + zero_() + index_add_")

        return [("numpy", numpy_impl), ("torch", torch_impl)]


class CallOverhead(Workload):
    id, title = "W7", "per-call overhead: take of 8 elements"
    peers_text = "np.take, torch.index_select"

    def case(self, rng):
        x, idx = rand_f32(rng, (8,)), rand_idx(rng, 8, (8,))
        return Case({"x": x, "idx": idx}, 8 * 8 + 2 * 8 * 4, "idx + read + write (not meaningful at this size)",
                    "x (8,), idx (8,)", True, lambda: x[idx])

    cinnlite_program = TakeRows.cinnlite_program

    def peers(self, case, threads):
        x, idx = case.arrays["x"], case.arrays["idx"]

        def numpy_impl():
            out = np.empty(8, np.float32)
            return Impl("numpy", lambda: np.take(x, idx, out=out, mode="clip"), lambda: out, "np.take(out=)")

        def torch_impl():
            xt, it = torch.from_numpy(x), torch.from_numpy(idx)
            out = torch.empty(8, dtype=torch.float32)
            return Impl("torch", lambda: torch.index_select(xt, 0, it, out=out), lambda: out.numpy(),
                        "index_select(out=)")

        return [("numpy", numpy_impl), ("torch", torch_impl)]


WORKLOADS = {cls.id: cls for cls in (TakeRows, GatherElements, GatherND, ScatterNDAddRows, ScatterAddAxis1,
                                     MessagePassing, CallOverhead)}

# ------------------------------------------------------------------------------------------------
# Running and checking
# ------------------------------------------------------------------------------------------------

PEER_AVAILABLE = {"numpy": lambda: True, "torch": lambda: torch is not None, "tvm": lambda: tvm is not None}


def check(case: Case, expected, got, name: str):
    got = np.asarray(got)
    if got.shape != np.shape(expected):
        raise AssertionError(f"{name}: shape {got.shape}, expected {np.shape(expected)}")
    if case.exact:
        np.testing.assert_array_equal(got, expected, err_msg=f"{name} disagrees with the numpy reference")
    else:
        # float32 sums of a few dozen values in different orders: a few ulp of the magnitude.
        np.testing.assert_allclose(got.astype(np.float64), expected, rtol=2e-5, atol=1e-5,
                                   err_msg=f"{name} disagrees with the float64 numpy reference")


def copy_ceiling_impl(bytes_moved: int) -> Impl:
    """np.copyto of bytes_moved / 2 bytes into a preallocated array (a copy reads and writes
    each byte once, so it moves bytes_moved bytes): the bandwidth ceiling."""
    n = max(1, bytes_moved // 2 // 4)
    src = aligned_empty((n,), np.float32)
    src.fill(1.0)
    dst = aligned_empty((n,), np.float32)
    dst.fill(0.0)
    return Impl("copy", lambda: np.copyto(dst, src), lambda: dst, "np.copyto")


def make_impls(workload, case, threads):
    yield "cinnlite", lambda: _cinnlite_impl(workload, case, threads)
    for name, factory in workload.peers(case, threads):
        if PEER_AVAILABLE[name]():
            yield name, factory


def prepare_impls(workload: Workload, case: Case, expected, threads: int, record: dict) -> list:
    """Set every implementation up and check its first result; returns [(entry, Impl)] for the
    ones that ran and agreed. Failures are recorded in ``record`` and never stop the run."""
    ready = []
    for name, factory in make_impls(workload, case, threads):
        entry = {"impl": name}
        record["impls"].append(entry)
        try:
            t0 = time.perf_counter()
            impl = factory()
            entry["setup_s"] = time.perf_counter() - t0
            entry["note"] = impl.note
            impl.run()
            check(case, expected, impl.result(), f"{workload.id} {name}")
            entry["ok"] = True
            ready.append((entry, impl))
        except Exception as exc:
            fail(record, entry, exc)
    return ready


def fail(record: dict, entry: dict, exc: Exception):
    entry["ok"] = False
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    if isinstance(exc, AssertionError):
        entry["error"] = "WRONG RESULT"
        record["errors"].append(f"{entry['impl']}: {text}")
    else:
        entry["error"] = f"{type(exc).__name__}: {first}"[:80]
        record["errors"].append(f"{entry['impl']}: {traceback.format_exc()}")


def run_throughput(workload: Workload, args, threads: int) -> dict:
    """Time every implementation of one workload in interleaved rounds (one call of each per
    round, the copy ceiling included), so that a change in machine load hits all of them alike."""
    rng = np.random.default_rng(SEED)
    case = workload.case(rng)
    expected = case.reference()
    record = {"id": workload.id, "title": workload.title, "shapes": case.shapes,
              "bytes_moved": case.bytes_moved, "bytes_formula": case.bytes_formula, "impls": [], "errors": []}
    ready = prepare_impls(workload, case, expected, threads, record)
    copy_entry = {"impl": "copy"}
    ready.append((copy_entry, copy_ceiling_impl(case.bytes_moved)))
    for _, impl in ready:
        t0 = time.perf_counter()
        for _ in range(args.warmup):
            impl.run()
            if time.perf_counter() - t0 > args.budget / 2:
                break
    samples = {id(entry): [] for entry, _ in ready}
    gc.collect()
    start = time.perf_counter()
    for done in range(1, args.repeat + 1):
        for entry, impl in ready:
            t0 = time.perf_counter()
            impl.run()
            samples[id(entry)].append(time.perf_counter() - t0)
        if done >= min(3, args.repeat) and time.perf_counter() - start > args.budget * len(ready):
            break
    for entry, impl in ready:
        times = samples[id(entry)]
        entry.update(times_s=times, median_s=statistics.median(times),
                     gbps=case.bytes_moved / statistics.median(times) / 1e9)
    record["copy"] = {"median_s": copy_entry["median_s"], "gbps": copy_entry["gbps"], "times_s": copy_entry["times_s"]}
    for entry, impl in ready[:-1]:
        entry["pct_of_copy"] = 100.0 * entry["gbps"] / record["copy"]["gbps"]
        try:  # the result of the last timed call must still be right
            check(case, expected, impl.result(), f"{workload.id} {entry['impl']} (after timing)")
        except Exception as exc:
            fail(record, entry, exc)
    ready = None
    gc.collect()
    add_speedups(record)
    return record


def run_overhead(workload: Workload, args, threads: int) -> dict:
    """Per-call time for a tiny input: batches of back-to-back calls, implementations taking
    turns batch by batch; the median over batches of (batch time / calls in the batch)."""
    rng = np.random.default_rng(SEED)
    case = workload.case(rng)
    expected = case.reference()
    calls, batches = (2_000 if args.quick else 10_000), 20
    per = calls // batches
    record = {"id": workload.id, "title": workload.title, "shapes": case.shapes, "calls": calls,
              "batches": batches, "unit": "us/call", "impls": [], "errors": []}
    ready = prepare_impls(workload, case, expected, threads, record)
    for _, impl in ready:
        for _ in range(per):
            impl.run()
    samples = {id(entry): [] for entry, _ in ready}
    for _ in range(batches):
        for entry, impl in ready:
            run = impl.run
            t0 = time.perf_counter()
            for _ in range(per):
                run()
            samples[id(entry)].append((time.perf_counter() - t0) / per)
    for entry, impl in ready:
        entry.update(times_s=samples[id(entry)], median_s=statistics.median(samples[id(entry)]))
    add_speedups(record)
    return record


def add_speedups(record: dict):
    """``speedup`` on every row: (that peer's time) / (cinnlite's time); on cinnlite's row the
    best peer's time / cinnlite's time. > 1 means cinnlite is faster."""
    timed = {e["impl"]: e["median_s"] for e in record["impls"] if "median_s" in e}
    cl_t = timed.get("cinnlite")
    peers = {k: v for k, v in timed.items() if k != "cinnlite"}
    if peers:
        best = min(peers, key=peers.get)
        record["best_peer"] = best
    for e in record["impls"]:
        if cl_t is None or "median_s" not in e:
            continue
        if e["impl"] == "cinnlite":
            if peers:
                e["speedup"] = peers[record["best_peer"]] / cl_t
        else:
            e["speedup"] = e["median_s"] / cl_t


# ------------------------------------------------------------------------------------------------
# W6 peak memory: one fresh subprocess per implementation
# ------------------------------------------------------------------------------------------------

def _read_status_kb(key: str):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    """Reset the kernel's resident-set high-water mark (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def memory_child(impl_name: str, quick: bool, threads: int):
    """Run one W6 implementation once, its output allocated inside the measured call, and print
    the peak memory above the state after inputs were made and the program compiled."""
    import resource
    import tracemalloc

    import_peers(threads, want_torch=impl_name == "torch", want_tvm=False)
    workload = MessagePassing(quick)
    case = workload.case(np.random.default_rng(SEED))
    x, src, dst = case.arrays["x"], case.arrays["src"], case.arrays["dst"][:, 0]
    shape = case.extra["shape"]
    if impl_name == "cinnlite":
        exe = cinnlite_compile(workload.cinnlite_program(case), threads)
        run = lambda: exe(**case.arrays)  # noqa: E731
    elif impl_name == "numpy":
        def run():
            out = np.zeros(shape, np.float32)
            np.add.at(out, dst, np.take(x, src, axis=0))
            return out
    elif impl_name == "torch":
        xt, st, dt = (torch.from_numpy(a) for a in (x, src, dst))

        def run():
            return torch.zeros(shape, dtype=torch.float32).index_add_(0, dt, torch.index_select(xt, 0, st))
    else:
        raise SystemExit(f"unknown implementation {impl_name}")
    gc.collect()
    rss_before = _read_status_kb("VmRSS")
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    method = "VmHWM after clear_refs" if _reset_peak() else "ru_maxrss delta"
    tracemalloc.start()
    out = run()
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    if method.startswith("VmHWM"):
        peak_kb = _read_status_kb("VmHWM") - rss_before
    else:
        peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - maxrss_before
    print(json.dumps({"impl": impl_name, "peak_rss_delta_bytes": max(0, peak_kb) * 1024,
                      "tracemalloc_peak_bytes": traced_peak if impl_name != "torch" else None,
                      "method": method, "output_bytes": int(np.asarray(out).nbytes)}))


def run_memory(args, threads: int) -> dict:
    workload = MessagePassing(args.quick)
    nodes, feat, edges = workload.dims()
    impls = ["cinnlite", "numpy"] + (["torch"] if torch is not None else [])
    result = {"output_bytes": nodes * feat * 4, "intermediate_bytes": edges * feat * 4, "impls": []}
    for name in impls:
        cmd = [sys.executable, os.path.abspath(__file__), "--memory-child", name, "--threads", str(threads)]
        if args.quick:
            cmd.append("--quick")
        # A fixed mmap threshold: every large array is a fresh mapping, so freed memory that
        # stays resident after setup (compilation, data generation) cannot hide a new allocation.
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO, env=env)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            result["impls"].append({"impl": name, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]})
        else:
            result["impls"].append(json.loads(lines[-1]))
    return result


# ------------------------------------------------------------------------------------------------
# W8 compile time: fresh processes
# ------------------------------------------------------------------------------------------------

COMPILE_PROGRAMS = ("W1", "W2", "W3", "W4", "W5", "W6")


def compile_child(quick: bool, threads: int):
    """In a fresh process: time cl.compile of the W1 program first (its time includes one-time
    LLVM initialisation), then of the other programs; print the times as JSON."""
    times = {}
    rng = np.random.default_rng(SEED)
    import cinnlite  # noqa: F401  (import time is not compile time)
    for wid in COMPILE_PROGRAMS:
        workload = WORKLOADS[wid](quick)
        program = workload.cinnlite_program(workload.case(rng))
        t0 = time.perf_counter()
        cinnlite_compile(program, threads)
        times[wid] = time.perf_counter() - t0
    print(json.dumps(times))


def tvm_compile_child(quick: bool, threads: int):
    """In a fresh process: time building topi.take for the W1 shapes (definition, schedule and
    tvm.build), then the same again in the same process."""
    import_peers(threads, want_torch=False)
    from tvm import te, topi
    rows, cols, n = TakeRows(quick).dims()
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        with quiet_stderr():
            x = te.placeholder((rows, cols), "float32", name="x")
            i = te.placeholder((n,), "int64", name="i")
            tvm_build([x, i], topi.take(x, i, axis=0), threads)
        times.append(time.perf_counter() - t0)
    print(json.dumps({"first": times[0], "second": times[1]}))


def run_compile(args, threads: int) -> dict:
    cache_dir = tempfile.mkdtemp(prefix="cinnlite-bench-cache-")
    env = dict(os.environ, CINNLITE_CACHE_DIR=cache_dir)
    base = [sys.executable, os.path.abspath(__file__), "--threads", str(threads)] + (["--quick"] if args.quick else [])
    result = {"cache_dir": cache_dir, "programs": list(COMPILE_PROGRAMS)}

    def child(flag, env):
        proc = subprocess.run(base + [flag], capture_output=True, text=True, timeout=900, cwd=REPO, env=env)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
        return json.loads(lines[-1])

    result["cinnlite_cold"] = child("--compile-child", env)
    result["cinnlite_cached"] = child("--compile-child", env)
    try:
        files = sum(len(f) for _, _, f in os.walk(cache_dir))
    except OSError:
        files = 0
    result["cache_files"] = files
    if tvm is not None:
        result["tvm"] = child("--tvm-compile-child", dict(os.environ))
    return result


# ------------------------------------------------------------------------------------------------
# Reporting
# ------------------------------------------------------------------------------------------------

def _fmt_time(s):
    if s is None:
        return "-"
    if s >= 1:
        return f"{s:.2f} s"
    return f"{s * 1e3:.2f} ms" if s >= 1e-3 else f"{s * 1e6:.1f} us"


def throughput_rows(records: list) -> list:
    rows = []
    for r in records:
        if r.get("unit") == "us/call":
            continue
        for e in r["impls"]:
            rows.append([r["id"], e["impl"],
                         _fmt_time(e.get("median_s")) if e.get("ok") else e.get("error", "failed"),
                         f"{e['gbps']:.2f}" if "gbps" in e else "-",
                         _speedup_text(r, e),
                         f"{e['pct_of_copy']:.0f}%" if "pct_of_copy" in e else "-",
                         e.get("note", "")])
        rows.append([r["id"], "copy (ceiling)", _fmt_time(r["copy"]["median_s"]), f"{r['copy']['gbps']:.2f}",
                     "", "100%", f"np.copyto of {fmt_bytes(r['bytes_moved'] / 2)}"])
    return rows


def _speedup_text(record, e):
    if "speedup" not in e:
        return "-"
    if e["impl"] == "cinnlite":
        return f"{e['speedup']:.2f}x vs {record['best_peer']}"
    return f"{e['speedup']:.2f}x"


def overhead_rows(records: list) -> list:
    rows = []
    for r in records:
        if r.get("unit") != "us/call":
            continue
        for e in r["impls"]:
            rows.append([r["id"], e["impl"], f"{e['median_s'] * 1e6:.2f}" if "median_s" in e else e.get("error", "failed"),
                         _speedup_text(r, e), e.get("note", "")])
    return rows


def render_table(headers, rows, markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max(len(str(h)), *(len(str(row[i])) for row in rows)) if rows else len(h) for i, h in enumerate(headers)]
    fmt = lambda row: "  ".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731
    return "\n".join([fmt(headers), fmt(["-" * w for w in widths])] + [fmt(row) for row in rows])


def print_report(results: dict, markdown: bool):
    records = results["workloads"]
    tput = throughput_rows(records)
    if tput:
        print("Throughput (median of timed calls; GB/s = minimal bytes moved / median time;")
        print("speedup > 1 means cinnlite is faster; % copy = share of np.copyto bandwidth on the same bytes)")
        print()
        print(render_table(["id", "impl", "median", "GB/s", "cinnlite speedup", "% copy", "notes"], tput, markdown))
        print()
        print("Bytes moved per workload:")
        for r in records:
            if r.get("unit") != "us/call":
                print(f"  {r['id']} {r['title']}: {r['shapes']}; {fmt_bytes(r['bytes_moved'])} = {r['bytes_formula']}")
        print()
    over = overhead_rows(records)
    if over:
        r = next(r for r in records if r.get("unit") == "us/call")
        print(f"Per-call overhead (W7: {r['shapes']}; median over 20 batches of {r['calls'] // 20} calls)")
        print()
        print(render_table(["id", "impl", "us/call", "cinnlite speedup", "notes"], over, markdown))
        print()
    mem = results.get("memory")
    if mem:
        print(f"W6 peak memory (fresh process per implementation; output allocated inside the measured call; "
              f"output {fmt_bytes(mem['output_bytes'])}, unfused intermediate {fmt_bytes(mem['intermediate_bytes'])})")
        print()
        rows = []
        for e in mem["impls"]:
            if "error" in e:
                rows.append([e["impl"], e["error"], "-", "-"])
                continue
            traced = e.get("tracemalloc_peak_bytes")
            rows.append([e["impl"], f"{e['peak_rss_delta_bytes'] / 1e6:.1f} MB",
                         f"{traced / 1e6:.1f} MB" if traced is not None else "- (not visible)", e["method"]])
        print(render_table(["impl", "peak RSS above inputs", "tracemalloc peak", "method"], rows, markdown))
        print()
    comp = results.get("compile")
    if comp:
        print("W8 compile time (fresh process each; CINNLITE_CACHE_DIR = a new empty directory for cold, "
              "the same directory again for cached)")
        print()
        rows = []
        cold, cached = comp["cinnlite_cold"], comp["cinnlite_cached"]
        for wid in comp["programs"]:
            rows.append([f"cinnlite {wid} program", _fmt_time(cold.get(wid)), _fmt_time(cached.get(wid))])
        if "error" not in cold and "error" not in cached:
            rows.append(["cinnlite all six programs", _fmt_time(sum(cold.values())), _fmt_time(sum(cached.values()))])
        else:
            rows.append(["cinnlite", cold.get("error", ""), cached.get("error", "")])
        if "tvm" in comp:
            t = comp["tvm"]
            if "error" in t:
                rows.append(["tvm W1 take", t["error"], ""])
            else:
                rows.append(["tvm W1 take (topi.take + schedule + tvm.build)", _fmt_time(t["first"]),
                             _fmt_time(t["second"]) + " (2nd build, same process)"])
        print(render_table(["what", "cold", "cached / again"], rows, markdown))
        print(f"  (cache directory held {comp['cache_files']} file(s) after the runs; "
              "the W1 cold time includes one-time LLVM initialisation)")
        print()
    errors = [(r["id"], err) for r in records for err in r["errors"]]
    if errors:
        print("FAILURES:")
        for wid, err in errors:
            print(f"--- {wid} {err}")
        again = ",".join(sorted({wid for wid, _ in errors}))
        print(f"reproduce with: python benchmarks/bench.py --only {again}{' --quick' if results['config']['quick'] else ''}")
        print()


def save_png(results: dict, path: str):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception:
        print(f"(--png {path}: matplotlib is not installed; no chart written)")
        return
    records = [r for r in results["workloads"] if r.get("unit") != "us/call"]
    impls = ["cinnlite", "numpy", "torch", "tvm"]
    fig, ax = plt.subplots(figsize=(10, 4.5))
    width = 0.8 / (len(impls) + 1)
    for k, name in enumerate(impls + ["copy"]):
        vals = []
        for r in records:
            if name == "copy":
                vals.append(r["copy"]["gbps"])
            else:
                e = next((e for e in r["impls"] if e["impl"] == name and "gbps" in e), None)
                vals.append(e["gbps"] if e else 0.0)
        ax.bar([i + k * width for i in range(len(records))], vals, width, label=name)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(records))])
    ax.set_xticklabels([f"{r['id']}\n{r['title']}" for r in records], fontsize=7)
    ax.set_ylabel("GB/s (minimal bytes moved / median time)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"chart written to {path}")


# ------------------------------------------------------------------------------------------------
# Entry point
# ------------------------------------------------------------------------------------------------

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="about 10x smaller sizes (a smoke run)")
    p.add_argument("--only", default="", help="comma-separated workload ids, e.g. W1,W3 (default: all)")
    p.add_argument("--repeat", type=int, default=None, help="timed calls per implementation (default 10; 5 with --quick)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls before timing (default 2)")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds of timed calls per implementation before stopping early "
                        "(at least 3 calls are always timed; default 8, 2 with --quick)")
    p.add_argument("--threads", type=int, default=core_count(), help="threads for cinnlite, torch and tvm "
                                                                     "(default: the cores this process may use)")
    p.add_argument("--json", metavar="PATH", help="write all results as JSON")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument("--png", metavar="PATH", help="bar chart of GB/s (needs matplotlib)")
    p.add_argument("--memory-child", metavar="IMPL", help=argparse.SUPPRESS)
    p.add_argument("--compile-child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--tvm-compile-child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.repeat is None:
        args.repeat = 5 if args.quick else 10
    if args.budget is None:
        args.budget = 2.0 if args.quick else 8.0
    args.repeat = max(1, args.repeat)
    only = [w.strip().upper() for w in args.only.split(",") if w.strip()]
    unknown = [w for w in only if w not in WORKLOAD_IDS]
    if unknown:
        p.error(f"unknown workload id(s) {', '.join(unknown)}; choose from {', '.join(WORKLOAD_IDS)}")
    args.only = only or list(WORKLOAD_IDS)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    threads = max(1, args.threads)
    if args.memory_child:
        memory_child(args.memory_child, args.quick, threads)
        return 0
    if args.compile_child:
        compile_child(args.quick, threads)
        return 0
    if args.tvm_compile_child:
        tvm_compile_child(args.quick, threads)
        return 0

    import_peers(threads)
    info = machine_info(threads)
    print_machine(info)
    print(f"sizes: {'quick' if args.quick else 'full'}; repeat {args.repeat}, warmup {args.warmup}, "
          f"budget {args.budget:g} s per implementation; seed {SEED}")
    print()
    results = {"machine": info, "config": {"quick": args.quick, "repeat": args.repeat, "warmup": args.warmup,
                                           "budget_s": args.budget, "seed": SEED, "workloads": args.only},
               "workloads": []}
    t_start = time.perf_counter()
    for wid in args.only:
        if wid == "W8":
            continue
        t0 = time.perf_counter()
        workload = WORKLOADS[wid](args.quick)
        print(f"[{wid}] {workload.title} ...", end="", flush=True)
        if wid == "W7":
            record = run_overhead(workload, args, threads)
        else:
            record = run_throughput(workload, args, threads)
        results["workloads"].append(record)
        if wid == "W6":
            print(" memory ...", end="", flush=True)
            results["memory"] = run_memory(args, threads)
        bad = [e["impl"] for e in record["impls"] if not e.get("ok")]
        print(f" {time.perf_counter() - t0:.1f} s" + (f"  (FAILED: {', '.join(bad)})" if bad else ""), flush=True)
    if "W8" in args.only:
        t0 = time.perf_counter()
        print("[W8] compile time ...", end="", flush=True)
        results["compile"] = run_compile(args, threads)
        print(f" {time.perf_counter() - t0:.1f} s", flush=True)
    results["total_s"] = time.perf_counter() - t_start
    results["loadavg_end"] = load_average()
    print()
    print_report(results, args.markdown)
    load = results["loadavg_end"]
    print(f"total {results['total_s']:.0f} s" + (f"; load average at the end {load[0]:.2f}" if load else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
        print(f"results written to {args.json}")
    if args.png:
        save_png(results, args.png)
    failed = any(not e.get("ok") for r in results["workloads"] for e in r["impls"])
    failed |= any("error" in e for e in (results.get("memory") or {}).get("impls", []))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
