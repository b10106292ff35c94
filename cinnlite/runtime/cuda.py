"""The CUDA runtime: NVRTC compiles the generated CUDA C for the GPU at hand, the driver API
(``cuda.bindings.driver``) loads and launches it on device buffers.

:class:`CUDAExecutable` is what ``cinnlite.compile`` gives for ``target="cuda"`` (see
``cinnlite/backends/cuda.py``). It has the stages ``graph``, ``lowered``, ``cuda`` and ``ptx``;
only running it needs a GPU, and without one it raises :class:`TargetUnavailableError`.

A run uploads the inputs, launches every kernel of the plan in order on the default stream,
reads back the error buffer of ``mode="raise"`` (per check: the smallest bad position and the
index value there) and the outputs. Device buffers are allocated on the first run and reused.

A program with symbolic sizes (``cinnlite.ir.symbolic``) has no sizes until a call gives them: its
device buffers are sized per call from the call's plan (``runtime/shapes.py``), grown where a
call needs more than an earlier one did and otherwise reused, so device memory stays at the
largest sizes seen; the symbols' values are uploaded into their scalar buffers, and each
launch's grid is computed from its item count at the call's sizes.
"""
from __future__ import annotations

import threading
import weakref

import numpy as np

from ..errors import CinnliteError, TargetUnavailableError
from . import nvrtc
from .cuda_base import CUDABaseExecutable

_ERRORS = object()  # the error buffer's key among the device pointers (buffer names are strings)

NO_GPU_HINT = ("the CUDA C and PTX stages work without one (exe.source('cuda'), exe.source('ptx')), and "
               "target='cuda-emu' runs the same CUDA C on the CPU")


# -- the driver ---------------------------------------------------------------------------------


def _driver_module():
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise TargetUnavailableError(
            "target 'cuda' cannot run: the optional extra `cuda` is not installed "
            f"(pip install 'cinnlite[cuda]'); {NO_GPU_HINT}") from exc
    return driver


def _check(driver, result, what):
    """Unpack a cuda.bindings result tuple, raising on an error code."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        _, text = driver.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        text = text.decode() if isinstance(text, bytes) else str(text)
        raise CinnliteError(f"CUDA driver: {what} failed: {name}: {text}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


class _Device:
    """The process's CUDA device 0 and its primary context, set up on first use."""

    _instance = None
    _failure = None  # the TargetUnavailableError of a failed set-up, raised again without retrying
    _lock = threading.Lock()

    def __init__(self):
        driver = _driver_module()
        try:
            (err,) = driver.cuInit(0)
        except Exception as exc:  # the bindings raise when libcuda itself cannot be loaded
            raise TargetUnavailableError(
                f"target 'cuda' cannot run here: no NVIDIA driver was found ({exc}); {NO_GPU_HINT}") from exc
        if err == driver.CUresult.CUDA_ERROR_NO_DEVICE:
            raise TargetUnavailableError(f"target 'cuda' cannot run here: the NVIDIA driver sees no GPU; {NO_GPU_HINT}")
        if err != driver.CUresult.CUDA_SUCCESS:
            raise TargetUnavailableError(f"target 'cuda' cannot run here: cuInit failed with {err}; {NO_GPU_HINT}")
        count = _check(driver, driver.cuDeviceGetCount(), "cuDeviceGetCount")
        if not count:
            raise TargetUnavailableError(f"target 'cuda' cannot run here: no CUDA GPU; {NO_GPU_HINT}")
        self.driver = driver
        self.device = _check(driver, driver.cuDeviceGet(0), "cuDeviceGet")
        self.context = _check(driver, driver.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")
        attr = driver.CUdevice_attribute
        get = lambda a: int(_check(driver, driver.cuDeviceGetAttribute(a, self.device), "cuDeviceGetAttribute"))  # noqa: E731
        major = get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        minor = get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        self.arch = f"sm_{major}{minor}"
        self.sm_count = get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        name = _check(driver, driver.cuDeviceGetName(256, self.device), "cuDeviceGetName")
        self.name = name.split(b"\x00")[0].decode() if isinstance(name, bytes) else str(name)
        # A bounded grid: enough resident blocks to fill every SM several times over.
        self.max_blocks = self.sm_count * 32
        self.stream = driver.CUstream(0)

    @classmethod
    def get(cls) -> "_Device":
        with cls._lock:
            if cls._failure is not None:
                raise cls._failure
            if cls._instance is None:
                try:
                    cls._instance = cls()
                except TargetUnavailableError as exc:
                    cls._failure = exc
                    raise
            cls._instance.make_current()
            return cls._instance

    def make_current(self):
        _check(self.driver, self.driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def alloc(self, nbytes: int):
        # At least 8 bytes and a multiple of 8, so 8- and 16-bit atomics may use the whole
        # aligned 32-bit word that holds their element.
        return _check(self.driver, self.driver.cuMemAlloc(max(8, (nbytes + 7) // 8 * 8)), "cuMemAlloc")

    def upload(self, dptr, array: np.ndarray):
        if array.nbytes:
            _check(self.driver, self.driver.cuMemcpyHtoD(dptr, array.ctypes.data, array.nbytes), "cuMemcpyHtoD")

    def download(self, array: np.ndarray, dptr):
        if array.nbytes:
            _check(self.driver, self.driver.cuMemcpyDtoH(array.ctypes.data, dptr, array.nbytes), "cuMemcpyDtoH")

    def synchronize(self):
        _check(self.driver, self.driver.cuCtxSynchronize(), "cuCtxSynchronize (a kernel failed)")


def _module_image(nvrtc_output, arch: str) -> np.ndarray:
    """What cuModuleLoadData loads: a CUBIN for ``arch``, or, for a GPU newer than this NVRTC
    knows, PTX for the newest architecture it knows (the driver compiles it), from
    ``nvrtc_output(arch)``. Bytes in an array, so the pointer handed to the driver stays valid."""
    supported = nvrtc.supported_archs()
    number = int(arch[3:])
    if not supported or number in supported:
        return np.frombuffer(nvrtc_output(arch).cubin, np.uint8)
    if number < min(supported):
        raise TargetUnavailableError(f"the GPU ({arch}) is older than the oldest architecture this NVRTC builds "
                                     f"for (sm_{min(supported)}); install an older nvidia-cuda-nvrtc")
    newest = max(a for a in supported if a <= number)
    ptx = nvrtc_output(f"compute_{newest}").ptx
    return np.frombuffer(ptx.encode() + b"\0", np.uint8)


def _free_all(device, pointers, module):
    """Release an executable's device memory and module (a weakref finaliser). ``pointers`` is
    the executable's dict of device pointers, whatever it holds by then."""
    try:
        device.make_current()
        for p in pointers.values():
            device.driver.cuMemFree(p)
        if module is not None:
            device.driver.cuModuleUnload(module)
    except Exception:  # noqa: BLE001 - the process may be shutting down; nothing left to do
        pass


class CUDAExecutable(CUDABaseExecutable):
    """Runs the module on the GPU through the driver API."""

    target = "cuda"

    def __init__(self, program, lowered, lowered_text, module, deterministic, pass_dumps=(), nvrtc_images=None):
        super().__init__(program, lowered, lowered_text, module, deterministic, pass_dumps, nvrtc_images)
        self._lock = threading.Lock()
        self._device = None
        self._functions = None
        self._dbuf = {}          # buffer name -> device pointer, allocated on the first run
        self._derr = None
        self._params = []        # per launch: the kernelParams array (and what keeps it alive)
        # Symbolic sizes: the bytes each device buffer has room for, and the plan the buffers
        # and self._params are set up for now.
        self._capacity = {}
        self._bound_plan = None

    def _ptx_arch(self) -> str:
        try:
            return _Device.get().arch
        except TargetUnavailableError:
            return nvrtc.DEFAULT_ARCH

    def device_name(self) -> str:
        """The name of the GPU the executable runs on (needs a GPU)."""
        return _Device.get().name

    # -- set-up, once ------------------------------------------------------------------------

    def _prepare(self):
        if self._functions is not None:
            return
        dev = _Device.get()
        driver = dev.driver
        if not nvrtc.available():
            raise TargetUnavailableError("target 'cuda' needs NVRTC to build its kernels for the GPU "
                                         "(pip install 'cinnlite[cuda]')")
        image = _module_image(self.nvrtc_output, dev.arch)
        try:
            cu_module = _check(driver, driver.cuModuleLoadData(image.ctypes.data), "cuModuleLoadData")
        except CinnliteError as exc:
            raise TargetUnavailableError(
                f"the CUDA driver could not load the kernels NVRTC {'.'.join(map(str, nvrtc.version()))} built for "
                f"{dev.arch} ({exc}); the driver may be older than NVRTC") from exc
        functions = [_check(driver, driver.cuModuleGetFunction(cu_module, l.name.encode()), "cuModuleGetFunction")
                     for l in self.module.launches]
        # Static buffers now; those of a symbolic size when a call gives the sizes (_bind).
        for buf in self._table:
            if buf.is_static:
                self._dbuf[buf.name] = dev.alloc(buf.size * buf.dtype.itemsize)
        self._derr = dev.alloc(self._new_error_buffer().nbytes)
        self._dbuf[_ERRORS] = self._derr
        for name, arr in self._consts.items():
            dev.upload(self._dbuf[name], np.ascontiguousarray(arr))
        if not self.symbolic:
            self._params = [self._launch_params(launch, launch.items, dev) for launch in self.module.launches]
        self._device, self._functions = dev, functions
        weakref.finalize(self, _free_all, dev, self._dbuf, cu_module)

    def _launch_params(self, launch, items: int, dev):
        """(kernelParams and what keeps it alive, blocks) of one launch of ``items`` work items
        on the buffers ``self._dbuf`` holds now."""
        ptrs = [self._dbuf[n] for n in launch.buffers] + ([self._derr] if launch.errors else [])
        # kernelParams: an array of pointers, each to the memory holding one argument.
        values = np.array([int(p) for p in ptrs] or [0], dtype=np.uint64)
        addresses = np.array([values.ctypes.data + 8 * k for k in range(len(ptrs))] or [0], dtype=np.uint64)
        blocks = max(1, min(-(-items // self.module.block), dev.max_blocks))
        return values, addresses, blocks

    def _bind(self, arrays: dict, plan):
        """Set the device up for the sizes of ``plan`` (symbolic programs): every buffer whose size
        is symbolic has room for this call (allocated, or grown), the symbols' values are on the
        device, and every launch has its arguments and grid. Nothing to do when the last call
        had the same plan."""
        if plan is self._bound_plan:
            return
        dev = self._device
        self._bound_plan = None  # until this binding is whole
        need = {name: arr.nbytes for name, arr in arrays.items()}
        need.update((name, arr.nbytes) for name, arr in plan.symbol_arrays.items())
        need.update((name, nbytes) for name, _, _, nbytes in plan.allocs)
        for name, nbytes in need.items():
            if name in self._dbuf and self._capacity.get(name, -1) < 0:
                continue  # a buffer of static size, allocated once in _prepare
            if self._capacity.get(name, -1) < nbytes:
                old = self._dbuf.pop(name, None)
                if old is not None:
                    self._capacity.pop(name)
                    _check(dev.driver, dev.driver.cuMemFree(old), "cuMemFree")
                self._dbuf[name] = dev.alloc(nbytes)
                self._capacity[name] = nbytes
        for name, arr in plan.symbol_arrays.items():
            dev.upload(self._dbuf[name], arr)
        self._params = [self._launch_params(launch, plan.size_of(launch.items), dev) for launch in self.module.launches]
        self._bound_plan = plan

    # -- running -----------------------------------------------------------------------------

    def _launch_all(self):
        dev, driver = self._device, self._device.driver
        for fn, (_values, addresses, blocks) in zip(self._functions, self._params):
            _check(driver, driver.cuLaunchKernel(fn, blocks, 1, 1, self.module.block, 1, 1, 0, dev.stream,
                                                 addresses.ctypes.data, 0), "cuLaunchKernel")

    def _run(self, arrays: dict, plan, outputs: dict | None = None) -> dict:
        with self._lock:
            self._prepare()
            dev = self._device
            dev.make_current()
            if self.symbolic:
                self._bind(arrays, plan)
            for name, arr in arrays.items():
                dev.upload(self._dbuf[name], arr)
            dev.upload(self._derr, self._new_error_buffer())
            self._launch_all()
            dev.synchronize()
            errors = self._new_error_buffer()
            dev.download(errors, self._derr)
            failed = self._first_failed_check(errors)
            if failed is not None:
                check_id, position, value = failed
                index = {}
                if value is None:  # read the bad value from the index buffer
                    check = self._checks[check_id]
                    shape = tuple(plan.size_of(d) for d in check.shape)
                    index[check.buffer] = np.empty(shape, self._buffer_dtype(check.buffer))
                    dev.download(index[check.buffer], self._dbuf[check.buffer])
                self._raise_index_error(check_id, position, index, value=value, plan=plan)
            buffers = dict(arrays)
            buffers.update(self._consts)
            shapes = {name: shape for name, shape, _, _ in plan.allocs}
            for out in self.lowered.outputs:
                if out.name in self._produced:
                    given = outputs.get(out.name) if outputs else None
                    host = given if given is not None else np.empty(shapes[out.name], out.dtype.np)
                    dev.download(host, self._dbuf[out.name])
                    buffers[out.name] = host
            return self._outputs(buffers)

    def _buffer_dtype(self, name):
        return next(b.dtype.np for b in self._table if b.name == name)

    def time_kernels(self, inputs: dict, repeat: int = 20, warmup: int = 3) -> list[float]:
        """Seconds taken by all the launches of one run, with the inputs already on the device,
        measured with CUDA events ``repeat`` times (for benchmarks; needs a GPU)."""
        arrays = self._check_inputs(inputs)
        plan = self._shapes.plan_for(arrays, self)
        if plan.specialised is not None:
            return plan.specialised.time_kernels(arrays, repeat, warmup)
        with self._lock:
            self._prepare()
            dev, driver = self._device, self._device.driver
            dev.make_current()
            if self.symbolic:
                self._bind(arrays, plan)
            for name, arr in arrays.items():
                dev.upload(self._dbuf[name], arr)
            start = _check(driver, driver.cuEventCreate(0), "cuEventCreate")
            stop = _check(driver, driver.cuEventCreate(0), "cuEventCreate")
            try:
                times = []
                for k in range(warmup + repeat):
                    dev.upload(self._derr, self._new_error_buffer())
                    _check(driver, driver.cuEventRecord(start, dev.stream), "cuEventRecord")
                    self._launch_all()
                    _check(driver, driver.cuEventRecord(stop, dev.stream), "cuEventRecord")
                    _check(driver, driver.cuEventSynchronize(stop), "cuEventSynchronize")
                    ms = _check(driver, driver.cuEventElapsedTime(start, stop), "cuEventElapsedTime")
                    if k >= warmup:
                        times.append(float(ms) / 1e3)
                return times
            finally:
                driver.cuEventDestroy(start)
                driver.cuEventDestroy(stop)


def device_copy_seconds(nbytes: int, repeat: int = 20) -> list:
    """Seconds for a device-to-device copy of ``nbytes`` (the bandwidth benchmarks compare to)."""
    dev = _Device.get()
    driver = dev.driver
    src, dst = dev.alloc(nbytes), dev.alloc(nbytes)
    start = _check(driver, driver.cuEventCreate(0), "cuEventCreate")
    stop = _check(driver, driver.cuEventCreate(0), "cuEventCreate")
    try:
        times = []
        for k in range(repeat + 3):
            _check(driver, driver.cuEventRecord(start, dev.stream), "cuEventRecord")
            _check(driver, driver.cuMemcpyDtoDAsync(dst, src, nbytes, dev.stream), "cuMemcpyDtoDAsync")
            _check(driver, driver.cuEventRecord(stop, dev.stream), "cuEventRecord")
            _check(driver, driver.cuEventSynchronize(stop), "cuEventSynchronize")
            ms = _check(driver, driver.cuEventElapsedTime(start, stop), "cuEventElapsedTime")
            if k >= 3:
                times.append(float(ms) / 1e3)
        return times
    finally:
        driver.cuEventDestroy(start)
        driver.cuEventDestroy(stop)
        driver.cuMemFree(src)
        driver.cuMemFree(dst)


def gpu_available() -> bool:
    """Whether ``target='cuda'`` can run here (driver, GPU and NVRTC present); never raises."""
    try:
        _Device.get()
    except Exception:  # noqa: BLE001 - any failure means no usable GPU
        return False
    return nvrtc.available()


__all__ = ["CUDAExecutable", "gpu_available", "device_copy_seconds"]
