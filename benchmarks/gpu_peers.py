"""PyTorch and CuPy as peers of bench_cuda.py: the same work as the workloads W1-W6
(workloads.py) and as the cells of the GPU matrix (matrix_cells.Cell), on a device.

A ``Lib`` moves numpy inputs to its device once, untimed (``put``), and results back for the
checks (``get``); it times calls with its own CUDA events (``clock``). ``workload_peer`` and
``cell_peer`` take a Lib and the numpy inputs and return a ``Peer`` whose ``run`` launches the
work once (asynchronously on a GPU) and returns the result on the device, or None where the
library has no such operation. Outputs are preallocated wherever the API takes ``out=``; scatters copy
their input into the preallocated output inside the timed call, as cinnlite's program does.

The code is the same for PyTorch on the CPU, which bench_cuda.py's ``--emulate`` dry run uses to
check every peer against the numpy references on a machine without a GPU.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from matrix_cells import _scatter_positions, torch_scatter

#: dtypes cupyx.scatter_add / scatter_max / scatter_min accept (CuPy raises TypeError otherwise).
CUPY_SCATTER_DTYPES = {"add": ("float16", "float32", "float64", "int32"),
                       "max": ("float32", "float64", "int32"),
                       "min": ("float32", "float64", "int32")}


@dataclass
class Peer:
    run: object   # () -> the result, on the device
    note: str


# -- clocks -------------------------------------------------------------------------------------


class PerfClock:
    """Wall-clock seconds of single calls, each followed by ``sync`` (the emulation's clock)."""

    name = "perf_counter"

    def __init__(self, sync=None):
        self.sync = sync or (lambda: None)

    def time(self, run, n: int) -> list:
        run()  # untimed: the first call after another implementation's turn
        self.sync()
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            run()
            self.sync()
            out.append(time.perf_counter() - t0)
        return out


class EventClock:
    """Seconds between two CUDA events recorded on the library's current stream around each
    call; ``event()`` makes a timing event, ``elapsed_ms(start, stop)`` reads one interval."""

    def __init__(self, name: str, event, elapsed_ms, sync):
        self.name, self.event, self.elapsed_ms, self.sync = name, event, elapsed_ms, sync

    def time(self, run, n: int) -> list:
        start, stop = self.event(), self.event()
        run()  # untimed: the first call after another implementation's turn
        self.sync()
        out = []
        for _ in range(n):
            start.record()
            run()
            stop.record()
            stop.synchronize()
            out.append(self.elapsed_ms(start, stop) / 1e3)
        return out


# -- the libraries ------------------------------------------------------------------------------


class TorchLib:
    name = "torch"

    def __init__(self, torch, device: str):
        self.torch, self.device = torch, device
        self.version = torch.__version__
        if device == "cuda":
            self.sync = torch.cuda.synchronize
            self.clock = EventClock("torch.cuda.Event", lambda: torch.cuda.Event(enable_timing=True),
                                    lambda a, b: a.elapsed_time(b), self.sync)
        else:
            self.sync = lambda: None
            self.clock = PerfClock()

    def put(self, a: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(a)).to(self.device)

    def get(self, t) -> np.ndarray:
        return t.cpu().numpy()

    def contiguous(self, t):
        return t.contiguous()

    def empty(self, shape, like):
        return self.torch.empty(tuple(shape), dtype=like.dtype, device=like.device)

    def release(self):
        if self.device == "cuda":
            self.torch.cuda.empty_cache()  # leave the memory to the next cell's other implementations


class CupyLib:
    name = "cupy"

    def __init__(self, cupy, cupyx, gpu: bool):
        self.cp, self.cpx = cupy, cupyx
        self.version = getattr(cupy, "__version__", "?")
        self.sync = cupy.cuda.runtime.deviceSynchronize
        if gpu:
            self.clock = EventClock("cupy.cuda.Event", cupy.cuda.Event, cupy.cuda.get_elapsed_time, self.sync)
        else:
            self.clock = PerfClock(self.sync)

    def put(self, a: np.ndarray):
        return self.cp.asarray(np.ascontiguousarray(a))

    def get(self, t) -> np.ndarray:
        return self.cp.asnumpy(t)

    def contiguous(self, t):
        return self.cp.ascontiguousarray(t)

    def empty(self, shape, like):
        return self.cp.empty(tuple(shape), dtype=like.dtype)

    def release(self):
        self.cp.get_default_memory_pool().free_all_blocks()


# -- W1-W6 --------------------------------------------------------------------------------------


def workload_peer(lib, wid: str, case):
    """The library's W1-W6 on ``case`` (a workloads.Case), inputs moved to its device."""
    a = {k: lib.put(v) for k, v in case.arrays.items()}
    if wid == "W3":  # advanced indexing, the same in both
        x, rows, cols = a["x"], a["index"][:, 0], a["index"][:, 1]
        return Peer(lambda: x[rows, cols], "x[index[:, 0], index[:, 1]]")
    return (torch_workload if lib.name == "torch" else cupy_workload)(lib, wid, case, a)


def cell_peer(lib, cell, axis, arrays: dict, out_shape):
    """The library's version of a matrix cell (matrix_cells.Cell), or None."""
    return (torch_cell if lib.name == "torch" else cupy_cell)(lib, cell, axis, arrays, out_shape)


def torch_workload(lib: TorchLib, wid: str, case, a: dict):
    """PyTorch's W1, W2, W4-W6 on the inputs ``a``, as peers.py runs them on the CPU."""
    t = lib.torch
    if wid == "W1":
        x, idx = a["x"], a["idx"]
        out = lib.empty((idx.shape[0], x.shape[1]), x)
        return Peer(lambda: t.index_select(x, 0, idx, out=out), "index_select(out=)")
    if wid == "W2":
        x, idx = a["x"], a["index"]
        out = lib.empty(idx.shape, x)
        return Peer(lambda: t.gather(x, 1, idx, out=out), "gather(out=)")
    if wid in ("W4", "W5"):
        idx, src = a["index"], a["src"]
        out = lib.empty(case.extra["shape"], src)
        if wid == "W4":
            rows = idx[:, 0]
            return Peer(lambda: out.zero_().index_add_(0, rows, src), "out.zero_(); index_add_")
        return Peer(lambda: out.zero_().scatter_add_(1, idx, src), "out.zero_(); scatter_add_")
    if wid == "W6":
        x, src, dst = a["x"], a["src"], a["dst"][:, 0]
        out = lib.empty(case.extra["shape"], x)
        msg = lib.empty((src.shape[0], x.shape[1]), x)

        def run():
            t.index_select(x, 0, src, out=msg)
            return out.zero_().index_add_(0, dst, msg)
        return Peer(run, "index_select(out=) + zero_() + index_add_")
    return None


def cupy_workload(lib: CupyLib, wid: str, case, a: dict):
    """CuPy's W1, W2, W4-W6 on the inputs ``a``: take, take_along_axis and cupyx.scatter_add."""
    cp, cpx = lib.cp, lib.cpx
    if wid == "W1":
        x, idx = a["x"], a["idx"]
        out = lib.empty((idx.shape[0], x.shape[1]), x)
        return Peer(lambda: cp.take(x, idx, axis=0, out=out), "cupy.take(out=)")
    if wid == "W2":
        x, idx = a["x"], a["index"]
        return Peer(lambda: cp.take_along_axis(x, idx, axis=1), "cupy.take_along_axis")
    if wid in ("W4", "W5"):
        idx, src = a["index"], a["src"]
        out = lib.empty(case.extra["shape"], src)
        where = idx[:, 0] if wid == "W4" else (cp.arange(out.shape[0])[:, None], idx)

        def run():
            out.fill(0)
            cpx.scatter_add(out, where, src)
            return out
        return Peer(run, "out.fill(0); cupyx.scatter_add" + ("" if wid == "W4" else "(out, (rows, index), src)"))
    if wid == "W6":
        x, src, dst = a["x"], a["src"], a["dst"][:, 0]
        out = lib.empty(case.extra["shape"], x)
        msg = lib.empty((src.shape[0], x.shape[1]), x)

        def run():
            cp.take(x, src, axis=0, out=msg)
            out.fill(0)
            cpx.scatter_add(out, dst, msg)
            return out
        return Peer(run, "cupy.take(out=) + fill(0) + cupyx.scatter_add")
    return None


# -- the matrix cells ---------------------------------------------------------------------------


def torch_cell(lib: TorchLib, cell, axis, arrays: dict, out_shape):
    """PyTorch's version of a matrix cell: index_select (clamp or remainder first for the modes
    clip and wrap), gather, advanced indexing, and the in-place scatters of matrix_cells."""
    t = lib.torch
    int64 = arrays["index"].dtype == np.int64
    x, index = lib.put(arrays["x"]), lib.put(arrays["index"])
    if cell.op == "take":
        if axis is None:
            x = x.reshape(-1)
        dim, n = axis or 0, x.shape[axis or 0]
        out = lib.empty(out_shape, x)
        if cell.mode == "clip":
            return Peer(lambda: t.index_select(x, dim, index.clamp(0, n - 1), out=out), "clamp + index_select(out=)")
        if cell.mode == "wrap":
            return Peer(lambda: t.index_select(x, dim, index.remainder(n), out=out), "remainder + index_select(out=)")
        return Peer(lambda: t.index_select(x, dim, index, out=out), "index_select(out=)")
    if cell.mode != "raise":
        return None
    if cell.op == "gather":
        if not int64:  # torch.gather takes int64 indices only
            return None
        out = lib.empty(out_shape, x)
        return Peer(lambda: t.gather(x, axis, index, out=out), "gather(out=)")
    if cell.op == "gather_nd":
        return _advanced_indexing_peer(lib, cell, x, index, out_shape,
                                       lambda col, out: t.index_select(x, 0, col, out=out),
                                       "index_select(index[:, 0], out=)", lambda n: t.arange(n, device=x.device))
    if not int64:  # torch's scatter_ and index_* take int64 indices only
        return None
    run, _, note = torch_scatter(cell, axis, x, index, lib.put(arrays["src"]))
    return Peer(run, note)


def cupy_cell(lib: CupyLib, cell, axis, arrays: dict, out_shape):
    """CuPy's version of a matrix cell: cupy.take (whose out-of-range indices wrap, as mode
    "wrap" does; clip first for "clip"), take_along_axis, advanced indexing, and for the
    scatters advanced-index assignment and cupyx.scatter_add / scatter_max / scatter_min where
    CuPy has the reduction for the dtype."""
    cp, cpx = lib.cp, lib.cpx
    x, index = lib.put(arrays["x"]), lib.put(arrays["index"])
    if cell.op == "take":
        out = lib.empty(out_shape, x)
        if cell.mode == "clip":
            n = arrays["x"].size if axis is None else arrays["x"].shape[axis]
            return Peer(lambda: cp.take(x, cp.clip(index, 0, n - 1), axis=axis, out=out), "clip + cupy.take(out=)")
        return Peer(lambda: cp.take(x, index, axis=axis, out=out), "cupy.take(out=)")
    if cell.mode != "raise":
        return None
    if cell.op == "gather":
        return Peer(lambda: cp.take_along_axis(x, index, axis=axis), "cupy.take_along_axis")
    if cell.op == "gather_nd":
        return _advanced_indexing_peer(lib, cell, x, index, out_shape,
                                       lambda col, out: cp.take(x, col, axis=0, out=out),
                                       "cupy.take(index[:, 0], out=)", cp.arange)
    reduce = cell.reduce
    if reduce != "none" and cell.dtype not in CUPY_SCATTER_DTYPES.get(reduce, ()):
        return None
    src = lib.put(arrays["src"])
    where = tuple(lib.put(p) for p in _scatter_positions(cell, axis, arrays["index"]))
    out = lib.empty(out_shape, x)
    scatter = None if reduce == "none" else getattr(cpx, f"scatter_{reduce}")

    def run():
        cp.copyto(out, x)
        if scatter is None:
            out[where] = src
        else:
            scatter(out, where, src)
        return out
    return Peer(run, "copyto + " + ("out[positions] = src" if scatter is None else f"cupyx.scatter_{reduce}"))


def _advanced_indexing_peer(lib, cell, x, index, out_shape, take_rows, take_note: str, arange):
    """gather_nd in a library with numpy's indexing: whole rows through ``take_rows(column,
    out)`` (the index column made contiguous once, untimed), element tuples and batch_dims=1
    through advanced indexing."""
    if cell.axis == "slices":
        col = lib.contiguous(index[:, 0])
        out = lib.empty(out_shape, x)
        return Peer(lambda: take_rows(col, out), take_note)
    if cell.axis == "elements":
        rows, cols = index[:, 0], index[:, 1]
        return Peer(lambda: x[rows, cols], "x[index[:, 0], index[:, 1]]")
    rows, cols = arange(x.shape[0])[:, None], index[..., 0]
    return Peer(lambda: x[rows, cols], "x[arange[:, None], index[..., 0]]")
