"""W8 compile time, in fresh processes with a new empty disk cache:

- one operator, cold: ``cl.compile`` of a take of 1000 rows of a (1000, 64) float32 array by
  int32 indices, the first compile of a fresh process (so it includes LLVM's one-time start);
- a chain of 20 operators, cold: ten takes through one index tensor, each followed by an add or a
  multiply, the first compile of a fresh process;
- the W1-W6 programs, cold, in one fresh process (W1 first);
- loading every one of those programs from the disk cache in one more fresh process: the first
  load of that process (it also reads what the cache key needs once per process) and each later
  one;
- and TVM's build of ``topi.take`` for the W1 shapes, when TVM is installed.

Each kind of child process runs ``repeat`` times (a new cache directory for each round); the
medians are reported. A child is a run of ``bench.py`` (``--compile-child`` with the kind in
``CINNLITE_BENCH_COMPILE``) that prints its times as JSON. Run this file to print the W8 table
alone: ``python benchmarks/compile_time.py [--quick] [--repeat N]``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import libraries
from tvm_driver import quiet_stderr, tvm_build
from workloads import SEED, WORKLOADS, TakeRows, cinnlite_compile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BENCH = os.path.join(HERE, "bench.py")
COMPILE_PROGRAMS = ("W1", "W2", "W3", "W4", "W5", "W6")
#: The child processes of one round, in order: three compile into an empty cache, the last
#: loads everything they compiled from it.
COLD_KINDS = ("one", "chain", "programs")
KIND = "CINNLITE_BENCH_COMPILE"
CHAIN_OPERATORS = 20


def one_operator_program():
    """A take of 1000 rows of a (1000, 64) float32 array by 1000 int32 indices."""
    import cinnlite as cl
    b = cl.NetBuilder("w8_one_take")
    x = b.create_input("float32", (1000, 64), "x")
    i = b.create_input("int32", (1000,), "i")
    return b.build([b.take(x, i, axis=0)])


def chain_program(n: int = CHAIN_OPERATORS):
    """``n`` operators: takes of rows through one index tensor, each followed by an add of the
    input or a square, in turn; fusion makes one kernel of them."""
    import cinnlite as cl
    b = cl.NetBuilder("w8_chain")
    x = b.create_input("float32", (1000, 64), "x")
    i = b.create_input("int32", (1000,), "i")
    t = x
    for k in range(n // 2):
        t = b.take(t, i, axis=0)
        t = b.multiply(t, t) if k % 2 else b.add(t, x)
    return b.build([t])


def workload_programs(quick: bool) -> list:
    rng = np.random.default_rng(SEED)
    programs = []
    for wid in COMPILE_PROGRAMS:
        workload = WORKLOADS[wid](quick)
        programs.append((wid, workload.cinnlite_program(workload.case(rng))))
    return programs


def compile_child(quick: bool, threads: int):
    """In a fresh process: time cl.compile of the programs of the kind ``$CINNLITE_BENCH_COMPILE``
    names, in order, and print the times as JSON (program -> seconds)."""
    import cinnlite  # noqa: F401  (import time is not compile time)
    kind = os.environ.get(KIND, "programs")
    if kind == "one":
        programs = [("one", one_operator_program())]
    elif kind == "chain":
        programs = [("chain", chain_program())]
    elif kind == "programs":
        programs = workload_programs(quick)
    else:  # "load": every program the cold children compiled
        programs = [("one", one_operator_program()), ("chain", chain_program())] + workload_programs(quick)
    times = {}
    for name, program in programs:
        t0 = time.perf_counter()
        cinnlite_compile(program, threads)
        times[name] = time.perf_counter() - t0
    print(json.dumps(times))


def tvm_compile_child(quick: bool, threads: int):
    """In a fresh process: time building topi.take for the W1 shapes (definition, schedule and
    tvm.build), then the same again in the same process."""
    libraries.import_peers(threads, want_torch=False)
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


def _child(base: list, flag: str, env: dict) -> dict:
    """The JSON a child run of bench.py printed, or {"error": its last line of stderr}."""
    proc = subprocess.run(base + [flag], capture_output=True, text=True, timeout=900, cwd=REPO, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(lines[-1])


def _medians(runs: list) -> dict:
    """Per key, the median over the runs that have it; the first error if no run worked."""
    good = [r for r in runs if "error" not in r]
    if not good:
        return {"error": runs[0]["error"]} if runs else {"error": "not run"}
    return {k: statistics.median(r[k] for r in good if k in r) for k in good[0]}


def run_compile(args, threads: int) -> dict:
    """W8: ``repeat`` rounds (at most 5 in bench.py) of the cold children and the loading child,
    each round with a new empty cache directory, and TVM's build; medians per program."""
    repeat = max(1, min(getattr(args, "repeat", 1), getattr(args, "compile_repeat", 5)))
    base = [sys.executable, BENCH, "--threads", str(threads)] + (["--quick"] if args.quick else [])
    cold, loaded, files = {kind: [] for kind in COLD_KINDS}, [], 0
    for _ in range(repeat):
        cache_dir = tempfile.mkdtemp(prefix="cinnlite-bench-cache-")
        try:
            for kind in COLD_KINDS:
                cold[kind].append(_child(base, "--compile-child", dict(os.environ, CINNLITE_CACHE_DIR=cache_dir,
                                                                       **{KIND: kind})))
            loaded.append(_child(base, "--compile-child", dict(os.environ, CINNLITE_CACHE_DIR=cache_dir,
                                                               **{KIND: "load"})))
            files = sum(len(f) for _, _, f in os.walk(cache_dir))
        finally:
            shutil.rmtree(cache_dir, ignore_errors=True)
    result = {"programs": list(COMPILE_PROGRAMS), "repeat": repeat, "cache_files": files,
              "cinnlite_one": _medians(cold["one"]), "cinnlite_chain": _medians(cold["chain"]),
              "cinnlite_cold": _medians(cold["programs"]), "cinnlite_load": _medians(loaded)}
    result["cinnlite_load_first"], result["cinnlite_load_each"] = _load_summary(loaded)
    # What earlier versions reported as "cached": the W1-W6 programs loaded from the cache.
    load = result["cinnlite_load"]
    result["cinnlite_cached"] = load if "error" in load else {w: load[w] for w in COMPILE_PROGRAMS if w in load}
    if libraries.tvm is not None:
        result["tvm"] = _child(base, "--tvm-compile-child", dict(os.environ))
    return result


def _load_summary(loaded: list) -> tuple:
    """(median time of a loading process's first load, median over every later load)."""
    good = [r for r in loaded if "error" not in r]
    if not good:
        return None, None
    firsts = [next(iter(r.values())) for r in good]
    later = [v for r in good for v in list(r.values())[1:]]
    return statistics.median(firsts), (statistics.median(later) if later else None)


def main(argv=None) -> int:
    from machine import core_count
    from report import print_compile

    p = argparse.ArgumentParser(description="W8 compile time alone (see benchmarks/README.md)")
    p.add_argument("--quick", action="store_true", help="the W1-W6 programs at their quick sizes")
    p.add_argument("--repeat", type=int, default=5, help="rounds of child processes (default 5)")
    p.add_argument("--threads", type=int, default=core_count())
    p.add_argument("--json", metavar="PATH", help="write the results as JSON")
    args = p.parse_args(argv)
    args.compile_repeat = max(1, args.repeat)
    libraries.import_peers(args.threads, want_torch=False)
    result = run_compile(args, max(1, args.threads))
    print_compile(result, markdown=False)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    failed = [k for k, v in result.items() if isinstance(v, dict) and "error" in v and k != "tvm"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
