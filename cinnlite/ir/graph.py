"""Graph IR: immutable tensors, nodes and programs.

A :class:`Node` is an operator name, its input tensors, its (normalised) attributes and the one
tensor it produces. Output shapes and dtypes are inferred and checked by the operator
definitions in :mod:`cinnlite.ir.ops` when a node is created, so every Program is valid.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..dtypes import DType
from .symbolic import Dim, fact_text, prod, symbols_of


_PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-:/]*")


def display_name(name: str) -> str:
    """``name`` as the printed forms (the graph, the loop nests) show it: as it is where
    NetBuilder could have made it, else as a quoted Python literal, so that no name can forge a
    line or a token of a printout."""
    return name if _PLAIN_NAME.fullmatch(name) else repr(name)


@dataclass(frozen=True)
class Tensor:
    """A value in the graph: a name, a shape (ints, or symbolic :class:`~cinnlite.ir.symbolic.Dim`
    sizes) and a dtype."""

    name: str
    shape: tuple[int | Dim, ...]
    dtype: DType

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self):
        """The element count: an int, or a Dim where the shape is symbolic."""
        return prod(self.shape)

    @property
    def is_static(self) -> bool:
        return not symbols_of(self.shape)

    def __repr__(self) -> str:
        return f"{display_name(self.name)}: {self.dtype}{list(self.shape)}"


@dataclass(frozen=True)
class Node:
    """One operator application. ``attrs`` is a tuple of ``(name, value)`` pairs."""

    op: str
    inputs: tuple[Tensor, ...]
    attrs: tuple[tuple[str, Any], ...]
    output: Tensor

    def attr(self, name: str, default: Any = None) -> Any:
        for key, value in self.attrs:
            if key == name:
                return value
        return default

    @property
    def attr_dict(self) -> dict[str, Any]:
        return dict(self.attrs)


def _fmt_attr(value) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, tuple):
        return "[" + ", ".join(_fmt_attr(v) for v in value) + "]"
    return repr(value)


@dataclass(frozen=True)
class Program:
    """A built graph: its inputs, nodes in topological order and outputs.

    ``assumptions`` are the rules on symbolic sizes the graph could not decide when it was
    built, as ``(relation, a, b)`` facts (see :mod:`cinnlite.ir.symbolic`); every call checks them."""

    name: str
    inputs: tuple[Tensor, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[Tensor, ...]
    assumptions: tuple = ()

    @property
    def symbols(self) -> tuple:
        """The names of the symbolic sizes, in the order the inputs first use them."""
        out: list = []
        for t in self.inputs:
            for d in t.shape:
                for s in sorted(symbols_of((d,))):
                    if s not in out:
                        out.append(s)
        return tuple(out)

    @property
    def is_static(self) -> bool:
        return not self.symbols

    @property
    def tensors(self) -> dict[str, Tensor]:
        table = {t.name: t for t in self.inputs}
        for node in self.nodes:
            table[node.output.name] = node.output
        return table

    def producer(self, name: str) -> Node | None:
        for node in self.nodes:
            if node.output.name == name:
                return node
        return None

    def __str__(self) -> str:
        args = ", ".join(repr(t) for t in self.inputs)
        outs = ", ".join(display_name(t.name) for t in self.outputs)
        lines = [f"program {display_name(self.name)}({args}) -> ({outs}) {{"]
        for node in self.nodes:
            operands = [display_name(t.name) for t in node.inputs]
            operands += [f"{k}={_fmt_attr(v)}" for k, v in node.attrs]
            lines.append(f"  {node.output!r} = {node.op}({', '.join(operands)})")
        for fact in self.assumptions:
            lines.append(f"  assume {fact_text(fact)}")
        lines.append("}")
        return "\n".join(lines)

    def to_dot(self) -> str:
        """The graph as Graphviz ``dot`` text. Names are escaped: whatever they hold, each stays
        inside its quoted string."""
        q = _dot_text
        lines = [f'digraph "{q(self.name)}" {{', "  rankdir=TB;", '  node [fontname="monospace"];']
        for t in self.inputs:
            lines.append(f'  "{q(t.name)}" [shape=box, label="{q(t.name)}\\n{t.dtype}{list(t.shape)}"];')
        for node in self.nodes:
            attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in node.attrs).replace('"', "'")
            label = f"{node.op}\\n{q(attrs)}\\n{node.output.dtype}{list(node.output.shape)}"
            out = q(node.output.name)
            lines.append(f'  "{out}" [shape=ellipse, label="{out} = {label}"];')
            for i, t in enumerate(node.inputs):
                lines.append(f'  "{q(t.name)}" -> "{out}" [label="{i}"];')
        for t in self.outputs:
            lines.append(f'  "out:{q(t.name)}" [shape=doubleoctagon, label="output {q(t.name)}"];')
            lines.append(f'  "{q(t.name)}" -> "out:{q(t.name)}";')
        lines.append("}")
        return "\n".join(lines)


def _dot_text(text: str) -> str:
    """``text`` for a quoted Graphviz string: backslashes and quotes escaped, line breaks and
    other control characters written as escapes, so nothing can end the string early."""
    out = text.replace("\\", "\\\\").replace('"', '\\"')
    return "".join(c if c.isprintable() else f"\\\\x{ord(c):02x}" for c in out)
