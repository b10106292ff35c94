"""Soak run: threads, compiles, calls, interrupts, forks and cache damage, all at once.

For a few minutes (``--seconds``) this script keeps cinnlite busy the way a long-lived service
and a hostile neighbour would, and checks every result it gets:

- **callers** (threads) call a set of compiled executables (take, gather, scatter with a
  reduction, a fused message-passing step) with fresh random inputs, sometimes with a bad index
  in ``mode="raise"``; every result is compared with numpy and every error must be the expected
  ``IndexOutOfRangeError`` naming the bad position;
- a **compiler** thread compiles programs of new shapes into the shared disk cache while the
  callers run, and checks each new executable once;
- a **vandal** thread damages the disk cache: it flips bytes in entries, truncates them and
  plants files that are not entries;
- a **child** loop starts fresh processes on the damaged cache: each compiles (from the cache
  where an entry is intact) and runs the programs, is interrupted with SIGINT during a parallel
  call, checks that the next call is still correct, forks, and checks a parallel call in the
  forked child. A child that crashes, hangs or computes a wrong result is a failure.

The report counts calls made, results checked, errors expected and seen, compiles, damaged
entries and child processes. The exit status is 1 on any wrong result, unexpected error, crash
or hang.

    python3 benchmarks/soak.py                 # three minutes
    python3 benchmarks/soak.py --seconds 600 --callers 4
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter
from typing import Callable, NamedTuple

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import cinnlite as cl  # noqa: E402

ROWS, WIDTH = 4096, 32


class Case(NamedTuple):
    program: object
    make_inputs: Callable      # rng -> {name: array}
    reference: Callable        # inputs -> the expected output
    index_name: str            # the index input a bad value is put into
    error_position: Callable   # its position -> the position the error names


def programs(rows: int = ROWS, width: int = WIDTH, n: int = 20000) -> dict:
    """The soak's programs by name."""
    progs = {}

    b = cl.NetBuilder("soak_take")
    x, i = b.create_input("float32", (rows, width), "x"), b.create_input("int64", (n,), "i")
    progs["take"] = Case(b.build([b.take(x, i, axis=0)]),
                     lambda rng: dict(x=rng.standard_normal((rows, width), np.float32),
                                      i=rng.integers(-rows, rows, n)),
                     lambda a: np.take(a["x"], a["i"], axis=0), "i", tuple)

    b = cl.NetBuilder("soak_gather")
    x, i = b.create_input("float64", (rows, width), "x"), b.create_input("int32", (rows, 8), "i")
    progs["gather"] = Case(b.build([b.gather(x, i, axis=1)]),
                       lambda rng: dict(x=rng.standard_normal((rows, width)),
                                        i=rng.integers(0, width, (rows, 8)).astype(np.int32)),
                       lambda a: np.take_along_axis(a["x"], a["i"].astype(np.int64), axis=1), "i", tuple)

    b = cl.NetBuilder("soak_message_passing")
    x = b.create_input("float32", (rows, width), "x")
    src, dst = b.create_input("int64", (n,), "src"), b.create_input("int64", (n,), "dst")
    zeros = b.fill_constant((rows, width), 0.0, "float32")
    out = b.scatter_nd(zeros, b.reshape(dst, (n, 1)), b.take(x, src, axis=0), reduce="add")

    def message_passing(a):
        want = np.zeros((rows, width), np.float64)
        np.add.at(want, a["dst"], a["x"][a["src"]].astype(np.float64))
        return want.astype(np.float32)

    progs["message_passing"] = Case(b.build([out]),
                                lambda rng: dict(x=rng.integers(-4, 5, (rows, width)).astype(np.float32),
                                                 src=rng.integers(0, rows, n), dst=rng.integers(0, rows, n)),
                                message_passing, "dst", lambda p: (p[0], 0))  # dst reshaped to (n, 1)
    return progs


def spoil(inputs: dict, name: str, rng) -> tuple:
    """Put an out-of-range value into index input ``name``; returns its position."""
    arr = inputs[name].copy()
    pos = int(rng.integers(arr.size))
    arr.reshape(-1)[pos] = np.iinfo(arr.dtype).max
    inputs[name] = arr
    return tuple(int(p) for p in np.unravel_index(pos, arr.shape))


class Soak:
    def __init__(self, seconds: float, callers: int, cache_dir: str):
        self.deadline = time.monotonic() + seconds
        self.cache_dir = cache_dir
        self.callers = callers
        self.counts = Counter()
        self.failures: list = []
        self.lock = threading.Lock()

    def count(self, key, n=1):
        with self.lock:
            self.counts[key] += n

    def fail(self, what: str):
        with self.lock:
            self.failures.append(what)
        print("FAIL:", what, file=sys.stderr)

    def running(self) -> bool:
        return time.monotonic() < self.deadline and len(self.failures) < 20

    # -- workers -------------------------------------------------------------------------------

    def caller(self, seed: int, exes: dict):
        rng = np.random.default_rng(seed)
        names = sorted(exes)
        while self.running():
            name = names[int(rng.integers(len(names)))]
            exe, case = exes[name]
            inputs = case.make_inputs(rng)
            bad = rng.random() < 0.2
            position = case.error_position(spoil(inputs, case.index_name, rng)) if bad else None
            try:
                got = exe(**inputs)
            except cl.IndexOutOfRangeError as err:
                self.count("errors seen")
                if not bad or f"position {position}" not in str(err):
                    self.fail(f"{name}: unexpected error {err}")
                continue
            except Exception as err:  # noqa: BLE001 - every other error is a finding
                self.fail(f"{name}: {type(err).__name__}: {err}")
                continue
            finally:
                self.count("calls")
            if bad:
                self.fail(f"{name}: a bad index at {position} raised nothing")
            elif not np.array_equal(got, case.reference(inputs)):
                self.fail(f"{name}: wrong result")
            else:
                self.count("results checked")

    def compiler(self):
        rng = np.random.default_rng(7)
        while self.running():
            rows = int(rng.integers(16, 4096))
            case = programs(rows=rows, width=int(rng.integers(1, 64)), n=1000)["take"]
            exe = cl.compile(case.program, threads=int(rng.integers(1, 4)))
            inputs = case.make_inputs(rng)
            if not np.array_equal(exe(**inputs), case.reference(inputs)):
                self.fail(f"compile of rows={rows}: wrong result")
            self.count("compiles")

    def vandal(self):
        rnd = random.Random(11)
        while self.running():
            time.sleep(0.2)
            entries = [os.path.join(d, f) for d, _, files in os.walk(self.cache_dir) for f in files]
            if not entries:
                continue
            path = rnd.choice(entries)
            try:
                with open(path, "r+b") as f:
                    data = bytearray(f.read())
                    how = rnd.choice(["flip", "truncate", "garbage"])
                    if how == "flip" and data:
                        for _ in range(8):
                            data[rnd.randrange(len(data))] ^= 0xFF
                    elif how == "truncate":
                        data = data[: rnd.randrange(len(data) + 1)]
                    else:
                        data = bytearray(os.urandom(rnd.randrange(1, 4096)))
                    f.seek(0)
                    f.truncate()
                    f.write(data)
                self.count("cache entries damaged")
            except OSError:
                pass  # an entry replaced or removed under us

    def children(self):
        while self.running():
            env = dict(os.environ, CINNLITE_CACHE_DIR=self.cache_dir)
            try:
                proc = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                                      text=True, timeout=120)
            except subprocess.TimeoutExpired:
                self.fail("a child process hung")
                continue
            self.count("child processes")
            if proc.returncode != 0:
                self.fail(f"child exited with {proc.returncode}: {proc.stderr[-2000:]}")
                continue
            report = json.loads(proc.stdout.strip().splitlines()[-1])
            for key, value in report.items():
                self.count(f"child {key}", value)

    def run(self) -> int:
        exes = {name: (cl.compile(case.program, threads=2), case) for name, case in programs().items()}
        workers = [threading.Thread(target=self.caller, args=(s, exes)) for s in range(self.callers)]
        workers += [threading.Thread(target=f) for f in (self.compiler, self.vandal, self.children)]
        start = time.monotonic()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        self.counts["seconds"] = round(time.monotonic() - start, 1)
        print(json.dumps(dict(sorted(self.counts.items())), indent=1))
        print(f"{len(self.failures)} failure(s)")
        return 1 if self.failures else 0


#: One child process: compile from the (damaged) cache, run, get interrupted, fork.
CHILD = textwrap.dedent(f"""
    import json, os, signal, sys, threading, time
    import numpy as np
    sys.path.insert(0, {HERE!r})
    from soak import programs
    import cinnlite as cl
    rng = np.random.default_rng(os.getpid())
    counts = dict(calls=0, interrupts=0, forks=0)
    progs = programs(n=200000)
    exes = {{name: cl.compile(case.program, threads=2) for name, case in progs.items()}}
    def check(name):
        a = progs[name].make_inputs(rng)
        assert np.array_equal(exes[name](**a), progs[name].reference(a)), name
        counts["calls"] += 1
    for name in exes:
        check(name)
    exe = exes["message_passing"]
    a = progs["message_passing"].make_inputs(rng)
    timer = threading.Timer(0.001 + rng.random() * 0.01, os.kill, (os.getpid(), signal.SIGINT))
    try:
        timer.start()
        for _ in range(50):
            exe(**a)
    except KeyboardInterrupt:
        counts["interrupts"] += 1
    timer.join()
    time.sleep(0.05)
    check("message_passing")
    pid = os.fork()
    if pid == 0:
        try:
            check("take")
            check("message_passing")
            os._exit(0)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert status == 0, f"forked child failed: {{status}}"
    counts["forks"] += 1
    print(json.dumps(counts))
""")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=180.0)
    parser.add_argument("--callers", type=int, default=3, help="threads calling executables")
    parser.add_argument("--cache-dir", default=None, help="disk cache to use (default: a new temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="cinnlite-soak-") as tmp:
        cache_dir = args.cache_dir or tmp
        os.environ["CINNLITE_CACHE_DIR"] = cache_dir
        print(f"soak: {args.seconds:.0f} s, {args.callers} caller threads, cache {cache_dir}")
        return Soak(args.seconds, args.callers, cache_dir).run()


if __name__ == "__main__":
    sys.exit(main())
