"""What users of numpy, PyTorch, TensorFlow and CINN bring: numpy's clip, PyTorch's integer mean,
include_self and bool reductions, TensorFlow's scatter_nd_sub, and CINN's spellings; each on
every backend against the library it comes from."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import cinnlite as cl
from cinnlite import Float, Int, NetBuilder
from cinnlite.errors import ValidationError

TORCH_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin", "mean": "mean"}


def _rng(*seed):
    return np.random.default_rng(list(seed))


def _values(rng, dtype, shape):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind == "u":
        return rng.integers(0, 5, shape).astype(dtype)
    return rng.integers(-4, 5, shape).astype(dtype)


@pytest.mark.parametrize("axis", [0, 1])
def test_clip_is_numpys_clip(backend, axis):
    """A negative index clips to 0, as np.take(mode="clip"): -1 never selects the last row."""
    x = np.arange(20, dtype=np.float32).reshape(4, 5)
    idx = np.array([-7, -1, 0, 2, 4, 5, 99], np.int64)
    b = NetBuilder("clip")
    tx, ti = b.create_input("float32", x.shape, "x"), b.create_input("int64", idx.shape, "i")
    exe = cl.compile(b.build([b.take(tx, ti, axis=axis, mode="clip")]), target=backend)
    np.testing.assert_array_equal(exe(x=x, i=idx), np.take(x, idx, axis=axis, mode="clip"))


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8"])
def test_integer_mean_floors_like_pytorch(backend, dtype):
    rng = _rng(1, len(dtype))
    x, src = _values(rng, dtype, (6, 3)), _values(rng, dtype, (9, 3))
    idx = rng.integers(0, 6, (9, 3))
    b = NetBuilder("mean")
    tx, ti, ts = (b.create_input(a.dtype.name, a.shape, n) for a, n in ((x, "x"), (idx, "i"), (src, "s")))
    exe = cl.compile(b.build([b.scatter(tx, ti, ts, reduce="mean")]), target=backend)
    want = torch.from_numpy(x.copy()).scatter_reduce(0, torch.from_numpy(idx), torch.from_numpy(src), "mean").numpy()
    np.testing.assert_array_equal(exe(x=x, i=idx, s=src), want)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype,reduce", [(d, r) for d in ("float32", "int16", "bool")
                                          for r in ("add", "mul", "max", "min", "mean")
                                          if not (d == "bool" and r == "mean")])  # no bool mean anywhere
def test_scatter_reduce_include_self_and_bool_like_pytorch(backend, dtype, reduce, include_self):
    rng = _rng(2, len(dtype), len(reduce), include_self)
    x, src = _values(rng, dtype, (5, 4)), _values(rng, dtype, (7, 4))
    idx = rng.integers(0, 3, (7, 4))  # rows 3 and 4 never hit: they keep x
    b = NetBuilder("sr")
    tx, ti, ts = (b.create_input(a.dtype.name, a.shape, n) for a, n in ((x, "x"), (idx, "i"), (src, "s")))
    exe = cl.compile(b.build([b.scatter(tx, ti, ts, reduce=reduce, include_self=include_self)]), target=backend,
                     deterministic=True)
    want = torch.from_numpy(x.copy()).scatter_reduce(0, torch.from_numpy(idx), torch.from_numpy(src),
                                                     TORCH_REDUCE[reduce], include_self=include_self).numpy()
    np.testing.assert_array_equal(exe(x=x, i=idx, s=src), want)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", ["add", "max", "mean"])
def test_scatter_nd_include_self(backend, reduce, include_self):
    """Slices by index tuples: the same rule, against PyTorch's index_reduce on rows."""
    rng = _rng(3, len(reduce), include_self)
    x, src = rng.standard_normal((6, 3)), rng.standard_normal((8, 3))
    rows = rng.integers(0, 4, 8)
    b = NetBuilder("ndr")
    tx, ti, ts = b.create_input("float64", x.shape, "x"), b.create_input("int64", (8, 1), "i"), \
        b.create_input("float64", src.shape, "s")
    exe = cl.compile(b.build([b.scatter_nd(tx, ti, ts, reduce=reduce, include_self=include_self)]), target=backend,
                     deterministic=True)
    name = {"add": "sum", "max": "amax", "mean": "mean"}[reduce]
    expanded = torch.from_numpy(np.repeat(rows[:, None], 3, axis=1))
    want = torch.from_numpy(x.copy()).scatter_reduce(0, expanded, torch.from_numpy(src), name,
                                                     include_self=include_self).numpy()
    np.testing.assert_allclose(exe(x=x, i=rows[:, None], s=src), want, rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "int32", "uint8"])
def test_scatter_nd_sub_is_tensor_scatter_nd_sub(backend, dtype):
    rng = _rng(4, len(dtype))
    x, src = _values(rng, dtype, (5, 2)), _values(rng, dtype, (7, 2))
    idx = rng.integers(0, 5, (7, 1)).astype(np.int32)
    b = NetBuilder("sub")
    tx, ti, ts = (b.create_input(a.dtype.name, a.shape, n) for a, n in ((x, "x"), (idx, "i"), (src, "s")))
    exe = cl.compile(b.build([b.scatter_nd(tx, ti, ts, reduce="sub")]), target=backend)
    want = x.copy()
    np.subtract.at(want, idx[:, 0], src)
    np.testing.assert_array_equal(exe(x=x, i=idx, s=src), want)


def test_sub_keeps_negative_zero(backend):
    """x - 0.0 is x, -0.0 included (the update is negated exactly, not subtracted from 0)."""
    b = NetBuilder("z")
    tx, ti, ts = b.create_input("float32", (2,), "x"), b.create_input("int64", (1, 1), "i"), \
        b.create_input("float32", (1,), "s")
    exe = cl.compile(b.build([b.scatter_nd(tx, ti, ts, reduce="sub")]), target=backend)
    got = exe(x=np.array([-0.0, 1.0], np.float32), i=np.array([[0]]), s=np.array([0.0], np.float32))
    assert np.signbit(got[0])


def test_cinn_design_document_example_runs_verbatim(backend):
    builder = NetBuilder("test_basic")
    a = builder.create_input(Float(32), (8, 24), "A")
    i = builder.create_input(Int(32), (3, 24), "index")
    b = builder.gather(a, index=i, dim=0)  # shape=(3, 24)
    z = builder.create_input(Float(32), (8, 24), "Z")
    with pytest.warns(DeprecationWarning, match="spelling of src"):
        z = builder.scatter(z, index=i, dim=0, scr=b)  # shape=(8, 24)
    assert b.shape == (3, 24) and z.shape == (8, 24)
    exe = cl.compile(builder.build([b, z]), target=backend)
    rng = _rng(5)
    av, iv = rng.standard_normal((8, 24)).astype(np.float32), rng.permutation(8)[:3].astype(np.int32)
    iv = np.tile(iv[:, None], (1, 24))
    zv = np.zeros((8, 24), np.float32)
    got_b, got_z = exe(A=av, index=iv, Z=zv)
    np.testing.assert_array_equal(got_b, np.take_along_axis(av, iv, axis=0))
    want_z = torch.from_numpy(zv).scatter(0, torch.from_numpy(iv.astype(np.int64)), torch.from_numpy(got_b)).numpy()
    np.testing.assert_array_equal(got_z, want_z)


def test_cinn_spellings_reject_disagreeing_arguments():
    b = NetBuilder("s")
    x, i = b.create_input("float32", (4, 3), "x"), b.create_input("int64", (2, 3), "i")
    with pytest.raises(ValidationError, match="axis=1 and dim=0 disagree"):
        b.gather(x, i, axis=1, dim=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ValidationError, match="both src and scr"):
            b.scatter(x, i, x, scr=x)
    with pytest.raises(ValidationError, match="needs src"):
        b.scatter(x, i)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_scatter_add_and_assign_are_index_add_and_index_copy(backend, axis):
    rng = _rng(6, axis % 3)
    x = rng.standard_normal((4, 5, 3))
    n = 6
    upd_shape = list(x.shape)
    upd_shape[axis] = n
    updates = rng.standard_normal(upd_shape)
    index = rng.integers(-x.shape[axis], x.shape[axis], n)
    b = NetBuilder("cinn")
    tx, tu, ti = b.create_input("float64", x.shape, "x"), b.create_input("float64", updates.shape, "u"), \
        b.create_input("int64", (n,), "i")
    exe = cl.compile(b.build([b.scatter_add(tx, tu, ti, axis=axis), b.scatter_assign(tx, tu, ti, axis=axis)]),
                     target=backend)
    got_add, got_assign = exe(x=x, u=updates, i=index)
    positive = torch.from_numpy(np.where(index < 0, index + x.shape[axis], index))
    want_add = torch.from_numpy(x).index_add(axis, positive, torch.from_numpy(updates)).numpy()
    np.testing.assert_allclose(got_add, want_add, rtol=1e-12)
    want_assign = x.copy()
    moved, src = np.moveaxis(want_assign, axis, 0), np.moveaxis(updates, axis, 0)
    for j in range(n):  # the last write wins
        moved[positive[j]] = src[j]
    np.testing.assert_array_equal(got_assign, want_assign)


def test_scatter_assign_needs_a_1d_index():
    b = NetBuilder("s")
    x, u = b.create_input("float32", (4, 3), "x"), b.create_input("float32", (2, 3), "u")
    with pytest.raises(ValidationError, match="index is 1-D"):
        b.scatter_assign(x, u, b.create_input("int64", (2, 1), "i"))
