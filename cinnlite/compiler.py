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
from dataclasses import replace

from .api_types import Executable, Target
from .backends.base import Compilation, CompileOptions
from .backends.registry import BACKENDS, get_backend
from .errors import CinnliteError
from .ir.fusion import inline_computes
from .ir.graph import Program
from .ir.lower import lower_program
from .ir.passes import run_pipeline
from .ir.rebuild import generalise
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
    return _run_stages(Compilation(program, target,
                                   CompileOptions(opt_level, deterministic, threads, fuse, cache, dump_passes)))


def _run_stages(job: Compilation) -> Executable:
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
    exe = _loaded(job)
    if job.key is not None:
        caches.MEMORY.put((job.key, job.options.threads), exe)
        disk = caches.disk_cache()
        if disk is not None:
            exe.store_cache_entries_with(_storer(disk, job.key, exe))
    job.executable = exe


STAGES = (("validate", validate), ("lower", lower), ("fuse", fuse), ("passes", passes), ("render", render),
          ("build", build), ("load", load))


def _loaded(job: Compilation):
    """The backend's executable of the job; a shape-generic one can compile, with the same
    target and options, the static program of sizes its generic code does not serve."""
    exe = job.backend.load(job)
    if exe.symbolic:
        exe._shapes.compile_static = _static_compiler(job.target, job.options, job.options.cache)
    return exe


def _static_compiler(target, o: CompileOptions, cache: bool = True):
    """``compile`` of another program with the same target and options; with ``generalise``
    False, into exactly that static program (``_generic`` turns a second size of a structure
    into a shape-generic build, which would serve a power-of-two size through yet another
    specialisation)."""
    options = replace(o, cache=cache, dump_passes=False)

    def compile_static(program: Program, generalise: bool = True) -> Executable:
        return _run_stages(Compilation(program, target, options, generalise=generalise))
    return compile_static


# -- the compile cache ----------------------------------------------------------------------------


def _from_caches(job: Compilation):
    """Set ``job.key``; then ``job.executable`` from the memory cache, or from a disk entry, or
    the shape-generic executable of the program's structure (``_generic``)."""
    backend = job.backend
    job.key = caches.compile_key(job.program, backend.name, backend.cache_options(job.options),
                                 backend.environment())
    job.executable = _cached(job, job.key)
    if job.executable is None and job.program.is_static and job.generalise:
        job.executable = _generic(job)


def _cached(job: Compilation, key: str):
    """The executable of ``key`` from the memory cache, or from its disk entry (then remembered
    in memory too), or None."""
    exe = caches.MEMORY.get((key, job.options.threads))
    disk = caches.disk_cache() if exe is None else None
    if disk is not None:
        exe = _from_disk(disk, job, key)
        if exe is not None:
            caches.MEMORY.put((key, job.options.threads), exe)
            exe.store_cache_entries_with(_storer(disk, key, exe), now=False)
    return exe


def _storer(disk: caches.DiskCache, key: str, exe):
    """What writes ``exe``'s disk entries under ``key``; a shape-generic executable's entry
    holds its program too, which the static program that finds it under the key is not."""
    if not exe.symbolic:
        return functools.partial(disk.store, key)
    program = exe.program
    return lambda entry: disk.store(key, {**entry, "program": program})


#: The last static program compiled of each structure key (``_generic``), a bounded number of them.
_SEEN_SIZES: dict = {}
_SEEN_MAX = 1024


def _generic(job: Compilation):
    """The shape-generic executable that serves the job's static program, or None.

    Compiling a program of a structure already compiled at other sizes (a new edge count each
    mini-batch) compiles, once, a version whose differing sizes are symbols (``rebuild.generalise``),
    keyed by the structure in the memory and disk caches; every later size of the structure, in
    this process or the next, gets that executable, which takes any sizes, and compiles nothing."""
    backend, program = job.backend, job.program
    skey = caches.compile_key(program, backend.name, backend.cache_options(job.options), backend.environment(),
                              structure=True)
    exe = _cached(job, skey)
    if exe is not None:
        # Sizes the generic code does not serve (an empty dimension) compile statically.
        return exe if exe._shapes.serves(program) else None
    previous = _SEEN_SIZES.pop(skey, None)
    _SEEN_SIZES[skey] = program
    while len(_SEEN_SIZES) > _SEEN_MAX:
        _SEEN_SIZES.pop(next(iter(_SEEN_SIZES)))
    if previous is None or previous == program:
        return None
    generic = generalise(previous, program)
    if generic is None:
        return None  # (a structure whose sizes do not generalise compiles each size statically)
    o = job.options
    # Cached under the structure's key only: one entry per structure, not one more per program.
    exe = compile(generic, job.target, o.opt_level, o.deterministic, o.threads, o.fuse, cache=False)
    exe._shapes.compile_static = _static_compiler(job.target, o)
    caches.MEMORY.put((skey, o.threads), exe)
    disk = caches.disk_cache()
    if disk is not None:
        exe.store_cache_entries_with(_storer(disk, skey, exe))
    # It serves the sizes after these; these sizes themselves it may not (an empty dimension, a
    # power-of-two axis), and would serve through a specialisation: they compile statically.
    return exe if exe._shapes.serves(program) else None


def _from_disk(disk: caches.DiskCache, job: Compilation, key: str):
    """The executable of a disk entry, or None. The entry's seal has been checked, so it is what
    some cinnlite wrote under this key; one that still does not rebuild (a foreign writer, a
    layout this version does not expect) is a miss, compiled again and replaced. A shape-generic
    entry brings its own program."""
    entry = disk.load(key)
    if entry is None:
        return None
    program = job.program
    try:
        if "program" in entry:
            job.program = entry["program"]
        job.lowered, job.lowered_text = entry["lowered"], entry["lowered_text"]
        job.built = job.backend.build_from_entry(entry, job.options)
        return _loaded(job)
    except Exception:  # noqa: BLE001 - any failure to rebuild means: compile afresh
        job.lowered = job.built = None
        return None
    finally:
        job.program = program
