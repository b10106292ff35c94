"""The ``"cuda-emu"`` target: the CUDA C of the GPU pipeline compiled as host C++, with a
launcher that runs every thread of every launch in turn (``cinnlite/runtime/cuda_emu.py``).

Build: the launcher is rendered and the host C++ compiler started on the translation unit (or
the library found in the emulation's sealed cache); it runs while the load stage does the NVRTC
checks, and load waits for it. A disk cache entry holds the CUDA C and the launcher, from which
the library is found in its cache again, or rebuilt.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..codegen.cuda import CudaModule, render_emu_launcher
from ..runtime.cuda_emu import CUDAEmuExecutable, LibraryBuild, translation_unit
from .base import Compilation, CompileOptions
from .gpu import GPUBackend, module_from_entry


@dataclass
class EmuBuild:
    """The rendered module, its launcher, and the library build of the two."""

    module: CudaModule
    launcher: str
    library: LibraryBuild
    nvrtc_images: dict = field(default_factory=dict)


def _start(module: CudaModule, launcher: str, nvrtc_images=None) -> EmuBuild:
    return EmuBuild(module, launcher, LibraryBuild(translation_unit(module.source, launcher)), nvrtc_images or {})


class CUDAEmuBackend(GPUBackend):
    name = "cuda-emu"
    executable = CUDAEmuExecutable

    def build(self, job: Compilation) -> EmuBuild:
        return _start(job.rendered, render_emu_launcher(job.rendered))

    def build_from_entry(self, entry: dict, options: CompileOptions) -> EmuBuild:
        return _start(module_from_entry(entry), entry["emu_launcher"], entry["nvrtc_images"])

    def load(self, job: Compilation) -> CUDAEmuExecutable:
        built = job.built
        return CUDAEmuExecutable(job.program, job.lowered, job.lowered_text, built.module, job.options.deterministic,
                                 built.launcher, built.library, job.pass_dumps, built.nvrtc_images)


BACKEND = CUDAEmuBackend()
