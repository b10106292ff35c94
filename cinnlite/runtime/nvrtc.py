"""NVRTC, NVIDIA's runtime compiler: CUDA C -> PTX and CUBIN, through ``cuda.bindings.nvrtc``.

It comes from PyPI with the optional extra ``cuda13`` or ``cuda12`` (``cuda-bindings`` and
NVRTC of that CUDA version); no CUDA toolkit, nvcc or GPU is needed. Results are cached by source
and architecture for the life of the process.
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ..errors import CompileError, TargetUnavailableError

DEFAULT_ARCH = "sm_90"
# No contraction into fused multiply-adds (results match the CPU); C++17 for the helpers.
OPTIONS = ("-fmad=false", "--std=c++17")
# For checks that code compiles (not for code that runs): NVRTC's quick, less optimising mode.
FAST_OPTIONS = ("--Ofast-compile=max",)
_ARCH = re.compile(r"^(sm|compute)_\d+[a-z]?$")


def _bindings():
    try:
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise TargetUnavailableError(
            "NVRTC is not installed: the PTX stage needs the optional extra of your CUDA version "
            "(pip install 'cinnlite[cuda13]', or 'cinnlite[cuda12]' for a CUDA 12 driver; each brings "
            "cuda-bindings and NVRTC)") from exc
    return nvrtc


def available() -> bool:
    """Whether NVRTC can be loaded here."""
    try:
        nvrtc = _bindings()
        err, _major, _minor = nvrtc.nvrtcVersion()
        return err == nvrtc.nvrtcResult.NVRTC_SUCCESS
    except Exception:  # noqa: BLE001 - any failure to load the library means "not available"
        return False


def version() -> tuple:
    nvrtc = _bindings()
    err, major, minor = nvrtc.nvrtcVersion()
    _check(nvrtc, err, "nvrtcVersion")
    return int(major), int(minor)


@functools.lru_cache(maxsize=1)
def supported_archs() -> tuple:
    """The compute capabilities this NVRTC can build for, as numbers (90 for sm_90)."""
    nvrtc = _bindings()
    err, archs = nvrtc.nvrtcGetSupportedArchs()
    _check(nvrtc, err, "nvrtcGetSupportedArchs")
    return tuple(int(a) for a in archs)


def _check(nvrtc, err, what):
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, msg = nvrtc.nvrtcGetErrorString(err)
        text = msg.decode() if isinstance(msg, bytes) else str(msg)
        raise CompileError(f"NVRTC {what} failed: {text}")


@dataclass(frozen=True)
class NvrtcOutput:
    arch: str
    ptx: str
    cubin: bytes  # empty for a virtual architecture (compute_XX)
    log: str


def compile_cuda(source: str, arch: str = DEFAULT_ARCH, name: str = "cinnlite.cu", fast: bool = False) -> NvrtcOutput:
    """Compile ``source`` for ``arch`` (``sm_XX`` gives PTX and CUBIN, ``compute_XX`` PTX only).
    ``fast`` trades the code's speed for compile time (``--Ofast-compile=max`` where this NVRTC
    has it): for checking that code compiles. A source NVRTC rejects raises
    :class:`CompileError` with NVRTC's log."""
    if not _ARCH.match(arch):
        raise CompileError(f"not a CUDA architecture: {arch!r} (expected e.g. 'sm_90' or 'compute_80')")
    return _compile_cached(source, arch, name, fast)


@functools.lru_cache(maxsize=512)
def _compile_cached(source: str, arch: str, name: str, fast: bool) -> NvrtcOutput:
    nvrtc = _bindings()
    options = OPTIONS + (FAST_OPTIONS if fast else ())
    try:
        return _compile_once(nvrtc, source, arch, name, options)
    except _InvalidOption:
        # An NVRTC older than the quick mode: compile normally.
        return _compile_once(nvrtc, source, arch, name, OPTIONS)


class _InvalidOption(Exception):
    pass


def _compile_once(nvrtc, source, arch, name, options) -> NvrtcOutput:
    err, prog = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(nvrtc, err, "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture={arch}".encode()] + [o.encode() for o in options]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
        if status == nvrtc.nvrtcResult.NVRTC_ERROR_INVALID_OPTION and options != OPTIONS:
            raise _InvalidOption()
        err, size = nvrtc.nvrtcGetProgramLogSize(prog)
        _check(nvrtc, err, "nvrtcGetProgramLogSize")
        # Writable buffers: the bindings fill them in place (a bytes object of length 1 would
        # be CPython's shared one-byte singleton, corrupted for the whole process).
        log = bytearray(size)
        (err,) = nvrtc.nvrtcGetProgramLog(prog, log)
        log = bytes(log).rstrip(b"\x00 ").decode(errors="replace")
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"NVRTC rejected the generated CUDA C for {arch}:\n{log}")
        err, size = nvrtc.nvrtcGetPTXSize(prog)
        _check(nvrtc, err, "nvrtcGetPTXSize")
        ptx = bytearray(size)
        (err,) = nvrtc.nvrtcGetPTX(prog, ptx)
        _check(nvrtc, err, "nvrtcGetPTX")
        cubin = b""
        if arch.startswith("sm_"):
            err, size = nvrtc.nvrtcGetCUBINSize(prog)
            _check(nvrtc, err, "nvrtcGetCUBINSize")
            cubin = bytearray(size)
            (err,) = nvrtc.nvrtcGetCUBIN(prog, cubin)
            _check(nvrtc, err, "nvrtcGetCUBIN")
        return NvrtcOutput(arch, bytes(ptx).rstrip(b"\x00").decode(), bytes(cubin), log)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
