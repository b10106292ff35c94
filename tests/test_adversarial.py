"""Adversarial index values: the extremes of every integer index dtype (uint64 values past the
int64 range included), +-size, huge positive and negative values, in every mode, for every
operator and every backend.

The sweep runs in a child process (``sys.executable``), so a crash shows up as a negative return
code and a failed test instead of killing the test run. Inside the child, every input array lives
inside a larger array padded with a sentinel value: a read outside a buffer shows up as a
sentinel (or a wrong value) in the output, and a write outside one changes the padding. For
every case the child checks:

- ``mode="raise"``: an ``IndexOutOfRangeError`` (also an ``IndexError``) that names the
  operator, the index input, the first bad position in row-major order, the bad value and the
  valid range; no input is modified.
- ``clip``/``wrap``/``fill``: the exact result SEMANTICS.md defines, computed here with numpy on
  indices resolved by a few lines of Python.
- In every mode: inputs and their padding are unchanged, and in-range values (``-size``,
  ``size - 1``, ...) never raise.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
MODES = ("raise", "clip", "wrap", "fill")
I64, I32 = np.iinfo(np.int64), np.iinfo(np.int32)
SENTINEL = -777.25
FILL = 99.5


def adversarial_values(size: int, index_dtype: str) -> list[int]:
    """Index values that stress range checks and address arithmetic for an axis of ``size``:
    the values around ``±size`` and the extremes of ``index_dtype``; for uint64, the values
    around 2**63 that read as negative int64 if anything wrapped them."""
    near = [-size - 1, -size, -1, 0, size - 1, size, size + 1, 2 * size, -2 * size - 1]
    info = np.iinfo(index_dtype)
    lo, hi, bits = int(info.min), int(info.max), info.bits
    extremes = [lo, lo + 1, lo + size, hi - size, hi - 1, hi, 2**(bits - 1) - 1, 2**(bits - 1),
                2**(bits - 2), -(2**(bits - 2))]
    if bits == 64:
        extremes += [-(2**32), -(2**31) - 1, -(2**31), 2**31 - 1, 2**31, 2**32, 2**32 + 1, I64.max // 3 + 1,
                     2**63 + 1, 2**63 + size, 2**64 - size, 2**64 - size - 1]
    elif bits == 32:
        extremes += [-(2**16), 2**16]
    return sorted({v for v in near + extremes if lo <= v <= hi})


def resolve(v: int, size: int, mode: str):
    """An index value under ``mode``: a position in [0, size), None for fill/drop, or
    "bad" for raise. Straight from the table in SEMANTICS.md."""
    if mode == "clip":
        return min(max(v, 0), size - 1)  # numpy's clip: every negative value clips to 0
    if -size <= v < size:
        return v + size if v < 0 else v
    if mode == "raise":
        return "bad"
    if mode == "wrap":
        return v % size
    return None


# -- guarded buffers ---------------------------------------------------------------------------


class Guarded:
    """An array that lives in the middle of a larger buffer filled with a sentinel."""

    PAD = 64

    def __init__(self, values: np.ndarray, sentinel):
        values = np.asarray(values)
        n = values.size
        self.base = np.full(n + 2 * self.PAD, sentinel, dtype=values.dtype)
        self.view = self.base[self.PAD:self.PAD + n].reshape(values.shape)
        self.view[...] = values
        self.snapshot = self.base.copy()

    def intact(self) -> bool:
        return np.array_equal(self.base, self.snapshot, equal_nan=self.base.dtype.kind == "f")


# -- the cases -----------------------------------------------------------------------------------
#
# Each case: an operator call on small static shapes, the index tensor shape, where the tuple
# component lives (for *_nd), the axis sizes the components address, and a numpy function that
# computes the expected output from the index array resolved under the mode.


def _positions(shape):
    return list(np.ndindex(*shape))


class Case:
    def __init__(self, name, op, x_shape, index_shape, kwargs, sizes_of, expected, src_shape=None):
        self.name, self.op = name, op
        self.x_shape, self.index_shape, self.src_shape = tuple(x_shape), tuple(index_shape), src_shape
        self.kwargs = kwargs
        self.sizes_of = sizes_of      # position in the index tensor -> size of the addressed axis
        self.expected = expected      # (x, resolved index (object array), src) -> out


def _take_expected(axis, batch_dims):
    def f(x, r, src):
        out_shape = x.shape[:axis] + r.shape[batch_dims:] + x.shape[axis + 1:]
        out = np.empty(out_shape, x.dtype)
        q = r.ndim
        for p in np.ndindex(*out_shape):
            ipos = p[:batch_dims] + p[axis:axis + q - batch_dims]
            k = r[ipos]
            out[p] = FILL if k is None else x[p[:axis] + (k,) + p[axis + q - batch_dims:]]
        return out
    return f


def _gather_expected(axis):
    def f(x, r, src):
        out = np.empty(r.shape, x.dtype)
        for p in np.ndindex(*r.shape):
            k = r[p]
            out[p] = FILL if k is None else x[p[:axis] + (k,) + p[axis + 1:]]
        return out
    return f


def _gather_nd_expected(batch_dims, layout, dims):
    def f(x, r, src):
        rr = np.moveaxis(r, 0, -1) if layout == "first" else r
        m = rr.shape[-1]
        if dims is None:
            out_shape = rr.shape[:-1] + x.shape[batch_dims + m:]
        else:
            out_shape = rr.shape[:-1]
        out = np.empty(out_shape, x.dtype)
        q = rr.ndim
        for p in np.ndindex(*out_shape):
            tup = rr[p[:q - 1]] if dims is None else rr[p]
            if any(k is None for k in tup):
                out[p] = FILL
            elif dims is None:
                out[p] = x[p[:batch_dims] + tuple(tup) + p[q - 1:]]
            else:
                xp = list(p)
                for k, d in zip(tup, dims):
                    xp[d] = k
                out[p] = x[tuple(xp)]
        return out
    return f


def _scatter_expected(axis, reduce):
    def f(x, r, src):
        out = x.copy()
        for p in np.ndindex(*r.shape):
            k = r[p]
            if k is None:
                continue
            t = p[:axis] + (k,) + p[axis + 1:]
            out[t] = src[p] if reduce == "none" else out[t] + src[p]
        return out
    return f


def _scatter_nd_expected(reduce, layout, dims):
    def f(x, r, src):
        rr = np.moveaxis(r, 0, -1) if layout == "first" else r
        out = x.copy()
        if dims is None:
            m = rr.shape[-1]
            for ip in np.ndindex(*rr.shape[:-1]):
                tup = rr[ip]
                if any(k is None for k in tup):
                    continue
                for rho in np.ndindex(*x.shape[m:]):
                    t = tuple(tup) + rho
                    v = src[ip + rho]
                    out[t] = v if reduce == "none" else out[t] + v
        else:
            for p in np.ndindex(*src.shape):
                tup = rr[p]
                if any(k is None for k in tup):
                    continue
                t = list(p)
                for k, d in zip(tup, dims):
                    t[d] = k
                t = tuple(t)
                out[t] = src[p] if reduce == "none" else out[t] + src[p]
        return out
    return f


def _tuple_sizes(x_shape, axes, layout):
    """sizes_of for *_nd: the component index along the tuple axis picks the addressed axis."""
    def sizes_of(pos):
        k = pos[0] if layout == "first" else pos[-1]
        return x_shape[axes[k]]
    return sizes_of


def all_cases() -> list[Case]:
    cases = []
    # take: axis 0, axis -1 (size 3), batch_dims=1, scalar indices
    cases.append(Case("take_axis0", "take", (5, 3), (2, 3), dict(axis=0), lambda p: 5, _take_expected(0, 0)))
    cases.append(Case("take_axis-1", "take", (2, 3), (3, 2), dict(axis=-1), lambda p: 3, _take_expected(1, 0)))
    cases.append(Case("take_batch1", "take", (2, 4, 3), (2, 3), dict(axis=1, batch_dims=1), lambda p: 4,
                      _take_expected(1, 1)))
    cases.append(Case("take_scalar", "take", (4, 2), (), dict(axis=0), lambda p: 4, _take_expected(0, 0)))
    # gather (elements)
    cases.append(Case("gather_axis0", "gather", (4, 3), (2, 3), dict(axis=0), lambda p: 4, _gather_expected(0)))
    cases.append(Case("gather_axis1", "gather", (4, 3), (4, 2), dict(axis=-1), lambda p: 3, _gather_expected(1)))
    # gather_nd: slice form, layouts, batch_dims; element form
    cases.append(Case("gather_nd_last", "gather_nd", (4, 3, 2), (3, 2), dict(), _tuple_sizes((4, 3, 2), (0, 1), "last"),
                      _gather_nd_expected(0, "last", None)))
    cases.append(Case("gather_nd_first", "gather_nd", (4, 3, 2), (2, 3), dict(index_layout="first"),
                      _tuple_sizes((4, 3, 2), (0, 1), "first"), _gather_nd_expected(0, "first", None)))
    cases.append(Case("gather_nd_batch1", "gather_nd", (2, 4, 3), (2, 2, 2), dict(batch_dims=1),
                      _tuple_sizes((2, 4, 3), (1, 2), "last"), _gather_nd_expected(1, "last", None)))
    cases.append(Case("gather_nd_dims", "gather_nd", (4, 3), (2, 3, 2), dict(dims=[0, -1]),
                      _tuple_sizes((4, 3), (0, 1), "last"), _gather_nd_expected(0, "last", (0, 1))))
    # scatter (elements), with and without a reduction
    for red in ("none", "add"):
        cases.append(Case(f"scatter_axis0_{red}", "scatter", (4, 3), (2, 3), dict(axis=0, reduce=red), lambda p: 4,
                          _scatter_expected(0, red), src_shape=(2, 3)))
        cases.append(Case(f"scatter_axis1_{red}", "scatter", (4, 3), (3, 2), dict(axis=-1, reduce=red), lambda p: 3,
                          _scatter_expected(1, red), src_shape=(3, 3)))
    # scatter_nd: slice form, layout first, element form
    for red in ("none", "add"):
        cases.append(Case(f"scatter_nd_last_{red}", "scatter_nd", (4, 3), (3, 1), dict(reduce=red),
                          _tuple_sizes((4, 3), (0,), "last"), _scatter_nd_expected(red, "last", None), src_shape=(3, 3)))
        cases.append(Case(f"scatter_nd_2d_{red}", "scatter_nd", (4, 3), (3, 2), dict(reduce=red),
                          _tuple_sizes((4, 3), (0, 1), "last"), _scatter_nd_expected(red, "last", None), src_shape=(3,)))
        cases.append(Case(f"scatter_nd_first_{red}", "scatter_nd", (4, 3), (2, 3), dict(reduce=red, index_layout="first"),
                          _tuple_sizes((4, 3), (0, 1), "first"), _scatter_nd_expected(red, "first", None), src_shape=(3,)))
        cases.append(Case(f"scatter_nd_dims_{red}", "scatter_nd", (4, 3), (2, 3, 1), dict(reduce=red, dims=[0]),
                          _tuple_sizes((4, 3), (0,), "last"), _scatter_nd_expected(red, "last", (0,)), src_shape=(2, 3)))
    return cases


OPS = ("take", "gather", "gather_nd", "scatter", "scatter_nd")


# -- the child process -----------------------------------------------------------------------


def _valid_index(case: Case, rng, index_dtype):
    """An in-range index tensor (negative values too) for ``case``."""
    idx = np.empty(case.index_shape, dtype=index_dtype)
    for p in _positions(case.index_shape):
        s = case.sizes_of(p)
        idx[p] = rng.integers(-s if np.dtype(index_dtype).kind == "i" else 0, s)
    return idx


MODE_GROUPS = (("raise",), ("clip", "wrap", "fill"))


def _compile(cases, backend, modes, index_dtype):
    """One program for all ``cases``: case ``n`` reads inputs ``x<n>``, ``idx<n>`` (and
    ``src<n>``) and has one output ``c<n>_<mode>`` per mode in ``modes``. One compile per
    operator and mode group keeps the sweep fast on backends whose compiles are slow."""
    import cinnlite as cl

    b = cl.NetBuilder(f"adversarial_{cases[0].op}")
    outs = []
    for n, case in enumerate(cases):
        x = b.create_input("float32", case.x_shape, f"x{n}")
        i = b.create_input(index_dtype, case.index_shape, f"idx{n}")
        s = b.create_input("float32", case.src_shape, f"src{n}") if case.src_shape is not None else None
        for mode in modes:
            kwargs = dict(case.kwargs, mode=mode, name=f"c{n}_{mode}")
            if s is None:
                outs.append(getattr(b, case.op)(x, i, fill_value=FILL, **kwargs))
            else:
                outs.append(getattr(b, case.op)(x, i, s, **kwargs))
    return cl.compile(b.build(outputs=outs), target=backend)


def _call_guarded(exe, n, idx_values, x0, src0, others):
    """Call ``exe`` with case ``n``'s inputs in guarded buffers and every other case's inputs
    from ``others``; returns (case n's outputs by mode, or the exception; names of case n's
    inputs whose buffer or surrounding memory changed)."""
    import cinnlite as cl

    guards = {f"x{n}": Guarded(x0, SENTINEL), f"idx{n}": Guarded(idx_values, np.iinfo(idx_values.dtype).max)}
    if src0 is not None:
        guards[f"src{n}"] = Guarded(src0, SENTINEL)
    feeds = dict(others, **{k: g.view for k, g in guards.items()})
    try:
        result = exe.run(feeds)
        prefix = f"c{n}_"
        result = {name[len(prefix):]: arr for name, arr in result.items() if name.startswith(prefix)}
    except Exception as e:  # noqa: BLE001 - checked by the caller
        result = e
    return result, [k for k, g in guards.items() if not g.intact()]


def _check_one(case, n, mode, result, modified, idx_values, x0, src0, first_bad, failures, label):
    import cinnlite as cl

    def fail(msg):
        failures.append(f"{label} mode={mode}: {msg}")

    for name in modified:
        fail(f"input {name} or the memory around it was modified")
    if isinstance(result, Exception) and not isinstance(result, cl.IndexOutOfRangeError):
        fail(f"unexpected {type(result).__module__}.{type(result).__name__}: {result}")
        return
    if mode == "raise" and first_bad is not None:
        if not isinstance(result, cl.IndexOutOfRangeError):
            fail("no IndexOutOfRangeError for an out-of-range index in mode raise")
            return
        if not isinstance(result, IndexError):
            fail("IndexOutOfRangeError is not an IndexError")
        pos, value = first_bad
        size = case.sizes_of(pos)
        msg = str(result)
        if (result.input, result.position, result.value, result.size) != (f"idx{n}", tuple(pos), value, size):
            fail(f"error names input {result.input} position {result.position} value {result.value} size "
                 f"{result.size}, expected idx{n} {tuple(pos)} {value} {size}")
        for part in (case.op, f"'idx{n}'", str(value), f"[{-size}, {size - 1}]"):
            if part not in msg:
                fail(f"error message {msg!r} does not mention {part!r}")
        return
    if isinstance(result, Exception):
        fail(f"raised {result} for in-range or resolved indices")
        return
    out = result[mode]
    resolved = np.empty(idx_values.shape, dtype=object)
    for p in _positions(idx_values.shape):
        resolved[p] = resolve(int(idx_values[p]), case.sizes_of(p), mode)
    expected = case.expected(x0, resolved, src0)
    if out.shape != expected.shape or not np.array_equal(out, expected):
        fail(f"wrong result\nindex={idx_values.tolist()}\ngot={out.tolist()}\nexpected={expected.tolist()}")
    elif np.any(out == SENTINEL):
        fail("output holds the sentinel: a read outside a buffer")


def _case_data(case):
    x0 = (np.arange(int(np.prod(case.x_shape)), dtype=np.float32) + 1).reshape(case.x_shape)
    src0 = None
    if case.src_shape is not None:
        src0 = (np.arange(int(np.prod(case.src_shape)), dtype=np.float32) * 10 + 100).reshape(case.src_shape)
    return x0, src0


def sweep(backend: str, op: str, index_dtype: str) -> list[str]:
    """Every case of ``op`` x every mode x every adversarial value; returns failure strings."""
    rng = np.random.default_rng(1234)
    failures: list[str] = []
    cases = [c for c in all_cases() if c.op == op]
    others = {}
    for n, case in enumerate(cases):
        x0, src0 = _case_data(case)
        others[f"x{n}"], others[f"idx{n}"] = x0, _valid_index(case, rng, index_dtype)
        if src0 is not None:
            others[f"src{n}"] = src0
    for modes in MODE_GROUPS:
        print(f"CASE {backend} {op} {index_dtype} modes={modes}: compile", flush=True)
        exe = _compile(cases, backend, modes, index_dtype)
        for n, case in enumerate(cases):
            x0, src0 = _case_data(case)
            positions = _positions(case.index_shape)
            for trial in range(min(2, len(positions))):
                # The adversarial value goes after the first position (so an in-range value
                # comes before it) and a second bad value at the last position: "raise" must
                # name the first bad one in row-major order.
                p1 = positions[min(len(positions) - 1, 1 + trial)]
                p_last = positions[-1]
                for v in adversarial_values(case.sizes_of(p1), index_dtype):
                    idx = _valid_index(case, rng, index_dtype)
                    idx[p1] = v
                    if p_last != p1:
                        idx[p_last] = case.sizes_of(p_last) + 7
                    first_bad = None
                    for p in positions:
                        s = case.sizes_of(p)
                        if not -s <= int(idx[p]) < s:
                            first_bad = (p, int(idx[p]))
                            break
                    label = f"{case.name} index={index_dtype} value={v} at {p1}"
                    print(f"CASE {backend} {label} modes={modes}", flush=True)
                    result, modified = _call_guarded(exe, n, idx, x0, src0, others)
                    for mode in modes:
                        _check_one(case, n, mode, result, modified, idx, x0, src0, first_bad, failures, label)
    return failures


def _child_main(backend, op, index_dtype):
    failures = sweep(backend, op, index_dtype)
    print("RESULT " + json.dumps(failures), flush=True)


# -- the tests -----------------------------------------------------------------------------------


def run_in_child(code: str, timeout=600):
    """Run ``code`` in a fresh interpreter with this directory on sys.path."""
    prelude = f"import sys; sys.path.insert(0, {HERE!r})\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True,
                          timeout=timeout, cwd=HERE)


@pytest.mark.parametrize("index_dtype", ["int64", "int32", "int16", "int8", "uint8", "uint16", "uint32", "uint64"])
@pytest.mark.parametrize("op", OPS)
def test_adversarial_indices_never_crash_and_follow_the_mode(backend, op, index_dtype):
    proc = run_in_child(f"import test_adversarial as t; t._child_main({backend!r}, {op!r}, {index_dtype!r})")
    last_case = [ln for ln in proc.stdout.splitlines() if ln.startswith("CASE ")][-1:]
    assert proc.returncode == 0, (
        f"the child process died with return code {proc.returncode} "
        f"(negative: killed by signal {-proc.returncode}) during {last_case}\n{proc.stderr[-3000:]}")
    result = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert result, f"the child printed no result\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    failures = json.loads(result[-1][len("RESULT "):])
    assert not failures, f"{len(failures)} failure(s):\n" + "\n".join(failures[:20])


BIG_INDEX_CHILD = """
import json, numpy as np, cinnlite as cl
backend, op, n = {backend!r}, {op!r}, {n}
b = cl.NetBuilder("big_index")
x = b.create_input("float32", (1, 7), "x")
i = b.create_input("int64", (n, 7), "idx")
if op == "gather":
    y = b.gather(x, i, axis=0)
else:
    s = b.create_input("float32", (n, 7), "src")
    y = b.scatter(b.fill_constant((3, 7), 0.0, "float32"), i, s, axis=0, reduce="add")
exe = cl.compile(b.build(outputs=[y]), target=backend)
report = []
for bad in ([(n - 1, 6)], [(n // 2 + 3, 1), (n - 5, 2)], [(n // 4 + 1, 0), (n // 2 + 1, 5), (n - 1, 6)]):
    idx = np.zeros((n, 7), np.int64)
    for k, p in enumerate(bad):
        idx[p] = 1000 + k
    args = dict(x=np.ones((1, 7), np.float32), idx=idx)
    if op != "gather":
        args["src"] = np.ones((n, 7), np.float32)
    try:
        exe(**args)
        report.append(None)
    except cl.IndexOutOfRangeError as e:
        report.append([list(e.position), e.value])
print("RESULT " + json.dumps(report))
"""


@pytest.mark.parametrize("op", ["gather", "scatter"])
def test_raise_names_the_first_bad_position_of_a_big_index(backend, op):
    """Index tensors big enough to be checked in parallel chunks: the error still names the
    first bad position in row-major order, whichever chunk finds a bad value first."""
    n = 150_000
    proc = run_in_child(BIG_INDEX_CHILD.format(backend=backend, op=op, n=n))
    assert proc.returncode == 0, f"return code {proc.returncode}\n{proc.stderr[-3000:]}"
    report = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1][7:])
    assert report == [[[n - 1, 6], 1000], [[n // 2 + 3, 1], 1000], [[n // 4 + 1, 0], 1000]]


MEAN_CHILD = """
import numpy as np, cinnlite as cl
backend, dtype, n, x0, v = {backend!r}, {dtype!r}, {n}, {x0}, {v}
b = cl.NetBuilder("mean_duplicates")
x = b.create_input(dtype, (2,), "x")
i = b.create_input("int64", (n,), "idx")
s = b.create_input(dtype, (n,), "src")
exe = cl.compile(b.build(outputs=[b.scatter(x, i, s, reduce="mean")]), target=backend)
out = exe(x=np.array([x0, 5], dtype), idx=np.zeros(n, np.int64), src=np.full(n, v, dtype))
print("RESULT", int(out[0]), int(out[1]))
"""


@pytest.mark.parametrize("dtype,n,x0,v", [
    ("uint8", 255, 0, 0),        # 256 values: the count does not fit in the data dtype
    ("int8", 255, 0, 0),
    ("int8", 254, -128, 0),      # 255 values: the count as int8 is -1, and -128 / -1 overflows
    ("int16", 65535, 0, 0),
])
def test_scatter_mean_with_many_duplicates_never_crashes(backend, dtype, n, x0, v):
    """An integer mean over more values than the data dtype can count: SEMANTICS.md defines it as
    the true mean (sum / count, rounded toward minus infinity). It must never bring the process down."""
    proc = run_in_child(MEAN_CHILD.format(backend=backend, dtype=dtype, n=n, x0=x0, v=v))
    assert proc.returncode == 0, (
        f"scatter(reduce='mean') on {dtype} with {n} updates of one element killed the process "
        f"(return code {proc.returncode})\n{proc.stderr[-2000:]}")
    true_mean = (x0 + n * v) // (n + 1)  # the floor, as PyTorch's integer mean
    assert proc.stdout.split()[-2:] == [str(true_mean), "5"]


def test_sweep_detects_a_wrong_result():
    """The checker itself: a result that differs from the expected one is reported."""
    case = [c for c in all_cases() if c.name == "take_axis0"][0]
    idx = np.array([[0, 1, 2], [3, 4, 9]], np.int64)
    x0 = (np.arange(15, dtype=np.float32) + 1).reshape(5, 3)
    failures = []
    _check_one(case, 0, "clip", {"clip": np.zeros((2, 3, 3), np.float32)}, [], idx, x0, None, None, failures, "t")
    assert failures and "wrong result" in failures[0]
    failures = []
    _check_one(case, 0, "raise", {"raise": np.zeros((2, 3, 3), np.float32)}, [], idx, x0, None,
               ((1, 2), 9), failures, "t")
    assert failures and "no IndexOutOfRangeError" in failures[0]


def test_sweep_detects_a_modified_input():
    class Scribbler:
        def run(self, arrays):
            arrays["x0"][0, 0] = -1  # an executable that writes to its input
            return {"c0_wrap": np.zeros(1)}

    x0 = np.ones((4, 3), np.float32)
    result, modified = _call_guarded(Scribbler(), 0, np.zeros((2, 3), np.int64), x0, None, {})
    assert modified == ["x0"] and list(result) == ["wrap"]


def test_a_crash_in_the_child_is_reported():
    proc = run_in_child("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert proc.returncode < 0


# -- raise checks of computed operands -------------------------------------------------------------


def _computed_index_into_empty_x(b):
    x = b.create_input("float32", (0,), "x")
    rows = b.create_input("int64", (3,), "rows")
    perm = b.create_input("int64", (2,), "perm")
    idx = b.take(rows, perm, mode="raise", name="idx")        # perm[1] = 7: out of range
    return b.take(x, idx, mode="fill", name="out")             # every element is the fill value


def _computed_index_into_empty_gather_nd(b):
    x = b.create_input("float32", (0, 3), "x")
    rows = b.create_input("int64", (3, 2, 2), "rows")
    perm = b.create_input("int64", (2,), "perm")
    idx = b.take(rows, perm, mode="raise", name="idx")
    return b.gather_nd(x, idx, mode="fill", name="out")


def _computed_empty_data(b):
    x0 = b.create_input("float32", (3, 0), "x0")
    perm = b.create_input("int64", (2,), "perm")
    i = b.create_input("int64", (2, 0), "i")
    x = b.take(x0, perm, mode="raise", name="x")               # a (2, 0) result: no element to compute
    return b.gather(x, i, axis=1, name="out")


def _computed_data_unused(b):
    x0 = b.create_input("float32", (3, 2), "x0")
    perm = b.create_input("int64", (2,), "perm")
    i = b.create_input("int64", (0,), "i")
    x = b.take(x0, perm, mode="raise", name="x")
    return b.take(x, i, axis=0, name="out")                    # reads no element of x


def _computed_src_unused(b):
    x = b.create_input("float32", (3, 2), "x")
    s0 = b.create_input("float32", (3, 2), "s0")
    perm = b.create_input("int64", (2,), "perm")
    i = b.create_input("int64", (0, 2), "i")
    s = b.take(s0, perm, mode="raise", name="s")
    return b.scatter(x, i, s, name="out")                      # no update reads s


def _computed_index_into_a_constant(b):
    rows = b.create_input("int64", (3,), "rows")
    perm = b.create_input("int64", (2,), "perm")
    x = b.fill_constant((4,), 1.5, "float32", name="x")
    idx = b.take(rows, perm, mode="raise", name="idx")
    return b.take(x, idx, mode="clip", name="out")             # a constant: no value depends on idx


COMPUTED_OPERANDS = {
    "index-into-a-constant": (_computed_index_into_a_constant, "idx",
                              dict(rows=np.zeros(3, np.int64), perm=np.array([0, 5]))),
    "index-into-empty-x": (_computed_index_into_empty_x, "idx",
                           dict(x=np.zeros(0, np.float32), rows=np.zeros(3, np.int64), perm=np.array([0, 7]))),
    "index-into-empty-gather_nd": (_computed_index_into_empty_gather_nd, "idx",
                                   dict(x=np.zeros((0, 3), np.float32), rows=np.zeros((3, 2, 2), np.int64),
                                        perm=np.array([-3, 3]))),
    "empty-data": (_computed_empty_data, "x",
                   dict(x0=np.zeros((3, 0), np.float32), perm=np.array([0, 9]), i=np.zeros((2, 0), np.int64))),
    "data-never-read": (_computed_data_unused, "x",
                        dict(x0=np.zeros((3, 2), np.float32), perm=np.array([0, 5]), i=np.zeros(0, np.int64))),
    "src-never-read": (_computed_src_unused, "s",
                       dict(x=np.zeros((3, 2), np.float32), s0=np.zeros((3, 2), np.float32), perm=np.array([1, -4]),
                            i=np.zeros((0, 2), np.int64))),
}


@pytest.mark.parametrize("case", list(COMPUTED_OPERANDS))
def test_raise_check_of_a_computed_operand_is_never_skipped(backend, case):
    """An operand computed by a take in mode "raise" with an out-of-range index stops the run,
    even where the consumer needs none of its elements (empty axes, empty index tensors) and
    however the compiler fuses the two. The error names the producer, not the consumer."""
    import inspect

    import cinnlite as cl

    build, producer, feeds = COMPUTED_OPERANDS[case]
    option_sets = [{}]
    if "fuse" in inspect.signature(cl.compile).parameters:
        option_sets = [dict(fuse=True), dict(fuse=False)]
    for options in option_sets:
        b = cl.NetBuilder(case.replace("-", "_"))
        out = build(b)
        exe = cl.compile(b.build(outputs=[out]), target=backend, **options)
        try:
            exe(**{k: v.copy() for k, v in feeds.items()})
        except cl.IndexOutOfRangeError as e:
            assert e.input == "perm" and e.position == (1,), (options, e)
            assert f"'{producer}'" in str(e), (options, str(e))
        else:
            pytest.fail(f"no IndexOutOfRangeError for the bad index of take '{producer}' "
                        f"(compile options {options or 'default'})")


@pytest.mark.parametrize("index_dtype", ["int64", "int32"])
def test_raise_checks_of_a_symbolic_axis_hold_at_every_adversarial_value(index_dtype):
    """A shape-generic take in ``mode="raise"`` (the axis size known only at the call, the check
    an unsigned compare of ``v + size`` with ``2 size`` for int64 indices): every adversarial
    value is flagged exactly when it lies outside ``[-size, size)``, reported at its position
    with its value; the others take their row."""
    import cinnlite as cl
    b = cl.NetBuilder("adversarial_symbolic")
    x = b.create_input("float32", ("R", 3), "x")
    exe = cl.compile(b.build([b.take(x, b.create_input(index_dtype, ("N",), "i"), axis=0)]), cache=False)
    for size in (5, 7):
        xs = np.arange(size * 3, dtype=np.float32).reshape(size, 3)
        for v in adversarial_values(size, index_dtype):
            i = np.array([0, v, 1], dtype=index_dtype)
            if -size <= v < size:
                np.testing.assert_array_equal(exe(x=xs, i=i), xs[[0, v % size, 1]])
                continue
            with pytest.raises(cl.IndexOutOfRangeError) as info:
                exe(x=xs, i=i)
            assert info.value.position == (1,) and info.value.value == v, (size, v)
