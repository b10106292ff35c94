"""Graph IR: immutable tensors, nodes and programs.

A :class:`Node` is an operator name, its input tensors, its (normalised) attributes and the one
tensor it produces. Output shapes and dtypes are inferred and checked by the operator
definitions in :mod:`cinnlite.ir.ops` when a node is created, so every Program is valid.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..dtypes import DType


@dataclass(frozen=True)
class Tensor:
    """A value in the graph: a name, a static shape and a dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: DType

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def __repr__(self) -> str:
        return f"{self.name}: {self.dtype}{list(self.shape)}"


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
    """A built graph: its inputs, nodes in topological order and outputs."""

    name: str
    inputs: tuple[Tensor, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[Tensor, ...]

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
        outs = ", ".join(t.name for t in self.outputs)
        lines = [f"program {self.name}({args}) -> ({outs}) {{"]
        for node in self.nodes:
            operands = [t.name for t in node.inputs]
            operands += [f"{k}={_fmt_attr(v)}" for k, v in node.attrs]
            lines.append(f"  {node.output!r} = {node.op}({', '.join(operands)})")
        lines.append("}")
        return "\n".join(lines)

    def to_dot(self) -> str:
        """The graph as Graphviz ``dot`` text."""
        lines = [f'digraph "{self.name}" {{', "  rankdir=TB;", '  node [fontname="monospace"];']
        for t in self.inputs:
            lines.append(f'  "{t.name}" [shape=box, label="{t.name}\\n{t.dtype}{list(t.shape)}"];')
        for node in self.nodes:
            attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in node.attrs).replace('"', "'")
            label = f"{node.op}\\n{attrs}\\n{node.output.dtype}{list(node.output.shape)}"
            lines.append(f'  "{node.output.name}" [shape=ellipse, label="{node.output.name} = {label}"];')
            for i, t in enumerate(node.inputs):
                lines.append(f'  "{t.name}" -> "{node.output.name}" [label="{i}"];')
        for t in self.outputs:
            lines.append(f'  "out:{t.name}" [shape=doubleoctagon, label="output {t.name}"];')
            lines.append(f'  "{t.name}" -> "out:{t.name}";')
        lines.append("}")
        return "\n".join(lines)
