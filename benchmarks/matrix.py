"""The benchmark matrix: every operator across axes, data dtypes, index dtypes, sizes, modes and
reductions (``matrix_cells.py``), cinnlite against the fastest of numpy, PyTorch and Apache TVM
where each has the operation, every result checked before and after timing.

    python benchmarks/matrix.py                  # every cell (about ten minutes on two cores)
    python benchmarks/matrix.py --quick          # sizes up to 4M elements
    python benchmarks/matrix.py --only take,scatter --png chart.png --json out.json --markdown

It prints one row per cell (cinnlite's median, the best peer's, their ratio, and for cells of
16 MB or more the share of the copy bandwidth of the same bytes), then the geometric mean of
the ratios, the worst cell and the number of cells below 1.0x. Timing: each implementation
first runs for ``WARMUP_S`` (the steady state of repeated calls is measured); then they
take turns sample by sample (the copy ceiling too), ``PAUSE_S`` (15 ms) apart so that
one library's spinning threads settle before the next runs; a sample is a batch of calls, the
same number for every implementation, enough for the fastest to take ``SAMPLE_S``, so that
calls of a few microseconds are timed too.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np

import libraries
from arrays import aligned_empty
from machine import machine_info, print_machine
from matrix_cells import Impl, build_case, matrix_cells

SAMPLE_S = 5e-4
#: The pause before each timed sample, so that the previous implementation's idle threads have
#: stopped spinning before the next one runs: PyTorch's OpenMP workers go on spinning for 6-9 ms
#: of CPU time after a call on the 2-core Xeon VM (their threads' schedstat over 50 ms after one
#: call; TVM's 0.3 ms, cinnlite's helpers under 1 ms), so the 5 ms this once was left them on a
#: core through the first milliseconds of the next sample, TVM's where it followed PyTorch's.
PAUSE_S = 0.015
#: Each implementation first runs back to back for this long (its allocator, its thread pool
#: and its caches warm; cinnlite's symbolic builds reach their hot-size static code): the matrix
#: measures the steady state of repeated calls, not the first few.
WARMUP_S = 0.25
LARGE_BYTES = 16 << 20


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="sizes up to 4M elements")
    p.add_argument("--only", help="comma-separated operators (take,gather,gather_nd,scatter,scatter_nd)")
    p.add_argument("--match", help="only cells whose label contains this text")
    p.add_argument("--rounds", type=int, default=15, help="samples per implementation (default 15)")
    p.add_argument("--threads", type=int, default=None, help="threads for every library (default: all cores)")
    p.add_argument("--json", help="write every sample here")
    p.add_argument("--png", help="draw the ratios (needs matplotlib)")
    p.add_argument("--markdown", action="store_true", help="print the summary as Markdown")
    p.add_argument("--no-tvm", action="store_true", help="leave TVM out (its builds take a few seconds a cell)")
    return p.parse_args(argv)


def check(cell, expected: np.ndarray, got) -> None:
    got = np.asarray(got)
    if cell.reduce in ("add", "mean", "mul") and expected.dtype.kind == "f":
        tol = 2e-2 if expected.dtype == np.float16 else 1e-4
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(got, expected)


def remembering(impl: Impl) -> Impl:
    """An Impl whose ``result`` is the value of its last ``run`` (for peers that allocate)."""
    if impl.result is not None:
        return impl
    last = {}
    run = impl.run

    def remember():
        last["r"] = run()
    return Impl(impl.name, remember, lambda: last["r"], impl.note)


def copy_impl(nbytes: int) -> Impl:
    n = max(1, nbytes // 2 // 4)
    src, dst = aligned_empty((n,), np.float32), aligned_empty((n,), np.float32)
    src.fill(1.0)
    dst.fill(0.0)
    return Impl("copy", lambda: np.copyto(dst, src), lambda: dst, "np.copyto")


def one_call_s(run) -> float:
    """The fastest of a few back-to-back calls, in seconds."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - t0)
    return max(best, 1e-7)


def run_for(run, seconds: float = WARMUP_S):
    """Calls of ``run``, back to back, for ``seconds``."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        run()


def time_cell(impls: list, rounds: int) -> dict:
    """Median seconds per call of each implementation, sampled in turns. Every implementation
    makes the same number of calls per sample (enough for the fastest to take ``SAMPLE_S``), so
    all are measured alike: a sample starts after a pause, whatever that costs the first call."""
    for impl in impls:
        run_for(impl.run)
    n = max(1, min(2000, math.ceil(SAMPLE_S / min(one_call_s(impl.run) for impl in impls))))
    samples = {impl.name: [] for impl in impls}
    for k in range(rounds):
        for impl in (impls if k % 2 == 0 else impls[::-1]):
            time.sleep(PAUSE_S)
            run = impl.run
            t0 = time.perf_counter()
            for _ in range(n):
                run()
            samples[impl.name].append((time.perf_counter() - t0) / n)
    return {name: statistics.median(s) for name, s in samples.items()}, samples


def run_cell(cell, args, threads: int, rng) -> dict:
    case = build_case(cell, rng, threads)
    row = {"cell": cell.label, "op": cell.op, "bytes": case.bytes_moved, "impls": {}, "errors": {}}
    ready = []
    for name, factory in case.impls:
        try:
            impl = remembering(factory())
            impl.run()
            check(cell, case.reference, impl.result())
            ready.append(impl)
            row["impls"][name] = {"note": impl.note}
        except Exception as exc:  # a failing peer is reported, never fatal
            row["errors"][name] = f"{type(exc).__name__}: {exc}"[:300]
    large = case.bytes_moved >= LARGE_BYTES
    if large:
        ready.append(copy_impl(case.bytes_moved))
    medians, samples = time_cell(ready, args.rounds)
    for impl in ready:
        if impl.name == "copy":
            continue
        try:
            check(cell, case.reference, impl.result())
        except Exception as exc:
            row["errors"][impl.name] = f"after timing: {type(exc).__name__}: {exc}"[:300]
        row["impls"][impl.name].update(median_s=medians[impl.name], samples_s=samples[impl.name])
    if large:
        row["copy_s"] = medians["copy"]
    summarise(row)
    return row


def summarise(row: dict):
    timed = {k: v["median_s"] for k, v in row["impls"].items() if "median_s" in v and k not in row["errors"]}
    peers = {k: v for k, v in timed.items() if k != "cinnlite"}
    if "cinnlite" in timed and peers:
        row["best_peer"] = min(peers, key=peers.get)
        row["ratio"] = peers[row["best_peer"]] / timed["cinnlite"]
    if "cinnlite" in timed and "copy_s" in row:
        row["pct_copy"] = 100.0 * row["copy_s"] / timed["cinnlite"]


def fmt_time(s: float) -> str:
    return f"{s * 1e6:.1f} us" if s < 1e-3 else f"{s * 1e3:.2f} ms"


def print_row(row: dict):
    cl = row["impls"].get("cinnlite", {}).get("median_s")
    peer = row.get("best_peer")
    text = f"{row['cell']:<44} {fmt_time(cl) if cl else '-':>10}"
    if peer:
        text += f"  {peer:<6} {fmt_time(row['impls'][peer]['median_s']):>10}  {row['ratio']:6.2f}x"
    if "pct_copy" in row:
        text += f"  {row['pct_copy']:4.0f}% copy"
    for name, err in row["errors"].items():
        text += f"  [{name} FAILED: {err[:80]}]"
    print(text, flush=True)


def summary(rows: list) -> dict:
    ratios = [r for r in rows if "ratio" in r]
    out = {"cells": len(rows), "compared": len(ratios),
           "failures": sum(1 for r in rows if "cinnlite" in r["errors"])}
    if ratios:
        out["geomean"] = math.exp(statistics.fmean(math.log(r["ratio"]) for r in ratios))
        worst = min(ratios, key=lambda r: r["ratio"])
        out["worst"] = (worst["cell"], worst["ratio"], worst["best_peer"])
        out["below_1"] = sum(1 for r in ratios if r["ratio"] < 1.0)
    large = [r for r in rows if "pct_copy" in r]
    if large:
        low = min(large, key=lambda r: r["pct_copy"])
        out["large"] = (len(large), low["cell"], low["pct_copy"], sum(1 for r in large if r["pct_copy"] < 75))
    return out


def print_summary(s: dict, markdown: bool):
    lines = [("cells", f"{s['cells']} ({s['compared']} with a peer; cinnlite failed {s['failures']})")]
    if "geomean" in s:
        lines.append(("geometric mean of cinnlite's speedup over the best peer", f"{s['geomean']:.2f}x"))
        lines.append(("worst cell", f"{s['worst'][0]}: {s['worst'][1]:.2f}x vs {s['worst'][2]}"))
        lines.append(("cells below 1.0x", str(s["below_1"])))
    if "large" in s:
        n, cell, pct, low = s["large"]
        lines.append((f"cells of {LARGE_BYTES >> 20} MB or more", f"{n}; lowest {pct:.0f}% of copy "
                      f"bandwidth ({cell}); {low} below 75%"))
    if markdown:
        print("| | |\n|---|---|")
        for k, v in lines:
            print(f"| {k} | {v} |")
    else:
        for k, v in lines:
            print(f"{k}: {v}")


def draw(rows: list, path: str):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = sorted((r for r in rows if "ratio" in r), key=lambda r: r["ratio"])
    ops = sorted({r["op"] for r in rows})
    colours = dict(zip(ops, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    fig, ax = plt.subplots(figsize=(9, 0.16 * len(rows) + 1.2))
    ax.barh(range(len(rows)), [r["ratio"] for r in rows], color=[colours[r["op"]] for r in rows])
    ax.set_yticks(range(len(rows)), [r["cell"] for r in rows], fontsize=5)
    ax.set_ylim(-1, len(rows))
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    ax.set_xlabel("cinnlite speedup over the fastest of numpy, PyTorch, TVM (log scale; > 1: cinnlite faster)")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=colours[o]) for o in ops], labels=ops, loc="lower right")
    fig.tight_layout()
    ax.set_title(f"{len(rows)} cells, cinnlite (CPU) against the fastest peer in each", fontsize=9)
    fig.savefig(path, dpi=100)


def main(argv=None) -> int:
    args = parse_args(argv)
    threads = args.threads or len(os.sched_getaffinity(0))
    libraries.import_peers(threads, want_tvm=not args.no_tvm)
    info = machine_info(threads)
    print_machine(info)
    cells = matrix_cells(args.quick)
    if args.only:
        cells = [c for c in cells if c.op in args.only.split(",")]
    if args.match:
        cells = [c for c in cells if args.match in c.label]
    rows = []
    rng = np.random.default_rng(0)
    for cell in cells:
        rows.append(run_cell(cell, args, threads, rng))
        print_row(rows[-1])
    s = summary(rows)
    print_summary(s, args.markdown)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "rows": rows, "summary": s}, f, default=str)
    if args.png:
        draw(rows, args.png)
    return 1 if s["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
