"""The operators, one module each, and :data:`OPERATORS`, the registry that graph building
looks them up in.

Each operator module declares its attributes (a frozen dataclass), checks its rules and infers
its output shape and dtype, in one :class:`OpDef`; the rules several operators share live in
:mod:`.common`.
"""
from __future__ import annotations

from .cast import CAST
from .common import (INDEX_LAYOUTS, MODES, REDUCTIONS, check_scalar, check_shape, index_tuple_shape,
                     normalize_axis)
from .constants import FILL_CONSTANT
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
OPERATORS: dict[str, OpDef] = _registry(FILL_CONSTANT, RESHAPE, CAST, *BINARIES, TAKE, GATHER, GATHER_ND,
                                        SCATTER, SCATTER_ND)

__all__ = ["OPERATORS", "OpDef", "NoAttrs", "MODES", "REDUCTIONS", "INDEX_LAYOUTS", "ELEMENTWISE_BINARY",
           "broadcast_shapes", "check_scalar", "check_shape", "index_tuple_shape", "normalize_axis"]
