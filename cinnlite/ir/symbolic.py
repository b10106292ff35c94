"""Symbolic dimensions: sizes known only when a program runs.

A dimension of a graph tensor is an ``int`` or a :class:`Dim`, a polynomial with integer
coefficients over named symbols (``E``, ``64*E``, ``E*N``). Inputs name their symbols
(``create_input(..., ("E", 64), ...)``); operators compute the result shapes, so ``reshape``
of ``("E", 64)`` to ``(-1,)`` is ``(64*E,)``. The same name is the same size everywhere.

Rules that compare sizes (SEMANTICS.md) are decided when the graph is built where the sizes
decide them. Where a symbol makes them undecidable (``E <= N``, ``E == 5``), the rule is
*assumed* (:func:`dims_equal`, :func:`dims_le`), the assumption is recorded on the program, and
every call checks it against the sizes it is given (see ``runtime/shapes.py``): a call whose sizes
break one is validated, and run, as the static program of exactly those sizes would be, with the
same errors. Compiled shape-generic code therefore only ever runs where every assumption holds
and every symbol is at least 1; a call with an empty symbolic dimension runs a static
specialisation, so the zero-size rules of SEMANTICS.md need no run-time code of their own.
"""
from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass
from typing import Union

_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True, eq=False, repr=False)
class Dim:
    """A symbolic size: ``sum(coefficient * product(symbols))``, in a canonical form so that
    equal polynomials compare and hash equal. Never a constant: arithmetic that cancels every
    symbol gives a plain ``int`` (see :func:`_make`)."""

    terms: tuple  # ((monomial: sorted tuple of symbol names, coefficient: int), ...)

    @staticmethod
    def symbol(name: str) -> "Dim":
        if not isinstance(name, str) or not _SYMBOL.fullmatch(name):
            raise ValueError(f"a symbolic dimension is an identifier, got {name!r}")
        return Dim((((name,), 1),))

    @property
    def is_symbol(self) -> bool:
        """Whether this is one bare symbol (``E``), as input dimensions are."""
        return len(self.terms) == 1 and self.terms[0][1] == 1 and len(self.terms[0][0]) == 1

    @property
    def name(self) -> str:
        """The symbol's name (for a bare symbol)."""
        return self.terms[0][0][0]

    @property
    def symbols(self) -> frozenset:
        return frozenset(s for mono, _ in self.terms for s in mono)

    def __add__(self, other):
        return _make(_terms(self) + _terms(other))

    __radd__ = __add__

    def __mul__(self, other):
        return _make([(tuple(sorted(ma + mb)), ca * cb) for ma, ca in _terms(self) for mb, cb in _terms(other)])

    __rmul__ = __mul__

    def __eq__(self, other):
        return isinstance(other, Dim) and self.terms == other.terms

    def __hash__(self):
        return hash(("Dim", self.terms))

    def __repr__(self):
        parts = []
        for mono, coef in self.terms:
            factors = ([str(coef)] if coef != 1 or not mono else []) + list(mono)
            parts.append("*".join(factors))
        return " + ".join(parts)

    __str__ = __repr__


DimLike = Union[int, Dim]


def _terms(d) -> list:
    if isinstance(d, Dim):
        return list(d.terms)
    return [((), int(d))] if d else []


def _make(terms) -> DimLike:
    """The canonical form of a list of terms: like monomials summed, zeros dropped; an int when
    no symbol is left."""
    acc: dict = {}
    for mono, coef in terms:
        acc[mono] = acc.get(mono, 0) + coef
    kept = tuple(sorted((m, c) for m, c in acc.items() if c))
    if all(not m for m, _ in kept):
        return sum(c for _, c in kept)
    return Dim(kept)


def is_symbolic(d) -> bool:
    return isinstance(d, Dim)


def symbol(name: str) -> Dim:
    return Dim.symbol(name)


def prod(dims) -> DimLike:
    """The product of sizes: an int when every one is."""
    out: DimLike = 1
    for d in dims:
        out = out * d if isinstance(out, Dim) or isinstance(d, Dim) else out * int(d)
    return out


def exact_div(a: DimLike, b: DimLike) -> DimLike | None:
    """``a / b`` when the division is exact term by term (``64*E / 64 == E``), else None."""
    if not isinstance(b, Dim):
        b = int(b)
        if b == 0:
            return None
        if not isinstance(a, Dim):
            return a // b if a % b == 0 else None
        if any(c % b for _, c in a.terms):
            return None
        return _make([(m, c // b) for m, c in a.terms])
    if len(b.terms) != 1:
        return 1 if a == b else None
    (mono_b, coef_b), = b.terms
    out = []
    for mono, coef in _terms(a):
        rest = list(mono)
        for s in mono_b:
            if s not in rest:
                return None
            rest.remove(s)
        if coef % coef_b:
            return None
        out.append((tuple(rest), coef // coef_b))
    return _make(out)


def symbols_of(shape) -> frozenset:
    out: set = set()
    for d in shape:
        if isinstance(d, Dim):
            out |= d.symbols
    return frozenset(out)


def evaluate(d: DimLike, bindings: dict) -> int:
    """The size ``d`` stands for when every symbol has its value in ``bindings``."""
    if not isinstance(d, Dim):
        return int(d)
    return sum(coef * math.prod(bindings[s] for s in mono) for mono, coef in d.terms)


def evaluate_shape(shape, bindings: dict) -> tuple:
    return tuple(evaluate(d, bindings) for d in shape)


def substitute(value, bindings: dict):
    """``value`` (a size, or tuples of them, or anything else) with every Dim evaluated."""
    if isinstance(value, Dim):
        return evaluate(value, bindings)
    if isinstance(value, tuple):
        return tuple(substitute(v, bindings) for v in value)
    return value


def shape_text(shape) -> str:
    """A shape as programs print it: ``[E, 64]``."""
    return "[" + ", ".join(str(d) for d in shape) + "]"


# -- assumptions ------------------------------------------------------------------------------------

_RECORDERS: list = []


@contextlib.contextmanager
def recording_assumptions():
    """Collect the assumptions that rules make while the body runs (a list, filled in order)."""
    found: list = []
    _RECORDERS.append(found)
    try:
        yield found
    finally:
        _RECORDERS.pop()


def _assume(relation: str, a, b) -> bool:
    fact = (relation, a, b)
    for found in _RECORDERS:
        if fact not in found:
            found.append(fact)
    return True


def dims_equal(a: DimLike, b: DimLike) -> bool:
    """Whether a rule ``a == b`` holds: decided on numbers and on identical sizes; otherwise
    assumed (and recorded), to be checked on every call."""
    if a == b:
        return True
    if not isinstance(a, Dim) and not isinstance(b, Dim):
        return False
    return _assume("eq", a, b)


def dims_le(a: DimLike, b: DimLike) -> bool:
    """Whether a rule ``a <= b`` holds; assumed (and recorded) where a symbol leaves it open."""
    if not isinstance(a, Dim) and not isinstance(b, Dim):
        return a <= b
    if a == b:
        return True
    return _assume("le", a, b)


def shapes_equal(a, b) -> bool:
    return len(a) == len(b) and all([dims_equal(x, y) for x, y in zip(a, b)])


def is_zero(d: DimLike) -> bool:
    """Whether a size is 0 when the graph is built (a symbolic size is at least 1 wherever
    shape-generic code runs: see the module docstring)."""
    return not isinstance(d, Dim) and d == 0


def holds(fact, bindings: dict) -> bool:
    relation, a, b = fact
    a, b = evaluate(a, bindings), evaluate(b, bindings)
    return a == b if relation == "eq" else a <= b


def fact_text(fact) -> str:
    relation, a, b = fact
    return f"{a} {'==' if relation == 'eq' else '<='} {b}"


# -- in loop nests ----------------------------------------------------------------------------------

#: Symbol ``E`` is the int64 scalar buffer ``#E`` of a lowered program: the runtimes bind its
#: value per call, and kernels read it like any other buffer (no backend needs a new construct).
SYMBOL_BUFFER_PREFIX = "#"


def symbol_buffer(name: str):
    from ..dtypes import int64
    from .loopnest import Buffer
    return Buffer(SYMBOL_BUFFER_PREFIX + name, int64, ())


def is_symbol_load(e) -> bool:
    """Whether ``e`` reads a symbolic size (see :func:`symbol_buffer`)."""
    from .loopnest import Load
    return isinstance(e, Load) and not e.indices and e.buffer.name.startswith(SYMBOL_BUFFER_PREFIX)


def dim_expr(d: DimLike):
    """A size in a loop nest: an int stays an int; a Dim becomes the int64 expression that
    reads its symbols (see :func:`symbol_buffer`)."""
    if not isinstance(d, Dim):
        return int(d)
    from .loopnest import Binary, Load, const
    out = None
    for mono, coef in d.terms:
        term = const(coef) if coef != 1 or not mono else None
        for s in mono:
            load = Load(symbol_buffer(s), ())
            term = load if term is None else Binary("mul", term, load)
        out = term if out is None else Binary("add", out, term)
    return out
