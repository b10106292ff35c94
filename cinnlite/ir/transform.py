"""Generic rebuilding traversals of the loop-nest IR, used by the passes."""
from __future__ import annotations

from .loopnest import (Binary, Cast, Cmp, Const, FlagIndexError, For, If, Load, Reduce,
                       ReportIndexError, Select, Seq, Store, Var)


def map_expr(e, fn):
    """Rebuild ``e`` bottom-up, applying ``fn`` to every node after its children."""
    if isinstance(e, (Const, Var)):
        return fn(e)
    if isinstance(e, Binary):
        return fn(Binary(e.op, map_expr(e.a, fn), map_expr(e.b, fn)))
    if isinstance(e, Cmp):
        return fn(Cmp(e.op, map_expr(e.a, fn), map_expr(e.b, fn)))
    if isinstance(e, Select):
        return fn(Select(map_expr(e.cond, fn), map_expr(e.a, fn), map_expr(e.b, fn)))
    if isinstance(e, Cast):
        return fn(Cast(e.to, map_expr(e.a, fn)))
    if isinstance(e, Load):
        return fn(Load(e.buffer, tuple(map_expr(i, fn) for i in e.indices)))
    raise TypeError(f"not an expression: {e!r}")


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
    if isinstance(s, FlagIndexError):
        return sf(s)
    if isinstance(s, ReportIndexError):
        return sf(ReportIndexError(s.check_id, ex(s.position), ex(s.value) if s.value is not None else None))
    raise TypeError(f"not a statement: {s!r}")


def walk_stmt(s):
    """Yield every statement of ``s``, parents before children."""
    yield s
    if isinstance(s, For):
        yield from walk_stmt(s.body)
    elif isinstance(s, If):
        yield from walk_stmt(s.then)
        if s.orelse is not None:
            yield from walk_stmt(s.orelse)
    elif isinstance(s, Seq):
        for st in s.stmts:
            yield from walk_stmt(st)


def walk_expr(e):
    """Yield every expression node of ``e``, parents before children."""
    yield e
    if isinstance(e, (Binary, Cmp)):
        yield from walk_expr(e.a)
        yield from walk_expr(e.b)
    elif isinstance(e, Select):
        yield from walk_expr(e.cond)
        yield from walk_expr(e.a)
        yield from walk_expr(e.b)
    elif isinstance(e, Cast):
        yield from walk_expr(e.a)
    elif isinstance(e, Load):
        for i in e.indices:
            yield from walk_expr(i)


def stmt_exprs(s):
    """The expressions a single statement holds directly (not those of nested statements)."""
    if isinstance(s, For):
        return [s.extent]
    if isinstance(s, (Store, Reduce)):
        return list(s.indices) + [s.value]
    if isinstance(s, If):
        return [s.cond]
    if isinstance(s, ReportIndexError):
        return [s.position] + ([s.value] if s.value is not None else [])
    return []
