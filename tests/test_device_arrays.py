"""Device arrays on the GPU targets: ``exe.to_device``, DeviceArray results that the next call
takes in place, DLPack and ``__cuda_array_interface__`` exchange, ``stream=`` and ``device=``.

``cuda-emu`` runs every test here without a GPU (its device memory is host memory); the tests
marked ``gpu`` run the same on a real GPU with PyTorch CUDA tensors. The runtime's own handling of
device pointers, streams and contexts is tested against a stand-in driver in test_cuda_runtime.py.
"""
from __future__ import annotations

import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder
from cinnlite.runtime import cuda as cuda_runtime


def chain_programs(n=("N", 8), e=("E",)):
    """take rows, then scatter-add them back: the first's result feeds the second."""
    b = NetBuilder("gather_rows")
    x = b.create_input("float32", n, "x")
    i = b.create_input("int64", e, "i")
    b.take(x, i, axis=0, mode="wrap")
    gather = b.build()
    b = NetBuilder("scatter_rows")
    x = b.create_input("float32", n, "x")
    i = b.create_input("int64", e, "i")
    u = b.create_input("float32", e + n[1:], "u")
    b.scatter_nd(x, b.reshape(i, e + (1,)), u, reduce="add", mode="wrap")
    return gather, b.build()


def feeds(rows=30, picks=50, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(-8, 9, (rows, 8)).astype(np.float32) / 4, rng.integers(-rows, rows, picks))


def reference(X, I):
    rows = X.shape[0]
    picked = X[I % rows]
    out = X.astype(np.float64)
    np.add.at(out, I % rows, picked)
    return picked, out.astype(np.float32)


@pytest.mark.parametrize("shapes", [(("N", 8), ("E",)), ((30, 8), (50,))], ids=["symbolic", "static"])
def test_results_stay_on_the_emulated_device_and_feed_the_next_call(shapes):
    gather, scatter = (cl.compile(p, target="cuda-emu") for p in chain_programs(*shapes))
    X, I = feeds()
    x, i = gather.to_device(X), gather.to_device(I)
    assert isinstance(x, cl.DeviceArray) and (x.shape, x.dtype, x.device) == (X.shape, X.dtype, 0)
    X[:] = 99  # to_device copied: the device array keeps what it was given
    X, I = feeds()
    picked = gather(x=x, i=i)
    assert isinstance(picked, cl.DeviceArray) and picked.target == "cuda-emu"
    summed = scatter(x=x, i=i, u=picked)
    want_picked, want_summed = reference(X, I)
    np.testing.assert_array_equal(picked.numpy(), want_picked)
    np.testing.assert_array_equal(np.asarray(summed), want_summed)
    # Host arrays in, host arrays out, as before.
    assert type(gather(x=X, i=I)) is np.ndarray
    # Host and device inputs mixed: device results.
    assert isinstance(gather(x=x, i=I), cl.DeviceArray)


def test_empty_sizes_of_a_symbolic_program_take_device_arrays():
    gather, scatter = (cl.compile(p, target="cuda-emu") for p in chain_programs())
    X, _ = feeds()
    none = gather(x=gather.to_device(X), i=np.zeros(0, np.int64))
    assert isinstance(none, cl.DeviceArray) and none.shape == (0, 8)
    # Updates of no rows leave the table as it was.
    same = scatter(x=gather.to_device(X), i=np.zeros(0, np.int64), u=gather.to_device(np.zeros((0, 8), np.float32)))
    np.testing.assert_array_equal(same.numpy(), X)


def test_dlpack_shows_the_same_memory_without_a_copy():
    torch = pytest.importorskip("torch")
    gather, _ = (cl.compile(p, target="cuda-emu") for p in chain_programs())
    X, I = feeds()
    picked = gather(x=gather.to_device(X), i=I)
    assert picked.__dlpack_device__() == (1, 0)
    as_torch = torch.from_dlpack(picked)
    as_numpy = np.from_dlpack(picked)
    np.testing.assert_array_equal(as_torch.numpy(), X[I % 30])
    as_torch[0, 0] = 123.0  # one memory: numpy's view sees PyTorch's write
    assert as_numpy[0, 0] == 123.0 and picked.numpy()[0, 0] == 123.0
    assert not hasattr(picked, "__cuda_array_interface__")
    # The CPU target takes an emulated device array as host memory (DLPack, in place).
    cpu = cl.compile(chain_programs()[0], target="cpu")
    np.testing.assert_array_equal(cpu(x=gather.to_device(X), i=I), X[I % 30])


def test_outputs_that_are_inputs_are_copies_on_the_device():
    b = NetBuilder("passthrough")
    x = b.create_input("float32", (4, 3), "x")
    i = b.create_input("int32", (2,), "i")
    exe = cl.compile(b.build([b.take(x, i), x]), target="cuda-emu")
    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    dx = exe.to_device(X)
    taken, same = exe(x=dx, i=np.array([3, 0], np.int32))
    assert isinstance(same, cl.DeviceArray) and same.ptr != dx.ptr
    np.testing.assert_array_equal(same.numpy(), X)
    np.testing.assert_array_equal(taken.numpy(), X[[3, 0]])


class OtherGpuArray:
    """An array in a real GPU's memory, as another library shows it."""

    __cuda_array_interface__ = {"shape": (30, 8), "typestr": "<f4", "data": (0x7F0000000000, False),
                                "strides": None, "version": 3, "stream": 1}


def test_the_emulation_refuses_gpu_memory_and_names_the_input():
    gather, _ = (cl.compile(p, target="cuda-emu") for p in chain_programs())
    with pytest.raises(cl.InputError, match="input 'x' is in the memory of a GPU .*cuda-emu"):
        gather(x=OtherGpuArray(), i=np.zeros(3, np.int64))
    with pytest.raises(cl.InputError, match="device 0; device=1 does not exist"):
        gather(x=np.zeros((30, 8), np.float32), i=np.zeros(3, np.int64), device=1)
    with pytest.raises(cl.InputTypeError, match="input 'x': expected dtype float32, got float64"):
        gather(x=gather.to_device(np.zeros((30, 8))), i=np.zeros(3, np.int64))
    # stream= is taken (nothing to order on the host) and results come back to the host for host inputs.
    out = gather(x=np.ones((30, 8), np.float32), i=np.zeros(3, np.int64), stream=7)
    assert type(out) is np.ndarray


def test_raise_mode_with_device_arrays_names_the_bad_index():
    b = NetBuilder("raise")
    x = b.create_input("float32", (10,), "x")
    i = b.create_input("int64", (6,), "i")
    b.take(x, i, mode="raise")
    prog = b.build()
    exe = cl.compile(prog, target="cuda-emu")
    bad = np.array([0, 1, 2, 10, 4, -11])
    with pytest.raises(cl.IndexOutOfRangeError) as emu_err:
        exe(x=exe.to_device(np.zeros(10, np.float32)), i=exe.to_device(bad))
    with pytest.raises(cl.IndexOutOfRangeError) as cpu_err:
        cl.compile(prog, target="cpu")(x=np.zeros(10, np.float32), i=bad)
    assert str(emu_err.value) == str(cpu_err.value)


# -- on a real GPU -------------------------------------------------------------------------------


def cuda_or_skip():
    if not cuda_runtime.gpu_available():
        pytest.skip("needs a CUDA GPU")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs PyTorch with CUDA")
    return torch


@pytest.mark.gpu
def test_cuda_takes_torch_tensors_in_place_and_returns_device_arrays():
    torch = cuda_or_skip()
    gather, scatter = (cl.compile(p, target="cuda") for p in chain_programs())
    X, I = feeds(rows=3000, picks=50000)
    x, i = torch.from_numpy(X).cuda(), torch.from_numpy(I).cuda()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):  # PyTorch's current stream is the call's
        picked = gather(x=x, i=i)
        summed = scatter(x=x, i=i, u=picked)
        assert picked.stream == stream.cuda_stream
        back = torch.from_dlpack(summed)  # on the same stream: no wait needed
        total = float(back.sum())
    want_picked, want_summed = reference(X, I)
    np.testing.assert_array_equal(torch.from_dlpack(picked).cpu().numpy(), want_picked)
    np.testing.assert_allclose(back.cpu().numpy(), want_summed, rtol=1e-6)
    assert abs(total - float(want_summed.sum(dtype=np.float64))) < 1e-2 * max(1.0, abs(total))
    assert torch.as_tensor(picked, device="cuda").data_ptr() == picked.ptr  # __cuda_array_interface__
    # numpy in, numpy out still; an explicit stream and device.
    assert type(gather(x=X, i=I)) is np.ndarray
    np.testing.assert_array_equal(gather(x=gather.to_device(X), i=I, stream=stream.cuda_stream, device=0).numpy(),
                                  want_picked)


@pytest.mark.gpu
def test_cuda_leaves_the_callers_context_current():
    cuda_or_skip()
    from cuda.bindings import driver

    gather, _ = (cl.compile(p, target="cuda") for p in chain_programs())
    X, I = feeds()
    before = driver.cuCtxGetCurrent()
    gather(x=X, i=I)
    assert driver.cuCtxGetCurrent()[1] == before[1]


def test_to_device_names_bad_arguments():
    gather, _ = (cl.compile(p, target="cuda-emu") for p in chain_programs())
    with pytest.raises(cl.InputError, match="stream= takes a non-negative int"):
        gather.to_device(np.zeros(3), stream=-2)
    with pytest.raises(cl.InputError, match="to_device\\(\\)'s array is in device memory"):
        gather.to_device(OtherGpuDLPack())
    kept = np.arange(6.0)
    copy = gather.to_device(kept)
    kept[:] = -1  # a copy: the device array keeps what it was given
    np.testing.assert_array_equal(copy.numpy(), np.arange(6.0))


class OtherGpuDLPack:
    """A DLPack producer whose memory is on a CUDA GPU."""

    def __dlpack__(self, stream=None):
        raise AssertionError("must not be exported")

    def __dlpack_device__(self):
        return (2, 0)
