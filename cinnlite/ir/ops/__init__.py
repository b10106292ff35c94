"""Every operator, one module each, and :data:`OPERATORS`: the registry in which graph
building (``NetBuilder._add``) and lowering (:func:`cinnlite.ir.lower.lower_program`) look an
operator up by its name.

An operator's module holds all there is to it, joined in one :class:`OpDef`: the frozen
dataclass of its attributes, the function that checks its rules and infers its output shape
and dtype, and the function that lowers one of its nodes to loop nests. What several operators
share is written once: the rules (modes, reductions, axes, ``dims``, index dtypes, scalars,
shapes) in :mod:`.common`, the lowering machinery (loop nests, :class:`~cinnlite.ir.lower.IndexValue`,
the check nests of ``mode="raise"``, the gather, scatter and elementwise kernels) in
:mod:`cinnlite.ir.lower`.

How to add an operator
----------------------

1. Write ``cinnlite/ir/ops/<name>.py`` (``take.py`` is a short model), with a docstring
   saying what the operator computes, and in it:

   - ``<Name>Attrs``, a frozen dataclass of the attributes as the graph node stores them,
     normalised (axes non-negative, scalars checked against the data dtype). The fields, in
     order, become the node's ``attrs`` pairs, which the printed graph and the compile cache
     key are made of; their defaults are those of the ``NetBuilder`` method.
   - ``infer_<name>(inputs, **arguments)``: check every rule, with the helpers of
     :mod:`.common` wherever a rule is shared, raising ``ValidationError`` or ``DTypeError``
     with the operator's name, the rule and the input at fault; return
     ``(<Name>Attrs(...), shape, dtype)``.
   - ``lower_<name>(ctx, node, attrs)``: return the node's ``Kernel``, built with
     :mod:`cinnlite.ir.lower` (``make_kernel``, ``loop_nest``, ``LoopVars``, or a kernel of a
     family: ``elementwise_kernel``, ``gather_value``, ``scatter_kernel``). Address memory
     only through indices resolved by ``IndexValue``, and put the nest behind
     ``ctx.with_check(node, attrs.mode, ...)`` so that ``mode="raise"`` reports the first bad
     position (the index tensor is the node's second operand).
   - ``<NAME> = OpDef("<name>", operands=(...), attrs=..., infer=..., lower=...)``, where
     ``operands`` names the input tensors the way errors name them (``"x"``, ``"index"``).

2. Register it: add ``<NAME>`` to the ``_registry(...)`` call below.

3. Add the ``NetBuilder`` method: its signature, type hints and docstring are the public API;
   its body is ``return self._add("<name>", [operands...], name, **arguments)``.

4. Specify and test it: its contract in docs/SEMANTICS.md, a numpy reference in
   tests/reference.py, numerical tests on every backend (tests/test_ops_numeric.py), its
   broken rules in the catalogue of tests/test_invalid_programs.py, and a node of it in
   ``_program`` of tests/test_operator_registry.py, which then checks that the builder's
   arguments and defaults agree with the operator's operands and attributes.

Fusion, the passes, the printer, the cache and the renderers need nothing new as long as the
lowering uses the loop-nest IR classes that exist (:mod:`cinnlite.ir.loopnest`).
"""
from __future__ import annotations

from .cast import CAST
from .common import (INDEX_LAYOUTS, MODES, REDUCTIONS, check_scalar, check_shape, index_tuple_shape,
                     normalize_axis)
from .compare import COMPARES, COMPARISONS
from .constants import CONSTANT, FILL_CONSTANT, IOTA
from .definition import NoAttrs, OpDef
from .elementwise import BINARIES, ELEMENTWISE_BINARY, broadcast_shapes
from .gather import GATHER
from .gather_nd import GATHER_ND
from .layout import RESHAPE
from .reduce import REDUCES
from .scatter import SCATTER
from .scatter_nd import SCATTER_ND
from .take import TAKE
from .unary import UNARIES, UNARY_VALUES
from .where import WHERE


def _registry(*definitions: OpDef) -> dict:
    """The definitions by name; a name defined twice is a mistake in this package."""
    table = {}
    for definition in definitions:
        if definition.name in table:
            raise ValueError(f"operator {definition.name!r} is defined twice")
        table[definition.name] = definition
    return table


#: Every operator by name.
OPERATORS: dict[str, OpDef] = _registry(FILL_CONSTANT, IOTA, CONSTANT, RESHAPE, CAST, *BINARIES, *UNARIES, *COMPARES, WHERE,
                                        *REDUCES, TAKE, GATHER, GATHER_ND, SCATTER, SCATTER_ND)

__all__ = ["OPERATORS", "OpDef", "NoAttrs", "MODES", "REDUCTIONS", "INDEX_LAYOUTS", "ELEMENTWISE_BINARY", "COMPARISONS", "UNARY_VALUES",
           "broadcast_shapes", "check_scalar", "check_shape", "index_tuple_shape", "normalize_axis"]
