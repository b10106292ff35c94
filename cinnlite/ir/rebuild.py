"""A program built again from its nodes with other input shapes, as NetBuilder would build it.

Every operator checks its rules and infers its output again (``OpDef.infer``), so the rebuilt
program is exactly what the user's own ``NetBuilder`` calls would give for those shapes, errors
included. Two uses: the static program of one call's sizes (:func:`specialise`, for a call of a
symbolic program that shape-generic code does not serve), and a shape-generic program from a
static one (:func:`generalise`, see ``cinnlite/compiler.py``).
"""
from __future__ import annotations

import functools
import inspect
import re

from .graph import Node, Program, Tensor
from .symbolic import recording_assumptions, substitute, symbol


@functools.lru_cache(maxsize=None)
def _parameters(infer) -> tuple:
    return tuple(inspect.signature(infer).parameters)[1:]


def _arguments(definition, node: Node, bindings: dict) -> dict:
    """The builder arguments that give ``node`` again: its attributes, and what the operator
    keeps in its output tensor instead (``fill_constant``'s shape and dtype)."""
    args = {k: substitute(v, bindings) for k, v in node.attrs}
    for name in _parameters(definition.infer):
        if name not in args:
            if name == "shape":
                args[name] = substitute(tuple(node.output.shape), bindings)
            elif name == "dtype":
                args[name] = node.output.dtype
    return {k: v for k, v in args.items() if k in _parameters(definition.infer)}


def rebuild(program: Program, input_shapes: dict, bindings: dict | None = None) -> Program:
    """``program`` with each input's shape replaced by ``input_shapes[name]`` (ints or Dims),
    every node inferred again, and every symbolic size in an attribute evaluated under
    ``bindings``. Raises the operators' own errors where the new shapes break a rule."""
    from .ops import OPERATORS  # the operator modules import the IR

    bindings = bindings or {}
    tensors: dict = {}
    inputs = []
    for t in program.inputs:
        new = Tensor(t.name, tuple(input_shapes.get(t.name, t.shape)), t.dtype)
        tensors[t.name] = new
        inputs.append(new)
    nodes = []
    with recording_assumptions() as assumed:
        for node in program.nodes:
            definition = OPERATORS[node.op]
            operands = tuple(tensors[t.name] for t in node.inputs)
            if not operands and not any(substitute(v, bindings) != v for _, v in node.attrs) \
                    and substitute(tuple(node.output.shape), bindings) == tuple(node.output.shape):
                new_node = node  # a constant: nothing of it depends on the shapes
            else:
                attrs, shape, dtype = definition.infer(operands, **_arguments(definition, node, bindings))
                out = Tensor(node.output.name, tuple(shape), dtype)
                new_node = Node(node.op, operands, definition.node_attrs(attrs), out)
            tensors[node.output.name] = new_node.output
            nodes.append(new_node)
    outputs = tuple(tensors[t.name] for t in program.outputs)
    return Program(program.name, tuple(inputs), tuple(nodes), outputs, tuple(assumed))


def specialise(program: Program, bindings: dict) -> Program:
    """The static program of a symbolic one for the sizes ``bindings`` gives its symbols."""
    shapes = {t.name: substitute(tuple(t.shape), bindings) for t in program.inputs}
    return rebuild(program, shapes, bindings)


def generalise(a: Program, b: Program) -> Program | None:
    """One shape-generic program that is ``a`` and ``b`` at their sizes, or None.

    Two static programs of one structure differ in some input sizes. Each input size that
    differs becomes a symbol; sizes that differ the same way (the same pair of numbers) share
    one, so an edge count that sizes several inputs stays one size. The program is then built
    again over those symbols; it is returned only if specialising it to the sizes of ``a`` and
    of ``b`` gives back exactly ``a`` and ``b`` (a graph whose attributes fix a size, such as a
    reshape to a number, does not generalise)."""
    from ..errors import CinnliteError

    if [(t.name, len(t.shape)) for t in a.inputs] != [(t.name, len(t.shape)) for t in b.inputs]:
        return None
    symbols: dict = {}
    taken: set = set()
    shapes, values_a, values_b = {}, {}, {}
    for ta, tb in zip(a.inputs, b.inputs):
        dims = []
        for axis, (da, db) in enumerate(zip(ta.shape, tb.shape)):
            if da == db:
                dims.append(da)
                continue
            if (da, db) not in symbols:
                name = _symbol_name(ta.name, axis, taken)
                symbols[(da, db)] = symbol(name)
                values_a[name], values_b[name] = da, db
            dims.append(symbols[(da, db)])
        shapes[ta.name] = tuple(dims)
    if not symbols:
        return None
    try:
        generic = rebuild(a, shapes)
        if specialise(generic, values_a) != a or specialise(generic, values_b) != b:
            return None
    except CinnliteError:
        return None
    return generic


def _symbol_name(tensor: str, axis: int, taken: set) -> str:
    """A readable symbol for axis ``axis`` of input ``tensor``: ``x_0``."""
    base = re.sub(r"\W", "_", f"{tensor}_{axis}", flags=re.ASCII)
    if not re.match(r"[A-Za-z_]", base):
        base = "d_" + base
    name, n = base, 1
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    taken.add(name)
    return name
