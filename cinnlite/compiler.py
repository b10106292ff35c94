"""``cinnlite.compile``: Program -> executable for a target, through the pass pipelines."""
from __future__ import annotations

from .errors import CinnliteError
from .ir.graph import Program
from .ir.fusion import inline_computes
from .ir.lower import lower_program
from .ir.passes import CPU_PIPELINE, run_pipeline

TARGETS = ("cpu", "cuda", "cuda-emu")


def compile(program: Program, target: str = "cpu", opt_level: int = 3, deterministic: bool = False,
            threads: int | None = None, fuse: bool = True, dump_passes: bool = False):
    """Compile ``program`` for ``target`` ("cpu", "cuda" or "cuda-emu").

    ``opt_level`` 0-3 is LLVM's optimisation level on the CPU. ``deterministic`` asks GPU scatters
    with reductions for bit-identical results from run to run (the CPU always is).
    ``fuse`` inlines gathers, fills, reshapes and elementwise operators into their consumers.
    ``threads`` caps the CPU threads one call uses (default: the cores this process may use).
    ``dump_passes`` keeps the loop nests after every pass as stages ``lowered:<pass>``.
    """
    if not isinstance(program, Program):
        raise CinnliteError(f"compile() takes a Program from NetBuilder.build(), got {type(program).__name__}")
    if target not in TARGETS:
        raise CinnliteError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")
    if opt_level not in (0, 1, 2, 3):
        raise CinnliteError(f"opt_level must be 0, 1, 2 or 3, got {opt_level!r}")
    lowered = lower_program(program)
    if target == "cpu":
        from .runtime.cpu import CPUExecutable

        if fuse:
            lowered = inline_computes(lowered)
        result = run_pipeline(lowered, CPU_PIPELINE, dump=dump_passes)
        lowered, dumps = result if dump_passes else (result, ())
        return CPUExecutable(program, lowered, opt_level=opt_level, pass_dumps=dumps, threads=threads)
    raise CinnliteError(f"target {target!r} is not available in this build")
