"""Concurrency: one executable called from many threads at once, compiles racing in threads, and
several processes compiling the same program into one disk cache (``CINNLITE_CACHE_DIR``) at
once. Every result must be correct; no call may see another call's buffers or errors.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import cinnlite as cl
import reference as R

THREADS = 8
CALLS = 200


def _run_threads(worker, n=THREADS):
    """Start ``n`` threads on ``worker(thread_id)`` behind a barrier; re-raise the first failure."""
    barrier = threading.Barrier(n)
    errors = []

    def body(t):
        try:
            barrier.wait()
            worker(t)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append((t, e))

    threads = [threading.Thread(target=body, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=300)
    assert not any(th.is_alive() for th in threads), "a thread did not finish: deadlock?"
    if errors:
        t, e = errors[0]
        raise AssertionError(f"{len(errors)} thread(s) failed; thread {t}: {e!r}") from e


def _small_program():
    """Gathers and scatters with several kinds of buffer: inputs, an intermediate, a mean's
    scratch counts, and a raise-mode check."""
    b = cl.NetBuilder("concurrent_small")
    x = b.create_input("float64", (6, 5), "x")
    i = b.create_input("int64", (4, 5), "i")
    s = b.create_input("float64", (4, 5), "s")
    g = b.gather(x, i, axis=0, name="g")
    t = b.take(g, b.create_input("int32", (3,), "j"), axis=1, mode="wrap", name="t")
    m = b.scatter(x, i, s, axis=0, reduce="mean", name="m")
    return b.build(outputs=[g, t, m])


def _small_inputs(seed):
    rng = np.random.default_rng(seed)
    return dict(x=rng.integers(-50, 50, (6, 5)).astype(np.float64) / 4,
                i=rng.integers(-6, 6, (4, 5)).astype(np.int64),
                s=rng.integers(-50, 50, (4, 5)).astype(np.float64) / 4,
                j=rng.integers(-20, 20, (3,)).astype(np.int32))


def _small_expected(a):
    g = R.gather(a["x"], a["i"], axis=0)
    return (g, R.take(g, a["j"], axis=1, mode="wrap"), R.scatter(a["x"], a["i"], a["s"], axis=0, reduce="mean"))


def test_one_executable_from_8_threads_200_calls_each(backend):
    exe = cl.compile(_small_program(), target=backend)
    cases = [_small_inputs(seed) for seed in range(32)]
    wants = [_small_expected(a) for a in cases]

    def worker(t):
        for call in range(CALLS):
            k = (t * 7 + call) % len(cases)
            args = {name: arr.copy() for name, arr in cases[k].items()}
            if call % 10 == t % 10:
                # Some calls fail their range check; each must report its own bad position.
                bad = (call % 4, (call + t) % 5)
                args["i"][bad] = 6 + t
                with pytest.raises(cl.IndexOutOfRangeError) as info:
                    exe(**args)
                assert info.value.position == bad and info.value.value == 6 + t
                continue
            got = exe(**args)
            for g, w in zip(got, wants[k]):
                np.testing.assert_allclose(g, w, rtol=1e-12, err_msg=f"thread {t} call {call}")

    _run_threads(worker)


def test_parallel_executable_from_8_threads(backend):
    """A program big enough that each call itself runs on several threads (where the backend
    splits work), called from 8 threads at once."""
    b = cl.NetBuilder("concurrent_big")
    x = b.create_input("float32", (512, 256), "x")
    i = b.create_input("int64", (512, 256), "i")
    g = b.gather(x, i, axis=1, mode="clip")
    u = b.scatter(x, i, b.fill_constant((512, 256), 1.0, "float32"), axis=1, reduce="add", mode="wrap")
    exe = cl.compile(b.build(outputs=[g, u]), target=backend)
    cases = []
    for seed in range(8):
        rng = np.random.default_rng(100 + seed)
        xs = rng.integers(-1000, 1000, (512, 256)).astype(np.float32)
        idx = rng.integers(-300, 300, (512, 256))
        want_g = np.take_along_axis(xs, np.clip(idx, 0, 255), axis=1)  # numpy's clip: negatives go to 0
        want_u = xs.copy()
        rows = np.repeat(np.arange(512), 256)
        np.add.at(want_u, (rows, (idx % 256).reshape(-1)), 1.0)
        cases.append((xs, idx, want_g, want_u))

    def worker(t):
        for call in range(CALLS // 8):
            xs, idx, want_g, want_u = cases[(t + call) % len(cases)]
            got_g, got_u = exe(x=xs, i=idx)
            np.testing.assert_array_equal(got_g, want_g, err_msg=f"thread {t} call {call}")
            np.testing.assert_array_equal(got_u, want_u, err_msg=f"thread {t} call {call}")

    _run_threads(worker)


def test_compiling_from_8_threads_at_once(backend):
    """Compiles race in threads (same program and different ones); every executable works."""
    results = {}

    def worker(t):
        b = cl.NetBuilder(f"racing_{t % 2}")
        x = b.create_input("int32", (5, 4), "x")
        i = b.create_input("int64", (3, 4), "i")
        y = b.gather(x, i, axis=0, mode="wrap") if t % 2 else b.take(x, i, axis=0, mode="clip")
        exe = cl.compile(b.build(outputs=[y]), target=backend)
        xs = np.arange(20, dtype=np.int32).reshape(5, 4) * (t + 1)
        idx = (np.arange(12).reshape(3, 4) * 3 - 7)
        got = exe(x=xs, i=idx)
        want = R.gather(xs, idx, axis=0, mode="wrap") if t % 2 else R.take(xs, idx, axis=0, mode="clip")
        np.testing.assert_array_equal(got, want)
        results[t] = True

    _run_threads(worker)
    assert len(results) == THREADS


# -- several processes, one disk cache ------------------------------------------------------------

CACHE_CHILD = textwrap.dedent("""
    import os, sys, time
    import numpy as np
    import cinnlite as cl
    backend, go = sys.argv[1], sys.argv[2]
    b = cl.NetBuilder("cached_program")
    x = b.create_input("float32", (64, 33), "x")
    i = b.create_input("int64", (40, 33), "i")
    s = b.create_input("float32", (40, 33), "s")
    g = b.gather(x, i, axis=0, mode="wrap")
    u = b.scatter(x, i, s, axis=0, reduce="add", mode="wrap")
    prog = b.build(outputs=[g, u])
    while not os.path.exists(go):   # start compiling together
        time.sleep(0.001)
    exe = cl.compile(prog, target=backend)
    rng = np.random.default_rng(int(sys.argv[3]))
    xs = rng.integers(-9, 9, (64, 33)).astype(np.float32)
    idx = rng.integers(-200, 200, (40, 33))
    src = rng.integers(-9, 9, (40, 33)).astype(np.float32)
    got_g, got_u = exe(x=xs, i=idx, s=src)
    cols = np.broadcast_to(np.arange(33), idx.shape)
    want_g = xs[idx % 64, cols]
    want_u = xs.copy()
    for p in np.ndindex(*idx.shape):
        want_u[idx[p] % 64, p[1]] += src[p]
    assert np.array_equal(got_g, want_g), "gather result differs"
    assert np.array_equal(got_u, want_u), "scatter result differs"
    print("OK")
""")


def test_processes_compiling_the_same_program_into_one_disk_cache(backend, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    go = tmp_path / "go"
    env = dict(os.environ, CINNLITE_CACHE_DIR=str(cache))
    n = 6
    procs = [subprocess.Popen([sys.executable, "-c", CACHE_CHILD, backend, str(go), str(k)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(n)]
    go.touch()
    outs = [p.communicate(timeout=300) for p in procs]
    for k, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0 and out.strip() == "OK", f"process {k}: rc={p.returncode}\n{out}\n{err[-3000:]}"
    entries = [p for p in cache.rglob("*") if p.is_file()]
    assert entries, "no process left an entry in CINNLITE_CACHE_DIR"
    # A later process compiles the same program with the cache in place, and is still right.
    go2 = tmp_path / "go2"
    go2.touch()
    later = subprocess.run([sys.executable, "-c", CACHE_CHILD, backend, str(go2), "99"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert later.returncode == 0 and later.stdout.strip() == "OK", later.stderr[-3000:]
    assert [p for p in cache.rglob("*") if p.is_file()], "the cache entry disappeared"


# -- determinism -----------------------------------------------------------------------------------


@pytest.mark.parametrize("reduce", ["none", "add", "mean", "max"])
def test_scatter_results_are_bit_identical_across_runs_and_thread_counts(backend, reduce):
    """Many updates per element with float sums that depend on the order of the adds: every run,
    with one thread or many, gives the same bits, and the bits of the row-major order that
    SEMANTICS.md fixes (the numpy reference)."""
    rng = np.random.default_rng(7)
    rows, cols, n = 64, 48, 256
    xs = rng.standard_normal((rows, cols)).astype(np.float32)
    idx = rng.integers(-rows, rows, (n, cols))          # about 4 updates per element
    src = (rng.standard_normal((n, cols)) * 1e3).astype(np.float32)
    want = R.scatter(xs, idx, src, axis=0, reduce=reduce)

    def compiled(threads):
        b = cl.NetBuilder(f"deterministic_{reduce}")
        x = b.create_input("float32", (rows, cols), "x")
        i = b.create_input("int64", (n, cols), "i")
        s = b.create_input("float32", (n, cols), "s")
        return cl.compile(b.build(outputs=[b.scatter(x, i, s, axis=0, reduce=reduce)]), target=backend,
                          deterministic=True, threads=threads)

    results = []
    for threads in (1, None, 3):
        exe = compiled(threads)
        for _ in range(3):
            results.append(exe(x=xs, i=idx, s=src))
    for got in results:
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
