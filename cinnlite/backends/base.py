"""The interface of a compile target, and the state one compile carries from stage to stage.

``cinnlite.compile`` runs the same stages for every target (see ``cinnlite/compiler.py``):
validate, lower, fuse, passes, render, build, load. A :class:`Backend` supplies what differs:
its pass pipeline, its renderer, how the rendered code is built and loaded, what goes into its
compile cache key, its executable class and the stage texts its executables show. The memory
and disk caches are the same for every target: an executable's ``cache_entry()`` is what a
disk entry holds, and ``build_from_entry`` turns such an entry back into a build to load.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..codegen.renderer import RenderedModule, Renderer
from ..ir.graph import Program
from ..ir.loopnest import LoweredProgram
from ..runtime.executable import Executable


@dataclass(frozen=True)
class CompileOptions:
    """The options of ``cinnlite.compile`` (see its docstring)."""

    opt_level: int = 3
    deterministic: bool = False
    threads: int | None = None
    fuse: bool = True
    cache: bool = True
    dump_passes: bool = False


@dataclass
class Compilation:
    """One compile on its way through the stages: each stage fills in what it produces."""

    program: Program
    target: str
    options: CompileOptions
    backend: Backend | None = None          # validate
    key: str | None = None                  # validate: the compile cache key, when the cache is used
    lowered: LoweredProgram | None = None   # lower, fuse, passes
    lowered_text: str = ""                  # passes: exe.source("lowered")
    pass_dumps: tuple = ()                  # passes, with dump_passes: (pass name, text) pairs
    rendered: RenderedModule | None = None  # render
    built: Any = None                       # build, or a disk cache entry
    executable: Executable | None = None    # load
    generalise: bool = True                 # a static program may get its structure's shape-generic build


class Backend:
    """One compile target. Subclasses set the attributes and implement the methods."""

    #: The target's name, as ``cinnlite.compile(target=...)`` takes it.
    name: str = ""
    #: The stage texts its executables offer (``exe.stages``, besides ``lowered:<pass>``).
    stages: tuple = ()
    #: Whether fusion keeps index tensors that a ``mode="raise"`` check reads materialised:
    #: a runtime that reads a bad index value back from its buffer needs them.
    keep_index_buffers: bool = True
    #: The class of its executables.
    executable: type = Executable

    def pipeline(self, options: CompileOptions) -> tuple:
        """The passes that run on every kernel after fusion, in order."""
        raise NotImplementedError

    def renderer(self, job: Compilation) -> Renderer:
        """The renderer that writes ``job.lowered`` as this target's source text."""
        raise NotImplementedError

    def build(self, job: Compilation) -> Any:
        """Whatever ``load`` needs from ``job.rendered``: compiled code, or a build under way."""
        raise NotImplementedError

    def build_from_entry(self, entry: dict, options: CompileOptions) -> Any:
        """The build a disk cache entry holds (an executable's ``cache_entry()``)."""
        raise NotImplementedError

    def load(self, job: Compilation) -> Executable:
        """The executable of ``job.built``."""
        raise NotImplementedError

    def cache_options(self, options: CompileOptions) -> dict:
        """The options that change this target's code, for the compile cache key."""
        raise NotImplementedError

    def environment(self) -> dict:
        """What about this machine and this cinnlite changes the code, for the cache key."""
        raise NotImplementedError

    def pipeline_names(self, options: CompileOptions) -> list:
        return [p.__name__ for p in self.pipeline(options)]
