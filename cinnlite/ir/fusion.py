"""Fusion: inline pure computes (gathers, fills, reshapes and elementwise ops) into their consumers.

A pure kernel computes ``out[v] = f(v)`` for every position ``v``. Where its output is not a
program output, every ``Load(out, idx)`` in a consumer can be replaced by ``f(idx)``, and the
kernel and its buffer disappear: the (1 000 000, 64) rows a take produces for a scatter are never
materialised. The producer's ``mode="raise"`` check stages move in front of each consumer, so
errors still surface, and still name the producer.

Fused code stays linear in the size of the graph:

- Nothing is written twice. Where ``f`` uses a loop variable several times (a clamp reads its
  index three times) and ``idx`` is more than a variable, ``idx`` is bound once with a
  :class:`~cinnlite.ir.loopnest.Let`; where a statement reads the producer more than once, or
  ``f(idx)`` is big, the value is bound once too. A producer that carries bindings of its own
  (from producers fused into it) is inlined by binding its loop variables to ``idx`` in front
  of its bindings, which are reused as they are. Every expression stays below
  ``INLINE_MAX_NODES`` nodes, however long the chain, so no traversal recurses deeply.
- Every kernel is visited once, in program order, and pulls in the finished definitions of the
  producers it reads (whose names are unique in the program, so they are bound as they are).
  A producer read at several places is copied to each only while it is small
  (``SHARED_MAX_COST``); a bigger one stays a kernel of its own. So does a producer past
  ``FUSED_MAX_COST``: one kernel stops growing there, and its consumers start a new one.

Checks keep the order of the unfused program: a fused kernel runs the check stages of every
producer inlined into it first, in the order of their check ids (program order, as lowering
numbers them), each once, then its own stages.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

from ..dtypes import int64
from .loopnest import (Const, Expr, For, If, Kernel, Let, Load, LoweredProgram, Reduce,
                       ReportIndexError, Seq, Store, Var, let)
from .transform import (expr_size, flat_position, kernel_stages, map_expr, stmt_exprs, substitute_expr, walk_expr,
                        walk_stmt)

#: An inlined value of more nodes than this is bound to a variable instead of being written into
#: the consumer's expression, which bounds the size and depth of every expression.
INLINE_MAX_NODES = 48
#: A fused producer bigger than this stays materialised, and its consumers start a new kernel:
#: folding checks (``passes.defer_index_checks``) and LLVM's optimisation take superlinear time
#: in the size of one kernel.
FUSED_MAX_COST = 128
#: A producer read at more than one place is inlined at each only while its bindings, check
#: stages and value count at most this many; a bigger one stays materialised.
SHARED_MAX_COST = 64


@dataclass(frozen=True)
class Definition:
    """A fusable producer: after its ``checks`` have run, ``out[vars] = value`` under
    ``bindings`` for every position of its output (``vars`` range over ``extents``)."""

    name: str
    checks: tuple      # check stages, in check-id order
    check_ids: tuple   # the id of each
    vars: tuple
    extents: tuple
    bindings: tuple
    value: Expr
    shared: bool       # read at several places: every inlining gets fresh names

    @property
    def cost(self) -> int:
        return len(self.bindings) + len(self.checks) + expr_size(self.value, INLINE_MAX_NODES)


def _stage_check_id(stage):
    """The check id a check stage reports, or None when the stage is not a check."""
    ids = {s.check_id for s in walk_stmt(stage) if isinstance(s, ReportIndexError)}
    return ids.pop() if len(ids) == 1 else None


def _compute_nest(stage):
    """``(vars, extents, bindings, store)`` of ``for v..: [let ..:] out[v..] = value``, else None."""
    vars_, extents, s = [], [], stage
    while isinstance(s, For):
        vars_.append(s.var)
        # A size as buffer shapes hold it: an int, or the expression of a symbolic size.
        extents.append(s.extent.value if isinstance(s.extent, Const) else s.extent)
        s = s.body
    bindings = ()
    if isinstance(s, Let):
        bindings, s = s.bindings, s.body
    if not isinstance(s, Store) or tuple(s.indices) != tuple(vars_) or tuple(extents) != tuple(s.buffer.shape):
        return None
    return tuple(vars_), tuple(extents), bindings, s


def compute_definition(kernel: Kernel):
    """``(check stages, compute nest)`` if the kernel is one compute nest (after optional check
    stages) that stores every position of its output once; else None."""
    if not kernel.pure:
        return None
    stages = kernel_stages(kernel)
    checks, nest = stages[:-1], stages[-1]
    if not all(_stage_check_id(c) is not None for c in checks):
        return None
    parts = _compute_nest(nest)
    if parts is None or parts[3].buffer.name != kernel.output.name:
        return None
    return checks, nest


def _maps_onto(load: Load, extents) -> bool:
    """Whether a read of a producer with loop extents ``extents`` can be inlined: the same
    shape, or a flat producer (a reshape) read through any view of its buffer."""
    if len(load.indices) == len(extents) and tuple(load.buffer.shape) == tuple(extents):
        return True
    return len(extents) == 1


def _trivial(e) -> bool:
    return isinstance(e, (Var, Const))


def _merge_checks(groups):
    """The check stages of several producers as one list in check-id order, each id once.
    ``groups`` holds ``(ids, stages)`` pairs, each already in order."""
    groups = sorted((g for g in groups if g[0]), key=lambda g: g[0][0])
    if all(a[0][-1] < b[0][0] for a, b in zip(groups, groups[1:])):
        ids = tuple(itertools.chain.from_iterable(g[0] for g in groups))
        return ids, tuple(itertools.chain.from_iterable(g[1] for g in groups))
    merged = {}
    for ids, stages in groups:
        for i, st in zip(ids, stages):
            merged.setdefault(i, st)
    order = sorted(merged)
    return tuple(order), tuple(merged[i] for i in order)


class _Names:
    """Fresh variable names, unique in the program: fused code binds them in other kernels."""

    def __init__(self):
        self.count = itertools.count()

    def var(self, dtype=int64) -> Var:
        return Var(f"v{next(self.count)}", dtype)

    def suffix(self) -> str:
        return f"_{next(self.count)}"


def _renamed(d: Definition, suffix: str) -> Definition:
    """``d`` with every variable it binds renamed, for one more inlining into code where its
    names may already be bound."""
    mapping = {v: Var(v.name + suffix, v.dtype) for v in d.vars}
    mapping.update((v, Var(v.name + suffix, v.dtype)) for v, _ in d.bindings)
    bindings = tuple((mapping[v], substitute_expr(e, mapping)) for v, e in d.bindings)
    return replace(d, vars=tuple(mapping[v] for v in d.vars), bindings=bindings,
                   value=substitute_expr(d.value, mapping))


class _Inliner:
    """Rewrites the statements of one kernel, replacing every read of a fused producer by its
    definition. ``scope`` maps the reads already inlined on the way down to the statement (by
    producer, view and index) to their values, so a read repeated there is not inlined again."""

    def __init__(self, definitions: dict, names: _Names):
        self.definitions = definitions
        self.names = names
        self.used: dict = {}  # the producers inlined, by name

    def stmt(self, s, scope: dict):
        if isinstance(s, For):
            return replace(s, body=self.stmt(s.body, scope))
        if isinstance(s, Seq):
            return Seq(tuple(self.stmt(x, scope) for x in s.stmts))
        reads = self._reads(s)
        if not reads and not isinstance(s, (If, Let)):
            return s
        bindings, inner = [], dict(scope)

        def rewrite(e):
            return self.expr(e, bindings, inner, reads)

        if isinstance(s, If):
            cond = rewrite(s.cond)
            orelse = self.stmt(s.orelse, inner) if s.orelse is not None else None
            out = If(cond, self.stmt(s.then, inner), orelse)
        elif isinstance(s, Let):
            for var, value in s.bindings:
                value = rewrite(value)
                bindings.append((var, value))
            out = self.stmt(s.body, inner)
        elif isinstance(s, Store):
            out = Store(s.buffer, tuple(rewrite(i) for i in s.indices), rewrite(s.value))
        elif isinstance(s, Reduce):
            out = Reduce(s.buffer, tuple(rewrite(i) for i in s.indices), rewrite(s.value), s.combine)
        elif isinstance(s, ReportIndexError):
            value = rewrite(s.value) if s.value is not None else None
            out = ReportIndexError(s.check_id, rewrite(s.position), value)
        else:
            return s
        return let(bindings, out)

    def _reads(self, s) -> dict:
        """How often the statement's own expressions read each fused producer (as trees)."""
        counts: dict = {}
        for e in stmt_exprs(s):
            for x in walk_expr(e):
                if isinstance(x, Load) and x.buffer.name in self.definitions:
                    counts[x.buffer.name] = counts.get(x.buffer.name, 0) + 1
        return counts

    def expr(self, e, bindings: list, scope: dict, reads: dict):
        def inline(x):
            if isinstance(x, Load) and x.buffer.name in self.definitions:
                d = self.definitions[x.buffer.name]
                return self.site(d, x, bindings, scope, reads.get(d.name, 0) > 1)
            return x
        return map_expr(e, inline)

    def site(self, d: Definition, load: Load, bindings: list, scope: dict, repeated: bool):
        """The value of ``d`` at ``load`` (whose indices are already rewritten); the bindings it
        needs are appended to ``bindings``."""
        key = (d.name, load.buffer.shape, load.indices)
        if key in scope:
            return scope[key]
        self.used.setdefault(d.name, d)
        if d.shared and d.bindings:
            d = _renamed(d, self.names.suffix())
        if len(load.indices) == len(d.vars) and tuple(load.buffer.shape) == d.extents:
            pairs = list(zip(d.vars, load.indices))
        else:  # a flat producer (a reshape) read through another view of its buffer
            pairs = [(d.vars[0], flat_position(load.indices, load.buffer.shape))]
        if d.bindings:
            # Its bindings use its loop variables (names unique in the program): bind those.
            bindings.extend(pairs)
            bindings.extend(d.bindings)
            value = d.value
        else:
            mapping = {}
            for var, index in pairs:
                if not _trivial(index) and _uses(d.value, var) > 1:
                    bound = self.names.var()
                    bindings.append((bound, index))
                    index = bound
                mapping[var] = index
            value = substitute_expr(d.value, mapping)
        if repeated or expr_size(value, INLINE_MAX_NODES) > INLINE_MAX_NODES:
            bound = self.names.var(value.dtype)
            bindings.append((bound, value))
            value = bound
        scope[key] = value
        return value


def _uses(e, var) -> int:
    return sum(1 for x in walk_expr(e) if isinstance(x, Var) and x == var)


def _with_unique_loop_vars(nest, prefix: str):
    """A compute nest whose loop variables carry ``prefix``: unique in the program, so that
    consumers can bind them."""
    vars_, _, _, store = _compute_nest(nest)
    mapping = {v: Var(prefix + v.name, v.dtype) for v in vars_}
    loops, s = [], nest
    while isinstance(s, For):
        loops.append(s)
        s = s.body
    body = Store(store.buffer, tuple(mapping[v] for v in vars_), substitute_expr(store.value, mapping))
    for loop in reversed(loops):
        body = For(mapping[loop.var], loop.extent, body, loop.kind)
    return body


def _kernel_params(kernel: Kernel, stages, inlined: set) -> tuple:
    """The buffers a rewritten kernel touches: its own (less the inlined producers), then those
    the inlined code of ``stages`` reads, in first-use order, the output last."""
    temps = {t.name for t in kernel.temps}
    params = {b.name: b for b in kernel.params if b.name not in inlined and b.name != kernel.output.name}
    for st in (x for stage in stages for x in walk_stmt(stage)):
        for e in stmt_exprs(st):
            for x in walk_expr(e):
                if isinstance(x, Load) and x.buffer.name not in params and x.buffer.name not in temps \
                        and x.buffer.name != kernel.output.name:
                    params[x.buffer.name] = x.buffer
    return tuple(params.values()) + (kernel.output,)


def _fusable_extents(program: LoweredProgram, keep: set) -> dict:
    """The loop extents of every kernel that could be inlined, by output name."""
    out = {}
    for k in program.kernels:
        if k.output.name in keep:
            continue
        parts = compute_definition(k)
        if parts is not None:
            out[k.output.name] = _compute_nest(parts[1])[1]
    return out


def _count_reads(program: LoweredProgram, extents: dict):
    """How often each candidate is read (as expression trees), and the candidates some read
    cannot be inlined into."""
    reads, blocked = {}, set()
    for k in program.kernels:
        for st in walk_stmt(k.body):
            for e in stmt_exprs(st):
                for x in walk_expr(e):
                    if isinstance(x, Load) and x.buffer.name in extents:
                        reads[x.buffer.name] = reads.get(x.buffer.name, 0) + 1
                        if not _maps_onto(x, extents[x.buffer.name]):
                            blocked.add(x.buffer.name)
    return reads, blocked


def inline_computes(program: LoweredProgram, keep_index_buffers: bool = True) -> LoweredProgram:
    """Inline every pure kernel whose output is not a program output into its consumers.

    With ``keep_index_buffers`` (for backends whose errors read the bad value back from the
    index buffer), index tensors that a ``mode="raise"`` check reads stay materialised."""
    keep = {b.name for b in program.outputs}
    if keep_index_buffers:
        keep |= {c.buffer for c in program.checks}
    extents = _fusable_extents(program, keep)
    reads, blocked = _count_reads(program, extents)
    names = _Names()
    definitions, kernels = {}, []
    for index, kernel in enumerate(program.kernels):
        name = kernel.output.name
        candidate = name in extents and name not in blocked and reads.get(name, 0) > 0
        stages = kernel_stages(kernel)
        if candidate:
            stages = stages[:-1] + (_with_unique_loop_vars(stages[-1], f"f{index}_"),)
        inliner = _Inliner(definitions, names)
        stages = tuple(inliner.stmt(st, {}) for st in stages)
        ids, checks = _merge_checks([(d.check_ids, d.checks) for d in inliner.used.values()])
        if candidate:
            d = _definition(name, ids, checks, stages, shared=reads[name] > 1)
            if d.cost <= (SHARED_MAX_COST if d.shared else FUSED_MAX_COST):
                definitions[name] = d
                continue
        elif name in extents and not reads.get(name) and not checks and not kernel.checks:
            continue  # nothing reads it and it checks nothing: dead
        if inliner.used:
            params = _kernel_params(kernel, stages + checks, set(inliner.used))
            kernel = replace(kernel, body=Seq(checks + stages), params=params,
                             checks=tuple(sorted(set(ids) | set(kernel.checks))))
        kernels.append(kernel)
    produced = {k.output.name for k in kernels}
    intermediates = tuple(b for b in program.intermediates if b.name in produced)
    return replace(program, kernels=tuple(kernels), intermediates=intermediates)


def _definition(name, inlined_ids, inlined_checks, stages, shared: bool) -> Definition:
    own_checks, nest = stages[:-1], stages[-1]
    own_ids = tuple(_stage_check_id(c) for c in own_checks)
    ids, checks = _merge_checks([(inlined_ids, inlined_checks), (own_ids, own_checks)])
    vars_, extents, bindings, store = _compute_nest(nest)
    return Definition(name, checks, ids, vars_, extents, bindings, store.value, shared)


PROGRAM_PIPELINE = (inline_computes,)
