"""The passes over the loop-nest IR that every target runs, and how a pipeline of passes runs.

A pass is a pure function Kernel -> Kernel. The target-independent ones are here:
``remove_unit_loops``, ``simplify`` and ``verify``; the schedules are in ``schedule_cpu.py``
and ``schedule_gpu.py``. Each backend names its pipeline in its module (``CPU_PIPELINE`` in
``cinnlite/backends/cpu.py``, ``GPU_PIPELINE`` in ``cinnlite/backends/gpu.py``);
``run_pipeline`` runs one, and can dump every pass's output (``dump=True``), which the reference
evaluator (``cinnlite.ir.evaluate``) can run: that is how the tests check each pass on its own.
"""
from __future__ import annotations

from dataclasses import replace

from ..dtypes import bool_, int64, uint64
from ..errors import CompileError
from .symbolic import SYMBOL_BUFFER_PREFIX, symbol_buffer
from .loopnest import (Binary, Buffer, Cast, Cmp, Const, Every, For, If, Kernel, Let, Load, LoweredProgram, Prefetch, Reduce,
                       Select, Seq, Store, Var)
from .transform import map_stmt, stmt_exprs, substitute, walk_expr

# -- what every stage may use -------------------------------------------------------------------

#: Bound by the backend around every stage: the slice ``[range_begin, range_end)`` of the stage's
#: parallel dimension that one call (one thread's chunk) executes.
RANGE_BEGIN = Var("range_begin")
RANGE_END = Var("range_end")
RANGE_VARS = (RANGE_BEGIN, RANGE_END)
#: The kinds of stage loop that one call runs a chunk ``[range_begin, range_end)`` of.
CHUNKED_LOOPS = ("parallel", "parallel_check", "deferred_check")


# -- remove_unit_loops ------------------------------------------------------------------------


def remove_unit_loops(kernel: Kernel) -> Kernel:
    """Loops of extent 1 become their body with the variable set to 0; loops of extent 0 go."""

    def visit(s):
        if isinstance(s, For) and isinstance(s.extent, Const):
            if s.extent.value == 0:
                return None
            if s.extent.value == 1:
                return substitute(s.body, {s.var: Const(0, s.var.dtype)})
        return s

    body = map_stmt(kernel.body, None, visit)
    return replace(kernel, body=body if body is not None else Seq(()))


# -- simplify -----------------------------------------------------------------------------------


def _c_div(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _fold_binary(op, a, b):
    if op == "add": return a + b
    if op == "sub": return a - b
    if op == "mul": return a * b
    if op == "min": return min(a, b)
    if op == "max": return max(a, b)
    if op == "div" and b != 0: return _c_div(a, b)
    if op == "mod" and b != 0: return a - _c_div(a, b) * b
    return None


def _fits_folded(value: int, dtype) -> bool:
    """Whether a constant folded to ``value`` may stand as one of ``dtype``: int64 and uint64
    where the value is in range (no folding where the arithmetic would wrap). uint64 too,
    so that the bounds of index checks (``lower.out_of_range``) become numbers the CPU
    renderer recognises."""
    return (dtype == int64 and -2**63 <= value < 2**63) or (dtype == uint64 and 0 <= value < 2**64)


def _is_int_const(e, value=None):
    return isinstance(e, Const) and e.dtype.is_int and (value is None or e.value == value)


def simplify_expr(e):
    if isinstance(e, Binary):
        a, b = e.a, e.b
        if e.op in ("and", "or") and e.dtype.is_bool:
            for x, y in ((a, b), (b, a)):
                if isinstance(x, Const):
                    if e.op == "and":
                        return y if x.value else Const(False, bool_)
                    return Const(True, bool_) if x.value else y
            return e
        if _is_int_const(a) and _is_int_const(b):
            v = _fold_binary(e.op, a.value, b.value)
            if v is not None and _fits_folded(v, e.dtype):
                return Const(v, e.dtype)
        if e.dtype.is_int:
            if e.op == "add" and _is_int_const(b, 0): return a
            if e.op == "add" and _is_int_const(a, 0): return b
            if e.op == "sub" and _is_int_const(b, 0): return a
            if e.op == "mul" and _is_int_const(b, 1): return a
            if e.op == "mul" and _is_int_const(a, 1): return b
            if e.op == "mul" and (_is_int_const(a, 0) or _is_int_const(b, 0)): return Const(0, e.dtype)
        return e
    if isinstance(e, Cmp):
        if _is_int_const(e.a) and _is_int_const(e.b):
            a, b = e.a.value, e.b.value
            return Const({"lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b,
                          "eq": a == b, "ne": a != b}[e.op], bool_)
        return e
    if isinstance(e, Select):
        if isinstance(e.cond, Const):
            return e.a if e.cond.value else e.b
        if e.a == e.b:
            return e.a
        return e
    if isinstance(e, Cast):
        if e.a.dtype == e.to:
            return e.a
        if _is_int_const(e.a) and e.to in (int64, uint64) and _fits_folded(int(e.a.value), e.to):
            return Const(int(e.a.value), e.to)
        return e
    return e


def simplify(kernel: Kernel) -> Kernel:
    """Constant folding and integer identities; statically decided ``if``s disappear."""

    def visit(s):
        if isinstance(s, If) and isinstance(s.cond, Const):
            return s.then if s.cond.value else s.orelse
        return s

    body = map_stmt(kernel.body, simplify_expr, visit)
    return replace(kernel, body=body if body is not None else Seq(()))


# -- verify -------------------------------------------------------------------------------------


def verify(kernel: Kernel) -> Kernel:
    """Check that every variable is bound, every access has one index per buffer axis, and
    that operand dtypes agree. Raises CompileError before a backend ever sees bad IR."""
    known = {b.name for b in kernel.params} | {t.name for t in kernel.temps}

    def fail(msg):
        raise CompileError(f"loop-nest verifier, kernel {kernel.name}: {msg}")

    def check_expr(e, bound):
        bound = bound | {x.var for x in walk_expr(e) if isinstance(x, Every)}
        for x in walk_expr(e):
            if isinstance(x, Var) and x not in bound:
                fail(f"unbound variable {x.name}")
            if isinstance(x, (Binary, Cmp)) and x.a.dtype != x.b.dtype:
                fail(f"{x.op} of {x.a.dtype} and {x.b.dtype}")
            if isinstance(x, Binary) and x.op in ("and", "or") and not x.a.dtype.is_bool:
                fail(f"{x.op} of non-bool {x.a.dtype}")
            if isinstance(x, Select):
                if not x.cond.dtype.is_bool:
                    fail("select condition is not bool")
                if x.a.dtype != x.b.dtype:
                    fail(f"select of {x.a.dtype} and {x.b.dtype}")
            if isinstance(x, Load):
                check_access(x.buffer, x.indices)

    def check_access(buf: Buffer, indices):
        if buf.name.startswith(SYMBOL_BUFFER_PREFIX) and buf == symbol_buffer(buf.name[1:]):
            return  # a symbolic size: every kernel may read it
        if buf.name not in known:
            fail(f"access to unknown buffer {buf.name}")
        if len(indices) != len(buf.shape):
            fail(f"{buf.name} has rank {len(buf.shape)} but is accessed with {len(indices)} indices")
        for i in indices:
            if i.dtype != int64:
                fail(f"index into {buf.name} has dtype {i.dtype}, not int64")

    def visit(s, bound):
        if isinstance(s, Let):
            visit_let(s, bound)
            return
        for e in stmt_exprs(s):
            check_expr(e, bound)
        if isinstance(s, For):
            if s.var in bound:
                fail(f"variable {s.var.name} is bound twice")
            visit(s.body, bound | {s.var})
        elif isinstance(s, Prefetch):
            check_access(s.buffer, s.indices)
        elif isinstance(s, (Store, Reduce)):
            check_access(s.buffer, s.indices)
            if s.value.dtype != s.buffer.dtype:
                fail(f"store of {s.value.dtype} into {s.buffer.name}: {s.buffer.dtype}")
        elif isinstance(s, If):
            if not s.cond.dtype.is_bool:
                fail("if condition is not bool")
            visit(s.then, bound)
            if s.orelse is not None:
                visit(s.orelse, bound)
        elif isinstance(s, Seq):
            for st in s.stmts:
                visit(st, bound)

    def visit_let(s, bound):
        inner = set(bound)
        for var, value in s.bindings:
            check_expr(value, inner)
            if not isinstance(var, Var):
                fail(f"let binds {var!r}, not a variable")
            if var in inner:
                fail(f"variable {var.name} is bound twice")
            if var.dtype != value.dtype:
                fail(f"let {var.name}: {var.dtype} is bound to a value of {value.dtype}")
            inner.add(var)
        visit(s.body, frozenset(inner))

    visit(kernel.body, frozenset(RANGE_VARS))
    return kernel


# -- running a pipeline -------------------------------------------------------------------------


def run_pipeline(program: LoweredProgram, pipeline, dump: bool = False):
    """Run every pass on every kernel. With ``dump``, also return ``[(pass name, text)]``."""
    from .printer import program_str

    dumps = []
    for p in pipeline:
        program = replace(program, kernels=tuple(p(k) for k in program.kernels))
        if dump:
            dumps.append((p.__name__, program_str(program)))
    return (program, dumps) if dump else program
