"""Generic rebuilding traversals of the loop-nest IR, used by the passes.

Expressions may share subexpressions (lowering reuses one index load in several places of a
clamp, for example), so they are DAGs: ``map_expr`` rebuilds every shared node once. Fusion
keeps every expression below a fixed size (see :mod:`cinnlite.ir.fusion`), so the recursion
here is bounded by the size of one operator's expressions, never by the size of the graph.
"""
from __future__ import annotations

from .loopnest import (Binary, Cast, Cmp, Const, FlagIndexError, For, If, Let, Load, Reduce,
                       ReportIndexError, Select, Seq, Store, Var)


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
        elif isinstance(x, Load):
            out = fn(Load(x.buffer, tuple(visit(i) for i in x.indices)))
        else:
            raise TypeError(f"not an expression: {x!r}")
        memo[key] = (x, out)  # keeps x alive, so its id is not reused during the walk
        return out

    return visit(e)


def substitute(e, mapping: dict):
    """``e`` with every Var that ``mapping`` holds replaced by its value."""
    if not mapping:
        return e
    return map_expr(e, lambda x: mapping.get(x, x) if isinstance(x, Var) else x)


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
        elif isinstance(x, Cast):
            stack.append(x.a)
        elif isinstance(x, Load):
            stack += reversed(x.indices)


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
    return []


def let_vars(s) -> list:
    """The variables the Let statements of ``s`` bind, outermost first."""
    return [v for st in walk_stmt(s) if isinstance(st, Let) for v, _ in st.bindings]
