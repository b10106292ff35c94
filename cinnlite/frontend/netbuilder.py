"""NetBuilder: the Python API that records a graph of indexing operators.

Every method checks its operator's rules at once (see :mod:`cinnlite.ir.ops`) and returns a
:class:`~cinnlite.ir.graph.Tensor` handle with ``.name``, ``.shape`` and ``.dtype``.
"""
from __future__ import annotations

import re
import warnings
from typing import Sequence

import numpy.typing as npt

from ..api_types import DTypeLike, IndexLayout, IndexMode, NdReduction, Reduction, Scalar, ShapeLike
from ..dtypes import as_dtype
from ..errors import ValidationError
from ..ir import ops
from ..ir.graph import Node, Program, Tensor
from ..ir.symbolic import is_symbolic, recording_assumptions, symbols_of

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-:/]*")


def _axis_or_dim(op: str, axis: int, dim: int | None) -> int:
    """``axis``, or its other name ``dim`` where that is given instead."""
    if dim is None:
        return axis
    if axis != 0 and axis != dim:
        raise ValidationError(op, "axis is given once", f"axis={axis} and dim={dim} disagree; give one")
    return dim


class NetBuilder:
    """Records operators into a graph; ``build()`` returns an immutable :class:`Program`."""

    #: Methods that are other systems' spellings, built from the registered operators.
    SPELLINGS = ("scatter_assign", "scatter_add")

    def __init__(self, name: str = "program") -> None:
        self.name = str(name)
        self._inputs: list[Tensor] = []
        self._nodes: list[Node] = []
        self._tensors: dict[str, Tensor] = {}
        self._counters: dict[str, int] = {}
        self._assumptions: dict[str, list] = {}  # by node output: what its rules assumed of symbolic sizes
        self._carried: list = []  # the assumptions of the program this builder extends

    @classmethod
    def extending(cls, program: Program, name: str | None = None) -> "NetBuilder":
        """A builder that holds ``program``'s inputs and nodes, so that new operators can read
        any of its tensors (``cl.vjp`` builds a backward program on its forward one)."""
        b = cls(program.name if name is None else name)
        b._inputs = list(program.inputs)
        b._nodes = list(program.nodes)
        b._tensors = dict(program.tensors)
        b._carried = list(program.assumptions)
        return b

    # -- helpers -----------------------------------------------------------------------------

    def _fresh(self, op: str) -> str:
        while True:
            n = self._counters.get(op, 0)
            self._counters[op] = n + 1
            name = f"{op}_{n}"
            if name not in self._tensors:
                return name

    def _claim(self, op: str, name):
        if name is None:
            return self._fresh(op)
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise ValidationError(op, "names are identifiers", f"invalid tensor name {name!r}")
        if name in self._tensors:
            raise ValidationError(op, "names are unique", f"a tensor named {name!r} already exists")
        return name

    def _own(self, op: str, value, role: str) -> Tensor:
        if not isinstance(value, Tensor):
            raise ValidationError(op, "operands are tensors of this builder",
                                  f"{role} must be a tensor handle from this NetBuilder, got {type(value).__name__}")
        if self._tensors.get(value.name) is not value:
            raise ValidationError(op, "operands are tensors of this builder",
                                  f"{role} '{value.name}' does not belong to NetBuilder '{self.name}'")
        return value

    def _add(self, op: str, operands, name=None, **arguments) -> Tensor:
        """Add a node of operator ``op`` (see :data:`cinnlite.ir.ops.OPERATORS`): check that the
        operands are this builder's tensors, let the operator check its rules and infer its
        output, then claim the output's name."""
        definition = ops.OPERATORS[op]
        inputs = tuple(self._own(op, t, role) for t, role in zip(operands, definition.operands, strict=True))
        with recording_assumptions() as assumed:
            attrs, shape, dtype = definition.infer(inputs, **arguments)
        out = Tensor(self._claim(op, name), tuple(shape), dtype)
        self._assumptions[out.name] = assumed
        self._nodes.append(Node(op, inputs, definition.node_attrs(attrs), out))
        self._tensors[out.name] = out
        return out

    # -- inputs and constants ------------------------------------------------------------------

    def create_input(self, dtype: DTypeLike, shape: ShapeLike, name: str) -> Tensor:
        """A graph input, bound by name at run time. A dimension is a number, or a symbol name
        (``("E", 64)``): a size known only when the program runs, the same size wherever the
        name appears."""
        checked_dtype = as_dtype(dtype, "create_input")
        checked_shape = ops.check_shape("create_input", shape)
        for d in checked_shape:
            if is_symbolic(d) and not d.is_symbol:
                raise ValidationError("create_input", "input dimensions are numbers or symbol names",
                                      f"dimension {d} of input {name!r} is an expression; give it a name of its own")
        t = Tensor(self._claim("create_input", name), checked_shape, checked_dtype)
        self._inputs.append(t)
        self._tensors[t.name] = t
        return t

    def fill_constant(self, shape: ShapeLike, value: Scalar, dtype: DTypeLike, name: str | None = None) -> Tensor:
        """A tensor of ``shape`` whose every element is ``value``."""
        return self._add("fill_constant", [], name, shape=shape, value=value, dtype=dtype)

    def iota(self, shape: ShapeLike, dtype: DTypeLike = "int64", axis: int | None = None,
             name: str | None = None) -> Tensor:
        """A tensor of ``shape`` whose every element is its row-major position, or with ``axis``
        its coordinate along that axis (XLA's ``iota``); counted in int64 and converted to
        ``dtype`` as ``cast`` converts."""
        return self._add("iota", [], name, shape=shape, dtype=dtype, axis=axis)

    def constant(self, value: npt.ArrayLike, dtype: DTypeLike | None = None, name: str | None = None) -> Tensor:
        """A tensor holding a copy of a numpy array (or anything ``np.asarray`` takes)."""
        return self._add("constant", [], name, value=value, dtype=dtype)

    def reshape(self, x: Tensor, shape: ShapeLike, name: str | None = None) -> Tensor:
        """The same elements in row-major order with a new shape (one -1 allowed)."""
        return self._add("reshape", [x], name, shape=shape)

    # -- indexing operators (SEMANTICS.md) ------------------------------------------------------

    def take(self, x: Tensor, indices: Tensor, axis: int | None = 0, batch_dims: int = 0, mode: IndexMode = "raise",
             fill_value: Scalar = 0, name: str | None = None) -> Tensor:
        """Gather slices of ``x`` along ``axis`` (``axis=None`` flattens ``x`` first)."""
        # Operands are checked before the flattening reshape, so a bad one is take's error.
        x = self._own("take", x, "x")
        indices = self._own("take", indices, "indices")
        if axis is None:
            x = self.reshape(x, (x.size,))
            axis = 0
        return self._add("take", [x, indices], name, axis=axis, batch_dims=batch_dims, mode=mode,
                         fill_value=fill_value)

    def gather(self, x: Tensor, index: Tensor, axis: int = 0, mode: IndexMode = "raise", fill_value: Scalar = 0,
               name: str | None = None, *, dim: int | None = None) -> Tensor:
        """Gather elements along ``axis``: ``out[i] = x[i with i[axis] = index[i]]``. ``dim`` is
        CINN's and PyTorch's name for ``axis``."""
        axis = _axis_or_dim("gather", axis, dim)
        return self._add("gather", [x, index], name, axis=axis, mode=mode, fill_value=fill_value)

    def gather_nd(self, x: Tensor, index: Tensor, batch_dims: int = 0, dims: Sequence[int] | None = None,
                  index_layout: IndexLayout = "last", mode: IndexMode = "raise", fill_value: Scalar = 0,
                  name: str | None = None) -> Tensor:
        """Gather by index tuples: the slice form (``dims=None``) or the element form."""
        return self._add("gather_nd", [x, index], name, batch_dims=batch_dims, dims=dims, index_layout=index_layout,
                         mode=mode, fill_value=fill_value)

    def scatter(self, x: Tensor, index: Tensor, src: Tensor | None = None, axis: int = 0, reduce: Reduction = "none",
                mode: IndexMode = "raise", name: str | None = None, *, include_self: bool = True,
                dim: int | None = None, scr: Tensor | None = None) -> Tensor:
        """A copy of ``x`` with ``src`` scattered along ``axis`` at ``index``. With a reduction,
        ``include_self=False`` is PyTorch's ``scatter_reduce(include_self=False)``: an element
        that updates land on combines only those updates, the others keep ``x``. ``dim`` is
        CINN's and PyTorch's name for ``axis``; ``scr`` is the CINN design document's spelling of
        ``src`` (accepted with a DeprecationWarning)."""
        axis = _axis_or_dim("scatter", axis, dim)
        if scr is not None:
            if src is not None:
                raise ValidationError("scatter", "src is given once", "both src and scr are given; use src")
            warnings.warn("scatter(scr=...) is the CINN design document's spelling of src; use src=...",
                          DeprecationWarning, stacklevel=2)
            src = scr
        if src is None:
            raise ValidationError("scatter", "src is given", "scatter needs src, the updates")
        return self._add("scatter", [x, index, src], name, axis=axis, reduce=reduce, mode=mode,
                         include_self=include_self)

    # -- CINN's builder spellings ----------------------------------------------------------------

    def scatter_assign(self, x: Tensor, updates: Tensor, index: Tensor, axis: int = 0, name: str | None = None) -> Tensor:
        """CINN's ``ScatterAssign``: a copy of ``x`` whose slices ``index[j]`` along ``axis`` are
        the slices ``j`` of ``updates`` (``index`` is 1-D; the last write wins)."""
        return self._slices_along("scatter_assign", x, updates, index, axis, "none", name)

    def scatter_add(self, x: Tensor, updates: Tensor, index: Tensor, axis: int = 0, name: str | None = None) -> Tensor:
        """CINN's ``ScatterAdd`` (PyTorch's ``index_add``): a copy of ``x`` with slice ``j`` of
        ``updates`` added to slice ``index[j]`` along ``axis`` (``index`` is 1-D)."""
        return self._slices_along("scatter_add", x, updates, index, axis, "add", name)

    def _slices_along(self, op, x, updates, index, axis, reduce, name):
        """A scatter of whole slices along ``axis`` by a 1-D index: the index broadcast over the
        slices (a reshape and a broadcasting add, which fusion folds into the scatter)."""
        x, updates, index = (self._own(op, t, role) for t, role in ((x, "x"), (updates, "updates"), (index, "index")))
        if index.ndim != 1:
            raise ValidationError(op, "index is 1-D", f"index has rank {index.ndim}; {op} takes one index per slice",
                                  input=index.name)
        axis = ops.normalize_axis(op, axis, x.ndim)
        if updates.ndim != x.ndim:
            raise ValidationError(op, "rank(updates) == rank(x)",
                                  f"updates has rank {updates.ndim}, x has rank {x.ndim}", input=updates.name)
        column = self.reshape(index, tuple(-1 if j == axis else 1 for j in range(x.ndim)))
        spread = self.add(column, self.fill_constant(updates.shape, 0, index.dtype))
        return self.scatter(x, spread, updates, axis=axis, reduce=reduce, name=name)

    def scatter_nd(self, x: Tensor, index: Tensor, src: Tensor, dims: Sequence[int] | None = None,
                   reduce: NdReduction = "none", index_layout: IndexLayout = "last", mode: IndexMode = "raise",
                   name: str | None = None, *, include_self: bool = True) -> Tensor:
        """A copy of ``x`` with ``src`` scattered at index tuples (slice or element form).
        ``reduce="sub"`` subtracts every update (TensorFlow's ``tensor_scatter_nd_sub``);
        ``include_self=False`` combines only the updates where any land (see ``scatter``)."""
        return self._add("scatter_nd", [x, index, src], name, dims=dims, reduce=reduce, index_layout=index_layout,
                         mode=mode, include_self=include_self)

    # -- elementwise operators (numpy broadcasting) ------------------------------------------------

    def _binary(self, op, a, b, name):
        return self._add(op, [a, b], name)

    def add(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """``a + b`` (integers wrap around)."""
        return self._binary("add", a, b, name)

    def subtract(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """``a - b`` (integers wrap around)."""
        return self._binary("subtract", a, b, name)

    def multiply(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """``a * b`` (integers wrap around)."""
        return self._binary("multiply", a, b, name)

    def divide(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """``a / b`` for floats (IEEE); for integers numpy's floor division ``a // b``, with
        ``x // 0 == 0`` as numpy gives (without its warning)."""
        return self._binary("divide", a, b, name)

    def maximum(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """Elementwise maximum; a NaN in either operand gives NaN (numpy's ``maximum``)."""
        return self._binary("maximum", a, b, name)

    def minimum(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """Elementwise minimum; a NaN in either operand gives NaN (numpy's ``minimum``)."""
        return self._binary("minimum", a, b, name)

    def exp(self, x: Tensor, name: str | None = None) -> Tensor:
        """``e ** x`` (float dtypes)."""
        return self._add("exp", [x], name)

    def log(self, x: Tensor, name: str | None = None) -> Tensor:
        """The natural logarithm (float dtypes; NaN below 0, -inf at 0)."""
        return self._add("log", [x], name)

    def sqrt(self, x: Tensor, name: str | None = None) -> Tensor:
        """The square root (float dtypes; NaN below 0)."""
        return self._add("sqrt", [x], name)

    def tanh(self, x: Tensor, name: str | None = None) -> Tensor:
        """The hyperbolic tangent (float dtypes)."""
        return self._add("tanh", [x], name)

    def sigmoid(self, x: Tensor, name: str | None = None) -> Tensor:
        """``1 / (1 + exp(-x))`` (float dtypes)."""
        return self._add("sigmoid", [x], name)

    def equal(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """``a == b`` as bool (false where either is NaN)."""
        return self._binary("equal", a, b, name)

    def not_equal(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """``a != b`` as bool (true where either is NaN)."""
        return self._binary("not_equal", a, b, name)

    def less(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """``a < b`` as bool."""
        return self._binary("less", a, b, name)

    def less_equal(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """``a <= b`` as bool."""
        return self._binary("less_equal", a, b, name)

    def greater(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """``a > b`` as bool."""
        return self._binary("greater", a, b, name)

    def greater_equal(self, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """``a >= b`` as bool."""
        return self._binary("greater_equal", a, b, name)

    def where(self, condition: Tensor, a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
        """``a`` where the bool ``condition`` holds, ``b`` elsewhere; the three broadcast
        together (numpy's ``where``)."""
        return self._add("where", [condition, a, b], name)

    def reduce_sum(self, x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False,
                   name: str | None = None) -> Tensor:
        """The sum over ``axes`` (every axis when None), in x's dtype (integers wrap around);
        ``keepdims`` keeps each reduced axis with size 1."""
        return self._add("reduce_sum", [x], name, axes=axes, keepdims=keepdims)

    def reduce_max(self, x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False,
                   name: str | None = None) -> Tensor:
        """The largest element over ``axes`` (every axis when None); NaN propagates."""
        return self._add("reduce_max", [x], name, axes=axes, keepdims=keepdims)

    def reduce_min(self, x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False,
                   name: str | None = None) -> Tensor:
        """The smallest element over ``axes`` (every axis when None); NaN propagates."""
        return self._add("reduce_min", [x], name, axes=axes, keepdims=keepdims)

    def cast(self, x: Tensor, dtype: DTypeLike, name: str | None = None) -> Tensor:
        """Convert to ``dtype`` like numpy's ``astype``. Float to integer truncates toward zero
        and saturates at the integer's range (NaN gives 0); to bool is ``x != 0``."""
        return self._add("cast", [x], name, dtype=dtype)

    # -- build ---------------------------------------------------------------------------------

    def build(self, outputs: Tensor | Sequence[Tensor] | None = None) -> Program:
        """Freeze the graph. ``outputs`` defaults to every result no other operator consumes."""
        if outputs is None:
            used = {t.name for node in self._nodes for t in node.inputs}
            outs = [n.output for n in self._nodes if n.output.name not in used]
        else:
            if isinstance(outputs, Tensor):
                outputs = [outputs]
            outs = [self._own("build", t, "output") for t in outputs]
            if len({t.name for t in outs}) != len(outs):
                raise ValidationError("build", "outputs are distinct", "an output is listed twice")
        if not outs:
            raise ValidationError("build", "a program has outputs", "the program has no outputs")
        # Keep only the nodes the outputs need, in the order they were added.
        needed = {t.name for t in outs}
        nodes = []
        for node in reversed(self._nodes):
            if node.output.name in needed:
                nodes.append(node)
                needed.update(t.name for t in node.inputs)
        nodes.reverse()
        bound = {s for t in self._inputs for s in symbols_of(t.shape)}
        for node in nodes:
            unbound = symbols_of(node.output.shape) - bound
            if unbound:
                raise ValidationError(node.op, "symbols are sizes of inputs",
                                      f"symbolic size {sorted(unbound)[0]} of '{node.output.name}' is no input's "
                                      f"dimension, so no call can give it a value")
        assumptions = list(self._carried)
        for node in nodes:
            assumptions += [f for f in self._assumptions.get(node.output.name, ()) if f not in assumptions]
        return Program(self.name, tuple(self._inputs), tuple(nodes), tuple(outs), tuple(assumptions))
