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
"""
from __future__ import annotations

from .cast import CAST
from .common import (INDEX_LAYOUTS, MODES, REDUCTIONS, check_scalar, check_shape, index_tuple_shape,
                     normalize_axis)
from .constants import CONSTANT, FILL_CONSTANT
from .definition import NoAttrs, OpDef
from .elementwise import BINARIES, ELEMENTWISE_BINARY, broadcast_shapes
from .gather import GATHER
from .gather_nd import GATHER_ND
from .layout import RESHAPE
from .scatter import SCATTER
from .scatter_nd import SCATTER_ND
from .take import TAKE


def _registry(*definitions: OpDef) -> dict:
    table = {}
    for definition in definitions:
        if definition.name in table:
            raise ValueError(f"operator {definition.name!r} is defined twice")
        table[definition.name] = definition
    return table


#: Every operator by name.
OPERATORS: dict[str, OpDef] = _registry(FILL_CONSTANT, CONSTANT, RESHAPE, CAST, *BINARIES, TAKE, GATHER, GATHER_ND,
                                        SCATTER, SCATTER_ND)

__all__ = ["OPERATORS", "OpDef", "NoAttrs", "MODES", "REDUCTIONS", "INDEX_LAYOUTS", "ELEMENTWISE_BINARY",
           "broadcast_shapes", "check_scalar", "check_shape", "index_tuple_shape", "normalize_axis"]
