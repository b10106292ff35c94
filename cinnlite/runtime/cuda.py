"""The CUDA runtime: NVRTC compiles the generated CUDA C for the GPU at hand, the driver API
(``cuda.bindings.driver``) loads and launches it on device buffers.

:class:`CUDAExecutable` is what ``cinnlite.compile`` gives for ``target="cuda"`` (see
``cinnlite/backends/cuda.py``). It has the stages ``graph``, ``lowered``, ``cuda`` and ``ptx``;
only running it needs a GPU, and without one it raises :class:`TargetUnavailableError`.

A call runs on one stream of one GPU (see ``GPUCall`` in ``cuda_base.py``): device inputs are read
in place (cinnlite's DeviceArrays, anything with ``__cuda_array_interface__`` such as PyTorch and
CuPy arrays, or a CUDA ``__dlpack__`` such as JAX's), host inputs are uploaded, every other
buffer is allocated from the driver's stream-ordered memory pool, and the kernels are launched in
order. Nothing waits for the GPU unless the program has ``mode="raise"`` checks (the call reads
back their small error record on its stream) or the results go to the host. DeviceArray results
keep their memory until they are dropped; everything else the call allocated is freed in stream
order as it ends, and also when anything in it fails. The device's primary context is pushed for
the call and popped after it, so the caller's context is left as it was.

A program with symbolic sizes (``cinnlite.ir.symbolic``) has no sizes until a call gives them:
the call's plan (``runtime/shapes.py``) sizes its buffers, the symbols' values are uploaded
into their scalar buffers, and each launch's grid is computed from its item count.

Driver and packages: cuda-bindings and NVRTC of CUDA major N need a driver for CUDA N or newer;
where they do not match, the first call says which extra to install (``cinnlite[cuda12]`` or
``cinnlite[cuda13]``).
"""
from __future__ import annotations

import ctypes
import threading
import weakref

import numpy as np

from ..errors import CinnliteError, InputError, TargetUnavailableError
from . import nvrtc
from .cuda_base import CUDABaseExecutable, GPUCall
from .device_array import DL_CUDA, DL_CUDA_MANAGED, DeviceArray, ImportedTensor, device_like, export_capsule

_ERRORS = object()  # the error buffer's key among the device pointers (buffer names are strings)
_FRESH_ERRORS = object()  # the key of the device's copy of a fresh error buffer, among the constants

NO_GPU_HINT = ("the CUDA C and PTX stages work without one (exe.source('cuda'), exe.source('ptx')), and "
               "target='cuda-emu' runs the same CUDA C on the CPU")


# -- the driver ---------------------------------------------------------------------------------


def _driver_module():
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise TargetUnavailableError(
            "target 'cuda' cannot run: the CUDA packages are not installed (pip install 'cinnlite[cuda13]', "
            f"or 'cinnlite[cuda12]' for a CUDA 12 driver); {NO_GPU_HINT}") from exc
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


def _version_text(number: int) -> str:
    return f"{number // 1000}.{number % 1000 // 10}"


def _driver_mismatch(driver) -> str | None:
    """Why the installed CUDA packages cannot run on this driver, or None: cuda-bindings and
    NVRTC of CUDA major N need a driver of CUDA N or newer (CUDA 13: driver 580 or newer)."""
    try:
        err, version = driver.cuDriverGetVersion()
    except Exception:  # noqa: BLE001 - no libcuda at all: the caller reports that
        return None
    if err != driver.CUresult.CUDA_SUCCESS or not version:
        return None
    from cuda import bindings

    wanted = [("cuda-bindings", bindings.__version__, int(str(bindings.__version__).split(".")[0]))]
    if nvrtc.available():
        wanted.append(("NVRTC", ".".join(map(str, nvrtc.version())), nvrtc.version()[0]))
    too_new = [(what, text) for what, text, major in wanted if major > version // 1000]
    if not too_new:
        return None
    parts = " and ".join(f"{what} {text}" for what, text in too_new)
    return (f"target 'cuda' cannot run here: the NVIDIA driver supports CUDA {_version_text(version)}, but the "
            f"installed {parts} need a newer one; install the packages for this driver: "
            f"pip install 'cinnlite[cuda{version // 1000}]' (or update the driver)")


class _Device:
    """One CUDA device (by ordinal) and its primary context, set up on first use. Work on it
    runs inside ``entered()``, which pushes the context and pops it again, so the caller's
    current context (PyTorch's, CuPy's or its own) is the same afterwards."""

    _instances: dict = {}
    _failures: dict = {}  # the TargetUnavailableError of a failed set-up, raised again without retrying
    _lock = threading.Lock()

    def __init__(self, ordinal: int):
        driver = _driver_module()
        try:
            (err,) = driver.cuInit(0)
        except Exception as exc:  # the bindings raise when libcuda itself cannot be loaded
            raise TargetUnavailableError(
                f"target 'cuda' cannot run here: no NVIDIA driver was found ({exc}); {NO_GPU_HINT}") from exc
        mismatch = _driver_mismatch(driver)
        if mismatch:
            raise TargetUnavailableError(mismatch)
        if err == driver.CUresult.CUDA_ERROR_NO_DEVICE:
            raise TargetUnavailableError(f"target 'cuda' cannot run here: the NVIDIA driver sees no GPU; {NO_GPU_HINT}")
        if err != driver.CUresult.CUDA_SUCCESS:
            raise TargetUnavailableError(f"target 'cuda' cannot run here: cuInit failed with {err}; {NO_GPU_HINT}")
        count = _check(driver, driver.cuDeviceGetCount(), "cuDeviceGetCount")
        if not count:
            raise TargetUnavailableError(f"target 'cuda' cannot run here: no CUDA GPU; {NO_GPU_HINT}")
        if ordinal >= count:
            raise InputError(f"device={ordinal}: this machine has {count} CUDA GPU(s), ordinals 0 to {count - 1}")
        self.driver = driver
        self.ordinal = ordinal
        self.device = _check(driver, driver.cuDeviceGet(ordinal), "cuDeviceGet")
        self.context = _check(driver, driver.cuDevicePrimaryCtxRetain(self.device), "cuDevicePrimaryCtxRetain")
        attr = driver.CUdevice_attribute
        get = lambda a: int(_check(driver, driver.cuDeviceGetAttribute(a, self.device), "cuDeviceGetAttribute"))  # noqa: E731
        major = get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
        minor = get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)
        self.arch = f"sm_{major}{minor}"
        self.sm_count = get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
        self.pooled_alloc = bool(get(attr.CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED))
        name = _check(driver, driver.cuDeviceGetName(256, self.device), "cuDeviceGetName")
        self.name = name.split(b"\x00")[0].decode() if isinstance(name, bytes) else str(name)
        # A bounded grid: enough resident blocks to fill every SM several times over.
        self.max_blocks = self.sm_count * 32
        self._streams: dict = {}
        if self.pooled_alloc:
            self._keep_pool_memory()

    def _keep_pool_memory(self):
        """The device's memory pool keeps what calls give back instead of returning it to the
        driver at every synchronisation (its default): a call's buffers come from the pool, and
        handing 256 MB back and forth cost a fifth of a large take's time."""
        driver = self.driver
        try:
            pool = _check(driver, driver.cuDeviceGetDefaultMemPool(self.device), "cuDeviceGetDefaultMemPool")
            attribute = driver.CUmemPool_attribute.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
            _check(driver, driver.cuMemPoolSetAttribute(pool, attribute, driver.cuuint64_t(2**64 - 1)),
                   "cuMemPoolSetAttribute")
        except (CinnliteError, TypeError, AttributeError):  # only slower: memory goes back at each sync
            pass

    @classmethod
    def get(cls, ordinal: int = 0) -> "_Device":
        with cls._lock:
            if ordinal in cls._failures:
                raise cls._failures[ordinal]
            dev = cls._instances.get(ordinal)
            if dev is None:
                try:
                    dev = cls._instances[ordinal] = cls(ordinal)
                except TargetUnavailableError as exc:
                    cls._failures[ordinal] = exc
                    raise
            return dev

    def entered(self) -> "_Entered":
        """The device's context made current for a ``with`` block, the caller's restored after it."""
        return _Entered(self)

    def stream(self, handle: int):
        """The driver's object for a stream handle (made once per handle)."""
        found = self._streams.get(handle)
        if found is None:
            found = self._streams[handle] = self.driver.CUstream(handle)
        return found

    def alloc(self, nbytes: int, stream: int = 0):
        """Device memory for ``nbytes``, ordered on ``stream`` (the driver's memory pool, where
        the device has one): at least 8 bytes and a multiple of 8."""
        size = max(8, (nbytes + 7) // 8 * 8)
        if self.pooled_alloc:
            return _check(self.driver, self.driver.cuMemAllocAsync(size, self.stream(stream)),
                          "cuMemAllocAsync (out of device memory?)")
        return _check(self.driver, self.driver.cuMemAlloc(size), "cuMemAlloc (out of device memory?)")

    def free(self, dptr, stream: int = 0):
        """Give ``dptr`` back once the work queued on ``stream`` so far is done."""
        if self.pooled_alloc:
            self.driver.cuMemFreeAsync(dptr, self.stream(stream))
        else:
            self.driver.cuMemFree(dptr)

    def upload(self, dptr, array: np.ndarray, stream: int = 0):
        if array.nbytes:
            _check(self.driver, self.driver.cuMemcpyHtoDAsync(dptr, array.ctypes.data, array.nbytes,
                                                              self.stream(stream)), "cuMemcpyHtoDAsync")

    def download(self, array: np.ndarray, dptr, stream: int = 0):
        """Copy into ``array`` once the work queued on ``stream`` is done; returns when it is there."""
        if array.nbytes:
            _check(self.driver, self.driver.cuMemcpyDtoHAsync(array.ctypes.data, dptr, array.nbytes,
                                                              self.stream(stream)), "cuMemcpyDtoHAsync")
        self.synchronize(stream)

    def copy(self, dst, src, nbytes: int, stream: int = 0):
        if nbytes:
            _check(self.driver, self.driver.cuMemcpyDtoDAsync(dst, src, nbytes, self.stream(stream)),
                   "cuMemcpyDtoDAsync")

    def synchronize(self, stream: int = 0):
        _check(self.driver, self.driver.cuStreamSynchronize(self.stream(stream)),
               "cuStreamSynchronize (a kernel failed)")

    def event_seconds(self, enqueue, repeat: int, warmup: int) -> list:
        """Seconds the work ``enqueue()`` queues on the legacy default stream takes, between two
        CUDA events, ``repeat`` times after ``warmup`` untimed runs (for benchmarks)."""
        driver, stream = self.driver, self.stream(0)
        start = _check(driver, driver.cuEventCreate(0), "cuEventCreate")
        stop = _check(driver, driver.cuEventCreate(0), "cuEventCreate")
        try:
            times = []
            for k in range(warmup + repeat):
                _check(driver, driver.cuEventRecord(start, stream), "cuEventRecord")
                enqueue()
                _check(driver, driver.cuEventRecord(stop, stream), "cuEventRecord")
                _check(driver, driver.cuEventSynchronize(stop), "cuEventSynchronize")
                ms = _check(driver, driver.cuEventElapsedTime(start, stop), "cuEventElapsedTime")
                if k >= warmup:
                    times.append(float(ms) / 1e3)
            return times
        finally:
            driver.cuEventDestroy(start)
            driver.cuEventDestroy(stop)

    def order(self, producer: int, consumer: int):
        """Make work queued later on ``consumer`` wait for what is queued on ``producer`` now."""
        if _same_stream(producer, consumer):
            return
        driver = self.driver
        event = _check(driver, driver.cuEventCreate(driver.CUevent_flags.CU_EVENT_DISABLE_TIMING), "cuEventCreate")
        try:
            _check(driver, driver.cuEventRecord(event, self.stream(producer)), "cuEventRecord")
            _check(driver, driver.cuStreamWaitEvent(self.stream(consumer), event, 0), "cuStreamWaitEvent")
        finally:
            driver.cuEventDestroy(event)


class _Entered:
    """``with dev.entered():`` pushes the device's primary context and pops it after the block."""

    __slots__ = ("dev",)

    def __init__(self, dev: "_Device"):
        self.dev = dev

    def __enter__(self):
        dev = self.dev
        _check(dev.driver, dev.driver.cuCtxPushCurrent(dev.context), "cuCtxPushCurrent")
        return dev

    def __exit__(self, *exc):
        self.dev.driver.cuCtxPopCurrent()
        return False


def _same_stream(a: int, b: int) -> bool:
    """0 and 1 both name the legacy default stream."""
    return (a or 1) == (b or 1)


class CudaMemory:
    """The bytes of a DeviceArray on a GPU: memory a call (or ``to_device``) allocated, freed
    when the array goes, ordered after the work of its stream."""

    target = "cuda"

    def __init__(self, dev: _Device, ptr, stream: int):
        self.dev, self._ptr, self.stream = dev, ptr, stream
        self.device_id = dev.ordinal
        self.dlpack_device = (DL_CUDA, dev.ordinal)

    def __del__(self):
        _free_one(self.dev, self._ptr, self.stream)

    @property
    def ptr(self) -> int:
        return int(self._ptr)

    def download(self, host: np.ndarray):
        with self.dev.entered():
            self.dev.download(host, self._ptr, self.stream)

    def order_before(self, stream):
        with self.dev.entered():
            self.dev.order(self.stream, 1 if stream is None else int(stream))

    def export(self, array):
        return export_capsule(array)


def _free_one(dev: _Device, ptr, stream: int):
    try:
        with dev.entered():
            dev.free(ptr, stream)
    except Exception:  # noqa: BLE001 - the process may be shutting down; nothing left to do
        pass


class _DeviceInput:
    """A device array the call reads in place: its pointer, shape, dtype, byte strides (None
    for C order) and the stream its producer wrote it on."""

    __slots__ = ("ptr", "shape", "dtype", "dl_strides", "stream", "device")

    def __init__(self, ptr, shape, dtype, dl_strides, stream, device):
        self.ptr, self.shape, self.dtype, self.dl_strides = int(ptr), tuple(shape), np.dtype(dtype), dl_strides
        self.stream, self.device = stream, device


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


def _free_all(dev: _Device, consts: dict, module):
    """Release an executable's constants and module on one device (a weakref finaliser)."""
    try:
        with dev.entered():
            for p in consts.values():
                dev.driver.cuMemFree(p)
            if module is not None:
                dev.driver.cuModuleUnload(module)
    except Exception:  # noqa: BLE001 - the process may be shutting down; nothing left to do
        pass


class _Loaded:
    """The executable's kernels and constants on one device."""

    def __init__(self, dev: _Device, functions: list, consts: dict):
        self.dev, self.functions, self.consts = dev, functions, consts


class _CallBuffers:
    """The device memory of one call: every buffer's pointer by name, and the allocations the
    call made, given back (ordered on the call's stream) when it ends unless kept as results."""

    def __init__(self, dev: _Device, stream: int):
        self.dev, self.stream = dev, stream
        self.ptrs: dict = {}
        self.owned: dict = {}

    def new(self, name, nbytes: int):
        self.ptrs[name] = self.owned[name] = self.dev.alloc(nbytes, self.stream)
        return self.ptrs[name]

    def upload(self, name, array: np.ndarray):
        self.dev.upload(self.new(name, array.nbytes), array, self.stream)

    def keep(self, name):
        """The allocation of ``name`` outlives the call (a result)."""
        return self.owned.pop(name)

    def release(self):
        for ptr in self.owned.values():
            self.dev.free(ptr, self.stream)
        self.owned.clear()


class CUDAExecutable(CUDABaseExecutable):
    """Runs the module on the GPU through the driver API."""

    target = "cuda"
    takes_gpu_memory = True  # device arrays of other libraries are read in place

    def __init__(self, program, lowered, lowered_text, module, deterministic, pass_dumps=(), nvrtc_images=None):
        super().__init__(program, lowered, lowered_text, module, deterministic, pass_dumps, nvrtc_images)
        self._lock = threading.Lock()
        self._loaded: dict = {}  # device ordinal -> _Loaded, set up on the first call there

    def _ptx_arch(self) -> str:
        try:
            return _Device.get().arch
        except TargetUnavailableError:
            return nvrtc.DEFAULT_ARCH

    def device_name(self, device: int = 0) -> str:
        """The name of the GPU ``device`` (needs a GPU)."""
        return _Device.get(device).name

    # -- set-up, once per device ---------------------------------------------------------------

    def _prepare(self, ordinal: int) -> _Loaded:
        loaded = self._loaded.get(ordinal)
        if loaded is not None:
            return loaded
        with self._lock:
            if ordinal not in self._loaded:
                self._loaded[ordinal] = self._load(_Device.get(ordinal))
            return self._loaded[ordinal]

    def _load(self, dev: _Device) -> _Loaded:
        driver = dev.driver
        if not nvrtc.available():
            raise TargetUnavailableError("target 'cuda' needs NVRTC to build its kernels for the GPU "
                                         "(pip install 'cinnlite[cuda13]', or cuda12 for a CUDA 12 driver)")
        image = _module_image(self.nvrtc_output, dev.arch)
        consts: dict = {}
        with dev.entered():
            try:
                cu_module = _check(driver, driver.cuModuleLoadData(image.ctypes.data), "cuModuleLoadData")
            except CinnliteError as exc:
                raise TargetUnavailableError(
                    f"the CUDA driver could not load the kernels NVRTC {'.'.join(map(str, nvrtc.version()))} built "
                    f"for {dev.arch} ({exc}); the driver may be older than NVRTC") from exc
            weakref.finalize(self, _free_all, dev, consts, cu_module)  # frees what the lines below get
            functions = [_check(driver, driver.cuModuleGetFunction(cu_module, l.name.encode()), "cuModuleGetFunction")
                         for l in self.module.launches]
            constants = dict(self._consts)
            if self.module.num_checks:  # each call's error buffer starts as a device copy of this one
                constants[_FRESH_ERRORS] = self._new_error_buffer()
            for name, arr in constants.items():
                arr = np.ascontiguousarray(arr)
                consts[name] = _check(driver, driver.cuMemAlloc(max(8, -(-arr.nbytes // 8) * 8)), "cuMemAlloc")
                dev.upload(consts[name], arr)
            dev.synchronize()
        return _Loaded(dev, functions, consts)

    # -- calls ---------------------------------------------------------------------------------

    def _new_call(self, inputs: dict, stream, device) -> GPUCall:
        """The call's device: ``device=``, else that of its device inputs (which must agree),
        else 0. Its stream: ``stream=``, else PyTorch's current stream where it is given PyTorch
        tensors, else the legacy default stream."""
        found = {_device_of(v) for v in inputs.values()} - {None}
        if device is None and len(found) > 1:
            raise InputError(f"the device inputs are on different GPUs ({sorted(found)}); move them to one")
        ordinal = device if device is not None else (found.pop() if found else 0)
        if stream is None:
            stream = next((s for s in map(_torch_stream, inputs.values()) if s is not None), 0)
        return GPUCall(stream, ordinal)

    def _device_input(self, name: str, value, call: GPUCall):
        if isinstance(value, DeviceArray):
            if value.target != self.target:
                raise InputError(f"input '{name}' is a DeviceArray of target {value.target!r}; this executable "
                                 "runs on the GPU: pass .numpy(), or an array of target 'cuda'")
            got = _DeviceInput(value.ptr, value.shape, value.dtype, None, value.stream, value.device)
        else:
            got = _from_array_interface(name, value) or _from_dlpack(name, value, call)
        if got.device is not None and got.device != call.device:
            raise InputError(f"input '{name}' is on GPU {got.device}; the call runs on GPU {call.device}")
        if got.stream is not None and not _same_stream(got.stream, call.stream):
            dev = _Device.get(call.device)
            with dev.entered():
                dev.order(got.stream, call.stream)
        return got

    def _upload(self, host: np.ndarray, stream: int, device: int) -> DeviceArray:
        dev = _Device.get(device)
        with dev.entered():
            memory = CudaMemory(dev, dev.alloc(host.nbytes, stream), stream)  # freed if the upload fails
            dev.upload(memory.ptr, host, stream)
            dev.synchronize(stream)  # the host array may go once this returns
        return DeviceArray(memory, host.shape, host.dtype)

    def _run(self, arrays: dict, plan, outputs: dict | None = None, call: GPUCall | None = None) -> dict:
        call = call or GPUCall()
        loaded = self._prepare(call.device)
        dev = loaded.dev
        with dev.entered():
            bufs = self._bind(arrays, plan, loaded, call.stream)
            try:
                self._launch_all(bufs, self._launch_args(bufs, plan, loaded))
                self._check_errors(bufs, plan, arrays)
                return self._results(arrays, plan, bufs, outputs, call)
            finally:
                bufs.release()

    def _bind(self, arrays: dict, plan, loaded: _Loaded, stream: int) -> _CallBuffers:
        """The call's buffers on the device: device inputs in place, host inputs and the sizes
        uploaded, new memory for the rest, a fresh error record where kernels check."""
        bufs = _CallBuffers(loaded.dev, stream)
        try:
            bufs.ptrs.update(loaded.consts)
            for name, arr in arrays.items():
                if isinstance(arr, np.ndarray):
                    bufs.upload(name, arr)
                else:
                    bufs.ptrs[name] = arr.ptr
            for name, arr in plan.symbol_arrays.items():
                bufs.upload(name, arr)
            for name, _, _, nbytes in plan.allocs:
                bufs.new(name, nbytes)
            if self.module.num_checks:
                bufs.new(_ERRORS, self._error_bytes)
                self._reset_errors(bufs)
        except BaseException:
            bufs.release()
            raise
        return bufs

    def _reset_errors(self, bufs: _CallBuffers):
        """The call's error buffer made fresh, copied on the device from the one set up at load:
        an upload from host memory may wait for the stream, and costs more than the copy."""
        bufs.dev.copy(bufs.ptrs[_ERRORS], bufs.ptrs[_FRESH_ERRORS], self._error_bytes, bufs.stream)

    def _launch_args(self, bufs: _CallBuffers, plan, loaded: _Loaded) -> list:
        """(function, blocks, arguments, kernelParams) of each launch of a call, worked out
        once: ``arguments`` holds the arguments' values and a pointer to each, and kernelParams
        is the address of those pointers (the list keeps them alive). ctypes arrays: numpy's
        took a few times longer for these few values."""
        args = []
        for fn, launch in zip(loaded.functions, self.module.launches):
            ptrs = [int(bufs.ptrs[n]) for n in launch.buffers] + ([int(bufs.ptrs[_ERRORS])] if launch.errors else [])
            count = max(1, len(ptrs))
            values = (ctypes.c_uint64 * count)(*ptrs)
            base = ctypes.addressof(values)
            pointers = (ctypes.c_uint64 * count)(*range(base, base + 8 * count, 8))
            blocks = max(1, min(-(-plan.size_of(launch.items) // self.module.block), loaded.dev.max_blocks))
            args.append((fn, blocks, (values, pointers), ctypes.addressof(pointers)))
        return args

    def _launch_all(self, bufs: _CallBuffers, launch_args: list):
        driver, block, stream = bufs.dev.driver, self.module.block, bufs.dev.stream(bufs.stream)
        for fn, blocks, _, kernel_params in launch_args:
            _check(driver, driver.cuLaunchKernel(fn, blocks, 1, 1, block, 1, 1, 0, stream, kernel_params, 0),
                   "cuLaunchKernel")

    def _check_errors(self, bufs: _CallBuffers, plan, arrays: dict):
        """mode="raise": read the error record back (waiting for this call's stream only)."""
        if not self.module.num_checks:
            return
        errors = self._new_error_buffer()
        bufs.dev.download(errors, bufs.ptrs[_ERRORS], bufs.stream)
        failed = self._first_failed_check(errors)
        if failed is None:
            return
        check_id, position, value = failed
        index = {}
        if value is None:  # read the bad value from the index buffer
            check = self._checks[check_id]
            host = arrays.get(check.buffer)
            if not isinstance(host, np.ndarray):
                host = np.empty(tuple(plan.size_of(d) for d in check.shape), self._buffer_dtype(check.buffer))
                bufs.dev.download(host, bufs.ptrs[check.buffer], bufs.stream)
            index[check.buffer] = host
        self._raise_index_error(check_id, position, index, value=value, plan=plan)

    def _results(self, arrays: dict, plan, bufs: _CallBuffers, outputs: dict | None, call: GPUCall) -> dict:
        """The outputs: DeviceArrays that keep their call's memory, or host arrays copied back
        (into ``out=`` where given). An output that is an input or a constant is a copy."""
        allocs = {name: (shape, dtype, nbytes) for name, shape, dtype, nbytes in plan.allocs}
        results = {}
        for out in self.lowered.outputs:
            key = out.name
            if key in self._produced:
                shape, dtype, nbytes = allocs[key]
            else:  # an input or a constant given back: a copy
                shape, dtype = tuple(plan.size_of(d) for d in out.shape), out.dtype.np
                nbytes, key = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize, ("copy", out.name)
                bufs.dev.copy(bufs.new(key, nbytes), bufs.ptrs[out.name], nbytes, bufs.stream)
            if call.device_results:
                results[out.name] = DeviceArray(CudaMemory(bufs.dev, bufs.keep(key), bufs.stream), shape, dtype)
            else:
                given = outputs.get(out.name) if outputs else None
                host = given if given is not None else np.empty(shape, dtype)
                bufs.dev.download(host, bufs.ptrs[key], bufs.stream)
                results[out.name] = host
        return results

    def _buffer_dtype(self, name):
        return next(b.dtype.np for b in self._table if b.name == name)

    def time_kernels(self, inputs: dict, repeat: int = 20, warmup: int = 3) -> list[float]:
        """Seconds taken by all the launches of one run, with the inputs already on the device,
        measured with CUDA events ``repeat`` times (for benchmarks; needs a GPU). The buffers
        and launch arguments are set up once, before the samples; each sample resets the error
        record (where the program checks) and launches."""
        arrays = self._check_inputs(inputs)
        plan = self._shapes.plan_for(arrays, self)
        if plan.specialised is not None:
            return plan.specialised.time_kernels(arrays, repeat, warmup)
        loaded = self._prepare(0)
        dev = loaded.dev
        with dev.entered():
            bufs = self._bind(arrays, plan, loaded, 0)
            launch_args = self._launch_args(bufs, plan, loaded)

            def launches():
                if self.module.num_checks:  # a fresh record, as every call has
                    self._reset_errors(bufs)
                self._launch_all(bufs, launch_args)
            try:
                return dev.event_seconds(launches, repeat, warmup)
            finally:
                bufs.release()


def _device_of(value) -> int | None:
    """The GPU ordinal of a device input, where it says cheaply (None for host arrays)."""
    if isinstance(value, DeviceArray):
        return value.device if isinstance(value._memory, CudaMemory) else None
    if not device_like(value):
        return None
    device = getattr(value, "device", None)
    for index in (getattr(device, "index", None), getattr(device, "id", None)):  # PyTorch's, CuPy's
        if isinstance(index, int):
            return index
    if hasattr(value, "__dlpack_device__"):
        kind, ordinal = value.__dlpack_device__()
        return int(ordinal) if int(kind) in (DL_CUDA, DL_CUDA_MANAGED) else None
    return None


def _torch_stream(value) -> int | None:
    """PyTorch's current stream on the device of a PyTorch CUDA tensor, else None."""
    if not type(value).__module__.startswith("torch") or not getattr(value, "is_cuda", False):
        return None
    import torch

    return int(torch.cuda.current_stream(value.device).cuda_stream)


def _from_array_interface(name: str, value) -> _DeviceInput | None:
    """``value`` through ``__cuda_array_interface__``; None where it has none, or one that
    cannot show it (PyTorch's bfloat16) while DLPack can."""
    if not hasattr(type(value), "__cuda_array_interface__"):
        return None
    try:
        cai = value.__cuda_array_interface__
    except Exception as exc:  # noqa: BLE001 - e.g. a PyTorch tensor that requires grad
        if hasattr(value, "__dlpack__"):
            return None
        raise InputError(f"input '{name}': its __cuda_array_interface__ cannot be read: {exc}") from None
    ptr = cai["data"][0] or 0
    if cai.get("mask") is not None:
        raise InputError(f"input '{name}': masked device arrays are not taken")
    stream = cai.get("stream")
    return _DeviceInput(ptr, cai["shape"], np.dtype(cai["typestr"]), cai.get("strides"),
                        None if stream in (None, -1) else int(stream), _device_of(value))


def _from_dlpack(name: str, value, call: GPUCall) -> _DeviceInput:
    try:
        capsule = value.__dlpack__(stream=call.stream or 1)  # the producer orders its work before ours
        tensor = ImportedTensor(capsule)
    except (BufferError, TypeError, RuntimeError, ValueError) as exc:
        raise InputError(f"input '{name}': DLPack does not export it: {exc}") from None
    call.keep.append(tensor)
    if tensor.device[0] not in (DL_CUDA, DL_CUDA_MANAGED):
        raise InputError(f"input '{name}': DLPack device {tensor.device} is not a CUDA GPU")
    return _DeviceInput(tensor.ptr, tensor.shape, tensor.dtype, tensor.strides, None, tensor.device[1])


def device_copy_seconds(nbytes: int, repeat: int = 20, device: int = 0) -> list:
    """Seconds for a device-to-device copy of ``nbytes`` (the bandwidth benchmarks compare to)."""
    dev = _Device.get(device)
    with dev.entered():
        src, dst = dev.alloc(nbytes), dev.alloc(nbytes)
        try:
            return dev.event_seconds(lambda: dev.copy(dst, src, nbytes), repeat, 3)
        finally:
            dev.free(src)
            dev.free(dst)
            dev.synchronize()


def gpu_available() -> bool:
    """Whether ``target='cuda'`` can run here (driver, GPU and NVRTC present); never raises."""
    try:
        _Device.get()
    except Exception:  # noqa: BLE001 - any failure means no usable GPU
        return False
    return nvrtc.available()


__all__ = ["CUDAExecutable", "gpu_available", "device_copy_seconds"]
