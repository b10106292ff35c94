"""The types that the public API's signatures are written in.

They document, in a form a type checker can use, what each argument accepts: the same values
the operators validate at run time (``cinnlite.ir.ops``), so an editor or mypy flags a
misspelt mode or reduction before the program is ever built. The run-time checks stay the
authority: a value outside these types is still reported as a ``ValidationError``.
"""
from __future__ import annotations

from typing import Literal, Sequence, SupportsIndex, Union

import numpy as np

from .dtypes import DTypeLike
# What ``cinnlite.compile`` returns, whatever the target: ``exe(**arrays)``, ``exe.run(dict)``,
# ``exe.stages`` and ``exe.source(stage)``.
from .runtime.executable import Executable

#: A static shape: a sequence of non-negative integers (``reshape`` also takes one -1).
ShapeLike = Sequence[Union[SupportsIndex, str]]  # a str is a symbolic size

#: A Python or numpy scalar, for fill values and constants.
Scalar = Union[bool, int, float, np.bool_, np.number]

#: What an out-of-range index does (SEMANTICS.md, "Index values").
IndexMode = Literal["raise", "clip", "wrap", "fill"]

#: How a scatter combines an update with the value it lands on.
Reduction = Literal["none", "add", "mul", "max", "min", "mean"]
#: ``scatter_nd``'s reductions: also ``"sub"``.
NdReduction = Literal["none", "add", "mul", "max", "min", "mean", "sub"]

#: Which axis of a ``gather_nd``/``scatter_nd`` index holds the index tuples.
IndexLayout = Literal["last", "first"]

#: Where ``cinnlite.compile`` puts the program.
Target = Literal["cpu", "cuda", "cuda-emu"]

__all__ = ["DTypeLike", "ShapeLike", "Scalar", "IndexMode", "Reduction", "NdReduction", "IndexLayout", "Target", "Executable"]
