"""Gradients: ``cl.vjp`` programs checked against finite differences (with and without PyTorch)
and against PyTorch's own gradients, for every operator, reduction, mode and index dtype, on
every backend."""
from __future__ import annotations

import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder

MODES = ["raise", "clip", "wrap", "fill"]
INDEX_DTYPES = ["int64", "int32"]
SCATTER_VARIANTS = [("none", True), ("add", True), ("add", False), ("mul", True), ("mul", False), ("max", True),
                    ("max", False), ("min", True), ("min", False), ("mean", True), ("mean", False)]
ND_VARIANTS = SCATTER_VARIANTS + [("sub", True)]


def _index(rng, shape, size, dtype, mode):
    """Indices in range (raise), or in and out of range on both sides (the other modes)."""
    lo, hi = (-size, size) if mode == "raise" else (-2 * size - 1, 2 * size + 2)
    return rng.integers(lo, hi, shape).astype(dtype)


def _distinct(rng, shape):
    """float64 values 0.1 apart, shifted by a random fraction of that, so that no two values (of
    this input or another) tie in a max or min within a finite-difference step."""
    n = int(np.prod(shape))
    return (rng.permutation(n) * 0.1 - n * 0.05 + rng.uniform(0.01, 0.09)).reshape(shape)


class Case:
    """A program with float64 data inputs and fixed index inputs, and values for all of them."""

    def __init__(self, name):
        self.b = NetBuilder(name)
        self.data, self.fixed, self.outputs = {}, {}, []

    def data_input(self, name, values):
        self.data[name] = values
        return self.b.create_input("float64", values.shape, name)

    def index_input(self, name, values):
        self.fixed[name] = values
        return self.b.create_input(values.dtype.name, values.shape, name)

    def program(self):
        return self.b.build(self.outputs)


def take_case(rng, idt, mode):
    c = Case("take")
    b = c.b
    x, y = c.data_input("x", _distinct(rng, (4, 5))), c.data_input("y", _distinct(rng, (2, 5, 3)))
    i0 = c.index_input("i0", _index(rng, (2, 3), 4, idt, mode))
    i1 = c.index_input("i1", _index(rng, (3,), 5, idt, mode))
    ib = c.index_input("ib", _index(rng, (2, 4), 5, idt, mode))
    c.outputs = [b.take(x, i0, axis=0, mode=mode, fill_value=1.5), b.take(x, i1, axis=1, mode=mode),
                 b.take(y, ib, axis=1, batch_dims=1, mode=mode)]
    return c


def gather_case(rng, idt, mode):
    c = Case("gather")
    b = c.b
    x = c.data_input("x", _distinct(rng, (4, 5)))
    i0 = c.index_input("i0", _index(rng, (6, 4), 4, idt, mode))
    i1 = c.index_input("i1", _index(rng, (3, 7), 5, idt, mode))
    c.outputs = [b.gather(x, i0, axis=0, mode=mode), b.gather(x, i1, axis=1, mode=mode, fill_value=-2.0)]
    return c


def gather_nd_case(rng, idt, mode):
    c = Case("gather_nd")
    b = c.b
    x = c.data_input("x", _distinct(rng, (4, 5, 3)))
    last = c.index_input("last", np.concatenate([_index(rng, (2, 1), 4, idt, mode),
                                                 _index(rng, (2, 1), 5, idt, mode)], axis=-1))
    first = c.index_input("first", np.concatenate([_index(rng, (1, 3), 4, idt, mode),
                                                   _index(rng, (1, 3), 5, idt, mode)], axis=0))
    batch = c.index_input("batch", _index(rng, (4, 2, 1), 5, idt, mode))
    element = c.index_input("element", _index(rng, (4, 2, 3, 1), 5, idt, mode))
    c.outputs = [b.gather_nd(x, last, mode=mode), b.gather_nd(x, first, index_layout="first", mode=mode),
                 b.gather_nd(x, batch, batch_dims=1, mode=mode), b.gather_nd(x, element, dims=[1], mode=mode)]
    return c


def scatter_case(rng, idt, mode):
    """Every reduction, with updates smaller than ``src`` (the index covers part of it)."""
    c = Case("scatter")
    b = c.b
    x, src = c.data_input("x", _distinct(rng, (4, 5))), c.data_input("src", _distinct(rng, (3, 5)))
    idx = c.index_input("idx", _index(rng, (3, 4), 4, idt, mode))
    c.outputs = [b.scatter(x, idx, src, axis=0, reduce=r, mode=mode, include_self=s) for r, s in SCATTER_VARIANTS]
    return c


def scatter_nd_case(rng, idt, mode):
    """Every reduction, in the slice and the element form."""
    c = Case("scatter_nd")
    b = c.b
    x = c.data_input("x", _distinct(rng, (4, 5)))
    rows, elements = c.data_input("rows", _distinct(rng, (3, 5))), c.data_input("elements", _distinct(rng, (4, 3)))
    slices = c.index_input("slices", _index(rng, (3, 1), 4, idt, mode))
    columns = c.index_input("columns", _index(rng, (4, 3, 1), 5, idt, mode))
    c.outputs = [b.scatter_nd(x, slices, rows, reduce=r, mode=mode, include_self=s) for r, s in ND_VARIANTS]
    c.outputs += [b.scatter_nd(x, columns, elements, dims=[1], reduce=r, mode=mode, include_self=s)
                  for r, s in ND_VARIANTS]
    return c


def elementwise_case(rng, idt, mode):
    """The elementwise operators under broadcasting, the float functions, where, the reductions
    and reshape (no index)."""
    c = Case("elementwise")
    b = c.b
    a, d = c.data_input("a", _distinct(rng, (3, 1, 4))), c.data_input("d", _distinct(rng, (5, 1)) + 7.0)
    cond = c.index_input("cond", rng.random((5, 4)) < 0.5)
    positive = b.add(b.multiply(a, a), d)  # >= 7
    c.outputs = [b.add(a, d), b.subtract(a, d), b.multiply(a, d), b.divide(a, d), b.maximum(a, d), b.minimum(d, a),
                 b.where(cond, a, d), b.reduce_sum(b.multiply(a, a), axes=[0, 2]), b.reshape(a, (2, 6)),
                 b.reduce_sum(b.multiply(a, d), axes=1, keepdims=True), b.exp(a), b.log(positive),
                 b.sqrt(positive), b.tanh(a), b.sigmoid(a), b.reduce_max(a, axes=[1, 2]),
                 b.reduce_min(b.multiply(a, d), axes=0, keepdims=True)]
    return c


CASES = {"take": take_case, "gather": gather_case, "gather_nd": gather_nd_case, "scatter": scatter_case,
         "scatter_nd": scatter_nd_case}
MATRIX = [(op, mode, idt) for op in CASES for mode in MODES for idt in INDEX_DTYPES]


MATRIX_IDS = ["-".join(params) for params in MATRIX]


# -- finite differences without PyTorch --------------------------------------------------------------


def _forward(exe, case, data):
    outs = exe.run({**data, **case.fixed})
    return [outs[t.name] for t in case.outputs]


def check_against_finite_differences(case, backend, directions=3, eps=1e-6):
    """<vjp(v), u> equals the directional derivative of <f, v> along u, from central differences,
    for random cotangents v and directions u."""
    program = case.program()
    forward = cl.compile(program, target=backend)
    backward = cl.compile(cl.vjp(program), target=backend)
    rng = np.random.default_rng(5)
    for _ in range(directions):
        v = {f"grad_{t.name}": rng.standard_normal(tuple(t.shape)) for t in case.outputs}
        u = {name: rng.standard_normal(x.shape) for name, x in case.data.items()}
        grads = backward.run({**case.data, **case.fixed, **v})
        analytic = sum(float(np.sum(grads[f"grad_{name}"] * u[name])) for name in case.data)
        plus = _forward(forward, case, {n: x + eps * u[n] for n, x in case.data.items()})
        minus = _forward(forward, case, {n: x - eps * u[n] for n, x in case.data.items()})
        numeric = sum(float(np.sum((p - m) / (2 * eps) * v[f"grad_{t.name}"]))
                      for p, m, t in zip(plus, minus, case.outputs))
        assert abs(analytic - numeric) <= 1e-6 * max(1.0, abs(numeric)), (analytic, numeric)


@pytest.mark.parametrize("op,mode,idt", MATRIX, ids=MATRIX_IDS)
def test_vjp_matches_finite_differences(backend, op, mode, idt):
    rng = np.random.default_rng(abs(hash((op, mode, idt))) % 2**32)
    check_against_finite_differences(CASES[op](rng, idt, mode), backend)


def test_elementwise_vjp_matches_finite_differences(backend):
    check_against_finite_differences(elementwise_case(np.random.default_rng(3), None, None), backend)


# -- torch.autograd.gradcheck ---------------------------------------------------------------------------


def gradcheck(case, backend):
    torch = pytest.importorskip("torch")
    f = cl.torch.compile(case.program(), target=backend)
    names = list(case.data)
    fixed = {n: torch.from_numpy(v) for n, v in case.fixed.items()}

    def fn(*tensors):
        return f(**dict(zip(names, tensors)), **fixed)

    tensors = tuple(torch.from_numpy(case.data[n].copy()).requires_grad_() for n in names)
    assert torch.autograd.gradcheck(fn, tensors, eps=1e-6, atol=1e-7, rtol=1e-5)


@pytest.mark.parametrize("op,mode,idt", MATRIX, ids=MATRIX_IDS)
def test_torch_gradcheck(backend, op, mode, idt):
    rng = np.random.default_rng(abs(hash((op, mode, idt, "torch"))) % 2**32)
    gradcheck(CASES[op](rng, idt, mode), backend)


def test_torch_gradcheck_elementwise(backend):
    gradcheck(elementwise_case(np.random.default_rng(4), None, None), backend)
