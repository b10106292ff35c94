"""Multi-threaded CPU execution: every split gives exactly the serial result, scatters keep
their per-element update order, and mode="raise" still reports the first bad position."""
import ctypes
import time

import numpy as np
import pytest

import cinnlite as cl
import reference as R
from cinnlite import NetBuilder
from cinnlite.codegen.llvm import stage_rate_global
from cinnlite.runtime.cpu import PARALLEL_MIN_WORK

N = 4 * PARALLEL_MIN_WORK  # big enough that every stage is split


def run_both(prog, threads, **inputs):
    serial = cl.compile(prog, threads=1)(**inputs)
    parallel = cl.compile(prog, threads=threads)(**inputs)
    return serial, parallel


@pytest.mark.parametrize("threads", [2, 3, 5])
@pytest.mark.parametrize("reduce", ["none", "add", "mul", "max", "min", "mean"])
def test_scatter_nd_rows_with_duplicates_matches_serial_exactly(threads, reduce):
    rng = np.random.default_rng(1)
    b = NetBuilder("sc")
    x = b.create_input("float32", (97, 8), "x")
    idx = b.create_input("int64", (N // 8, 1), "idx")
    src = b.create_input("float32", (N // 8, 8), "src")
    prog = b.build([b.scatter_nd(x, idx, src, reduce=reduce, mode="wrap")])
    X = rng.standard_normal((97, 8)).astype(np.float32)
    I = rng.integers(-300, 300, (N // 8, 1))
    S = rng.standard_normal((N // 8, 8)).astype(np.float32)
    serial, parallel = run_both(prog, threads, x=X, idx=I, src=S)
    np.testing.assert_array_equal(serial, parallel)  # bit for bit: same order per element
    if reduce == "none":
        want = X.copy()
        for k in range(I.shape[0]):
            want[I[k, 0] % 97] = S[k]
        np.testing.assert_array_equal(parallel, want)


@pytest.mark.parametrize("threads", [2, 4])
def test_scatter_along_inner_axis_matches_serial(threads):
    rng = np.random.default_rng(2)
    b = NetBuilder("sc1")
    z = b.fill_constant((64, 512), 0.0, "float64")
    idx = b.create_input("int32", (64, 1024), "idx")
    src = b.create_input("float64", (64, 1024), "src")
    prog = b.build([b.scatter(z, idx, src, axis=1, reduce="add")])
    I = rng.integers(0, 512, (64, 1024)).astype(np.int32)
    S = rng.standard_normal((64, 1024))
    serial, parallel = run_both(prog, threads, idx=I, src=S)
    np.testing.assert_array_equal(serial, parallel)
    want = np.zeros((64, 512))
    for r in range(64):
        np.add.at(want[r], I[r], S[r])
    np.testing.assert_allclose(parallel, want, rtol=1e-12)


@pytest.mark.parametrize("threads", [2, 3])
def test_gathers_match_serial(threads):
    rng = np.random.default_rng(3)
    b = NetBuilder("g")
    x = b.create_input("int16", (300, 40), "x")
    i = b.create_input("int64", (N // 40,), "i")
    e = b.create_input("int64", (300, 40), "e")
    nd = b.create_input("int32", (N, 2), "nd")
    prog = b.build([b.take(x, i, mode="clip"), b.gather(x, e, axis=0, mode="fill", fill_value=-1),
                    b.gather_nd(x, nd, mode="wrap")])
    X = rng.integers(-1000, 1000, (300, 40)).astype(np.int16)
    I, E = rng.integers(-400, 400, N // 40), rng.integers(-400, 400, (300, 40))
    ND = rng.integers(-500, 500, (N, 2)).astype(np.int32)
    serial, parallel = run_both(prog, threads, x=X, i=I, e=E, nd=ND)
    for s, p in zip(serial, parallel):
        np.testing.assert_array_equal(s, p)
    np.testing.assert_array_equal(parallel[2], X[ND[:, 0] % 300, ND[:, 1] % 40])


@pytest.mark.parametrize("threads", [2, 3, 7])
@pytest.mark.parametrize("bad_positions", [[N - 5], [17, N - 5], [N // 2, N // 2 + 1], [N // 3 * 2, 1]])
def test_raise_reports_the_first_bad_position_whatever_the_split(threads, bad_positions):
    b = NetBuilder("r")
    x = b.create_input("float32", (10, 4), "x")
    i = b.create_input("int64", (N,), "i")
    exe = cl.compile(b.build([b.take(x, i)]), threads=threads)
    I = np.zeros(N, np.int64)
    for k, p in enumerate(bad_positions):
        I[p] = 10 + k
    with pytest.raises(cl.IndexOutOfRangeError) as info:
        exe(x=np.zeros((10, 4), np.float32), i=I)
    first = min(bad_positions)
    assert info.value.position == (first,)
    assert info.value.value == I[first]


# -- the native pool -------------------------------------------------------------------------------

native_pool = pytest.importorskip("cinnlite.runtime.native_pool")


def _posted_stages() -> int:
    """How many stages the native pool has run split (its sequence number moves by 2 a stage)."""
    return int(native_pool.shared_native_pool()._record[native_pool.SEQ]) // 2


def _take_program(rows, n):
    b = NetBuilder("native_take")
    x = b.create_input("float32", (rows, 16), "x")
    i = b.create_input("int64", (n,), "i")
    return b.build([b.take(x, i, axis=0)])


def _native() -> bool:
    pool = native_pool.shared_native_pool()
    return pool is not None and pool.native


@pytest.mark.skipif("not _native()", reason="no futex here: stages split on the Python pool")
@pytest.mark.parametrize("symbolic", [False, True])
def test_main_splits_big_stages_on_the_native_pool(symbolic):
    """A big stage runs split by the program's main (static and symbolic sizes alike); a small
    one runs whole on the caller; a one-thread executable never splits."""
    rng = np.random.default_rng(5)
    prog = _take_program("R", "E") if symbolic else _take_program(1000, N)
    x, i = rng.standard_normal((1000, 16)).astype(np.float32), rng.integers(0, 1000, N)
    exe = cl.compile(prog, threads=2)
    record = _pool_record()
    record[native_pool.WAKE_NS] = record[native_pool.WAKE_CALL_NS] = 0  # waking costs nothing: always worth it
    assert not any(exe._python_splits)
    before = _posted_stages()
    np.testing.assert_array_equal(exe(x=x, i=i), x[i])
    assert _posted_stages() > before
    if symbolic:
        before = _posted_stages()
        np.testing.assert_array_equal(exe(x=x, i=i[:100]), x[i[:100]])
        assert _posted_stages() == before
    before = _posted_stages()
    np.testing.assert_array_equal(cl.compile(prog, threads=1)(x=x, i=i), x[i])
    assert _posted_stages() == before


def _pool_record():
    return native_pool.shared_native_pool()._record


def _rate_slots(exe) -> list:
    """The measured times per iteration of the stages every call runs, as int64s over the
    program's memory."""
    addresses = [exe._engine.get_global_value_address(stage_rate_global(info.symbol))
                 for info, _ in exe._stages if info.kind != "deferred_check"]
    return [ctypes.c_int64.from_address(a) for a in addresses if a]


def _until(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def _all_helpers_asleep() -> bool:
    record = _pool_record()
    return record[native_pool.SLEEPERS] >= record[native_pool.STARTED] > 0


@pytest.mark.skipif("not _native()", reason="no futex here: stages split on the Python pool")
def test_sleeping_helpers_are_woken_only_for_stages_longer_than_waking_them():
    """With every helper asleep, a stage measured to take less than twice what waking them took
    runs whole on the caller (nothing posted, nobody woken, its time measured again, the
    wake-up estimates fading): whether the helper was slow to run or the wake-up call held the
    caller; a longer one is split, the woken helper measures how long it took to wake, and the
    caller how long the call held it."""
    rng = np.random.default_rng(9)
    x, i = rng.standard_normal((999, 16)).astype(np.float32), rng.integers(0, 999, N)
    exe = cl.compile(_take_program(999, N), threads=2)
    np.testing.assert_array_equal(exe(x=x, i=i), x[i])  # starts the helper
    rates, record = _rate_slots(exe), _pool_record()
    assert rates
    slots = (native_pool.WAKE_NS, native_pool.WAKE_CALL_NS)
    kept = [record[k] for k in slots]
    try:
        for slow in slots:  # a second for the helper to run, or for the call to return
            record[native_pool.WAKE_NS] = record[native_pool.WAKE_CALL_NS] = 1
            record[slow] = 10**9
            for rate in rates:
                rate.value = 1  # a picosecond per iteration
            assert _until(_all_helpers_asleep)
            record[native_pool.LAST_END] = 0  # no stage lately: not a stream of calls
            before, record[native_pool.WOKEN_AT] = _posted_stages(), 0
            np.testing.assert_array_equal(exe(x=x, i=i), x[i])
            assert _posted_stages() == before and record[native_pool.WOKEN_AT] == 0 and _all_helpers_asleep()
            assert all(rate.value > 1 for rate in rates)
            assert record[slow] < 10**9  # unmeasured, the estimate fades

        record[native_pool.WAKE_NS] = record[native_pool.WAKE_CALL_NS] = 1
        for rate in rates:
            rate.value = 10**6  # a microsecond per iteration
        assert _until(_all_helpers_asleep)
        before = _posted_stages()
        np.testing.assert_array_equal(exe(x=x, i=i), x[i])
        assert _posted_stages() > before
        assert record[native_pool.WAKE_CALL_NS] != 1
        assert _until(lambda: record[native_pool.WAKE_NS] != 1)
    finally:
        for k, value in zip(slots, kept):
            record[k] = value


@pytest.mark.skipif("not _native()", reason="no futex here: stages split on the Python pool")
def test_a_quick_stage_right_after_another_wakes_the_helpers_for_the_next():
    """Calls that follow each other closely are a stream: a stage too quick to wake the
    sleeping helpers for still runs whole on the caller, but wakes them, so that the next
    stages find them spinning."""
    rng = np.random.default_rng(4)
    x, i = rng.standard_normal((998, 16)).astype(np.float32), rng.integers(0, 998, N)
    exe = cl.compile(_take_program(998, N), threads=2)
    np.testing.assert_array_equal(exe(x=x, i=i), x[i])
    rates, record = _rate_slots(exe), _pool_record()
    kept = record[native_pool.WAKE_NS], record[native_pool.WAKE_CALL_NS]
    try:
        record[native_pool.WAKE_NS] = record[native_pool.WAKE_CALL_NS] = 10**9
        for rate in rates:
            rate.value = 1
        assert _until(_all_helpers_asleep)
        record[native_pool.LAST_END] = time.monotonic_ns()  # a stage ended just now
        before = _posted_stages()
        np.testing.assert_array_equal(exe(x=x, i=i), x[i])
        assert _posted_stages() == before  # run whole on the caller...
        assert record[native_pool.WAKE_CALL_NS] < 10**9  # ...after waking the helpers
        assert _until(lambda: record[native_pool.WAKE_NS] < 10**9)
    finally:
        record[native_pool.WAKE_NS], record[native_pool.WAKE_CALL_NS] = kept


def test_helpers_are_bound_to_the_cores_after_the_first():
    """Helper k runs on the (k+1)-th core the process may use (round), the caller's thread is
    left alone, and ``CINNLITE_BIND_THREADS=0`` (or a single core) binds nothing."""
    assert [native_pool.helper_core(k, [3, 5, 8]) for k in range(4)] == [5, 8, 3, 5]
    assert native_pool.helper_core(0, [2]) is None and native_pool.helper_core(0, None) is None


@pytest.mark.skipif("not _native()", reason="no futex here: stages split on the Python pool")
@pytest.mark.parametrize("bind", ["1", "0"])
def test_native_helpers_run_on_their_own_core_unless_told_not_to(bind):
    import os
    import subprocess
    import sys
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one core: nothing to bind helpers to")
    code = (
        "import os, threading, numpy as np, cinnlite as cl\n"
        "from cinnlite import NetBuilder\n"
        "b = NetBuilder('t'); x = b.create_input('float32', (64, 16), 'x')\n"
        f"i = b.create_input('int64', ({N},), 'i'); prog = b.build([b.take(x, i, axis=0)])\n"
        f"cl.compile(prog, threads=2)(x=np.ones((64, 16), np.float32), i=np.zeros({N}, np.int64))\n"
        "helpers = [t for t in threading.enumerate() if t.name.startswith('cinnlite-native-worker')]\n"
        "print((sorted(os.sched_getaffinity(0)), [sorted(os.sched_getaffinity(t.native_id)) for t in helpers]))\n")
    env = dict(os.environ, CINNLITE_BIND_THREADS=bind)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    caller, helpers = eval(out)  # noqa: S307 - our own two lists
    assert len(helpers) == 1 and caller == sorted(os.sched_getaffinity(0))
    assert helpers[0] == ([caller[1]] if bind == "1" else caller)


def test_threads_calling_at_once_all_get_their_own_right_results():
    """Callers on several Python threads share one pool: one at a time splits its stage, the
    others run theirs whole; every result is right, also when an index is bad."""
    import threading

    prog = _take_program(1000, N)
    exe = cl.compile(prog, threads=2)
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1000, 16)).astype(np.float32)
    failures = []

    def caller(seed):
        local = np.random.default_rng(seed)
        for round_ in range(20):
            i = local.integers(0, 1000, N)
            if round_ % 5 == 4:
                i[seed * 100 + round_] = 5000
                try:
                    exe(x=x, i=i)
                    failures.append("no error")
                except cl.IndexOutOfRangeError as exc:
                    if exc.position != (seed * 100 + round_,):
                        failures.append(exc.position)
            elif not np.array_equal(exe(x=x, i=i), x[i]):
                failures.append(seed)

    threads = [threading.Thread(target=caller, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("reduce", ["none", "add", "max", "mean"])
@pytest.mark.parametrize("start", ["fill", "input"])
def test_a_row_is_initialised_and_updated_in_one_stage(threads, reduce, start):
    """A scatter along the last axis initialises row r and applies row r's updates in the same
    iteration (one stage in the lowered text, but for a mean): results as numpy's, and the first
    bad index still reported."""
    rng = np.random.default_rng(9)
    rows, cols, k = 64, 512, 300  # 52 800 iterations: split on two threads
    b = NetBuilder("row_init")
    x = b.fill_constant((rows, cols), 1.5, "float32") if start == "fill" else b.create_input("float32", (rows, cols), "x")
    idx = b.create_input("int64", (rows, k), "idx")
    src = b.create_input("float32", (rows, k), "src")
    exe = cl.compile(b.build([b.scatter(x, idx, src, axis=1, reduce=reduce)]), threads=threads)
    lowered = exe.source("lowered")
    if reduce != "mean":  # a mean's sums and counts are two buffers, then a division
        assert lowered.count("# parallel\n") == 1, lowered
    X = rng.standard_normal((rows, cols)).astype(np.float32) if start == "input" else np.full((rows, cols), 1.5, np.float32)
    I = np.stack([rng.permutation(cols)[:k] for _ in range(rows)]) if reduce == "none" else rng.integers(0, cols, (rows, k))
    S = rng.standard_normal((rows, k)).astype(np.float32)
    inputs = {"idx": I, "src": S, **({"x": X} if start == "input" else {})}
    want = R.scatter(X, I, S, axis=1, reduce=reduce)
    np.testing.assert_allclose(exe(**inputs), want, rtol=1e-5, atol=1e-5)
    bad = I.copy()
    bad[50, 7], bad[51, 0] = cols, -cols - 1
    with pytest.raises(cl.IndexOutOfRangeError) as info:
        exe(**{**inputs, "idx": bad})
    assert info.value.position == (50, 7)



def test_updates_of_single_elements_stay_serial_and_slices_split_by_row():
    """A scatter whose updates each touch one element (along axis 0) runs serially: split by
    row, every chunk would read every index again for one element each. Updates of row slices
    (scatter_nd of rows) split by row. Both equal numpy."""
    rng = np.random.default_rng(12)
    b = NetBuilder("elements")
    x = b.create_input("float32", (300, 4), "x")
    i = b.create_input("int64", (N // 4, 4), "i")
    u = b.create_input("float32", (N // 4, 4), "u")
    elements = cl.compile(b.build([b.scatter(x, i, u, axis=0, reduce="add")]), threads=2)
    b = NetBuilder("slices")
    x2 = b.create_input("float32", (300, 4), "x")
    j = b.create_input("int64", (N // 4, 1), "j")
    v = b.create_input("float32", (N // 4, 4), "u")
    slices = cl.compile(b.build([b.scatter_nd(x2, j, v, reduce="add")]), threads=2)
    kinds = lambda exe: {info.kind for info, _ in exe._stages}  # noqa: E731
    assert "parallel_rows" not in kinds(elements) and "parallel_rows" in kinds(slices)
    xv = rng.standard_normal((300, 4)).astype(np.float32)
    iv, uv = rng.integers(0, 300, (N // 4, 4)), rng.standard_normal((N // 4, 4)).astype(np.float32)
    expected = xv.astype(np.float64).copy()
    np.add.at(expected, (iv, np.arange(4)[None, :]), uv)
    np.testing.assert_allclose(elements(x=xv, i=iv, u=uv), expected, rtol=1e-4, atol=1e-4)
    expected = xv.astype(np.float64).copy()
    np.add.at(expected, iv[:, 0], uv)
    np.testing.assert_allclose(slices(x=xv, j=iv[:, :1], u=uv), expected, rtol=1e-4, atol=1e-4)


def _stage_texts(exe):
    """The lowered text of each top-level stage, in order (a stage starts at column 2)."""
    lines = exe.source("lowered").splitlines()[1:-1]
    texts = []
    for line in lines:
        if line.startswith("  ") and not line.startswith("   ") and not line.startswith("  }") and not line.startswith("  alloc"):
            texts.append("")
        if texts:
            texts[-1] += line + "\n"
    return texts


@pytest.mark.parametrize("cols", [64, 61, 200])
@pytest.mark.parametrize("reduce", ["none", "add", "max", "mean"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int64"])
def test_scatters_of_single_elements_split_by_column(cols, reduce, dtype):
    """A scatter along axis 0 whose rows span several cache lines splits across threads by
    column blocks: each element's updates stay on one thread, in the serial order, so two
    threads give the very bits of one (duplicates included: the last update of ``none`` wins as
    in numpy) and the first bad index is still the one reported."""
    rng = np.random.default_rng(cols)
    rows, updates = 97, 4000
    b = NetBuilder("columns")
    x = b.create_input(dtype, (rows, cols), "x")
    i = b.create_input("int64", (updates, cols), "i")
    u = b.create_input(dtype, (updates, cols), "u")
    program = b.build([b.scatter(x, i, u, axis=0, reduce=reduce)])
    split, whole = cl.compile(program, threads=2), cl.compile(program, threads=1)
    assert "_columns" not in whole.source("lowered")  # one thread: nothing to split for
    # A mean writes a sum and a count: a scatter LLVM keeps scalar, whose index checks go in
    # blocks of the row (``_check_in_blocks``) where the row is longer than one, and a blocked
    # row is not split. Sizes met after the first may get the shape-generic build.
    if reduce != "mean":
        assert any(info.kind == "parallel" and "_columns" in text
                   and (not isinstance(info.extent, int) or info.extent >= 2)
                   for (info, _), text in zip(split._stages, _stage_texts(split)))
    X = rng.integers(-9, 9, (rows, cols)).astype(dtype)
    I = rng.integers(0, rows, (updates, cols))
    U = (rng.standard_normal((updates, cols)) * 4).astype(dtype)
    got = split(x=X, i=I, u=U)
    np.testing.assert_array_equal(got, whole(x=X, i=I, u=U))
    want = R.scatter(X, I, U, axis=0, reduce=reduce)
    if reduce in ("none", "max") or dtype == "int64":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-2, atol=2e-2)
    bad = I.copy()
    bad[3000, cols - 1], bad[3001, 0] = rows, -rows - 1
    with pytest.raises(cl.IndexOutOfRangeError) as info:
        split(x=X, i=bad, u=U)
    assert info.value.position == (3000, cols - 1)
