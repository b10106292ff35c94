"""LLVM IR renderer: a LoweredProgram becomes one llvmlite module.

Every stage of every kernel (see ``transform.kernel_stages``) becomes an exported function
``<kernel>_s<j>(ptr bufs, i64 begin, i64 end, ptr err) -> i32`` that runs the slice
``[begin, end)`` of the stage's parallel dimension. Every load and store of a buffer carries
alias-scope metadata saying that it touches none of the stage's other buffers (as ``noalias``
arguments would, without a second function per stage for LLVM to optimise and inline), which
lets LLVM hoist index arithmetic and vectorise. ``cinnlite_main(ptr bufs, ptr err) -> i32``
runs every stage whole, in order. ``bufs`` is the table of buffer pointers in
``LoweredProgram.buffer_table()`` order; ``err`` is the error record
``error_record.FIRST_FAILURE``, which a failed ``mode="raise"`` check fills (check id, flat
position, index value) before the function returns 1.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from llvmlite import ir

from ..dtypes import DType, converted, float16, float32, uint64
from ..ir.loopnest import (Binary, Buffer, Cast, Cmp, Const, Every, FlagIndexError, Math, For, If, Let, Load,
                           LoweredProgram, Prefetch, Reduce, ReportIndexError, Select, Seq, Store, Var)
from ..ir.passes import CHUNKED_LOOPS, RANGE_BEGIN, RANGE_END
from ..ir.schedule_cpu import (MASKED_VECTOR_LANES, PARALLEL_MIN_WORK, flagged_index_width, gather_reach,
                               independent_scatter, interleave_once, lane_sum, masked_vector_loop, narrow_gathers,
                               position_facts, stage_extent, stage_work, threaded_gathers, whole_vector_loop,
                               wide_row_gathers)
from ..ir.symbolic import is_symbol_load
from ..ir.transform import buffers_of, data_loads, expr_vars, kernel_stages, map_stmt, walk_stmt
from .error_record import FIRST_FAILURE
from .llvm_call import add_call_entry, renders_call_entry
from .llvm_sizes import size_renderable, size_value
from .llvm_support import add_half_support, bf16_bits, bf16_upper_half, bf16_value
from .names import comment_text, safe_name
from .renderer import RenderedModule, Renderer

I1, I8, I16, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)
#: Stage return codes: done; a check failed and err holds it; a possibly bad index was seen.
OK, ERROR, FLAGGED = 0, 1, 2
PTR = ir.PointerType()
_FLOATS = {16: ir.HalfType(), 32: ir.FloatType(), 64: ir.DoubleType()}
_ICMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def value_type(dtype: DType):
    """The LLVM type of a value of ``dtype`` in registers (bool is i1; bfloat16 a float holding
    a bfloat16 value, every one of which is a float32; a complex value a vector of its real and
    imaginary parts, as numpy lays them out in memory)."""
    if dtype.is_bool:
        return I1
    if dtype.is_complex:
        return ir.VectorType(_FLOATS[dtype.bits // 2], 2)
    if dtype.is_bfloat16:
        return _FLOATS[32]
    if dtype.is_float:
        return _FLOATS[dtype.bits]
    return ir.IntType(dtype.bits)


def _align(dtype: DType):
    """The alignment numpy guarantees an element of ``dtype`` (a complex one: its parts')."""
    return dtype.bits // 16 if dtype.is_complex else None


#: How many moves a row of a constant count may take to be copied as a run of them
#: (``_row_copy``, ``copy_row``); a longer row keeps its loop, which the vectoriser runs in full
#: vectors with a short remainder.
ROW_COPY_MOVES = 8
#: The narrowest move of a row copy (bytes): an AVX register. Where the target has only SSE or
#: NEON, LLVM splits each into two 16-byte halves; the 32-byte moves keep their order.
ROW_MOVE_BYTES = 32


def _row_copy(s: For, move_bytes: int) -> bool:
    """Whether ``s`` copies one contiguous row: a serial loop whose body is ``out[..., v] =
    x[..., v]`` (the same dtype, no conversion), ``v`` its variable and nowhere else in either
    access; of a constant count, 2 or more and at most ``ROW_COPY_MOVES`` moves of
    ``move_bytes`` long, or of a symbolic one (a shape-generic build, where the vectoriser left
    any row shorter than its vector body, 32 float32 on AVX2, scalar). Booleans keep their
    loop, which stores every true byte as 1."""
    body = s.body
    if not (s.kind == "serial" and isinstance(body, Store) and isinstance(body.value, Load)):
        return False
    store, load = body, body.value
    if store.buffer.dtype != load.buffer.dtype or store.buffer.dtype.is_bool:
        return False
    count = s.extent.value if isinstance(s.extent, Const) else None
    if count is not None and not (count >= 2 and count * store.buffer.dtype.itemsize <= ROW_COPY_MOVES * move_bytes):
        return False
    return all(idx and idx[-1] == s.var and not any(s.var in expr_vars(i) for i in idx[:-1])
               for idx in (store.indices, load.indices))


def declared(module: ir.Module, name: str, returns, arguments: list) -> ir.Function:
    """The module's function ``name`` (an intrinsic, a C library function, the runtime's pool):
    declared with this signature on first use, the same declaration after."""
    return module.globals.get(name) or ir.Function(module, ir.FunctionType(returns, arguments), name)


def memory_type(dtype: DType):
    """The LLVM type of an element of ``dtype`` in memory (bool is one byte, like numpy;
    bfloat16 and float16 their 16 bits). float16 is loaded and stored as an i16 and bit-cast to
    ``half`` where it is used: x86 moves a ``half`` through a vector register (a ``vpinsrw`` that
    merges into the previous value, chaining every iteration of a copy loop), while a value that
    is only moved, as a gather's, then stays an integer once LLVM folds the casts away (a take of
    1 M float16 elements: 2.3x the time of float32 before)."""
    if dtype.is_bool:
        return I8
    if dtype.is_bfloat16 or dtype == float16:
        return I16
    return value_type(dtype)


def symbol(name: str) -> str:
    """The exported symbol of a kernel: ``k_`` and the kernel's name made safe (names.py)."""
    return "k_" + safe_name(name)


@dataclass(frozen=True)
class StageInfo:
    """One exported stage function and how the runtime may split it across threads."""

    symbol: str
    kernel: str
    kind: str      # "serial", "parallel" (split the outer loop), "parallel_check" (the same, for a
                   # mode="raise" check nest), "deferred_check" (the same, run only after an earlier
                   # stage returned FLAGGED) or "parallel_rows" (split by output row)
    extent: object  # size of the dimension [begin, end) ranges over (int, or a symbolic size's expression)
    work: object    # innermost iterations of the whole stage (int, or an expression)

    @property
    def split_in_main(self) -> bool:
        """Whether main splits this stage across threads itself (through ``cinnlite_parallel``,
        ``runtime/native_pool.py``) when it is big enough: a stage that may be split, whose
        extent and work main can compute from the sizes."""
        return self.kind != "serial" and size_renderable(self.extent) and size_renderable(self.work)

    @property
    def may_split_in_main(self) -> bool:
        """Whether main may split this stage at some call: it splits it in main, and its sizes
        are symbolic, or big enough (work and extent) for a split."""
        static = isinstance(self.extent, int) and isinstance(self.work, int)
        return self.split_in_main and not (static and (self.work < PARALLEL_MIN_WORK or self.extent < 2))


#: The global of every module that holds the thread count its main may split stages across;
#: the runtime sets it after loading the code (1 until then, and where there is no native pool).
THREADS_GLOBAL = "cinnlite_threads"
#: The name of a stage's own function for split runs, after its symbol (``_stage_functions``).
SPLIT_SUFFIX = "_split"
PARALLEL_FUNCTION = "cinnlite_parallel"
def stage_plan(program: LoweredProgram) -> list:
    """The stages of a program in execution order, with their exported symbols."""
    plan, used = [], set()
    for kernel in program.kernels:
        base = symbol(kernel.name)
        while base in used:
            base += "_"
        used.add(base)
        for j, stage in enumerate(kernel_stages(kernel)):
            split = ("parallel", "parallel_check", "parallel_rows", "deferred_check")
            kind = stage.kind if isinstance(stage, For) and stage.kind in split else "serial"
            plan.append((StageInfo(f"{base}_s{j}", kernel.name, kind, stage_extent(stage), stage_work(stage)),
                         stage))
    return plan


class _DistinctNode(ir.values.MDValue):
    """A distinct metadata node (llvmlite makes uniqued ones only): an access group, which has
    no operands, or a loop's ID, whose first operand is itself."""

    def __init__(self, module: ir.Module, operands=(), loop_id: bool = False):
        super().__init__(module, [], name=str(len(module.metadata)))
        self.operands = ((self,) if loop_id else ()) + tuple(operands)

    def descr(self, buf):
        buf.append("distinct ")
        super().descr(buf)

    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__


def _flag_type(stage) -> ir.IntType:
    """The integer type of a stage's index flag (``flag_if``): as wide as the widest index its
    tests read, 32 bits at least.

    Why: LLVM ORs the flag in vector lanes of the flag's width. A test of int64 indices yields
    64-bit lanes, which a 32-bit flag narrows first (an extract, a pack, a mask and a shift per
    vector, where a 64-bit flag takes one shift); a test of int32 indices yields 32-bit lanes,
    which a 64-bit flag would widen. Two threads on a Zen 3, shape-generic builds, interleaved:
    gathers along axis 0 and the last axis through int64 indices 222 -> 207 us and 88 -> 81 us
    (256 k elements); through int32 indices a 64-bit flag lost (a gather along a middle axis,
    1 M elements, 631 -> 862 us)."""
    return ir.IntType(8 * max(4, flagged_index_width(stage)))


class _KernelEmitter:
    """Emits one stage as the exported function ``<name>``: it reads its buffers' pointers from
    the table once, and marks every load and store of a buffer with that buffer's alias scope
    and the others' as ``noalias`` (what inlining a function with ``noalias`` arguments would
    give), which lets LLVM hoist index arithmetic and vectorise. Loop variables live in allocas;
    mem2reg/SROA promote them. A Let's variables are the SSA values of their bindings."""

    def __init__(self, module: ir.Module, stage, slots: dict, fn_name: str, domain, lane_gathers: bool = False,
                 masked_vectors: bool = False, row_move_bytes: int = ROW_MOVE_BYTES):
        self.stage = stage
        self.buffers = buffers_of(stage)
        self.flag_type = _flag_type(stage)
        self.fn = fn = ir.Function(module, ir.FunctionType(I32, [PTR, I64, I64, PTR]), fn_name)
        # Stages stay functions of their own: inlined into main, a program of thousands of
        # stages would be one function that LLVM optimises in superlinear time. A call per
        # stage costs nanoseconds.
        fn.attributes.add("noinline")
        table, begin, end, err = fn.args
        table.name, begin.name, end.name, err.name = "bufs", "begin", "end", "err"
        self.err = err
        self.entry = fn.append_basic_block("entry")
        self.b = ir.IRBuilder(self.entry)
        self.ptrs = {}
        for buf in self.buffers:
            slot = self.b.gep(table, [ir.Constant(I64, slots[buf.name])], source_etype=PTR)
            self.ptrs[buf.name] = self.b.load(slot, typ=PTR, name=safe_name(buf.name))
        scopes = [module.add_metadata([ir.MetaDataString(module, f"{fn_name}:{k}"), domain])
                  for k in range(len(self.buffers))]
        self.alias = {}  # buffer name -> (its scope, the other buffers' scopes or None)
        for buf, scope in zip(self.buffers, scopes):
            others = [s for s in scopes if s is not scope]
            self.alias[buf.name] = (module.add_metadata([scope]), module.add_metadata(others) if others else None)
        self.vars: dict = {}
        self.lets: dict = {}
        #: The same variables' ``position_facts`` (for ``lane_sum``), where ``lane_gathers``.
        self.let_facts: dict = {}
        #: Whether the function's gathers are built lane by lane (the host's vector gathers are
        #: microcoded, and the function's attributes do not allow them): where ``lane_sum`` and
        #: ``interleave_once`` apply.
        self.lane_gathers = lane_gathers
        #: Whether a ``masked_vector_loop`` runs as masked vectors (``backends/cpu.py``).
        self.masked_vectors = masked_vectors
        #: The widest move of a row copy (``LLVMRenderer.row_move_bytes``).
        self.row_move_bytes = row_move_bytes
        #: While the body of a loop whose iterations are independent is emitted: the access
        #: group its loads and stores belong to (``independent_scatter``).
        self.access_group = None
        # Symbolic sizes, read once at the entry (see ``symbol``).
        self.sizes = {buf.name: self.b.load(self.ptrs[buf.name], typ=I64, name=safe_name(buf.name) + ".size")
                      for buf in self.buffers if is_symbol_load(Load(buf, ()))}
        self._shared = None  # while an expression is emitted: its nodes' values, by id
        for var, value in ((RANGE_BEGIN, begin), (RANGE_END, end)):
            slot = self.b.alloca(I64, name=var.name)
            self.b.store(value, slot)
            self.vars[var] = slot

    def _scoped(self, buf: Buffer, access):
        """``access`` (a load or store of ``buf``) marked as not aliasing the stage's other buffers."""
        scope, others = self.alias[buf.name]
        access.set_metadata("alias.scope", scope)
        if others is not None:
            access.set_metadata("noalias", others)
        if self.access_group is not None:
            access.set_metadata("llvm.access.group", self.access_group)
        return access

    # -- buffers -------------------------------------------------------------------------------

    def base(self, buf: Buffer):
        return self.ptrs[buf.name]

    def address(self, buf: Buffer, indices, gather: bool = False):
        """The element's pointer. Its offset is 32-bit arithmetic where a coordinate reads data
        (a gather's or a scatter's) and ``buf`` has fewer than ``2**31`` elements: every
        coordinate lies inside its dimension (the lowering makes each index safe), so no term
        overflows. Why: the vectoriser then computes eight lanes of such addresses per
        instruction instead of four, or a scalar chain per lane (1 M float32 elements gathered
        along axis 0 through int32 indices, two threads on a Zen 3: 0.94-0.96 -> 0.78 ms). An
        offset of loop variables alone stays 64-bit: the vectoriser must see it step by one.

        A load (``gather``) orders its terms as ``_lane_terms`` says."""
        narrow = buf.is_static and buf.size < 2**31 and any(data_loads(i) for i in indices)
        flags = ["nsw", "nuw"] if narrow else ["nsw"]
        terms = []
        for idx, stride in zip(indices, buf.strides):
            term = self.b.trunc(self.expr(idx), I32) if narrow else self.expr(idx)
            if not isinstance(stride, int):  # a symbolic size's expression
                term = self.b.mul(term, self.expr(stride), flags=flags)
            elif stride != 1:
                term = self.b.mul(term, ir.Constant(term.type, stride), flags=flags)
            terms.append(term)
        if gather:
            terms = self._lane_terms(buf, indices, terms, flags)
        offset = self._sum(terms, flags) if terms else ir.Constant(I64, 0)
        if narrow and terms:
            offset = self.b.zext(offset, I64)
        return self.b.gep(self.base(buf), [offset], inbounds=True, source_etype=memory_type(buf.dtype))

    def _lane_terms(self, buf: Buffer, indices, terms: list, flags) -> list:
        """The terms of a load's offset: where its gathers are built lane by lane, those of the
        coordinates ``lane_sum`` names added first and their sum frozen (``freeze``), the
        others after it, where the vectoriser still sees a row's elements follow each other;
        else as they are. (A gather along a middle axis of 16-element rows, 1 M float32
        elements, two threads on a Zen 4, interleaved: 1.81 -> 1.02 ms.)"""
        first = lane_sum(buf, indices, self.let_facts) if self.lane_gathers else ()
        if not first:
            return terms
        rest = [t for k, t in enumerate(terms) if k not in first]
        return [self.freeze(self._sum([terms[k] for k in first], flags))] + rest

    def _sum(self, terms, flags):
        offset = terms[0]
        for term in terms[1:]:
            offset = self.b.add(offset, term, flags=flags)
        return offset

    def freeze(self, value):
        """``value`` frozen (LLVM's ``freeze``, which llvmlite's builder lacks): a value LLVM's
        instruction combiner does not look into."""
        instr = ir.Instruction(self.b.block, value.type, "freeze", [value])
        self.b._insert(instr)
        return instr

    def symbol(self, buf):
        """A symbolic size: read once at the top of the function, so that every use is a plain
        loop-invariant value, which keeps loops over symbolic extents as vectorisable as loops
        over numbers (a load in the loop would hide that from LLVM)."""
        return self.sizes[buf.name]

    def load(self, buf, indices, gather: bool = True):
        """The element's value; ``gather=False`` for the read of a read-combine-write, whose
        address stays the one its write computes."""
        v = self._scoped(buf, self.b.load(self.address(buf, indices, gather), typ=memory_type(buf.dtype),
                                          align=_align(buf.dtype)))
        if buf.dtype.is_bool:
            v = self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        elif buf.dtype.is_bfloat16:
            v = bf16_value(self.b, v)
        elif buf.dtype == float16:
            v = self.b.bitcast(v, _FLOATS[16])
        return v

    def store(self, buf, indices, value):
        if buf.dtype.is_bool:
            value = self.b.zext(value, I8)
        elif buf.dtype.is_bfloat16:
            value = bf16_upper_half(self.b, value)
        elif buf.dtype == float16:
            value = self.b.bitcast(value, I16)
        self._scoped(buf, self.b.store(value, self.address(buf, indices), align=_align(buf.dtype)))

    def round_bf16(self, value):
        """A float32 result rounded to the nearest bfloat16 value (a float again)."""
        return bf16_value(self.b, bf16_bits(self.b, value))

    # -- expressions ---------------------------------------------------------------------------

    def expr(self, e):
        """The value of ``e``. Within one expression a node that occurs several times (the same
        object, as lowering shares an index load between the parts of a clamp) is emitted once:
        the expression has no control flow, so the first value dominates every later use."""
        if self._shared is not None:
            key = id(e)
            if key not in self._shared:
                self._shared[key] = (e, self._expr(e))
            return self._shared[key][1]
        self._shared = {}
        try:
            return self.expr(e)
        finally:
            self._shared = None

    def _expr(self, e):
        b = self.b
        if isinstance(e, Const):
            t = value_type(e.dtype)
            if e.dtype.is_bool:
                return ir.Constant(I1, int(bool(e.value)))
            if e.dtype.is_bfloat16:  # the bfloat16 nearest the value, as a float
                return ir.Constant(t, float(converted(e.value, e.dtype).astype(np.float32)))
            if e.dtype.is_complex:
                v = complex(np.array(e.value, e.dtype.np))  # the parts rounded to the dtype's
                return ir.Constant(t, [ir.Constant(t.element, v.real), ir.Constant(t.element, v.imag)])
            return ir.Constant(t, float(e.value) if e.dtype.is_float else int(e.value))
        if isinstance(e, Var):
            if e in self.lets:
                return self.lets[e]
            return b.load(self.vars[e], typ=I64)
        if is_symbol_load(e):
            return self.symbol(e.buffer)
        if isinstance(e, Load):
            return self.load(e.buffer, e.indices)
        if isinstance(e, Binary):
            return self.binary(e.op, e.dtype, self.expr(e.a), self.expr(e.b))
        if isinstance(e, Cmp):
            return self.compare(e.op, e.a.dtype, self.expr(e.a), self.expr(e.b))
        if isinstance(e, Select):
            return b.select(self.expr(e.cond), self.expr(e.a), self.expr(e.b))
        if isinstance(e, Cast):
            return self.cast(self.expr(e.a), e.a.dtype, e.to)
        if isinstance(e, Math):
            return self.math(e.fn, self.expr(e.a))
        if isinstance(e, Every):
            return self.every(e)
        raise TypeError(f"cannot render {e!r}")

    def every(self, e: Every):
        """``Every`` as a loop that ORs a value of each conjunct into a slot of its own
        (``_accumulated``; no early exit, a reduction LLVM vectorises), then the test of each
        slot. Values the loop computes stay inside it: the expression's shared nodes are set
        aside meanwhile, as the loop's body does not dominate what follows it."""
        b = self.b
        conjuncts = _conjuncts(e.cond)
        slots = []
        for c in conjuncts:
            with b.goto_block(self.entry):
                b.position_at_start(self.entry)
                slots.append(b.alloca(value_type(_accumulated(c)[0].dtype), name="every"))
        for c, slot in zip(conjuncts, slots):
            b.store(ir.Constant(slot.allocated_type, 0), slot)

        def body():
            for c, slot in zip(conjuncts, slots):
                b.store(b.or_(b.load(slot, typ=slot.allocated_type), self.expr(_accumulated(c)[0])), slot)
        shared, self._shared = self._shared, {}
        try:
            self.loop(For(e.var, e.extent, Seq(())), emit_body=body)
        finally:
            self._shared = shared
        holds = [self._accumulated_holds(c, b.load(slot, typ=slot.allocated_type)) for c, slot in zip(conjuncts, slots)]
        return holds[0] if len(holds) == 1 else functools.reduce(b.and_, holds)

    def _accumulated_holds(self, cond, total):
        """Whether every value ``_accumulated(cond)`` ORed into ``total`` says ``cond`` held."""
        b = self.b
        _, test = _accumulated(cond)
        zero = ir.Constant(total.type, 0)
        if test == "below":
            return b.icmp_unsigned("<", total, self.expr(cond.b))
        return b.icmp_signed(">=", total, zero) if test == "sign" else b.icmp_unsigned("==", total, zero)

    def compare(self, op, dtype: DType, a, c):
        b = self.b
        if dtype.is_float:
            # Ordered comparisons, except != which is true for NaN (as in C and numpy).
            return b.fcmp_unordered("!=", a, c) if op == "ne" else b.fcmp_ordered(_ICMP[op], a, c)
        if dtype.is_signed:
            return b.icmp_signed(_ICMP[op], a, c)
        return b.icmp_unsigned(_ICMP[op], a, c)

    def binary(self, op, dtype: DType, a, c):
        b = self.b
        if op in ("and", "or"):
            return b.and_(a, c) if op == "and" else b.or_(a, c)
        if dtype.is_complex:
            return self.complex_binary(op, a, c)
        if dtype.is_float:
            if op in ("min", "max"):
                # numpy's minimum/maximum: NaN propagates from either side.
                pick_a = b.or_(b.fcmp_ordered("<" if op == "min" else ">", a, c), b.fcmp_unordered("!=", a, a))
                return b.select(pick_a, a, c)
            value = {"add": b.fadd, "sub": b.fsub, "mul": b.fmul, "div": b.fdiv, "mod": b.frem}[op](a, c)
            # bfloat16 (as ml_dtypes and PyTorch): the float32 result, rounded to bfloat16.
            return self.round_bf16(value) if dtype.is_bfloat16 else value
        if op in ("min", "max"):
            cmp = b.icmp_signed if dtype.is_signed else b.icmp_unsigned
            return b.select(cmp("<" if op == "min" else ">", a, c), a, c)
        if op == "div":
            return b.sdiv(a, c) if dtype.is_signed else b.udiv(a, c)
        if op == "mod":
            return b.srem(a, c) if dtype.is_signed else b.urem(a, c)
        return {"add": b.add, "sub": b.sub, "mul": b.mul}[op](a, c)

    def complex_binary(self, op, a, c):
        """Complex arithmetic on <2 x float> values, part by part, as ``evaluate.complex_parts``:
        multiply by the plain formula, divide as numpy (Smith's method, branch-free)."""
        b = self.b
        if op in ("add", "sub"):
            return b.fadd(a, c) if op == "add" else b.fsub(a, c)
        ar, ai, cr, ci = (b.extract_element(v, ir.Constant(I32, k)) for v in (a, c) for k in (0, 1))
        if op == "mul":
            re = b.fsub(b.fmul(ar, cr), b.fmul(ai, ci))
            im = b.fadd(b.fmul(ar, ci), b.fmul(ai, cr))
        elif op == "div":
            zero, one = ir.Constant(ar.type, 0.0), ir.Constant(ar.type, 1.0)
            fabs = self.intrinsic("llvm.fabs", ar.type)
            abs_r, abs_i = b.call(fabs, [cr]), b.call(fabs, [ci])
            real_larger = b.fcmp_ordered(">=", abs_r, abs_i)
            # |cr| >= |ci|: rat = ci/cr, scl = 1/(cr + ci*rat), ((ar + ai*rat)*scl, (ai - ar*rat)*scl)
            rat1 = b.fdiv(ci, cr)
            scl1 = b.fdiv(one, b.fadd(cr, b.fmul(ci, rat1)))
            re1 = b.fmul(b.fadd(ar, b.fmul(ai, rat1)), scl1)
            im1 = b.fmul(b.fsub(ai, b.fmul(ar, rat1)), scl1)
            # both parts 0: the quotients by |cr| = +0
            both_zero = b.and_(b.fcmp_ordered("==", cr, zero), b.fcmp_ordered("==", ci, zero))
            re1 = b.select(both_zero, b.fdiv(ar, abs_r), re1)
            im1 = b.select(both_zero, b.fdiv(ai, abs_r), im1)
            # otherwise (and for NaN): rat = cr/ci, scl = 1/(ci + cr*rat), ((ar*rat + ai)*scl, (ai*rat - ar)*scl)
            rat2 = b.fdiv(cr, ci)
            scl2 = b.fdiv(one, b.fadd(ci, b.fmul(cr, rat2)))
            re2 = b.fmul(b.fadd(b.fmul(ar, rat2), ai), scl2)
            im2 = b.fmul(b.fsub(b.fmul(ai, rat2), ar), scl2)
            re, im = b.select(real_larger, re1, re2), b.select(real_larger, im1, im2)
        else:
            raise TypeError(f"cannot render {op} of complex values")
        return self.complex_of(re, im, a.type)

    def complex_of(self, re, im, t):
        b = self.b
        v = b.insert_element(ir.Constant(t, None), re, ir.Constant(I32, 0))
        return b.insert_element(v, im, ir.Constant(I32, 1))

    def math(self, fn: str, v):
        """exp, log, sqrt as LLVM intrinsics; tanh as libm's ``tanhf``/``tanh``, which the JIT
        finds in the process."""
        if fn == "tanh":
            name = "tanhf" if v.type == ir.FloatType() else "tanh"
            return self.b.call(declared(self.fn.module, name, v.type, [v.type]), [v])
        return self.b.call(self.intrinsic(f"llvm.{fn}", v.type), [v])

    def intrinsic(self, name, t):
        full = f"{name}.{'f32' if t == ir.FloatType() else 'f64'}"
        return declared(self.fn.module, full, t, [t])

    def cast(self, v, src: DType, dst: DType):
        b = self.b
        if src == dst:
            return v
        if dst.is_complex:
            t = value_type(dst)
            if src.is_complex:  # part by part
                return b.fpext(v, t) if dst.bits > src.bits else b.fptrunc(v, t)
            return self.complex_of(self.cast(v, src, dst.part), ir.Constant(t.element, 0.0), t)
        if dst.is_bfloat16:
            # Through float32, as ml_dtypes converts: rounded to float32, then to bfloat16.
            return self.round_bf16(self.cast(v, src, float32))
        if src.is_bfloat16:
            return self.cast(v, float32, dst)  # the value is a float32 already
        t = value_type(dst)
        if dst.is_bool:
            if src.is_float:
                return b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0))
            return b.icmp_unsigned("!=", v, ir.Constant(v.type, 0))
        if src.is_bool:
            return b.uitofp(v, t) if dst.is_float else b.zext(v, t)
        if src.is_float and dst.is_float:
            return b.fpext(v, t) if dst.bits > src.bits else b.fptrunc(v, t)
        if src.is_float:
            # Saturating conversion: a plain fptosi of an out-of-range value is poison, and a
            # poisoned value must never reach an index computation.
            if src.bits == 16:
                v = b.fpext(v, ir.FloatType())
            name = f"llvm.fpto{'s' if dst.is_signed else 'u'}i.sat.i{dst.bits}.{'f32' if v.type == ir.FloatType() else 'f64'}"
            return b.call(declared(self.fn.module, name, t, [v.type]), [v])
        if dst.is_float:
            return b.sitofp(v, t) if src.is_signed else b.uitofp(v, t)
        if dst.bits > src.bits:
            return b.sext(v, t) if src.is_signed else b.zext(v, t)
        if dst.bits < src.bits:
            return b.trunc(v, t)
        return v  # int8 <-> uint8: same bits

    # -- statements ----------------------------------------------------------------------------

    def stmt(self, s):
        b = self.b
        if isinstance(s, Seq):
            for st in s.stmts:
                self.stmt(st)
        elif isinstance(s, For):
            self.loop(s)
        elif isinstance(s, Let):
            for var, value in s.bindings:
                self.lets[var] = self.expr(value)
                if self.lane_gathers:
                    self.let_facts[var] = position_facts(value, self.let_facts)
            self.stmt(s.body)
            for var, _ in s.bindings:
                del self.lets[var]
                self.let_facts.pop(var, None)
        elif isinstance(s, Store):
            self.store(s.buffer, s.indices, self.expr(s.value))
        elif isinstance(s, Reduce):
            value = self.expr(s.value)
            if s.combine != "none":
                old = self.load(s.buffer, s.indices, gather=False)
                op = {"add": "add", "mul": "mul", "max": "max", "min": "min"}[s.combine]
                value = self.binary(op, s.buffer.dtype, old, value)
            self.store(s.buffer, s.indices, value)
        elif isinstance(s, If) and s.orelse is None and isinstance(s.then, FlagIndexError):
            self.flag_if(s.cond)
        elif isinstance(s, If):
            cond = self.expr(s.cond)
            if s.orelse is None:
                with b.if_then(cond):
                    self.stmt(s.then)
            else:
                with b.if_else(cond) as (then, orelse):
                    with then:
                        self.stmt(s.then)
                    with orelse:
                        self.stmt(s.orelse)
        elif isinstance(s, FlagIndexError):
            b.store(ir.Constant(self.flag_type, 1), self.flag_slot())
        elif isinstance(s, Prefetch):
            self.prefetch(s)
        elif isinstance(s, ReportIndexError):
            pos = self.expr(s.position)
            b.store(ir.Constant(I64, s.check_id), self.error_slot("check"))
            b.store(pos, self.error_slot("position"))
            if s.value is not None:
                b.store(self.expr(s.value), self.error_slot("value"))
            b.ret(ir.Constant(I32, 1))
            # Anything emitted after the return lands in a fresh, unreachable block.
            b.position_at_end(self.fn.append_basic_block("after_error"))
        else:
            raise TypeError(f"cannot render {s!r}")

    def error_slot(self, name: str):
        """A pointer to slot ``name`` of the error record (see ``error_record.FIRST_FAILURE``)."""
        k = FIRST_FAILURE.index(name)
        return self.err if k == 0 else self.b.gep(self.err, [ir.Constant(I64, k)], source_etype=I64)

    def loop(self, s: For, emit_body=None):
        """``s`` as a loop; its body is ``s.body``, or what ``emit_body()`` emits."""
        if emit_body is None and _row_copy(s, self.row_move_bytes):
            self.copy_row(s)
            return
        b = self.b
        with b.goto_block(self.entry):
            b.position_at_start(self.entry)
            slot = b.alloca(I64, name=s.var.name)
        self.vars[s.var] = slot
        extent = self.expr(s.extent)
        start = ir.Constant(I64, 0)
        if s.kind in CHUNKED_LOOPS:
            # This call runs the chunk [begin, min(end, extent)) of the loop.
            start = self.expr(RANGE_BEGIN)
            end = self.expr(RANGE_END)
            extent = b.select(b.icmp_signed("<", end, extent), end, extent)
        b.store(start, slot)
        head = self.fn.append_basic_block(f"{s.var.name}.head")
        body = self.fn.append_basic_block(f"{s.var.name}.body")
        done = self.fn.append_basic_block(f"{s.var.name}.done")
        b.branch(head)
        b.position_at_end(head)
        i = b.load(slot, typ=I64)
        b.cbranch(b.icmp_signed("<", i, extent), body, done)
        b.position_at_end(body)
        loop_id = self._loop_id(s)
        if emit_body is None:
            self.stmt(s.body)
        else:
            emit_body()
        self.access_group = None
        i = b.load(slot, typ=I64)
        b.store(b.add(i, ir.Constant(I64, 1), flags=["nsw"]), slot)
        latch = b.branch(head)
        if loop_id is not None:
            latch.set_metadata("llvm.loop", loop_id)
        b.position_at_end(done)
        del self.vars[s.var]

    def copy_row(self, s: For):
        """A ``_row_copy`` loop as a run of moves of its bytes for a constant count
        (``_ascending_moves``), and as a call of the C library's memcpy for a symbolic one.

        Why: the vectoriser leaves a short loop of a count that is not a multiple of its lanes
        scalar, an element per iteration: rows of 13 float32 took 6 instructions per element
        where three moves copy the row."""
        store, load = s.body, s.body.value
        dst = self._row_start(store.buffer, store.indices)
        src = self._row_start(load.buffer, load.indices)
        itemsize = store.buffer.dtype.itemsize
        if isinstance(s.extent, Const):
            self._ascending_moves(dst, src, s.extent.value * itemsize)
            return
        nbytes = self.b.mul(self.expr(s.extent), ir.Constant(I64, itemsize), flags=["nsw", "nuw"])
        memcpy = declared(self.fn.module, "llvm.memcpy.p0.p0.i64", ir.VoidType(), [PTR, PTR, I64, ir.IntType(1)])
        self.b.call(memcpy, [dst, src, nbytes, ir.Constant(ir.IntType(1), 0)])

    def _ascending_moves(self, dst, src, nbytes: int):
        """Copy ``nbytes`` (a constant) from ``src`` to ``dst`` with moves of the largest power
        of two up to ``row_move_bytes`` that fits, from the first byte up, each move a load and
        its store; where they do not tile the row, the last move ends at its last byte and
        overlaps the one before (``dst`` overlaps no input, so it writes the same bytes again).

        Why not ``llvm.memcpy`` of the constant size: LLVM expands it into the same moves, but
        schedules them from the row's end down, four loads ahead of their stores. A take of
        64-float32 rows (1 M elements, one thread, a Zen VM) ran in 1.74-1.81 ms so, 1.15-1.38
        ms with the moves in order, as TVM's loop (1.14-1.26 ms)."""
        width = min(self.row_move_bytes, 1 << (nbytes.bit_length() - 1))
        vector = ir.VectorType(I8, width)
        starts = list(range(0, nbytes - width + 1, width))
        if starts[-1] + width < nbytes:
            starts.append(nbytes - width)

        def at(pointer, start):
            return self.b.gep(pointer, [ir.Constant(I64, start)], inbounds=True, source_etype=I8)
        for start in starts:
            value = self.b.load(at(src, start), typ=vector)
            value.align = 1
            self.b.store(value, at(dst, start)).align = 1

    def _row_start(self, buf: Buffer, indices):
        return self.address(buf, tuple(indices[:-1]) + (Const(0),))

    def _loop_id(self, s: For):
        """The loop's ID with its properties, or None where it has none: for a loop whose
        iterations touch distinct elements (``independent_scatter``), that the accesses of the
        group it starts (``access_group``) carry no dependence from one iteration to another;
        for one that ``interleave_once``, where gathers are built lane by lane, that its vector
        body is not interleaved; for a ``whole_vector_loop``, that it is one vector of its
        count, not interleaved; for a ``masked_vector_loop``, where ``masked_vectors``, vectors
        of ``MASKED_VECTOR_LANES``, the last one masked (LLVM's tail folding), not interleaved."""
        module = self.fn.module
        properties = []
        if independent_scatter(s):
            self.access_group = _DistinctNode(module)
            properties.append([ir.MetaDataString(module, "llvm.loop.parallel_accesses"), self.access_group])
        whole = whole_vector_loop(s)
        masked = self.masked_vectors and masked_vector_loop(s)
        if whole or masked:
            width = s.extent.value if whole else MASKED_VECTOR_LANES
            properties.append([ir.MetaDataString(module, "llvm.loop.vectorize.width"), ir.Constant(I32, width)])
        if masked:
            properties.append([ir.MetaDataString(module, "llvm.loop.vectorize.predicate.enable"), ir.Constant(I1, 1)])
        if whole or masked or self.lane_gathers and interleave_once(s):
            properties.append([ir.MetaDataString(module, "llvm.loop.interleave.count"), ir.Constant(I32, 1)])
        if not properties:
            return None
        return _DistinctNode(module, [module.add_metadata(p) for p in properties], loop_id=True)

    def flag_if(self, cond):
        """``if cond: flag`` without a branch: the flag ORs in what ``_flag_bits`` makes of
        ``cond`` (an expression), not 0 exactly where it holds (``emit`` returns ``FLAGGED`` for
        a flag that is not 0).
        A loop then carries an OR reduction, which LLVM vectorises whatever the bounds compared
        (a conditional store of FLAGGED became a select it did not recognise when the bounds were
        symbolic sizes, and the whole loop stayed scalar)."""
        b = self.b
        slot = self.flag_slot()
        b.store(b.or_(b.load(slot, typ=self.flag_type), self._flag_bits(cond)), slot)

    def _flag_bits(self, cond):
        """What the flag ORs in for ``cond``: for a uint64 test ``x >= 2**k`` against a 64-bit
        flag, ``x >> k``, else ``cond`` as 0 or 1.

        Why: an int64 index check on an axis whose size is a power of two is such a test
        (``out_of_range``). AVX2 has no unsigned 64-bit compare: the test took an add, a sign
        flip, a signed compare and a shift per four lanes before the OR; the shift alone says
        the same (the bits from ``k`` up are not all 0 exactly where ``x >= 2**k``)."""
        bound = cond.b.value if isinstance(cond, Cmp) and cond.op == "ge" and isinstance(cond.b, Const) else None
        if (isinstance(bound, (int, np.integer)) and bound > 0 and bound & (bound - 1) == 0
                and cond.a.dtype == uint64 and self.flag_type.width == 64):
            return self.b.lshr(self.expr(cond.a), ir.Constant(self.flag_type, int(bound).bit_length() - 1))
        return self.b.zext(self.expr(cond), self.flag_type)

    def prefetch(self, s: Prefetch):
        """``llvm.prefetch`` of the element's cache line: for reading, kept in every cache level."""
        fn = declared(self.fn.module, "llvm.prefetch.p0", ir.VoidType(), [PTR, I32, I32, I32])
        address = self.address(s.buffer, s.indices)
        self.b.call(fn, [address, ir.Constant(I32, 0), ir.Constant(I32, 3), ir.Constant(I32, 1)])

    def flag_slot(self):
        if not hasattr(self, "_flag"):
            with self.b.goto_block(self.entry):
                self.b.position_at_start(self.entry)
                self._flag = self.b.alloca(self.flag_type, name="flagged")
                self.b.store(ir.Constant(self.flag_type, 0), self._flag)
        return self._flag

    def emit(self):
        self.stmt(self.stage)
        if not self.b.block.is_terminated:
            b = self.b
            if hasattr(self, "_flag"):
                flagged = b.icmp_unsigned("!=", b.load(self._flag, typ=self.flag_type), ir.Constant(self.flag_type, 0))
                b.ret(b.select(flagged, ir.Constant(I32, FLAGGED), ir.Constant(I32, 0)))
            else:
                b.ret(ir.Constant(I32, 0))
        return self.fn


def _conjuncts(cond) -> list:
    """The operands of a chain of ``and`` (``cond`` itself where it is none)."""
    if isinstance(cond, Binary) and cond.op == "and":
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _accumulated(cond):
    """``(value, test)``: what ``Every`` ORs together for a conjunct ``cond`` over its range, and
    how the total says whether ``cond`` held everywhere. For ``x < s`` in unsigned integers:
    ``x`` itself where ``s`` is a power of two (the total is below ``s`` exactly when every
    ``x`` is: ``"below"``), else ``x | (s - 1 - x)``, whose sign bit is set exactly where ``x``
    lies outside ``[0, s)`` for an ``s`` below half the type's range (``"sign"``); else
    ``cond == false`` (the total is 0 exactly where it held everywhere: ``"zero"``).

    Why: one OR per vector of indices (an OR, a subtract and an OR), where an unsigned compare
    takes a sign flip, a compare, a shift and an OR on AVX2: the test of a block of indices is
    most of what versioning the block costs."""
    if isinstance(cond, Cmp) and cond.op == "lt" and cond.a.dtype.is_int and not cond.a.dtype.is_signed:
        x, s = cond.a, cond.b
        if isinstance(s, Const) and 0 < int(s.value) <= 2 ** (8 * x.dtype.itemsize - 1):
            if int(s.value) & (int(s.value) - 1) == 0:
                return x, "below"
            return Binary("or", x, Binary("sub", Const(int(s.value) - 1, x.dtype), x)), "sign"
        if not isinstance(s, Const) and x.dtype.itemsize == 8:  # a size, far below 2**63
            return Binary("or", x, Binary("sub", Binary("sub", s, Const(1, x.dtype)), x)), "sign"
    return Cmp("eq", cond, Const(False, cond.dtype)), "zero"


def _module_global(module, name: str, initial: int):
    """The module's int64 global ``name`` (made on first use, exported for the runtime)."""
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    var = ir.GlobalVariable(module, I64, name)
    var.initializer = ir.Constant(I64, initial)
    var.align = 8
    return var


def stage_rate_global(symbol: str) -> str:
    """The name of the stage's own int64 where ``cinnlite_parallel`` keeps its last measured
    time per innermost iteration (picoseconds; 0 until measured), which decides whether waking
    sleeping helpers pays (``runtime/native_pool.py``)."""
    return f"{symbol}.rate"


def _stage_rate_slot(module, symbol: str):
    return _module_global(module, stage_rate_global(symbol), 0)


def _checks_only(stage):
    """``stage`` with every check id set to 0, if all it does is check indices (it stores
    nothing); None if it stores anything. Two such stages that are equal check the same
    conditions on the same values, and report the same positions and values."""
    if any(isinstance(st, (Store, Reduce)) for st in walk_stmt(stage)):
        return None

    def clear(st):
        if isinstance(st, ReportIndexError):
            return ReportIndexError(0, st.position, st.value)
        return FlagIndexError(0) if isinstance(st, FlagIndexError) else st

    return map_stmt(stage, stmt_fn=clear)


@dataclass(frozen=True)
class LLVMModule(RenderedModule):
    """The LLVM IR of a program, and where its objects entry (if any) reads data pointers."""

    stage: ClassVar[str] = "llvm"
    array_data_offset: int | None = None


class LLVMRenderer(Renderer):
    """Loop-nest IR -> LLVM IR text for the target ``triple`` and ``data_layout``.

    With ``array_data_offset``, the module also has ``cinnlite_main_objects``: it takes one
    numpy array object per buffer plus the error array, reads each data pointer at that byte
    offset inside the object (numpy's ``PyArrayObject.data``) and runs main. It saves the
    per-call cost of asking numpy for pointers from Python. It also has the call entry of
    ``llvm_call.py`` where that entry can check the inputs."""

    stage = LLVMModule.stage
    entry = "cinnlite_main"
    #: Takes the numpy array objects themselves (see ``array_data_offset``).
    objects_entry = "cinnlite_main_objects"

    def __init__(self, triple: str = "", data_layout: str = "", array_data_offset: int | None = None,
                 far_gathers: tuple | None = None, masked_vectors: bool = False, vector_bytes: int = ROW_MOVE_BYTES):
        self.triple = triple
        self.data_layout = data_layout
        self.array_data_offset = array_data_offset
        #: (target features, bytes): a stage whose gathers reach further than the bytes is
        #: compiled with the features (``runtime/cpu.py: far_gathers``).
        self.far_gathers = far_gathers
        #: Whether a ``masked_vector_loop`` runs as masked vectors (``backends/cpu.py``).
        self.masked_vectors = masked_vectors
        #: The widest move of a row copy: the target's widest vector register (``vector_bytes``),
        #: at least ``ROW_MOVE_BYTES``. With AVX-512, 64-byte moves copied rows 1.01-1.08x faster
        #: than 32-byte ones (a Xeon VM, 1 M elements, two threads, geomean over dtypes of take
        #: along axis 0 and gather_nd of slices and with batch_dims, interleaved).
        self.row_move_bytes = max(ROW_MOVE_BYTES, vector_bytes)

    def _gather_attributes(self, stage) -> tuple:
        """The function attributes of a stage's gathers, for the function that runs it whole and
        the one main's split runs, where ``far_gathers`` is set (the host's vector gathers are
        microcoded): the target features, with vector gathers, for gathers of 32 bits by 32
        (``schedule_cpu.narrow_gathers``) and for gathers that reach beyond the features' bytes
        (``gather_reach``; a symbolic reach keeps the module's), unless the stage is split
        across threads and its gathers go faster lane by lane there (``threaded_gathers``); a
        preference for 256-bit vectors where 64-bit gathers along a row are built lane by lane
        (``wide_row_gathers``). A stage that gathers nothing is walked once."""
        if self.far_gathers is None:
            return (), ()
        features, limit = self.far_gathers
        reach = gather_reach(stage)
        if reach == 0:
            return (), ()
        # llvmlite knows no string attributes; LLVM reads these off the definition.
        vector = (f'"target-features"="{features}"',)
        if narrow_gathers(stage):
            return vector, vector
        lanes = ('"prefer-vector-width"="256"',) if wide_row_gathers(stage) else ()
        if reach is None or reach <= limit:
            return lanes, lanes
        return vector, lanes if threaded_gathers(stage) else vector

    def _stage_functions(self, module, stage, info: StageInfo, slots: dict, domain) -> tuple:
        """The function that runs a stage whole, and the one main's split runs in chunks on
        several threads: the same function, unless their gathers want different code
        (``_gather_attributes``); then the second is a copy of its own, not exported."""
        attributes, split_attributes = self._gather_attributes(stage)
        whole = self._emit(module, stage, slots, info.symbol, domain, attributes)
        if not info.may_split_in_main or split_attributes == attributes:
            return whole, whole
        split = self._emit(module, stage, slots, info.symbol + SPLIT_SUFFIX, domain, split_attributes)
        split.linkage = "internal"
        return whole, split

    def _emit(self, module, stage, slots: dict, name: str, domain, attributes: tuple):
        lane_gathers = self.far_gathers is not None and not any(a.startswith('"target-features"') for a in attributes)
        fn = _KernelEmitter(module, stage, slots, name, domain, lane_gathers, self.masked_vectors,
                            self.row_move_bytes).emit()
        for attribute in attributes:
            set.add(fn.attributes, attribute)
        return fn

    def render(self, program: LoweredProgram) -> LLVMModule:
        return LLVMModule(program.name, self._module_text(program), self.array_data_offset)

    def _module_text(self, program: LoweredProgram) -> str:
        module = ir.Module(name=comment_text(program.name))  # llvmlite writes it unescaped
        module.triple = self.triple
        module.data_layout = self.data_layout
        slots = {buf.name: i for i, buf in enumerate(program.buffer_table())}
        main = ir.Function(module, ir.FunctionType(I32, [PTR, PTR]), self.entry)
        # The objects entry calls it rather than having a copy of it to optimise and generate.
        main.attributes.add("noinline")
        b = ir.IRBuilder(main.append_basic_block("entry"))
        flagged = b.alloca(I32, name="flagged")
        b.store(ir.Constant(I32, 0), flagged)
        domain = module.add_metadata([ir.MetaDataString(module, "cinnlite buffers")])
        previous = None  # the checks of the stage just before, if that is all it does
        for info, stage in stage_plan(program):
            checks = _checks_only(stage)
            repeated, previous = checks is not None and checks == previous, checks
            if repeated:
                # The same checks of the same indices as the stage just before, which passed
                # them if this stage runs at all: nothing is left to do (a chain of fused
                # takes through one index tensor checks it once per take).
                self._nothing_to_do(module, info.symbol)
                continue
            fn, split_fn = self._stage_functions(module, stage, info, slots, domain)
            # A symbolic extent: the stage's own loop bound ends it (see ``loop``).
            end = info.extent if isinstance(info.extent, int) else 2**63 - 1
            args = [main.args[0], ir.Constant(I64, 0), ir.Constant(I64, end), main.args[1]]
            if info.kind == "deferred_check":
                # Only after a stage flagged a possibly bad index: find and report it.
                was_flagged = b.icmp_signed("!=", b.load(flagged, typ=I32), ir.Constant(I32, 0))
                with b.if_then(was_flagged, likely=False):
                    status = self._run_stage(b, module, info, (fn, split_fn), args, slots)
                    with b.if_then(b.icmp_signed("!=", status, ir.Constant(I32, 0))):
                        b.ret(status)
                continue
            status = self._run_stage(b, module, info, (fn, split_fn), args, slots)
            with b.if_then(b.icmp_signed("==", status, ir.Constant(I32, FLAGGED)), likely=False):
                b.store(ir.Constant(I32, FLAGGED), flagged)
            failed = b.icmp_signed("==", status, ir.Constant(I32, ERROR))
            with b.if_then(failed, likely=False):
                b.ret(status)
        b.ret(ir.Constant(I32, 0))
        if self.array_data_offset is not None:
            self._objects_entry(module, main, len(slots), self.array_data_offset)
            if renders_call_entry(program):
                add_call_entry(module, main, program, self.array_data_offset)
        text = str(module)  # writing the module out is a good part of rendering: done once if possible
        if any(b.dtype == float16 for b in program.buffer_table()) or "half" in text:
            add_half_support(module)
            text = str(module)
        return text

    @staticmethod
    def _run_stage(b: ir.IRBuilder, module, info: StageInfo, functions: tuple, args, slots: dict):
        """Call a stage from main: whole (``functions``' first), or, where it is big enough and
        the module's thread count is above one, split through ``cinnlite_parallel`` into one
        chunk per thread (its second; more, smaller chunks ran slower: 139 us against 88 us for
        a take of 4 MB in eight chunks rather than two)."""
        fn, split_fn = functions
        if not info.may_split_in_main:
            return b.call(fn, args)
        threads = b.load(_module_global(module, THREADS_GLOBAL, 1), typ=I64)
        def symbol(name):
            slot = b.gep(args[0], [ir.Constant(I64, slots[name])], source_etype=PTR)
            return b.load(b.load(slot, typ=PTR), typ=I64)

        extent = size_value(b, info.extent, symbol)
        work = size_value(b, info.work, symbol)
        split = b.and_(b.icmp_signed(">", threads, ir.Constant(I64, 1)),
                       b.and_(b.icmp_signed(">=", work, ir.Constant(I64, PARALLEL_MIN_WORK)),
                              b.icmp_signed(">=", extent, ir.Constant(I64, 2))))
        parallel = declared(module, PARALLEL_FUNCTION, I32, [PTR, PTR, I64, I64, I64, I64, PTR, PTR])
        walks_all = ir.Constant(I64, int(info.kind == "parallel_rows"))
        rate = _stage_rate_slot(module, info.symbol)
        with b.if_else(split) as (then, otherwise):
            with then:
                split_block = b.block
                split_status = b.call(parallel, [split_fn, args[0], extent, work, threads, walks_all, args[3], rate])
            with otherwise:
                whole_block = b.block
                whole_status = b.call(fn, args)
        status = b.phi(I32)
        status.add_incoming(split_status, split_block)
        status.add_incoming(whole_status, whole_block)
        return status

    @staticmethod
    def _nothing_to_do(module, name: str):
        """The exported function of a stage that has nothing to do: it returns "done"."""
        fn = ir.Function(module, ir.FunctionType(I32, [PTR, I64, I64, PTR]), name)
        fn.attributes.add("noinline")
        ir.IRBuilder(fn.append_basic_block("entry")).ret(ir.Constant(I32, OK))

    def _objects_entry(self, module, main, n: int, offset: int):
        fn = ir.Function(module, ir.FunctionType(I32, [PTR] * (n + 1)), self.objects_entry)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        table = b.alloca(PTR, size=max(1, n), name="bufs")

        def data(obj):
            field = b.gep(obj, [ir.Constant(I64, offset)], source_etype=I8)
            return b.load(field, typ=PTR)

        for k in range(n):
            b.store(data(fn.args[k]), b.gep(table, [ir.Constant(I64, k)], source_etype=PTR))
        b.ret(b.call(main, [table, data(fn.args[n])]))
