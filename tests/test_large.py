"""Tensors with more than 2**31 elements: every offset past 2**31 must be computed in 64 bits.

Each buffer here is a little over 2 GiB of uint8 or bool. The data has a period of 251 (a prime)
along the flat buffer, so reading from any wrong offset (one truncated to 32 bits, say) shows up
as a wrong value. The tests are marked ``slow`` (deselect with ``-m "not slow"``) and skip
themselves, with the reason, when the machine has too little free memory.
"""
from __future__ import annotations

import numpy as np
import pytest

import cinnlite as cl

pytestmark = pytest.mark.slow

ROWS = 4
COLS = 2**29 + 3            # ROWS * COLS = 2**31 + 12 elements
PERIOD = 251
GIB = 2**30


def compile_uncached(program, backend):
    """Compile without the in-memory compile cache, so that the executable (and any buffers it
    keeps for reuse) goes away with the test and the next test finds the memory free again."""
    import inspect

    options = {"cache": False} if "cache" in inspect.signature(cl.compile).parameters else {}
    return cl.compile(program, target=backend, **options)


def mem_available() -> int:
    """MemAvailable from /proc/meminfo in bytes (0 where it cannot be read)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def require_memory(nbytes: int):
    have = mem_available()
    if have < nbytes:
        pytest.skip(f"needs about {nbytes / GIB:.1f} GiB of free memory, "
                    f"/proc/meminfo MemAvailable is {have / GIB:.1f} GiB")


def patterned(shape, dtype=np.uint8) -> np.ndarray:
    """An array whose flat element p is (p mod 251) (as bool: p mod 251 is odd), built without
    any temporary as large as the array."""
    n = int(np.prod(shape))
    out = np.empty(n, dtype)
    period = np.arange(PERIOD, dtype=np.int64)
    period = (period % 2 == 1) if dtype == np.bool_ else period.astype(dtype)
    whole = n // PERIOD
    out[:whole * PERIOD].reshape(whole, PERIOD)[...] = period
    out[whole * PERIOD:] = period[:n - whole * PERIOD]
    return out.reshape(shape)


def value_at(flat_position, dtype=np.uint8):
    v = flat_position % PERIOD
    return bool(v % 2) if dtype == np.bool_ else v


def assert_same(got, want, what):
    """``got == want`` element for element, compared in chunks to keep temporaries small."""
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    got, want = got.reshape(-1), want.reshape(-1)
    chunk = 1 << 27
    for begin in range(0, got.size, chunk):
        g, w = got[begin:begin + chunk], want[begin:begin + chunk]
        if not np.array_equal(g, w):
            bad = begin + int(np.argmax(g != w))
            raise AssertionError(f"{what}: element {bad} is {got[bad]}, expected {want[bad]}")


def test_take_rows_of_a_buffer_past_2_31_elements(backend):
    """x and the output both have more than 2**31 elements; rows are picked with negative,
    wrapped and clipped indices."""
    require_memory(int(2.3 * ROWS * COLS) + GIB)
    b = cl.NetBuilder("large_take")
    x = b.create_input("uint8", (ROWS, COLS), "x")
    i = b.create_input("int64", (5,), "i")
    exe = compile_uncached(b.build(outputs=[b.take(x, i, axis=0, mode="wrap")]), backend)
    xs = patterned((ROWS, COLS))
    idx = np.array([3, -1, 7, 0, -6])            # rows 3, 3, 3, 0, 2
    out = exe(x=xs, i=idx)
    assert out.shape == (5, COLS) and out.size > 2**31
    assert out[0, 5] == value_at(3 * COLS + 5)  # the pattern itself, independently of x
    for k, row in enumerate([3, 3, 3, 0, 2]):
        assert_same(out[k], xs[row], f"output row {k} (x row {row})")


def test_gather_and_scatter_elements_past_2_31(backend):
    """Element gathers read, and an element scatter writes, at flat offsets past 2**31 (and
    past 2**32 in the gather's int64 arithmetic: last row, last columns)."""
    require_memory(int(2.1 * ROWS * COLS) + GIB)
    b = cl.NetBuilder("large_elements")
    x = b.create_input("bool", (ROWS, COLS), "x")
    i = b.create_input("int64", (ROWS, 3), "i")
    s = b.create_input("bool", (ROWS, 3), "s")
    g = b.gather(x, i, axis=1, mode="raise", name="g")
    u = b.scatter(x, i, s, axis=1, reduce="none", mode="raise", name="u")
    exe = compile_uncached(b.build(outputs=[g, u]), backend)
    xs = patterned((ROWS, COLS), np.bool_)
    idx = np.array([[0, COLS - 1, -2], [2**28, -2, 17], [COLS // 2, 5, -COLS], [COLS - 1, COLS - 4, 2**29 + 1]])
    src = ~np.array([[value_at(r * COLS + (c % COLS), np.bool_) for c in row] for r, row in enumerate(idx)])
    before = xs[ROWS - 1, -8:].copy()
    got_g, got_u = exe(x=xs, i=idx, s=src)
    for r in range(ROWS):
        for c in range(3):
            col = int(idx[r, c]) % COLS
            assert got_g[r, c] == value_at(r * COLS + col, np.bool_), (r, c)
            assert got_u[r, col] == src[r, c], (r, c)
    # Only the targeted elements changed (counted in chunks), and the input did not.
    changed = 0
    flat_u, flat_x = got_u.reshape(-1), xs.reshape(-1)
    for begin in range(0, flat_u.size, 1 << 27):
        changed += int(np.count_nonzero(flat_u[begin:begin + (1 << 27)] != flat_x[begin:begin + (1 << 27)]))
    assert changed == len({(r, int(c) % COLS) for r in range(ROWS) for c in idx[r]})
    np.testing.assert_array_equal(xs[ROWS - 1, -8:], before)
    with pytest.raises(cl.IndexOutOfRangeError) as info:
        bad = idx.copy()
        bad[3, 2] = COLS
        exe(x=xs, i=bad, s=src)
    assert info.value.position == (3, 2) and info.value.value == COLS


def test_scatter_nd_slices_past_2_31(backend):
    """A slice scatter whose copy and updates cover more than 2**31 elements."""
    require_memory(int(2.6 * ROWS * COLS) + GIB)
    b = cl.NetBuilder("large_scatter_nd")
    x = b.create_input("uint8", (ROWS, COLS), "x")
    i = b.create_input("int32", (2, 1), "i")
    s = b.create_input("uint8", (2, COLS), "s")
    exe = compile_uncached(b.build(outputs=[b.scatter_nd(x, i, s, reduce="add", mode="fill")]), backend)
    xs = patterned((ROWS, COLS))
    src = np.ones((2, COLS), np.uint8)
    out = exe(x=xs, i=np.array([[-1], [ROWS]], np.int32), s=src)   # the second tuple is dropped
    for r in range(ROWS - 1):
        assert_same(out[r], xs[r], f"row {r}")
    assert out[ROWS - 1, COLS - 1] == value_at(ROWS * COLS - 1) + 1
    out[ROWS - 1] -= 1                      # undo the +1 in place, then compare with x
    assert_same(out[ROWS - 1], xs[ROWS - 1], f"row {ROWS - 1} minus the update")


RELEASE_CHILD = """
import gc, sys
import numpy as np
import cinnlite as cl

def rss():
    with open("/proc/self/status") as f:
        return int(f.read().split("VmRSS:")[1].split()[0]) * 1024

backend, n = sys.argv[1], int(sys.argv[2])
b = cl.NetBuilder("release")
i = b.create_input("int64", (2,), "i")
out = b.scatter(b.fill_constant((n,), 1, "uint8"), i, b.fill_constant((2,), 7, "uint8"))
exe = cl.compile(b.build(outputs=[out]), target=backend)
before = rss()
result = exe(i=np.array([n - 1, -n]))
assert result[0] == 7 and result[-1] == 7 and result[n // 2] == 1
during = rss()
del result, exe
gc.collect()
print(before, during, rss())
"""


def test_big_buffers_are_released_once_results_and_executable_are_dropped(backend):
    """A program whose output has more than 2**31 elements: once the caller drops the result and
    the executable, the memory goes back (no cache keeps gigabytes alive behind the caller)."""
    import subprocess
    import sys

    n = ROWS * COLS
    require_memory(n + GIB)
    proc = subprocess.run([sys.executable, "-c", RELEASE_CHILD, backend, str(n)], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    before, during, after = (int(v) for v in proc.stdout.split())
    assert during - before > n // 2, "the output was not resident while held"
    assert after - before < n // 4, (
        f"{(after - before) / GIB:.2f} GiB still resident after the result and the executable were dropped")
