"""The one home of loop-nest IR utilities: rebuilding traversals (``map_expr``, ``map_stmt``),
walks (``walk_stmt``, ``walk_expr``, ``stmt_exprs``), and what the passes, renderers and the
evaluator ask of a nest: its stages, its loops, the variables and buffers it uses, and
substitution of variables.

Expressions may share subexpressions (lowering reuses one index load in several places of a
clamp, for example), so they are DAGs: ``map_expr`` rebuilds every shared node once. Fusion
keeps every expression below a fixed size (see :mod:`cinnlite.ir.fusion`), so the recursion
here is bounded by the size of one operator's expressions, never by the size of the graph.
"""
from __future__ import annotations

from .symbolic import is_symbol_load
from .loopnest import (Binary, Cast, Cmp, Const, Every, Expr, FlagIndexError, For, If, Let, Load, Math, Prefetch, Reduce,
                       ReportIndexError, Select, Seq, Store, Var, as_expr, const, dim_mul)


def map_expr(e, fn):
    """Rebuild ``e`` bottom-up, applying ``fn`` to every node after its children. A node that
    occurs several times in ``e`` (the same object) is rebuilt once and stays shared."""
    memo: dict = {}

    def visit(x):
        key = id(x)
        if key in memo:
            return memo[key][1]
        if isinstance(x, (Const, Var)):
            out = fn(x)
        elif isinstance(x, Binary):
            out = fn(Binary(x.op, visit(x.a), visit(x.b)))
        elif isinstance(x, Cmp):
            out = fn(Cmp(x.op, visit(x.a), visit(x.b)))
        elif isinstance(x, Select):
            out = fn(Select(visit(x.cond), visit(x.a), visit(x.b)))
        elif isinstance(x, Cast):
            out = fn(Cast(x.to, visit(x.a)))
        elif isinstance(x, Math):
            out = fn(Math(x.fn, visit(x.a)))
        elif isinstance(x, Load):
            out = fn(Load(x.buffer, tuple(visit(i) for i in x.indices)))
        elif isinstance(x, Every):
            out = fn(Every(x.var, visit(x.extent), visit(x.cond)))
        else:
            raise TypeError(f"not an expression: {x!r}")
        memo[key] = (x, out)  # keeps x alive, so its id is not reused during the walk
        return out

    return visit(e)


def map_stmt(s, expr_fn=None, stmt_fn=None):
    """Rebuild ``s``: every expression through ``map_expr(.., expr_fn)``, then every statement
    (children first) through ``stmt_fn``, which may return None to delete it."""
    ex = (lambda e: map_expr(e, expr_fn)) if expr_fn else (lambda e: e)
    sf = stmt_fn or (lambda st: st)
    if isinstance(s, For):
        body = map_stmt(s.body, expr_fn, stmt_fn)
        if body is None:
            return None
        return sf(For(s.var, ex(s.extent), body, s.kind))
    if isinstance(s, Store):
        return sf(Store(s.buffer, tuple(ex(i) for i in s.indices), ex(s.value)))
    if isinstance(s, Reduce):
        return sf(Reduce(s.buffer, tuple(ex(i) for i in s.indices), ex(s.value), s.combine))
    if isinstance(s, If):
        then = map_stmt(s.then, expr_fn, stmt_fn)
        orelse = map_stmt(s.orelse, expr_fn, stmt_fn) if s.orelse is not None else None
        if then is None and orelse is None:
            return None
        if then is None:
            return sf(If(Cmp("eq", ex(s.cond), Const(False, s.cond.dtype)), orelse))
        return sf(If(ex(s.cond), then, orelse))
    if isinstance(s, Seq):
        stmts = tuple(x for x in (map_stmt(st, expr_fn, stmt_fn) for st in s.stmts) if x is not None)
        if not stmts:
            return None
        return sf(Seq(stmts)) if len(stmts) > 1 else stmts[0]
    if isinstance(s, Let):
        body = map_stmt(s.body, expr_fn, stmt_fn)
        if body is None:
            return None  # values are pure: without a body nothing needs them
        return sf(Let(tuple((v, ex(e)) for v, e in s.bindings), body))
    if isinstance(s, FlagIndexError):
        return sf(s)
    if isinstance(s, Prefetch):
        return sf(Prefetch(s.buffer, tuple(ex(i) for i in s.indices)))
    if isinstance(s, ReportIndexError):
        return sf(ReportIndexError(s.check_id, ex(s.position), ex(s.value) if s.value is not None else None))
    raise TypeError(f"not a statement: {s!r}")


def walk_stmt(s):
    """Yield every statement of ``s``, parents before children."""
    yield s
    if isinstance(s, (For, Let)):
        yield from walk_stmt(s.body)
    elif isinstance(s, If):
        yield from walk_stmt(s.then)
        if s.orelse is not None:
            yield from walk_stmt(s.orelse)
    elif isinstance(s, Seq):
        for st in s.stmts:
            yield from walk_stmt(st)


def walk_expr(e):
    """Yield every expression node of ``e``, parents before children (a shared node once per
    occurrence)."""
    stack = [e]
    while stack:
        x = stack.pop()
        yield x
        if isinstance(x, (Binary, Cmp)):
            stack += (x.b, x.a)
        elif isinstance(x, Select):
            stack += (x.b, x.a, x.cond)
        elif isinstance(x, (Cast, Math)):
            stack.append(x.a)
        elif isinstance(x, Load):
            stack += reversed(x.indices)
        elif isinstance(x, Every):
            stack += (x.cond, x.extent)


def expr_size(e, limit: int) -> int:
    """The number of nodes of ``e`` as a tree (shared nodes counted at every occurrence), or
    ``limit + 1`` as soon as it is known to exceed ``limit``."""
    n = 0
    for _ in walk_expr(e):
        n += 1
        if n > limit:
            break
    return n


def stmt_exprs(s):
    """The expressions a single statement holds directly (not those of nested statements)."""
    if isinstance(s, For):
        return [s.extent]
    if isinstance(s, (Store, Reduce)):
        return list(s.indices) + [s.value]
    if isinstance(s, If):
        return [s.cond]
    if isinstance(s, Let):
        return [value for _, value in s.bindings]
    if isinstance(s, ReportIndexError):
        return [s.position] + ([s.value] if s.value is not None else [])
    if isinstance(s, Prefetch):
        return list(s.indices)
    return []


def let_vars(s) -> list:
    """The variables the Let statements of ``s`` bind, outermost first."""
    return [v for st in walk_stmt(s) if isinstance(st, Let) for v, _ in st.bindings]


# -- the shape of kernels and loop nests ------------------------------------------------------------


def top_level(body) -> tuple:
    """The statements of ``body`` that run one after another, nested sequences flattened."""
    if isinstance(body, Seq):
        return tuple(s for st in body.stmts for s in top_level(st))
    return (body,)


def kernel_stages(kernel) -> tuple:
    """The top-level statements of a kernel, run one after another: each is one stage (on the
    CPU an exported function, on the GPU a launch)."""
    return top_level(kernel.body)


def sequence(stmts):
    """One statement as itself, several as a Seq."""
    stmts = list(stmts)
    return stmts[0] if len(stmts) == 1 else Seq(tuple(stmts))


def perfect_nest(stmt):
    """Split ``stmt`` into its chain of directly nested loops and the innermost body."""
    loops = []
    while isinstance(stmt, For):
        loops.append(stmt)
        stmt = stmt.body
    return loops, stmt


def build_nest(loops, body):
    """Wrap ``body`` in ``loops`` (outermost first), keeping each loop's var, extent and kind."""
    for loop in reversed(loops):
        body = For(loop.var, loop.extent, body, loop.kind)
    return body


def loop_nest(vars_, shape, body):
    """Wrap ``body`` in one serial For per (var, extent), outermost first."""
    for v, extent in reversed(list(zip(vars_, shape))):
        body = For(v, as_expr(extent), body)
    return body


def flat_position(indices, shape):
    """Row-major flat position (int64) of ``indices`` in ``shape``: its sizes, as integers or as
    int64 expressions."""
    pos = const(0)
    for i, d in zip(indices, shape):
        pos = Binary("add", Binary("mul", pos, d if isinstance(d, Expr) else const(d)), i)
    return pos


def unflatten_position(pos, shape) -> tuple:
    """The row-major indices (int64 expressions) of flat position ``pos`` (int64) in ``shape``:
    its sizes, as integers or as int64 expressions. The inverse of :func:`flat_position`."""
    out, inner = [], 1
    for k in reversed(range(len(shape))):
        d = shape[k]
        quotient = pos if isinstance(inner, int) and inner == 1 else Binary("div", pos, as_expr(inner))
        out.append(quotient if k == 0 else Binary("mod", quotient, as_expr(d)))
        inner = dim_mul(inner, d.value if isinstance(d, Const) else d)
    return tuple(reversed(out))


# -- variables ---------------------------------------------------------------------------------------


def substitute(stmt, mapping: dict):
    """``stmt`` with every variable that ``mapping`` holds replaced by its expression."""
    return map_stmt(stmt, lambda e: mapping.get(e, e) if isinstance(e, Var) else e)


def substitute_expr(e, mapping: dict):
    """``e`` with every variable that ``mapping`` holds replaced by its expression."""
    if not mapping:
        return e
    return map_expr(e, lambda x: mapping.get(x, x) if isinstance(x, Var) else x)


def expr_vars(e) -> set:
    """The variables expression ``e`` uses."""
    return {x for x in walk_expr(e) if isinstance(x, Var)}


def stmt_vars(s) -> set:
    """The variables the expressions of ``s`` and of the statements inside it use."""
    return {v for st in walk_stmt(s) for e in stmt_exprs(st) for v in expr_vars(e)}


# -- buffers -----------------------------------------------------------------------------------------


def is_data_load(x) -> bool:
    """Whether ``x`` is a load that reads data: any load but a read of a symbolic size (a
    loop-invariant scalar)."""
    return isinstance(x, Load) and not is_symbol_load(x)


def data_loads(e) -> list:
    """The loads of ``e`` that read data (``is_data_load``)."""
    return [x for x in walk_expr(e) if is_data_load(x)]


def loads_of(e, name: str) -> list:
    """The loads of buffer ``name`` in expression ``e``."""
    return [x for x in walk_expr(e) if isinstance(x, Load) and x.buffer.name == name]


def buffers_of(stmt) -> list:
    """The buffers ``stmt`` touches, by name, in first-use order (views share their name),
    including the symbolic sizes the shapes of those buffers read (their addresses need them)."""
    seen = {}

    def add(buf):
        if buf.name not in seen:
            seen[buf.name] = buf
            for d in buf.shape:
                if isinstance(d, Expr):
                    for x in walk_expr(d):
                        if isinstance(x, Load):
                            add(x.buffer)

    for st in walk_stmt(stmt):
        if isinstance(st, (Store, Reduce)):
            add(st.buffer)
        for e in stmt_exprs(st):
            for x in walk_expr(e):
                if isinstance(x, Load):
                    add(x.buffer)
    return list(seen.values())


def written_buffers(stmt) -> set:
    """The names of the buffers ``stmt`` stores into or reduces into."""
    return {st.buffer.name for st in walk_stmt(stmt) if isinstance(st, (Store, Reduce))}
