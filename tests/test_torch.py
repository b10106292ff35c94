"""cinnlite inside PyTorch: ``cl.torch.compile`` against PyTorch's own operators and gradients,
under ``torch.compile``, ``no_grad`` and any mix of ``requires_grad``; DLPack arrays in
executables."""
from __future__ import annotations

import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder

torch = pytest.importorskip("torch")

TORCH_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin", "mean": "mean"}


def _scatter_program(reduce, include_self, dtype="float64"):
    b = NetBuilder(f"scatter_{reduce}")
    x = b.create_input(dtype, ("N", 3), "x")
    idx = b.create_input("int64", ("E", 3), "idx")
    src = b.create_input(dtype, ("E", 3), "src")
    return b.build([b.scatter(x, idx, src, axis=0, reduce=reduce, include_self=include_self)])


@pytest.mark.parametrize("reduce", ["add", "mul", "max", "min", "mean"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_gradients_equal_pytorchs_with_ties_and_zeros(backend, reduce, include_self):
    """Ties (max/min share the gradient equally) and zeros (mul) are where the rules differ from
    a naive derivative; PyTorch's scatter_reduce is the reference."""
    f = cl.torch.compile(_scatter_program(reduce, include_self), target=backend)
    x = torch.tensor([[1.0, 0.0, 2.0], [3.0, 3.0, 0.0], [0.5, -1.0, 4.0], [2.0, 2.0, 2.0]], dtype=torch.float64)
    src = torch.tensor([[1.0, 0.0, 2.0], [3.0, 3.0, 0.0], [1.0, 0.0, 4.0], [2.0, 7.0, -2.0], [3.0, 0.0, 0.0]],
                       dtype=torch.float64)
    idx = torch.tensor([[0, 1, 0], [1, 1, 1], [0, 1, 2], [3, 3, 0], [1, 0, 1]])
    if not include_self:
        # PyTorch counts an x equal to the result among the ties even when x takes no part, and
        # then drops its share (see the test below): keep x off the results for the comparison.
        x = x + 0.25
    g = torch.arange(12, dtype=torch.float64).reshape(4, 3) - 4.0
    grads = []
    for impl in ("cinnlite", "torch"):
        xs, ss = x.clone().requires_grad_(), src.clone().requires_grad_()
        out = f(x=xs, idx=idx, src=ss) if impl == "cinnlite" else \
            xs.scatter_reduce(0, idx, ss, TORCH_REDUCE[reduce], include_self=include_self)
        out.backward(g)
        grads.append((out.detach(), xs.grad, ss.grad))
    for mine, theirs, what in zip(grads[0], grads[1], ("output", "grad x", "grad src")):
        torch.testing.assert_close(mine, theirs, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_without_self_an_x_equal_to_the_result_takes_no_share(backend, reduce):
    """x takes no part in the result, so the updates that equal it share all of the gradient
    (PyTorch would count x among the ties and lose its share: 0.5 where 1 is right)."""
    f = cl.torch.compile(_scatter_program(reduce, False), target=backend)
    x = torch.full((2, 3), 5.0, dtype=torch.float64, requires_grad=True)
    src = torch.tensor([[5.0, 5.0, 5.0], [3.0 if reduce == "max" else 7.0, 5.0, 5.0]], dtype=torch.float64,
                       requires_grad=True)
    f(x=x, idx=torch.zeros(2, 3, dtype=torch.int64), src=src).backward(torch.ones(2, 3, dtype=torch.float64))
    assert x.grad.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
    assert src.grad.tolist() == [[1.0, 0.5, 0.5], [0.0, 0.5, 0.5]]


def test_scatter_none_gradient_goes_to_the_last_update_and_not_to_overwritten_x(backend):
    b = NetBuilder("assign")
    x = b.create_input("float64", (3,), "x")
    idx = b.create_input("int64", (4,), "idx")
    src = b.create_input("float64", (4,), "src")
    f = cl.torch.compile(b.build([b.scatter(x, idx, src)]), target=backend)
    xs, ss = torch.zeros(3, dtype=torch.float64, requires_grad=True), torch.ones(4, dtype=torch.float64,
                                                                                 requires_grad=True)
    f(x=xs, idx=torch.tensor([2, 0, 2, -1]), src=ss).backward(torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    # Target 2 is hit by positions 0, 2 and 3 (-1 is 2): the last one, 3, wins.
    assert xs.grad.tolist() == [0.0, 2.0, 0.0]
    assert ss.grad.tolist() == [0.0, 1.0, 0.0, 3.0]


def _message_passing(features=4):
    b = NetBuilder("messages")
    x = b.create_input("float32", ("N", features), "x")
    w = b.create_input("float32", ("E",), "w")
    src, dst = b.create_input("int64", ("E",), "src"), b.create_input("int64", ("E",), "dst")
    weighted = b.multiply(b.take(x, src), b.reshape(w, (-1, 1)))
    at_dst = b.add(b.reshape(dst, (-1, 1)), b.fill_constant(weighted.shape, 0, "int64"))
    degree = b.reduce_sum(b.cast(b.greater(weighted, weighted), "float32"))  # a non-differentiable path
    return b.build([b.scatter(b.fill_constant(x.shape, 0, "float32"), at_dst, weighted, reduce="add"), degree])


def _graph(n=6, e=15, features=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(n, features, generator=g), torch.rand(e, generator=g), torch.randint(0, n, (e,), generator=g),
            torch.randint(0, n, (e,), generator=g))


def _reference(x, w, src, dst):
    return torch.zeros_like(x).index_add(0, dst, x[src] * w[:, None])


@pytest.mark.parametrize("needs", [("x", "w"), ("x",), ("w",), ()])
def test_any_mix_of_requires_grad(backend, needs):
    f = cl.torch.compile(_message_passing(), target=backend)
    x, w, src, dst = _graph()
    mine = {"x": x.clone().requires_grad_("x" in needs), "w": w.clone().requires_grad_("w" in needs)}
    theirs = {"x": x.clone().requires_grad_("x" in needs), "w": w.clone().requires_grad_("w" in needs)}
    out, degree = f(x=mine["x"], w=mine["w"], src=src, dst=dst)
    ref = _reference(theirs["x"], theirs["w"], src, dst)
    torch.testing.assert_close(out, ref)
    assert degree.item() == 0.0 and not degree.requires_grad
    assert out.requires_grad == bool(needs)
    if needs:
        (out * torch.arange(out.numel()).reshape(out.shape)).sum().backward()
        (ref * torch.arange(ref.numel()).reshape(ref.shape)).sum().backward()
    for name in ("x", "w"):
        if name in needs:
            torch.testing.assert_close(mine[name].grad, theirs[name].grad)
        else:
            assert mine[name].grad is None


def test_no_grad_runs_the_forward_alone():
    f = cl.torch.compile(_message_passing())
    x, w, src, dst = _graph()
    with torch.no_grad():
        out, _ = f(x=x.requires_grad_(), w=w, src=src, dst=dst)
    assert not out.requires_grad
    torch.testing.assert_close(out, _reference(x.detach(), w, src, dst))


def test_torch_compile_calls_it_without_a_graph_break_and_over_new_sizes():
    f = cl.torch.compile(_message_passing())
    lin = torch.nn.Linear(4, 2)

    def loss(x, w, src, dst):
        out, _ = f(x=x, w=w, src=src, dst=dst)
        return lin(torch.relu(out)).square().mean()

    compiled = torch.compile(loss, fullgraph=True, dynamic=True)
    for n, e in ((6, 15), (9, 40)):
        x, w, src, dst = _graph(n, e, seed=n)
        xs, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
        got = compiled(xs, w, src, dst)
        got.backward()
        want = lin(torch.relu(_reference(xr, w, src, dst))).square().mean()
        want.backward()
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(xs.grad, xr.grad)


def test_results_share_memory_with_the_runtimes_arrays_and_inputs_are_read_in_place():
    b = NetBuilder("double")
    x = b.create_input("float32", (5,), "x")
    program = b.build([b.add(x, x)])
    t = torch.arange(5, dtype=torch.float32)
    exe = cl.compile(program)
    np.testing.assert_array_equal(exe(x=t), np.arange(5) * 2.0)  # a torch tensor read through DLPack
    from cinnlite.runtime.executable import host_array
    assert np.shares_memory(host_array(t), t.numpy())
    out = cl.torch.compile(program)(x=t)
    assert isinstance(out, torch.Tensor) and out.tolist() == [0, 2, 4, 6, 8]


def test_bad_calls_are_input_errors():
    f = cl.torch.compile(_message_passing())
    x, w, src, dst = _graph()
    with pytest.raises(cl.InputError, match="missing input"):
        f(x=x, w=w, src=src)
    with pytest.raises(cl.InputError, match="unknown input"):
        f(x=x, w=w, src=src, dst=dst, y=x)
    with pytest.raises(cl.InputTypeError, match="dtype"):
        f(x=x.double(), w=w, src=src, dst=dst)
    exe = cl.compile(_message_passing())
    with pytest.raises(cl.InputTypeError, match="DLPack"):
        exe(x=x.requires_grad_(), w=w, src=src, dst=dst)


def test_bfloat16_tensors_cross_without_conversion():
    b = NetBuilder("bf16")
    x = b.create_input("bfloat16", (4,), "x")
    i = b.create_input("int64", (3,), "i")
    f = cl.torch.compile(b.build([b.take(x, i)]))
    xs = torch.tensor([1.5, -2.0, 3.25, 8.0], dtype=torch.bfloat16, requires_grad=True)
    out = f(x=xs, i=torch.tensor([3, 0, 3]))
    assert out.dtype == torch.bfloat16 and out.tolist() == [8.0, 1.5, 8.0]
    out.sum().backward()
    assert xs.grad.dtype == torch.bfloat16 and xs.grad.tolist() == [1.0, 0.0, 0.0, 2.0]


def test_cast_between_floats_casts_the_gradient_back(backend):
    b = NetBuilder("widen")
    x = b.create_input("float32", (3,), "x")
    y = b.create_input("float64", (3,), "y")
    wide = b.multiply(b.cast(x, "float64"), y)
    f = cl.torch.compile(b.build([wide, b.cast(b.greater(y, wide), "float64")]), target=backend)
    xs = torch.tensor([1.5, -2.0, 0.25], requires_grad=True)
    ys = torch.tensor([2.0, 3.0, -4.0], dtype=torch.float64, requires_grad=True)
    out, flags = f(x=xs, y=ys)
    (out.sum() + flags.sum()).backward()
    assert xs.grad.dtype == torch.float32 and xs.grad.tolist() == [2.0, 3.0, -4.0]
    assert ys.grad.tolist() == [1.5, -2.0, 0.25]
