"""What the GPU runtime (``runtime/cuda.py``) and its host emulation (``runtime/cuda_emu.py``)
share: the rendered module and its stages, NVRTC's output for the module, the NVRTC check of
every module, the error buffer of ``mode="raise"``, and the compile cache entry.

NVRTC runs when something needs its output (the ``ptx`` stage, or the first run on a GPU), for
the architecture asked for. What it produced is added to the executable's cache entry, so a later
process that finds the entry on disk has the PTX and CUBIN without running NVRTC again; output of
another NVRTC version is compiled afresh.
"""
from __future__ import annotations

import os

import numpy as np

from ..codegen.cuda import CudaModule, Launch
from ..codegen.error_record import NO_POSITION, PER_CHECK
from ..ir.loopnest import LoweredProgram
from . import nvrtc
from .executable import Executable

def nvrtc_check_archs() -> tuple:
    """Architectures every compiled CUDA module is also built for with NVRTC (a check that the
    kernels compile for real GPUs), from the environment variable ``CINNLITE_NVRTC_CHECK``
    (e.g. ``sm_90,sm_80``); none by default."""
    value = os.environ.get("CINNLITE_NVRTC_CHECK", "")
    return tuple(a.strip() for a in value.split(",") if a.strip())


# -- the module in a cache entry ------------------------------------------------------------------


def module_fields(module: CudaModule) -> dict:
    """The launch plan of ``module`` as plain data for a cache entry (the source is a stage)."""
    launches = tuple((l.name, l.kernel, l.items, l.buffers, l.slots, l.ctypes, l.errors) for l in module.launches)
    return {"name": module.name, "launches": launches, "block": module.block, "num_checks": module.num_checks,
            "reported_values": tuple(sorted(module.reported_values))}


def module_from_fields(fields: dict, source: str) -> CudaModule:
    """The module that ``module_fields`` described, with its CUDA C ``source``."""
    launches = tuple(Launch(*launch) for launch in fields["launches"])
    return CudaModule(fields["name"], source, launches, fields["block"], fields["num_checks"],
                      frozenset(fields["reported_values"]))


def _image_fields(out: nvrtc.NvrtcOutput) -> dict:
    return {"nvrtc": nvrtc.version(), "ptx": out.ptx, "cubin": out.cubin, "log": out.log}


class CUDABaseExecutable(Executable):
    """What the GPU and the emulated GPU share: the module, its stages, NVRTC's output for it
    and the error buffer."""

    def __init__(self, program, lowered: LoweredProgram, lowered_text: str, module: CudaModule,
                 deterministic: bool, pass_dumps=(), nvrtc_images: dict | None = None):
        """``nvrtc_images`` holds NVRTC's output per architecture from a cache entry."""
        self.module = module
        self.deterministic = deterministic
        self._nvrtc_images = dict(nvrtc_images or {})
        sources = {"graph": str(program), "lowered": lowered_text, "cuda": module.source}
        for name, dump in pass_dumps:
            sources.setdefault(f"lowered:{name}", dump)
        super().__init__(program, lowered, sources, {"ptx": lambda exe: exe.ptx()})
        for arch in nvrtc_check_archs():
            nvrtc.compile_cuda(module.source, arch, fast=True)

    def _ptx_arch(self) -> str:
        return nvrtc.DEFAULT_ARCH

    def ptx(self, arch: str | None = None) -> str:
        """PTX of the module from NVRTC, for ``arch`` (default: the GPU's, else sm_90)."""
        return self.nvrtc_output(arch or self._ptx_arch()).ptx

    def nvrtc_output(self, arch: str) -> nvrtc.NvrtcOutput:
        """NVRTC's output for ``arch``: from the cache entry where this NVRTC made it, else
        compiled now and added to the entry."""
        known = self._nvrtc_images.get(arch)
        if known is not None and tuple(known["nvrtc"]) == nvrtc.version():
            return nvrtc.NvrtcOutput(arch, known["ptx"], known["cubin"], known["log"])
        out = nvrtc.compile_cuda(self.module.source, arch)
        self._nvrtc_images[arch] = _image_fields(out)
        self._update_cache_entry()
        return out

    def cache_entry(self) -> dict | None:
        return {"lowered": self.lowered, "lowered_text": self._sources["lowered"], "cuda": self.module.source,
                "module": module_fields(self.module), "nvrtc_images": dict(self._nvrtc_images)}

    def _new_error_buffer(self) -> np.ndarray:
        """A ``PER_CHECK`` record per check: no bad position yet, no value, the lock free."""
        errors = np.zeros((max(1, self.module.num_checks), PER_CHECK.size), np.int64)
        errors[:, PER_CHECK.index("position")] = NO_POSITION
        return errors

    def _first_failed_check(self, errors: np.ndarray):
        """(check id, position, value or None) of the lowest-numbered check that failed, or None.
        Checks run in program order, so that is the one the CPU, which stops at the first,
        reports."""
        position, value = PER_CHECK.index("position"), PER_CHECK.index("value")
        for check_id in range(self.module.num_checks):
            record = errors[check_id]
            if record[position] != NO_POSITION:
                found = int(record[value]) if check_id in self.module.reported_values else None
                return check_id, int(record[position]), found
        return None
