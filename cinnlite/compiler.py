"""``cinnlite.compile``: Program -> executable, through the same stages for every target.

``STAGES`` run in order on one :class:`~cinnlite.backends.base.Compilation`:

- ``validate``: the program and the options; the target's backend from the registry; the
  compile cache key. An executable of the same key still alive in this process, or one the
  disk cache holds (which only the ``load`` stage then needs), ends the compile here.
- ``lower``: every operator to loop nests.
- ``fuse``: computes inlined into their consumers (``fuse=True``).
- ``passes``: the backend's pass pipeline.
- ``render``: the loop nests as the backend's source text.
- ``build``: the backend compiles that text (or starts compiling it).
- ``load``: the executable, which goes into the memory cache and, through its
  ``cache_entry()``, the disk cache.
"""
from __future__ import annotations

import functools

from .api_types import Executable, Target
from .backends.base import Compilation, CompileOptions
from .backends.registry import BACKENDS, get_backend
from .errors import CinnliteError
from .ir.fusion import inline_computes
from .ir.graph import Program
from .ir.lower import lower_program
from .ir.passes import run_pipeline
from .ir.printer import program_str
from .runtime import cache as caches
from .runtime.workers import check_threads

TARGETS = BACKENDS


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
    job = Compilation(program, target, CompileOptions(opt_level, deterministic, threads, fuse, cache, dump_passes))
    for _name, stage in STAGES:
        stage(job)
        if job.executable is not None:  # from a cache, or loaded
            return job.executable
    raise AssertionError("the load stage made no executable")


# -- the stages ---------------------------------------------------------------------------------


def validate(job: Compilation):
    """Check the program and the options, find the backend, and look the compile up in the
    caches (see ``_from_caches``)."""
    program, options = job.program, job.options
    if not isinstance(program, Program):
        raise CinnliteError(f"compile() takes a Program from NetBuilder.build(), got {type(program).__name__}")
    job.backend = get_backend(job.target)
    if options.opt_level not in (0, 1, 2, 3):
        raise CinnliteError(f"opt_level must be 0, 1, 2 or 3, got {options.opt_level!r}")
    threads = options.threads
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise CinnliteError(f"threads must be a positive integer or None, got {threads!r}")
    if threads is not None:
        check_threads(threads, "threads")  # before any cache lookup: a bad value never compiles
    if options.cache and not options.dump_passes:
        _from_caches(job)


def lower(job: Compilation):
    job.lowered = lower_program(job.program)


def fuse(job: Compilation):
    if job.options.fuse:
        job.lowered = inline_computes(job.lowered, keep_index_buffers=job.backend.keep_index_buffers)


def passes(job: Compilation):
    result = run_pipeline(job.lowered, job.backend.pipeline(job.options), dump=job.options.dump_passes)
    job.lowered, job.pass_dumps = result if job.options.dump_passes else (result, ())
    job.lowered_text = program_str(job.lowered)


def render(job: Compilation):
    job.rendered = job.backend.renderer(job).render(job.lowered)


def build(job: Compilation):
    job.built = job.backend.build(job)


def load(job: Compilation):
    """The executable, remembered in the memory and disk caches when the compile uses them."""
    exe = job.backend.load(job)
    if job.key is not None:
        caches.MEMORY.put((job.key, job.options.threads), exe)
        disk = caches.disk_cache()
        if disk is not None:
            exe.store_cache_entries_with(functools.partial(disk.store, job.key))
    job.executable = exe


STAGES = (("validate", validate), ("lower", lower), ("fuse", fuse), ("passes", passes), ("render", render),
          ("build", build), ("load", load))


# -- the compile cache ----------------------------------------------------------------------------


def _from_caches(job: Compilation):
    """Set ``job.key``; then ``job.executable`` from the memory cache, or from a disk entry."""
    backend = job.backend
    job.key = caches.compile_key(job.program, backend.name, backend.cache_options(job.options),
                                 backend.environment())
    job.executable = caches.MEMORY.get((job.key, job.options.threads))
    disk = caches.disk_cache() if job.executable is None else None
    if disk is not None:
        exe = _from_disk(disk, job)
        if exe is not None:
            caches.MEMORY.put((job.key, job.options.threads), exe)
            exe.store_cache_entries_with(functools.partial(disk.store, job.key), now=False)
            job.executable = exe


def _from_disk(disk: caches.DiskCache, job: Compilation):
    """The executable of a disk entry, or None. The entry's seal has been checked, so it is what
    some cinnlite wrote under this key; one that still does not rebuild (a foreign writer, a
    layout this version does not expect) is a miss, compiled again and replaced."""
    entry = disk.load(job.key)
    if entry is None:
        return None
    try:
        job.lowered, job.lowered_text = entry["lowered"], entry["lowered_text"]
        job.built = job.backend.build_from_entry(entry, job.options)
        return job.backend.load(job)
    except Exception:  # noqa: BLE001 - any failure to rebuild means: compile afresh
        job.lowered = job.built = None
        return None
