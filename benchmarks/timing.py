"""Timing the implementations of a workload: interleaved rounds (one call of each per round, the
copy ceiling included) so that a change in machine load hits all of them alike, medians over
the rounds, GB/s from the workload's minimal bytes moved, and speedups relative to cinnlite.

W7 (per-call overhead) is timed in batches of back-to-back calls instead: the median over
batches of the time per call.
"""
from __future__ import annotations

import gc
import statistics
import time

import numpy as np

from arrays import aligned_empty
from correctness import check, fail, prepare_impls
from peers import Impl
from workloads import SEED, Workload

OVERHEAD_BATCHES = 20


def copy_ceiling_impl(bytes_moved: int) -> Impl:
    """np.copyto of bytes_moved / 2 bytes into a preallocated array (a copy reads and writes
    each byte once, so it moves bytes_moved bytes): the bandwidth ceiling."""
    n = max(1, bytes_moved // 2 // 4)
    src = aligned_empty((n,), np.float32)
    src.fill(1.0)
    dst = aligned_empty((n,), np.float32)
    dst.fill(0.0)
    return Impl("copy", lambda: np.copyto(dst, src), lambda: dst, "np.copyto")


def new_record(workload: Workload, case, **fields) -> dict:
    return {"id": workload.id, "title": workload.title, "shapes": case.shapes, **fields, "impls": [], "errors": []}


def run_throughput(workload: Workload, args, threads: int) -> dict:
    """Time every implementation of one workload in interleaved rounds (one call of each per
    round, the copy ceiling included), so that a change in machine load hits all of them alike."""
    rng = np.random.default_rng(SEED)
    case = workload.case(rng)
    expected = case.reference()
    record = new_record(workload, case, bytes_moved=case.bytes_moved, bytes_formula=case.bytes_formula)
    ready = prepare_impls(workload, case, expected, threads, record)
    copy_entry = {"impl": "copy"}
    ready.append((copy_entry, copy_ceiling_impl(case.bytes_moved)))
    warm_up(ready, args)
    samples = interleaved_rounds(ready, args)
    for entry, impl in ready:
        times = samples[id(entry)]
        entry.update(times_s=times, median_s=statistics.median(times),
                     gbps=case.bytes_moved / statistics.median(times) / 1e9)
    record["copy"] = {"median_s": copy_entry["median_s"], "gbps": copy_entry["gbps"], "times_s": copy_entry["times_s"]}
    for entry, impl in ready[:-1]:
        entry["pct_of_copy"] = 100.0 * entry["gbps"] / record["copy"]["gbps"]
        try:  # the result of the last timed call must still be right
            check(case, expected, impl.result(), f"{workload.id} {entry['impl']} (after timing)")
        except Exception as exc:
            fail(record, entry, exc)
    ready = None
    gc.collect()
    add_speedups(record)
    return record


def warm_up(ready: list, args):
    """``args.warmup`` untimed calls of each implementation, cut short after half the budget."""
    for _, impl in ready:
        t0 = time.perf_counter()
        for _ in range(args.warmup):
            impl.run()
            if time.perf_counter() - t0 > args.budget / 2:
                break


def interleaved_rounds(ready: list, args, pause_s: float = 0.0, alternate: bool = False) -> dict:
    """Samples per implementation (keyed by ``id(entry)``): ``args.repeat`` rounds of one call
    each, stopping early once the budget for all of them is spent (after at least 3 rounds).
    ``pause_s``: a sleep before every call, so that one call's tail (threads going idle, other
    processes catching up) does not land on the next; ``alternate``: every other round runs the
    implementations in reverse order, so that none always follows the same one."""
    samples = {id(entry): [] for entry, _ in ready}
    gc.collect()
    start = time.perf_counter()
    for done in range(1, args.repeat + 1):
        for entry, impl in (ready[::-1] if alternate and done % 2 == 0 else ready):
            if pause_s:
                time.sleep(pause_s)
            t0 = time.perf_counter()
            impl.run()
            samples[id(entry)].append(time.perf_counter() - t0)
        if done >= min(3, args.repeat) and time.perf_counter() - start > args.budget * len(ready):
            break
    return samples


def run_overhead(workload: Workload, args, threads: int) -> dict:
    """Per-call time for a tiny input: batches of back-to-back calls, implementations taking
    turns batch by batch; the median over batches of (batch time / calls in the batch)."""
    rng = np.random.default_rng(SEED)
    case = workload.case(rng)
    expected = case.reference()
    calls, batches = (2_000 if args.quick else 10_000), OVERHEAD_BATCHES
    per = calls // batches
    record = new_record(workload, case, calls=calls, batches=batches, unit="us/call")
    ready = prepare_impls(workload, case, expected, threads, record)
    for _, impl in ready:
        for _ in range(per):
            impl.run()
    samples = {id(entry): [] for entry, _ in ready}
    for _ in range(batches):
        for entry, impl in ready:
            run = impl.run
            t0 = time.perf_counter()
            for _ in range(per):
                run()
            samples[id(entry)].append((time.perf_counter() - t0) / per)
    for entry, impl in ready:
        entry.update(times_s=samples[id(entry)], median_s=statistics.median(samples[id(entry)]))
    add_speedups(record)
    return record


def add_speedups(record: dict):
    """``speedup`` on every row: (that peer's time) / (cinnlite's time); on cinnlite's row the
    best peer's time / cinnlite's time. > 1 means cinnlite is faster."""
    timed = {e["impl"]: e["median_s"] for e in record["impls"] if "median_s" in e}
    cl_t = timed.get("cinnlite")
    peers = {k: v for k, v in timed.items() if k != "cinnlite"}
    if peers:
        best = min(peers, key=peers.get)
        record["best_peer"] = best
    for e in record["impls"]:
        if cl_t is None or "median_s" not in e:
            continue
        if e["impl"] == "cinnlite":
            if peers:
                e["speedup"] = peers[record["best_peer"]] / cl_t
        else:
            e["speedup"] = e["median_s"] / cl_t
