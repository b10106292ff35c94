"""The interface of a renderer: loop nests in, source text out.

Every backend renders through one (``Backend.renderer``): ``codegen/llvm.py`` writes LLVM IR
for the CPU, ``codegen/cuda.py`` CUDA C for the GPU targets. What a renderer needs to know
about its target (a triple, a data layout, deterministic reductions) it takes when it is made;
``render`` then takes the lowered program after the backend's passes and returns a
:class:`RenderedModule`: the text, under the name of the stage that shows it, and whatever the
backend's build and runtime need to know about it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..ir.loopnest import LoweredProgram


@dataclass(frozen=True)
class RenderedModule:
    """One program as source text; ``exe.source(stage)`` shows ``source``."""

    stage: ClassVar[str] = ""
    name: str
    source: str


class Renderer:
    """Loop nests in, source text out."""

    #: The stage whose text ``render`` makes (``exe.source(stage)``).
    stage: str = ""

    def render(self, program: LoweredProgram) -> RenderedModule:
        raise NotImplementedError
