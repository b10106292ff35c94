"""Arrays in a GPU target's memory: :class:`DeviceArray`, and how device arrays of other libraries
(PyTorch, CuPy, JAX) are read without a copy.

A ``DeviceArray`` is what a ``target="cuda"`` executable returns when it is given device arrays
(and what ``exe.to_device`` makes): it stays on the GPU, the next call takes it as an input, and
other libraries take it through ``__dlpack__`` or ``__cuda_array_interface__`` without a copy.
On ``target="cuda-emu"`` the same API works over host memory (its ``__dlpack__`` says so, and it
has no ``__cuda_array_interface__``), so every use of it is tested without a GPU.

Where the bytes live is the business of a *memory* object of the runtime that made the array
(``runtime/cuda.py``, ``runtime/cuda_emu.py``): it has ``ptr``, keeps the bytes alive, copies them
to the host (``download``), says which DLPack device they are on, orders a consumer's stream
after the work that produces them (``order_before``) and makes the DLPack capsule (``export``). This module holds only what
every runtime shares: the array's metadata, and the DLPack structures (export and import).
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from ..dtypes import as_dtype
from ..errors import InputError, InputTypeError
from .shapes import shape_matches, shape_tuple_text

#: DLPack's device types (dlpack.h).
DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_CUDA_MANAGED = 1, 2, 3, 13
#: DLPack's type codes.
_DL_INT, _DL_UINT, _DL_FLOAT, _DL_BFLOAT, _DL_COMPLEX, _DL_BOOL = 0, 1, 2, 4, 5, 6


class DeviceArray:
    """An array in the memory of a GPU target, C-contiguous.

    ``.shape``, ``.dtype``, ``.numpy()`` (a copy on the host), ``np.asarray(a)`` (the same),
    ``__dlpack__`` / ``__dlpack_device__`` (zero-copy exchange with PyTorch, CuPy, JAX, numpy on
    the emulation), and on ``target="cuda"`` ``__cuda_array_interface__``. ``.stream`` is the
    stream whose work produced it: a consumer on another stream is ordered after that work
    (``__dlpack__(stream=...)`` does it; ``__cuda_array_interface__`` names the stream)."""

    __slots__ = ("_memory", "shape", "dtype", "__weakref__")

    def __init__(self, memory, shape, dtype):
        self._memory = memory
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)

    @property
    def target(self) -> str:
        return self._memory.target

    @property
    def device(self) -> int:
        """The ordinal of the GPU holding the array (0 on the emulation)."""
        return self._memory.device_id

    @property
    def stream(self) -> int:
        return self._memory.stream

    @property
    def ptr(self) -> int:
        return self._memory.ptr

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def numpy(self) -> np.ndarray:
        """A copy of the array on the host (waits for the work that produces it)."""
        host = np.empty(self.shape, self.dtype)
        self._memory.download(host)
        return host

    def __array__(self, dtype=None, copy=None):
        host = self.numpy()
        return host if dtype is None else host.astype(dtype, copy=False)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d DeviceArray")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype.name}, target={self.target!r}, device={self.device})"

    @property
    def __cuda_array_interface__(self) -> dict:
        if self._memory.dlpack_device[0] != DL_CUDA:
            raise AttributeError("a DeviceArray of target 'cuda-emu' is in host memory: it has no "
                                 "__cuda_array_interface__ (use __dlpack__ or .numpy())")
        stream = self._memory.stream
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ptr, False), "strides": None,
                "version": 3, "stream": stream if stream else 1}

    def __dlpack_device__(self) -> tuple:
        return self._memory.dlpack_device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of the array, without a copy. ``stream`` is the consumer's: the work
        producing the array is ordered before it (on the GPU)."""
        if copy:
            raise BufferError("DeviceArray.__dlpack__ does not copy (copy=True asked for one)")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"DeviceArray is on DLPack device {self.__dlpack_device__()}, not {tuple(dl_device)}")
        self._memory.order_before(stream)
        return self._memory.export(self)


def device_like(value) -> bool:
    """Whether ``value`` is an array some GPU runtime might read in place (not a numpy array)."""
    if isinstance(value, (np.ndarray, DeviceArray)):
        return isinstance(value, DeviceArray)
    if hasattr(type(value), "__cuda_array_interface__"):
        return True
    dev = getattr(value, "__dlpack_device__", None)
    if dev is None:
        return False
    try:
        return int(dev()[0]) in (DL_CUDA, DL_CUDA_MANAGED)
    except Exception:  # noqa: BLE001 - an object whose device cannot be asked is not one
        return False


def check_device_input(name: str, shape, dtype, want_shape, want_dtype, strides=None):
    """The checks every device input gets: dtype, shape (against the program's, which may be
    symbolic), and C order (``strides`` in bytes, None for C-contiguous). Raises the same errors
    as host inputs do."""
    if dtype != want_dtype:
        raise InputTypeError(f"input '{name}': expected dtype {want_dtype.name}, got {np.dtype(dtype).name} "
                             "(cinnlite does not cast)")
    if shape != want_shape and not shape_matches(shape, want_shape):
        raise InputError(f"input '{name}': expected shape {shape_tuple_text(want_shape)}, got {tuple(shape)}")
    if strides is not None and not is_c_ordered(shape, strides, dtype.itemsize):
        raise InputError(f"input '{name}': a device array must be C-contiguous (strides {tuple(strides)}); "
                         "make it contiguous first (e.g. tensor.contiguous())")


def is_c_ordered(shape, strides, itemsize: int) -> bool:
    """Whether byte ``strides`` lay ``shape`` out in C order (a dimension of extent 1 may have
    any stride, as PyTorch gives them; an empty array is in any order)."""
    if 0 in tuple(shape):
        return True
    step = itemsize
    for extent, stride in zip(reversed(tuple(shape)), reversed(tuple(strides))):
        if extent != 1 and stride != step:
            return False
        step *= extent
    return True


# -- DLPack structures --------------------------------------------------------------------------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

# The destructor gets the capsule as a bare pointer: it runs while the capsule is being freed,
# so it must not make a Python object of it again.
_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = (ctypes.c_void_p, ctypes.c_char_p, _CAPSULE_DESTRUCTOR)
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = (ctypes.py_object, ctypes.c_char_p)
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", _api))

#: Exported tensors still held by a consumer (or an unconsumed capsule): their structures and
#: the DeviceArray whose bytes they show, by the address of the DLManagedTensor.
_EXPORTED: dict = {}
_EXPORTED_LOCK = threading.Lock()


def _release(managed_ptr) -> None:
    with _EXPORTED_LOCK:
        _EXPORTED.pop(ctypes.cast(managed_ptr, ctypes.c_void_p).value, None)


def _destroy_capsule(capsule: int) -> None:
    """A capsule nobody consumed still owns its tensor; a consumed one was renamed."""
    if _capsule_is_valid(capsule, b"dltensor"):
        _release(_capsule_pointer(capsule, b"dltensor"))


_DELETER_FN = _DELETER(_release)
_DESTRUCTOR_FN = _CAPSULE_DESTRUCTOR(_destroy_capsule)


def _dl_dtype(dtype: np.dtype) -> _DLDataType:
    if dtype == np.bool_:
        return _DLDataType(_DL_BOOL, 8, 1)
    if dtype.name == "bfloat16":
        return _DLDataType(_DL_BFLOAT, 16, 1)
    code = {"i": _DL_INT, "u": _DL_UINT, "f": _DL_FLOAT, "c": _DL_COMPLEX}.get(dtype.kind)
    if code is None:
        raise BufferError(f"DLPack has no type for {dtype.name}")
    return _DLDataType(code, dtype.itemsize * 8, 1)


def export_capsule(array: DeviceArray):
    """A legacy ("dltensor") DLPack capsule showing ``array``'s bytes; the array stays alive
    until the consumer calls the deleter, or the capsule dies unconsumed."""
    managed = _DLManagedTensor()
    shape = (ctypes.c_int64 * max(1, array.ndim))(*array.shape)
    device_type, device_id = array.__dlpack_device__()
    managed.dl_tensor = _DLTensor(array.ptr, _DLDevice(device_type, device_id), array.ndim, _dl_dtype(array.dtype),
                                  ctypes.cast(shape, ctypes.POINTER(ctypes.c_int64)), None, 0)
    managed.deleter = _DELETER_FN
    address = ctypes.addressof(managed)
    with _EXPORTED_LOCK:
        _EXPORTED[address] = (managed, shape, array)
    return _api.PyCapsule_New(address, b"dltensor", _DESTRUCTOR_FN)


_FROM_DL = {(_DL_INT, 8): "int8", (_DL_INT, 16): "int16", (_DL_INT, 32): "int32", (_DL_INT, 64): "int64",
            (_DL_UINT, 8): "uint8", (_DL_UINT, 16): "uint16", (_DL_UINT, 32): "uint32", (_DL_UINT, 64): "uint64",
            (_DL_FLOAT, 16): "float16", (_DL_FLOAT, 32): "float32", (_DL_FLOAT, 64): "float64",
            (_DL_BFLOAT, 16): "bfloat16", (_DL_COMPLEX, 64): "complex64", (_DL_COMPLEX, 128): "complex128",
            (_DL_BOOL, 8): "bool"}


class ImportedTensor:
    """A consumed DLPack capsule: the tensor's pointer, shape, strides (bytes; None for C order),
    dtype and device; holding it keeps the producer's memory; ``release`` gives it back."""

    def __init__(self, capsule):
        address = _api.PyCapsule_GetPointer(capsule, b"dltensor")
        managed = _DLManagedTensor.from_address(address)
        t = managed.dl_tensor
        key = (int(t.dtype.code), int(t.dtype.bits))
        if key not in _FROM_DL or t.dtype.lanes != 1:
            raise InputTypeError(f"a DLPack tensor of type code {key[0]}, {key[1]} bits, {t.dtype.lanes} lanes "
                                 "has no cinnlite dtype")
        self.dtype = as_dtype(_FROM_DL[key]).np
        self.shape = tuple(int(t.shape[k]) for k in range(t.ndim))
        self.strides = (None if not t.strides else
                        tuple(int(t.strides[k]) * self.dtype.itemsize for k in range(t.ndim)))
        self.ptr = int(t.data or 0) + int(t.byte_offset)
        self.device = (int(t.device.device_type), int(t.device.device_id))
        _api.PyCapsule_SetName(capsule, b"used_dltensor")
        self._managed = managed
        self._capsule = capsule

    def release(self):
        managed, self._managed = self._managed, None
        if managed is not None and managed.deleter:
            managed.deleter(ctypes.pointer(managed))

    def __del__(self):
        self.release()


__all__ = ["DeviceArray", "device_like", "check_device_input", "export_capsule", "ImportedTensor", "is_c_ordered",
           "DL_CPU", "DL_CUDA", "DL_CUDA_MANAGED"]
