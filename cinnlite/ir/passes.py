"""Passes over the loop-nest IR: pure functions Kernel -> Kernel, run from visible lists.

``CPU_PIPELINE`` and ``GPU_PIPELINE`` name the passes each backend runs, in order; every
pass's output can be dumped (``run_pipeline(..., dump=True)``) and run by the reference
evaluator (``cinnlite.ir.evaluate``), which is how the tests check each pass on its own.
"""
from __future__ import annotations

from dataclasses import replace

from ..dtypes import bool_, int64
from ..errors import CompileError
from .loopnest import (Binary, Buffer, Cast, Cmp, Const, FlagIndexError, For, If, Kernel, Let, Load,
                       LoweredProgram, Reduce, ReportIndexError, Select, Seq, Store, Var, let, logical_and)
from .transform import map_expr, map_stmt, stmt_exprs, walk_expr, walk_stmt

# -- remove_unit_loops ------------------------------------------------------------------------


def _substitute(stmt, mapping):
    return map_stmt(stmt, lambda e: mapping.get(e, e) if isinstance(e, Var) else e)


def remove_unit_loops(kernel: Kernel) -> Kernel:
    """Loops of extent 1 become their body with the variable set to 0; loops of extent 0 go."""

    def visit(s):
        if isinstance(s, For) and isinstance(s.extent, Const):
            if s.extent.value == 0:
                return None
            if s.extent.value == 1:
                return _substitute(s.body, {s.var: Const(0, s.var.dtype)})
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


def _is_int_const(e, value=None):
    return isinstance(e, Const) and e.dtype.is_int and (value is None or e.value == value)


def _simplify_expr(e):
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
            if v is not None and e.dtype == int64 and -2**63 <= v < 2**63:
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
        if _is_int_const(e.a) and e.to == int64:
            return Const(int(e.a.value), int64)
        return e
    return e


def simplify(kernel: Kernel) -> Kernel:
    """Constant folding and integer identities; statically decided ``if``s disappear."""

    def visit(s):
        if isinstance(s, If) and isinstance(s.cond, Const):
            return s.then if s.cond.value else s.orelse
        return s

    body = map_stmt(kernel.body, _simplify_expr, visit)
    return replace(kernel, body=body if body is not None else Seq(()))


# -- verify -------------------------------------------------------------------------------------


def verify(kernel: Kernel) -> Kernel:
    """Check that every variable is bound, every access has one index per buffer axis, and
    that operand dtypes agree. Raises CompileError before a backend ever sees bad IR."""
    known = {b.name for b in kernel.params} | {t.name for t in kernel.temps}

    def fail(msg):
        raise CompileError(f"loop-nest verifier, kernel {kernel.name}: {msg}")

    def check_expr(e, bound):
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


# -- schedule_cpu -------------------------------------------------------------------------------

#: Bound by the backend around every stage: the slice ``[range_begin, range_end)`` of the stage's
#: parallel dimension that one call (one thread's chunk) executes.
RANGE_BEGIN = Var("range_begin")
RANGE_END = Var("range_end")
RANGE_VARS = (RANGE_BEGIN, RANGE_END)


def kernel_stages(kernel: Kernel) -> tuple:
    """The top-level statements of a kernel (nested sequences flattened), run one after
    another: each is one stage."""
    def flat(s):
        return tuple(x for st in s.stmts for x in flat(st)) if isinstance(s, Seq) else (s,)
    return flat(kernel.body)


def _writes_only_plain_stores(s) -> bool:
    kinds = {type(x) for x in walk_stmt(s)}
    return Reduce not in kinds and ReportIndexError not in kinds


def _vars_of(e) -> set:
    return {x for x in walk_expr(e) if isinstance(x, Var)}


def _innermost_vectorize(s):
    if isinstance(s, For):
        if isinstance(s.body, For):
            return replace(s, body=_innermost_vectorize(s.body))
        return replace(s, kind="vectorize") if s.kind == "serial" else s
    return s


def _guard_rows(nest: For, row):
    """Wrap the body of the innermost loop that ``row`` depends on in
    ``if range_begin <= row < range_end``, so the guard runs once per update slice."""
    deps = _vars_of(row)
    guard = logical_and(Cmp("ge", row, RANGE_BEGIN), Cmp("lt", row, RANGE_END))

    def visit(s, bound):
        if isinstance(s, For):
            inner = bound | {s.var}
            if deps <= inner:
                return replace(s, body=If(guard, s.body))
            return replace(s, body=visit(s.body, inner))
        if isinstance(s, Let):
            # The row is a bound value: guard right after the binding that completes it, so that
            # the values the row does not need are computed only for the rows of this chunk.
            inner = set(bound)
            for k, (var, _) in enumerate(s.bindings):
                inner.add(var)
                if deps <= inner:
                    return let(s.bindings[:k + 1], If(guard, let(s.bindings[k + 1:], s.body)))
        raise AssertionError("row depends on variables outside the update nest")

    return visit(nest, frozenset())


def _schedule_stage(s):
    """Returns the stage with loops annotated. Compute nests: the outermost loop is
    ``parallel`` (chunks of it may run on different threads). Scatter update nests: when every
    update of one output row happens in the same iteration of the outermost loop, that loop is
    ``parallel``; otherwise the nest becomes ``parallel_rows``: each chunk walks all updates in
    order and applies those whose output row lies in its range, which keeps the serial order
    of updates to every element (deterministic, and last-wins for reduce="none")."""
    if not isinstance(s, For):
        return s
    if _writes_only_plain_stores(s):
        body = _innermost_vectorize(s.body) if isinstance(s.body, For) else s.body
        return replace(s, body=body, kind="parallel")
    kinds = {type(x) for x in walk_stmt(s)}
    if ReportIndexError in kinds:
        if Reduce in kinds or Store in kinds:
            return s
        # A check nest: chunks of its outer loop run on different threads, each reporting the
        # first bad position of its own chunk; the runtime keeps the first chunk that failed,
        # which is the first bad position overall (chunks follow row-major order).
        return replace(s, kind="parallel_check")
    reduces = [x for x in walk_stmt(s) if isinstance(x, Reduce)]
    if any(not r.indices for r in reduces):
        return s
    rows = {r.indices[0] for r in reduces}
    shapes = {r.buffer.shape[0] for r in reduces}
    if len(rows) != 1 or len(shapes) != 1:
        return s
    (row,) = rows
    if row == s.var:
        return replace(s, kind="parallel")
    if not _vars_of(row):
        return s  # every update hits one row: nothing to split
    return replace(_guard_rows(s, row), kind="parallel_rows")


def schedule_cpu(kernel: Kernel) -> Kernel:
    """Annotate every stage of the kernel for the CPU (see ``_schedule_stage``); the innermost
    loop of compute nests is marked ``vectorize``."""
    stages = tuple(_schedule_stage(s) for s in kernel_stages(kernel))
    return replace(kernel, body=Seq(stages))


def stage_extent(stage) -> int:
    """The size of a stage's parallel dimension: its loop extent, or the output rows."""
    if isinstance(stage, For) and stage.kind in ("parallel", "parallel_check", "deferred_check"):
        return stage.extent.value
    if isinstance(stage, For) and stage.kind == "parallel_rows":
        return next(x for x in walk_stmt(stage) if isinstance(x, Reduce)).buffer.shape[0]
    return 1


def stage_work(stage) -> int:
    """How many innermost iterations a stage runs: decides whether threads pay off."""
    def work(s):
        if isinstance(s, For):
            return (s.extent.value if isinstance(s.extent, Const) else 1) * work(s.body)
        if isinstance(s, Seq):
            return sum(work(x) for x in s.stmts)
        if isinstance(s, If):
            return work(s.then) + (work(s.orelse) if s.orelse is not None else 0)
        if isinstance(s, Let):
            return work(s.body)
        return 1
    return work(stage)


# -- defer_index_checks -------------------------------------------------------------------------


def _check_nest(stage):
    """``(index load, condition, check id)`` of a check nest ``for ..: if cond: report``."""
    s = stage
    while isinstance(s, For):
        s = s.body
    if not (isinstance(s, If) and s.orelse is None and isinstance(s.then, ReportIndexError)):
        return None
    loads = {x for x in walk_expr(s.cond) if isinstance(x, Load)}
    if len(loads) != 1:
        return None
    (load,) = loads
    if not all(isinstance(i, Var) or (isinstance(i, Const) and i.value == 0) for i in load.indices):
        return None
    return load, s.cond, s.then.check_id


def _loads_of(e, name):
    return [x for x in walk_expr(e) if isinstance(x, Load) and x.buffer.name == name]


def _covers(stage, index: Load) -> bool:
    """Whether running ``stage`` whole evaluates a load of every element of the index buffer
    (unconditionally: statements under an ``if`` do not count; ``select`` operands do, since the
    CPU evaluates both)."""
    name, shape = index.buffer.name, index.buffer.shape
    groups: dict = {}

    def visit(s, extents):
        if isinstance(s, For):
            if not isinstance(s.extent, Const) or s.extent.value <= 0:
                return False
            return visit(s.body, {**extents, s.var: s.extent.value})
        if isinstance(s, Seq):
            return any([visit(x, extents) for x in s.stmts])
        for e in stmt_exprs(s):
            for load in _loads_of(e, name):
                record(load, extents)
        return False

    def record(load, extents):
        partial, seen_vars = None, set()
        for a, (i, d) in enumerate(zip(load.indices, shape)):
            if isinstance(i, Var) and extents.get(i) == d and i not in seen_vars:
                seen_vars.add(i)
            elif isinstance(i, Const) and d == 1 and i.value == 0:
                pass
            elif isinstance(i, Const) and partial is None:
                partial = a
            else:
                return
        key = (partial, tuple(None if a == partial else i for a, i in enumerate(load.indices)))
        groups.setdefault(key, set()).add(None if partial is None else load.indices[partial].value)

    visit(stage, {})
    return any(p is None or values == set(range(shape[p])) for (p, _), values in groups.items())


def _flag_loads(stage, index: Load, cond, check_id):
    """Before every statement that loads the index buffer unconditionally, flag an
    out-of-range value (``_covers`` has proven those loads reach every element, so loads
    under an ``if`` need no flag of their own)."""
    check_vars = index.indices

    def flags_for(s):
        out = []
        # A load at a position bound by the statement's own Let has no flag in front of it
        # (``_covers`` never counts such loads either).
        local = {v for v, _ in s.bindings} if isinstance(s, Let) else set()
        for e in stmt_exprs(s):
            for load in _loads_of(e, index.buffer.name):
                if local and local & _vars_of(load):
                    continue
                mapping = {v: i for v, i in zip(check_vars, load.indices) if isinstance(v, Var)}
                bad = map_expr(cond, lambda x: mapping.get(x, x) if isinstance(x, Var) else _simplify_expr(x))
                flag = If(bad, FlagIndexError(check_id))
                if flag not in out:
                    out.append(flag)
        return out

    def is_flag(s):
        return isinstance(s, If) and isinstance(s.then, FlagIndexError)

    def visit(s, seen):
        """``seen``: the conditions flags in front of ``s`` already test. Every flag raises the
        same stage-wide status, so one flag per condition is enough, and flags (which load the
        index too) need no flags of their own: folding several checks of one index buffer into
        one stage adds one flag, not twice as many for every check."""
        if isinstance(s, For):
            return replace(s, body=visit(s.body, set()))
        if isinstance(s, Seq):
            out = []
            for x in s.stmts:
                if is_flag(x):
                    seen.add(x.cond)
                    out.append(x)
                else:
                    out.append(visit(x, seen))
            return Seq(tuple(out))
        if is_flag(s):
            return s
        flags = [f for f in flags_for(s) if f.cond not in seen]
        seen.update(f.cond for f in flags)
        return Seq(tuple(flags) + (s,)) if flags else s

    return visit(stage, set())


def _can_report(stage) -> bool:
    """Whether running ``stage`` may report an index error."""
    return any(isinstance(x, ReportIndexError) for x in walk_stmt(stage))


def defer_index_checks(kernel: Kernel) -> Kernel:
    """Fold ``mode="raise"`` checks into the loop that reads the index anyway.

    A check nest reads the whole index tensor once more. Where a later stage of the kernel
    loads every index element unconditionally, that stage sets a flag when it meets a bad value
    (a vectorisable or-reduction, no early exit) and the check nest moves behind it as a
    ``deferred_check`` that runs only if the flag was set, to find and report the first bad
    position exactly as before. Reporting order between checks is kept: a check is deferred
    only when no other check stands between it and the stage that takes it over."""
    stages = list(kernel_stages(kernel))
    k = len(stages) - 1
    while k >= 0:
        stage = stages[k]
        parts = _check_nest(stage) if isinstance(stage, For) and stage.kind == "parallel_check" else None
        if parts is not None:
            index, cond, check_id = parts
            for j in range(k + 1, len(stages)):
                later = stages[j]
                # A stage that can report an error itself (a check nest, whatever its shape, or
                # a deferred check) would then report before this check: the order is lost.
                if not isinstance(later, For) or _can_report(later):
                    break
                if _covers(later, index):
                    stages[j] = _flag_loads(later, index, cond, check_id)
                    stages.insert(j + 1, replace(stage, kind="deferred_check"))
                    del stages[k]
                    break
        k -= 1
    return replace(kernel, body=Seq(tuple(stages)))


# -- pipelines ----------------------------------------------------------------------------------

CPU_PIPELINE = (remove_unit_loops, simplify, verify, schedule_cpu, defer_index_checks, verify)


def run_pipeline(program: LoweredProgram, pipeline, dump: bool = False):
    """Run every pass on every kernel. With ``dump``, also return ``[(pass name, text)]``."""
    from .printer import program_str

    dumps = []
    for p in pipeline:
        program = replace(program, kernels=tuple(p(k) for k in program.kernels))
        if dump:
            dumps.append((p.__name__, program_str(program)))
    return (program, dumps) if dump else program
