#!/usr/bin/env python3
"""Symbolic shapes: what compiling one program for every size buys, and what it costs.

Part 1, mini-batches of new sizes: a message-passing step (``h = take(x, src, 0)``, ``h * h``
scatter-added into a copy of ``x`` at ``dst``) over a sequence of mini-batches, each with a new
edge count, the first call of each batch included. cinnlite the naive way (a static program built
and ``cl.compile``-d for every batch, from an empty disk cache: automatic generalisation compiles
one shape-generic version at the second batch), cinnlite with one symbolic program compiled once,
and PyTorch eager (``index_select`` + mul + ``index_add_``). Every sequence runs in a fresh
process, so that no compile is hidden by an earlier one; the totals include every compile.

Part 2, symbolic vs static on W1-W6: each workload's program (workloads.py) compiled as it is
and with the sizes that vary in real use as symbols; both timed in interleaved rounds, the
symbolic one on its generic code (``CINNLITE_HOT_SIZE_BYTES=0``: no size turns hot).

Every result is checked against numpy before anything is timed.

    python benchmarks/shapes.py                 # full sizes (a few minutes)
    python benchmarks/shapes.py --quick         # smaller sizes and fewer runs, a smoke run
    python benchmarks/shapes.py --part 2 --json out.json
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types

import numpy as np

import libraries
from arrays import rand_f32, rand_idx
from correctness import check
from machine import REPO, core_count, load_average, machine_info, print_machine
from peers import Impl
from report import render_table, write_json
from timing import interleaved_rounds, warm_up
from workloads import SEED, WORKLOADS, Case, cinnlite_compile

HERE = os.path.dirname(os.path.abspath(__file__))
PAUSE_S = 0.005          # sleep between two timed calls or batches (not timed)
SLOW_RATIO = 1.10        # a symbolic program more than 10% slower than the static one is flagged

# -- part 1: mini-batches of new sizes ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MiniBatches:
    nodes: int
    feat: int
    min_edges: int
    max_edges: int
    batches: int


def minibatch_config(quick: bool) -> MiniBatches:
    return MiniBatches(5_000, 64, 10_000, 100_000, 10) if quick else MiniBatches(20_000, 64, 50_000, 500_000, 10)


def minibatch_inputs(cfg: MiniBatches):
    """x (nodes, feat) float32 and, per batch, src (E,) and dst (E, 1) int64, from the fixed seed
    (every process draws the same)."""
    rng = np.random.default_rng(SEED)
    edges = [int(e) for e in rng.integers(cfg.min_edges, cfg.max_edges + 1, cfg.batches)]
    x = rand_f32(rng, (cfg.nodes, cfg.feat))
    return x, [(rand_idx(rng, cfg.nodes, (e,)), rand_idx(rng, cfg.nodes, (e, 1))) for e in edges]


def minibatch_reference(x, src, dst) -> np.ndarray:
    out = x.astype(np.float64)
    h = x[src].astype(np.float64)
    np.add.at(out, dst[:, 0], h * h)
    return out


def message_passing_program(nodes, edges, feat):
    """``scatter_nd(x, dst, h * h, reduce="add")`` with ``h = take(x, src, 0)``; sizes may be
    numbers (a static program) or names (symbols)."""
    from cinnlite import NetBuilder
    b = NetBuilder("message_passing")
    x = b.create_input("float32", (nodes, feat), "x")
    src = b.create_input("int64", (edges,), "src")
    dst = b.create_input("int64", (edges, 1), "dst")
    h = b.take(x, src, axis=0)
    return b.build([b.scatter_nd(x, dst, b.multiply(h, h), reduce="add")])


MINIBATCH_IMPLS = {
    "cinnlite-static": "cinnlite, cl.compile of a static program every batch",
    "cinnlite-symbolic": "cinnlite, one symbolic program compiled once",
    "torch": "torch eager, index_select + mul + index_add_",
    "torch-1t": "torch eager, 1 thread",
}


def run_sequence(impl: str, cfg: MiniBatches, x, batches, threads: int) -> dict:
    """The whole mini-batch sequence once: per batch the seconds spent compiling (cinnlite) and
    calling, first call included; the outputs as numpy arrays."""
    compile_s, call_s, outs = [], [], []
    if impl == "cinnlite-static":
        for src, dst in batches:
            t0 = time.perf_counter()
            exe = cinnlite_compile(message_passing_program(cfg.nodes, len(src), cfg.feat), threads)
            t1 = time.perf_counter()
            outs.append(exe(x=x, src=src, dst=dst))
            t2 = time.perf_counter()
            compile_s.append(t1 - t0)
            call_s.append(t2 - t1)
            time.sleep(PAUSE_S)
    elif impl == "cinnlite-symbolic":
        t0 = time.perf_counter()
        exe = cinnlite_compile(message_passing_program("N", "E", cfg.feat), threads)
        once = time.perf_counter() - t0
        for b, (src, dst) in enumerate(batches):
            t1 = time.perf_counter()
            outs.append(exe(x=x, src=src, dst=dst))
            call_s.append(time.perf_counter() - t1)
            compile_s.append(once if b == 0 else 0.0)  # the one compile counts with the first batch
            time.sleep(PAUSE_S)
    elif impl in ("torch", "torch-1t"):
        torch = libraries.torch
        xt = torch.from_numpy(x)
        for src, dst in batches:
            t0 = time.perf_counter()
            h = torch.index_select(xt, 0, torch.from_numpy(src))
            out = xt.clone().index_add_(0, torch.from_numpy(dst[:, 0]), h * h)
            call_s.append(time.perf_counter() - t0)
            compile_s.append(0.0)
            outs.append(out.numpy())
            time.sleep(PAUSE_S)
    else:
        raise ValueError(f"unknown mini-batch implementation {impl!r}")
    batch_s = [c + k for c, k in zip(compile_s, call_s)]
    return {"batch_s": batch_s, "compile_s": compile_s, "call_s": call_s, "total_s": sum(batch_s),
            "outputs": outs}


def minibatch_child(impl: str, quick: bool, threads: int):
    """In a fresh process (imports and input generation not timed): the sequence once; prints
    the times and a float64 sum of every output as JSON."""
    libraries.import_peers(1 if impl == "torch-1t" else threads, want_torch=impl.startswith("torch"), want_tvm=False)
    cfg = minibatch_config(quick)
    x, batches = minibatch_inputs(cfg)
    if impl.startswith("cinnlite"):
        import cinnlite  # noqa: F401  (import time is not compile time)
    result = run_sequence(impl, cfg, x, batches, threads)
    result["sums"] = [float(np.sum(o, dtype=np.float64)) for o in result.pop("outputs")]
    print(json.dumps(result))


def _spawn_minibatch_child(impl: str, args, threads: int) -> dict:
    cache_dir = tempfile.mkdtemp(prefix="cinnlite-shapes-cache-")  # empty: every compile is cold
    env = dict(os.environ, CINNLITE_CACHE_DIR=cache_dir,
               PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
    cmd = [sys.executable, os.path.abspath(__file__), "--minibatch-child", impl, "--threads", str(threads)]
    cmd += ["--quick"] if args.quick else []
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=REPO, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": (proc.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(lines[-1])


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-5 * max(abs(b), 1.0)


def run_minibatches(args, threads: int) -> dict:
    cfg = minibatch_config(args.quick)
    x, batches = minibatch_inputs(cfg)
    impls = [i for i in MINIBATCH_IMPLS if i != "torch-1t" or threads > 1]
    if libraries.torch is None:
        impls = [i for i in impls if not i.startswith("torch")]
    record = {"config": dataclasses.asdict(cfg), "edges": [len(s) for s, _ in batches], "runs": args.runs,
              "impls": {i: {"label": _label(i, threads), "runs": []} for i in impls}, "errors": []}
    print(f"[part 1] {cfg.batches} mini-batches, x ({cfg.nodes}, {cfg.feat}), edges "
          f"{min(record['edges'])}..{max(record['edges'])}: checking ...", end="", flush=True)
    # Correctness first, in this process: every batch of every implementation against numpy.
    loose = Case({}, 0, "", "", exact=False)
    ref_sums = []
    results = {}
    for impl in impls:
        if impl != "torch-1t":  # (the same code as "torch")
            results[impl] = run_sequence(impl, cfg, x, batches, threads)["outputs"]
    for b, (src, dst) in enumerate(batches):
        expected = minibatch_reference(x, src, dst)
        ref_sums.append(float(expected.sum()))
        for impl, outs in results.items():
            try:
                check(loose, expected, outs[b], f"mini-batch {b} ({len(src)} edges) {impl}")
            except AssertionError as exc:
                record["errors"].append(str(exc))
    results = None
    print(" timing ...", end="", flush=True)
    t0 = time.perf_counter()
    for r in range(args.runs):
        for impl in impls[r % len(impls):] + impls[:r % len(impls)]:  # a new order every run
            run = _spawn_minibatch_child(impl, args, threads)
            if "error" not in run and not all(_close(a, b) for a, b in zip(run["sums"], ref_sums)):
                run = {"error": f"a result differs from the reference (run {r})", **run}
            if "error" in run:
                record["errors"].append(f"{impl}: {run['error']}")
            record["impls"][impl]["runs"].append(run)
            time.sleep(0.2)
    print(f" {time.perf_counter() - t0:.0f} s", flush=True)
    for impl, entry in record["impls"].items():
        ok = [run for run in entry["runs"] if "error" not in run]
        if ok:
            entry["total_s"] = statistics.median(run["total_s"] for run in ok)
            entry["totals_s"] = [run["total_s"] for run in ok]
            entry["compile_s"] = statistics.median(sum(run["compile_s"]) for run in ok)
            entry["batch_s"] = [statistics.median(run["batch_s"][b] for run in ok) for b in range(cfg.batches)]
    torch_totals = {i: e["total_s"] for i, e in record["impls"].items() if i.startswith("torch") and "total_s" in e}
    if torch_totals:
        best = min(torch_totals, key=torch_totals.get)
        record["best_torch"] = best
        for impl, entry in record["impls"].items():
            if impl.startswith("cinnlite") and "total_s" in entry:
                entry["torch_over_cinnlite"] = torch_totals[best] / entry["total_s"]
    return record


def _label(impl: str, threads: int) -> str:
    if impl == "torch":
        return f"torch eager, {threads} thread{'s' if threads > 1 else ''}"
    return MINIBATCH_IMPLS[impl]


def print_minibatches(record: dict, markdown: bool):
    cfg = record["config"]
    print(f"Part 1: {cfg['batches']} mini-batches of a message-passing step, x ({cfg['nodes']}, {cfg['feat']}) "
          f"float32, int64 src/dst, edges per batch {record['edges']}")
    print(f"each sequence in a fresh process (imports not timed), first calls and every compile included; "
          f"median of {record['runs']} runs")
    rows = []
    for impl, e in record["impls"].items():
        if "total_s" not in e:
            rows.append([e["label"], "FAILED", "-", "-", "-", "-"])
            continue
        ratio = f"{e['torch_over_cinnlite']:.2f}x" if "torch_over_cinnlite" in e else "-"
        rows.append([e["label"], f"{e['total_s'] * 1e3:.1f}",
                     f"{min(e['totals_s']) * 1e3:.1f} .. {max(e['totals_s']) * 1e3:.1f}",
                     f"{e['compile_s'] * 1e3:.1f}", f"{e['batch_s'][0] * 1e3:.1f}", ratio])
    print(render_table(["implementation", "total ms", "runs min .. max", "compile ms", "batch 1 ms",
                        "torch / cinnlite"], rows, markdown))
    if "best_torch" in record:
        print(f"torch / cinnlite: the faster torch total ({record['best_torch']}) divided by the row's total; "
              f"above 1: cinnlite, compiles included, is faster")
    print()
    ok = [(i, e) for i, e in record["impls"].items() if "batch_s" in e]
    rows = [[str(b + 1), str(edges)] + [f"{e['batch_s'][b] * 1e3:.1f}" for _, e in ok]
            for b, edges in enumerate(record["edges"])]
    print("per batch, ms (median over runs; cinnlite compiles included in the batch they happen in):")
    print(render_table(["batch", "edges"] + [i for i, _ in ok], rows, markdown))
    print()


# -- part 2: symbolic vs static on W1-W6 --------------------------------------------------------

#: Per workload, the input dimensions made symbols (None: the size stays a number), by the name
#: of the input in ``case.arrays``; "shape" is the shape of the program's ``fill_constant`` zeros.
#: The sizes that change from call to call in real use are symbols (rows of a table, indices,
#: batch); the inner feature sizes stay numbers. W4's zeros keep their rows: a ``fill_constant``
#: size may only be a symbol that some input has, and no input of W4 has the table's rows.
SYMBOLIC = {
    "W1": {"x": ("N", None), "idx": ("E",)},
    "W2": {"x": ("B", None), "index": ("B", "K")},
    "W3": {"x": ("R", None), "index": ("M", None)},
    "W4": {"index": ("M", None), "src": ("M", None)},
    "W5": {"index": ("B", "K"), "src": ("B", "K"), "shape": ("B", None)},
    "W6": {"x": ("N", None), "src": ("E",), "dst": ("E", None), "shape": ("N", None)},
}


def _symbolic_shape(shape, spec):
    return tuple(d if s is None else s for d, s in zip(shape, spec))


def symbolic_case(case: Case, spec: dict) -> Case:
    """A stand-in for ``case`` that workloads.py's ``cinnlite_program`` builds the symbolic
    program from: the same inputs, with the shapes of ``spec`` (it reads only ``.shape`` of each
    array and ``extra["shape"]``)."""
    arrays = {k: types.SimpleNamespace(shape=_symbolic_shape(v.shape, spec[k]) if k in spec else v.shape)
              for k, v in case.arrays.items()}
    extra = dict(case.extra)
    if "shape" in spec:
        extra["shape"] = _symbolic_shape(extra["shape"], spec["shape"])
    return dataclasses.replace(case, arrays=arrays, extra=extra)


def _shapes_text(case: Case, spec: dict) -> str:
    parts = []
    for name, arr in case.arrays.items():
        dims = _symbolic_shape(arr.shape, spec[name]) if name in spec else arr.shape
        parts.append(f"{name}[{','.join(str(d) for d in dims)}]")
    if "shape" in spec:
        parts.append(f"zeros[{','.join(str(d) for d in _symbolic_shape(case.extra['shape'], spec['shape']))}]")
    return " ".join(parts)


def _check_passes(exe) -> int:
    """Separate ``mode="raise"`` index-check passes over an index (the checks not folded into
    the loop that reads the index anyway; see schedule_cpu.defer_index_checks)."""
    return exe.source("lowered").count("# parallel_check")


def run_symbolic_vs_static(args, threads: int) -> dict:
    timing_args = types.SimpleNamespace(repeat=args.repeat, warmup=args.warmup, budget=args.budget)
    # The generic code is what is compared: sizes that turn hot would run a static build.
    os.environ["CINNLITE_HOT_SIZE_BYTES"] = "0"
    records = []
    print("[part 2] symbolic vs static:", end="", flush=True)
    for wid, spec in SYMBOLIC.items():
        print(f" {wid}", end="", flush=True)
        workload = WORKLOADS[wid](args.quick)
        case = workload.case(np.random.default_rng(SEED))
        expected = case.reference()
        rec = {"id": wid, "title": workload.title, "shapes": case.shapes, "symbolic": _shapes_text(case, spec),
               "impls": [], "errors": []}
        ready = []
        for name, program in (("static", lambda: workload.cinnlite_program(case)),
                              ("symbolic", lambda: workload.cinnlite_program(symbolic_case(case, spec)))):
            entry = {"impl": name}
            rec["impls"].append(entry)
            try:
                t0 = time.perf_counter()
                exe = cinnlite_compile(program(), threads)
                entry["compile_s"] = time.perf_counter() - t0
                entry["check_passes"] = _check_passes(exe)
                last = {}
                impl = Impl(name, lambda exe=exe, last=last: last.__setitem__("out", exe(**case.arrays)),
                            lambda last=last: last["out"])
                impl.run()
                check(case, expected, impl.result(), f"{wid} {name}")
                ready.append((entry, impl))
            except Exception as exc:  # a wrong result or a failure: recorded, never fatal
                entry["error"] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
                rec["errors"].append(f"{wid} {name}: {exc}")
        if len(ready) == 2:
            warm_up(ready, timing_args)
            samples = interleaved_rounds(ready, timing_args, pause_s=PAUSE_S, alternate=True)
            for entry, impl in ready:
                entry["times_s"] = samples[id(entry)]
                entry["median_s"] = statistics.median(samples[id(entry)])
                try:
                    check(case, expected, impl.result(), f"{wid} {entry['impl']} (after timing)")
                except AssertionError as exc:
                    entry["error"] = "WRONG RESULT"
                    rec["errors"].append(str(exc))
            if all("error" not in e for e, _ in ready):
                rec["ratio"] = ready[1][0]["median_s"] / ready[0][0]["median_s"]
        ready = None
        records.append(rec)
    print(flush=True)
    ratios = {r["id"]: r["ratio"] for r in records if "ratio" in r}
    summary = {}
    if ratios:
        worst = max(ratios, key=ratios.get)
        summary = {"geomean_ratio": math.exp(statistics.fmean(math.log(v) for v in ratios.values())),
                   "worst": worst, "worst_ratio": ratios[worst]}
    return {"workloads": records, **summary}


def print_symbolic_vs_static(result: dict, markdown: bool, repeat: int):
    print(f"Part 2: symbolic vs static programs of W1-W6 (workloads.py sizes); median of up to {repeat} "
          f"interleaved calls each, output allocated by every call")
    rows = []
    for r in result["workloads"]:
        by = {e["impl"]: e for e in r["impls"]}
        st, sy = by["static"], by["symbolic"]
        fmt = lambda e: f"{e['median_s'] * 1e3:.3f}" if "median_s" in e else e.get("error", "-")  # noqa: E731
        ratio = r.get("ratio")
        flag = "" if ratio is None or ratio <= SLOW_RATIO else "  > +10%"
        rows.append([r["id"], r["symbolic"], fmt(st), fmt(sy), "-" if ratio is None else f"{ratio:.3f}{flag}",
                     f"{st.get('check_passes', '-')} / {sy.get('check_passes', '-')}"])
    print(render_table(["id", "symbolic inputs", "static ms", "symbolic ms", "symbolic/static",
                        "check passes static/sym"], rows, markdown))
    if "geomean_ratio" in result:
        print(f"geometric mean symbolic/static {result['geomean_ratio']:.3f}; "
              f"worst {result['worst']} {result['worst_ratio']:.3f}")
    print("check passes: separate passes over an index that only check it (mode='raise'); 0 where the "
          "check is folded into the loop that reads the index anyway")
    print()


# -- command line -------------------------------------------------------------------------------


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smaller sizes, fewer runs (a smoke run)")
    p.add_argument("--part", choices=("1", "2", "both"), default="both", help="which part to run (default both)")
    p.add_argument("--runs", type=int, default=None, help="part 1: fresh-process runs of the whole sequence per "
                                                            "implementation (default 5; 3 with --quick)")
    p.add_argument("--repeat", type=int, default=None,
                   help="part 2: timed calls per program (default 41; 11 with --quick)")
    p.add_argument("--warmup", type=int, default=2, help="part 2: untimed calls first (default 2)")
    p.add_argument("--budget", type=float, default=None,
                   help="part 2: seconds of timed calls per program before stopping early (default 10; 2 with --quick)")
    p.add_argument("--threads", type=int, default=core_count(), help="threads for cinnlite and torch "
                                                                     "(default: the cores this process may use)")
    p.add_argument("--json", metavar="PATH", help="write all results, every sample included, as JSON")
    p.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    p.add_argument("--minibatch-child", metavar="IMPL", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.runs = max(1, args.runs or (3 if args.quick else 5))
    args.repeat = max(3, args.repeat or (11 if args.quick else 41))
    args.budget = args.budget if args.budget is not None else (2.0 if args.quick else 10.0)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    threads = max(1, args.threads)
    if args.minibatch_child:
        minibatch_child(args.minibatch_child, args.quick, threads)
        return 0
    # Compiles in this process (the checks, part 2) go to a fresh disk cache of their own.
    os.environ["CINNLITE_CACHE_DIR"] = tempfile.mkdtemp(prefix="cinnlite-shapes-cache-")
    libraries.import_peers(threads, want_tvm=False)
    libraries.tvm_error = "not used by shapes.py"
    info = machine_info(threads)
    print_machine(info)
    results = {"machine": info, "config": {"quick": args.quick, "runs": args.runs, "repeat": args.repeat,
                                           "warmup": args.warmup, "budget_s": args.budget, "seed": SEED}}
    if args.part in ("1", "both"):
        results["minibatches"] = run_minibatches(args, threads)
    if args.part in ("2", "both"):
        results["symbolic_vs_static"] = run_symbolic_vs_static(args, threads)
    results["loadavg_end"] = load_average()
    print()
    if "minibatches" in results:
        print_minibatches(results["minibatches"], args.markdown)
    if "symbolic_vs_static" in results:
        print_symbolic_vs_static(results["symbolic_vs_static"], args.markdown, args.repeat)
    errors = results.get("minibatches", {}).get("errors", []) + [
        e for r in results.get("symbolic_vs_static", {}).get("workloads", []) for e in r["errors"]]
    if errors:
        print("FAILURES:")
        for e in errors:
            print("  " + e)
    load = results["loadavg_end"]
    if load:
        print(f"load average at the end {load[0]:.2f}")
    if args.json:
        write_json(results, args.json)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
