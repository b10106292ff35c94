"""The CPU's fast path for small calls (``runtime/native_call.py``), static and symbolic: it
must give what the general path gives, for every input it takes and every one it declines.

Each case runs a warm executable (its sizes already have a plan, so the fast path is tried) and
the general path (``Executable.__call__``) on the same inputs and compares the results, or the
type and message of the errors. The fast path's builtin function is wrapped to count its calls,
so that the tests also see which calls it served.
"""
from __future__ import annotations

import threading

import numpy as np
import pytest

import cinnlite as cl
from cinnlite.errors import IndexOutOfRangeError, InputError, InputTypeError
from cinnlite.runtime import native_call
from cinnlite.runtime.executable import Executable


def _take(x_shape, i_shape, threads=1):
    b = cl.NetBuilder("take")
    x = b.create_input(cl.Float(32), x_shape, "x")
    i = b.create_input(cl.Int(64), i_shape, "i")
    return cl.compile(b.build([b.take(x, i, axis=0)]), threads=threads)


def _take_scaled(threads=1):
    """Two outputs and a symbol two inputs share: rows of x by i, and each row times w."""
    b = cl.NetBuilder("take_scaled")
    x = b.create_input(cl.Float(32), ("N", 3), "x")
    i = b.create_input(cl.Int(64), ("E",), "i")
    w = b.create_input(cl.Float(32), ("E", 1), "w")
    rows = b.take(x, i, axis=0)
    return cl.compile(b.build([rows, b.multiply(rows, w)]), threads=threads)


class Counted:
    """Wraps the executable's builtin functions to count their calls, the calls they served (a
    declined call returns the function's ``self``), and the calls that gave up the GIL."""

    def __init__(self, exe):
        fast = exe._fast
        self.calls = self.served = self.released = 0
        fast.holding, fast.releasing = self._counting(fast.holding), self._counting(fast.releasing, released=True)
        for plan in [exe._shapes.static, *exe._shapes.by_shapes.values()]:
            if plan is not None:
                plan.fast = None  # made again, with the counting functions
        fast.into_out = None  # likewise

    def _counting(self, function, released=False):
        def call(*args):
            self.calls += 1
            self.released += released
            result = function(*args)
            self.served += result is not function.__self__
            return result
        return call


def outcome(call, **inputs):
    """The result of a call, or the type and message of its error."""
    try:
        return "result", call(**inputs)
    except Exception as exc:  # noqa: BLE001 - every error is compared
        return type(exc), str(exc)


def assert_same(fast, general):
    assert fast[0] == general[0], (fast, general)
    if fast[0] != "result":
        assert fast[1] == general[1]
        return
    got, want = fast[1], general[1]
    for g, w in zip(got, want) if isinstance(want, tuple) else [(got, want)]:
        assert type(g) is np.ndarray and g.dtype == w.dtype and g.flags.c_contiguous
        np.testing.assert_array_equal(g, w)


def compare(exe, **inputs):
    """Run the call both ways; return the fast path's outcome."""
    fast = outcome(exe, **inputs)
    assert_same(fast, outcome(lambda **kw: Executable.__call__(exe, **kw), **inputs))
    return fast


RNG = np.random.default_rng(0)
X = RNG.random((50, 1), dtype=np.float32)
I = RNG.integers(-50, 50, 16)


@pytest.fixture(params=["static", "symbolic"])
def take(request):
    exe = _take((50, 1), (16,)) if request.param == "static" else _take(("N", 1), ("E",))
    assert exe._fast is not None
    exe(x=X, i=I)  # the sizes get their plan
    return exe


def test_a_repeated_call_is_served_by_the_fast_path(take):
    counted = Counted(take)
    for _ in range(3):
        np.testing.assert_array_equal(compare(take, x=X, i=I)[1], np.take(X, I, axis=0))
    assert counted.served == counted.calls == 3
    plan = take._shapes.static or take._shapes.by_shapes[(X.shape, I.shape)]
    assert isinstance(plan.fast, native_call.FastPlan)


BAD_INPUTS = {
    "missing": dict(x=X),
    "unknown": dict(x=X, i=I, y=I),
    "renamed": dict(x=X, j=I),
    "wrong dtype": dict(x=X.astype(np.float64), i=I),
    "int32 index": dict(x=X, i=I.astype(np.int32)),
    "wrong rank": dict(x=X[:, 0], i=I),
    "wrong static size": dict(x=np.ones((50, 2), np.float32), i=I),
    "out of range": dict(x=X, i=np.where(np.arange(16) == 5, 50, I)),
    "negative out of range": dict(x=X, i=np.where(np.arange(16) == 7, -51, I)),
    "not an array": dict(x=X, i="sixteen"),
    "a list of floats (float64)": dict(x=X.tolist(), i=I),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_errors_are_the_general_paths(take, case):
    kind, _ = compare(take, **BAD_INPUTS[case])
    assert kind in (IndexOutOfRangeError, InputError, InputTypeError)


def _misaligned(a):
    raw = np.zeros(a.nbytes + 1, np.uint8)
    out = raw[1:].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


CONVERTED_INPUTS = {
    "a list": dict(x=X, i=I.tolist()),
    "non-contiguous": dict(x=np.repeat(X, 2, axis=0)[::2], i=np.repeat(I, 3)[::3]),
    "negative strides": dict(x=X[::-1].copy()[::-1], i=I[::-1].copy()[::-1]),
    "misaligned": dict(x=_misaligned(X), i=_misaligned(I)),
    "byte-swapped": dict(x=X.astype(X.dtype.newbyteorder()), i=I.astype(I.dtype.newbyteorder())),
    "equal dtype, other object": dict(x=X.view(np.dtype(np.float32, metadata={"unit": "m"})), i=I),
    "a subclass": dict(x=X.view(np.matrix), i=I),
    "scalar arrays in a list": dict(x=[[np.float32(v)] for v in X[:, 0]], i=I),
}


@pytest.mark.parametrize("case", CONVERTED_INPUTS)
def test_inputs_the_entry_declines_are_converted_as_before(take, case):
    counted = Counted(take)
    kind, result = compare(take, **CONVERTED_INPUTS[case])
    assert kind == "result"
    np.testing.assert_array_equal(result, np.take(X, I, axis=0))
    assert counted.served == 0


def test_read_only_inputs_are_served(take):
    counted = Counted(take)
    x = np.frombuffer(X.tobytes(), np.float32).reshape(X.shape)
    np.testing.assert_array_equal(compare(take, x=x, i=I)[1], np.take(X, I, axis=0))
    assert counted.served == 1


def test_out_is_served_unless_it_overlaps_an_input(take):
    """``out=`` on the fast path: an array next to an input in the same memory is served; one
    that shares a byte with an input (the input itself, or a view that straddles it) is
    declined, and the general path names the input, which is left as it was."""
    counted = Counted(take)
    memory = np.zeros(16 + 50 + 16, np.float32)
    x = memory[16:66].reshape(50, 1)
    x[:] = X
    before = memory[16:66].copy()
    for out in (memory[:16].reshape(16, 1), memory[66:].reshape(16, 1), np.empty((16, 1), np.float32)):
        assert take(x=x, i=I, out=out) is out
        np.testing.assert_array_equal(out, np.take(X, I, axis=0))
    assert counted.served == counted.calls == 3
    # A static executable's out= calls run its entry straight, with no plan looked up.
    assert (take._fast.into_out is not None) == (take._shapes.static is not None)
    for out in (memory[1:17].reshape(16, 1), memory[65:81].reshape(16, 1), x[:16]):
        with pytest.raises(InputError, match="shares memory with 'x'"):
            take(x=x, i=I, out=out)
        np.testing.assert_array_equal(memory[16:66], before)
    assert counted.served == 3 and counted.calls == 6


def test_the_builtin_functions_keep_their_method_definition_alive():
    """A plan may hold the builtin functions after its executable is gone; CPython reads a
    builtin function's ``PyMethodDef`` until the function is freed (its garbage collector's walk
    too), so the definition must be owned by what the function itself holds: its ``self``."""
    import ctypes
    import gc

    exe = _take((50, 1), (16,))
    exe(x=X, i=I)
    functions = [exe._fast.holding, exe._fast.releasing]
    del exe
    gc.collect()
    for function, flag in zip(functions, (0, 1)):
        record = function.__self__.base
        assert isinstance(record, native_call._Method) and function.__self__[0] == flag
        definition = ctypes.c_void_p.from_address(id(function) + object.__basicsize__).value  # m_ml
        assert definition == ctypes.addressof(record.method)
        assert record.method.ml_name == b"cinnlite_call"


def test_results_are_never_shared_between_calls(take):
    first = take(x=X, i=I)
    second = take(x=X, i=I)
    assert first is not second and not np.shares_memory(first, second)
    first[...] = -1
    np.testing.assert_array_equal(second, np.take(X, I, axis=0))


def test_sizes_change_between_calls():
    exe = _take(("N", 1), ("E",))
    counted = Counted(exe)
    planned = 0
    # (Row counts that are no power of two: those run a static specialisation, test_symbolic.py.)
    for rows, count in [(50, 16), (50, 3), (7, 16), (50, 16), (50, 3), (3, 1)] * 2:
        x = RNG.random((rows, 1), dtype=np.float32)
        i = RNG.integers(-rows, rows, count)
        planned += (x.shape, i.shape) in exe._shapes.by_shapes
        np.testing.assert_array_equal(compare(exe, x=x, i=i)[1], np.take(x, i, axis=0))
    assert counted.served == counted.calls == planned >= 6  # a new size's first call makes its plan


def test_a_size_0_call_runs_the_static_specialisation():
    exe = _take(("N", 1), ("E",))
    x, empty = X, np.zeros(0, np.int64)
    assert compare(exe, x=x, i=empty)[1].shape == (0, 1)
    counted = Counted(exe)
    for _ in range(3):
        assert compare(exe, x=x, i=empty)[1].shape == (0, 1)
    plan = exe._shapes.by_shapes[(x.shape, empty.shape)]
    assert plan.specialised is not None and plan.fast is plan.specialised._shapes.static.fast
    assert counted.calls == 0  # the specialisation's own calls serve it
    assert compare(exe, x=x.astype(np.float64), i=empty)[0] is InputTypeError
    assert compare(exe, x=x[:, :0], i=empty)[0] is InputError
    assert compare(exe, x=x, i=empty.astype(np.int32))[0] is InputTypeError


def test_out_on_sizes_a_static_specialisation_serves_takes_its_fast_path(cache_dir):
    """A symbolic take whose indexed axis has a power-of-two size runs the static executable of
    those sizes (static even where another size of the structure was compiled before, which
    makes a plain compile shape-generic); with ``out=`` too, through that executable's own
    entry, which the symbolic one calls directly (the general path around it cost ~20 us a
    call), and an overlapping ``out=`` is still refused."""
    exe = _take(("N", 1), ("E",))
    x = RNG.random((64, 1), dtype=np.float32)
    i = RNG.integers(0, 64, 16)
    np.testing.assert_array_equal(exe(x=x[:32], i=i % 32), np.take(x[:32], i % 32, axis=0))  # another size first
    out = np.empty((16, 1), np.float32)
    assert exe(x=x, i=i, out=out) is out
    plan = exe._shapes.by_shapes[(x.shape, i.shape)]
    assert plan.specialised is not None and not plan.specialised.symbolic
    counted = Counted(plan.specialised)
    plan.fast = None  # adopted again, with the counting functions
    for _ in range(3):
        out[:] = 0
        assert exe(x=x, i=i, out=out) is out
        np.testing.assert_array_equal(out, np.take(x, i, axis=0))
    assert counted.served == counted.calls == 3
    with pytest.raises(InputError, match="shares memory with 'x'"):
        exe(x=x, i=i, out=x[:16])


def test_symbols_shared_by_inputs_and_two_outputs():
    exe = _take_scaled()
    x, i, w = RNG.random((9, 3), dtype=np.float32), RNG.integers(0, 9, 5), RNG.random((5, 1), dtype=np.float32)
    exe(x=x, i=i, w=w)
    counted = Counted(exe)
    rows, scaled = compare(exe, x=x, i=i, w=w)[1]
    np.testing.assert_array_equal(rows, x[i])
    np.testing.assert_array_equal(scaled, x[i] * w)
    assert counted.served == 1
    kind, message = compare(exe, x=x, i=i, w=w[:4])
    assert kind is InputError and "symbolic size E" in message


@pytest.mark.parametrize("symbolic", [False, True])
def test_two_big_outputs_and_a_big_intermediate_come_from_the_pool_on_the_fast_path(symbolic):
    """Outputs from POOL_MIN_BYTES and intermediates from POOL_MIN_BYTES_INTERMEDIATE come from
    the buffer pool on the fast path as on the general one: served, each block used again once
    its array is dropped, never while a caller holds the result."""
    from cinnlite.runtime.executable import POOL_MIN_BYTES
    rows = POOL_MIN_BYTES // 64 + 1  # 16 float32 per row: just above the pool's minimum
    b = cl.NetBuilder("pooled_pair")
    x = b.create_input(cl.Float(32), ("N", 16, 2) if symbolic else (100, 16, 2), "x")
    i = b.create_input(cl.Int(64), ("E",) if symbolic else (rows,), "i")
    summed = b.reduce_sum(b.take(x, i, axis=0), axes=[2])  # a reduction: never inlined
    exe = cl.compile(b.build([b.add(summed, summed), b.multiply(summed, summed)]))
    x_np, i_np = RNG.random((100, 16, 2), dtype=np.float32), RNG.integers(0, 100, rows)
    want = x_np[i_np].sum(axis=2)
    exe(x=x_np, i=i_np)
    assert [b.name for b in exe.lowered.intermediates] == [summed.name]
    counted = Counted(exe)
    kept = compare(exe, x=x_np, i=i_np)[1]
    np.testing.assert_array_equal(kept[0], want + want)
    np.testing.assert_array_equal(kept[1], want * want)
    addresses = [a.ctypes.data for a in exe(x=x_np, i=i_np)]  # dropped at once: its blocks come back
    again = exe(x=x_np, i=i_np)
    assert [a.ctypes.data for a in again] == addresses
    assert not any(np.shares_memory(k, a) for k in kept for a in again)
    np.testing.assert_array_equal(kept[0], want + want)
    assert counted.served == counted.calls == 3
    plan = exe._shapes.static or next(iter(exe._shapes.by_shapes.values()))
    assert all(terms is not None for terms in plan.fast.pooled)


def test_big_calls_give_up_the_gil_while_their_code_runs(cache_dir):
    exe = _take(("N", 1), ("E",))
    counted = Counted(exe)
    # A take is two stages (the index check and the gather) of E iterations each.
    small, big = np.zeros(16, np.int64), np.zeros(native_call.HOLD_GIL_MAX_WORK // 2 + 1, np.int64)
    for i in (small, big, small, big, small, big):
        np.testing.assert_array_equal(compare(exe, x=X, i=i)[1], np.take(X, i, axis=0))
    assert counted.calls == counted.served == 4 and counted.released == 2


def test_calls_that_split_across_threads_take_the_call_entry_where_main_splits_them():
    """With the native pool, a program's main splits its big stages itself, so such calls take
    the entry like any other; where stages split on the Python pool, they take the general path."""
    from cinnlite.runtime.native_pool import shared_native_pool
    exe = _take(("N", 1), ("E",), threads=2)
    big = np.zeros(1 << 16, np.int64)
    for _ in range(2):
        np.testing.assert_array_equal(compare(exe, x=X, i=big)[1], np.take(X, big, axis=0))
    fast = exe._shapes.by_shapes[(X.shape, big.shape)].fast
    assert (fast is native_call.GENERAL) == (not shared_native_pool().native)


def test_threads_calling_at_once_with_their_own_sizes():
    exe = _take(("N", 1), ("E",), threads=2)
    failures = []

    def caller(seed):
        rng = np.random.default_rng(seed)
        try:
            for _ in range(200):
                rows, count = int(rng.integers(1, 40)), int(rng.integers(1, 40))
                x, i = rng.random((rows, 1), dtype=np.float32), rng.integers(0, rows, count)
                np.testing.assert_array_equal(exe(x=x, i=i), np.take(x, i, axis=0))
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)

    threads = [threading.Thread(target=caller, args=(seed,)) for seed in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


def test_a_cached_executable_has_the_fast_path(cache_dir):
    from cinnlite.runtime import cache as caches

    _take(("N", 1), ("E",))
    caches.MEMORY.clear()
    exe = _take(("N", 1), ("E",))
    assert exe._fast is not None
    exe(x=X, i=I)
    counted = Counted(exe)
    np.testing.assert_array_equal(exe(x=X, i=I), np.take(X, I, axis=0))
    assert counted.served == 1
