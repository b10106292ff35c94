"""Numerical tests of every operator against the numpy reference (tests/reference.py).

Every test runs on the ``backend`` fixture. To keep compile time down, one compiled program
usually carries several outputs (one per mode, index dtype or reduction), each compared with
the reference on its own. Data is seeded from the test parameters, so every case is
reproducible.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

import cinnlite as cl
import reference as R
from backends import BACKENDS

DATA_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
               "float32", "float64", "complex64", "complex128"]
COMPLEX_DTYPES = ["complex64", "complex128"]
#: The dtypes every reduction is defined on (complex numbers have no max and min).
NUMERIC_DTYPES = [d for d in DATA_DTYPES if d != "bool" and d not in COMPLEX_DTYPES]
FLOAT_DTYPES = ["float16", "bfloat16", "float32", "float64"]
INDEX_DTYPES = ["int32", "int64", "int8", "uint8", "int16", "uint16", "uint32", "uint64"]
#: For cases whose index values are written out, negative ones included.
SIGNED_INDEX_DTYPES = ["int32", "int64", "int8", "int16"]
MODES = ["raise", "clip", "wrap", "fill"]
REDUCTIONS = ["none", "add", "mul", "max", "min", "mean"]
RANK_AXES = [(r, a) for r in range(1, 6) for a in range(-r, r)]
# Two modes per compiled program; consecutive cases take consecutive pairs, so every rank
# (which has at least two axes) sees all four modes.
MODE_PAIRS = [("raise", "fill"), ("clip", "wrap"), ("wrap", "fill"), ("raise", "clip")]


def mode_pair(n):
    return MODE_PAIRS[n % len(MODE_PAIRS)]


# -- seeded random data -------------------------------------------------------------------------


def rng_for(*params):
    """A generator seeded from the test's parameters: every case is reproducible."""
    return np.random.default_rng(zlib.crc32(repr(params).encode()))


def rand_shape(rng, rank, lo=1, hi=4):
    """A random shape; about one dimension in five is 1."""
    return tuple(1 if rng.random() < 0.2 else int(rng.integers(lo, hi + 1)) for _ in range(rank))


def random_data(rng, shape, dtype, kind="any"):
    """Random data of ``dtype``.

    kind "any": integers over the dtype's whole range, floats from a wide normal distribution
    with NaN, infinities and a negative zero mixed in. kind "small": small values whose sums
    (and quotients in a mean) are exact in every float dtype whatever the order of the adds.
    kind "factors": powers of two, so that products are exact in any order.
    """
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind == "c":
        if kind == "factors":  # products of these are exact, in any order
            return rng.choice(np.array([1, -1, 1j, -1j, 2, -0.5, 0.5j, -2j]), size=shape).astype(dt)
        out = np.empty(shape, dt)
        part = np.float32 if dt == np.complex64 else np.float64
        out.real, out.imag = random_data(rng, shape, part, kind), random_data(rng, shape, part, kind)
        return out
    if dt.kind in "iu":
        info = np.iinfo(dt)
        if kind == "any":
            return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt)
        lo, hi = max(int(info.min), -3 if kind == "factors" else -9), 3 if kind == "factors" else 9
        return rng.integers(lo, hi, size=shape, endpoint=True).astype(dt)
    if kind == "small":
        return (rng.integers(-32, 33, size=shape) / 4).astype(dt)
    if kind == "factors":
        return rng.choice(np.array([-2, -1, -0.5, 0.5, 1, 2]), size=shape).astype(dt)
    values = (rng.standard_normal(shape) * 8).astype(dt)
    flat = values.reshape(-1)
    if flat.size >= 8:
        spots = rng.choice(flat.size, size=4, replace=False)
        flat[spots] = np.array([np.nan, np.inf, -np.inf, -0.0], dtype=dt)
    return values


def data_for_reduce(rng, shape, dtype, reduce):
    """Data suited to a reduction: exact in any order of combination for float add/mul/mean,
    and small integers for mean (so the sum stays in range)."""
    if reduce in ("add", "mean"):
        return random_data(rng, shape, dtype, "small" if R.is_float(dtype) or reduce == "mean" else "any")
    if reduce == "mul":
        return random_data(rng, shape, dtype, "factors" if R.is_float(dtype) else "any")
    return random_data(rng, shape, dtype)


def index_in_range(rng, shape, size, dtype):
    """Valid index values in ``[-size, size-1]``, negative ones included (unsigned dtypes:
    ``[0, size-1]``)."""
    if size == 0:
        assert int(np.prod(shape)) == 0
        return np.zeros(shape, dtype)
    return rng.integers(-size if np.dtype(dtype).kind == "i" else 0, size, size=shape).astype(dtype)


def index_any(rng, shape, size, dtype):
    """Index values in and out of range on both sides, with the index dtype's extremes (negative
    values wrap around into an unsigned dtype: huge values)."""
    idx = rng.integers(-3 * size - 3, 3 * size + 4, size=shape).astype(dtype)
    flat = idx.reshape(-1)
    if flat.size >= 4:
        info = np.iinfo(dtype)
        spots = rng.choice(flat.size, size=2, replace=False)
        flat[spots] = [info.min, info.max]
    return idx


def index_for(rng, shape, size, dtype, mode):
    return index_in_range(rng, shape, size, dtype) if mode == "raise" else index_any(rng, shape, size, dtype)


def tuple_index(rng, lead, sizes, dtype, mode):
    """Index tuples (tuple axis last) for axes of ``sizes``."""
    parts = [index_for(rng, lead + (1,), s, dtype, mode) for s in sizes]
    return np.concatenate(parts, axis=-1) if parts else np.zeros(lead + (0,), dtype)


def to_layout(index, layout):
    """An index built with the tuple axis last, laid out as ``layout`` says."""
    return np.ascontiguousarray(np.moveaxis(index, -1, 0)) if layout == "first" else index


def fill_for(dtype):
    """A non-default fill value that every dtype can hold."""
    kind = np.dtype(dtype).kind
    return True if kind == "b" else (-2.5 + 1j if kind == "c" else -2.5 if R.is_float(dtype) else 7)


# -- one compiled program, many checked outputs ---------------------------------------------------


def comparable(a):
    """``a`` as numpy's testing functions can compare it: bfloat16 (whose NaN they do not know)
    as float32, which holds every bfloat16 value exactly."""
    a = np.asarray(a)
    return a.astype(np.float32) if a.dtype.name == "bfloat16" else a


def assert_matches(got, expected, label, tol=None):
    assert got.shape == expected.shape, f"{label}: shape {got.shape}, expected {expected.shape}"
    assert got.dtype == expected.dtype, f"{label}: dtype {got.dtype}, expected {expected.dtype}"
    if got.dtype.kind == "c":  # each part on its own: NaN and the sign of zero part by part
        assert_matches(np.ascontiguousarray(got.real), np.ascontiguousarray(expected.real), f"{label} (real)", tol)
        assert_matches(np.ascontiguousarray(got.imag), np.ascontiguousarray(expected.imag), f"{label} (imag)", tol)
        return
    if got.dtype.name == "bfloat16":  # numpy's testing functions know float32, which holds every value
        got, expected = got.astype(np.float32), expected.astype(np.float32)
    if tol is None:
        np.testing.assert_array_equal(got, expected, err_msg=label, strict=True)
        if got.dtype.kind == "f":  # exact also means the sign of every zero
            numbers = ~np.isnan(expected)
            np.testing.assert_array_equal(np.signbit(got[numbers]), np.signbit(expected[numbers]),
                                          err_msg=f"{label}: sign of zero")
    else:
        rtol, atol = tol
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=label)


class Case:
    """Builds one program with several outputs, each with its reference result."""

    def __init__(self, name="case"):
        self.b = cl.NetBuilder(name)
        self.feeds = {}
        self.checks = []

    def input(self, array):
        name = f"in{len(self.feeds)}"
        tensor = self.b.create_input(array.dtype, array.shape, name)
        self.feeds[name] = array
        return tensor

    def expect(self, tensor, expected, label, tol=None):
        expected = np.asarray(expected)
        assert tuple(tensor.shape) == expected.shape, f"{label}: inferred shape {tensor.shape}, expected {expected.shape}"
        assert tensor.dtype.name == expected.dtype.name, f"{label}: inferred dtype {tensor.dtype}"
        self.checks.append((tensor, expected, label, tol))

    def run(self, backend, **options):
        """Compile for ``backend`` (``options`` go to ``cl.compile``), run, check every output."""
        prog = self.b.build(outputs=[t for t, _, _, _ in self.checks])
        exe = cl.compile(prog, target=backend, **options)
        before = {k: v.copy() for k, v in self.feeds.items()}
        self.check(exe.run(dict(self.feeds)))
        for name, value in self.feeds.items():
            np.testing.assert_array_equal(comparable(value), comparable(before[name]), err_msg=f"input {name} was modified")
        return exe

    def check(self, outs):
        """Compare the outputs of one run with the expected results."""
        assert set(outs) == {t.name for t, _, _, _ in self.checks}
        for tensor, expected, label, tol in self.checks:
            assert_matches(outs[tensor.name], expected, label, tol)


# =============================================================================================
# take
# =============================================================================================


@pytest.mark.parametrize("rank,axis", RANK_AXES)
def test_take_every_rank_and_axis(backend, rank, axis):
    rng = rng_for("take", rank, axis)
    dtype = DATA_DTYPES[(3 * rank + axis) % len(DATA_DTYPES)]
    xshape = rand_shape(rng, rank, hi=3 if rank == 5 else 4)
    x = random_data(rng, xshape, dtype)
    # One mode per case, rotating with the axis: every rank from 2 up sees all four.
    mode = MODES[(axis + rank) % len(MODES)]
    idt = INDEX_DTYPES[axis % len(INDEX_DTYPES)]
    ishape = rand_shape(rng, (rank + axis) % 3, hi=3)  # index ranks 0 (a scalar), 1 and 2
    idx = index_for(rng, ishape, xshape[axis], idt, mode)
    kw = {"fill_value": fill_for(dtype)} if (mode == "fill" and rank % 2) else {}
    c = Case()
    out = c.b.take(c.input(x), c.input(idx), axis=axis, mode=mode, **kw)
    c.expect(out, R.take(x, idx, axis=axis, mode=mode, **kw),
             f"take x{xshape}:{dtype} axis={axis} idx{ishape}:{idt} mode={mode} {kw}")
    c.run(backend)


@pytest.mark.parametrize("dtype", DATA_DTYPES)
def test_take_every_dtype(backend, dtype):
    rng = rng_for("take-dtype", dtype)
    x = random_data(rng, (3, 4, 2), dtype)
    d = DATA_DTYPES.index(dtype)
    c = Case()
    tx = c.input(x)
    for k, mode in enumerate(("raise", MODES[1 + d % 3])):
        axis = (k + d) % 3 - 1
        index_dtype = INDEX_DTYPES[(k + d) % len(INDEX_DTYPES)]
        idx = index_for(rng, (2, 3), x.shape[axis], index_dtype, mode)
        ti = c.input(idx)
        out = c.b.take(tx, ti, axis=axis, mode=mode)
        c.expect(out, R.take(x, idx, axis=axis, mode=mode), f"take {dtype} {index_dtype} axis={axis} {mode}")
        if mode == "fill":
            fv = fill_for(dtype)
            out = c.b.take(tx, ti, axis=axis, mode=mode, fill_value=fv)
            c.expect(out, R.take(x, idx, axis=axis, mode=mode, fill_value=fv), f"take {dtype} fill={fv}")
    c.run(backend)


TAKE_BATCH_CASES = [
    # x shape, indices shape, axis, batch_dims
    ((2, 5), (2, 3), 1, 1),
    ((2, 5), (2, 3), -1, -1),
    ((2, 2, 5), (2, 2, 3), 2, 2),
    ((2, 1, 5, 4), (2, 3), 2, 1),
    ((2, 1, 5, 4), (2, 3), -2, -1),
    ((3, 4, 5), (3,), 1, 1),
    ((3, 4, 5), (3,), 2, -1),
    ((2, 3, 4, 5), (2, 3, 2, 2), 2, 2),
    ((2, 3, 4, 2), (2, 3, 3), 3, -1),
    ((1, 3, 1, 2, 2), (1, 3, 2), 4, 2),
    ((4, 1), (4, 1, 2), 1, 1),
]


@pytest.mark.parametrize("xshape,ishape,axis,batch_dims", TAKE_BATCH_CASES)
def test_take_batch_dims(backend, xshape, ishape, axis, batch_dims):
    rng = rng_for("take-batch", xshape, ishape, axis, batch_dims)
    dtype = NUMERIC_DTYPES[(len(xshape) + len(ishape) + axis) % len(NUMERIC_DTYPES)]
    x = random_data(rng, xshape, dtype)
    c = Case()
    tx = c.input(x)
    for k, mode in enumerate(mode_pair(TAKE_BATCH_CASES.index((xshape, ishape, axis, batch_dims)))):
        idt = INDEX_DTYPES[k % len(INDEX_DTYPES)]
        idx = index_for(rng, ishape, xshape[axis], idt, mode)
        out = c.b.take(tx, c.input(idx), axis=axis, batch_dims=batch_dims, mode=mode)
        c.expect(out, R.take(x, idx, axis=axis, batch_dims=batch_dims, mode=mode),
                 f"take x{xshape} idx{ishape} axis={axis} batch_dims={batch_dims} {mode}")
    c.run(backend)


@pytest.mark.parametrize("rank,axis", [(r, a) for r, a in RANK_AXES if r <= 3])
def test_take_scalar_index(backend, rank, axis):
    rng = rng_for("take-scalar", rank, axis)
    dtype = DATA_DTYPES[(rank + axis) % len(DATA_DTYPES)]
    xshape = rand_shape(rng, rank, lo=2)
    x = random_data(rng, xshape, dtype)
    size = xshape[axis]
    values = {"raise": -size, "clip": -size - 5, "wrap": 3 * size + 1, "fill": size}
    c = Case()
    tx = c.input(x)
    for k, mode in enumerate(mode_pair(rank + axis)[:1] if rank > 1 else MODES):
        idx = np.array(values[mode], dtype=SIGNED_INDEX_DTYPES[(k + axis) % len(SIGNED_INDEX_DTYPES)])
        out = c.b.take(tx, c.input(idx), axis=axis, mode=mode)
        c.expect(out, R.take(x, idx, axis=axis, mode=mode), f"take x{xshape} scalar {idx!r} axis={axis} {mode}")
    c.run(backend)


@pytest.mark.parametrize("rank", [2, 3])
def test_take_axis_none_flattens(backend, rank):
    rng = rng_for("take-none", rank)
    dtype = DATA_DTYPES[2 * rank]
    xshape = rand_shape(rng, rank, lo=2, hi=3)
    x = random_data(rng, xshape, dtype)
    c = Case()
    tx = c.input(x)
    for k, mode in enumerate(mode_pair(rank - 2)):
        idx = index_for(rng, rand_shape(rng, 1 + k % 2), x.size, INDEX_DTYPES[(k + rank) % len(INDEX_DTYPES)], mode)
        out = c.b.take(tx, c.input(idx), axis=None, mode=mode)
        c.expect(out, R.take(x, idx, axis=None, mode=mode), f"take axis=None x{xshape} {mode}")
    c.run(backend)


# =============================================================================================
# gather
# =============================================================================================


def gather_index_shape(rng, xshape, axis):
    return tuple(int(rng.integers(1, 5)) if j == axis else int(rng.integers(1, d + 1)) for j, d in enumerate(xshape))


@pytest.mark.parametrize("rank,axis", RANK_AXES)
def test_gather_every_rank_and_axis(backend, rank, axis):
    rng = rng_for("gather", rank, axis)
    dtype = DATA_DTYPES[(5 * rank + axis) % len(DATA_DTYPES)]
    xshape = rand_shape(rng, rank, hi=3 if rank == 5 else 4)
    x = random_data(rng, xshape, dtype)
    # One mode per case, rotating with the axis: every rank from 2 up sees all four.
    mode = MODES[(axis + rank + 1) % len(MODES)]
    idt = INDEX_DTYPES[(rank + axis) % len(INDEX_DTYPES)]
    ishape = gather_index_shape(rng, xshape, axis)
    idx = index_for(rng, ishape, xshape[axis], idt, mode)
    kw = {"fill_value": fill_for(dtype)} if (mode == "fill" and rank % 2) else {}
    c = Case()
    out = c.b.gather(c.input(x), c.input(idx), axis=axis, mode=mode, **kw)
    c.expect(out, R.gather(x, idx, axis=axis, mode=mode, **kw),
             f"gather x{xshape}:{dtype} axis={axis} idx{ishape}:{idt} {mode} {kw}")
    c.run(backend)


@pytest.mark.parametrize("dtype", DATA_DTYPES)
def test_gather_every_dtype(backend, dtype):
    rng = rng_for("gather-dtype", dtype)
    x = random_data(rng, (4, 3, 2), dtype)
    c = Case()
    tx = c.input(x)
    d = DATA_DTYPES.index(dtype)
    for k, mode in enumerate(("raise", MODES[1 + d % 3])):
        axis = (k + d) % 3
        index_dtype = INDEX_DTYPES[(k + d + 1) % len(INDEX_DTYPES)]
        idx = index_for(rng, gather_index_shape(rng, x.shape, axis), x.shape[axis], index_dtype, mode)
        kw = {"fill_value": fill_for(dtype)} if mode == "fill" else {}
        out = c.b.gather(tx, c.input(idx), axis=axis, mode=mode, **kw)
        c.expect(out, R.gather(x, idx, axis=axis, mode=mode, **kw), f"gather {dtype} {index_dtype} axis={axis} {mode}")
    c.run(backend)


# =============================================================================================
# gather_nd
# =============================================================================================


def _gather_nd_slice_cases():
    """(rank of x, batch_dims, tuple length m, extra index axes): every valid (r, b, m) up to
    rank 3, and a spread of them for ranks 4 and 5."""
    cases = []
    for r in range(1, 4):
        for b in range(r):
            for m in range(r - b + 1):
                cases.append((r, b, m, (r + b + m) % 2))
    cases += [(4, 0, 0, 1), (4, 0, 2, 0), (4, 0, 4, 1), (4, 1, 1, 1), (4, 1, 3, 0), (4, 2, 2, 1), (4, 3, 0, 0),
              (4, 3, 1, 1)]
    cases += [(5, 0, 3, 1), (5, 1, 4, 0), (5, 2, 0, 1), (5, 3, 2, 0), (5, 4, 1, 0)]
    return cases


GATHER_ND_SLICE_CASES = _gather_nd_slice_cases()


@pytest.mark.parametrize("rank,batch_dims,m,extra", GATHER_ND_SLICE_CASES)
def test_gather_nd_slice_form(backend, rank, batch_dims, m, extra):
    rng = rng_for("gather_nd", rank, batch_dims, m, extra)
    b = batch_dims
    layout = ["last", "first"][(rank + b + m) % 2]
    dtype = DATA_DTYPES[(rank + 2 * b + 3 * m) % len(DATA_DTYPES)]
    xshape = rand_shape(rng, rank, hi=3)
    x = random_data(rng, xshape, dtype)
    lead = xshape[:b] + rand_shape(rng, extra, hi=3)
    c = Case()
    tx = c.input(x)
    n = GATHER_ND_SLICE_CASES.index((rank, batch_dims, m, extra))
    for k, mode in enumerate(mode_pair(n) if rank <= 3 else [MODES[n % len(MODES)]]):
        idt = INDEX_DTYPES[(k + m) % len(INDEX_DTYPES)]
        idx = to_layout(tuple_index(rng, lead, xshape[b:b + m], idt, mode), layout)
        kw = {"fill_value": fill_for(dtype)} if (mode == "fill" and rank % 2) else {}
        out = c.b.gather_nd(tx, c.input(idx), batch_dims=b, index_layout=layout, mode=mode, **kw)
        c.expect(out, R.gather_nd(x, idx, batch_dims=b, index_layout=layout, mode=mode, **kw),
                 f"gather_nd x{xshape}:{dtype} idx{idx.shape}:{idt} b={b} {layout} {mode}")
    c.run(backend)


GATHER_ND_DIMS_CASES = [
    # x shape, dims
    ((5,), [-1]),
    ((3, 4), [1]),
    ((3, 4), [0, 1]),
    ((3, 4), [1, 0]),
    ((2, 3, 4), [2]),
    ((2, 3, 4), [0, 2]),
    ((2, 3, 4), [2, 0, 1]),
    ((2, 3, 4), [-3, -1]),
    ((2, 1, 3, 2), [1, 3]),
    ((2, 3, 2, 3), [3, 2, 1, 0]),
    ((3, 2, 2, 2), [-2]),
    ((2, 2, 1, 2, 3), [0, 4]),
    ((2, 2, 2, 2, 2), [1, 2, 3]),
]


@pytest.mark.parametrize("xshape,dims", GATHER_ND_DIMS_CASES)
def test_gather_nd_dims_form(backend, xshape, dims):
    rng = rng_for("gather_nd-dims", xshape, dims)
    r = len(xshape)
    nd = [d % r for d in dims]
    dtype = DATA_DTYPES[(len(dims) + 3 * r) % len(DATA_DTYPES)]
    x = random_data(rng, xshape, dtype)
    c = Case()
    tx = c.input(x)
    for k, mode in enumerate(mode_pair(GATHER_ND_DIMS_CASES.index((xshape, dims)))):
        layout = ["last", "first"][(k + r) % 2]
        out_shape = tuple(int(rng.integers(1, 4)) if j in nd else int(rng.integers(1, xshape[j] + 1))
                          for j in range(r))
        idx = tuple_index(rng, out_shape, [xshape[d] for d in nd], INDEX_DTYPES[k % len(INDEX_DTYPES)], mode)
        idx = to_layout(idx, layout)
        out = c.b.gather_nd(tx, c.input(idx), dims=dims, index_layout=layout, mode=mode)
        c.expect(out, R.gather_nd(x, idx, dims=dims, index_layout=layout, mode=mode),
                 f"gather_nd x{xshape} dims={dims} idx{idx.shape} {layout} {mode}")
    c.run(backend)


@pytest.mark.parametrize("dtype", DATA_DTYPES)
def test_gather_nd_every_dtype(backend, dtype):
    """One output per dtype; the slice and the dims form alternate, and so do the modes."""
    rng = rng_for("gather_nd-dtype", dtype)
    x = random_data(rng, (3, 4, 2), dtype)
    d = DATA_DTYPES.index(dtype)
    mode, index_dtype = MODES[d % len(MODES)], INDEX_DTYPES[d % len(INDEX_DTYPES)]
    c = Case()
    tx = c.input(x)
    if d % 2:
        idx = tuple_index(rng, (2, 3), x.shape[:2], index_dtype, mode)
        out = c.b.gather_nd(tx, c.input(idx), mode=mode)
        want = R.gather_nd(x, idx, mode=mode)
    else:
        idx = tuple_index(rng, (2, 3, 2), (x.shape[2], x.shape[0]), index_dtype, mode)
        out = c.b.gather_nd(tx, c.input(idx), dims=[2, 0], mode=mode)
        want = R.gather_nd(x, idx, dims=[2, 0], mode=mode)
    c.expect(out, want, f"gather_nd {dtype} {index_dtype} {mode}")
    c.run(backend)


@pytest.mark.parametrize("axis", [0, -1])
def test_gather_equals_gather_nd_with_one_dim(backend, axis):
    rng = rng_for("gather=gather_nd", axis)
    x = random_data(rng, (3, 4, 5), "float32")
    idx = index_any(rng, gather_index_shape(rng, x.shape, axis), x.shape[axis], "int64")
    c = Case()
    tx, ti, ti1 = c.input(x), c.input(idx), c.input(idx[..., None].copy())
    want = R.gather(x, idx, axis=axis, mode="wrap")
    c.expect(c.b.gather(tx, ti, axis=axis, mode="wrap"), want, "gather")
    c.expect(c.b.gather_nd(tx, ti1, dims=[axis], mode="wrap"), want, "gather_nd dims=[axis]")
    c.run(backend)


# =============================================================================================
# scatter
# =============================================================================================


def scatter_shapes(rng, xshape, axis):
    """An index shape and a src shape (>= index) that scatter accepts on ``xshape``."""
    ishape = tuple(int(rng.integers(1, 6)) if j == axis else int(rng.integers(1, d + 1))
                   for j, d in enumerate(xshape))
    sshape = tuple(d + int(rng.integers(0, 2)) for d in ishape)
    return ishape, sshape


@pytest.mark.parametrize("rank,axis", RANK_AXES)
def test_scatter_every_rank_and_axis(backend, rank, axis):
    rng = rng_for("scatter", rank, axis)
    dtype = NUMERIC_DTYPES[(3 * rank + axis) % len(NUMERIC_DTYPES)]
    xshape = rand_shape(rng, rank, hi=3 if rank == 5 else 4)
    c = Case()
    modes = mode_pair(axis + rank) if rank <= 2 else [MODES[(axis + rank) % len(MODES)]]
    for k, mode in enumerate(modes):
        reduce = REDUCTIONS[(k + 2 * axis + 3 * rank) % len(REDUCTIONS)]
        x = data_for_reduce(rng, xshape, dtype, reduce)
        ishape, sshape = scatter_shapes(rng, xshape, axis)
        idx = index_for(rng, ishape, xshape[axis], INDEX_DTYPES[(k + axis) % len(INDEX_DTYPES)], mode)
        src = data_for_reduce(rng, sshape, dtype, reduce)
        out = c.b.scatter(c.input(x), c.input(idx), c.input(src), axis=axis, reduce=reduce, mode=mode)
        c.expect(out, R.scatter(x, idx, src, axis=axis, reduce=reduce, mode=mode),
                 f"scatter x{xshape}:{dtype} idx{ishape} src{sshape} axis={axis} {reduce} {mode}")
    c.run(backend)


@pytest.mark.parametrize("dtype", DATA_DTYPES)
def test_scatter_every_dtype_and_reduction(backend, dtype):
    """Every reduction on every dtype (bool: "none" only, in every mode; complex: no max, min); the mode of each
    reduction rotates with the dtype, so every (reduction, mode) pair is covered too."""
    rng = rng_for("scatter-dtype", dtype)
    xshape = (4, 3)
    d = DATA_DTYPES.index(dtype)
    pairs = [("none", m) for m in MODES] if dtype == "bool" else \
        [(r, MODES[(j + d) % len(MODES)]) for j, r in enumerate(REDUCTIONS)
         if not (dtype in COMPLEX_DTYPES and r in ("max", "min"))]
    c = Case()
    for k, (reduce, mode) in enumerate(pairs):
        axis = k % 2
        x = data_for_reduce(rng, xshape, dtype, reduce)
        # Many more updates than positions on the axis: plenty of duplicates.
        ishape = (6, 3) if axis == 0 else (4, 5)
        idx = index_for(rng, ishape, xshape[axis], INDEX_DTYPES[(k // 2 + d) % len(INDEX_DTYPES)], mode)
        src = data_for_reduce(rng, ishape, dtype, reduce)
        out = c.b.scatter(c.input(x), c.input(idx), c.input(src), axis=axis, reduce=reduce, mode=mode)
        c.expect(out, R.scatter(x, idx, src, axis=axis, reduce=reduce, mode=mode),
                 f"scatter {dtype} {reduce} axis={axis} {mode} {idx.dtype}")
    c.run(backend)


def test_scatter_duplicates_last_write_wins(backend):
    c = Case()
    x = np.zeros(3, np.int32)
    idx = np.array([0, 0, -3, 1, 1, 2, 0, -2], np.int32)
    src = np.arange(1, 9, dtype=np.int32)
    tx, ti, ts = c.input(x), c.input(idx), c.input(src)
    c.expect(c.b.scatter(tx, ti, ts), np.array([7, 8, 6], np.int32), "last write wins")
    c.expect(c.b.scatter(tx, ti, ts, reduce="add"), np.array([1 + 2 + 3 + 7, 4 + 5 + 8, 6], np.int32), "add")
    c.expect(c.b.scatter(tx, ti, ts, reduce="mean"), np.array([13 // 5, 17 // 4, 6 // 2], np.int32), "mean")
    c.expect(c.b.scatter_nd(tx, c.input(idx[:, None].copy()), ts), np.array([7, 8, 6], np.int32), "scatter_nd")
    # Along axis 1 of a 2-D tensor, with a src wider than the index.
    x2 = np.full((2, 3), -1, np.float32)
    idx2 = np.array([[2, 2, 2, 0], [1, -2, 0, 1]], np.int64)
    src2 = np.arange(10, dtype=np.float32).reshape(2, 5)
    want2 = np.array([[3, -1, 2], [7, 8, -1]], np.float32)
    c.expect(c.b.scatter(c.input(x2), c.input(idx2), c.input(src2), axis=1), want2, "axis 1")
    c.run(backend)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_scatter_max_min_propagate_nan(backend, dtype):
    nan = np.nan
    x = np.array([nan, 1.0, 2.0, 3.0, 4.0], dtype)
    idx = np.array([0, 1, 1, 2, 3, 3], np.int64)
    src = np.array([5.0, nan, 7.0, 1.0, -1.0, 9.0], dtype)
    c = Case()
    tx, ti, ts = c.input(x), c.input(idx), c.input(src)
    c.expect(c.b.scatter(tx, ti, ts, reduce="max"), np.array([nan, nan, 2, 9, 4], dtype), "max")
    c.expect(c.b.scatter(tx, ti, ts, reduce="min"), np.array([nan, nan, 1, -1, 4], dtype), "min")
    if dtype == "float32":
        c.expect(c.b.scatter(tx, ti, ts, reduce="add"), np.array([nan, nan, 3, 11, 4], dtype), "add")
        eleven_thirds = np.array(11, dtype) / np.array(3, dtype)
        c.expect(c.b.scatter(tx, ti, ts, reduce="mean"), np.array([nan, nan, 1.5, eleven_thirds, 4], dtype), "mean")
        c.expect(c.b.scatter(tx, ti, ts, reduce="none"), np.array([5, 7, 1, 9, 4], dtype), "none")
    for _, want, label, _ in c.checks:
        ref = R.scatter(x, idx, src, reduce=label)
        np.testing.assert_array_equal(comparable(ref), comparable(want), err_msg=f"reference {label}")
    c.run(backend)


def test_scatter_mean_counts_past_the_data_dtype(backend):
    """More updates to one element than an int8 (or uint8) can count: the divisor is the true
    count, not the count converted to the data dtype."""
    c = Case()
    x8 = np.array([100, -100, 7], np.int8)
    i8 = np.zeros(300, np.int64)
    i8[256:] = 1  # 256 updates to element 0: a count of 257, which is 1 as an int8
    s8 = np.tile(np.array([1, -1], np.int8), 150)  # partial sums stay small, each sum is 0
    want8 = np.array([100 // 257, -100 // 45, 7], np.int8)  # the floor: -100 / 45 gives -3
    c.expect(c.b.scatter(c.input(x8), c.input(i8), c.input(s8), reduce="mean"), want8, "int8 mean, 256 updates")
    xu = np.array([200, 9], np.uint8)
    iu = np.zeros(300, np.int32)
    su = np.zeros(300, np.uint8)
    c.expect(c.b.scatter(c.input(xu), c.input(iu), c.input(su), reduce="mean"), np.array([0, 9], np.uint8),
             "uint8 mean, 300 updates")
    np.testing.assert_array_equal(R.scatter(x8, i8, s8, reduce="mean"), want8)
    c.run(backend)


def true_mean(x, targets, src):
    """The contract's mean computed independently: the sum of the original value and every
    update in float64 (exact for the data below) or int64, divided by the count, rounded once
    to the data dtype (integers toward minus infinity, as PyTorch). Untouched elements keep their value."""
    wide = np.float64 if R.is_float(x.dtype) else np.int64
    total = x.astype(wide)
    count = np.zeros(x.shape, np.int64)
    np.add.at(total, targets, src.astype(wide))
    np.add.at(count, targets, 1)
    n = count + 1
    if R.is_float(x.dtype):
        mean = (total / n).astype(x.dtype)
    else:
        mean = (total // n).astype(x.dtype)
    return np.where(count > 0, mean, x)


def wide_mean_data(rng, dtype, n, width, rows):
    """x (rows, width), update rows (n, width) and src (n, width) whose sums do not fit the data
    dtype. Column 0 sends every update to row 0; the other columns pick rows at random."""
    dt = np.dtype(dtype)
    targets = rng.integers(0, rows, (n, width))
    targets[:, 0] = 0
    if dt == np.float16 or dt.name == "bfloat16":
        # 4096 ones: a float16 sum stops growing at 2048 (bfloat16: 256); sums of quarters up to
        # 8 leave float16.
        x = np.ones((rows, width), dt)
        src = (rng.integers(1, 33, (n, width)) / 4).astype(dt)
        src[:, 0] = 1
    elif dt.kind == "f":
        # Quarters next to 2**24 and 1e8: a float32 sum drops every quarter.
        x = np.full((rows, width), 1e8, dt)
        src = rng.choice(np.array([2.0**24, 2.0**25, 0.25, 0.75]), (n, width)).astype(dt)
        src[:, 0] = 0.25
        src[-1, 0] = -1e8
    else:
        # Values in the top half of the range (bottom half on odd columns): every sum wraps.
        info = np.iinfo(dt)
        hi = min(int(info.max), 2**41)
        src = rng.integers(hi // 2 + 1, hi, (n, width), endpoint=True)
        if info.min < 0:
            src[:, 1::2] = -src[:, 1::2] - 1
        x = src[:rows].astype(dt)
        src = src.astype(dt)
    return x, targets, src


def wide_mean_forms(dtypes=NUMERIC_DTYPES, n=4096, width=8, rows=4):
    """For every dtype, (label, x, update rows, src) of a scatter along axis 0; update rows of a
    slice-form scatter_nd; and the true mean of each, on data whose sums overflow (integers) or
    lose the small values (floats) in the data dtype."""
    rng = rng_for("wide-mean", n, width)
    cols = np.broadcast_to(np.arange(width), (n, width))
    for dtype in dtypes:
        x, targets, src = wide_mean_data(rng, dtype, n, width, rows)
        slice_rows = targets[:, :1]  # every slice lands on row 0
        yield (dtype, x, targets, src, true_mean(x, (targets, cols), src),
               slice_rows, true_mean(x, (np.broadcast_to(slice_rows, (n, width)), cols), src))


def wide_mean_case(**kwargs):
    """scatter, slice-form scatter_nd and element-form scatter_nd with reduce="mean" on the data
    of :func:`wide_mean_forms`, in one program."""
    c = Case("wide_mean")
    for dtype, x, targets, src, want, slice_rows, want_slices in wide_mean_forms(**kwargs):
        tx, ts = c.input(x), c.input(src)
        c.expect(c.b.scatter(tx, c.input(targets), ts, axis=0, reduce="mean"), want, f"scatter mean {dtype}")
        c.expect(c.b.scatter_nd(tx, c.input(slice_rows.astype(np.int32)), ts, reduce="mean"), want_slices,
                 f"scatter_nd slice mean {dtype}")
        c.expect(c.b.scatter_nd(tx, c.input(targets[..., None]), ts, dims=[0], reduce="mean"), want,
                 f"scatter_nd element mean {dtype}")
    return c


def test_scatter_mean_sums_in_a_wide_type(backend):
    """A mean is the true mean whatever the data dtype can hold: float16 4096 x 1.0 gives 1.0,
    integer sums past the dtype's range do not wrap, float32 keeps small values next to large."""
    wide_mean_case().run(backend)


def test_reference_mean_sums_in_a_wide_type():
    """The numpy reference gives the true mean on the same data (two columns, to stay quick)."""
    for dtype, x, targets, src, want, slice_rows, want_slices in wide_mean_forms(width=2):
        np.testing.assert_array_equal(comparable(R.scatter(x, targets, src, axis=0, reduce="mean")), comparable(want),
                                      err_msg=dtype)
        np.testing.assert_array_equal(comparable(R.scatter_nd(x, slice_rows, src, reduce="mean")),
                                      comparable(want_slices), err_msg=dtype)
    assert R.scatter(np.ones(1, np.float16), np.zeros(4096, np.int64), np.ones(4096, np.float16),
                     reduce="mean")[0] == 1.0


def test_scatter_mean_of_int64_sums_wraps_in_int64(backend):
    """An int64 sum past the int64 range wraps around (SEMANTICS.md), then is divided."""
    x = np.array([2**62, 5], np.int64)
    idx = np.zeros(2, np.int64)
    src = np.array([2**62, 2**62], np.int64)
    want = np.array([-(2**62) // 3, 5], np.int64)  # 3 * 2**62 wraps to -2**62; / 3 rounded down
    c = Case()
    c.expect(c.b.scatter(c.input(x), c.input(idx), c.input(src), reduce="mean"), want, "int64 mean, wrapped sum")
    np.testing.assert_array_equal(R.scatter(x, idx, src, reduce="mean"), want)
    c.run(backend)


@pytest.mark.parametrize("target", [b for b in BACKENDS if b != "cpu"])
def test_deterministic_scatter_mean_sums_in_a_wide_type(target):
    """deterministic=True runs float means ordered: the wide sum holds there too."""
    wide_mean_case().run(target, deterministic=True)


@pytest.mark.parametrize("deterministic", [False, True])
def test_emulated_gpu_scatter_mean_sums_in_a_wide_type_on_a_small_grid(deterministic):
    """One block of 256 threads: grid-stride loops take many turns and the atomic adds into the
    sums combine out of row-major order; the mean is still the true one."""
    c = wide_mean_case()
    exe = c.run("cuda-emu", deterministic=deterministic)
    exe.max_blocks = 1
    c.check(exe.run(dict(c.feeds)))


FLOAT_TOL = {"float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2), "float32": (1e-5, 1e-5), "float64": (1e-12, 1e-12)}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_scatter_float_reductions_on_general_values(backend, dtype):
    """Values that do not add exactly: compared with a tolerance for the dtype."""
    rng = rng_for("scatter-float", dtype)
    c = Case()
    for k, reduce in enumerate(["add", "mul", "mean"]):
        x = (rng.standard_normal((5, 4)) * (1 if reduce == "mul" else 10)).astype(dtype)
        idx = index_in_range(rng, (12, 4), 5, INDEX_DTYPES[k % len(INDEX_DTYPES)])
        src = (rng.uniform(0.5, 1.5, (12, 4)) if reduce == "mul" else rng.standard_normal((12, 4)) * 10).astype(dtype)
        out = c.b.scatter(c.input(x), c.input(idx), c.input(src), axis=0, reduce=reduce)
        want = R.scatter(x, idx, src, axis=0, reduce=reduce)
        rtol, atol = FLOAT_TOL[dtype]
        c.expect(out, want, f"scatter {dtype} {reduce}", tol=(rtol, atol * max(1.0, float(np.abs(want).max()))))
    c.run(backend)


# =============================================================================================
# scatter_nd
# =============================================================================================


def _scatter_nd_slice_cases():
    cases = []
    for r in range(1, 5):
        for m in range(r + 1):
            cases.append((r, m, (r + m) % 3))
    cases += [(5, 2, 1), (5, 5, 1), (5, 0, 0)]
    return cases


@pytest.mark.parametrize("rank,m,lead_rank", _scatter_nd_slice_cases())
def test_scatter_nd_slice_form(backend, rank, m, lead_rank):
    rng = rng_for("scatter_nd", rank, m, lead_rank)
    dtype = NUMERIC_DTYPES[(2 * rank + m) % len(NUMERIC_DTYPES)]
    xshape = rand_shape(rng, rank, hi=3)
    c = Case()
    n = rank + m + lead_rank
    for k, mode in enumerate(mode_pair(n) if rank <= 3 else [MODES[n % len(MODES)]]):
        layout = ["last", "first"][(k + rank + m) % 2]
        reduce = REDUCTIONS[(k + rank + 2 * m) % len(REDUCTIONS)]
        x = data_for_reduce(rng, xshape, dtype, reduce)
        lead = rand_shape(rng, lead_rank, hi=4)
        idx = tuple_index(rng, lead, xshape[:m], INDEX_DTYPES[(k + m) % len(INDEX_DTYPES)], mode)
        src = data_for_reduce(rng, lead + xshape[m:], dtype, reduce)
        idx = to_layout(idx, layout)
        out = c.b.scatter_nd(c.input(x), c.input(idx), c.input(src), reduce=reduce, index_layout=layout, mode=mode)
        c.expect(out, R.scatter_nd(x, idx, src, reduce=reduce, index_layout=layout, mode=mode),
                 f"scatter_nd x{xshape}:{dtype} idx{idx.shape} {layout} {reduce} {mode}")
    c.run(backend)


@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_scatter_nd_every_reduction(backend, reduce):
    rng = rng_for("scatter_nd-reduce", reduce)
    c = Case()
    n = REDUCTIONS.index(reduce)
    for k, mode in enumerate(mode_pair(n)):
        layout = ["last", "first"][(k + n) % 2]
        dtype = NUMERIC_DTYPES[(2 * k + n) % len(NUMERIC_DTYPES)]
        xshape = (3, 2, 4)
        x = data_for_reduce(rng, xshape, dtype, reduce)
        idx = tuple_index(rng, (5,), xshape[:2], INDEX_DTYPES[k % len(INDEX_DTYPES)], mode)
        src = data_for_reduce(rng, (5, 4), dtype, reduce)
        idx = to_layout(idx, layout)
        out = c.b.scatter_nd(c.input(x), c.input(idx), c.input(src), reduce=reduce, index_layout=layout, mode=mode)
        c.expect(out, R.scatter_nd(x, idx, src, reduce=reduce, index_layout=layout, mode=mode),
                 f"scatter_nd {dtype} {reduce} {layout} {mode}")
    c.run(backend)


SCATTER_ND_DIMS_CASES = [
    ((5,), [0]),
    ((5,), [-1]),
    ((3, 4), [0]),
    ((3, 4), [1, 0]),
    ((3, 4), [-1]),
    ((2, 3, 4), [2]),
    ((2, 3, 4), [0, 2]),
    ((2, 3, 4), [2, 0, 1]),
    ((2, 1, 3, 2), [-3, 3]),
    ((2, 3, 2, 3), [3, 2, 1, 0]),
    ((2, 2, 1, 2, 3), [0, 4]),
    ((2, 2, 2, 2, 2), [1, 2, 3]),
]


@pytest.mark.parametrize("xshape,dims", SCATTER_ND_DIMS_CASES)
def test_scatter_nd_dims_form(backend, xshape, dims):
    rng = rng_for("scatter_nd-dims", xshape, dims)
    r = len(xshape)
    nd = [d % r for d in dims]
    dtype = DATA_DTYPES[(len(dims) + 2 * r) % len(DATA_DTYPES)]
    c = Case()
    for k, mode in enumerate(mode_pair(SCATTER_ND_DIMS_CASES.index((xshape, dims)))):
        layout = ["last", "first"][(k + r) % 2]
        reduce = "none" if dtype == "bool" else REDUCTIONS[(k + r + len(dims)) % len(REDUCTIONS)]
        if dtype in COMPLEX_DTYPES and reduce in ("max", "min"):
            reduce = "mul"
        x = data_for_reduce(rng, xshape, dtype, reduce)
        sshape = tuple(int(rng.integers(1, 4)) if j in nd else int(rng.integers(1, xshape[j] + 1)) for j in range(r))
        idx = tuple_index(rng, sshape, [xshape[d] for d in nd], INDEX_DTYPES[k % len(INDEX_DTYPES)], mode)
        src = data_for_reduce(rng, sshape, dtype, reduce)
        idx = to_layout(idx, layout)
        out = c.b.scatter_nd(c.input(x), c.input(idx), c.input(src), dims=dims, reduce=reduce,
                             index_layout=layout, mode=mode)
        c.expect(out, R.scatter_nd(x, idx, src, dims=dims, reduce=reduce, index_layout=layout, mode=mode),
                 f"scatter_nd x{xshape}:{dtype} dims={dims} src{sshape} {layout} {reduce} {mode}")
    c.run(backend)


@pytest.mark.parametrize("axis", [0, -1])
def test_scatter_equals_scatter_nd_with_one_dim(backend, axis):
    rng = rng_for("scatter=scatter_nd", axis)
    x = random_data(rng, (3, 4, 2), "int16")
    ishape, _ = scatter_shapes(rng, x.shape, axis)
    idx = index_any(rng, ishape, x.shape[axis], "int32")
    src = random_data(rng, ishape, "int16")
    c = Case()
    tx, ti, ti1, ts = c.input(x), c.input(idx), c.input(idx[..., None].copy()), c.input(src)
    for reduce in ("none", "add"):
        want = R.scatter(x, idx, src, axis=axis, reduce=reduce, mode="clip")
        c.expect(c.b.scatter(tx, ti, ts, axis=axis, reduce=reduce, mode="clip"), want, f"scatter {reduce}")
        c.expect(c.b.scatter_nd(tx, ti1, ts, dims=[axis], reduce=reduce, mode="clip"), want, f"scatter_nd {reduce}")
    c.run(backend)


# =============================================================================================
# size-0 dimensions, tuple length 0, non-contiguous inputs, composition
# =============================================================================================


def test_size_zero_dimensions(backend):
    rng = rng_for("empty")
    c = Case()
    f32 = lambda shape: random_data(rng, shape, "float32")  # noqa: E731
    x03, x30, x23, x34 = f32((0, 3)), f32((3, 0)), f32((2, 3)), f32((3, 4))
    t03, t30, t23, t34 = c.input(x03), c.input(x30), c.input(x23), c.input(x34)

    made = []

    def idx(values, shape=None):
        """An index array; the index dtype alternates from one to the next."""
        a = np.array(values, SIGNED_INDEX_DTYPES[len(made) % len(SIGNED_INDEX_DTYPES)])
        made.append(a)
        return a.reshape(shape) if shape is not None else a

    cases = [
        ("take empty axis, fill", lambda i: c.b.take(t03, i, mode="fill", fill_value=1.5),
         lambda i: R.take(x03, i, mode="fill", fill_value=1.5), idx([0, -1, 5])),
        ("take empty slice", lambda i: c.b.take(t30, i), lambda i: R.take(x30, i), idx([[0, -1], [2, 1]])),
        ("take empty index clip", lambda i: c.b.take(t23, i, axis=1, mode="clip"),
         lambda i: R.take(x23, i, axis=1, mode="clip"), idx([], (0,))),
        ("take empty x and index", lambda i: c.b.take(t03, i), lambda i: R.take(x03, i), idx([], (0, 2))),
        ("gather empty index", lambda i: c.b.gather(t23, i, axis=1), lambda i: R.gather(x23, i, axis=1), idx([], (0, 2))),
        ("gather empty axis, fill", lambda i: c.b.gather(t30, i, axis=1, mode="fill"),
         lambda i: R.gather(x30, i, axis=1, mode="fill"), idx([[0, 1], [-1, 2]])),
        ("gather_nd empty axis, fill", lambda i: c.b.gather_nd(t03, i, mode="fill", fill_value=-1),
         lambda i: R.gather_nd(x03, i, mode="fill", fill_value=-1), idx([[0], [1], [-1]])),
        ("gather_nd empty index", lambda i: c.b.gather_nd(t23, i), lambda i: R.gather_nd(x23, i), idx([], (0, 2))),
        ("gather_nd tuple length 0", lambda i: c.b.gather_nd(t23, i), lambda i: R.gather_nd(x23, i), idx([], (4, 0))),
        ("gather_nd tuple length 0, first", lambda i: c.b.gather_nd(t23, i, index_layout="first"),
         lambda i: R.gather_nd(x23, i, index_layout="first"), idx([], (0, 3))),
        ("gather_nd tuple length 0, batch", lambda i: c.b.gather_nd(t34, i, batch_dims=1),
         lambda i: R.gather_nd(x34, i, batch_dims=1), idx([], (3, 2, 0))),
    ]
    for label, build, ref, i in cases:
        c.expect(build(c.input(i)), ref(i), label)

    src03, src24, src34 = f32((0, 3)), f32((2, 4)), f32((0, 4))
    s03, s24, s34 = c.input(src03), c.input(src24), c.input(src34)
    scatters = [
        ("scatter empty x", lambda i: c.b.scatter(t03, i, s03, axis=1), lambda i: R.scatter(x03, i, src03, axis=1),
         idx([], (0, 3))),
        ("scatter empty index", lambda i: c.b.scatter(t34, i, s24, reduce="add"),
         lambda i: R.scatter(x34, i, src24, reduce="add"), idx([], (0, 4))),
        ("scatter empty axis, fill", lambda i: c.b.scatter(t03, i, s24, mode="fill"),
         lambda i: R.scatter(x03, i, src24, mode="fill"), idx([[0, 1, -1], [2, 0, 0]])),
        ("scatter_nd empty index", lambda i: c.b.scatter_nd(t34, i, s34, reduce="mul"),
         lambda i: R.scatter_nd(x34, i, src34, reduce="mul"), idx([], (0, 1))),
    ]
    for label, build, ref, i in scatters:
        c.expect(build(c.input(i)), ref(i), label)
    # Updates aimed at an empty axis are all dropped in fill mode.
    i = idx([[0], [-1]])
    src = f32((2, 3))
    c.expect(c.b.scatter_nd(t03, c.input(i), c.input(src), mode="fill"),
             R.scatter_nd(x03, i, src, mode="fill"), "scatter_nd empty axis, fill")
    # A tuple of length 0 addresses the whole tensor: every update lands on all of it.
    i = idx([], (2, 0))
    src = random_data(rng, (2, 2, 3), "float32", "small")
    ts = c.input(src)
    for reduce in ("none", "add", "max"):
        c.expect(c.b.scatter_nd(t23, c.input(i), ts, reduce=reduce), R.scatter_nd(x23, i, src, reduce=reduce),
                 f"scatter_nd tuple length 0 {reduce}")
    c.run(backend)


def test_scatter_nd_into_rank_zero(backend):
    x = np.array(5, np.int32)
    idx = np.zeros((3, 0), np.int64)
    src = np.array([1, 2, 3], np.int32)
    c = Case()
    tx, ti, ts = c.input(x), c.input(idx), c.input(src)
    c.expect(c.b.scatter_nd(tx, ti, ts, reduce="add"), np.array(11, np.int32), "add")
    c.expect(c.b.scatter_nd(tx, ti, ts), np.array(3, np.int32), "none")
    assert R.scatter_nd(x, idx, src, reduce="add") == 11
    c.run(backend)


def _noncontiguous(array, how):
    """The same values as ``array`` in a view that is not C-contiguous (or, for "unaligned",
    a C-contiguous view that starts one byte into its buffer)."""
    if how == "unaligned":
        buf = np.zeros(array.nbytes + 1, np.uint8)
        view = np.frombuffer(buf.data, dtype=array.dtype, offset=1, count=array.size).reshape(array.shape)
    elif how == "strided":
        big = np.zeros(tuple(2 * d for d in array.shape), array.dtype)
        view = big[tuple(slice(None, None, 2) for _ in array.shape)]
    elif how == "fortran":
        return np.asfortranarray(array)
    else:  # "reversed": negative strides on every axis
        view = np.flip(np.empty_like(array))
    view[...] = array
    return view


@pytest.mark.parametrize("how", ["strided", "fortran", "reversed", "unaligned"])
def test_noncontiguous_inputs(backend, how):
    rng = rng_for("noncontiguous", how)
    nc = lambda a: _noncontiguous(a, how)  # noqa: E731
    x = nc(random_data(rng, (4, 3, 5), "float64"))
    xi = nc(random_data(rng, (4, 3, 5), "int16"))
    if how == "unaligned":
        assert not x.flags.aligned and not xi.flags.aligned
    else:
        assert not x.flags.c_contiguous and not xi.flags.c_contiguous
    c = Case()
    tx, txi = c.input(x), c.input(xi)

    i_take = nc(index_any(rng, (3, 2), 3, "int32"))
    c.expect(c.b.take(tx, c.input(i_take), axis=1, mode="wrap"), R.take(x, i_take, axis=1, mode="wrap"), "take")
    i_g = nc(index_any(rng, (4, 3, 4), 5, "int64"))
    c.expect(c.b.gather(txi, c.input(i_g), axis=2, mode="fill"), R.gather(xi, i_g, axis=2, mode="fill"), "gather")
    i_nd = nc(tuple_index(rng, (2, 3), (4, 3), "int64", "raise"))
    c.expect(c.b.gather_nd(tx, c.input(i_nd)), R.gather_nd(x, i_nd), "gather_nd")
    i_s = nc(index_any(rng, (4, 2, 5), 3, "int32"))
    s = nc(random_data(rng, (4, 3, 5), "int16"))
    c.expect(c.b.scatter(txi, c.input(i_s), c.input(s), axis=1, reduce="add", mode="clip"),
             R.scatter(xi, i_s, s, axis=1, reduce="add", mode="clip"), "scatter")
    i_snd = nc(tuple_index(rng, (3, 2), (4, 3), "int64", "wrap"))
    s2 = nc(random_data(rng, (3, 2, 5), "float64"))
    c.expect(c.b.scatter_nd(tx, c.input(i_snd), c.input(s2), mode="wrap"),
             R.scatter_nd(x, i_snd, s2, mode="wrap"), "scatter_nd")
    c.run(backend)


def test_operators_compose_in_one_program(backend):
    """A gather feeding a scatter feeding a take, with intermediate results not returned."""
    rng = rng_for("compose")
    x = random_data(rng, (5, 4), "float32", "small")
    i = index_in_range(rng, (3, 4), 5, "int64")
    rows = index_any(rng, (6,), 5, "int32")
    c = Case()
    tx, ti, tr = c.input(x), c.input(i), c.input(rows)
    g = c.b.gather(tx, ti, axis=0)
    s = c.b.scatter(c.b.fill_constant((5, 4), 1.0, "float32"), ti, g, axis=0, reduce="add")
    t = c.b.take(s, tr, axis=0, mode="clip")
    g_ref = R.gather(x, i, axis=0)
    s_ref = R.scatter(np.ones((5, 4), np.float32), i, g_ref, axis=0, reduce="add")
    c.expect(t, R.take(s_ref, rows, axis=0, mode="clip"), "take(scatter(gather))")
    c.expect(g, g_ref, "gather, also consumed")
    c.run(backend)


def test_chains_of_operators(backend):
    """Gathers feeding gathers and scatters feeding gathers, intermediates not returned."""
    rng = rng_for("chains")
    x = random_data(rng, (5, 4, 3), "int32")
    c = Case()
    tx = c.input(x)

    i = index_any(rng, (5, 6, 3), 4, "int64")
    j = index_any(rng, (7,), 5, "int32")
    ti, tj = c.input(i), c.input(j)
    g = c.b.gather(tx, ti, axis=1, mode="wrap")
    c.expect(c.b.take(g, tj, axis=0, mode="fill", fill_value=-7),
             R.take(R.gather(x, i, axis=1, mode="wrap"), j, axis=0, mode="fill", fill_value=-7), "take(gather)")

    k = index_any(rng, (2, 2), 4, "int32")
    tup = tuple_index(rng, (6,), (5, 2), "int64", "raise")
    t = c.b.take(tx, c.input(k), axis=1, mode="clip")
    c.expect(c.b.gather_nd(t, c.input(tup)), R.gather_nd(R.take(x, k, axis=1, mode="clip"), tup),
             "gather_nd(take)")

    rows = index_in_range(rng, (8,), 5, "int64")
    i2 = index_any(rng, (8, 4, 3), 5, "int32")
    tr = c.input(rows)
    src = c.b.take(tx, tr, axis=0)
    c.expect(c.b.scatter(tx, c.input(i2), src, axis=0, reduce="max", mode="wrap"),
             R.scatter(x, i2, R.take(x, rows, axis=0), axis=0, reduce="max", mode="wrap"), "scatter(src=take)")

    tup2 = tuple_index(rng, (4,), (5,), "int64", "wrap")
    upd = random_data(rng, (4, 4, 3), "int32")
    j2 = index_any(rng, (2, 3), 4, "int64")
    sn = c.b.scatter_nd(tx, c.input(tup2), c.input(upd), reduce="add", mode="wrap")
    c.expect(c.b.take(sn, c.input(j2), axis=1, mode="wrap"),
             R.take(R.scatter_nd(x, tup2, upd, reduce="add", mode="wrap"), j2, axis=1, mode="wrap"),
             "take(scatter_nd)")

    # A gather of a gather whose intermediate is also an output.
    g2 = c.b.gather(tx, ti, axis=1, mode="clip")
    c.expect(g2, R.gather(x, i, axis=1, mode="clip"), "gather, also consumed")
    c.expect(c.b.take(g2, tj, axis=-1, mode="wrap"), R.take(R.gather(x, i, axis=1, mode="clip"), j, axis=-1, mode="wrap"),
             "take(gather) with the gather returned")
    c.run(backend)


def test_raise_in_a_producer_whose_bad_element_is_never_read(backend):
    """The gather's index is out of range at a row the take never selects: the gather still
    raises, and the error names the gather and its index."""
    b = cl.NetBuilder("producer_raise")
    tx = b.create_input("float32", (4, 3), "x")
    ti = b.create_input("int64", (3, 3), "gather_index")
    tj = b.create_input("int32", (2,), "rows")
    out = b.take(b.gather(tx, ti, axis=0), tj, axis=0)
    exe = cl.compile(b.build(outputs=[out]), target=backend)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    i = np.array([[0, 1, 2], [3, 2, 1], [1, 1, 1]], np.int64)
    rows = np.array([0, 2], np.int32)
    assert_matches(exe(x=x, gather_index=i, rows=rows), R.take(R.gather(x, i), rows), "in range")
    i[1, 2] = 4
    with pytest.raises(cl.IndexOutOfRangeError) as info:
        exe(x=x, gather_index=i, rows=rows)
    msg = str(info.value)
    assert "gather" in msg and "gather_index" in msg and "(1, 2)" in msg and "4" in msg, msg


def test_large_inputs(backend):
    """Sizes big enough for the CPU to split stages across threads; run twice, bit-identical."""
    rng = rng_for("large")
    c = Case()
    x = random_data(rng, (300, 128), "float32")
    idx = index_any(rng, (400,), 300, "int64")
    c.expect(c.b.take(c.input(x), c.input(idx), axis=0, mode="wrap"), R.take(x, idx, axis=0, mode="wrap"), "take")

    xg = random_data(rng, (160, 256), "int16")
    ig = index_any(rng, (160, 256), 256, "int32")
    c.expect(c.b.gather(c.input(xg), c.input(ig), axis=1, mode="clip"), R.gather(xg, ig, axis=1, mode="clip"),
             "gather")

    xs = random_data(rng, (64, 16), "float64", "small")
    is_ = index_in_range(rng, (4096, 16), 64, "int64")
    ss = random_data(rng, (4096, 16), "float64", "small")
    c.expect(c.b.scatter(c.input(xs), c.input(is_), c.input(ss), axis=0, reduce="add"),
             R.scatter(xs, is_, ss, axis=0, reduce="add"), "scatter add along axis 0")

    xn = random_data(rng, (2048, 8), "int16")
    in_ = index_any(rng, (2048, 16), 8, "int32")
    sn = random_data(rng, (2048, 16), "int16")
    c.expect(c.b.scatter(c.input(xn), c.input(in_), c.input(sn), axis=1, mode="fill"),
             R.scatter(xn, in_, sn, axis=1, mode="fill"), "scatter none along axis 1")

    xm = random_data(rng, (128, 64), "float32", "small")
    im = tuple_index(rng, (1024,), (128,), "int64", "clip")
    sm = random_data(rng, (1024, 64), "float32", "small")
    c.expect(c.b.scatter_nd(c.input(xm), c.input(im), c.input(sm), reduce="mean", mode="clip"),
             R.scatter_nd(xm, im, sm, reduce="mean", mode="clip"), "scatter_nd mean")
    exe = c.run(backend)
    first = exe.run(dict(c.feeds))
    second = exe.run(dict(c.feeds))
    for name in first:
        assert first[name].tobytes() == second[name].tobytes(), f"{name} differs between runs"


FILL_VALUES = [("float16", 0.1), ("float16", 65504.0), ("float16", float("nan")), ("float32", -np.inf),
               ("float32", 1e-45), ("float64", -0.0), ("int64", -2**63), ("int64", 2**62 + 1), ("uint8", 255),
               ("int8", -128), ("int16", 32767), ("bool", True)]


def test_fill_values_at_the_edges_of_each_dtype(backend):
    c = Case()
    for dtype, fv in FILL_VALUES:
        x = random_data(np.random.default_rng(0), (3,), dtype)
        idx = np.array([0, 5, -4, 2], np.int64)
        c.expect(c.b.take(c.input(x), c.input(idx), mode="fill", fill_value=fv),
                 R.take(x, idx, mode="fill", fill_value=fv), f"take {dtype} fill_value={fv!r}")
    c.run(backend)


def test_results_survive_later_runs(backend):
    """Arrays returned by one run are not reused or overwritten by the next."""
    rng = rng_for("later-runs")
    c = Case()
    x = random_data(rng, (6, 4), "float32")
    i = index_in_range(rng, (3, 4), 6, "int64")
    tx, ti = c.input(x), c.input(i)
    g = c.b.gather(tx, ti, axis=0)
    s = c.b.scatter(tx, ti, g, axis=0, reduce="add")
    c.expect(g, R.gather(x, i, axis=0), "gather")
    c.expect(s, R.scatter(x, i, R.gather(x, i, axis=0), axis=0, reduce="add"), "scatter")
    exe = c.run(backend)
    first = exe.run(dict(c.feeds))
    kept = {k: v.copy() for k, v in first.items()}
    x2 = random_data(rng, (6, 4), "float32")
    i2 = index_in_range(rng, (3, 4), 6, "int64")
    second = exe.run({"in0": x2, "in1": i2})
    np.testing.assert_array_equal(second[g.name], R.gather(x2, i2, axis=0))
    for name, value in kept.items():
        np.testing.assert_array_equal(first[name], value, err_msg=f"{name} changed by a later run")
        assert not np.shares_memory(first[name], second[name])


# =============================================================================================
# mode="raise": out-of-range indices stop the run with a precise IndexError
# =============================================================================================


def _raise_case(op, rng, index_dtype):
    """(build(b, x, index, src) -> tensor, x, good index, src or None, reference(index), sizes)."""
    if op == "take":
        x = random_data(rng, (3, 4), "float32")
        return (lambda b, tx, ti, ts: b.take(tx, ti, axis=1), x, index_in_range(rng, (2, 3), 4, index_dtype), None,
                lambda i: R.take(x, i, axis=1), 4)
    if op == "take-scalar":
        x = random_data(rng, (3, 4), "int8")
        return (lambda b, tx, ti, ts: b.take(tx, ti, axis=0), x,
                np.array(-3 if np.dtype(index_dtype).kind == "i" else 2, index_dtype), None,
                lambda i: R.take(x, i, axis=0), 3)
    if op == "gather":
        x = random_data(rng, (3, 4, 2), "int64")
        return (lambda b, tx, ti, ts: b.gather(tx, ti, axis=-2), x, index_in_range(rng, (2, 5, 2), 4, index_dtype),
                None, lambda i: R.gather(x, i, axis=-2), 4)
    if op in ("gather_nd", "gather_nd-first"):
        layout = "first" if op.endswith("first") else "last"
        x = random_data(rng, (3, 3, 5), "float16")
        i = to_layout(np.stack([index_in_range(rng, (2, 3), 3, index_dtype)] * 2, axis=-1), layout)
        return (lambda b, tx, ti, ts: b.gather_nd(tx, ti, index_layout=layout, batch_dims=0), x, i, None,
                lambda j: R.gather_nd(x, j, index_layout=layout), 3)
    if op == "gather_nd-dims":
        x = random_data(rng, (4, 4), "uint8")
        i = np.stack([index_in_range(rng, (3, 2), 4, index_dtype)] * 2, axis=-1)
        return (lambda b, tx, ti, ts: b.gather_nd(tx, ti, dims=[1, 0]), x, i, None,
                lambda j: R.gather_nd(x, j, dims=[1, 0]), 4)
    if op == "scatter":
        x = random_data(rng, (3, 4), "int32")
        src = random_data(rng, (3, 4), "int32")
        return (lambda b, tx, ti, ts: b.scatter(tx, ti, ts, axis=1, reduce="add"), x,
                index_in_range(rng, (3, 4), 4, index_dtype), src,
                lambda i: R.scatter(x, i, src, axis=1, reduce="add"), 4)
    if op in ("scatter_nd", "scatter_nd-first"):
        layout = "first" if op.endswith("first") else "last"
        x = random_data(rng, (3, 3, 2), "float64")
        src = random_data(rng, (4, 2), "float64")
        i = to_layout(np.stack([index_in_range(rng, (4,), 3, index_dtype)] * 2, axis=-1), layout)
        return (lambda b, tx, ti, ts: b.scatter_nd(tx, ti, ts, index_layout=layout), x, i, src,
                lambda j: R.scatter_nd(x, j, src, index_layout=layout), 3)
    if op == "scatter_nd-dims":
        x = random_data(rng, (4, 4), "bool")
        src = random_data(rng, (3, 2), "bool")
        i = np.stack([index_in_range(rng, (3, 2), 4, index_dtype)] * 2, axis=-1)
        return (lambda b, tx, ti, ts: b.scatter_nd(tx, ti, ts, dims=[-1, 0]), x, i, src,
                lambda j: R.scatter_nd(x, j, src, dims=[-1, 0]), 4)
    raise AssertionError(op)


RAISE_OPS = ["take", "take-scalar", "gather", "gather_nd", "gather_nd-first", "gather_nd-dims",
             "scatter", "scatter_nd", "scatter_nd-first", "scatter_nd-dims"]


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES)
@pytest.mark.parametrize("op", RAISE_OPS)
def test_raise_mode_reports_the_bad_index(backend, op, index_dtype):
    rng = rng_for("raise", op, index_dtype)
    build, x, good, src, ref, size = _raise_case(op, rng, index_dtype)
    b = cl.NetBuilder("raise_case")
    tx = b.create_input(x.dtype, x.shape, "data")
    ti = b.create_input(good.dtype, good.shape, "the_index")
    ts = b.create_input(src.dtype, src.shape, "updates") if src is not None else None
    out = build(b, tx, ti, ts)
    exe = cl.compile(b.build(outputs=[out]), target=backend)
    feeds = {"data": x, "the_index": good}
    if src is not None:
        feeds["updates"] = src
    # In range (negative values included): the reference result.
    assert_matches(exe.run(feeds)[out.name], ref(good), f"{op} in range")

    op_name = op.split("-")[0]
    info = np.iinfo(index_dtype)
    # Out of range on both sides, and the dtype's extremes (uint64's maximum too: the error
    # must give its true value, not the int64 it reads as).
    for value in [v for v in dict.fromkeys((size, -size - 1, int(info.max), int(info.min)))
                  if info.min <= v <= info.max and not -size <= v < size]:
        bad = good.copy()
        position = tuple(int(rng.integers(0, d)) for d in bad.shape)
        bad[position] = value
        with pytest.raises(IndexError):
            ref(bad)
        feeds["the_index"] = bad
        saved = {k: v.copy() for k, v in feeds.items()}
        with pytest.raises(cl.IndexOutOfRangeError) as info:
            exe.run(feeds)
        err = info.value
        assert isinstance(err, IndexError)
        msg = str(err)
        assert op_name in msg, msg
        assert "the_index" in msg, msg
        assert str(position) in msg, msg
        assert str(int(value)) in msg, msg
        assert f"[{-size}, {size - 1}]" in msg, msg
        assert err.position == position and err.value == int(value)
        for k, v in feeds.items():
            np.testing.assert_array_equal(v, saved[k], err_msg=f"{op}: input {k} changed by a failed run")
    # The executable is still usable after a failed run.
    feeds["the_index"] = good
    assert_matches(exe.run(feeds)[out.name], ref(good), f"{op} after errors")


def test_raise_mode_on_an_empty_axis(backend):
    b = cl.NetBuilder("empty_axis")
    tx = b.create_input("float32", (0, 3), "x")
    ti = b.create_input("int64", (2,), "rows")
    out = b.take(tx, ti, axis=0)
    exe = cl.compile(b.build(outputs=[out]), target=backend)
    with pytest.raises(cl.IndexOutOfRangeError) as info:
        exe(x=np.zeros((0, 3), np.float32), rows=np.array([0, 0], np.int64))
    msg = str(info.value)
    assert "take" in msg and "rows" in msg and "(0,)" in msg, msg


def test_raise_mode_error_in_a_later_operator(backend):
    """An error in the second operator of a program names that operator and its index."""
    b = cl.NetBuilder("two_ops")
    tx = b.create_input("int32", (4, 3), "x")
    ti = b.create_input("int32", (2, 3), "first_index")
    tj = b.create_input("int64", (2, 3), "second_index")
    g = b.gather(tx, ti, axis=0)
    s = b.scatter(tx, tj, g, axis=1)
    exe = cl.compile(b.build(outputs=[s]), target=backend)
    x = np.arange(12, dtype=np.int32).reshape(4, 3)
    i = np.array([[0, 1, 3], [-1, -4, 2]], np.int32)
    j = np.array([[0, 1, 2], [2, 1, 0]], np.int64)
    assert_matches(exe(x=x, first_index=i, second_index=j), R.scatter(x, j, R.gather(x, i), axis=1), "two ops")
    j[1, 2] = 3
    with pytest.raises(cl.IndexOutOfRangeError) as info:
        exe(x=x, first_index=i, second_index=j)
    msg = str(info.value)
    assert "scatter" in msg and "second_index" in msg and "(1, 2)" in msg and " 3 " in msg, msg


# =============================================================================================
# build-time rules the numerical matrix relies on
# =============================================================================================


def test_clip_and_wrap_on_an_empty_axis_are_build_errors():
    b = cl.NetBuilder("empty")
    x = b.create_input("float32", (0, 3), "x")
    i = b.create_input("int64", (2,), "i")
    for mode in ("clip", "wrap"):
        with pytest.raises(cl.ValidationError):
            b.take(x, i, axis=0, mode=mode)
        with pytest.raises(cl.ValidationError):
            b.gather_nd(x, b.create_input("int64", (2, 1), f"j_{mode}"), mode=mode)
    # With no index values there is nothing to map: allowed.
    e = b.create_input("int64", (0,), "e")
    assert b.take(x, e, axis=0, mode="clip").shape == (0, 3)


@pytest.mark.parametrize("reduce", ["mean", "sub"])
def test_bool_data_has_no_mean_or_difference(reduce):
    """Bool data combines with none/add/mul/max/min (test_breadth.py, against PyTorch)."""
    b = cl.NetBuilder("bool")
    x = b.create_input("bool", (3,), "x")
    i = b.create_input("int32", (2,), "i")
    s = b.create_input("bool", (2,), "s")
    b.scatter(x, i, s, reduce="add")
    with pytest.raises(TypeError):
        b.scatter_nd(x, b.create_input("int32", (2, 1), f"j_{reduce}"), s, reduce=reduce)


# =============================================================================================
# the reference itself, against numpy (no compiler involved)
# =============================================================================================


def test_reference_agrees_with_numpy():
    rng = rng_for("reference")
    x = rng.standard_normal((4, 5, 3))
    for axis in range(3):
        idx = rng.integers(-x.shape[axis], x.shape[axis], size=(2, 3))
        np.testing.assert_array_equal(R.take(x, idx, axis=axis), np.take(x, idx, axis=axis))
        wide = rng.integers(-20, 20, size=(2, 3))
        pos = np.where((wide < 0) & (wide >= -x.shape[axis]), wide + x.shape[axis], wide)
        for mode in ("clip", "wrap"):
            np.testing.assert_array_equal(R.take(x, wide, axis=axis, mode=mode), np.take(x, pos, axis=axis, mode=mode))
        gshape = tuple(4 if j == axis else d for j, d in enumerate(x.shape))
        gi = rng.integers(0, x.shape[axis], size=gshape)
        np.testing.assert_array_equal(R.gather(x, gi, axis=axis), np.take_along_axis(x, gi, axis=axis))
        # Unique targets per line: put_along_axis is then well defined.
        perm = np.argsort(rng.random(x.shape), axis=axis)
        src = rng.standard_normal(x.shape)
        want = x.copy()
        np.put_along_axis(want, perm, src, axis=axis)
        np.testing.assert_array_equal(R.scatter(x, perm, src, axis=axis), want)
    idx = rng.integers(0, 4, size=(6, 2))
    idx[:, 1] %= 5
    np.testing.assert_array_equal(R.gather_nd(x, idx), x[idx[:, 0], idx[:, 1]])
    acc = x.copy()
    np.add.at(acc, (idx[:, 0], idx[:, 1]), np.ones((6, 3)))
    np.testing.assert_allclose(R.scatter_nd(x, idx, np.ones((6, 3)), reduce="add"), acc)
    mx = x.copy()
    np.maximum.at(mx, (idx[:, 0], idx[:, 1]), np.zeros((6, 3)))
    np.testing.assert_array_equal(R.scatter_nd(x, idx, np.zeros((6, 3)), reduce="max"), mx)
    np.testing.assert_array_equal(R.gather_nd(x, idx.T.copy(), index_layout="first"), x[idx[:, 0], idx[:, 1]])
    with pytest.raises(IndexError):
        R.take(x, np.array([4]), axis=0)


# =============================================================================================
# cross-checks against PyTorch, where it is installed
# =============================================================================================


def test_gather_and_take_agree_with_torch(backend):
    torch = pytest.importorskip("torch")
    rng = rng_for("torch-gather")
    x = rng.standard_normal((4, 3, 5)).astype(np.float32)
    c = Case()
    tx = c.input(x)
    for axis in range(3):
        idx = rng.integers(0, x.shape[axis], size=gather_index_shape(rng, x.shape, axis))
        want = torch.gather(torch.from_numpy(x), axis, torch.from_numpy(idx)).numpy()
        c.expect(c.b.gather(tx, c.input(idx), axis=axis), want, f"torch.gather axis={axis}")
        rows = rng.integers(0, x.shape[axis], size=(7,))
        want = torch.index_select(torch.from_numpy(x), axis, torch.from_numpy(rows)).numpy()
        c.expect(c.b.take(tx, c.input(rows), axis=axis), want, f"torch.index_select axis={axis}")
    c.run(backend)


@pytest.mark.parametrize("dtype", ["float64", "int32"])
def test_scatter_reductions_agree_with_torch(backend, dtype):
    torch = pytest.importorskip("torch")
    rng = rng_for("torch-scatter", dtype)
    names = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin", "mean": "mean"}
    c = Case()
    for k, (reduce, tname) in enumerate(names.items()):
        if dtype == "int32" and reduce == "mean":
            continue  # torch's integer mean rounds differently; the reference covers it
        axis = k % 2
        x = random_data(rng, (4, 3), dtype, "small").astype(dtype)
        idx = rng.integers(0, 4 if axis == 0 else 3, size=(6, 3) if axis == 0 else (4, 5))
        src = random_data(rng, idx.shape, dtype, "small" if reduce != "mul" else "factors")
        want = torch.from_numpy(x.copy()).scatter_reduce(axis, torch.from_numpy(idx), torch.from_numpy(src), tname,
                                                         include_self=True).numpy()
        out = c.b.scatter(c.input(x), c.input(idx), c.input(src), axis=axis, reduce=reduce)
        c.expect(out, want, f"torch scatter_reduce {tname} {dtype}")
    c.run(backend)
