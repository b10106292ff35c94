"""The fixed cost of one call: a take of 64 float32 rows (x (1000, 1), 64 int64 indices, axis 0),
small enough that the time is almost all overhead.

cinnlite's static and symbolic (``("N", 1)``, ``("E",)``) executables are timed against
``torch.index_select`` with ``out=`` and without (one torch thread), and ``np.take``. Every
implementation's result is checked first. Then they take turns, batch by batch: each round runs a
batch of back-to-back calls of every implementation, so a change in machine load hits them all
alike; the table gives the median time per call over the rounds (and the best), and the ratio of
each median to torch ``out=``'s and to ``np.take``'s.

    python3 benchmarks/call_overhead.py                 # 30 rounds of 2000 calls each
    python3 benchmarks/call_overhead.py --rounds 60 --batch 5000
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import libraries  # noqa: E402
from machine import machine_info, print_machine  # noqa: E402

ROWS, COUNT = 1000, 64


def cinnlite_takes():
    """The static and the symbolic executable of the take."""
    import cinnlite as cl

    # The symbolic executable's own generic code is what is timed: its sizes never turn hot (sizes
    # that do run a static build, as the static executable does).
    os.environ["CINNLITE_HOT_SIZE_BYTES"] = "0"
    exes = {}
    for label, x_shape, i_shape in (("static", (ROWS, 1), (COUNT,)), ("symbolic", ("N", 1), ("E",))):
        b = cl.NetBuilder(f"take_{label}")
        x = b.create_input(cl.Float(32), x_shape, "x")
        i = b.create_input(cl.Int(64), i_shape, "i")
        exes[label] = cl.compile(b.build([b.take(x, i, axis=0)]), threads=1)
    return exes


def implementations(x: np.ndarray, idx: np.ndarray) -> dict:
    """name -> a call with no arguments that returns the result."""
    exes = cinnlite_takes()
    impls = {f"cinnlite {label}": (lambda exe=exe: exe(x=x, i=idx)) for label, exe in exes.items()}
    torch = libraries.torch
    if torch is not None:
        tx, ti, out = torch.from_numpy(x), torch.from_numpy(idx), torch.empty(COUNT, 1)
        impls["torch out="] = lambda: torch.index_select(tx, 0, ti, out=out)
        impls["torch"] = lambda: torch.index_select(tx, 0, ti)
    impls["numpy take"] = lambda: np.take(x, idx, axis=0)
    return impls


def check(impls: dict, expected: np.ndarray):
    for name, call in impls.items():
        got = call()
        got = got.numpy() if hasattr(got, "numpy") else got
        np.testing.assert_array_equal(got, expected, err_msg=name)


def per_call_us(call, n: int) -> float:
    t = time.perf_counter_ns()
    for _ in range(n):
        call()
    return (time.perf_counter_ns() - t) / n / 1e3


def interleaved(impls: dict, rounds: int, batch: int) -> dict:
    """name -> microseconds per call, one sample per round; the order turns every round."""
    samples = {name: [] for name in impls}
    names = list(impls)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            samples[name].append(per_call_us(impls[name], batch))
    return samples


def report(samples: dict):
    med = {name: statistics.median(s) for name, s in samples.items()}
    refs = [ref for ref in ("torch out=", "numpy take") if ref in med]
    print(f"{'implementation':18s} {'median us':>9s} {'best us':>8s}" + "".join(f" {'/ ' + r:>13s}" for r in refs))
    for name, s in samples.items():
        ratios = "".join(f" {med[name] / med[r]:13.2f}" for r in refs)
        print(f"{name:18s} {med[name]:9.2f} {min(s):8.2f}{ratios}")
    if "cinnlite static" in med and "cinnlite symbolic" in med:
        print(f"\nsymbolic - static: {med['cinnlite symbolic'] - med['cinnlite static']:+.2f} us per call")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30, help="rounds of batches (default 30)")
    parser.add_argument("--batch", type=int, default=2000, help="calls per batch (default 2000)")
    args = parser.parse_args(argv)
    libraries.import_peers(1, want_tvm=False)
    libraries.tvm_error = "not a peer here"
    print_machine(machine_info(1))
    rng = np.random.default_rng(0)
    x = rng.random((ROWS, 1), dtype=np.float32)
    idx = rng.integers(0, ROWS, COUNT, dtype=np.int64)
    impls = implementations(x, idx)
    check(impls, np.take(x, idx, axis=0))
    for call in impls.values():  # warm up: first calls, plans, caches
        per_call_us(call, 200)
    report(interleaved(impls, args.rounds, args.batch))
    return 0


if __name__ == "__main__":
    sys.exit(main())
