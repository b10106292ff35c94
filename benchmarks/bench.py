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

This file is the command line; the work is done by the modules next to it (see
benchmarks/README.md): machine, workloads, peers, correctness, timing, memory, compile_time
and report.
"""
from __future__ import annotations

import argparse
import sys
import time

import libraries
from compile_time import compile_child, run_compile, tvm_compile_child
from machine import core_count, load_average, machine_info, print_machine
from memory import memory_child, run_memory
from report import print_report, save_png, write_json
from timing import run_overhead, run_throughput
from workloads import SEED, WORKLOAD_IDS, WORKLOADS


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


def run_child(args, threads: int) -> bool:
    """Run the measurement a child process was started for, if any; True if it was one."""
    if args.memory_child:
        memory_child(args.memory_child, args.quick, threads)
    elif args.compile_child:
        compile_child(args.quick, threads)
    elif args.tvm_compile_child:
        tvm_compile_child(args.quick, threads)
    else:
        return False
    return True


def run_workloads(args, threads: int, results: dict):
    """Each chosen workload in turn, with a progress line; W8 last."""
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


def main(argv=None) -> int:
    args = parse_args(argv)
    threads = max(1, args.threads)
    if run_child(args, threads):
        return 0
    libraries.import_peers(threads)
    info = machine_info(threads)
    print_machine(info)
    print(f"sizes: {'quick' if args.quick else 'full'}; repeat {args.repeat}, warmup {args.warmup}, "
          f"budget {args.budget:g} s per implementation; seed {SEED}")
    print()
    results = {"machine": info, "config": {"quick": args.quick, "repeat": args.repeat, "warmup": args.warmup,
                                           "budget_s": args.budget, "seed": SEED, "workloads": args.only},
               "workloads": []}
    t_start = time.perf_counter()
    run_workloads(args, threads, results)
    results["total_s"] = time.perf_counter() - t_start
    results["loadavg_end"] = load_average()
    print()
    print_report(results, args.markdown)
    load = results["loadavg_end"]
    print(f"total {results['total_s']:.0f} s" + (f"; load average at the end {load[0]:.2f}" if load else ""))
    if args.json:
        write_json(results, args.json)
    if args.png:
        save_png(results, args.png)
    return 1 if failed(results) else 0


def failed(results: dict) -> bool:
    """Whether any implementation failed or disagreed, or a memory measurement failed."""
    bad = any(not e.get("ok") for r in results["workloads"] for e in r["impls"])
    return bad or any("error" in e for e in (results.get("memory") or {}).get("impls", []))


if __name__ == "__main__":
    sys.exit(main())
