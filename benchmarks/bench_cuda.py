#!/usr/bin/env python3
"""GPU throughput of cinnlite's gathers and scatters, against the device's copy bandwidth and
against PyTorch on CUDA.

Needs an NVIDIA GPU, its driver and the ``cuda`` extra; PyTorch is optional. Every result is
checked against numpy before a number is printed. Times are medians of CUDA-event timings of
the kernels alone (inputs already on the device; for cinnlite ``exe.time_kernels``). Bandwidth
is the workload's minimal traffic (every index and value read once, every output element
written once) divided by the time; "% copy" compares it with a device-to-device copy of the
same number of bytes.

    python benchmarks/bench_cuda.py              # full sizes
    python benchmarks/bench_cuda.py --quick      # small sizes, a smoke run
"""
from __future__ import annotations

import argparse
import statistics
import sys

import numpy as np

import cinnlite as cl
from cinnlite import NetBuilder
from cinnlite.runtime.cuda import device_copy_seconds, gpu_available


def workloads(scale: int):
    """(name, build(b) -> outputs, feeds, reference(feeds) -> list of arrays, bytes moved,
    torch function(tensors) -> list of tensors)."""
    rng = np.random.default_rng(0)
    rows, cols, picks = 1_000_000 // scale, 64, 1_000_000 // scale
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    idx = rng.integers(0, rows, picks).astype(np.int64)
    idx2 = rng.integers(0, rows, (picks, cols)).astype(np.int64)
    src = rng.standard_normal((picks, cols)).astype(np.float32)
    f4, i8 = 4, 8
    out = []

    def take(b, t):
        return [b.take(t["x"], t["idx"], axis=0, mode="clip")]
    out.append(("take rows (index_select)", take, dict(x=x, idx=idx), lambda f: [f["x"][f["idx"]]],
                picks * i8 + 2 * picks * cols * f4,
                lambda torch, t: [torch.index_select(t["x"], 0, t["idx"])]))

    def gather(b, t):
        return [b.gather(t["x"], t["idx2"], axis=0, mode="clip")]
    out.append(("gather elements (torch.gather)", gather, dict(x=x, idx2=idx2),
                lambda f: [np.take_along_axis(f["x"], f["idx2"], axis=0)],
                picks * cols * (i8 + 2 * f4), lambda torch, t: [torch.gather(t["x"], 0, t["idx2"])]))

    def scatter_none(b, t):
        return [b.scatter(t["x"], t["idx2"], t["src"], axis=0, mode="clip")]

    def scatter_none_ref(f):
        res = f["x"].copy()
        flat_target = (f["idx2"] * cols + np.arange(cols)).reshape(-1)
        # The last update in row-major order is the first one in reversed order.
        targets, first = np.unique(flat_target[::-1], return_index=True)
        res.reshape(-1)[targets] = f["src"].reshape(-1)[::-1][first]
        return [res]
    out.append(("scatter elements, last write wins", scatter_none, dict(x=x, idx2=idx2, src=src), scatter_none_ref,
                2 * rows * cols * f4 + picks * cols * (i8 + f4),
                lambda torch, t: [t["x"].clone().scatter_(0, t["idx2"], t["src"])]))

    def scatter_add(b, t):
        return [b.scatter(t["x"], t["idx2"], t["src"], axis=0, reduce="add", mode="clip")]

    def scatter_add_ref(f):
        res = f["x"].astype(np.float64)
        np.add.at(res, (f["idx2"], np.broadcast_to(np.arange(cols), f["idx2"].shape)), f["src"])
        return [res.astype(np.float32)]
    out.append(("scatter elements, add", scatter_add, dict(x=x, idx2=idx2, src=src), scatter_add_ref,
                2 * rows * cols * f4 + picks * cols * (i8 + f4),
                lambda torch, t: [t["x"].clone().scatter_add_(0, t["idx2"], t["src"])]))

    def rows_add(b, t):
        return [b.scatter_nd(t["x"], b.reshape(t["idx"], (picks, 1)), t["src"], reduce="add", mode="clip")]

    def rows_add_ref(f):
        res = f["x"].astype(np.float64)
        np.add.at(res, f["idx"], f["src"])
        return [res.astype(np.float32)]
    out.append(("scatter_nd rows, add (index_add)", rows_add, dict(x=x, idx=idx, src=src), rows_add_ref,
                2 * rows * cols * f4 + picks * i8 + picks * cols * f4,
                lambda torch, t: [t["x"].clone().index_add_(0, t["idx"], t["src"])]))
    return out


def time_torch(torch, fn, tensors, repeat):
    for _ in range(3):
        fn(torch, tensors)
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeat):
        start.record()
        fn(torch, tensors)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / 1e3)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes 20x smaller")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    if not gpu_available():
        print("bench_cuda: no CUDA GPU, driver or NVRTC here; nothing to measure")
        return 0
    try:
        import torch
        if not torch.cuda.is_available():
            torch = None
    except ImportError:
        torch = None
    print(f"{'workload':36} {'cinnlite ms':>11} {'GB/s':>7} {'% copy':>7} {'torch ms':>9} {'vs torch':>8}")
    for name, build, feeds, reference, nbytes, torch_fn in workloads(20 if args.quick else 1):
        b = NetBuilder("bench")
        tensors = {k: b.create_input(v.dtype, v.shape, k) for k, v in feeds.items()}
        exe = cl.compile(b.build(build(b, tensors)), target="cuda")
        got = exe.run(feeds)
        for g, w in zip(got.values(), reference(feeds)):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=name)
        t = statistics.median(exe.time_kernels(feeds, repeat=args.repeat))
        copy = statistics.median(device_copy_seconds(nbytes // 2, repeat=args.repeat))  # reads + writes nbytes
        line = f"{name:36} {t * 1e3:11.3f} {nbytes / t / 1e9:7.1f} {100 * copy / t:6.1f}%"
        if torch is not None:
            dev = {k: torch.from_numpy(v).cuda() for k, v in feeds.items()}
            tt = time_torch(torch, torch_fn, dev, args.repeat)
            line += f" {tt * 1e3:9.3f} {tt / t:7.2f}x"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
