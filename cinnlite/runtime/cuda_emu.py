"""Host emulation of the CUDA backend (``target="cuda-emu"``): the generated CUDA C, compiled as
host C++ and run on numpy arrays, so the CUDA code can be checked on machines without a GPU.

The translation unit is ``cuda_emu_prelude.h`` (the CUDA built-ins: ``threadIdx`` and friends,
atomics, bit casts), then the module's CUDA C exactly as ``exe.source("cuda")`` shows it, then a
launcher (``emu_launcher.cpp.j2``) that runs every launch of the plan in order, every block and
every thread one after another. It is built with the host C++ compiler (``$CXX``, else the first
of g++, c++, clang++ on PATH) into a shared library cached by content hash in
``cuda-emu/`` of cinnlite's cache directory (``$CINNLITE_CACHE_DIR``, else ``~/.cache/cinnlite``),
and called through ctypes. A cached library carries a seal (see :mod:`cinnlite.runtime.cache`):
one whose seal does not match, damaged or truncated, is built again and replaced, never loaded.
Where the cache cannot take a library, it stays in a private directory of the process.

The grid: ``exe.max_blocks = None`` (the default) gives every work item a thread of its own, and
runs launches of more than 2**22 items on a single thread, whose grid-stride loop walks memory in
order (thousands of threads run one after another would each stride across the whole tensor);
either way atomics combine in row-major order. ``exe.max_blocks = N`` bounds the grid to N
blocks of 256 threads as the GPU runtime does, so that grid-stride loops take several turns and
atomics combine in another order; ``exe.max_blocks = 0`` gives every item its own thread always.

Device arrays: the emulated device's memory is host memory. A :class:`DeviceArray` of this target
holds a numpy array (calls read it in place; its ``__dlpack__`` shows host memory), ``stream=``
is taken and has nothing to order (every call has finished when it returns), and the only device
is 0. Arrays in a real GPU's memory are refused with an error that says so.
"""
from __future__ import annotations

import atexit
import ctypes
import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import CompileError, InputError, TargetUnavailableError
from . import cache as caches
from .cuda_base import CUDABaseExecutable, GPUCall
from .device_array import DL_CPU, DeviceArray

PRELUDE = Path(__file__).with_name("cuda_emu_prelude.h")
# -fwrapv: signed overflow wraps, as on the GPU; no FMA contraction, as NVRTC with -fmad=false.
CXXFLAGS = ("-std=c++17", "-O1", "-shared", "-fPIC", "-fwrapv", "-ffp-contract=off", "-fno-strict-aliasing",
            "-w")
_LOCKS_LOCK = threading.Lock()
_PROCESS_DIR = None
LIBRARY_FOLDER = "cuda-emu"
_ENTRY = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong)


def host_compiler() -> list:
    """The host C++ compiler command: ``$CXX`` (may carry flags), else g++, c++ or clang++."""
    env = os.environ.get("CXX", "").strip()
    if env:
        cmd = shlex.split(env)
        if shutil.which(cmd[0]):
            return cmd
        raise TargetUnavailableError(f"target 'cuda-emu': $CXX is {env!r}, which was not found")
    for name in ("g++", "c++", "clang++"):
        path = shutil.which(name)
        if path:
            return [path]
    raise TargetUnavailableError("target 'cuda-emu' needs a host C++ compiler (g++, c++ or clang++ on PATH, "
                                 "or $CXX) to build the emulated kernels; none was found")


@lru_cache(maxsize=8)
def _compiler_identity(cmd: tuple) -> str:
    try:
        out = subprocess.run(list(cmd) + ["--version"], capture_output=True, text=True, timeout=60)
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def process_dir() -> Path:
    """A private directory of this process, removed at exit: libraries are built there, and stay
    there when the disk cache is off or cannot take them (the dynamic loader needs a file)."""
    global _PROCESS_DIR
    with _LOCKS_LOCK:
        if _PROCESS_DIR is None:
            _PROCESS_DIR = Path(tempfile.mkdtemp(prefix="cinnlite-cuda-emu-"))
            atexit.register(shutil.rmtree, _PROCESS_DIR, True)
        return _PROCESS_DIR


def translation_unit(cuda_source: str, launcher: str) -> str:
    """The host C++ the emulation compiles: prelude, the CUDA C unchanged, the launcher."""
    return (PRELUDE.read_text() + '\n#line 1 "cinnlite.cu"\n' + cuda_source
            + '\n#line 1 "cinnlite_emu_launcher.cpp"\n' + launcher)


class LibraryBuild:
    """A shared library being built (or found in the cache): the constructor starts the host
    compiler and returns at once, so the caller can work while it runs; ``wait`` gives the
    library's path."""

    def __init__(self, text: str):
        cmd = host_compiler()
        self.key = hashlib.sha256("\0".join([_compiler_identity(tuple(cmd)), " ".join(cmd), " ".join(CXXFLAGS), text])
                                  .encode()).hexdigest()[:32]
        self._name = f"{LIBRARY_FOLDER}/emu_{self.key}.so"
        root = caches.cache_dir()
        self._cache = caches.CacheDirectory(root) if root is not None else None
        self._proc = self._tmp = None
        self.path = self._cached()
        if self.path is not None:
            return
        # Concurrent builders of one key each compile in a directory of their own; the cache's
        # atomic rename leaves a whole file whoever finishes last.
        try:
            self._tmp = tempfile.TemporaryDirectory(dir=process_dir())
            src = Path(self._tmp.name) / "kernels.cpp"
            self._out = Path(self._tmp.name) / "kernels.so"
            src.write_text(text)
            self._proc = subprocess.Popen(cmd + list(CXXFLAGS) + ["-o", str(self._out), str(src)],
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        except OSError as exc:
            if self._tmp is not None:
                self._tmp.cleanup()
            raise TargetUnavailableError(f"target 'cuda-emu': running the host C++ compiler failed: {exc}") from exc

    def _cached(self) -> Path | None:
        """The library in the disk cache, if it is there and whole (its seal matches)."""
        data = self._cache.read(self._name) if self._cache is not None else None
        if data is None or caches.unseal(data, self.key) is None:
            return None
        self._cache.touch(self._name)
        return Path(self._cache.root) / self._name

    def wait(self) -> Path:
        if self._proc is None:
            return self.path
        try:
            _, stderr = self._proc.communicate(timeout=600)
            if self._proc.returncode != 0:
                raise CompileError(f"the host C++ compiler rejected the emulated CUDA C:\n{stderr[-4000:]}")
            self.path = self._keep(caches.seal(self._out.read_bytes(), self.key))
        except subprocess.TimeoutExpired as exc:
            self._proc.kill()
            self._proc.communicate()
            raise TargetUnavailableError("target 'cuda-emu': the host C++ compiler took over 600 s") from exc
        except OSError as exc:
            raise TargetUnavailableError(f"target 'cuda-emu': cannot keep the built library: {exc}") from exc
        finally:
            self._proc = None
            self._tmp.cleanup()
        return self.path

    def _keep(self, sealed: bytes) -> Path:
        """Put the sealed library into the disk cache, or where it cannot go, into the process's
        private directory."""
        path = self._cache.write(self._name, sealed) if self._cache is not None else None
        if path is not None:
            return Path(path)
        staged, private = Path(self._tmp.name) / "sealed.so", process_dir() / Path(self._name).name
        staged.write_bytes(sealed)
        os.replace(staged, private)
        return private


def build_library(text: str) -> Path:
    """Compile ``text`` into a shared library (or find it in the cache) and return its path."""
    return LibraryBuild(text).wait()


_LIBRARY_LOCKS: dict = {}


def _library_lock(path: Path) -> threading.Lock:
    with _LOCKS_LOCK:
        return _LIBRARY_LOCKS.setdefault(str(path), threading.Lock())


def _padded_empty(shape, dtype) -> np.ndarray:
    """An array whose memory starts 64-byte aligned, with 8 bytes to spare after it: an atomic
    update of a byte may read and write back one byte past a tensor that ends at an odd
    address (see the byte atomics in helpers.cu.j2)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + 8 + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    return raw[start:start + nbytes].view(dtype).reshape(shape)


class EmuMemory:
    """The bytes of an emulated DeviceArray: a C-ordered host array."""

    target = "cuda-emu"
    device_id = 0
    stream = 0
    dlpack_device = (DL_CPU, 0)

    def __init__(self, host: np.ndarray):
        self.host = host

    @property
    def ptr(self) -> int:
        return self.host.ctypes.data

    def download(self, host: np.ndarray):
        np.copyto(host, self.host.reshape(host.shape))

    def order_before(self, stream):
        """Nothing runs after a call returns: nothing to order."""

    def export(self, array):
        return self.host.__dlpack__()


class CUDAEmuExecutable(CUDABaseExecutable):
    """Runs the CUDA C of the module on the CPU, one thread after another."""

    target = "cuda-emu"

    def __init__(self, program, lowered, lowered_text, module, deterministic, launcher: str, library: LibraryBuild,
                 pass_dumps=(), nvrtc_images=None):
        """``library`` is the build of ``translation_unit(module.source, launcher)``, under way
        or found in the cache."""
        self._launcher = launcher
        try:
            super().__init__(program, lowered, lowered_text, module, deterministic, pass_dumps,
                             nvrtc_images)  # NVRTC checks meanwhile
        finally:
            self._library_path = library.wait()
        self._lib = ctypes.CDLL(str(self._library_path))
        self._entry = _ENTRY(("cinnlite_emu_run", self._lib))
        self._slots = [b.name for b in self._table]
        self._table_type = ctypes.c_void_p * max(1, len(self._slots))
        self.max_blocks = None  # see the module docstring
        self._lock = _library_lock(self._library_path)

    def cache_entry(self) -> dict | None:
        return {**super().cache_entry(), "emu_launcher": self._launcher}

    def _allocate(self, arrays: dict, plan, outputs: dict | None = None) -> dict:
        buffers = dict(arrays)
        buffers.update(self._consts)
        buffers.update(plan.symbol_arrays)
        for name, shape, dtype, _ in plan.allocs:
            # An out= array of bytes is written through a padded buffer (and copied in by the
            # caller): a byte atomic may touch the byte after a tensor that ends at an odd address.
            given = outputs.get(name) if outputs else None
            usable = given is not None and given.dtype.itemsize >= 2
            buffers[name] = given if usable else _padded_empty(shape, dtype)
        return buffers

    def _new_call(self, inputs: dict, stream, device) -> GPUCall:
        if device not in (None, 0):
            raise InputError(f"target 'cuda-emu' emulates one GPU, device 0; device={device} does not exist")
        return GPUCall(stream or 0, 0)

    def _device_input(self, name: str, value, call: GPUCall):
        if isinstance(value, DeviceArray) and value.target == self.target:
            return value._memory.host
        raise InputError(f"input '{name}' is in the memory of a GPU ({type(value).__name__}); target 'cuda-emu' "
                         "runs on the host: pass host arrays, or DeviceArrays of this target (exe.to_device)")

    def _upload(self, host: np.ndarray, stream: int, device: int) -> DeviceArray:
        self._new_call({}, stream, device)
        return DeviceArray(EmuMemory(host), host.shape, host.dtype)

    def _run(self, arrays: dict, plan, outputs: dict | None = None, call: GPUCall | None = None) -> dict:
        outs = self._run_host(arrays, plan, outputs)
        if call is None or not call.device_results:
            return outs
        return {name: DeviceArray(EmuMemory(arr), arr.shape, arr.dtype) for name, arr in outs.items()}

    def _run_host(self, arrays: dict, plan, outputs: dict | None) -> dict:
        buffers = self._allocate(arrays, plan, outputs)
        table = self._table_type(*[buffers[n].ctypes.data for n in self._slots])
        errors = self._new_error_buffer()
        with self._lock:  # the library's thread and block indices are globals
            blocks = -1 if self.max_blocks is None else int(self.max_blocks)
            self._entry(ctypes.addressof(table), errors.ctypes.data, blocks)
        failed = self._first_failed_check(errors)
        if failed is not None:
            check_id, position, value = failed
            self._raise_index_error(check_id, position, buffers, value=value, plan=plan)
        return self._outputs(buffers)
