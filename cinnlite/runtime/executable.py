"""What every backend's executable shares: argument checking, buffer allocation, error reporting
and the ``exe(**arrays)`` / ``exe.run(dict)`` / ``exe.source(stage)`` interface."""
from __future__ import annotations

import mmap
import threading
import weakref
from collections import Counter
from typing import Any, Sequence, Union

import numpy as np

from ..errors import InputError, InputTypeError
from ..ir.loopnest import LoweredProgram
from .shapes import ShapePlan, ShapePlans, shape_matches, shape_tuple_text


#: ``out=``: an array for a program's one output, or a tuple (or list) of them in output order.
OutArrays = Union[np.ndarray, Sequence[np.ndarray], None]

#: Buffers of at least this many bytes are recycled between calls (see ``BufferPool``); past
#: ``POOL_MAX_BYTES`` they are not kept, so a huge result is given back as soon as it is dropped.
POOL_MIN_BYTES = 1 << 20
POOL_MAX_BYTES = 1 << 30
#: Intermediates, which never leave a call, are recycled from this size: malloc serves blocks of
#: this size and more from fresh mappings or a heap it trims, and faults them in again on every
#: call (a model with a dozen intermediates of 64 KiB to 1 MiB took 500 page faults a call).
POOL_MIN_BYTES_INTERMEDIATE = 1 << 16
POOL_PER_SHAPE = 2
#: The kernel's large page (x86-64 and most arm64 Linux): pooled blocks are laid on them (see
#: ``_new_block``).
HUGE_PAGE = 2 << 20


def _huge_extent(nbytes: int) -> int:
    """How much of a block of ``nbytes`` lies on large pages: all of it, rounded up to whole
    pages, where that adds at most half as much again (a page is resident in full once
    touched), else its whole pages only."""
    up = -(-nbytes // HUGE_PAGE) * HUGE_PAGE
    return up if 2 * (up - nbytes) <= nbytes else nbytes // HUGE_PAGE * HUGE_PAGE


def _new_block(nbytes: int) -> tuple:
    """Memory for a pooled block: ``(buffer, offset of the block in it)``.

    Never an array: an array made over the buffer (``np.ndarray`` with ``buffer=``) has it as
    ``base``, so numpy never collapses a view's ``base`` past that array (see ``BufferPool``).
    Blocks of 1.33 MiB and more are anonymous private mappings that start on a 2 MiB boundary
    and ask for Linux's transparent huge pages over what ``_huge_extent`` says: a pooled block
    is written by every call, and a call after a pause finds neither the block in the caches
    nor its pages in the TLB; on 4 KiB pages each page costs a page walk (on a virtual machine
    a nested one), which made writing a cold 3 MB output take 1.6x as long as on 2 MiB pages.
    A kernel without them ignores the advice, and pages the block never touches are never made
    resident. Smaller blocks are bytearrays, from malloc as before (a mapping each would count
    against the process's limit of mappings)."""
    extent = _huge_extent(nbytes) if hasattr(mmap, "MADV_HUGEPAGE") and hasattr(mmap, "MAP_PRIVATE") else 0
    if not extent:
        return bytearray(nbytes), 0
    # A shared mapping would not be given large pages; one page more, to start on a boundary.
    mapping = mmap.mmap(-1, max(extent, nbytes) + HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    whole = np.frombuffer(mapping, np.uint8)
    start = -whole.__array_interface__["data"][0] % HUGE_PAGE
    del whole  # its export of the mapping
    try:
        mapping.madvise(mmap.MADV_HUGEPAGE, start, extent)
    except OSError:
        pass
    return mapping, start


class BufferPool:
    """A caching allocator for big outputs and intermediates.

    Fresh large arrays cost page faults on first touch, often more than the kernel itself. The
    pool keeps up to ``POOL_PER_SHAPE`` blocks of memory per (shape, dtype), more where one call
    takes several arrays of that shape (see ``empty``), and never hands out a block itself:
    each call gets a new array over a block (so what a caller did to an earlier one, reshaped
    it in place or changed its dtype or flags, never shows in a later result), and the block is
    used again only once no array over it is left (the caller dropped the result and every view
    of it, or it was an intermediate of a finished call), so a result is never overwritten
    behind its owner's back.

    Whether any is left, a weak reference to the handed-out array tells, whatever the
    interpreter does with reference counts: the array's ``base`` is the block's buffer, not an
    array, so every view of it (and every view of a view) has the array itself as ``base``,
    and a buffer export of it holds it too. The pool also holds an export of each buffer, so
    that no one can close or resize it through an array's ``base`` while arrays point into it.
    """

    def __init__(self):
        # (shape, dtype) -> [[buffer, weak reference to the array handed out or None, offset, export]]
        self._blocks: dict = {}
        self._lock = threading.Lock()

    @staticmethod
    def serves(nbytes: int, min_bytes: int = POOL_MIN_BYTES) -> bool:
        """Whether ``empty`` hands out a block of ``nbytes`` (else a plain new array)."""
        return min_bytes <= nbytes <= POOL_MAX_BYTES

    def empty(self, shape, dtype, nbytes: int, per_call: int = 1, min_bytes: int = POOL_MIN_BYTES):
        """An array over a free block of this (shape, dtype), or over a new one. ``per_call``:
        how many such arrays one call of the executable takes (its intermediates may share a
        shape): the pool keeps that many blocks more than ``POOL_PER_SHAPE - 1``, so that every
        one of them is reused rather than faulted in again on every call. Blocks below
        ``min_bytes`` are plain new arrays."""
        if not self.serves(nbytes, min_bytes):
            return np.empty(shape, dtype)
        return self.take(shape, dtype, self.shelf(shape, dtype), nbytes, per_call)

    def shelf(self, shape, dtype) -> list:
        """The blocks of one (shape, dtype), a list that stays the same for the pool's life: a
        caller that asks for that shape on every call keeps it and calls ``take``, which then
        neither hashes the shape nor looks it up (a call after a pause pays for every line)."""
        with self._lock:
            return self._blocks.setdefault((shape, dtype), [])

    def forget(self, keys):
        """Let go of the free blocks of these (shape, dtype) keys, and of the others once no
        array uses them: sizes this executable no longer runs (a static build serves them,
        with its own pool) would hold their memory twice. A shelf stays, empty."""
        with self._lock:
            for key in keys:
                self._blocks.get(key, []).clear()

    def take(self, shape, dtype, shelf: list, nbytes: int, per_call: int = 1) -> np.ndarray:
        """``empty`` for a block the pool serves, from its ``shelf``."""
        with self._lock:
            for slot in shelf:
                if slot[1] is None or slot[1]() is None:
                    break
            else:
                buffer, start = _new_block(nbytes)
                slot = [buffer, None, start, memoryview(buffer)]
                if len(shelf) < POOL_PER_SHAPE - 1 + per_call:
                    shelf.append(slot)
            # (An array over a buffer is made without parsing a description of it: a tenth
            # of what ``__array_interface__`` costs, and far less in a call after a pause.)
            arr = np.ndarray(shape, dtype, slot[0], slot[2])
            slot[1] = weakref.ref(arr)
        return arr


#: DLPack device types whose memory the host can read: the CPU, and CUDA's pinned host memory.
_HOST_DEVICES = (1, 3)


def input_name_mismatch(expected, given) -> str | None:
    """``"missing input(s) 'a'; unknown input(s) 'b'"`` for the names ``given`` lacks or adds
    against ``expected`` (both in their order), or None when they match: the one wording of
    every call that takes inputs by name (executables, ``cl.torch``, ``cl.onnx``)."""
    missing = [n for n in expected if n not in given]
    unknown = [n for n in given if n not in expected]
    parts = [f"{label} input(s) " + ", ".join(repr(n) for n in names)
             for label, names in (("missing", missing), ("unknown", unknown)) if names]
    return "; ".join(parts) or None


def host_array(value, name: str = "input") -> np.ndarray:
    """``value`` as a numpy array: itself, the same memory for any array with ``__dlpack__`` on
    the host (PyTorch, JAX, CuPy's pinned memory), or what ``np.asarray`` makes of it. Device
    memory and arrays DLPack will not export are an InputError naming the input."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__dlpack__") and not isinstance(value, (list, tuple)):
        device = value.__dlpack_device__() if hasattr(value, "__dlpack_device__") else (1, 0)
        if int(device[0]) not in _HOST_DEVICES:
            raise InputError(f"{name} is in device memory (DLPack device {tuple(int(d) for d in device)}); "
                             "the runtime reads host memory: move it to the CPU first")
        try:
            return np.from_dlpack(value)
        except (BufferError, TypeError, RuntimeError, ValueError) as exc:
            raise InputTypeError(f"{name}: DLPack does not export it: {exc}") from None
    return np.asarray(value)


class Executable:
    """A compiled program. Subclasses implement ``_run(arrays) -> {output name: array}`` and
    the stage texts; this class owns the checks every call makes."""

    target = "?"
    #: Whether calls read arrays in a GPU's memory in place (PyTorch CUDA tensors, CuPy arrays).
    takes_gpu_memory = False
    #: Whether calls of a symbolic program with a power-of-two indexed axis run a static
    #: specialisation (see ``ShapePlans``): where the backend's static code is faster there.
    specialises_power_of_two = False
    #: Whether sizes whose calls have moved ``shapes.hot_size_bytes()`` on the shape-generic code
    #: run a static specialisation from then on: where the backend's static code is faster.
    specialises_hot_sizes = False
    _store_entry = None  # writes this executable's cache entry, once compile() gives it one

    def __init__(self, program, lowered: LoweredProgram, sources: dict, lazy_sources: dict | None = None):
        """``lazy_sources`` maps a stage to a function of the executable that makes its text on
        first use (a function of the executable, not a bound method or a closure over it: that
        would be a reference cycle, and the executable, its code and its buffers would wait for
        the cyclic garbage collector instead of going with the last reference)."""
        self.program = program
        self.lowered = lowered
        self._sources = dict(sources)
        self._lazy = dict(lazy_sources or {})
        # Input shapes as the graph declares them: numbers, and symbolic sizes (Dims).
        self._inputs = [(t.name, tuple(t.shape), t.dtype.np) for t in program.inputs]
        self._input_names = {name for name, _, _ in self._inputs}
        self._table = lowered.buffer_table()
        self._consts = {b.name: c.array for b, c in lowered.constants}
        self._produced = {k.output.name for k in lowered.kernels}
        symbols = {b.name for b in lowered.symbols}
        # (name, shape, dtype, bytes); the bytes are None where a size is symbolic (ShapePlans).
        self._alloc = [(b.name, tuple(b.shape), b.dtype.np, b.size * b.dtype.itemsize if b.is_static else None)
                       for b in self._table
                       if b.name not in self._input_names and b.name not in self._consts and b.name not in symbols]
        self._pool = BufferPool()
        self._output_names = {b.name for b in lowered.outputs}
        self._checks = {c.check_id: c for c in lowered.checks}
        self._shapes = ShapePlans(program, lowered, self._alloc, self.specialises_power_of_two,
                                  self.specialises_hot_sizes)
        self.symbolic = not program.is_static

    # -- stages ----------------------------------------------------------------------------------

    @property
    def stages(self) -> tuple[str, ...]:
        return tuple(self._sources) + tuple(k for k in self._lazy if k not in self._sources)

    def source(self, stage: str) -> str:
        """The text of one compilation stage (see ``stages``)."""
        if stage in self._sources:
            return self._sources[stage]
        if stage in self._lazy:
            self._sources[stage] = self._lazy[stage](self)
            return self._sources[stage]
        raise ValueError(f"unknown stage {stage!r} for target {self.target}; stages: {', '.join(self.stages)}")

    # -- the disk cache ----------------------------------------------------------------------------

    def cache_entry(self) -> dict | None:
        """What a disk cache entry holds to rebuild this executable without compiling; None
        when there is nothing to store."""
        return None

    def store_cache_entries_with(self, store, now: bool = True):
        """Write the cache entry with ``store(entry)``: now (``now``), and again whenever the
        executable builds more of itself later (NVRTC's output, for the CUDA targets)."""
        self._store_entry = store
        if now:
            self._update_cache_entry()

    def _update_cache_entry(self):
        store = self._store_entry
        entry = self.cache_entry() if store is not None else None
        if entry is not None:
            store(entry)

    # -- calling ---------------------------------------------------------------------------------

    def _ready_inputs(self, kwargs: dict):
        """The common case, kept cheap: every name present with an array of the right dtype and
        shape, C-ordered and aligned. Returns the arrays in input order, or None; anything else
        takes ``_check_inputs_slow``, which converts what it can and explains the rest."""
        if self.symbolic or len(kwargs) != len(self._inputs):
            return None
        ordered = []
        for name, shape, dtype in self._inputs:
            arr = kwargs.get(name)
            if type(arr) is not np.ndarray or arr.dtype != dtype or arr.shape != shape:
                return None
            flags = arr.flags
            if not (flags.c_contiguous and flags.aligned):
                return None
            ordered.append(arr)
        return ordered

    def _check_inputs(self, kwargs: dict) -> dict:
        ordered = self._ready_inputs(kwargs)
        if ordered is not None:
            return {name: arr for (name, _, _), arr in zip(self._inputs, ordered)}
        return self._check_inputs_slow(kwargs)

    def _check_inputs_slow(self, kwargs: dict) -> dict:
        self._check_input_names(kwargs)
        return {name: self._checked_input(name, shape, dtype, kwargs[name]) for name, shape, dtype in self._inputs}

    def _check_input_names(self, kwargs: dict):
        mismatch = input_name_mismatch([n for n, _, _ in self._inputs], kwargs)
        if mismatch:
            expected = ", ".join(f"{n}: {dt.name}{list(s)}" for n, s, dt in self._inputs)
            raise InputError(f"program '{self.program.name}': {mismatch} (expects {expected})")

    @staticmethod
    def _checked_input(name: str, shape: tuple, dtype: np.dtype, value) -> np.ndarray:
        """One input as the host array a call reads: of the program's dtype and shape, C-ordered."""
        arr = host_array(value, f"input '{name}'")
        if arr.dtype != dtype and arr.dtype.newbyteorder("=") == dtype:
            arr = arr.astype(dtype)  # the same values in the other byte order: a layout change
        if arr.dtype != dtype:
            raise InputTypeError(f"input '{name}': expected dtype {dtype.name}, got {arr.dtype.name} "
                                 f"(cinnlite does not cast; use .astype(np.{dtype.name}))")
        if not shape_matches(arr.shape, shape):
            raise InputError(f"input '{name}': expected shape {shape_tuple_text(shape)}, got {arr.shape}")
        if not (arr.flags.c_contiguous and arr.flags.aligned):
            arr = np.array(arr, order="C", copy=True)
        return arr

    def _allocate(self, arrays: dict, plan: ShapePlan, outputs: dict | None = None) -> dict:
        """Every buffer of a call: the inputs, constants and sizes, the caller's ``out=``
        arrays, and new (or pooled) memory for the rest."""
        buffers = dict(arrays)
        buffers.update(self._consts)
        buffers.update(plan.symbol_arrays)
        terms = self._pool_terms(plan)
        for name, shape, dtype, _ in plan.allocs:
            buffers[name] = outputs[name] if outputs and name in outputs else self._pool.empty(
                shape, dtype, *terms[name])
        return buffers

    def _pool_terms(self, plan: ShapePlan) -> dict:
        """``BufferPool.empty``'s (nbytes, per_call, min_bytes) for every buffer a call of
        ``plan``'s sizes allocates, by name; made once per plan (both call paths use them)."""
        terms = plan.extra.get("pool_terms")
        if terms is None:
            per_call = Counter((shape, np.dtype(dtype)) for _, shape, dtype, _ in plan.allocs)
            terms = plan.extra["pool_terms"] = {
                name: (nbytes, per_call[shape, np.dtype(dtype)],
                       POOL_MIN_BYTES if name in self._output_names else POOL_MIN_BYTES_INTERMEDIATE)
                for name, shape, dtype, nbytes in plan.allocs}
        return terms

    def _raise_index_error(self, check_id: int, position: int, buffers: dict, value: int | None = None,
                           plan: ShapePlan | None = None):
        """Raise the IndexError of a failed check. ``value`` is the bad index where the kernel
        reported it; otherwise it is read from the index buffer, which must then exist."""
        chk = self._checks[check_id]
        if value is None:
            value = int(np.asarray(buffers[chk.buffer]).reshape(-1)[position])
        raise chk.error(position, value, plan.size_of if plan is not None else int)

    def _outputs(self, buffers: dict) -> dict:
        outs = {}
        for b in self.lowered.outputs:
            arr = buffers[b.name]
            # An output that is an input or a constant is returned as a fresh copy.
            outs[b.name] = arr if b.name in self._produced else np.array(arr, copy=True)
        return outs

    def run(self, inputs: dict, out: OutArrays = None) -> dict[str, np.ndarray]:
        """Run on a dict of input arrays; returns ``{output name: array}``. ``out`` as in
        ``__call__``."""
        if not isinstance(inputs, dict):
            raise InputError("run() takes a dict of input name -> array")
        arrays = self._check_inputs(inputs)
        if out is None:
            return self._dispatch(arrays)
        return self._run_into(arrays, out)

    def __call__(self, out: OutArrays = None, **inputs: np.typing.ArrayLike) -> Any:
        """Run on keyword arrays; returns the output array, or a tuple in output order.

        ``out=`` takes preallocated arrays for the outputs (an array, or a tuple in output
        order): each of the output's shape and dtype, C-contiguous, aligned, writeable and
        sharing no memory with an input; the kernels write into them, and they are the result.
        (A program with an input named ``out`` takes that input under the name, and ``out=``
        only through ``run``.)

        Typed ``Any`` because which of the two it is depends on the program, not on the call:
        a union would make every caller narrow a result whose kind it already knows."""
        if out is not None and "out" in self._input_names:
            inputs["out"], out = out, None
        arrays = self._check_inputs(inputs)
        if out is not None:
            outs = self._run_into(arrays, out)
        else:
            outs = self._dispatch(arrays)
        values = tuple(outs[b.name] for b in self.lowered.outputs)
        return values[0] if len(values) == 1 else values

    def _run_into(self, arrays: dict, out) -> dict:
        """A run whose outputs are the caller's arrays (see ``__call__``)."""
        plan = self._shapes.plan_for(arrays, self)
        outputs = self._out_arrays(out, arrays, plan)
        outs = self._dispatch(arrays, outputs, plan)
        for name, arr in outputs.items():
            if outs[name] is not arr:  # an input or a constant returned as an output: copied
                np.copyto(arr, outs[name])
                outs[name] = arr
        return outs

    def _out_arrays(self, out, arrays: dict, plan: ShapePlan) -> dict:
        """The ``out=`` arrays by output name, each checked against the output it receives."""
        names = [b.name for b in self.lowered.outputs]
        given = out if isinstance(out, (tuple, list)) else (out,)
        if len(given) != len(names):
            raise InputError(f"out= holds {len(given)} array(s); the program has {len(names)} output(s) "
                             f"({', '.join(names)})")
        checked = {}
        for b, arr in zip(self.lowered.outputs, given):
            want = tuple(plan.size_of(d) for d in b.shape)
            if not isinstance(arr, np.ndarray):
                raise InputTypeError(f"out= for output '{b.name}': expected a numpy array, got {type(arr).__name__}")
            if arr.dtype != b.dtype.np:
                raise InputTypeError(f"out= for output '{b.name}': expected dtype {b.dtype.np.name}, got {arr.dtype.name}")
            if arr.shape != want:
                raise InputError(f"out= for output '{b.name}': expected shape {want}, got {arr.shape}")
            if not (arr.flags.c_contiguous and arr.flags.aligned and arr.flags.writeable):
                raise InputError(f"out= for output '{b.name}': the array must be C-contiguous, aligned and writeable")
            for name, a in list(arrays.items()) + list(checked.items()):
                if np.may_share_memory(arr, a):
                    raise InputError(f"out= for output '{b.name}' shares memory with '{name}'; give it its own array")
            checked[b.name] = arr
        return checked

    def _dispatch(self, arrays: dict, outputs: dict | None = None, plan: ShapePlan | None = None) -> dict:
        """Run on checked arrays: the sizes they give decide the plan (``ShapePlans.plan_for``),
        which is this code, or the static specialisation of exactly those sizes. ``outputs``
        are the caller's ``out=`` arrays, by output name."""
        plan = plan or self._shapes.plan_for(arrays, self)
        if plan.hot_left > 0:
            self._count_call(plan)
        if plan.specialised is not None:
            return plan.specialised._dispatch(arrays, outputs)
        return self._run(arrays, plan, outputs)

    def _count_call(self, plan: ShapePlan) -> bool:
        """Count a call of ``plan``'s sizes toward their static build (``ShapePlans.ran``);
        where this call made them hot, the pool lets go of what it kept for them. Returns
        whether it did."""
        if not self._shapes.ran(plan):
            return False
        self._pool.forget([(shape, dtype) for _, shape, dtype, _ in plan.allocs])
        return True

    def _run(self, arrays: dict, plan: ShapePlan, outputs: dict | None = None) -> dict:
        raise NotImplementedError
