"""Fusion: inline pure computes (gathers, fills, reshapes, elementwise ops) into their consumers.

A pure kernel computes ``out[v] = f(v)`` for every position ``v``. Where its output is not a
program output, every ``Load(out, idx)`` in a consumer can be replaced by ``f(idx)``, and the
kernel and its buffer disappear: the (1 000 000, 64) rows a take produces for a scatter are never
materialised. The producer's ``mode="raise"`` check stages move in front of each consumer, so
errors still surface, and still name the producer.
"""
from __future__ import annotations

from dataclasses import replace

from .loopnest import Const, For, Kernel, Load, LoweredProgram, ReportIndexError, Seq, Store
from .transform import flat_position, kernel_stages, loads_of, map_stmt, stmt_exprs, substitute_expr, walk_stmt


def compute_definition(kernel: Kernel):
    """``(check stages, loop vars, extents, store)`` if the kernel is one compute nest (after
    optional check stages) that stores every position of its output once; else None."""
    if not kernel.pure:
        return None
    stages = kernel_stages(kernel)
    checks, nest = stages[:-1], stages[-1]
    if not all(any(isinstance(x, ReportIndexError) for x in walk_stmt(c)) for c in checks):
        return None
    vars_, extents, s = [], [], nest
    while isinstance(s, For):
        if not isinstance(s.extent, Const):
            return None
        vars_.append(s.var)
        extents.append(s.extent.value)
        s = s.body
    if not isinstance(s, Store) or s.buffer.name != kernel.output.name or tuple(s.indices) != tuple(vars_):
        return None
    if tuple(extents) != tuple(s.buffer.shape):
        return None
    return checks, tuple(vars_), tuple(extents), s


def _inline_loads(expr_fn_target: str, define):
    """An expression rewriter replacing loads of ``expr_fn_target`` by the definition."""
    _, vars_, extents, store = define

    def rewrite(e):
        if isinstance(e, Load) and e.buffer.name == expr_fn_target:
            idx = e.indices
            if len(vars_) == len(idx) and tuple(e.buffer.shape) == extents:
                mapping = dict(zip(vars_, idx))
            elif len(vars_) == 1:
                # The producer's loop runs over the flat buffer (reshape): flatten the access.
                mapping = {vars_[0]: flat_position(idx, e.buffer.shape)}
            else:
                raise _CannotInline
            return substitute_expr(store.value, mapping)
        return e

    return rewrite


class _CannotInline(Exception):
    pass


def _reads(kernel: Kernel, name: str) -> bool:
    return any(loads_of(e, name) for st in walk_stmt(kernel.body) for e in stmt_exprs(st))


def inline_computes(program: LoweredProgram, keep_index_buffers: bool = True) -> LoweredProgram:
    """Inline every pure kernel whose output is not a program output into its consumers.

    With ``keep_index_buffers`` (for backends whose errors read the bad value back from the
    index buffer), index tensors that a ``mode="raise"`` check reads stay materialised."""
    outputs = {b.name for b in program.outputs}
    if keep_index_buffers:
        outputs |= {c.buffer for c in program.checks}
    kernels = list(program.kernels)
    # How many leading stages of each kernel are checks of producers inlined into it: the
    # next producer's checks go after them, so checks keep the unfused program's order.
    inlined_checks: dict = {}
    changed = True
    while changed:
        changed = False
        for pi, producer in enumerate(kernels):
            if producer.output.name in outputs:
                continue
            define = compute_definition(producer)
            if define is None:
                continue
            consumers = [k for k in kernels[pi + 1:] if _reads(k, producer.output.name)]
            if not consumers and producer.checks:
                # Nothing reads the values any more (a consumer folded them away), but the
                # producer's mode="raise" checks must still run: keep it whole.
                continue
            try:
                fused, counts = {}, {}
                for k in consumers:
                    rewrite = _inline_loads(producer.output.name, define)
                    body = map_stmt(k.body, rewrite)
                    stages = kernel_stages(replace(k, body=body))
                    at = inlined_checks.get(k.name, 0)
                    body = Seq(stages[:at] + tuple(define[0]) + stages[at:])
                    counts[k.name] = at + len(define[0])
                    gone = (producer.output.name, k.output.name)
                    params = [b for b in k.params if b.name not in gone]
                    params += [b for b in producer.params
                               if b.name != producer.output.name and b.name not in {p.name for p in params}]
                    params = tuple(params) + (k.output,)
                    fused[k.name] = replace(k, body=body, params=params,
                                            checks=tuple(producer.checks) + tuple(k.checks))
            except _CannotInline:
                continue
            kernels = [fused.get(k.name, k) for i, k in enumerate(kernels) if i != pi]
            inlined_checks.update(counts)
            changed = True
            break
    produced = {k.output.name for k in kernels}
    intermediates = tuple(b for b in program.intermediates if b.name in produced)
    return replace(program, kernels=tuple(kernels), intermediates=intermediates)


PROGRAM_PIPELINE = (inline_computes,)
