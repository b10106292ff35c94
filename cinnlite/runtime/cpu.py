"""The CPU runtime: LLVM IR -> optimised machine code (an object file) through llvmlite, loaded
by an MCJIT engine.

A compile optimises the module and makes an object file of it; a disk cache entry holds that
object file, so loading one parses no LLVM IR and generates no code. The executable owns the
engine that holds its code for as long as it lives (the engine unmaps it when collected), calls
``cinnlite_main`` through a prepared ctypes signature, and never recompiles or re-validates the
program per call. Parallel stages run on the process-wide pool of ``workers``.
"""
from __future__ import annotations

import ctypes
import functools
import os
import platform
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..codegen import llvm_call
from ..codegen.error_record import FIRST_FAILURE
from ..codegen.llvm import ERROR, FLAGGED, OK, THREADS_GLOBAL, LLVMRenderer, stage_plan
from ..errors import CompileError
from ..ir.loopnest import LoweredProgram
from ..ir.schedule_cpu import PARALLEL_MIN_WORK
from .cache import compiler_source_digest
from .executable import BufferPool, Executable, OutArrays
from .native_call import GENERAL, HOLD_GIL_MAX_WORK, FastPlan, NativeCall, array_layout_confirmed, register_symbols
from .native_pool import register_pool, shared_native_pool
from .workers import MAX_THREADS, check_threads, shared_pool

#: Serialises cinnlite's use of LLVM (one global context) by compiles and assembly printing.
#: Running compiled code never takes it, so calls go on while another thread compiles.
_LOCK = threading.RLock()
_INITIALISED = False


def _llvm():
    global _INITIALISED
    import llvmlite.binding as llvm

    if not _INITIALISED:
        with _LOCK:
            if not _INITIALISED:
                llvm.initialize_native_target()
                llvm.initialize_native_asmprinter()
                platform.machine()  # llvmlite asks for it per engine; the first call is slow
                register_symbols(llvm)
                _INITIALISED = True
                register_pool(llvm, jit_module)
    return llvm


def _quiesce_llvm_across_fork():
    """No fork while another thread is inside LLVM (a compile, or an executable being freed):
    the child would inherit a lock held by a thread it does not have, and LLVM's state half-way
    through a change, and hang on its first compile. The forking thread takes cinnlite's lock
    and llvmlite's own (the one around every call into LLVM) before the fork, and gives both
    back on each side."""
    from llvmlite.binding import ffi

    llvmlite_lock = getattr(ffi.lib, "_lock", None)

    def before():
        _LOCK.acquire()
        if llvmlite_lock is not None:
            llvmlite_lock.__enter__()

    def after():
        if llvmlite_lock is not None:
            llvmlite_lock.__exit__(None, None, None)
        _LOCK.release()

    os.register_at_fork(before=before, after_in_parent=after, after_in_child=after)


if hasattr(os, "register_at_fork"):
    _quiesce_llvm_across_fork()


def jit_module(text: str, symbols: dict):
    """An MCJIT engine holding ``text`` (LLVM IR) compiled for this CPU, with ``symbols`` (name ->
    address) resolved first: for the runtime's own machine code (``native_pool``), not for
    programs, which go through ``build_module`` and the disk cache."""
    llvm = _llvm()
    with _LOCK:
        for name, address in symbols.items():
            llvm.add_symbol(name, address)
        module = llvm.parse_assembly(text)
        module.triple = _host()[0]
        module.verify()
        engine = llvm.create_mcjit_compiler(module, host_target_machine(2))
        engine.finalize_object()
    return engine


@functools.lru_cache(maxsize=None)
def _host() -> tuple:
    """(triple, CPU name, CPU features) of this machine, asked of LLVM once, with the features
    of ``_slow_vector_memory`` added."""
    llvm = _llvm()
    cpu = llvm.get_host_cpu_name()
    return llvm.get_process_triple(), cpu, llvm.get_host_cpu_features().flatten() + _slow_vector_memory(cpu)


#: CPUs whose vector gathers and scatters are microcoded, several times slower than the scalar
#: loads and stores they stand for: AMD's Zen cores (a take along the last axis, 1 M float32
#: elements, ran in 838 us with AVX-512 gathers and 376 us without, on a Zen 4).
_MICROCODED_GATHER_PREFIXES = ("znver",)
#: The LLVM features that keep the vectoriser from gathers, and from scatters.
NO_GATHERS, NO_SCATTERS = ",+prefer-no-gather", ",+prefer-no-scatter"


def _slow_vector_memory(cpu: str) -> str:
    """LLVM target features that keep the vectoriser from gathers and scatters where they are
    slower than scalar memory accesses (it still vectorises the index arithmetic around them)."""
    return NO_GATHERS + NO_SCATTERS if cpu.startswith(_MICROCODED_GATHER_PREFIXES) else ""


def far_gathers() -> tuple | None:
    """Where this CPU's vector gathers are microcoded (``_slow_vector_memory``): the target
    features of a stage whose gathers reach beyond the L2 cache (all of the host's, gathers
    allowed), and that cache's size in bytes; see ``schedule_cpu.gather_reach``. None where
    gathers are allowed everywhere already. On a Zen 4, with vector gathers, a gather of 1 M
    float32 elements along axis 0 of a 2 MB table ran in 0.97 ms instead of 1.21 ms, a take of
    a flattened 2 MB one in 0.83-0.96 ms instead of 1.10-1.18, and a take along the last axis,
    each row 32 KB, in 0.62 ms instead of 0.50 (which keeps its scalar loads)."""
    _, cpu, features = _host()
    if not _slow_vector_memory(cpu):
        return None
    return features.replace(NO_GATHERS, ""), _l2_cache_bytes()


def vector_masks() -> bool:
    """Whether this CPU's vector loads, stores and gathers take a mask register (AVX-512), so
    that a vector whose last lanes lie past a loop's end costs what a whole one does. AVX2
    masks stores and gathers with a vector, and LLVM uses no gather on a Haswell; NEON has none."""
    return vector_bytes() == 64


def vector_bytes() -> int:
    """The width of this CPU's widest vector register in bytes: 64 with AVX-512, 32 with AVX,
    16 else (SSE, NEON)."""
    features = _host()[2].split(",")
    return 64 if "+avx512f" in features else 32 if "+avx" in features else 16


@functools.lru_cache(maxsize=None)
def _l2_cache_bytes() -> int:
    """The size of this CPU's level-2 cache (Linux's sysfs), else 1 MiB."""
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in sorted(os.listdir(root)):
            with open(os.path.join(root, entry, "level")) as f:
                if f.read().strip() != "2":
                    continue
            with open(os.path.join(root, entry, "size")) as f:
                text = f.read().strip().upper()
            scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
            return int(text.rstrip("KM")) * scale
    except (OSError, ValueError):
        pass
    return 1 << 20


def host_target_machine(opt: int = 3):
    """A new target machine for this CPU at optimisation level ``opt``."""
    llvm = _llvm()
    triple, cpu, features = _host()
    return llvm.Target.from_triple(triple).create_target_machine(cpu=cpu, features=features, opt=opt,
                                                                 codemodel="jitdefault", jit=True)


_TARGET_MACHINES: dict = {}


def _target_machine(opt: int):
    """The target machine that optimises modules and makes machine code at level ``opt``: one
    per level for the life of the process (only ever used under ``_LOCK``)."""
    tm = _TARGET_MACHINES.get(opt)
    if tm is None:
        tm = _TARGET_MACHINES[opt] = host_target_machine(opt)
    return tm


def optimise(module, tm, opt: int):
    """Run LLVM's default pipeline for ``opt`` on ``module``, and free the pipeline's objects
    at once rather than whenever Python gets to them.

    Loops are vectorised (and vector loops interleaved) but not unrolled: the runtime unroller
    copies every stage's loops several times over, which costs more to optimise and to turn
    into machine code than anything else in a compile, for loops that move memory (gathers,
    scatters, elementwise operators) and run no faster for it."""
    llvm = _llvm()
    pto = llvm.create_pipeline_tuning_options(speed_level=opt)
    try:
        pto.loop_vectorization = opt >= 2
        pto.slp_vectorization = opt >= 2
        pto.loop_unrolling = False
        pb = llvm.create_pass_builder(tm, pto)
        try:
            mpm = pb.getModulePassManager()
            try:
                mpm.run(module, pb)
            finally:
                _dispose_module_pass_manager(mpm)
        finally:
            pb.close()
    finally:
        pto.close()


def _dispose_module_pass_manager(mpm):
    """Free a module pass manager. llvmlite's ``close()`` does not: ``ObjectRef``'s empty
    ``_dispose`` comes first in ``ModulePassManager``'s bases, so every pipeline (tens of KiB
    per compile) would stay allocated for the life of the process. A llvmlite whose ``close()``
    works is left to do it itself."""
    from llvmlite.binding import ffi, newpassmanagers

    if type(mpm)._dispose is ffi.ObjectRef._dispose:
        newpassmanagers.NewPassManager._dispose(mpm)
        mpm.detach()
    else:
        mpm.close()


_ENTRY = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p)
_STAGE = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)

#: ``np.empty``, looked up once: the fast path allocates its outputs with it on every call.
_empty = np.empty

#: The objects entry passes array objects through ctypes; past this many buffers use the table.
MAX_OBJECT_ARGS = 64


def array_data_offset():
    """The byte offset of the data pointer inside a numpy array object, checked on live arrays
    together with the fields the call entry reads around it (``native_call``); None where they
    cannot be confirmed (then the runtime asks numpy for pointers instead)."""
    offset = 2 * ctypes.sizeof(ctypes.c_void_p)  # after PyObject_HEAD: refcount, type
    for probe in (np.zeros(3, np.float32), np.empty((2, 5), np.int8), np.zeros(0, np.int64)):
        if ctypes.c_void_p.from_address(id(probe) + offset).value != probe.ctypes.data:
            return None
    return offset if array_layout_confirmed(offset) else None


def default_threads() -> int:
    """``CINNLITE_NUM_THREADS`` if set to a positive integer (an error above ``MAX_THREADS``),
    else the cores this process may use, at most ``MAX_THREADS``."""
    env = os.environ.get("CINNLITE_NUM_THREADS")
    if env and env.isdigit() and int(env) > 0:
        return check_threads(int(env), "CINNLITE_NUM_THREADS")
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return min(max(1, cores), MAX_THREADS)


@functools.lru_cache(maxsize=None)
def _host_environment() -> tuple:
    return tuple(sorted(host_environment_uncached().items()))


def host_environment() -> dict:
    """What about this machine and these libraries changes the generated code (computed once)."""
    return dict(_host_environment())


def host_environment_uncached() -> dict:
    """What about this machine and these libraries changes the generated code."""
    import llvmlite

    from .. import __version__

    llvm = _llvm()
    triple, cpu, features = _host()
    return {"cpu": cpu, "features": features, "triple": triple, "llvmlite": llvmlite.__version__,
            "llvm": ".".join(map(str, llvm.llvm_version_info)), "cinnlite": __version__,
            "array_data_offset": array_data_offset(), "compiler_source": compiler_source_digest(),
            "l2_cache_bytes": _l2_cache_bytes()}


_llvm()  # the CPU is the default target: pay LLVM's start-up at import, not at first compile


@functools.lru_cache(maxsize=None)
def host_target() -> tuple:
    """(triple, data layout) that LLVM's target machine for this CPU names, for the renderer."""
    with _LOCK:
        tm = _target_machine(3)
        return tm.triple, str(tm.target_data)


@dataclass
class CPUBuild:
    """A module's LLVM IR as rendered, and the machine code made of it: by a compile, or taken
    from a disk cache entry. The optimised module's text is made again only when asked for."""

    llvm: str
    opt_level: int
    array_data_offset: int | None   # where the objects entry reads a numpy array's data pointer
    object_code: bytes
    from_cache: bool = False


def build_module(text: str, opt_level: int, offset: int | None) -> CPUBuild:
    """Parse, check and optimise the rendered LLVM IR ``text``, and make machine code of it."""
    llvm = _llvm()
    with _LOCK:
        tm = _target_machine(opt_level)
        try:
            module = llvm.parse_assembly(text)
            module.verify()
        except RuntimeError as exc:
            raise CompileError(f"LLVM rejected the generated module: {exc}") from exc
        optimise(module, tm, opt_level)
        return CPUBuild(text, opt_level, offset, tm.emit_object(module))


def build_from_entry(entry: dict, opt_level: int) -> CPUBuild:
    """The build a disk cache entry holds (see ``CPUExecutable.cache_entry``)."""
    return CPUBuild(entry["llvm"], opt_level, entry["array_data_offset"], entry["object"], from_cache=True)


def optimised_module(built_text: str, opt_level: int):
    """The rendered module ``built_text`` optimised as a compile at ``opt_level`` optimises it:
    for the ``llvm_opt`` and ``asm`` stages, made when asked for (the pipeline is deterministic,
    so this is the module the machine code was made of). Call under ``_LOCK``."""
    module = _llvm().parse_assembly(built_text)
    optimise(module, _target_machine(opt_level), opt_level)
    return module


# -- loading machine code ---------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _empty_module_text() -> str:
    return f'target triple = "{_host()[0]}"\n'


def _engine(object_code: bytes):
    """An MCJIT engine that holds ``object_code``, loaded and linked into the process, and
    unmaps it when collected. The engine is given an empty module and, through its object
    cache, the machine code to use for that module: nothing is parsed, optimised or generated.
    Its target machine therefore makes no code either; the cheapest one will do (an engine
    owns and frees the target machine it is given). Call under ``_LOCK``."""
    llvm = _llvm()
    tm = llvm.Target.from_triple(_host()[0]).create_target_machine(codemodel="jitdefault", jit=True)
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(_empty_module_text()), tm)
    engine.set_object_cache(None, lambda _module: object_code)
    engine.finalize_object()
    return engine


@dataclass
class _MachineCode:
    """A build loaded by MCJIT: the engine owns the code for as long as it lives."""

    engine: object
    entry: int           # the address of cinnlite_main
    objects_entry: int   # the address of cinnlite_main_objects, or 0
    stages: list         # (StageInfo, callable) in execution order
    threads_global: int  # the address of the module's thread count (codegen.llvm.THREADS_GLOBAL), or 0


def _load(built: CPUBuild, lowered: LoweredProgram) -> _MachineCode:
    """Load the build's machine code, which must define every function the runtime calls (a
    cache entry that does not is an error, never a call to address 0)."""
    plan = [info for info, _ in stage_plan(lowered)]
    symbols = [LLVMRenderer.entry] + [info.symbol for info in plan]
    if built.array_data_offset is not None:
        symbols.append(LLVMRenderer.objects_entry)
        symbols += [llvm_call.ENTRY] if llvm_call.renders_call_entry(lowered) else []
    with _LOCK:
        try:
            engine = _engine(built.object_code)
        except RuntimeError as exc:
            raise CompileError(f"cannot load the machine code: {exc}") from exc
        address = {name: engine.get_function_address(name) for name in symbols}
        threads_global = engine.get_global_value_address(THREADS_GLOBAL)
    missing = [name for name in symbols if not address[name]]
    if missing:
        raise CompileError(f"the machine code lacks {', '.join(missing)}")
    stages = [(info, _STAGE(address[info.symbol])) for info in plan]
    return _MachineCode(engine, address[LLVMRenderer.entry], address.get(LLVMRenderer.objects_entry, 0), stages,
                        threads_global)


class CPUExecutable(Executable):
    """A program JIT-compiled for this CPU, from a build: just compiled, or from a disk cache
    entry (the lowered program, the stage texts and the machine code)."""

    target = "cpu"
    specialises_power_of_two = True  # a mask vectorises where a clamp does not
    specialises_hot_sizes = True  # constant trip counts: merged short loops, inline row copies

    def __init__(self, program, lowered: LoweredProgram, lowered_text: str, built: CPUBuild, pass_dumps=(),
                 threads=None):
        self.threads = default_threads() if threads is None else check_threads(int(threads))
        code = _load(built, lowered)
        self._engine = code.engine  # the machine code stays mapped for as long as the executable lives
        self._object_code = built.object_code
        self._opt_level = built.opt_level
        self._offset = offset = built.array_data_offset
        self._entry = _ENTRY(code.entry)
        self._entry_objects = None
        n_slots = len(lowered.buffer_table())
        if offset is not None:
            proto = ctypes.CFUNCTYPE(ctypes.c_int32, *([ctypes.py_object] * (n_slots + 1)))
            self._entry_objects = proto(code.objects_entry)
        self._stages = code.stages
        self._parallel = self.threads > 1 and any(
            info.kind != "serial" and (not isinstance(info.work, int) or info.work >= PARALLEL_MIN_WORK)
            and (not isinstance(info.extent, int) or info.extent > 1) for info, _ in code.stages)
        # Stages main splits itself, on the native pool; the others (all of them where there is
        # no native pool) are split by ``_run_stages`` on the Python pool.
        pool = shared_native_pool()
        native = pool is not None and pool.native and self._parallel
        self._python_splits = [not (native and info.split_in_main) for info, _ in code.stages]
        if native and code.threads_global:
            ctypes.c_int64.from_address(code.threads_global).value = self.threads
            pool.grow(self.threads - 1)
        sources = {"graph": str(program), "lowered": lowered_text, "llvm": built.llvm}
        # Functions of the executable: a bound method would be a cycle.
        lazy = {"llvm_opt": CPUExecutable._llvm_opt, "asm": CPUExecutable._asm}
        for name, dump in pass_dumps:
            sources.setdefault(f"lowered:{name}", dump)
        super().__init__(program, lowered, sources, lazy)
        self._slots = [b.name for b in self._table]
        self._table_type = ctypes.c_void_p * max(1, len(self._slots))
        call_entry = code.engine.get_function_address(llvm_call.ENTRY) if offset is not None else 0
        self._fast = NativeCall(call_entry, [name for name, _, _ in self._inputs], self._shapes) if call_entry else None
        self._entry_checks_out = llvm_call.checks_outputs(lowered)

    def cache_entry(self) -> dict | None:
        """What a disk cache stores to rebuild this executable without compiling: the lowered
        program and its text, the rendered module (``llvm_opt`` and ``asm`` are made from it
        when asked for) and the machine code."""
        return {"lowered": self.lowered, "lowered_text": self._sources["lowered"], "llvm": self._sources["llvm"],
                "object": self._object_code, "array_data_offset": self._offset}

    def _llvm_opt(self) -> str:
        with _LOCK:
            return str(optimised_module(self._sources["llvm"], self._opt_level))

    def _asm(self) -> str:
        text = self.source("llvm_opt")
        with _LOCK:
            return _target_machine(self._opt_level).emit_assembly(_llvm().parse_assembly(text))

    def __call__(self, out: OutArrays = None, **inputs: np.typing.ArrayLike) -> Any:
        """Run on keyword arrays; returns the output array, or a tuple in output order.

        A call runs through the call entry (``native_call``) once its sizes have a plan;
        the entry declines whatever it does not take as it is, and the general path then
        converts, explains or raises as it always does. ``out=`` takes the entry too: the entry
        checks it like an input, and that it is writeable and overlaps no input."""
        fast = self._fast
        if fast is not None and len(inputs) == fast.n_inputs:
            into_out = fast.into_out if out is not None else None
            if into_out is not None:
                try:
                    if into_out(*fast.take(inputs), out) is out:
                        return out
                except KeyError:  # a name missing
                    pass
                return super().__call__(out, **inputs)  # which says why the entry declined
            try:
                arrays = fast.take(inputs)
                plan = fast.static or fast.by_shapes[fast.key(arrays)]
            except Exception:  # a name missing, not arrays, or sizes with no plan yet
                call = GENERAL
            else:
                call = plan.fast if plan.fast is not None else self._fast_plan(plan)
                if call.runs and plan.hot_left > 0 and self._count_call(plan):
                    call = self._fast_plan(plan)  # these sizes just turned hot: their static build
            if call.specialised is not None:  # the static executable of these sizes serves them
                return call.specialised(out, **inputs)
            if out is not None:
                # The entry checks out= as it checks the inputs, and that it overlaps none of
                # them; an out= it declines goes to the general path, which says why.
                if call.single and call.checks_out and call.function(*arrays, *call.fixed, out) is out:
                    return out
            elif call.single:
                taken = call.pooled[0]
                out = call.pool.take(call.shape, call.dtype, *taken) if taken else _empty(call.shape, call.dtype)
                if call.function(*arrays, *call.fixed, out) is out:
                    return out
                out = None
            elif call.runs:
                pool = call.pool
                outs = [_empty(shape, dtype) if taken is None else pool.take(shape, dtype, *taken)
                        for shape, dtype, taken in zip(call.shapes, call.dtypes, call.pooled)]
                if call.function(*arrays, *call.fixed, *outs) is outs[0]:
                    return outs[0] if call.n_outputs == 1 else tuple(outs[:call.n_outputs])
        return super().__call__(out, **inputs)

    def _fast_plan(self, plan) -> FastPlan:
        """What the fast path needs for ``plan``'s sizes, made once per plan: the static
        executable of these sizes, or the function and the arrays in slot order (the pool's
        terms for those it serves); GENERAL where the Python pool splits the call across
        threads, or it returns an input or a constant (a copy, which the general path makes)."""
        if plan.specialised is not None:
            plan.fast = _fast_calls_of(plan.specialised)
            return plan.fast
        allocs = {name: (shape, dtype, nbytes) for name, shape, dtype, nbytes in plan.allocs}
        given = {**plan.symbol_arrays, **self._consts}
        rest = self._slots[len(self._inputs):]  # the given arrays, then the written ones
        n_given = next((k for k, name in enumerate(rest) if name not in given), len(rest))
        written = rest[n_given:]
        outputs = [b.name for b in self.lowered.outputs]
        if self._splits(plan) or not all(name in allocs for name in written) or written[:len(outputs)] != outputs:
            return self._shapes.keep_fast(plan, GENERAL)
        # Arrays big enough for the buffer pool come from it, as on the general path: from their
        # shelves, found once here.
        terms = self._pool_terms(plan)
        pooled = [(self._pool.shelf(*allocs[name][:2]), *terms[name][:2])
                  if BufferPool.serves(terms[name][0], terms[name][2]) else None for name in written]
        work = sum(work for _, work in self._stage_sizes(plan))
        function = self._fast.holding if work <= HOLD_GIL_MAX_WORK else self._fast.releasing
        fast = self._shapes.keep_fast(plan, FastPlan(function, [given[name] for name in rest[:n_given]],
                                                     [allocs[name][:2] for name in written], len(outputs),
                                                     pooled=pooled, pool=self._pool,
                                                     checks_out=self._entry_checks_out))
        self._fast.note_plan(plan, fast)
        return fast

    def _splits(self, plan) -> bool:
        """Whether ``_run_stages`` would split a stage of a call of ``plan``'s sizes across threads."""
        return self.threads > 1 and any(python and info.kind != "serial" and work >= PARALLEL_MIN_WORK and extent >= 2
                                        for (info, _), (extent, work), python
                                        in zip(self._stages, self._stage_sizes(plan), self._python_splits))

    def _run(self, arrays: dict, plan, outputs: dict | None = None) -> dict:
        buffers = self._allocate(arrays, plan, outputs)
        err = np.zeros(FIRST_FAILURE.size, np.int64)
        # Stage by stage only where a stage is big enough to split; otherwise main in one go.
        sizes = self._stage_sizes(plan) if self._parallel and self._splits(plan) else None
        if self._entry_objects is not None and sizes is None:
            status = self._entry_objects(*[buffers[n] for n in self._slots], err)
        else:
            table = self._table_type(*[buffers[n].ctypes.data for n in self._slots])
            if sizes is not None:
                status = self._run_stages(ctypes.addressof(table), err.ctypes.data, sizes)
            else:
                status = self._entry(ctypes.addressof(table), err.ctypes.data)
        if status != 0:
            self._raise_first_failure(err, buffers, plan)
        return self._outputs(buffers)

    def _stage_sizes(self, plan) -> list:
        """(extent, work) of every stage under the call's sizes, computed once per plan."""
        sizes = plan.extra.get("stages")
        if sizes is None:
            sizes = plan.extra["stages"] = [(plan.size_of(info.extent), plan.size_of(info.work))
                                            for info, _ in self._stages]
        return sizes

    def _raise_first_failure(self, err: np.ndarray, buffers: dict, plan):
        slot = FIRST_FAILURE.index
        self._raise_index_error(int(err[slot("check")]), int(err[slot("position")]), buffers,
                                value=int(err[slot("value")]), plan=plan)

    def _run_stages(self, table: int, err: int, sizes: list) -> int:
        """Run stage after stage; split the big parallel ones into one chunk per thread."""
        flagged = False
        for (info, fn), (extent, work), python in zip(self._stages, sizes, self._python_splits):
            if info.kind == "deferred_check" and not flagged:
                continue
            if not python or info.kind == "serial" or work < PARALLEL_MIN_WORK or extent < 2:
                status = fn(table, 0, extent, err)
            else:
                status = self._run_split(extent, fn, table, err)
            if status == FLAGGED:
                flagged = True
            elif status != OK:
                return status
        return OK

    def _run_split(self, extent: int, fn, table: int, err: int) -> int:
        """One stage in ``min(threads, extent)`` chunks on the Python worker pool (where the
        program's main cannot split it on the native pool). Every chunk reports into its own
        error slots; the first chunk that failed holds the first bad position in row-major
        order. The pool returns only once no chunk runs any more, also when an exception
        (Ctrl-C) cuts the call short: ``table``, ``errs`` and the buffers stay alive until then."""
        n = min(self.threads, extent)
        bounds = [extent * k // n for k in range(n + 1)]
        errs = np.zeros((n, FIRST_FAILURE.size), np.int64)
        base, size = errs.ctypes.data, FIRST_FAILURE.nbytes
        statuses = shared_pool().run(lambda k: fn(table, bounds[k], bounds[k + 1], base + size * k), n, self.threads)
        for k, st in enumerate(statuses):
            if st == ERROR:
                ctypes.memmove(err, base + size * k, size)
                return ERROR
        return FLAGGED if FLAGGED in statuses else OK


def _fast_calls_of(static) -> FastPlan:
    """The fast calls of sizes a static executable serves for a symbolic one: that executable's
    own (its entry, its constants, its pool), so that a call runs its code without going
    through its ``__call__`` too (~1.3 us of a 3 us call); through it where it has none."""
    plan = static._shapes.static if isinstance(static, CPUExecutable) and static._fast is not None else None
    if plan is not None and plan.specialised is None:
        fast = plan.fast if plan.fast is not None else static._fast_plan(plan)
        if fast.runs:
            return fast
    return FastPlan(specialised=static)
