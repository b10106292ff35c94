"""Loop-nest IR: scalar expressions and statements over row-major buffers.

Every node is a frozen dataclass, so IR compares structurally and hashes stably; passes build
new nodes instead of editing old ones. Expressions carry their dtype. Index arithmetic is int64.

Expressions: Const, Var, Binary, Cmp, Select, Cast, Math, Load.
Statements: For, Store, Reduce (read-combine-write; atomic on the GPU), If, Seq, Let (names
values computed once), ReportIndexError (a failed ``mode="raise"`` check).
A Kernel is one operator's loop nests with the buffers it touches; a LoweredProgram is the
kernels of a whole graph in execution order plus the buffer table the runtimes bind.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..dtypes import DType, bool_, int64
from ..errors import IndexOutOfRangeError

# -- buffers ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Buffer:
    """A contiguous row-major array. Two Buffers with one name are views of the same memory."""

    name: str
    dtype: DType
    shape: tuple

    @property
    def size(self):
        """The element count: an int, or an int64 expression where a dimension is symbolic."""
        n = 1
        for d in self.shape:
            n = dim_mul(n, d)
        return n

    @property
    def strides(self) -> tuple:
        """Row-major strides in elements, each an int or an int64 expression."""
        out, acc = [], 1
        for d in reversed(self.shape):
            out.append(acc)
            acc = dim_mul(acc, d)
        return tuple(reversed(out))

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)


# -- expressions --------------------------------------------------------------------------------


class Expr:
    dtype: DType


@dataclass(frozen=True, eq=False)
class Const(Expr):
    value: object
    dtype: DType = int64

    # Compare by (type of value, value, dtype), so 1, 1.0 and True stay distinct.
    def _key(self):
        return (type(self.value).__name__, self.value, self.dtype)

    def __eq__(self, other):
        return isinstance(other, Const) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())


@dataclass(frozen=True)
class Var(Expr):
    name: str
    dtype: DType = int64


BINARY_OPS = ("add", "sub", "mul", "div", "mod", "min", "max", "and", "or")
CMP_OPS = ("lt", "le", "gt", "ge", "eq", "ne")


@dataclass(frozen=True)
class Binary(Expr):
    """``div`` truncates toward zero on integers; ``mod`` has the sign of the dividend (C)."""

    op: str
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True)
class Cmp(Expr):
    op: str
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return bool_


@dataclass(frozen=True)
class Select(Expr):
    cond: Expr
    a: Expr
    b: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True)
class Cast(Expr):
    to: DType
    a: Expr

    @property
    def dtype(self) -> DType:
        return self.to


#: The functions of :class:`Math`.
MATH_FUNCTIONS = ("exp", "log", "sqrt", "tanh")


@dataclass(frozen=True)
class Math(Expr):
    """``fn(a)`` for ``fn`` in :data:`MATH_FUNCTIONS`, on float32 or float64 (lowerings compute
    the narrower floats in float32); the platform's libm (CPU) or CUDA's functions, correctly
    rounded or within a few ulp."""

    fn: str
    a: Expr

    @property
    def dtype(self) -> DType:
        return self.a.dtype


@dataclass(frozen=True)
class Load(Expr):
    buffer: Buffer
    indices: tuple

    @property
    def dtype(self) -> DType:
        return self.buffer.dtype


@dataclass(frozen=True)
class Every(Expr):
    """Whether ``cond`` holds for every ``var`` in ``[0, extent)`` (true for an empty range);
    ``var`` is bound inside ``cond`` only. The CPU evaluates it as a loop that ORs the failures
    together (vectorised, no early exit), so its ``cond`` must be safe to evaluate at every
    ``var``. Only the CPU schedule creates it, as the condition of an ``If`` (see
    ``schedule_cpu.version_checked_loops``)."""

    var: Var
    extent: Expr
    cond: Expr

    @property
    def dtype(self) -> DType:
        return bool_


def dim_mul(a, b):
    """The product of two sizes (ints or int64 expressions), an int when both are."""
    if isinstance(a, int) and isinstance(b, int):
        return a * b
    if a == 1 or b == 1:
        return b if a == 1 else a
    return Binary("mul", as_expr(a), as_expr(b))


def as_expr(value, dtype: DType = int64) -> Expr:
    if isinstance(value, Expr):
        return value
    return Const(value, dtype)


def const(value, dtype: DType = int64) -> Const:
    if dtype.is_bool:
        value = bool(value)
    elif dtype.is_complex:
        value = complex(value)
    elif dtype.is_float:
        value = float(value)
    else:
        value = int(value)
    return Const(value, dtype)


def minimum(a, b) -> Expr:
    return Binary("min", a, as_expr(b, a.dtype))


def maximum(a, b) -> Expr:
    return Binary("max", a, as_expr(b, a.dtype))


def logical_and(*conds) -> Expr:
    out = conds[0]
    for c in conds[1:]:
        out = Binary("and", out, c)
    return out


# -- statements ---------------------------------------------------------------------------------


class Stmt:
    pass


@dataclass(frozen=True)
class For(Stmt):
    """``for var in [0, extent)``. ``kind`` is set by a schedule pass: serial; parallel,
    parallel_rows, parallel_check or deferred_check (``schedule_cpu.py``); or a GPU binding
    (``gpu.grid``: one flat grid-stride loop over blocks x threads)."""

    var: Var
    extent: Expr
    body: Stmt
    kind: str = "serial"


@dataclass(frozen=True)
class Store(Stmt):
    buffer: Buffer
    indices: tuple
    value: Expr


COMBINES = ("none", "add", "mul", "max", "min")


@dataclass(frozen=True)
class Reduce(Stmt):
    """``buffer[indices] = combine(buffer[indices], value)``; ``none`` overwrites.

    Several iterations may hit one element. Scatter update loops use it; backends must keep
    the result of ``none`` the last write in loop order, and may use atomics for the others.
    """

    buffer: Buffer
    indices: tuple
    value: Expr
    combine: str


@dataclass(frozen=True)
class If(Stmt):
    cond: Expr
    then: Stmt
    orelse: Stmt | None = None


@dataclass(frozen=True)
class Seq(Stmt):
    stmts: tuple


@dataclass(frozen=True)
class Let(Stmt):
    """``let v1 = e1; v2 = e2; ...`` then ``body``. Each value is computed once, in order, and
    may use the variables bound before it; each variable (a Var of its value's dtype) stands for
    its value in the later bindings and in the body. Values are pure, so a Let never changes what
    a statement computes, only how often: fusion binds the indices and values it inlines, so that
    an expression used several times is computed, stored in the IR and rendered once."""

    bindings: tuple  # ((Var, Expr), ...)
    body: Stmt


def let(bindings, body) -> Stmt:
    """``body`` under ``bindings``; a Let body that is itself a Let is merged into one flat Let,
    so chains of bindings never nest statements deeper."""
    bindings = tuple(bindings)
    if isinstance(body, Let):
        bindings, body = bindings + body.bindings, body.body
    return Let(bindings, body) if bindings else body


@dataclass(frozen=True)
class ReportIndexError(Stmt):
    """A ``mode="raise"`` check failed at flat ``position`` of the index tensor of check
    ``check_id`` with index ``value``. The CPU stops the kernel; the GPU keeps the smallest
    position."""

    check_id: int
    position: Expr
    value: Expr | None = None  # the bad index value (int64), where the backend reports it


@dataclass(frozen=True)
class FlagIndexError(Stmt):
    """A possibly bad index was seen: the stage returns "flagged" when it finishes, and the
    kernel's deferred check nest for ``check_id`` then runs to find and report the first bad
    position. Only the CPU schedule creates it (see ``passes.defer_index_checks``)."""

    check_id: int


@dataclass(frozen=True)
class Prefetch(Stmt):
    """A hint that ``buffer[indices]`` (an element inside it) will be read soon: the CPU asks for
    its cache line, and nothing else changes. Only the CPU schedule creates it (see
    ``schedule_cpu.stream_rows`` and ``schedule_cpu.prefetch_gathers``)."""

    buffer: Buffer
    indices: tuple


# -- kernels and programs -----------------------------------------------------------------------


@dataclass(frozen=True)
class IndexCheck:
    """What the runtime needs to turn a failed check into an IndexError."""

    check_id: int
    op: str            # the operator, e.g. "gather"
    node: str          # the output tensor name of the node
    input: str         # the index tensor's name in the graph
    buffer: str        # the buffer holding the index values
    shape: tuple       # the index tensor's shape
    sizes: tuple       # the axis size each index addresses; one entry, or one per tuple component
    tuple_axis: int | None = None  # which index axis runs over tuple components (gather_nd)
    index_dtype: str = "int64"     # the index tensor's dtype

    def error(self, position: int, value: int, size_of=int) -> IndexOutOfRangeError:
        """The error of this check failing at flat ``position`` of the index tensor with the
        index ``value``: one place, so every runtime and the reference evaluator say the same.
        ``size_of`` gives the number a size stands for (the call's value of a symbolic size).
        Kernels report the value as int64; a uint64 index above the int64 range arrives as its
        bits, a negative number, and is read back here as the true (unsigned) value."""
        value = int(value)
        if self.index_dtype == "uint64" and value < 0:
            value += 2**64
        shape = tuple(size_of(d) for d in self.shape)
        pos = tuple(int(p) for p in np.unravel_index(position, shape)) if shape else ()
        size = self.sizes[0] if self.tuple_axis is None else self.sizes[pos[self.tuple_axis]]
        return IndexOutOfRangeError(f"{self.op} '{self.node}'", self.input, pos, value, size_of(size))


@dataclass(frozen=True)
class Kernel:
    """One operator's computation. ``params`` are the graph buffers it reads and writes (the
    output last); ``temps`` are scratch buffers the runtime allocates for the kernel's call."""

    name: str
    op: str
    params: tuple
    output: Buffer
    body: Stmt
    temps: tuple = ()
    checks: tuple = ()
    pure: bool = True  # a compute ("every output element is this expression"), fusable


@dataclass(frozen=True)
class LoweredProgram:
    name: str
    kernels: tuple
    inputs: tuple          # Buffers of the graph inputs, in program order
    outputs: tuple         # Buffers of the program outputs, in output order
    constants: tuple       # (Buffer, ConstArray) pairs
    intermediates: tuple   # Buffers produced and consumed inside the program
    checks: tuple = field(default=())
    symbols: tuple = ()    # the int64 scalar Buffers of the symbolic sizes (``symbolic.symbol_buffer``)

    def buffer_table(self) -> tuple:
        """Every buffer the entry point sees, in slot order (names are unique)."""
        seen, table = set(), []
        groups = (self.inputs, self.symbols, [b for b, _ in self.constants], self.outputs, self.intermediates,
                  [t for k in self.kernels for t in k.temps])
        for group in groups:
            for b in group:
                if b.name not in seen:
                    seen.add(b.name)
                    table.append(b)
        return tuple(table)
