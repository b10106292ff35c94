"""The half of the ``"cuda"`` and ``"cuda-emu"`` targets they share: the GPU pass pipelines, the
CUDA C renderer, the stages and the compile cache key. Where the two differ (building and
loading: NVRTC and the driver, or the host C++ compiler) is in ``cuda.py`` and ``cuda_emu.py``.
"""
from __future__ import annotations

import functools

from ..codegen.cuda import CUDARenderer, CudaModule
from ..ir.passes import remove_unit_loops, simplify, verify
from ..ir.schedule_gpu import (fuse_independent_launches, order_update_nests, order_update_nests_deterministic,
                               scatter_last_write_wins, schedule_gpu, sort_update_nests, verify_gpu)
from ..runtime.cache import compiler_source_digest
from ..runtime.cuda_base import module_fields, module_from_fields
from .base import Backend, Compilation, CompileOptions


#: The GPU targets' passes, in order (see ``cinnlite/ir/schedule_gpu.py``).
GPU_PIPELINE = (remove_unit_loops, simplify, verify, order_update_nests, scatter_last_write_wins, simplify,
                schedule_gpu, fuse_independent_launches, verify_gpu)
#: With ``deterministic=True``: every update nest with a float or complex reduction runs sorted
#: (long serial chains) or ordered (short ones).
GPU_PIPELINE_DETERMINISTIC = (remove_unit_loops, simplify, verify, sort_update_nests,
                              order_update_nests_deterministic, scatter_last_write_wins, simplify, schedule_gpu,
                              fuse_independent_launches, verify_gpu)


@functools.lru_cache(maxsize=1)
def _environment() -> tuple:
    from .. import __version__

    return (("cinnlite", __version__), ("compiler_source", compiler_source_digest()))


class GPUBackend(Backend):
    """A target that runs the CUDA C of the GPU pipeline; subclasses build and load it."""

    stages = ("graph", "lowered", "cuda", "ptx")
    keep_index_buffers = True  # a check may leave the bad value to be read from the index buffer

    def pipeline(self, options: CompileOptions) -> tuple:
        return GPU_PIPELINE_DETERMINISTIC if options.deterministic else GPU_PIPELINE

    def renderer(self, job: Compilation) -> CUDARenderer:
        return CUDARenderer(deterministic=job.options.deterministic)

    def cache_options(self, options: CompileOptions) -> dict:
        return {"deterministic": options.deterministic, "fuse": options.fuse,
                "pipeline": self.pipeline_names(options)}

    def environment(self) -> dict:
        """NVRTC's version is not in the key: its output in an entry says which NVRTC made it.
        The host C++ compiler is not either: the emulation's libraries have a cache of their
        own, keyed by the compiler and the translation unit."""
        return dict(_environment())


def module_from_entry(entry: dict) -> CudaModule:
    """The rendered module a GPU target's cache entry holds."""
    return module_from_fields(entry["module"], entry["cuda"])


__all__ = ["GPU_PIPELINE", "GPU_PIPELINE_DETERMINISTIC", "GPUBackend", "module_fields", "module_from_entry"]
