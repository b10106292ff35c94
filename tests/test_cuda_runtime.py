"""The GPU runtime (``target="cuda"``) against a stand-in for the CUDA driver.

The stand-in keeps "device memory" in host arrays (a device pointer is a host address), checks
every copy against its allocation, and runs each launch with the host emulation's entry point for
that kernel, which takes its arguments exactly as ``cuLaunchKernel`` does (an array of pointers
to the argument values). So on a machine without a GPU these tests still run the runtime's own
code: NVRTC for the device's architecture, allocation, uploads, kernel parameters, grid sizes,
the error buffer and the downloads. Where a GPU is present, the whole numerical suite runs on
the real thing instead (tests/backends.py).
"""
from __future__ import annotations

import ctypes
import enum

import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder
from cinnlite.codegen.cuda import render_emu_launcher
from cinnlite.runtime import cuda as cuda_runtime
from cinnlite.runtime import cuda_emu

pytest.importorskip("cuda.bindings.nvrtc", reason="target 'cuda' builds its kernels with NVRTC (the extra `cuda`)")

GARBAGE = 0xA5  # fresh "device memory" holds this, so a kernel reading unset memory shows up


class FakeDriver:
    """Just enough of ``cuda.bindings.driver`` for the runtime, on host memory."""

    class CUresult(enum.IntEnum):
        CUDA_SUCCESS = 0
        CUDA_ERROR_INVALID_VALUE = 1
        CUDA_ERROR_NO_DEVICE = 100

    class CUdevice_attribute(enum.IntEnum):
        CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
        CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76

    CUstream = int

    def __init__(self, sm_count=2):
        self.sm_count = sm_count
        self.memory = {}      # address -> array
        self.freed = []
        self.images = []
        self.launches = []    # (kernel name, grid, block)
        self.library = None   # the emulation of the module being loaded, set by the test

    OK = CUresult.CUDA_SUCCESS

    def cuInit(self, flags):
        return (self.OK,)

    def cuDeviceGetCount(self):
        return self.OK, 1

    def cuDeviceGet(self, ordinal):
        return self.OK, ordinal

    def cuDevicePrimaryCtxRetain(self, dev):
        return self.OK, "context"

    def cuCtxSetCurrent(self, ctx):
        assert ctx == "context"
        return (self.OK,)

    def cuDeviceGetAttribute(self, attr, dev):
        a = self.CUdevice_attribute
        return self.OK, {a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: self.sm_count,
                         a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9,
                         a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0}[attr]

    def cuDeviceGetName(self, length, dev):
        return self.OK, b"Stand-in GPU\x00\x00"

    def cuGetErrorName(self, err):
        return self.OK, self.CUresult(err).name.encode()

    def cuGetErrorString(self, err):
        return self.OK, b"stand-in error"

    def cuModuleLoadData(self, image):
        self.images.append(ctypes.string_at(image, 4))  # a CUBIN is an ELF file
        return self.OK, "module"

    def cuModuleGetFunction(self, module, name):
        fn = getattr(self.library, "cinnlite_emu_launch_" + name.decode())
        fn.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
        fn.restype = None
        return self.OK, (name.decode(), fn)

    def cuModuleUnload(self, module):
        return (self.OK,)

    def cuMemAlloc(self, nbytes):
        if nbytes <= 0:
            return self.CUresult.CUDA_ERROR_INVALID_VALUE, 0
        buf = np.full(nbytes, GARBAGE, np.uint8)
        self.memory[buf.ctypes.data] = buf
        return self.OK, buf.ctypes.data

    def cuMemFree(self, ptr):
        self.freed.append(int(ptr))
        return (self.OK,)

    def _check_range(self, ptr, nbytes):
        for base, buf in self.memory.items():
            if base <= ptr and ptr + nbytes <= base + buf.nbytes:
                return
        raise AssertionError(f"copy of {nbytes} bytes at {ptr:#x} is outside every allocation")

    def cuMemcpyHtoD(self, dst, src, nbytes):
        self._check_range(int(dst), nbytes)
        ctypes.memmove(int(dst), src, nbytes)
        return (self.OK,)

    def cuMemcpyDtoH(self, dst, src, nbytes):
        self._check_range(int(src), nbytes)
        ctypes.memmove(dst, int(src), nbytes)
        return (self.OK,)

    def cuMemcpyDtoDAsync(self, dst, src, nbytes, stream):
        self._check_range(int(dst), nbytes)
        self._check_range(int(src), nbytes)
        ctypes.memmove(int(dst), int(src), nbytes)
        return (self.OK,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        name, fn = f
        assert (gy, gz, by, bz, shared, extra) == (1, 1, 1, 1, 0, 0) and 1 <= gx and 1 <= bx <= 256
        self.launches.append((name, gx, bx))
        fn(params, gx, bx)
        return (self.OK,)

    def cuCtxSynchronize(self):
        return (self.OK,)

    def cuEventCreate(self, flags):
        return self.OK, object()

    def cuEventRecord(self, event, stream):
        return (self.OK,)

    def cuEventSynchronize(self, event):
        return (self.OK,)

    def cuEventElapsedTime(self, start, stop):
        return self.OK, 0.25

    def cuEventDestroy(self, event):
        return (self.OK,)


@pytest.fixture
def fake_gpu(monkeypatch):
    driver = FakeDriver()
    monkeypatch.setattr(cuda_runtime, "_driver_module", lambda: driver)
    monkeypatch.setattr(cuda_runtime._Device, "_instance", None)
    monkeypatch.setattr(cuda_runtime._Device, "_failure", None)
    return driver


def on_fake_gpu(driver, program, **options):
    exe = cl.compile(program, target="cuda", **options)
    text = cuda_emu.translation_unit(exe.module.source, render_emu_launcher(exe.module))
    driver.library = ctypes.CDLL(str(cuda_emu.build_library(text)))
    return exe


def mixed_program():
    b = NetBuilder("mixed")
    x = b.create_input("float32", (50, 33), "x")
    i = b.create_input("int64", (300, 33), "i")
    u = b.create_input("float32", (300, 33), "u")
    h = b.create_input("float16", (50, 33), "h")
    c = b.constant(np.arange(6, dtype=np.int32).reshape(3, 2) - 2)
    g = b.gather(x, i, axis=0, mode="raise", name="g")
    return b.build([
        g,
        b.scatter(x, i, u, axis=0, mode="raise"),                       # winner
        b.scatter(x, i, g, axis=0, reduce="add", mode="wrap"),          # atomics, fed by a gather
        b.scatter(h, i, b.cast(u, "float16"), axis=0, reduce="mean", mode="clip"),
        b.take(x, c, axis=1, mode="wrap"),                              # a constant index
        x,                                                              # an input as output
    ])


def mixed_feeds(seed=0):
    rng = np.random.default_rng(seed)
    return dict(x=rng.standard_normal((50, 33)).astype(np.float32), i=rng.integers(-50, 50, (300, 33)),
                u=(rng.integers(-8, 8, (300, 33)) / 4).astype(np.float32),
                h=rng.standard_normal((50, 33)).astype(np.float16))


def test_the_runtime_computes_what_the_cpu_does(fake_gpu):
    prog = mixed_program()
    exe = on_fake_gpu(fake_gpu, prog)
    cpu = cl.compile(prog, target="cpu")
    for seed in range(3):  # buffers are allocated once and reused
        feeds = mixed_feeds(seed)
        want, got = cpu.run(feeds), exe.run(feeds)
        assert list(got) == list(want)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-5, err_msg=name)
        assert got["x"] is not feeds["x"]
    assert fake_gpu.images[0] == b"\x7fELF"  # a CUBIN from NVRTC for the device's sm_90
    # Every launch of the plan, in order, once per run; grids bounded at 32 blocks per SM.
    names = [l.name for l in exe.module.launches]
    assert [n for n, _, _ in fake_gpu.launches] == names * 3
    for (name, grid, block), launch in zip(fake_gpu.launches, exe.module.launches):
        assert block == 256 and grid == min(-(-launch.items // 256), 2 * 32)
    assert exe.device_name() == "Stand-in GPU"


def test_grid_stride_loops_cover_launches_bigger_than_the_grid(fake_gpu):
    b = NetBuilder("big")
    x = b.create_input("float32", (40000,), "x")
    i = b.create_input("int32", (40000,), "i")
    b.take(x, i, mode="wrap")
    prog = b.build()
    exe = on_fake_gpu(fake_gpu, prog)
    rng = np.random.default_rng(1)
    feeds = dict(x=rng.standard_normal(40000).astype(np.float32), i=rng.integers(-10**6, 10**6, 40000).astype(np.int32))
    np.testing.assert_array_equal(exe.run(feeds)["take_0"], cl.compile(prog, target="cpu").run(feeds)["take_0"])
    assert fake_gpu.launches[-1][1] == 64  # 157 blocks' worth of work on a 64-block grid


def test_raise_reads_the_error_buffer_and_names_the_first_bad_index(fake_gpu):
    prog = mixed_program()
    exe = on_fake_gpu(fake_gpu, prog)
    feeds = mixed_feeds()
    feeds["i"][7, 3] = 50
    feeds["i"][2, 30] = -51
    with pytest.raises(cl.IndexOutOfRangeError) as gpu_err:
        exe.run(feeds)
    with pytest.raises(cl.IndexOutOfRangeError) as cpu_err:
        cl.compile(prog, target="cpu").run(feeds)
    assert str(gpu_err.value) == str(cpu_err.value)
    assert gpu_err.value.position == (2, 30) and gpu_err.value.value == -51
    feeds["i"][2, 30] = 0
    feeds["i"][7, 3] = 0
    exe.run(feeds)  # the error buffer is reset for every run


def test_deterministic_runs_are_bit_identical_to_the_cpu(fake_gpu):
    b = NetBuilder("det")
    x = b.create_input("float32", (5, 4), "x")
    i = b.create_input("int64", (400, 4), "i")
    u = b.create_input("float32", (400, 4), "u")
    b.scatter(x, i, u, axis=0, reduce="add", mode="wrap")
    prog = b.build()
    exe = on_fake_gpu(fake_gpu, prog, deterministic=True)
    rng = np.random.default_rng(4)
    feeds = dict(x=rng.standard_normal((5, 4)).astype(np.float32), i=rng.integers(0, 5, (400, 4)),
                 u=rng.standard_normal((400, 4)).astype(np.float32))
    want = cl.compile(prog, target="cpu").run(feeds)["scatter_0"]
    for _ in range(2):
        assert exe.run(feeds)["scatter_0"].tobytes() == want.tobytes()


def test_time_kernels_and_the_copy_benchmark_use_events(fake_gpu):
    exe = on_fake_gpu(fake_gpu, mixed_program())
    times = exe.time_kernels(mixed_feeds(), repeat=4, warmup=1)
    assert times == [0.25e-3] * 4
    assert cuda_runtime.device_copy_seconds(1 << 12, repeat=2) == [0.25e-3] * 2


def test_device_memory_is_released_with_the_executable(fake_gpu):
    import gc

    exe = on_fake_gpu(fake_gpu, mixed_program())
    exe.run(mixed_feeds())
    allocated = set(fake_gpu.memory)
    del exe
    gc.collect()
    assert allocated <= set(fake_gpu.freed)


def symbolic_program():
    """take -> multiply -> scatter_nd over symbolic sizes (winner and atomics, an int64 winner)."""
    b = NetBuilder("symbolic")
    x = b.create_input("float32", ("N", 8), "x")
    i = b.create_input("int32", ("E",), "i")
    d = b.create_input("int64", ("E",), "d")
    m = b.multiply(b.take(x, i, axis=0), b.constant(np.float32(0.5)))
    idx = b.reshape(d, ("E", 1))
    return b.build([b.scatter_nd(x, idx, m, reduce="add"), b.scatter_nd(x, idx, m), b.reshape(m, (-1,))])


def symbolic_feeds(e, n, seed=0):
    rng = np.random.default_rng(seed)
    return dict(x=(rng.integers(-8, 9, (n, 8)) / 4).astype(np.float32), i=rng.integers(-n, n, e).astype(np.int32),
                d=rng.integers(-n, n, e))


def test_symbolic_sizes_are_bound_per_call(fake_gpu):
    prog = symbolic_program()
    exe = on_fake_gpu(fake_gpu, prog)
    assert exe.symbolic
    cpu = cl.compile(prog, target="cpu")
    # Sizes grow (buffers are reallocated), shrink (the bigger buffers serve) and come back.
    for k, (e, n) in enumerate([(7, 5), (3001, 97), (13, 11), (1, 1), (3001, 97), (7, 5)]):
        if k == 2:
            grown = len(fake_gpu.memory)
        feeds = symbolic_feeds(e, n, seed=e)
        before = len(fake_gpu.launches)
        want, got = cpu.run(feeds), exe.run(feeds)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name} E={e} N={n}")
        plan = exe._shapes.plan_for(feeds, exe)
        launched = fake_gpu.launches[before:]
        assert [name for name, _, _ in launched] == [l.name for l in exe.module.launches]
        for (_, grid, block), launch in zip(launched, exe.module.launches):
            assert block == 256 and grid == min(-(-plan.size_of(launch.items) // 256), 2 * 32)
    assert len(fake_gpu.memory) == grown  # no allocation after the biggest sizes
    bad = symbolic_feeds(13, 11)
    bad["i"][5] = 11
    with pytest.raises(cl.IndexOutOfRangeError) as gpu_err:
        exe.run(bad)
    with pytest.raises(cl.IndexOutOfRangeError) as cpu_err:
        cpu.run(bad)
    assert str(gpu_err.value) == str(cpu_err.value)
    assert exe.time_kernels(symbolic_feeds(7, 5), repeat=2, warmup=1) == [0.25e-3] * 2
    import gc

    allocated = set(fake_gpu.memory)  # every allocation, the outgrown ones included, is freed
    del exe, gpu_err  # (the error's traceback holds the executable)
    gc.collect()
    assert allocated <= set(fake_gpu.freed)
