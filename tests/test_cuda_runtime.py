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
from cinnlite.codegen import cuda as cuda_codegen
from cinnlite.codegen.cuda import render_emu_launcher
from cinnlite.runtime import cuda as cuda_runtime
from cinnlite.runtime import cuda_emu

pytest.importorskip("cuda.bindings.nvrtc", reason="target 'cuda' builds its kernels with NVRTC (the extra `cuda13` or `cuda12`)")

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
        CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED = 115

    class CUevent_flags(enum.IntEnum):
        CU_EVENT_DISABLE_TIMING = 2

    class CUmemPool_attribute(enum.IntEnum):
        CU_MEMPOOL_ATTR_RELEASE_THRESHOLD = 4

    cuuint64_t = int

    CUstream = int

    def __init__(self, sm_count=2, driver_version=13000, devices=1, pools=True):
        self.sm_count, self.driver_version, self.devices, self.pools = sm_count, driver_version, devices, pools
        self.memory = {}      # address -> array
        self.freed = []
        self.images = []
        self.launches = []    # (kernel name, grid, block, stream)
        self.library = None   # the emulation of the module being loaded, set by the test
        self.contexts = ["caller's context"]  # the current-context stack of the calling thread
        self.waits = []       # (stream, event) of cuStreamWaitEvent
        self.synced = []      # streams waited for

    OK = CUresult.CUDA_SUCCESS

    def cuInit(self, flags):
        return (self.OK,)

    def cuDeviceGetDefaultMemPool(self, dev):
        return self.OK, f"pool {dev}"

    def cuMemPoolSetAttribute(self, pool, attribute, value):
        assert attribute == self.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD and value == 2**64 - 1
        self.pool_threshold = value
        return (self.OK,)

    def cuDriverGetVersion(self):
        return self.OK, self.driver_version

    def cuDeviceGetCount(self):
        return self.OK, self.devices

    def cuDeviceGet(self, ordinal):
        return self.OK, ordinal

    def cuDevicePrimaryCtxRetain(self, dev):
        return self.OK, f"context {dev}"

    def cuCtxPushCurrent(self, ctx):
        assert str(ctx).startswith("context ")
        self.contexts.append(ctx)
        return (self.OK,)

    def cuCtxPopCurrent(self):
        return self.OK, self.contexts.pop()

    def cuDeviceGetAttribute(self, attr, dev):
        a = self.CUdevice_attribute
        return self.OK, {a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: self.sm_count,
                         a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9,
                         a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0,
                         a.CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED: int(self.pools)}[attr]

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

    def cuMemAllocAsync(self, nbytes, stream):
        return self.cuMemAlloc(nbytes)

    def cuMemFreeAsync(self, ptr, stream):
        return self.cuMemFree(ptr)

    def live(self) -> set:
        """Addresses allocated and not freed."""
        return set(self.memory) - set(self.freed)

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

    def cuMemcpyHtoDAsync(self, dst, src, nbytes, stream):
        return self.cuMemcpyHtoD(dst, src, nbytes)

    def cuMemcpyDtoHAsync(self, dst, src, nbytes, stream):
        return self.cuMemcpyDtoH(dst, src, nbytes)

    def cuStreamSynchronize(self, stream):
        self.synced.append(int(stream))
        return (self.OK,)

    def cuStreamWaitEvent(self, stream, event, flags):
        self.waits.append((int(stream), event))
        return (self.OK,)

    def cuMemcpyDtoDAsync(self, dst, src, nbytes, stream):
        self._check_range(int(dst), nbytes)
        self._check_range(int(src), nbytes)
        ctypes.memmove(int(dst), int(src), nbytes)
        return (self.OK,)

    def cuLaunchKernel(self, f, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        name, fn = f
        assert (gy, gz, by, bz, shared, extra) == (1, 1, 1, 1, 0, 0) and 1 <= gx and 1 <= bx <= 256
        assert self.contexts[-1] != "caller's context", "a launch outside the device's context"
        self.launches.append((name, gx, bx, int(stream)))
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


def use_driver(monkeypatch, driver):
    """Make ``driver`` the runtime's, with no device set up yet."""
    monkeypatch.setattr(cuda_runtime, "_driver_module", lambda: driver)
    monkeypatch.setattr(cuda_runtime._Device, "_instances", {})
    monkeypatch.setattr(cuda_runtime._Device, "_failures", {})


@pytest.fixture
def fake_gpu(monkeypatch):
    driver = FakeDriver()
    use_driver(monkeypatch, driver)
    yield driver
    assert driver.contexts == ["caller's context"]  # every push popped


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
    assert [n for n, _, _, _ in fake_gpu.launches] == names * 3
    for (name, grid, block, _), launch in zip(fake_gpu.launches, exe.module.launches):
        assert block == 256 and grid == min(-(-launch.items // 256), 2 * 32)
    assert exe.device_name() == "Stand-in GPU"


# The fake device's grid: 64 blocks of 256 threads, 16384 items a turn. Launches of 2.4 turns
# (one item at a time only), of exactly one group of ITEMS_IN_FLIGHT turns, and of two groups
# and 1.3 turns more.
TURN = 64 * 256


@pytest.mark.parametrize("n", [40000, cuda_codegen.ITEMS_IN_FLIGHT * TURN,
                               2 * cuda_codegen.ITEMS_IN_FLIGHT * TURN + 13 * TURN // 10])
def test_grid_stride_loops_take_every_item_once(fake_gpu, n):
    """A scatter-add of ones through a permutation: every target ends at exactly 1, so an item no
    thread takes (0, or fresh memory's GARBAGE in the copy of x) or one taken twice (2) shows."""
    b = NetBuilder("big")
    x = b.create_input("float32", (n,), "x")
    i = b.create_input("int32", (n,), "i")
    u = b.create_input("float32", (n,), "u")
    b.scatter(x, i, u, axis=0, reduce="add")
    exe = on_fake_gpu(fake_gpu, b.build())
    feeds = dict(x=np.zeros(n, np.float32), i=np.random.default_rng(1).permutation(n).astype(np.int32),
                 u=np.ones(n, np.float32))
    np.testing.assert_array_equal(exe.run(feeds)["scatter_0"], np.ones(n, np.float32))
    assert fake_gpu.launches[-1][1] == 64


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
    exe._prepare(0)
    kept = fake_gpu.live()  # the module's constants
    for e, n in [(7, 5), (3001, 97), (13, 11), (1, 1), (3001, 97), (7, 5)]:
        feeds = symbolic_feeds(e, n, seed=e)
        before = len(fake_gpu.launches)
        want, got = cpu.run(feeds), exe.run(feeds)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name} E={e} N={n}")
        plan = exe._shapes.plan_for(feeds, exe)
        launched = fake_gpu.launches[before:]
        assert [name for name, _, _, _ in launched] == [l.name for l in exe.module.launches]
        for (_, grid, block, _), launch in zip(launched, exe.module.launches):
            assert block == 256 and grid == min(-(-plan.size_of(launch.items) // 256), 2 * 32)
        assert fake_gpu.live() == kept  # the call's memory went back to the pool
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


# -- device arrays, streams, devices ---------------------------------------------------------------


class FakeCudaArray:
    """Another library's device array: ``__cuda_array_interface__`` over the fake device memory."""

    def __init__(self, driver, host: np.ndarray, stream=None, strides=None):
        self.host = np.ascontiguousarray(host)
        _, self.ptr = driver.cuMemAlloc(max(8, self.host.nbytes))
        driver.cuMemcpyHtoD(self.ptr, self.host.ctypes.data, self.host.nbytes)
        self.stream, self.strides = stream, strides

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.host.shape, "typestr": self.host.dtype.str, "data": (self.ptr, False),
                "strides": self.strides, "version": 3, "stream": self.stream}


def take_program():
    b = NetBuilder("dev")
    x = b.create_input("float32", (40, 3), "x")
    i = b.create_input("int64", (25,), "i")
    b.take(x, i, axis=0, mode="clip")
    return b.build()


def test_device_inputs_are_read_in_place_and_results_stay_on_the_device(fake_gpu):
    exe = on_fake_gpu(fake_gpu, take_program())
    rng = np.random.default_rng(0)
    X, I = rng.standard_normal((40, 3)).astype(np.float32), rng.integers(-50, 50, 25)
    x = FakeCudaArray(fake_gpu, X, stream=7)
    uploads = []
    fake_gpu.cuMemcpyHtoDAsync = lambda dst, src, n, s: (uploads.append(n), fake_gpu.cuMemcpyHtoD(dst, src, n))[1]
    out = exe(x=x, i=exe.to_device(I), stream=5)
    assert isinstance(out, cl.DeviceArray) and out.shape == (25, 3) and out.dtype == np.float32
    assert uploads == [I.nbytes]  # to_device's upload only: x is read in place
    assert fake_gpu.launches[-1][3] == 5  # on the caller's stream
    assert (5, fake_gpu.waits[-1][1]) == fake_gpu.waits[-1]  # after the work of x's stream, 7
    assert 5 not in fake_gpu.synced  # no check, device results: the call does not wait
    assert fake_gpu.pool_threshold == 2**64 - 1  # the pool keeps what calls give back
    np.testing.assert_array_equal(out.numpy(), X[np.clip(I, 0, 39)])
    assert out.__cuda_array_interface__["data"][0] == out.ptr and out.__cuda_array_interface__["stream"] == 5
    # A result is the next call's input, in place; dropping it frees its memory.
    again = exe.run({"x": x, "i": exe.to_device(np.zeros(25, np.int64))})["take_0"]
    np.testing.assert_array_equal(np.asarray(again), np.repeat(X[:1], 25, axis=0))
    ptr = out.ptr
    del out
    import gc

    gc.collect()
    assert ptr in fake_gpu.freed


def test_dlpack_export_shows_the_same_device_memory(fake_gpu):
    from cinnlite.runtime.device_array import ImportedTensor

    exe = on_fake_gpu(fake_gpu, take_program())
    arr = exe.to_device(np.arange(12, dtype=np.int32).reshape(3, 4))
    assert arr.__dlpack_device__() == (2, 0)
    tensor = ImportedTensor(arr.__dlpack__(stream=9))
    assert (tensor.ptr, tensor.shape, tensor.dtype, tensor.strides) == (arr.ptr, (3, 4), np.int32, None)
    assert fake_gpu.waits[-1][0] == 9  # the consumer's stream waits for the producer's
    tensor.release()
    with pytest.raises(BufferError):
        arr.__dlpack__(copy=True)


def test_device_inputs_are_checked_like_host_ones(fake_gpu):
    exe = on_fake_gpu(fake_gpu, take_program())
    X = np.ones((40, 3), np.float32)
    with pytest.raises(cl.InputTypeError, match="input 'x': expected dtype float32, got float64"):
        exe(x=FakeCudaArray(fake_gpu, X.astype(np.float64)), i=np.zeros(25, np.int64))
    with pytest.raises(cl.InputError, match=r"input 'x': expected shape \(40, 3\), got \(10, 3\)"):
        exe(x=FakeCudaArray(fake_gpu, X[:10]), i=np.zeros(25, np.int64))
    with pytest.raises(cl.InputError, match="C-contiguous"):
        exe(x=FakeCudaArray(fake_gpu, X, strides=(4, 160)), i=np.zeros(25, np.int64))
    with pytest.raises(cl.InputError, match="out= takes host arrays"):
        exe.run({"x": FakeCudaArray(fake_gpu, X), "i": np.zeros(25, np.int64)}, out=np.empty((25, 3), np.float32))
    with pytest.raises(cl.InputError, match="stream= takes a non-negative int"):
        exe(x=X, i=np.zeros(25, np.int64), stream=-1)


def test_raise_waits_for_the_calls_stream_only(fake_gpu):
    b = NetBuilder("raise")
    x = b.create_input("float32", (40,), "x")
    i = b.create_input("int64", (25,), "i")
    b.take(x, i, mode="raise")
    exe = on_fake_gpu(fake_gpu, b.build())
    x_dev = exe.to_device(np.arange(40, dtype=np.float32))
    exe(x=x_dev, i=np.arange(25))  # the first call loads the module (and waits for that)
    fake_gpu.synced.clear()
    out = exe(x=x_dev, i=np.arange(25), stream=3)
    assert fake_gpu.synced == [3]  # the error record, on the call's stream
    np.testing.assert_array_equal(out.numpy(), np.arange(25, dtype=np.float32))
    bad = np.arange(25)
    bad[17] = 40
    with pytest.raises(cl.IndexOutOfRangeError, match="40"):
        exe(x=x_dev, i=bad, stream=3)


def test_device_selects_the_gpu_and_mismatches_are_named(monkeypatch):
    driver = FakeDriver(devices=2)
    use_driver(monkeypatch, driver)
    exe = on_fake_gpu(driver, take_program())
    X, I = np.ones((40, 3), np.float32), np.zeros(25, np.int64)
    on_one = exe.to_device(X, device=1)
    assert on_one.device == 1
    out = exe(x=on_one, i=I)  # the device of the inputs
    assert out.device == 1 and driver.launches[-1][0] == exe.module.launches[0].name
    with pytest.raises(cl.InputError, match="on different GPUs"):
        exe(x=on_one, i=exe.to_device(I, device=0))
    with pytest.raises(cl.InputError, match="input 'x' is on GPU 1; the call runs on GPU 0"):
        exe(x=on_one, i=I, device=0)
    with pytest.raises(cl.InputError, match="ordinals 0 to 1"):
        exe(x=X, i=I, device=2)
    assert driver.contexts == ["caller's context"]


@pytest.mark.parametrize("driver_version", [12080, 11080])
def test_a_driver_older_than_the_packages_names_the_extra_to_install(monkeypatch, driver_version):
    driver = FakeDriver(driver_version=driver_version)
    use_driver(monkeypatch, driver)
    from cuda import bindings

    major = driver_version // 1000
    if int(bindings.__version__.split(".")[0]) <= major and cuda_runtime.nvrtc.version()[0] <= major:
        pytest.skip("the installed CUDA packages run on this driver")
    exe = cl.compile(take_program(), target="cuda")
    with pytest.raises(cl.TargetUnavailableError,
                       match=rf"driver supports CUDA {major}\.\d.*pip install 'cinnlite\[cuda{major}\]'"):
        exe(x=np.ones((40, 3), np.float32), i=np.zeros(25, np.int64))
    assert not cuda_runtime.gpu_available()


def test_a_failed_allocation_gives_back_what_the_call_had(fake_gpu):
    exe = on_fake_gpu(fake_gpu, mixed_program())
    exe.run(mixed_feeds())
    kept = fake_gpu.live()
    real, count = fake_gpu.cuMemAllocAsync, [0]

    def fail_the_fourth(nbytes, stream):
        count[0] += 1
        return (FakeDriver.CUresult.CUDA_ERROR_INVALID_VALUE, 0) if count[0] == 4 else real(nbytes, stream)
    fake_gpu.cuMemAllocAsync = fail_the_fourth
    with pytest.raises(cl.CinnliteError, match="cuMemAllocAsync"):
        exe.run(mixed_feeds())
    assert fake_gpu.live() == kept


def test_without_memory_pools_plain_allocations_serve(monkeypatch):
    driver = FakeDriver(pools=False)
    use_driver(monkeypatch, driver)
    driver.cuMemAllocAsync = None  # must not be called
    exe = on_fake_gpu(driver, mixed_program())
    want = cl.compile(mixed_program(), target="cpu").run(mixed_feeds())
    got = exe.run(mixed_feeds())
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-5)


def test_nvrtc_output_comes_from_the_disk_cache_in_a_later_process(fake_gpu, cache_dir, monkeypatch):
    from cinnlite.runtime import cache as caches
    from cinnlite.runtime import nvrtc

    program = take_program()
    first = on_fake_gpu(fake_gpu, program)
    first(x=np.ones((40, 3), np.float32), i=np.zeros(25, np.int64))  # NVRTC builds for the device's sm_90
    caches.MEMORY.clear()  # as a new process finds it: on disk only

    def no_nvrtc(*args, **kwargs):
        raise AssertionError("NVRTC ran again")
    monkeypatch.setattr(nvrtc, "_compile_cached", no_nvrtc)
    monkeypatch.delenv("CINNLITE_NVRTC_CHECK", raising=False)  # the test suite's extra compile checks
    later = on_fake_gpu(fake_gpu, program)
    assert later is not first
    out = later(x=np.ones((40, 3), np.float32), i=np.zeros(25, np.int64))
    np.testing.assert_array_equal(out, np.ones((25, 3), np.float32))
    assert fake_gpu.images[-1] == b"\x7fELF"
