"""W8 compile time, in fresh processes: ``cl.compile`` of the W1-W6 programs with a new empty
disk cache (cold) and again with the same cache (cached), and TVM's build of ``topi.take`` for
the W1 shapes. Each measurement is a child run of ``bench.py`` that prints its times as JSON.
"""
from __future__ import annotations

import json
import os
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


def run_compile(args, threads: int) -> dict:
    cache_dir = tempfile.mkdtemp(prefix="cinnlite-bench-cache-")
    env = dict(os.environ, CINNLITE_CACHE_DIR=cache_dir)
    base = [sys.executable, BENCH, "--threads", str(threads)] + (["--quick"] if args.quick else [])
    result = {"cache_dir": cache_dir, "programs": list(COMPILE_PROGRAMS)}
    result["cinnlite_cold"] = _child(base, "--compile-child", env)
    result["cinnlite_cached"] = _child(base, "--compile-child", env)
    try:
        files = sum(len(f) for _, _, f in os.walk(cache_dir))
    except OSError:
        files = 0
    result["cache_files"] = files
    if libraries.tvm is not None:
        result["tvm"] = _child(base, "--tvm-compile-child", dict(os.environ))
    return result
