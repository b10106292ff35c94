"""``cinnlite.compile``: Program -> executable for a target, through the pass pipelines."""
from __future__ import annotations

from .api_types import Executable, Target
from .errors import CinnliteError
from .ir.graph import Program
from .ir.fusion import inline_computes
from .ir.lower import lower_program
from .ir.passes import CPU_PIPELINE, run_pipeline
from .runtime import cache as caches
from .runtime.cpu import CPUExecutable, host_environment
from .runtime.workers import check_threads

TARGETS = ("cpu", "cuda", "cuda-emu")


def compile(program: Program, target: Target = "cpu", opt_level: int = 3, deterministic: bool = False,
            threads: int | None = None, fuse: bool = True, cache: bool = True, dump_passes: bool = False) -> Executable:
    """Compile ``program`` for ``target`` ("cpu", "cuda" or "cuda-emu").

    ``opt_level`` 0-3 is LLVM's optimisation level on the CPU. ``deterministic`` asks GPU scatters
    with reductions for bit-identical results from run to run (the CPU always is).
    ``fuse`` inlines gathers, fills, reshapes and elementwise operators into their consumers.
    ``threads`` caps the CPU threads one call uses (default: the cores this process may use).
    ``dump_passes`` keeps the loop nests after every pass as stages ``lowered:<pass>``.
    ``cache`` looks the program up in the in-memory and disk compile caches (see
    ``cinnlite.runtime.cache``; ``CINNLITE_CACHE_DIR`` moves or, set to ``off``, disables the
    disk cache, ``CINNLITE_CACHE_MAX_BYTES`` bounds it) and stores what it compiles there.
    """
    if not isinstance(program, Program):
        raise CinnliteError(f"compile() takes a Program from NetBuilder.build(), got {type(program).__name__}")
    if target not in TARGETS:
        raise CinnliteError(f"unknown target {target!r}; expected one of {', '.join(TARGETS)}")
    if opt_level not in (0, 1, 2, 3):
        raise CinnliteError(f"opt_level must be 0, 1, 2 or 3, got {opt_level!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise CinnliteError(f"threads must be a positive integer or None, got {threads!r}")
    if threads is not None:
        check_threads(threads, "threads")  # before any cache lookup: a bad value never compiles
    if target == "cpu":
        return _compile_cpu(program, opt_level, threads, fuse, cache and not dump_passes, dump_passes)
    lowered = lower_program(program)
    from .runtime.cuda import compile_cuda  # "cuda" and "cuda-emu": one pipeline, one renderer

    if fuse:
        lowered = inline_computes(lowered)
    return compile_cuda(program, lowered, target, deterministic=deterministic, dump_passes=dump_passes)


def _compile_cpu(program, opt_level, threads, fuse, use_cache, dump_passes):
    key, disk = None, None
    if use_cache:
        options = {"opt_level": opt_level, "fuse": fuse, "pipeline": [p.__name__ for p in CPU_PIPELINE]}
        key = caches.compile_key(program, "cpu", options, host_environment())
        exe = caches.MEMORY.get((key, threads))
        if exe is not None:
            return exe
        disk = caches.disk_cache()
        exe = _from_disk(disk, key, program, opt_level, threads) if disk is not None else None
        if exe is not None:
            caches.MEMORY.put((key, threads), exe)
            return exe
    lowered = lower_program(program)
    if fuse:
        lowered = inline_computes(lowered, keep_index_buffers=False)  # the CPU reports bad values
    result = run_pipeline(lowered, CPU_PIPELINE, dump=dump_passes)
    lowered, dumps = result if dump_passes else (result, ())
    exe = CPUExecutable(program, lowered, opt_level=opt_level, pass_dumps=dumps, threads=threads)
    if key is not None:
        caches.MEMORY.put((key, threads), exe)
        entry = exe.cache_entry()
        if disk is not None and entry is not None:
            disk.store(key, entry)
    return exe


def _from_disk(disk, key, program, opt_level, threads):
    """The executable of a disk entry, or None. The entry's seal has been checked, so it is what
    some cinnlite wrote under this key; one that still does not rebuild (a foreign writer, a
    layout this version does not expect) is a miss, compiled again and replaced."""
    entry = disk.load(key)
    if entry is None:
        return None
    try:
        return CPUExecutable(program, entry["lowered"], opt_level=opt_level, threads=threads, cached=entry)
    except Exception:  # noqa: BLE001 - any failure to rebuild means: compile afresh
        return None
