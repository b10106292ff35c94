"""Reverse-mode gradients: :func:`vjp` turns a program into the program of its vector-Jacobian
product, built from the same operators (SEMANTICS.md, "Gradients").

The backward program starts as the forward one (its inputs and nodes, so the backward can read
any forward value) and adds, node by node in reverse order, the operators of each node's rule in
:data:`RULES`. A gather's gradient is a scatter-add of the cotangent, a scatter's a gather of it;
every rule resolves indices with the node's own ``mode``, so an index the forward clipped or
wrapped sends its gradient where the forward read, and a ``fill`` position gets none.
"""
from __future__ import annotations

from typing import Sequence

from .errors import ValidationError
from .frontend.netbuilder import NetBuilder
from .ir.graph import Node, Program, Tensor
from .ir.symbolic import prod


def differentiable(tensor: Tensor) -> bool:
    """Real floating-point tensors carry gradients; integers, bools (indices, masks) and complex
    numbers do not."""
    return tensor.dtype.is_float


def vjp(program: Program, wrt: Sequence[str] | None = None) -> Program:
    """The backward program of ``program``.

    Its inputs are the forward inputs, then one cotangent per forward output, named
    ``grad_<output>``, of the output's shape and dtype (outputs that are not floating point
    have none). Its outputs are ``grad_<input>`` for each input named in ``wrt`` (default: every
    floating-point input), in ``wrt`` order: the sum over outputs of each cotangent times the
    output's derivative (zeros where an input does not reach any output)."""
    if not isinstance(program, Program):
        raise TypeError(f"vjp() takes a Program, got {type(program).__name__}")
    inputs = {t.name: t for t in program.inputs}
    wrt = _checked_wrt(program, inputs, wrt)
    b = NetBuilder.extending(program, f"{program.name}_vjp")
    grads: dict[str, Tensor] = {}
    cotangents = set()
    for out in program.outputs:
        if differentiable(out):
            if out.name in inputs:
                raise ValidationError("vjp", "outputs are computed",
                                      f"output '{out.name}' is an input; its cotangent would take the name of the "
                                      "input's gradient")
            cotangent = b.create_input(out.dtype, out.shape, f"grad_{out.name}")
            cotangents.add(cotangent.name)
            _accumulate(b, grads, out.name, cotangent)
    needed = _needing_gradients(program, set(wrt))
    for node in reversed(program.nodes):
        g = grads.get(node.output.name)
        if g is None or not any(t.name in needed for t in node.inputs):
            continue
        rule = RULES.get(node.op)
        if rule is None:
            raise ValidationError("vjp", "every operator on the path has a gradient rule",
                                  f"operator {node.op} ('{node.output.name}') has no gradient rule")
        contributions = rule(_Rule(b, node, needed), g)
        for operand, contribution in zip(node.inputs, contributions):
            if contribution is not None and operand.name in needed:
                _accumulate(b, grads, operand.name, contribution)
    outputs = []
    for name in wrt:
        t = inputs[name]
        g = grads.get(name)
        if g is None:
            g = b.fill_constant(t.shape, 0, t.dtype, name=f"grad_{name}")
        elif g.name in cotangents or g.name in [o.name for o in outputs]:
            g = b.reshape(g, t.shape, name=f"grad_{name}")  # a cotangent passed through: a copy
        outputs.append(g)
    backward = b.build(outputs)
    return _renamed(backward, {g.name: f"grad_{name}" for g, name in zip(outputs, wrt) if g.name != f"grad_{name}"})


def _checked_wrt(program, inputs, wrt) -> tuple:
    if wrt is None:
        return tuple(t.name for t in program.inputs if differentiable(t))
    if isinstance(wrt, str):
        wrt = (wrt,)
    wrt = tuple(wrt)
    for name in wrt:
        if name not in inputs:
            raise ValidationError("vjp", "wrt names inputs", f"'{name}' is not an input of program '{program.name}'")
        if not differentiable(inputs[name]):
            raise ValidationError("vjp", "wrt names floating-point inputs",
                                  f"input '{name}' has dtype {inputs[name].dtype}, which carries no gradient")
    if len(set(wrt)) != len(wrt):
        raise ValidationError("vjp", "wrt names each input once", f"wrt={list(wrt)} repeats an input")
    return wrt


def differentiable_outputs(program: Program) -> tuple:
    """Whether each output can carry a gradient back to some floating-point input."""
    needed = _needing_gradients(program, {t.name for t in program.inputs if differentiable(t)})
    return tuple(t.name in needed for t in program.outputs)


def _needing_gradients(program: Program, wrt: set) -> set:
    """The tensors whose gradient the outputs need: floating-point tensors that depend on an
    input of ``wrt`` through floating-point values."""
    needed = set(wrt)
    for node in program.nodes:
        if differentiable(node.output) and any(t.name in needed for t in node.inputs if differentiable(t)):
            needed.add(node.output.name)
    return needed


def _accumulate(b: NetBuilder, grads: dict, name: str, contribution: Tensor):
    grads[name] = contribution if name not in grads else b.add(grads[name], contribution)


def _renamed(program: Program, names: dict) -> Program:
    """``program`` with the tensors of ``names`` renamed (node outputs only)."""
    if not names:
        return program

    def tensor(t):
        return Tensor(names[t.name], t.shape, t.dtype) if t.name in names else t

    nodes = tuple(Node(n.op, tuple(tensor(t) for t in n.inputs), n.attrs, tensor(n.output)) for n in program.nodes)
    return Program(program.name, program.inputs, nodes, tuple(tensor(t) for t in program.outputs),
                   program.assumptions)


class _Rule:
    """What a gradient rule works with: the builder, the node, and small helpers."""

    def __init__(self, b: NetBuilder, node: Node, needed: set):
        self.b, self.node = b, node
        self.attrs = node.attr_dict
        self._needed = needed

    def needs(self, k: int) -> bool:
        return self.node.inputs[k].name in self._needed

    def scalar(self, value, dtype) -> Tensor:
        return self.b.fill_constant((), value, dtype)

    def zeros(self, shape, dtype) -> Tensor:
        return self.b.fill_constant(shape, 0, dtype)

    def negate(self, t: Tensor) -> Tensor:
        return self.b.multiply(t, self.scalar(-1.0, t.dtype))

    def unbroadcast(self, g: Tensor, operand: Tensor) -> Tensor:
        """``g`` (of the broadcast output's shape) summed over the axes that broadcast
        ``operand``: the leading axes it lacks and its size-1 axes that the output widens."""
        if tuple(g.shape) == tuple(operand.shape):
            return g
        lead = g.ndim - operand.ndim
        axes = list(range(lead)) + [lead + j for j, d in enumerate(operand.shape)
                                    if d == 1 and g.shape[lead + j] != 1]
        return self.reshaped(self.b.reduce_sum(g, axes=axes, keepdims=True), operand.shape)

    def reshaped(self, t: Tensor, shape) -> Tensor:
        """``t`` under ``shape``: itself where that is its shape already."""
        return t if tuple(t.shape) == tuple(shape) else self.b.reshape(t, shape)

    def broadcast(self, t: Tensor, shape) -> Tensor:
        """``t`` broadcast to ``shape`` (numpy rules), as an elementwise add of zeros that fusion
        folds into the consumer."""
        if tuple(t.shape) == tuple(shape):
            return t
        return self.b.add(t, self.zeros(shape, t.dtype))


# -- elementwise, layout -------------------------------------------------------------------------


def _reshape(r: _Rule, g):
    return [r.reshaped(g, r.node.inputs[0].shape)]


def _cast(r: _Rule, g):
    x = r.node.inputs[0]
    return [r.b.cast(g, x.dtype) if differentiable(x) and differentiable(g) else None]


def _add(r: _Rule, g):
    a, c = r.node.inputs
    return [r.unbroadcast(g, a), r.unbroadcast(g, c)]


def _subtract(r: _Rule, g):
    a, c = r.node.inputs
    return [r.unbroadcast(g, a), r.unbroadcast(r.negate(g), c) if r.needs(1) else None]


def _multiply(r: _Rule, g):
    a, c = r.node.inputs
    return [r.unbroadcast(r.b.multiply(g, c), a) if r.needs(0) else None,
            r.unbroadcast(r.b.multiply(g, a), c) if r.needs(1) else None]


def _divide(r: _Rule, g):
    """PyTorch's rule: ``g / b`` and ``-g * ((a / b) / b)``, the quotient being the output."""
    a, c = r.node.inputs
    return [r.unbroadcast(r.b.divide(g, c), a) if r.needs(0) else None,
            r.unbroadcast(r.b.multiply(r.negate(g), r.b.divide(r.node.output, c)), c) if r.needs(1) else None]


def _extremum(wins: str):
    """``maximum``/``minimum``: the gradient goes to the operand that wins, and half to each
    on a tie (PyTorch)."""
    def rule(r: _Rule, g):
        a, c = r.node.inputs
        b = r.b
        zero, half = r.scalar(0.0, g.dtype), b.multiply(g, r.scalar(0.5, g.dtype))
        tie = b.where(b.equal(a, c), half, zero)
        beats = getattr(b, wins)
        return [r.unbroadcast(b.where(beats(a, c), g, tie), a) if r.needs(0) else None,
                r.unbroadcast(b.where(beats(c, a), g, tie), c) if r.needs(1) else None]
    return rule


def _where(r: _Rule, g):
    cond, a, c = r.node.inputs
    zero = r.scalar(0.0, g.dtype)
    return [None, r.unbroadcast(r.b.where(cond, g, zero), a) if r.needs(1) else None,
            r.unbroadcast(r.b.where(cond, zero, g), c) if r.needs(2) else None]


def _unary(derivative):
    """An elementwise function: the cotangent times its derivative, written with the input
    ``x`` and the output ``y`` (PyTorch's formulas)."""
    def rule(r: _Rule, g):
        x, y = r.node.inputs[0], r.node.output
        return [r.b.multiply(g, derivative(r.b, x, y, lambda v: r.scalar(v, g.dtype)))]
    return rule


UNARY_DERIVATIVES = {
    "exp": lambda b, x, y, c: y,
    "log": lambda b, x, y, c: b.divide(c(1.0), x),
    "sqrt": lambda b, x, y, c: b.divide(c(0.5), y),
    "tanh": lambda b, x, y, c: b.subtract(c(1.0), b.multiply(y, y)),
    "sigmoid": lambda b, x, y, c: b.multiply(y, b.subtract(c(1.0), y)),
}


def _reduce_extremum(r: _Rule, g):
    """max/min over axes: the cotangent shared equally among the elements equal to the result."""
    x = r.node.inputs[0]
    b = r.b
    kept_shape = tuple(1 if j in r.attrs["axes"] else d for j, d in enumerate(x.shape))
    chosen = b.equal(x, r.reshaped(r.node.output, kept_shape))
    count = b.reduce_sum(b.cast(chosen, g.dtype), axes=list(r.attrs["axes"]), keepdims=True)
    share = b.divide(r.reshaped(g, kept_shape), count)
    return [b.where(chosen, share, r.scalar(0.0, g.dtype))]


def _reduce_sum(r: _Rule, g):
    x = r.node.inputs[0]
    axes = r.attrs["axes"]
    kept = r.reshaped(g, tuple(1 if j in axes else d for j, d in enumerate(x.shape)))
    return [r.broadcast(kept, x.shape)]


# -- gathers: a scatter-add of the cotangent -------------------------------------------------------


def _take(r: _Rule, g):
    """``out[p, i, q] = x[p, indices[p[:b], i], q]``: every output slice adds into the slice of
    x it was read from. The index is laid along ``axis`` of a scatter whose updates are the
    cotangent with the index axes flattened into one."""
    x, idx = r.node.inputs
    axis, bd = r.attrs["axis"], r.attrs["batch_dims"]
    b = r.b
    n = prod(idx.shape[bd:])
    updates = r.reshaped(g, tuple(x.shape[:axis]) + (n,) + tuple(x.shape[axis + 1:]))
    column = r.reshaped(idx, tuple(idx.shape[:bd]) + (1,) * (axis - bd) + (n,) + (1,) * (x.ndim - axis - 1))
    spread = r.broadcast(column, updates.shape)
    return [b.scatter(r.zeros(x.shape, x.dtype), spread, updates, axis=axis, reduce="add", mode=r.attrs["mode"]),
            None]


def _gather(r: _Rule, g):
    x, idx = r.node.inputs
    return [r.b.scatter(r.zeros(x.shape, x.dtype), idx, g, axis=r.attrs["axis"], reduce="add", mode=r.attrs["mode"]),
            None]


def _gather_nd(r: _Rule, g):
    """The element form scatters back at the same tuples. The slice form becomes an element-form
    scatter: the index positions flattened into the first addressed axis, the tuples spread over
    the slice, so one update carries one element."""
    x, idx = r.node.inputs
    a = r.attrs
    b, mode, layout = r.b, a["mode"], a["index_layout"]
    zeros = r.zeros(x.shape, x.dtype)
    if a["dims"] is not None:
        return [b.scatter_nd(zeros, idx, g, dims=a["dims"], reduce="add", index_layout=layout, mode=mode), None]
    bd = a["batch_dims"]
    tuples = tuple(idx.shape[1:] + idx.shape[:1]) if layout == "first" else tuple(idx.shape)
    m = tuples[-1]
    if m == 0:  # every tuple addresses the whole slice: the cotangent sums over the index positions
        return [b.reduce_sum(g, axes=list(range(bd, len(tuples) - 1))) if len(tuples) - 1 > bd else
                r.reshaped(g, x.shape), None]
    n = prod(tuples[bd:-1])
    element_shape = tuple(x.shape[:bd]) + (n,) + (1,) * (m - 1) + tuple(x.shape[bd + m:])
    updates = r.reshaped(g, element_shape)
    lead = tuple(tuples[:bd]) + (n,) + (1,) * (x.ndim - bd - 1)
    if layout == "first":
        spread = r.broadcast(r.reshaped(idx, (m,) + lead), (m,) + element_shape)
    else:
        spread = r.broadcast(r.reshaped(idx, lead + (m,)), element_shape + (m,))
    return [b.scatter_nd(zeros, spread, updates, dims=tuple(range(bd, bd + m)), reduce="add", index_layout=layout,
                         mode=mode), None]


# -- scatters: a gather of the cotangent -----------------------------------------------------------


class _Targets:
    """Where a scatter's updates land, as operators: ``at(v)`` reads ``v`` at each update's
    target (the update space's shape), ``into(base, values, reduce)`` scatters there, both with
    the node's index and mode; ``crop``/``pad`` convert between ``src`` and the update space,
    which ``scatter`` lets be smaller than ``src``."""

    def __init__(self, r: _Rule):
        self.r, self.b = r, r.b
        x, self.index, src = r.node.inputs
        self.a = r.attrs
        self.src_shape = tuple(src.shape)

    @property
    def shape(self):
        return self.src_shape

    def crop(self, src: Tensor) -> Tensor:
        return src

    def pad(self, updates: Tensor) -> Tensor:
        return updates


class _AxisTargets(_Targets):
    """``scatter``: targets along ``axis``; the update space is the index's shape."""

    @property
    def shape(self):
        return tuple(self.index.shape)

    def at(self, v: Tensor, fill=0) -> Tensor:
        return self.b.gather(v, self.index, axis=self.a["axis"], mode=self.a["mode"], fill_value=fill)

    def into(self, base: Tensor, values: Tensor, reduce: str, include_self: bool = True) -> Tensor:
        return self.b.scatter(base, self.index, values, axis=self.a["axis"], reduce=reduce, mode=self.a["mode"],
                              include_self=include_self)

    def _corner(self) -> Tensor:
        return self.b.iota(self.shape, "int64", axis=self.a["axis"])

    def crop(self, src: Tensor) -> Tensor:
        if self.shape == self.src_shape:
            return src
        return self.b.gather(src, self._corner(), axis=self.a["axis"], mode="clip")

    def pad(self, updates: Tensor) -> Tensor:
        if self.shape == self.src_shape:
            return updates
        return self.b.scatter(self.r.zeros(self.src_shape, updates.dtype), self._corner(), updates,
                              axis=self.a["axis"], mode="clip")


class _TupleTargets(_Targets):
    """``scatter_nd``: targets at index tuples; the update space is ``src``'s shape."""

    def at(self, v: Tensor, fill=0) -> Tensor:
        return self.b.gather_nd(v, self.index, dims=self.a["dims"], index_layout=self.a["index_layout"],
                                mode=self.a["mode"], fill_value=fill)

    def into(self, base: Tensor, values: Tensor, reduce: str, include_self: bool = True) -> Tensor:
        return self.b.scatter_nd(base, self.index, values, dims=self.a["dims"], reduce=reduce,
                                 index_layout=self.a["index_layout"], mode=self.a["mode"], include_self=include_self)


def _scatter_rule(targets: type):
    def rule(r: _Rule, g):
        t = targets(r)
        x, _, src = r.node.inputs
        gx, gsrc = SCATTER_RULES[r.attrs["reduce"]](r, t, g, x, t.crop(src), r.attrs["include_self"])
        return [gx if r.needs(0) else None, None, t.pad(gsrc) if r.needs(2) else None]
    return rule


def _cleared(r, t, g):
    """``g`` with zeros wherever an update lands."""
    return t.into(g, r.zeros(t.shape, g.dtype), "none")


def _scatter_none(r, t, g, x, src, include_self):
    """x keeps its gradient where nothing overwrote it; each target's gradient goes to the update
    that won it, the last in row-major order (the largest update position)."""
    b = r.b
    position = b.iota(t.shape, "int64")
    winner = t.into(b.fill_constant(x.shape, -1, "int64"), position, "max")
    won = b.equal(t.at(winner, -1), position)
    return _cleared(r, t, g), b.where(won, t.at(g), r.scalar(0.0, g.dtype))


def _scatter_add(r, t, g, x, src, include_self):
    return (g if include_self else _cleared(r, t, g)), t.at(g)


def _scatter_sub(r, t, g, x, src, include_self):
    return g, r.negate(t.at(g))


def _scatter_mean(r, t, g, x, src, include_self):
    """Each target's gradient divided by the count it averaged (x counted when included)."""
    b = r.b
    ones = b.fill_constant(t.shape, 1, g.dtype)
    count = t.into(b.fill_constant(x.shape, 1 if include_self else 0, g.dtype), ones, "add")
    share = b.divide(g, b.maximum(count, r.scalar(1.0, g.dtype)))
    gx = share if include_self else b.where(b.equal(count, r.scalar(0.0, g.dtype)), g, r.scalar(0.0, g.dtype))
    return gx, t.at(share)


def _scatter_mul(r, t, g, x, src, include_self):
    """PyTorch's rule for a product with zeros in it: x's gradient is the product of the updates
    (x's zeros taken as ones); an update's is the product of everything else at its target,
    computed again without it where it is its target's only zero update."""
    b = r.b
    zero, one = r.scalar(0.0, g.dtype), r.scalar(1.0, g.dtype)
    out = r.node.output
    x_nonzero = b.where(b.equal(x, zero), one, x)
    gx = b.divide(b.multiply(g, t.into(x_nonzero, src, "mul", include_self)), x_nonzero)
    if not include_self:
        gx = _cleared(r, t, gx)
    src_zero = b.equal(src, zero)
    zeros_at_target = t.at(t.into(r.zeros(x.shape, g.dtype), b.cast(src_zero, g.dtype), "add"))
    only_zero = b.equal(b.where(src_zero, zeros_at_target, zero), one)
    without_it = t.into(x, b.where(only_zero, one, src), "mul", include_self)
    gsrc = b.where(only_zero, t.at(b.multiply(g, without_it)),
                   b.divide(t.at(b.multiply(g, out)), b.where(src_zero, one, src)))
    return gx, gsrc


def _scatter_extremum(r, t, g, x, src, include_self):
    """max/min: each target's gradient shared equally among the values equal to the result (x,
    where included, and the updates), as PyTorch's ``scatter_reduce``."""
    b = r.b
    zero, one = r.scalar(0.0, g.dtype), r.scalar(1.0, g.dtype)
    out = r.node.output
    src_is = b.equal(src, t.at(out))
    base = b.cast(b.equal(x, out), g.dtype) if include_self else r.zeros(x.shape, g.dtype)
    count = t.into(base, b.cast(src_is, g.dtype), "add")
    share = b.divide(g, b.maximum(count, one))
    gx = b.where(b.equal(x, out), share, zero) if include_self else _cleared(r, t, g)
    return gx, b.where(src_is, t.at(share), zero)


SCATTER_RULES = {"none": _scatter_none, "add": _scatter_add, "sub": _scatter_sub, "mean": _scatter_mean,
                 "mul": _scatter_mul, "max": _scatter_extremum, "min": _scatter_extremum}

#: The gradient rule of each operator: ``rule(r, g)`` returns one contribution (or None) per
#: operand, given the cotangent ``g`` of the node's output.
RULES = {
    "reshape": _reshape, "cast": _cast, "add": _add, "subtract": _subtract, "multiply": _multiply,
    "divide": _divide, "maximum": _extremum("greater"), "minimum": _extremum("less"), "where": _where,
    "reduce_sum": _reduce_sum, "reduce_max": _reduce_extremum, "reduce_min": _reduce_extremum,
    **{op: _unary(d) for op, d in UNARY_DERIVATIVES.items()}, "take": _take, "gather": _gather, "gather_nd": _gather_nd,
    "scatter": _scatter_rule(_AxisTargets), "scatter_nd": _scatter_rule(_TupleTargets),
}
