"""Lowering: every graph node becomes a Kernel of loop nests (see SEMANTICS.md).

Gathers are computes: "for every output position, this scalar expression". Scatters are an
explicit copy-then-update nest whose update is a :class:`Reduce` in row-major order of the
index positions. ``mode="raise"`` adds a check nest before the compute that reports the first
out-of-range position; the compute itself clamps, so no index can ever leave a buffer.
"""
from __future__ import annotations

from ..dtypes import bool_, float16, float32, float64, int64
from .graph import Program
from .loopnest import (Binary, Buffer, Cast, Cmp, Const, For, If, IndexCheck, Kernel, Load,
                       LoweredProgram, Reduce, ReportIndexError, Select, Seq, Store, Var, const,
                       logical_and, maximum, minimum)
from .transform import flat_position, loop_nest


#: The type a scatter's ``reduce="mean"`` sums float data in (SEMANTICS.md); integers use int64.
MEAN_SUM_DTYPES = {float16.name: float32, float32.name: float64, float64.name: float64}


def buffer_of(tensor) -> Buffer:
    return Buffer(tensor.name, tensor.dtype, tuple(tensor.shape))


class _Vars:
    """Fresh loop variables for one kernel: i0, i1, ..."""

    def __init__(self):
        self.n = 0

    def make(self, count: int) -> list:
        out = [Var(f"i{self.n + k}") for k in range(count)]
        self.n += count
        return out


class IndexValue:
    """An index value resolved under a mode: ``index`` is always in ``[0, size)``;
    ``valid`` is False where ``mode="fill"`` must fill (or drop) instead."""

    def __init__(self, raw, size: int, mode: str):
        v = raw if raw.dtype == int64 else Cast(int64, raw)
        s = const(size)
        self.valid = None
        if size == 0:
            # No position exists; only an empty index or "fill"/"raise" can get here.
            self.index, self.valid = const(0), Const(False, bool_)
            return
        wrapped_neg = Select(Cmp("lt", v, const(0)), Binary("add", v, s), v)
        if mode == "raise" and size & (size - 1) == 0:
            # The check proves the range, so any in-bounds guard will do: on a power-of-two
            # axis the wrap below is a mask, cheaper than a clamp, and equal on valid values.
            mode = "wrap"
        if mode in ("raise", "clip"):
            # raise: the check nest has proven the range; clamping keeps memory safe regardless.
            self.index = minimum(maximum(wrapped_neg, const(0)), const(size - 1))
        elif mode == "wrap":
            r = Binary("mod", v, s)
            self.index = Select(Cmp("lt", r, const(0)), Binary("add", r, s), r)
        elif mode == "fill":
            self.valid = logical_and(Cmp("ge", v, const(-size)), Cmp("lt", v, s))
            self.index = Select(self.valid, wrapped_neg, const(0))
        else:  # pragma: no cover - modes are validated when the node is built
            raise AssertionError(mode)


def divide(a, b):
    """Floats: IEEE division. Integers: floor division (numpy ``//``) with ``x // 0 == 0`` and
    ``MIN // -1 == MIN``, written so that no machine division can trap or be undefined."""
    if a.dtype.is_float:
        return Binary("div", a, b)
    t = a.dtype
    zero, one = const(0, t), const(1, t)
    if not t.is_signed:
        safe = Select(Cmp("eq", b, zero), one, b)
        return Select(Cmp("eq", b, zero), zero, Binary("div", a, safe))
    minus_one = const(-1, t)
    safe = Select(Binary("or", Cmp("eq", b, zero), Cmp("eq", b, minus_one)), one, b)
    q = Binary("div", a, safe)
    r = Binary("sub", a, Binary("mul", q, safe))
    # Truncation rounded toward zero; floor differs when the remainder's sign differs from b's.
    floor_q = Select(Binary("and", Cmp("ne", r, zero), Cmp("ne", Cmp("lt", r, zero), Cmp("lt", b, zero))),
                     Binary("sub", q, one), q)
    negated = Binary("sub", zero, a)  # a // -1, wrapping at MIN like numpy
    return Select(Cmp("eq", b, zero), zero, Select(Cmp("eq", b, minus_one), negated, floor_q))


def out_of_range(raw, size: int):
    v = raw if raw.dtype == int64 else Cast(int64, raw)
    return Binary("or", Cmp("lt", v, const(-size)), Cmp("ge", v, const(size)))


class Lowerer:
    """Lowers one Program; keeps the check table shared by all its kernels."""

    def __init__(self, program: Program):
        self.program = program
        self.checks: list[IndexCheck] = []

    # -- mode="raise" ------------------------------------------------------------------------

    def check_nest(self, node, index_buf: Buffer, sizes, tuple_axis=None):
        """A nest over every index element that reports the first out-of-range one."""
        cid = len(self.checks)
        self.checks.append(IndexCheck(cid, node.op, node.output.name, node.inputs[1].name, index_buf.name,
                                      index_buf.shape, tuple(sizes), tuple_axis))
        vs = [Var(f"c{k}") for k in range(len(index_buf.shape))]
        size = sizes[0] if tuple_axis is None else None
        raw = Load(index_buf, tuple(vs))
        if tuple_axis is None:
            bad = out_of_range(raw, size)
        else:
            # The addressed axis depends on the tuple component: select its size.
            comp = vs[tuple_axis]
            s = const(sizes[-1])
            for k in range(len(sizes) - 2, -1, -1):
                s = Select(Cmp("eq", comp, const(k)), const(sizes[k]), s)
            v = raw if raw.dtype == int64 else Cast(int64, raw)
            bad = Binary("or", Cmp("lt", v, Binary("sub", const(0), s)), Cmp("ge", v, s))
        value = raw if raw.dtype == int64 else Cast(int64, raw)
        body = If(bad, ReportIndexError(cid, flat_position(vs, index_buf.shape), value))
        return cid, loop_nest(vs, index_buf.shape, body)

    # -- per operator ------------------------------------------------------------------------

    def lower(self) -> LoweredProgram:
        kernels = []
        constants = []
        for node in self.program.nodes:
            if node.op == "constant":
                constants.append((buffer_of(node.output), node.attr("value")))
                continue
            kernels.append(getattr(self, f"lower_{node.op}")(node))
        inputs = tuple(buffer_of(t) for t in self.program.inputs)
        outputs = tuple(buffer_of(t) for t in self.program.outputs)
        out_names = {b.name for b in outputs}
        const_names = {b.name for b, _ in constants}
        intermediates = tuple(k.output for k in kernels
                              if k.output.name not in out_names and k.output.name not in const_names)
        return LoweredProgram(self.program.name, tuple(kernels), inputs, outputs, tuple(constants),
                              intermediates, tuple(self.checks))

    def _kernel(self, node, body, temps=(), checks=(), pure=True):
        params = tuple(buffer_of(t) for t in node.inputs) + (buffer_of(node.output),)
        return Kernel(node.output.name, node.op, params, buffer_of(node.output), body, tuple(temps),
                      tuple(checks), pure)

    def _with_check(self, node, index_buf, sizes, compute, tuple_axis=None):
        if node.attr("mode") != "raise" or index_buf.size == 0:
            return compute, ()
        cid, nest = self.check_nest(node, index_buf, sizes, tuple_axis)
        return Seq((nest, compute)), (cid,)

    def lower_fill_constant(self, node):
        out = buffer_of(node.output)
        vs = _Vars().make(len(out.shape))
        body = loop_nest(vs, out.shape, Store(out, tuple(vs), const(node.attr("value"), out.dtype)))
        return self._kernel(node, body)

    def lower_reshape(self, node):
        x, out = node.inputs[0], node.output
        flat_in = Buffer(x.name, x.dtype, (x.size,))
        flat_out = Buffer(out.name, out.dtype, (out.size,))
        (i,) = _Vars().make(1)
        body = For(i, const(out.size), Store(flat_out, (i,), Load(flat_in, (i,))))
        return self._kernel(node, body)

    def _gather_value(self, xbuf, x_pos, resolved, fill_value):
        """Load x at ``x_pos``; where any resolved index is invalid (fill mode) give fill."""
        valids = [r.valid for r in resolved if r.valid is not None]
        if any(isinstance(v, Const) and v.value is False for v in valids):
            return const(fill_value, xbuf.dtype)
        value = Load(xbuf, tuple(x_pos))
        if valids:
            value = Select(logical_and(*valids), value, const(fill_value, xbuf.dtype))
        return value

    def lower_take(self, node):
        x, idx = (buffer_of(t) for t in node.inputs)
        out = buffer_of(node.output)
        axis, b, mode = node.attr("axis"), node.attr("batch_dims"), node.attr("mode")
        q = len(idx.shape)
        o = _Vars().make(len(out.shape))
        idx_pos = tuple(o[:b]) + tuple(o[axis:axis + q - b])
        r = IndexValue(Load(idx, idx_pos), x.shape[axis], mode)
        x_pos = list(o[:axis]) + [r.index] + list(o[axis + q - b:])
        value = self._gather_value(x, x_pos, [r], node.attr("fill_value"))
        compute = loop_nest(o, out.shape, Store(out, tuple(o), value))
        body, checks = self._with_check(node, idx, (x.shape[axis],), compute)
        return self._kernel(node, body, checks=checks)

    def lower_gather(self, node):
        x, idx = (buffer_of(t) for t in node.inputs)
        out = buffer_of(node.output)
        axis, mode = node.attr("axis"), node.attr("mode")
        o = _Vars().make(len(out.shape))
        r = IndexValue(Load(idx, tuple(o)), x.shape[axis], mode)
        x_pos = list(o)
        x_pos[axis] = r.index
        value = self._gather_value(x, x_pos, [r], node.attr("fill_value"))
        compute = loop_nest(o, out.shape, Store(out, tuple(o), value))
        body, checks = self._with_check(node, idx, (x.shape[axis],), compute)
        return self._kernel(node, body, checks=checks)

    @staticmethod
    def _tuple_load(idx, layout, outer, k):
        pos = (const(k),) + tuple(outer) if layout == "first" else tuple(outer) + (const(k),)
        return Load(idx, pos)

    def lower_gather_nd(self, node):
        x, idx = (buffer_of(t) for t in node.inputs)
        out = buffer_of(node.output)
        b, dims, layout, mode = (node.attr(k) for k in ("batch_dims", "dims", "index_layout", "mode"))
        q = len(idx.shape)
        m = idx.shape[0] if layout == "first" else idx.shape[-1]
        o = _Vars().make(len(out.shape))
        if dims is None:
            outer = o[:q - 1]
            resolved = [IndexValue(self._tuple_load(idx, layout, outer, k), x.shape[b + k], mode) for k in range(m)]
            x_pos = list(o[:b]) + [r.index for r in resolved] + list(o[q - 1:])
            sizes = tuple(x.shape[b:b + m])
        else:
            resolved = [IndexValue(self._tuple_load(idx, layout, o, k), x.shape[d], mode) for k, d in enumerate(dims)]
            x_pos = list(o)
            for r, d in zip(resolved, dims):
                x_pos[d] = r.index
            sizes = tuple(x.shape[d] for d in dims)
        value = self._gather_value(x, x_pos, resolved, node.attr("fill_value"))
        compute = loop_nest(o, out.shape, Store(out, tuple(o), value))
        tuple_axis = 0 if layout == "first" else q - 1
        body, checks = self._with_check(node, idx, sizes, compute, tuple_axis=tuple_axis)
        return self._kernel(node, body, checks=checks)

    # -- elementwise -----------------------------------------------------------------------------

    def _elementwise(self, node, make_value):
        out = buffer_of(node.output)
        o = _Vars().make(len(out.shape))

        def operand(t):
            # Broadcasting: align trailing axes; a size-1 axis always reads position 0.
            buf = buffer_of(t)
            lead = len(out.shape) - len(buf.shape)
            idx = tuple(const(0) if d == 1 and out.shape[lead + j] != 1 else o[lead + j]
                        for j, d in enumerate(buf.shape))
            return Load(buf, idx)

        value = make_value(*[operand(t) for t in node.inputs])
        return self._kernel(node, loop_nest(o, out.shape, Store(out, tuple(o), value)))

    def lower_add(self, node):
        return self._elementwise(node, lambda a, b: Binary("add", a, b))

    def lower_subtract(self, node):
        return self._elementwise(node, lambda a, b: Binary("sub", a, b))

    def lower_multiply(self, node):
        return self._elementwise(node, lambda a, b: Binary("mul", a, b))

    def lower_maximum(self, node):
        return self._elementwise(node, lambda a, b: Binary("max", a, b))

    def lower_minimum(self, node):
        return self._elementwise(node, lambda a, b: Binary("min", a, b))

    def lower_divide(self, node):
        return self._elementwise(node, lambda a, b: divide(a, b))

    def lower_cast(self, node):
        return self._elementwise(node, lambda x: Cast(node.output.dtype, x))

    # -- scatters ------------------------------------------------------------------------------

    def _scatter_kernel(self, node, update_space, make_update, index_buf, sizes, tuple_axis=None):
        """copy x -> out; [check]; update nest (for mean, see :meth:`_mean_stages`).

        ``make_update(vars)`` returns ``(target_position, value, resolved_indices)``.
        """
        x = buffer_of(node.inputs[0])
        out = buffer_of(node.output)
        reduce = node.attr("reduce")
        vars_ = _Vars()
        c = vars_.make(len(out.shape))
        u = vars_.make(len(update_space))
        target, value, resolved = make_update(u)
        valids = [r.valid for r in resolved if r.valid is not None]

        def update_nest(update):
            """The update loops around ``update``, which fill mode skips for a dropped index."""
            return loop_nest(u, update_space, If(logical_and(*valids), update) if valids else update)

        if reduce == "mean":
            f = vars_.make(len(out.shape))
            temps, stmts = self._mean_stages(x, out, c, f, tuple(target), value, update_nest)
        else:
            copy = loop_nest(c, out.shape, Store(out, tuple(c), Load(x, tuple(c))))
            temps, stmts = (), (copy, update_nest(Reduce(out, tuple(target), value, reduce)))
        body, checks = self._with_check(node, index_buf, sizes, Seq(stmts), tuple_axis)
        return self._kernel(node, body, temps=temps, checks=checks, pure=False)

    @staticmethod
    def _mean_stages(x, out, init_vars, finish_vars, target, value, update_nest):
        """A true mean: the sum of x and every update, over their count, rounded once.

        The sum accumulates in a kernel temp of :data:`MEAN_SUM_DTYPES` (int64 wrapping around
        for integers), so that neither a float16 sum that stops growing nor an int8 sum that
        wraps spoils the quotient; the count is int64. The last stage writes every element:
        the quotient where an update landed, x elsewhere."""
        wide = MEAN_SUM_DTYPES.get(out.dtype.name, int64)
        total = Buffer(f"{out.name}__sum", wide, out.shape)
        count = Buffer(f"{out.name}__count", int64, out.shape)
        z, f = tuple(init_vars), tuple(finish_vars)
        init = loop_nest(z, out.shape, Seq((Store(total, z, Cast(wide, Load(x, z))), Store(count, z, const(0)))))
        update = Seq((Reduce(total, target, Cast(wide, value), "add"), Reduce(count, target, const(1), "add")))
        n = Load(count, f)
        # Integers: int64 division rounds toward zero, and the quotient is no larger than the
        # sum, so it fits back. Floats: the float64 quotient, rounded once more to the data dtype.
        divide_in = float64 if out.dtype.is_float else int64
        quotient = Binary("div", Cast(divide_in, Load(total, f)), Cast(divide_in, Binary("add", n, const(1))))
        mean = Select(Cmp("gt", n, const(0)), Cast(out.dtype, quotient), Load(x, f))
        finish = loop_nest(f, out.shape, Store(out, f, mean))
        return (total, count), (init, update_nest(update), finish)

    def lower_scatter(self, node):
        x, idx, src = (buffer_of(t) for t in node.inputs)
        axis, mode = node.attr("axis"), node.attr("mode")

        def update(u):
            r = IndexValue(Load(idx, tuple(u)), x.shape[axis], mode)
            t = list(u)
            t[axis] = r.index
            return t, Load(src, tuple(u)), [r]

        return self._scatter_kernel(node, idx.shape, update, idx, (x.shape[axis],))

    def lower_scatter_nd(self, node):
        x, idx, src = (buffer_of(t) for t in node.inputs)
        dims, layout, mode = node.attr("dims"), node.attr("index_layout"), node.attr("mode")
        q = len(idx.shape)
        m = idx.shape[0] if layout == "first" else idx.shape[-1]
        tuple_axis = 0 if layout == "first" else q - 1
        if dims is None:
            space = tuple(src.shape)

            def update(u):
                outer, rho = u[:q - 1], u[q - 1:]
                rs = [IndexValue(self._tuple_load(idx, layout, outer, k), x.shape[k], mode) for k in range(m)]
                return [r.index for r in rs] + list(rho), Load(src, tuple(u)), rs

            sizes = tuple(x.shape[:m])
        else:
            space = tuple(src.shape)

            def update(u):
                rs = [IndexValue(self._tuple_load(idx, layout, u, k), x.shape[d], mode) for k, d in enumerate(dims)]
                t = list(u)
                for r, d in zip(rs, dims):
                    t[d] = r.index
                return t, Load(src, tuple(u)), rs

            sizes = tuple(x.shape[d] for d in dims)
        return self._scatter_kernel(node, space, update, idx, sizes, tuple_axis)


def lower_program(program: Program) -> LoweredProgram:
    """Lower every node of ``program`` into kernels, in program order."""
    return Lowerer(program).lower()
