"""W6 peak memory: each implementation runs the message-passing workload once in a fresh
process (``bench.py --memory-child IMPL``), its output allocated inside the measured call, and
reports the resident-set high-water mark above the state after setup.
"""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import numpy as np

import libraries
from workloads import SEED, MessagePassing, cinnlite_compile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BENCH = os.path.join(HERE, "bench.py")
MMAP_THRESHOLD = "131072"


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


def _w6_call(impl_name: str, quick: bool, threads: int):
    """The W6 call of one implementation, its inputs made and (for cinnlite) compiled."""
    workload = MessagePassing(quick)
    case = workload.case(np.random.default_rng(SEED))
    x, src, dst = case.arrays["x"], case.arrays["src"], case.arrays["dst"][:, 0]
    shape = case.extra["shape"]
    if impl_name == "cinnlite":
        exe = cinnlite_compile(workload.cinnlite_program(case), threads)
        return lambda: exe(**case.arrays)
    if impl_name == "numpy":
        def run():
            out = np.zeros(shape, np.float32)
            np.add.at(out, dst, np.take(x, src, axis=0))
            return out
        return run
    if impl_name == "torch":
        torch = libraries.torch
        xt, st, dt = (torch.from_numpy(a) for a in (x, src, dst))
        return lambda: torch.zeros(shape, dtype=torch.float32).index_add_(0, dt, torch.index_select(xt, 0, st))
    raise SystemExit(f"unknown implementation {impl_name}")


def memory_child(impl_name: str, quick: bool, threads: int):
    """Run one W6 implementation once, its output allocated inside the measured call, and print
    the peak memory above the state after inputs were made and the program compiled."""
    import resource
    import tracemalloc

    libraries.import_peers(threads, want_torch=impl_name == "torch", want_tvm=False)
    run = _w6_call(impl_name, quick, threads)
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
    impls = ["cinnlite", "numpy"] + (["torch"] if libraries.torch is not None else [])
    result = {"output_bytes": nodes * feat * 4, "intermediate_bytes": edges * feat * 4, "impls": []}
    for name in impls:
        cmd = [sys.executable, BENCH, "--memory-child", name, "--threads", str(threads)]
        if args.quick:
            cmd.append("--quick")
        # A fixed mmap threshold: every large array is a fresh mapping, so freed memory that
        # stays resident after setup (compilation, data generation) cannot hide a new allocation.
        env = dict(os.environ, MALLOC_MMAP_THRESHOLD_=MMAP_THRESHOLD)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO, env=env)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        if proc.returncode != 0 or not lines:
            result["impls"].append({"impl": name, "error": (proc.stderr.strip().splitlines() or ["?"])[-1]})
        else:
            result["impls"].append(json.loads(lines[-1]))
    return result
