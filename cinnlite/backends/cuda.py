"""The ``"cuda"`` target: the CUDA C of the GPU pipeline, compiled by NVRTC for the GPU at hand
and run through the CUDA driver (``cinnlite/runtime/cuda.py``).

Compiling needs no GPU and no NVRTC. NVRTC runs when its output is first needed (the ``ptx``
stage, or the first run on a GPU), for the architecture needed; its PTX and CUBIN then go into
the executable's cache entry, so a later process loads them from the disk cache.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..codegen.cuda import CudaModule
from ..runtime.cuda import CUDAExecutable
from .base import Compilation, CompileOptions
from .gpu import GPUBackend, module_from_entry


@dataclass
class CUDABuild:
    """The rendered module and NVRTC's output for it so far, per architecture."""

    module: CudaModule
    nvrtc_images: dict = field(default_factory=dict)


class CUDABackend(GPUBackend):
    name = "cuda"
    executable = CUDAExecutable

    def build(self, job: Compilation) -> CUDABuild:
        return CUDABuild(job.rendered)  # NVRTC runs on demand, see the module docstring

    def build_from_entry(self, entry: dict, options: CompileOptions) -> CUDABuild:
        return CUDABuild(module_from_entry(entry), entry["nvrtc_images"])

    def load(self, job: Compilation) -> CUDAExecutable:
        built = job.built
        return CUDAExecutable(job.program, job.lowered, job.lowered_text, built.module, job.options.deterministic,
                              job.pass_dumps, built.nvrtc_images)


BACKEND = CUDABackend()
