"""The ``"cpu"`` target: LLVM IR from the loop nests, optimised and JIT-compiled for this CPU by
llvmlite, run through ctypes on the process's worker pool (``cinnlite/runtime/cpu.py``).

Build: the rendered module parsed, checked and optimised. Load: MCJIT makes machine code of it,
or takes the machine code of a disk cache entry as it is.
"""
from __future__ import annotations

from ..codegen.llvm import LLVMRenderer
from ..ir.passes import remove_unit_loops, simplify, verify
from ..ir.schedule_cpu import (collapse_every_short_loop, collapse_short_loops, defer_index_checks,
                                prefetch_gathers, schedule_cpu, split_scatter_columns, stream_rows,
                                version_checked_loops)
from ..runtime.cpu import (MAX_OBJECT_ARGS, CPUExecutable, array_data_offset, build_from_entry, build_module,
                           default_threads, far_gathers, host_environment, host_target, vector_bytes, vector_masks)
from .base import Backend, Compilation, CompileOptions


#: The CPU's passes, in order (see ``cinnlite/ir/schedule_cpu.py``).
CPU_PIPELINE = (remove_unit_loops, simplify, verify, schedule_cpu, defer_index_checks, split_scatter_columns,
                stream_rows, prefetch_gathers,
                collapse_short_loops, version_checked_loops, verify)
#: ... on a host without cheap masked vector gathers (``masked_vectors``): short loops that
#: would be masked vectors collapse as well.
UNMASKED_CPU_PIPELINE = tuple(collapse_every_short_loop if p is collapse_short_loops else p for p in CPU_PIPELINE)


def masked_vectors() -> bool:
    """Whether a ``masked_vector_loop`` runs as masked vectors here: where the CPU's vector
    gathers and stores take a mask register (``vector_masks``) and are not microcoded
    (``far_gathers``)."""
    return vector_masks() and far_gathers() is None


class CPUBackend(Backend):
    name = "cpu"
    stages = ("graph", "lowered", "llvm", "llvm_opt", "asm")
    keep_index_buffers = False  # the CPU's kernels report the bad index value themselves
    executable = CPUExecutable

    def pipeline(self, options: CompileOptions) -> tuple:
        """The CPU's passes; for a program that runs on one thread, without
        ``split_scatter_columns``, whose column blocks would only reorder its walk: every
        update row walked once per block (a scatter-max along axis 0 of 1 M float32 elements on
        one thread, each call after a pause: 1.07 -> 3.9 ms)."""
        passes = CPU_PIPELINE if masked_vectors() else UNMASKED_CPU_PIPELINE
        threads = options.threads if options.threads is not None else default_threads()
        return passes if threads > 1 else tuple(p for p in passes if p is not split_scatter_columns)

    def renderer(self, job: Compilation) -> LLVMRenderer:
        """For this CPU; with an entry that takes numpy arrays, where ctypes can pass them all."""
        table = job.lowered.buffer_table()
        offset = array_data_offset() if len(table) <= MAX_OBJECT_ARGS else None
        triple, data_layout = host_target()
        return LLVMRenderer(triple, data_layout, array_data_offset=offset, far_gathers=far_gathers(),
                            masked_vectors=masked_vectors(), vector_bytes=vector_bytes())

    def build(self, job: Compilation):
        rendered = job.rendered
        return build_module(rendered.source, job.options.opt_level, rendered.array_data_offset)

    def build_from_entry(self, entry: dict, options: CompileOptions):
        return build_from_entry(entry, options.opt_level)

    def load(self, job: Compilation) -> CPUExecutable:
        return CPUExecutable(job.program, job.lowered, job.lowered_text, built=job.built, pass_dumps=job.pass_dumps,
                             threads=job.options.threads)

    def cache_options(self, options: CompileOptions) -> dict:
        return {"opt_level": options.opt_level, "fuse": options.fuse, "pipeline": self.pipeline_names(options)}

    def environment(self) -> dict:
        return host_environment()


BACKEND = CPUBackend()
