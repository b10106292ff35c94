"""The CPU runtime: LLVM IR -> optimised machine code through llvmlite's MCJIT.

The executable owns the execution engine and target machine for as long as it lives (the
engine unmaps code when collected), calls ``cinnlite_main`` through a prepared ctypes
signature, and never recompiles or re-validates the program per call.
"""
from __future__ import annotations

import ctypes
import threading

import numpy as np

from ..codegen.llvm import LLVMRenderer
from ..errors import CompileError
from ..ir.loopnest import LoweredProgram
from ..ir.printer import program_str
from .executable import Executable

_LOCK = threading.RLock()
_INITIALISED = False


def _llvm():
    global _INITIALISED
    import llvmlite.binding as llvm

    with _LOCK:
        if not _INITIALISED:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            _INITIALISED = True
    return llvm


def host_target_machine(opt: int = 3):
    llvm = _llvm()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    return target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                        features=llvm.get_host_cpu_features().flatten(),
                                        opt=opt, codemodel="jitdefault", jit=True)


def optimise(module, tm, opt: int):
    llvm = _llvm()
    pto = llvm.create_pipeline_tuning_options(speed_level=opt)
    pto.loop_vectorization = opt >= 2
    pto.slp_vectorization = opt >= 2
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)


_ENTRY = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)


class CPUExecutable(Executable):
    target = "cpu"

    def __init__(self, program, lowered: LoweredProgram, opt_level: int = 3, pass_dumps=()):
        llvm = _llvm()
        renderer = LLVMRenderer()
        with _LOCK:
            tm = host_target_machine(opt_level)
            text = renderer.render(lowered, tm.triple, str(tm.target_data))
            try:
                module = llvm.parse_assembly(text)
                module.verify()
            except RuntimeError as exc:
                raise CompileError(f"LLVM rejected the generated module: {exc}") from exc
            optimise(module, tm, opt_level)
            module.verify()
            opt_text = str(module)
            engine = llvm.create_mcjit_compiler(module, tm)
            engine.finalize_object()
            address = engine.get_function_address(renderer.entry)
        self._tm, self._engine, self._module = tm, engine, module
        self._entry = _ENTRY(address)
        sources = {"graph": str(program), "lowered": program_str(lowered), "llvm": text, "llvm_opt": opt_text}
        lazy = {"asm": self._asm}
        for name, dump in pass_dumps:
            sources.setdefault(f"lowered:{name}", dump)
        super().__init__(program, lowered, sources, lazy)
        self._slots = [b.name for b in self._table]
        self._table_type = ctypes.c_void_p * max(1, len(self._slots))

    def _asm(self) -> str:
        llvm = _llvm()
        with _LOCK:
            mod = llvm.parse_assembly(self._sources["llvm_opt"])
            return self._tm.emit_assembly(mod)

    def _run(self, arrays: dict) -> dict:
        buffers = self._allocate(arrays)
        table = self._table_type(*[buffers[n].ctypes.data for n in self._slots])
        err = np.zeros(2, np.int64)
        status = self._entry(ctypes.addressof(table), err.ctypes.data)
        if status != 0:
            self._raise_index_error(int(err[0]), int(err[1]), buffers)
        return self._outputs(buffers)
