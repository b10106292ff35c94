"""NetBuilder: the Python API that records a graph of indexing operators.

Every method checks its operator's rules at once (see :mod:`cinnlite.ir.ops`) and returns a
:class:`~cinnlite.ir.graph.Tensor` handle with ``.name``, ``.shape`` and ``.dtype``.
"""
from __future__ import annotations

import re

import numpy as np

from ..dtypes import as_dtype
from ..errors import ValidationError
from ..ir import ops
from ..ir.constant import ConstArray
from ..ir.graph import Node, Program, Tensor

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-:/]*")


class NetBuilder:
    """Records operators into a graph; ``build()`` returns an immutable :class:`Program`."""

    def __init__(self, name: str = "program"):
        self.name = str(name)
        self._inputs: list[Tensor] = []
        self._nodes: list[Node] = []
        self._tensors: dict[str, Tensor] = {}
        self._counters: dict[str, int] = {}

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

    def _add(self, op: str, inputs, name=None, **attrs) -> Tensor:
        attrs_t, shape, dtype = ops.INFER[op](inputs, **attrs)
        out = Tensor(self._claim(op, name), tuple(shape), dtype)
        self._nodes.append(Node(op, tuple(inputs), attrs_t, out))
        self._tensors[out.name] = out
        return out

    # -- inputs and constants ------------------------------------------------------------------

    def create_input(self, dtype, shape, name: str) -> Tensor:
        """A graph input with a static shape, bound by name at run time."""
        dtype = as_dtype(dtype, "create_input")
        shape = ops._check_shape("create_input", shape)
        t = Tensor(self._claim("create_input", name), shape, dtype)
        self._inputs.append(t)
        self._tensors[t.name] = t
        return t

    def fill_constant(self, shape, value, dtype, name: str | None = None) -> Tensor:
        """A tensor of ``shape`` whose every element is ``value``."""
        return self._add("fill_constant", [], name, shape=shape, value=value, dtype=dtype)

    def constant(self, value, dtype=None, name: str | None = None) -> Tensor:
        """A tensor holding a copy of a numpy array (or anything ``np.asarray`` takes)."""
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError) as exc:
            raise ValidationError("constant", "value is a rectangular array", f"cannot make an array: {exc}") from None
        ops._check_shape("constant", arr.shape)
        dt = as_dtype(dtype if dtype is not None else arr.dtype, "constant")
        if dtype is not None and arr.dtype != dt.np:
            cast = arr.astype(dt.np)
            if not np.array_equal(cast.astype(arr.dtype), arr):
                raise ValidationError("constant", "value fits the dtype", f"values do not fit in {dt}")
            arr = cast
        out = Tensor(self._claim("constant", name), tuple(arr.shape), dt)
        self._nodes.append(Node("constant", (), (("value", ConstArray(arr)),), out))
        self._tensors[out.name] = out
        return out

    def reshape(self, x, shape, name: str | None = None) -> Tensor:
        """The same elements in row-major order with a new shape (one -1 allowed)."""
        return self._add("reshape", [self._own("reshape", x, "x")], name, shape=shape)

    # -- indexing operators (SEMANTICS.md) ------------------------------------------------------

    def take(self, x, indices, axis=0, batch_dims=0, mode="raise", fill_value=0, name=None) -> Tensor:
        """Gather slices of ``x`` along ``axis`` (``axis=None`` flattens ``x`` first)."""
        x = self._own("take", x, "x")
        indices = self._own("take", indices, "indices")
        if axis is None:
            x = self.reshape(x, (x.size,))
            axis = 0
        return self._add("take", [x, indices], name, axis=axis, batch_dims=batch_dims, mode=mode,
                         fill_value=fill_value)

    def gather(self, x, index, axis=0, mode="raise", fill_value=0, name=None) -> Tensor:
        """Gather elements along ``axis``: ``out[i] = x[i with i[axis] = index[i]]``."""
        return self._add("gather", [self._own("gather", x, "x"), self._own("gather", index, "index")],
                         name, axis=axis, mode=mode, fill_value=fill_value)

    def gather_nd(self, x, index, batch_dims=0, dims=None, index_layout="last", mode="raise",
                  fill_value=0, name=None) -> Tensor:
        """Gather by index tuples: the slice form (``dims=None``) or the element form."""
        return self._add("gather_nd", [self._own("gather_nd", x, "x"), self._own("gather_nd", index, "index")],
                         name, batch_dims=batch_dims, dims=dims, index_layout=index_layout, mode=mode,
                         fill_value=fill_value)

    def scatter(self, x, index, src, axis=0, reduce="none", mode="raise", name=None) -> Tensor:
        """A copy of ``x`` with ``src`` scattered along ``axis`` at ``index``."""
        op = "scatter"
        return self._add(op, [self._own(op, x, "x"), self._own(op, index, "index"), self._own(op, src, "src")],
                         name, axis=axis, reduce=reduce, mode=mode)

    def scatter_nd(self, x, index, src, dims=None, reduce="none", index_layout="last", mode="raise",
                   name=None) -> Tensor:
        """A copy of ``x`` with ``src`` scattered at index tuples (slice or element form)."""
        op = "scatter_nd"
        return self._add(op, [self._own(op, x, "x"), self._own(op, index, "index"), self._own(op, src, "src")],
                         name, dims=dims, reduce=reduce, index_layout=index_layout, mode=mode)

    # -- elementwise operators (numpy broadcasting) ------------------------------------------------

    def _binary(self, op, a, b, name):
        return self._add(op, [self._own(op, a, "a"), self._own(op, b, "b")], name)

    def add(self, a, b, name=None) -> Tensor:
        """``a + b`` (integers wrap around)."""
        return self._binary("add", a, b, name)

    def subtract(self, a, b, name=None) -> Tensor:
        """``a - b`` (integers wrap around)."""
        return self._binary("subtract", a, b, name)

    def multiply(self, a, b, name=None) -> Tensor:
        """``a * b`` (integers wrap around)."""
        return self._binary("multiply", a, b, name)

    def divide(self, a, b, name=None) -> Tensor:
        """``a / b`` for floats (IEEE); for integers numpy's floor division ``a // b``, with
        ``x // 0 == 0`` as numpy gives (without its warning)."""
        return self._binary("divide", a, b, name)

    def maximum(self, a, b, name=None) -> Tensor:
        """Elementwise maximum; a NaN in either operand gives NaN (numpy's ``maximum``)."""
        return self._binary("maximum", a, b, name)

    def minimum(self, a, b, name=None) -> Tensor:
        """Elementwise minimum; a NaN in either operand gives NaN (numpy's ``minimum``)."""
        return self._binary("minimum", a, b, name)

    def cast(self, x, dtype, name=None) -> Tensor:
        """Convert to ``dtype`` like numpy's ``astype``. Float to integer truncates toward zero
        and saturates at the integer's range (NaN gives 0); to bool is ``x != 0``."""
        return self._add("cast", [self._own("cast", x, "x")], name, dtype=dtype)

    # -- build ---------------------------------------------------------------------------------

    def build(self, outputs=None) -> Program:
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
        return Program(self.name, tuple(self._inputs), tuple(nodes), tuple(outs))
