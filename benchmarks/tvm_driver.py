"""Building and running TVM operators for the TVM peer: a hand schedule for the host CPU (outer
loops fused and parallel, with and without a 16-lane vectorised inner loop), the faster variant
kept, and tensors shared with numpy through DLPack."""
from __future__ import annotations

import contextlib
import os
import sys
import time

import numpy as np

import libraries
from machine import host_cpu_name

VECTOR_LANES = 16


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


def tvm_target(threads: int):
    return libraries.tvm.target.Target({"kind": "llvm", "mcpu": host_cpu_name(), "num-cores": threads})


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
    return libraries.tvm.build(sch.mod, target=tvm_target(threads))["main"]


def tvm_tensor(a: np.ndarray):
    """A TVM tensor sharing memory with ``a`` (DLPack), or a copy where that is refused."""
    tvm = libraries.tvm
    try:
        return tvm.runtime.from_dlpack(a)
    except Exception:
        return tvm.runtime.tensor(np.ascontiguousarray(a))


def tvm_peer(make_op, arrays: list, out_shape, out_dtype, threads: int):
    """Build ``make_op`` (placeholders -> output tensor) for every schedule variant, keep the
    fastest, and return ``(run, result, note)``: closures over preallocated TVM tensors and the
    schedule kept."""
    tvm = libraries.tvm
    args = [tvm_tensor(a) for a in arrays]
    out = tvm.runtime.empty(tuple(out_shape), str(np.dtype(out_dtype)), tvm.cpu())
    _, fn, variant = _fastest_variant(make_op, arrays, args, out, threads)

    def run():
        fn(*args, out)
        return out

    return run, (lambda: out.numpy()), f"schedule {variant}"


def _fastest_variant(make_op, arrays, args, out, threads):
    """(best time, built function, variant name) over the schedule variants that build."""
    from tvm import te

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
    return best
