"""The sizes of one call: symbolic sizes bound from the input arrays, and what runs them.

A call of a program with symbolic sizes (``cinnlite.ir.symbolic``) binds every symbol from the
input shapes, checks that one name has one size and that every assumption the graph made holds,
and then runs the shape-generic code with the sizes as scalar buffers (``#E``). A call that the
generic code does not serve (an empty symbolic dimension, or a broken assumption) runs the
static program of exactly its sizes instead, built (errors included) and compiled as if the user
had written it, once per distinct set of sizes. Plans are cached per tuple of input shapes, so
a repeated shape costs one dictionary lookup.

Where a backend's static code is faster than its generic code (the CPU's: constant trip counts
let short loops merge and short rows copy inline, a constant divisor becomes a multiplication),
sizes that turn out to be hot get it too: once the calls of one set of sizes have moved
``hot_size_bytes()`` (their inputs', outputs' and intermediates' bytes, summed), those sizes
run the static program of them from then on, compiled once (``ShapePlans.ran``).
"""
from __future__ import annotations

import operator
import threading
from dataclasses import dataclass, field

import numpy as np

from ..errors import CinnliteError, InputError
from ..ir.loopnest import Binary, Const, Load
from ..ir.symbolic import SYMBOL_BUFFER_PREFIX, Dim, holds
from .cache import bytes_from_env

#: Shape signatures remembered per executable; past it the oldest is forgotten.
MAX_PLANS = 256

#: The bytes the calls of one set of sizes move on shape-generic code before those sizes get a
#: static build, where the backend specialises hot sizes: about what the CPU moves in the time a
#: compile takes (0.1 s), so sizes called rarely never pay for a compile and sizes called often
#: pay for it once, at the cost of at most about one compile's worth of slower calls.
HOT_SIZE_BYTES = 1 << 29


def hot_size_bytes() -> int:
    """``CINNLITE_HOT_SIZE_BYTES`` where it is a number of bytes (0: sizes never turn hot, every
    call of a symbolic program runs its generic code), else ``HOT_SIZE_BYTES``."""
    return bytes_from_env("CINNLITE_HOT_SIZE_BYTES", HOT_SIZE_BYTES,
                          f"hot sizes are those whose calls moved {HOT_SIZE_BYTES} bytes", RuntimeWarning)


def shape_matches(actual: tuple, declared: tuple) -> bool:
    """Whether an array shape fits a declared one: the same rank, equal numbers; a symbolic size
    takes any size (whether one name gets one size is the binder's check)."""
    return len(actual) == len(declared) and all(isinstance(d, Dim) or a == d for a, d in zip(actual, declared))


def shape_tuple_text(shape: tuple) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


#: The arithmetic of loop-nest sizes (never negative, so a quotient is C's as well as Python's),
#: as ``codegen/llvm_sizes.py`` renders it.
_SIZE_OPS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.floordiv,
             "min": min, "max": max}


def size_value(d, values: dict) -> int:
    """The number a loop-nest size stands for: an int, or an expression over symbol buffers
    whose values ``values`` holds by buffer name."""
    if isinstance(d, int):
        return d
    if isinstance(d, Const):
        return int(d.value)
    if isinstance(d, Load):
        return values[d.buffer.name]
    if isinstance(d, Binary) and d.op in _SIZE_OPS:
        return _SIZE_OPS[d.op](size_value(d.a, values), size_value(d.b, values))
    raise TypeError(f"not a size: {d!r}")


@dataclass
class ShapePlan:
    """How one set of input shapes runs: the symbols' values, the arrays that hold them, the
    shapes of the buffers to allocate; or the static executable that runs it instead."""

    bindings: dict
    symbol_arrays: dict = field(default_factory=dict)
    allocs: list = field(default_factory=list)
    specialised: object = None
    extra: dict = field(default_factory=dict)  # what a backend derives from the sizes (stage extents)
    fast: object = None  # what a backend's fast path prepared for these sizes (see runtime/native_call.py)
    moved: int = 0       # the bytes one call reads and writes (inputs, outputs, intermediates)
    hot_left: int = 0    # the bytes calls must still move before a static build serves them; 0: never

    def size_of(self, d) -> int:
        return size_value(d, {SYMBOL_BUFFER_PREFIX + k: v for k, v in self.bindings.items()})


class ShapePlans:
    """The plans of one executable (see the module docstring)."""

    def __init__(self, program, lowered, allocs, power_of_two: bool = False, hot_sizes: bool = False):
        self.program = program
        self.allocs = allocs
        self.symbolic = not program.is_static
        #: plans by the tuple of input shapes; read without the lock (a dict lookup is atomic)
        self.by_shapes: dict = {}
        self._lock = threading.Lock()
        self.static = None if self.symbolic else ShapePlan({}, {}, list(allocs))
        # Where static code is faster on power-of-two axes (the CPU's vector loops), those sizes
        # run a static specialisation (``_power_of_two_axis``).
        self.masked = masked_axis_symbols(program) if self.symbolic and power_of_two else frozenset()
        self.hot_sizes = self.symbolic and hot_sizes
        self._hot_lock = threading.Lock()  # held while a hot size compiles
        self._fast_lock = threading.Lock()  # orders ``plan.fast`` against a static build's arrival
        #: compiles a static program with the executable's options (set by ``compile``).
        self.compile_static = None

    def plan_for(self, arrays: dict, exe) -> ShapePlan:
        if not self.symbolic:
            return self.static
        key = tuple(arrays[t.name].shape for t in self.program.inputs)
        plan = self.by_shapes.get(key)
        if plan is None:
            plan = self._make(arrays, exe)
            with self._lock:
                if len(self.by_shapes) >= MAX_PLANS:
                    self.by_shapes.pop(next(iter(self.by_shapes)))
                self.by_shapes[key] = plan
        return plan

    def serves(self, program) -> bool:
        """Whether the shape-generic code runs ``program`` (a static program of the same
        structure) itself, without a static specialisation."""
        if not self.symbolic:
            return False
        shapes = {t.name: t.shape for t in program.inputs}
        declared = {t.name: t.shape for t in self.program.inputs}
        if shapes.keys() != declared.keys() or not all(shape_matches(shapes[n], declared[n]) for n in shapes):
            return False  # a number the generic program fixed differs
        try:
            bindings = self.bind(shapes)
        except InputError:
            return False
        return self._generic(bindings) and not self._power_of_two_axis(bindings)

    def ran(self, plan: ShapePlan) -> bool:
        """Count a call of ``plan``'s sizes (one whose ``hot_left`` is not 0) on the generic
        code; once such calls have moved ``hot_size_bytes()``, give the plan the static build of
        its sizes, which serves every later call (``plan.fast`` is made again). Returns whether
        this call did that. A compile error (none is expected: the static program of sizes the
        generic code serves builds) only stops the counting."""
        plan.hot_left -= plan.moved
        if plan.hot_left > 0:
            return False
        if not self._hot_lock.acquire(blocking=False):
            # Another call compiles (these sizes or others): this one runs the generic code
            # rather than wait, and a later call of these sizes looks again.
            plan.hot_left = max(plan.hot_left, 1)
            return False
        try:
            plan.hot_left = 0
            if plan.specialised is not None:  # another thread's call made it
                return False
            try:
                plan.specialised = self._specialised(plan.bindings, exact=True)
            except CinnliteError:
                return False
        finally:
            self._hot_lock.release()
        with self._fast_lock:
            plan.fast = None
        return True

    def keep_fast(self, plan: ShapePlan, fast):
        """``fast`` (what a backend's fast path prepared for the generic code of ``plan``'s
        sizes) as ``plan.fast``, unless the sizes got their static build meanwhile (``ran``
        clears ``plan.fast`` under the same lock, after setting the build): then the plan keeps
        none, and its next call prepares the static build's. Returns ``fast``, which serves this
        call either way."""
        with self._fast_lock:
            if plan.specialised is None:
                plan.fast = fast
        return fast

    def _power_of_two_axis(self, bindings: dict) -> bool:
        """Whether an indexed axis of ``raise`` or ``wrap`` mode has a power-of-two size in this
        call. The static code of such a size resolves an index with one mask instead of a
        clamp or a division (2-3x faster on gathers that are not memory-bound), so the compiler
        specialises: these sizes run the static program of the call's sizes, compiled once per
        set of sizes (a symbol has at most 63 power-of-two values)."""
        return any(bindings[s] & (bindings[s] - 1) == 0 for s in self.masked)

    def _generic(self, bindings: dict) -> bool:
        return all(v >= 1 for v in bindings.values()) and all(holds(f, bindings) for f in self.program.assumptions)

    def bind(self, arrays: dict) -> dict:
        """Every symbol's size, from the inputs that use it (arrays, or shapes); one name must
        have one size."""
        bound: dict = {}
        where: dict = {}
        for t in self.program.inputs:
            value = arrays[t.name]
            shape = value if isinstance(value, tuple) else value.shape
            for axis, d in enumerate(t.shape):
                if not isinstance(d, Dim):
                    continue
                size = int(shape[axis])
                if d.name in bound and bound[d.name] != size:
                    first, first_axis = where[d.name]
                    raise InputError(f"symbolic size {d.name}: input '{t.name}' has {size} at axis {axis}, but "
                                     f"input '{first}' has {bound[d.name]} at axis {first_axis}; one name is one size")
                bound.setdefault(d.name, size)
                where.setdefault(d.name, (t.name, axis))
        return bound

    def _make(self, arrays: dict, exe) -> ShapePlan:
        bindings = self.bind(arrays)
        plan = ShapePlan(bindings)
        masked = self._power_of_two_axis(bindings)
        if masked or not self._generic(bindings):
            plan.specialised = self._specialised(bindings, exact=masked)
            return plan
        plan.symbol_arrays = {SYMBOL_BUFFER_PREFIX + k: np.array(v, np.int64) for k, v in bindings.items()}
        for name, shape, dtype, _ in self.allocs:
            sizes = tuple(plan.size_of(d) for d in shape)
            plan.allocs.append((name, sizes, dtype, int(np.prod(sizes, dtype=np.int64)) * np.dtype(dtype).itemsize))
        if self.hot_sizes and self.compile_static is not None:
            plan.moved = sum(a.nbytes for a in arrays.values()) + sum(a[3] for a in plan.allocs)
            plan.hot_left = hot_size_bytes()
        return plan

    def _specialised(self, bindings: dict, exact: bool):
        """The executable of the static program of these sizes; ``exact``: that static
        program's own build (a power-of-two axis, whose static code is the point), else any
        build that serves it (sizes the generic code does not take, an empty dimension, may
        share one shape-generic build of their own: ``compile`` makes one from two of them)."""
        from ..ir.rebuild import specialise
        static = specialise(self.program, bindings)  # the errors of the static program, if any
        if self.compile_static is None:
            raise InputError(f"program '{self.program.name}': these sizes need a static build, and this "
                             f"executable cannot compile one")
        return self.compile_static(static, generalise=not exact)


def _indexed_axes(node) -> list:
    """The sizes of the axes of ``x`` (the first input) that the node's index addresses."""
    attrs = dict(node.attrs)
    x = node.inputs[0]
    if node.op in ("take", "gather", "scatter"):
        return [x.shape[attrs["axis"]]]
    if node.op not in ("gather_nd", "scatter_nd"):
        return []
    if attrs["dims"] is not None:
        return [x.shape[d] for d in attrs["dims"]]
    m = node.inputs[1].shape[0 if attrs["index_layout"] == "first" else -1]  # a number (tuple_index_shape)
    b = attrs.get("batch_dims", 0)
    return list(x.shape[b:b + m])


def masked_axis_symbols(program) -> frozenset:
    """The symbols that size an axis a ``raise``- or ``wrap``-mode index addresses: where one is a
    power of two, static code masks instead of clamping (see ``ShapePlans._power_of_two_axis``)."""
    out = set()
    for node in program.nodes:
        if dict(node.attrs).get("mode") in ("raise", "wrap"):
            out |= {d.name for d in _indexed_axes(node) if isinstance(d, Dim) and d.is_symbol}
    return frozenset(out)
