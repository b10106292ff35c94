"""Lowering: every graph node becomes a Kernel of loop nests (see SEMANTICS.md).

Each operator lowers itself, in its module of :mod:`cinnlite.ir.ops`; this module holds what
those lowerings share, so that every operator applies the same index policy the same way:
loop nests and fresh loop variables, :class:`IndexValue` (an index resolved under a mode), the
check nests of ``mode="raise"`` (:class:`LoweringContext`, which numbers them across a whole
program), and the kernel shapes of the operator families. :func:`lower_program` lowers a
program node by node through the operator registry.

Gathers are computes: "for every output position, this scalar expression". Scatters are an
explicit copy-then-update nest whose update is a :class:`Reduce` in row-major order of the
index positions. ``mode="raise"`` adds a check nest before the compute that reports the first
out-of-range position; the compute itself clamps, so no index can ever leave a buffer.
"""
from __future__ import annotations

import numpy as np

from ..dtypes import bfloat16, bool_, complex64, complex128, float16, float32, float64, int64, uint64
from ..errors import CompileError
from .graph import Node, Program
from .loopnest import (Binary, Buffer, Cast, Cmp, Const, Expr, If, IndexCheck, Kernel, Load,
                       LoweredProgram, Reduce, ReportIndexError, Select, Seq, Store, Var, as_expr, const,
                       logical_and, maximum, minimum)
from .symbolic import SYMBOL_BUFFER_PREFIX, dim_expr, symbol_buffer
from .transform import buffers_of, flat_position, loop_nest, walk_expr


#: The type a scatter's ``reduce="mean"`` sums data in (SEMANTICS.md): every other integer dtype
#: sums in int64; uint64 in uint64 (wrapping around), where its values fit.
MEAN_SUM_DTYPES = {float16.name: float32, bfloat16.name: float32, float32.name: float64, float64.name: float64,
                   uint64.name: uint64, complex64.name: complex128, complex128.name: complex128}
#: The type a scatter's ``reduce="add"``/``"mul"`` (and ``"sub"``) combines data in, where it is
#: not the data dtype: bfloat16 accumulates in float32 and is rounded once at the end (PyTorch).
ACCUMULATE_DTYPES = {bfloat16.name: float32}


def buffer_of(tensor) -> Buffer:
    """The loop-nest buffer of a graph tensor; symbolic sizes become the int64 expressions that
    read their symbols (``symbolic.dim_expr``)."""
    return Buffer(tensor.name, tensor.dtype, tuple(dim_expr(d) for d in tensor.shape))


def _static(size) -> bool:
    return isinstance(size, int)


class LoopVars:
    """Fresh loop variables for one kernel: i0, i1, ..."""

    def __init__(self):
        self.n = 0

    def make(self, count: int) -> list:
        out = [Var(f"i{self.n + k}") for k in range(count)]
        self.n += count
        return out


class IndexValue:
    """An index value resolved under a mode: ``index`` is always in ``[0, size)``;
    ``valid`` is False where ``mode="fill"`` must fill (or drop) instead.

    Signed indices count from the end when negative. Unsigned ones are never negative: a uint64
    value above the int64 range is out of range like any other too-large value (compared in
    uint64, never wrapped to a negative int64), so ``clip`` gives ``size - 1`` and ``wrap`` the
    true value modulo the size."""

    def __init__(self, raw, size, mode: str):
        v = _as_int64(raw)
        s = as_expr(size)
        self.valid = None
        if _static(size) and size == 0:
            # No position exists; only an empty index or "fill"/"raise" can get here.
            self.index, self.valid = const(0), Const(False, bool_)
            return
        if mode == "raise" and _static(size) and size & (size - 1) == 0:
            # The check proves the range, so any in-bounds guard will do: on a power-of-two
            # axis the wrap below is a mask, cheaper than a clamp, and equal on valid values.
            mode = "wrap"
        if not raw.dtype.is_signed:
            # raise: the check nest has proven the range; a clamp keeps memory safe regardless.
            self._unsigned(raw, size, "clip" if mode == "raise" else mode)
        elif mode == "raise":
            self.index = _checked_position(raw, size)
        elif mode == "clip":
            # numpy's clip: every negative value, -1 included, clips to 0.
            self.index = minimum(maximum(v, const(0)), _minus_one(size))
        elif mode == "wrap":
            r = Binary("mod", v, s)
            self.index = Select(Cmp("lt", r, const(0)), Binary("add", r, s), r)
        elif mode == "fill":
            # The position where the value has one, else a value of at least the size.
            u, s = _signed_position(v, size)
            self.valid = Cmp("lt", u, s)
            self.index = Select(self.valid, _as_int64(u), const(0))
        else:  # pragma: no cover - modes are validated when the node is built
            raise AssertionError(mode)

    def _unsigned(self, raw, size, mode):
        """clip, wrap and fill of a value that is never negative, compared in its own width
        class: int64 for the narrow unsigned dtypes (exact), uint64 for uint64."""
        w, s = _unsigned_operands(raw, size)
        if mode == "clip":
            self.index = _as_int64(minimum(w, _minus_one(size, w.dtype)))
        elif mode == "wrap":
            self.index = _as_int64(Binary("mod", w, s))
        elif mode == "fill":
            self.valid = Cmp("lt", w, s)
            self.index = Select(self.valid, _as_int64(w), const(0))
        else:  # pragma: no cover - modes are validated when the node is built
            raise AssertionError(mode)


def _checked_position(raw, size):
    """The position of a signed index value ``raw`` that ``mode="raise"`` checks (on an axis of
    ``size`` >= 1), 0 for any value the check flags: ``select(bad, 0, v < 0 ? v + size : v)``,
    ``bad`` being the check's own test (``out_of_range``), ``v`` the value as int64.

    Why: the check has computed ``bad`` already, and ``v < 0`` is the sign bit, which a vector
    blend reads as its mask: two vector instructions per four lanes on top of the check's, where
    clamping ``min(min(v, v + size), size - 1)`` in unsigned arithmetic took six on AVX2 (which
    has no unsigned 64-bit minimum). It is the hot path of every gather along an axis that is
    not a power of two or whose size is symbolic."""
    v = _as_int64(raw)
    position = Select(Cmp("lt", v, const(0)), Binary("add", v, as_expr(size)), v)
    return Select(out_of_range(raw, size), const(0), position)


def _signed_position(v, size):
    """(``u``, the size) in uint64 for an int64 index value ``v`` on an axis of ``size`` >= 1:
    ``u = min(v, v + size)`` is ``v``'s position where ``-size <= v < size`` (a negative ``v``,
    as unsigned, exceeds every position, so ``v + size`` is the smaller) and at least ``size``
    for every other value (``v + size`` wraps for none: sizes stay far below 2**63)."""
    w, s = _uint64_operands(v, size)
    return minimum(w, Binary("add", w, s)), s


def _uint64_operands(v, size):
    """An int64 value and an axis size as uint64."""
    return Cast(uint64, v), const(size, uint64) if _static(size) else Cast(uint64, as_expr(size))


def _as_int64(e):
    return e if e.dtype == int64 else Cast(int64, e)


def _unsigned_operands(raw, size):
    """An unsigned index value and an axis size in one type where both are exact: int64 for
    uint8/16/32 (which widen without loss), uint64 for uint64 (whose values may exceed int64)."""
    if raw.dtype == uint64:
        return raw, const(size, uint64) if _static(size) else Cast(uint64, as_expr(size))
    return _as_int64(raw), as_expr(size)


def _negated(size):
    return const(-size) if _static(size) else Binary("sub", const(0), size)


def _minus_one(size, dtype=int64):
    if _static(size):
        return const(size - 1, dtype)
    s = as_expr(size)
    return Binary("sub", s if dtype == int64 else Cast(dtype, s), const(1, dtype))


def out_of_range(raw, size):
    """True where an index value addresses nothing on an axis of ``size``: outside ``[-size, size-1]``
    (unsigned values: at least ``size``, compared without wrapping). An int64 value ``v`` is
    tested as ``uint64(v) + size >= 2 size``: ``v + size`` lies in ``[0, 2 size)`` exactly for
    the valid values, and wraps above ``2 size`` for every other (sizes stay far below 2**62).

    Why: one add and one compare, where two compares and an or took four vector instructions
    per four lanes, and ``_checked_position`` reuses the test for the address. LLVM folded the
    two compares into this itself for a number, not for a symbolic size: a shape-generic gather
    along the last axis of 25 M elements went from 7.5 to 6 instructions per element (two
    threads, Zen 3: 39.9 -> 31.0 ms). Narrower indices keep the two compares, which LLVM
    narrows to their own width."""
    if not raw.dtype.is_signed:
        w, s = _unsigned_operands(raw, size)
        return Cmp("ge", w, s)
    v = _as_int64(raw)
    if raw.dtype.itemsize < 8:
        return Binary("or", Cmp("lt", v, _negated(size)), Cmp("ge", v, as_expr(size)))
    size = size.value if isinstance(size, Const) else size
    w, s = _uint64_operands(v, size)
    return Cmp("ge", Binary("add", w, s), const(2 * size, uint64) if _static(size) else Binary("add", s, s))


def checked_bound(cond):
    """``(raw, size)`` where ``cond`` is ``out_of_range(raw, size)`` of an index load ``raw``
    (``size`` an int or an int64 expression); None for any other condition. Every candidate
    is confirmed by building the test again, so a condition of another shape is never misread.

    Why: a schedule that proves a block of indices lies in ``[0, size)`` may drop the tests and
    the position arithmetic that guard them (``schedule_cpu.version_checked_loops``)."""
    if isinstance(cond, Binary) and cond.op == "or" and isinstance(cond.b, Cmp):
        value, size = cond.b.a, cond.b.b            # int8/16/32: v < -size || v >= size
    elif isinstance(cond, Cmp) and cond.op == "ge" and isinstance(cond.a, Binary) and cond.a.op == "add":
        value, size = cond.a.a, cond.a.b            # int64: uint64(v) + size >= 2 size
        value = value.a if isinstance(value, Cast) else value
    elif isinstance(cond, Cmp) and cond.op == "ge":
        value, size = cond.a, cond.b                # unsigned: w >= size
    else:
        return None
    raw = value.a if isinstance(value, Cast) else value
    if isinstance(size, Const):
        size = int(size.value)
    elif isinstance(size, Cast) and size.to == uint64:
        size = size.a
    if not isinstance(raw, Load) or not raw.dtype.is_int or out_of_range(raw, size) != cond:
        return None
    return raw, size


class LoweringContext:
    """What the kernels of one program share while it is lowered: the table of index checks,
    whose ids number the ``mode="raise"`` checks in program order."""

    def __init__(self):
        self.checks: list[IndexCheck] = []

    def check_nest(self, node, index_buf: Buffer, sizes, tuple_axis=None):
        """A nest over every index element that reports the first out-of-range one."""
        cid = len(self.checks)
        self.checks.append(IndexCheck(cid, node.op, node.output.name, node.inputs[1].name, index_buf.name,
                                      index_buf.shape, tuple(sizes), tuple_axis, index_buf.dtype.name))
        vs = [Var(f"c{k}") for k in range(len(index_buf.shape))]
        size = sizes[0] if tuple_axis is None else None
        raw = Load(index_buf, tuple(vs))
        if tuple_axis is None:
            bad = out_of_range(raw, size)
        else:
            # The addressed axis depends on the tuple component: select its size.
            comp = vs[tuple_axis]
            s = as_expr(sizes[-1])
            for k in range(len(sizes) - 2, -1, -1):
                s = Select(Cmp("eq", comp, const(k)), as_expr(sizes[k]), s)
            bad = out_of_range(raw, s)
        # The value as int64: a uint64 value above the int64 range arrives as its bits, which
        # IndexCheck.error reads back as the true value (its index_dtype says so).
        body = If(bad, ReportIndexError(cid, flat_position(vs, index_buf.shape), _as_int64(raw)))
        return cid, loop_nest(vs, index_buf.shape, body)

    def with_check(self, node, mode, index_buf, sizes, compute, tuple_axis=None):
        """``compute`` behind the check nest of ``index_buf`` in mode raise, and the ids of the
        checks it holds. ``sizes`` are the sizes of the axes the index addresses (one per tuple
        component, ``tuple_axis`` the index axis the tuples run along)."""
        if mode != "raise" or (_static(index_buf.size) and index_buf.size == 0):
            return compute, ()
        cid, nest = self.check_nest(node, index_buf, sizes, tuple_axis)
        return Seq((nest, compute)), (cid,)


def make_kernel(node: Node, body, temps=(), checks=(), pure=True) -> Kernel:
    """The kernel of ``node``: its inputs, the symbolic sizes its loops and buffers read, and its
    output as parameters; ``body`` its loop nests."""
    params = tuple(buffer_of(t) for t in node.inputs)
    output = buffer_of(node.output)
    symbols = {b.name: b for b in buffers_of(body) if b.name.startswith(SYMBOL_BUFFER_PREFIX)}
    for b in params + (output,):
        for d in b.shape:
            for x in walk_expr(d) if isinstance(d, Expr) else ():
                if isinstance(x, Load):
                    symbols.setdefault(x.buffer.name, x.buffer)
    named = {b.name for b in params}
    params += tuple(b for name, b in symbols.items() if name not in named) + (output,)
    return Kernel(node.output.name, node.op, params, buffer_of(node.output), body, tuple(temps),
                  tuple(checks), pure)


# -- gathers ---------------------------------------------------------------------------------------


def gather_value(xbuf, x_pos, resolved, fill_value):
    """Load x at ``x_pos``; where any resolved index is invalid (fill mode) give fill."""
    valids = [r.valid for r in resolved if r.valid is not None]
    if any(isinstance(v, Const) and v.value is False for v in valids):
        return const(fill_value, xbuf.dtype)
    value = Load(xbuf, tuple(x_pos))
    if valids:
        value = Select(logical_and(*valids), value, const(fill_value, xbuf.dtype))
    return value


def tuple_load(idx, layout, outer, k):
    """Component ``k`` of the index tuple at position ``outer``, whichever way tuples run."""
    pos = (const(k),) + tuple(outer) if layout == "first" else tuple(outer) + (const(k),)
    return Load(idx, pos)


# -- elementwise -----------------------------------------------------------------------------------


def elementwise_kernel(node: Node, make_value) -> Kernel:
    """A compute over the output whose value is ``make_value`` of one load per input, each
    input broadcast to the output shape (numpy rules)."""
    out = buffer_of(node.output)
    o = LoopVars().make(len(out.shape))

    def operand(t):
        # Broadcasting: align trailing axes; a size-1 axis always reads position 0.
        buf = buffer_of(t)
        lead = len(out.shape) - len(buf.shape)
        idx = tuple(const(0) if d == 1 and out.shape[lead + j] != 1 else o[lead + j]
                    for j, d in enumerate(buf.shape))
        return Load(buf, idx)

    value = make_value(*[operand(t) for t in node.inputs])
    return make_kernel(node, loop_nest(o, out.shape, Store(out, tuple(o), value)))


# -- scatters --------------------------------------------------------------------------------------


def scatter_kernel(ctx: LoweringContext, node: Node, attrs, update_space, make_update, index_buf, sizes,
                   tuple_axis=None) -> Kernel:
    """copy x -> out; [check]; update nest (for mean, see :func:`mean_stages`; for the dtypes of
    :data:`ACCUMULATE_DTYPES`, :func:`accumulate_stages`).

    ``attrs`` has the scatter's ``reduce`` and ``mode``; ``make_update(vars)`` returns
    ``(target_position, value, resolved_indices)`` for the update at position ``vars`` of
    ``update_space``.
    """
    x = buffer_of(node.inputs[0])
    out = buffer_of(node.output)
    vars_ = LoopVars()
    c = vars_.make(len(out.shape))
    u = vars_.make(len(update_space))
    target, value, resolved = make_update(u)
    valids = [r.valid for r in resolved if r.valid is not None]

    def update_nest(update):
        """The update loops around ``update``, which fill mode skips for a dropped index."""
        return loop_nest(u, update_space, If(logical_and(*valids), update) if valids else update)

    include_self = attrs.include_self
    combine, combined = combine_of(attrs.reduce, value)
    wide = ACCUMULATE_DTYPES.get(out.dtype.name) if combine in ("add", "mul") else None
    if attrs.reduce == "mean":
        f = vars_.make(len(out.shape))
        temps, stmts = mean_stages(x, out, c, f, tuple(target), value, update_nest, include_self)
    elif wide is not None:
        f = vars_.make(len(out.shape))
        temps, stmts = accumulate_stages(x, out, c, f, tuple(target), combined, combine, wide, update_nest,
                                         include_self)
    else:
        value = combined
        copy = loop_nest(c, out.shape, Store(out, tuple(c), Load(x, tuple(c))))
        # Without x: every target an update lands on starts from the combine's identity.
        reset = () if include_self else (update_nest(Store(out, tuple(target), identity(combine, out.dtype))),)
        temps, stmts = (), (copy,) + reset + (update_nest(Reduce(out, tuple(target), value, combine)),)
    body, checks = ctx.with_check(node, attrs.mode, index_buf, sizes, Seq(stmts), tuple_axis)
    return make_kernel(node, body, temps=temps, checks=checks, pure=False)


def combine_of(reduce: str, value):
    """The :class:`Reduce` combine of a scatter's ``reduce``, and the value it combines: a
    difference adds the negated update (exact: ``x - u == x + (-u)``, wrapping alike on
    integers); on bool, add and max are a logical or, mul and min a logical and (PyTorch)."""
    if reduce == "sub":
        if value.dtype.is_float:
            negated = Binary("mul", value, const(-1.0, value.dtype))
        elif value.dtype.is_complex:  # (-0 - 0j) - u negates both parts exactly, signs of zero too
            negated = Binary("sub", const(complex(-0.0, -0.0), value.dtype), value)
        else:
            negated = Binary("sub", const(0, value.dtype), value)
        return "add", negated
    if value.dtype.is_bool:
        return {"add": "max", "mul": "min"}.get(reduce, reduce), value
    return reduce, value


def identity(combine: str, dtype):
    """The value that ``combine`` leaves any other unchanged: what ``include_self=False``
    starts a target from."""
    if combine == "add":
        return const(0, dtype)
    if combine == "mul":
        return const(1, dtype)
    if dtype.is_bool:
        return const(combine == "min", dtype)
    if dtype.is_float:
        return const(float("-inf") if combine == "max" else float("inf"), dtype)
    info = np.iinfo(dtype.np)
    return const(info.min if combine == "max" else info.max, dtype)


def accumulate_stages(x, out, init_vars, finish_vars, target, value, combine, wide, update_nest, include_self=True):
    """``combine`` of x and every update in ``wide`` (:data:`ACCUMULATE_DTYPES`), rounded once to
    the data dtype at the end: a kernel temp starts as x converted (or, without
    ``include_self``, as the combine's identity wherever an update lands), every update is
    combined into it, and the last stage converts every element back (exact where nothing
    landed)."""
    acc = Buffer(f"{out.name}__acc", wide, out.shape)
    z, f = tuple(init_vars), tuple(finish_vars)
    init = loop_nest(z, out.shape, Store(acc, z, Cast(wide, Load(x, z))))
    reset = () if include_self else (update_nest(Store(acc, target, identity(combine, wide))),)
    update = update_nest(Reduce(acc, target, Cast(wide, value), combine))
    finish = loop_nest(f, out.shape, Store(out, f, Cast(out.dtype, Load(acc, f))))
    return (acc,), (init,) + reset + (update, finish)


def mean_stages(x, out, init_vars, finish_vars, target, value, update_nest, include_self=True):
    """A true mean: the sum of x and every update, over their count, rounded once.

    The sum accumulates in a kernel temp of :data:`MEAN_SUM_DTYPES` (int64 wrapping around
    for integers, uint64 for uint64), so that neither a float16 sum that stops growing nor an int8 sum that
    wraps spoils the quotient; the count is int64. The last stage writes every element:
    the quotient where an update landed, x elsewhere. Without ``include_self`` every sum starts
    from 0 and x is not counted, so no pass over the updates has to reset their targets."""
    wide = MEAN_SUM_DTYPES.get(out.dtype.name, int64)
    total = Buffer(f"{out.name}__sum", wide, out.shape)
    count = Buffer(f"{out.name}__count", int64, out.shape)
    z, f = tuple(init_vars), tuple(finish_vars)
    start = Cast(wide, Load(x, z)) if include_self else const(0, wide)
    init = loop_nest(z, out.shape, Seq((Store(total, z, start), Store(count, z, const(0)))))
    update = Seq((Reduce(total, target, Cast(wide, value), "add"), Reduce(count, target, const(1), "add")))
    n = Load(count, f)
    # Integers: the floor of the quotient (PyTorch's integer scatter mean), which is no larger
    # in magnitude than the sum, so it fits back. Floats: the float64 quotient, rounded once
    # more to the data dtype. uint64 divides in uint64 (its quotient is the floor already).
    # Complex: the complex128 sum divided by the count as numpy divides it (a complex division
    # by count + 0j), rounded once more.
    divide_in = float64 if out.dtype.is_float else wide
    # Without x an untouched target counts 0: divide by 1 there (its quotient is not used, but
    # an integer division by zero would trap before the select picks x).
    counted = Binary("add", n, const(1)) if include_self else maximum(n, const(1))
    dividend, divisor = Cast(divide_in, Load(total, f)), Cast(divide_in, counted)
    quotient = Binary("div", dividend, divisor)
    if divide_in == int64:
        # int64 division truncates; the divisor is positive, so a negative remainder means the
        # floor is one less.
        remainder = Binary("sub", dividend, Binary("mul", quotient, divisor))
        quotient = Select(Cmp("lt", remainder, const(0)), Binary("sub", quotient, const(1)), quotient)
    mean = Select(Cmp("gt", n, const(0)), Cast(out.dtype, quotient), Load(x, f))
    finish = loop_nest(f, out.shape, Store(out, f, mean))
    return (total, count), (init, update_nest(update), finish)


# -- programs --------------------------------------------------------------------------------------


def lower_program(program: Program) -> LoweredProgram:
    """Lower every node of ``program`` into kernels, in program order."""
    from .ops import OPERATORS  # the operator modules build on this module, so they load after it

    ctx = LoweringContext()
    kernels = []
    constants = []
    for node in program.nodes:
        definition = OPERATORS[node.op]
        attrs = definition.attrs_of(node)
        if definition.lower is None:  # data, bound as a buffer: a constant
            constants.append((buffer_of(node.output), attrs.value))
        else:
            kernels.append(definition.lower(ctx, node, attrs))
    inputs = tuple(buffer_of(t) for t in program.inputs)
    outputs = tuple(buffer_of(t) for t in program.outputs)
    out_names = {b.name for b in outputs}
    const_names = {b.name for b, _ in constants}
    intermediates = tuple(k.output for k in kernels
                          if k.output.name not in out_names and k.output.name not in const_names)
    symbols = tuple(symbol_buffer(s) for s in program.symbols)
    taken = set(program.tensors)
    clash = [b.name for b in symbols if b.name in taken]
    if clash:
        raise CompileError(f"program '{program.name}': tensor name {clash[0]!r} is the reserved name of a "
                           f"symbolic size; rename the tensor")
    return LoweredProgram(program.name, tuple(kernels), inputs, outputs, tuple(constants),
                          intermediates, tuple(ctx.checks), symbols)
