"""Eager functions (cl.take, cl.gather, ...) and out= on executables and eager calls, on every
backend, against numpy and PyTorch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import cinnlite as cl
from cinnlite import eager
from cinnlite.errors import IndexOutOfRangeError, InputError, InputTypeError


def _rng(*seed):
    return np.random.default_rng(list(seed))


@pytest.mark.parametrize("mode", ["raise", "clip", "wrap"])
@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_take_is_numpys_take(backend, axis, mode):
    rng = _rng(1, 0 if axis is None else axis % 3)
    a = rng.standard_normal((3, 4, 5))
    size = a.size if axis is None else a.shape[axis]
    lo, hi = (-size, size) if mode == "raise" else (-2 * size, 2 * size)
    for shape in [(7,), (2, 3), ()]:
        idx = rng.integers(lo, hi, shape)
        np.testing.assert_array_equal(cl.take(a, idx, axis=axis, mode=mode, target=backend),
                                      np.take(a, idx, axis=axis, mode=mode))


def test_one_compile_per_structure(backend):
    before = len(eager._PROGRAMS)
    for n in (1, 5, 17, 0, 300):
        a = np.arange(n * 3, dtype=np.float32).reshape(n, 3) if n else np.zeros((4, 3), np.float32)
        idx = np.arange(min(n, 4), dtype=np.int64)
        np.testing.assert_array_equal(cl.take(a, idx, axis=0, target=backend), np.take(a, idx, axis=0))
    assert len(eager._PROGRAMS) == before + 1


def test_gather_scatter_and_nd_against_pytorch(backend):
    rng = _rng(2)
    x = rng.standard_normal((5, 6))
    idx = rng.integers(0, 5, (3, 6))
    np.testing.assert_array_equal(cl.gather(x, idx, axis=0, target=backend),
                                  torch.gather(torch.from_numpy(x), 0, torch.from_numpy(idx)).numpy())
    src = rng.standard_normal((3, 6))
    for reduce, name in (("add", "sum"), ("max", "amax"), ("mean", "mean")):
        got = cl.scatter(x, idx, src, axis=0, reduce=reduce, deterministic=True, target=backend)
        want = torch.from_numpy(x).scatter_reduce(0, torch.from_numpy(idx), torch.from_numpy(src), name).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12)
    nd_idx = rng.integers(-5, 5, (4, 1))
    np.testing.assert_array_equal(cl.gather_nd(x, nd_idx, target=backend), x[nd_idx[:, 0]])
    want = x.copy()
    np.add.at(want, nd_idx[:, 0], src[:1].repeat(4, 0))
    np.testing.assert_allclose(cl.scatter_nd(x, nd_idx, src[:1].repeat(4, 0), reduce="add", target=backend), want)
    rows = np.array([4, 0, 4])
    np.testing.assert_allclose(cl.scatter_add(x, src, rows, axis=0, target=backend),
                               torch.from_numpy(x).index_add(0, torch.from_numpy(rows), torch.from_numpy(src)).numpy())


def test_pytorch_tensors_in_and_out_without_copies():
    x = torch.arange(12.0).reshape(3, 4)
    i = torch.tensor([2, 0])
    got = cl.take(x, i, axis=0)
    assert isinstance(got, torch.Tensor)
    torch.testing.assert_close(got, x.index_select(0, i))
    out = torch.empty(2, 4)
    assert cl.take(x, i, axis=0, out=out) is out
    torch.testing.assert_close(out, x.index_select(0, i))


def test_eager_errors_are_the_operators_errors():
    with pytest.raises(IndexOutOfRangeError, match="index 9 at position"):
        cl.take(np.arange(4.0), np.array([1, 9]))
    with pytest.raises(InputError, match="expected shape"):
        cl.take(np.arange(4.0), np.array([1, 2]), out=np.empty(3))


def _exe(backend):
    b = cl.NetBuilder("o")
    x = b.create_input("float32", ("N", 3), "x")
    i = b.create_input("int64", ("E",), "i")
    return cl.compile(b.build([b.take(x, i, axis=0), b.scatter_nd(x, b.reshape(i, ("E", 1)),
                                                                   b.take(x, i, axis=0), reduce="add"), x]),
                      target=backend)


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_out_is_written_and_returned(backend, dtype):
    b = cl.NetBuilder("o")
    x = b.create_input(dtype, ("N", 3), "x")
    i = b.create_input("int64", ("E",), "i")
    exe = cl.compile(b.build([b.take(x, i, axis=0), b.scatter_nd(x, b.reshape(i, ("E", 1)), b.take(x, i, axis=0),
                                                                  reduce="add"), x]), target=backend)
    xv, iv = np.arange(12).astype(dtype).reshape(4, 3), np.array([3, 0, 3])
    outs = (np.empty((3, 3), dtype), np.empty((4, 3), dtype), np.empty((4, 3), dtype))
    got = exe(x=xv, i=iv, out=outs)
    assert all(g is o for g, o in zip(got, outs))
    want = xv.copy()
    np.add.at(want, iv, xv[iv])
    np.testing.assert_array_equal(outs[0], xv[iv])
    np.testing.assert_array_equal(outs[1], want)
    np.testing.assert_array_equal(outs[2], xv)
    again = exe.run({"x": xv, "i": iv}, out=outs)
    assert again["take_0"] is outs[0]


def test_out_errors_say_which(backend):
    exe = _exe(backend)
    xv, iv = np.ones((4, 3), np.float32), np.array([1, 2])
    good = (np.empty((2, 3), np.float32), np.empty((4, 3), np.float32), np.empty((4, 3), np.float32))
    with pytest.raises(InputError, match="holds 1 array"):
        exe(x=xv, i=iv, out=good[0])
    with pytest.raises(InputTypeError, match="expected dtype float32, got float64"):
        exe(x=xv, i=iv, out=(good[0].astype(np.float64),) + good[1:])
    with pytest.raises(InputError, match=r"expected shape \(2, 3\), got \(3, 3\)"):
        exe(x=xv, i=iv, out=(np.empty((3, 3), np.float32),) + good[1:])
    with pytest.raises(InputError, match="C-contiguous"):
        exe(x=xv, i=iv, out=(np.empty((3, 2), np.float32).T,) + good[1:])
    with pytest.raises(InputError, match="shares memory with 'x'"):
        exe(x=xv, i=iv, out=good[:2] + (xv,))
    with pytest.raises(InputError, match="shares memory"):
        exe(x=xv, i=iv, out=(good[0], good[1], good[1]))
    with pytest.raises(InputTypeError, match="expected a numpy array"):
        exe(x=xv, i=iv, out=([0.0] * 6,) + good[1:])


def test_an_input_named_out_is_an_input(backend):
    b = cl.NetBuilder("n")
    o = b.create_input("float32", (3,), "out")
    exe = cl.compile(b.build([b.add(o, o)]), target=backend)
    np.testing.assert_array_equal(exe(out=np.ones(3, np.float32)), np.full(3, 2, np.float32))
