"""Every implementation of a workload: cinnlite's compiled program, and the same work done by
numpy, PyTorch and Apache TVM, each given its best shot (preallocated outputs where the API
allows, inputs shared without copying, TVM with a hand schedule).

An implementation is an ``Impl``: ``run()`` does the work once, ``result()`` returns the last
result as a numpy array for the correctness check. ``implementations`` yields a factory per
implementation that can run here (PyTorch and TVM only where they imported).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import libraries
from arrays import aligned, aligned_empty
from tvm_driver import tvm_peer
from workloads import Workload, cinnlite_compile


@dataclass
class Impl:
    """One implementation of a workload: ``run()`` does the work once, ``result()`` returns the
    last result as a numpy array (for the correctness check, outside the timed loop)."""
    name: str
    run: object
    result: object
    note: str = ""


def implementations(workload: Workload, case, threads: int):
    """(name, factory) for cinnlite and every peer of the workload available here; a factory
    returns an Impl (or raises)."""
    yield "cinnlite", lambda: cinnlite_impl(workload, case, threads)
    for name, factory in PEERS[workload.id](case, threads):
        if libraries.available(name):
            yield name, factory


def cinnlite_impl(workload: Workload, case, threads: int) -> Impl:
    program = workload.cinnlite_program(case)
    exe = cinnlite_compile(program, threads)
    arrays = case.arrays
    last = {}

    def run():
        last["out"] = exe(**arrays)
        return last["out"]

    return Impl("cinnlite", run, lambda: last["out"], "output allocated by every call")


def take_rows_peers(case, threads):
    x, idx = case.arrays["x"], case.arrays["idx"]
    out_shape = (idx.shape[0], x.shape[1])

    def numpy_impl():
        out = aligned_empty(out_shape, np.float32)
        return Impl("numpy", lambda: np.take(x, idx, axis=0, out=out, mode="clip"), lambda: out,
                    "np.take(out=, mode='clip')")

    def torch_impl():
        torch = libraries.torch
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


def gather_elements_peers(case, threads):
    x, idx = case.arrays["x"], case.arrays["index"]

    def numpy_impl():
        last = {}

        def run():
            last["out"] = np.take_along_axis(x, idx, axis=1)
        return Impl("numpy", run, lambda: last["out"], "take_along_axis (no out=)")

    def torch_impl():
        torch = libraries.torch
        xt, it = torch.from_numpy(x), torch.from_numpy(idx)
        out = torch.empty(idx.shape, dtype=torch.float32)
        return Impl("torch", lambda: torch.gather(xt, 1, it, out=out), lambda: out.numpy(), "gather(out=)")

    def tvm_impl():
        from tvm import topi
        run, result, note = tvm_peer(lambda a, i: topi.gather(a, 1, i), [x, idx], idx.shape, np.float32, threads)
        return Impl("tvm", run, result, "topi.gather, " + note)

    return [("numpy", numpy_impl), ("torch", torch_impl), ("tvm", tvm_impl)]


def gather_nd_peers(case, threads):
    x, idx = case.arrays["x"], case.arrays["index"]

    def numpy_impl():
        last = {}

        def run():
            last["out"] = x[idx[:, 0], idx[:, 1]]
        return Impl("numpy", run, lambda: last["out"], "x[idx[:, 0], idx[:, 1]]")

    def torch_impl():
        torch = libraries.torch
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


def scatter_nd_add_rows_peers(case, threads):
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
        torch = libraries.torch
        it, st = torch.from_numpy(flat), torch.from_numpy(src)
        out = torch.empty(shape, dtype=torch.float32)

        def run():
            out.zero_()
            out.index_add_(0, it, st)
        return Impl("torch", run, lambda: out.numpy(), "out.zero_(); index_add_")

    return [("numpy", numpy_impl), ("torch", torch_impl)]


def scatter_add_axis1_peers(case, threads):
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
        torch = libraries.torch
        it, st = torch.from_numpy(idx), torch.from_numpy(src)
        out = torch.empty(shape, dtype=torch.float32)

        def run():
            out.zero_()
            out.scatter_add_(1, it, st)
        return Impl("torch", run, lambda: out.numpy(), "out.zero_(); scatter_add_")

    return [("numpy", numpy_impl), ("torch", torch_impl)]


def message_passing_peers(case, threads):
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
        torch = libraries.torch
        xt, st, dt = (torch.from_numpy(a) for a in (x, src, dst))
        out = torch.empty(shape, dtype=torch.float32)
        msg = torch.empty((src.shape[0], shape[1]), dtype=torch.float32)

        def run():
            torch.index_select(xt, 0, st, out=msg)
            out.zero_()
            out.index_add_(0, dt, msg)
        return Impl("torch", run, lambda: out.numpy(), "index_select(out=) + zero_() + index_add_")

    return [("numpy", numpy_impl), ("torch", torch_impl)]


def call_overhead_peers(case, threads):
    x, idx = case.arrays["x"], case.arrays["idx"]

    def numpy_impl():
        out = np.empty(8, np.float32)
        return Impl("numpy", lambda: np.take(x, idx, out=out, mode="clip"), lambda: out, "np.take(out=)")

    def torch_impl():
        torch = libraries.torch
        xt, it = torch.from_numpy(x), torch.from_numpy(idx)
        out = torch.empty(8, dtype=torch.float32)
        return Impl("torch", lambda: torch.index_select(xt, 0, it, out=out), lambda: out.numpy(),
                    "index_select(out=)")

    return [("numpy", numpy_impl), ("torch", torch_impl)]


PEERS = {
    "W1": take_rows_peers,
    "W2": gather_elements_peers,
    "W3": gather_nd_peers,
    "W4": scatter_nd_add_rows_peers,
    "W5": scatter_add_axis1_peers,
    "W6": message_passing_peers,
    "W7": call_overhead_peers,
}
