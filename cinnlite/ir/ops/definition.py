"""What an operator is to the compiler: :class:`OpDef`, the one record that graph building and
lowering look up by the operator's name."""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Callable


@dataclass(frozen=True)
class NoAttrs:
    """The attributes of an operator that has none (the elementwise binaries)."""


@dataclass(frozen=True)
class OpDef:
    """One operator.

    ``operands`` names its input tensors in order, as its errors name them. ``attrs`` is a
    frozen dataclass of its normalised attributes: the fields, in order, are the ``(name,
    value)`` pairs of its graph nodes, and their defaults are those of its ``NetBuilder``
    method. ``infer(inputs, **arguments)`` takes the input tensors and the builder method's
    arguments, checks every rule of SEMANTICS.md and returns ``(attrs, shape, dtype)`` of the
    node, or raises ``ValidationError``/``DTypeError`` naming the operator and the rule.
    ``lower(ctx, node, attrs)`` returns the node's :class:`~cinnlite.ir.loopnest.Kernel`,
    built with the shared machinery of :mod:`cinnlite.ir.lower` (``ctx`` is its
    :class:`~cinnlite.ir.lower.LoweringContext`). It is None for an operator whose output is
    data known when the graph is built (``constant``): the runtimes bind its ``value``
    attribute as a buffer, and no kernel computes it.
    """

    name: str
    operands: tuple
    attrs: type
    infer: Callable
    lower: Callable | None

    def node_attrs(self, attrs) -> tuple:
        """``attrs`` as a graph node holds them: ``(name, value)`` pairs in field order."""
        if type(attrs) is not self.attrs:
            raise TypeError(f"{self.name}: attributes must be {self.attrs.__name__}, got {type(attrs).__name__}")
        return tuple((f.name, getattr(attrs, f.name)) for f in fields(attrs))

    def attrs_of(self, node):
        """The attributes of a graph node of this operator, as an ``attrs`` instance."""
        return self.attrs(**node.attr_dict)
