"""The CPU's fast path: calls run through ``cinnlite_call`` (``codegen/llvm_call.py``) as a
Python builtin function, with what each set of input sizes needs prepared once (``FastPlan``).

Where the time of a small call went (a take of 64 rows, timed with ``perf_counter_ns`` loops
over variants of the code; ``benchmarks/call_overhead.py`` times the whole call): a ctypes call
passing four arrays as ``py_object`` took 0.6 us (a ``from_param`` per argument), 0.3 us with raw
pointers, whose addresses cost as much again to get; checking dtype, shape and flags in Python
took about 0.35 us per input; for symbolic sizes, the general path took 15 us. A builtin
function (``METH_FASTCALL``) over the same machine code costs about 0.05 us to call and checks
the inputs in nanoseconds; it needs no error record either: a call that fails an index check is
declined and runs again on the general path, which raises. What is left is Python's own call
with keywords (~0.2 us), finding the plan (a dict hit on the tuple of input shapes for symbolic
sizes, ~0.2 us) and ``np.empty`` per output (~0.12 us; a template's ``copy()`` or ``empty_like``
cost more).

The GIL: a call of at most ``HOLD_GIL_MAX_WORK`` innermost iterations over all its stages keeps
it while the code runs (like ``ctypes.PYFUNCTYPE``): giving it up and taking it back costs
~0.06 us when no other thread wants it, and can mean waiting up to the switch interval (5 ms)
for another thread that took it meanwhile, too much for a call of a few microseconds. A bigger
call gives it up while its code runs (like ``CFUNCTYPE``), so that other threads go on. A big
single output comes from the buffer pool (``executable.BufferPool``); calls with big
intermediates, and calls whose stages split on the Python pool (where there is no native pool),
take the general path.
"""
from __future__ import annotations

import ctypes
import operator

import numpy as np

from ..codegen.llvm_call import (CONTIGUOUS_ALIGNED, DESCR, DIMENSIONS, FLAGS, INCREF, ND, NDARRAY,
                                 RESTORE_THREAD, SAVE_THREAD, TYPE, dtype_symbol)
from ..dtypes import DATA_DTYPES

#: At most this many innermost iterations (over all stages) run with the GIL held (see above):
#: some microseconds of work (8 us for a take of 8192 rows: two stages of 8192 iterations).
HOLD_GIL_MAX_WORK = 1 << 14

_METH_FASTCALL = 0x0080
_NEW_FUNCTION = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.py_object, ctypes.py_object)(
    ("PyCFunction_NewEx", ctypes.pythonapi))
#: The process's objects behind the entry's symbols; numpy's dtype objects live as long as numpy.
_OBJECTS = {NDARRAY: np.ndarray, **{dtype_symbol(d.name): d.np for d in DATA_DTYPES}}


class _MethodDef(ctypes.Structure):
    """CPython's ``PyMethodDef``."""

    _fields_ = [("ml_name", ctypes.c_char_p), ("ml_meth", ctypes.c_void_p), ("ml_flags", ctypes.c_int),
                ("ml_doc", ctypes.c_char_p)]


def register_symbols(llvm):
    """Resolve the entry's symbols (``llvm_call.SYMBOLS``) to this process's objects, before any
    code is loaded."""
    api = ctypes.pythonapi
    for name, function in ((INCREF, api.Py_IncRef), (SAVE_THREAD, api.PyEval_SaveThread),
                           (RESTORE_THREAD, api.PyEval_RestoreThread)):
        llvm.add_symbol(name, ctypes.cast(function, ctypes.c_void_p).value)
    for name, obj in _OBJECTS.items():
        llvm.add_symbol(name, id(obj))


def array_layout_confirmed(offset: int) -> bool:
    """Whether numpy arrays here hold the fields the entry reads where it reads them (type, nd,
    dimensions, descr, flags around ``data`` at ``offset``), checked on live arrays of every
    rank, order and alignment the checks tell apart."""
    if ctypes.sizeof(ctypes.c_void_p) != 8:
        return False
    probes = (np.zeros(3, np.float32), np.empty((2, 5), np.int8), np.zeros(0, np.int64), np.zeros((), np.float64),
              np.zeros((4, 6), np.int16)[:, ::2], np.zeros((3, 4), order="F"),
              np.frombuffer(bytearray(17), np.float64, count=2, offset=1))
    return all(_layout_holds(a, id(a) + offset) for a in probes)


def _layout_holds(a: np.ndarray, data: int) -> bool:
    def at(delta, ctype=ctypes.c_void_p):
        return ctype.from_address(data + delta).value

    flags = at(FLAGS, ctypes.c_int32)
    if (at(TYPE), at(DESCR), at(ND, ctypes.c_int32)) != (id(type(a)), id(a.dtype), a.ndim):
        return False
    if a.ndim and tuple((ctypes.c_int64 * a.ndim).from_address(at(DIMENSIONS))) != a.shape:
        return False
    return (flags & CONTIGUOUS_ALIGNED == CONTIGUOUS_ALIGNED) == (a.flags.c_contiguous and a.flags.aligned)


class _Method(ctypes.Structure):
    """A builtin function's ``PyMethodDef`` and the flag its ``self`` holds, in one block."""

    _fields_ = [("method", _MethodDef), ("flag", ctypes.c_int64)]


def _builtin(address: int, release: bool):
    """A builtin function over the entry at ``address``; ``release``: give up the GIL while the
    code runs (the entry reads the flag from its ``self``).

    CPython reads a builtin function's ``PyMethodDef`` until the function is freed (its class
    and flags, also when the garbage collector walks it), and the function may outlive whoever
    made it (a plan that holds it, freed after the executable): so its ``self``, the flag as an
    array over the block that holds both, keeps the definition alive, as CPython expects."""
    record = _Method(_MethodDef(b"cinnlite_call", address, _METH_FASTCALL, None), int(release))
    flag = np.frombuffer(record, np.int64, count=1, offset=_Method.flag.offset)
    return _NEW_FUNCTION(ctypes.addressof(record.method), flag, None)


class NativeCall:
    """An executable's fast path: its builtin functions (``holding`` keeps the GIL while the
    code runs, ``releasing`` gives it up), how a call's keyword arrays are taken in input order,
    and where the plan of their sizes is found: the one plan of a static executable, or a
    symbolic one's plans by the tuple of input shapes."""

    __slots__ = ("holding", "releasing", "n_inputs", "take", "key", "static", "by_shapes", "into_out")

    def __init__(self, address: int, names: list, shape_plans):
        self.holding = _builtin(address, release=False)
        self.releasing = _builtin(address, release=True)
        self.n_inputs = len(names)
        self.take = _taker(names)
        self.key = _shape_key(len(names))
        self.static = shape_plans.static
        self.by_shapes = shape_plans.by_shapes
        #: The builtin function a call with ``out=`` of a static executable runs straight on its
        #: inputs and ``out`` (``note_plan``), else None: such a call finds no plan and reads
        #: none of a plan's terms, which took a third of the time of a call of 64 rows.
        self.into_out = None

    def note_plan(self, plan, fast: "FastPlan"):
        """Set ``into_out`` once the one plan of a static executable has its ``fast`` calls: one
        output, checked by the entry, and no array after the inputs but ``out``."""
        if plan is self.static and fast.single and fast.checks_out and not fast.fixed:
            self.into_out = fast.function


def _taker(names: list):
    """A function of the keyword dict that returns its arrays in input order, as a tuple (a
    KeyError where a name is missing)."""
    if len(names) >= 2:
        return operator.itemgetter(*names)
    if names:
        name = names[0]
        return lambda inputs: (inputs[name],)
    return lambda inputs: ()


def _shape_key(n: int):
    """A function of the arrays that returns their shapes as a tuple (``ShapePlans``'s key):
    written out for a few inputs, where it costs half of ``tuple(map(...))``."""
    if n == 1:
        return lambda a: (a[0].shape,)
    if n == 2:
        return lambda a: (a[0].shape, a[1].shape)
    if n == 3:
        return lambda a: (a[0].shape, a[1].shape, a[2].shape)
    shape = operator.attrgetter("shape")
    return lambda a: tuple(map(shape, a))


class FastPlan:
    """One plan's fast calls: the builtin function that runs them (holding or releasing the
    GIL), the arrays after the inputs in slot order (``fixed``: symbols and constants; then the
    arrays to write, allocated per call: one (``single``), or several); or the static executable
    of these sizes, which serves them itself (``specialised``)."""

    __slots__ = ("function", "fixed", "single", "shape", "dtype", "shapes", "dtypes", "n_outputs", "specialised",
                 "runs", "pooled", "pool", "checks_out")

    def __init__(self, function=None, fixed=(), allocs=(), n_outputs=1, specialised=None, runs=True,
                 pooled=(), pool=None, checks_out=False):
        self.function = function
        self.fixed = tuple(fixed)
        self.shapes = tuple(shape for shape, _ in allocs)
        self.dtypes = tuple(dtype for _, dtype in allocs)
        self.single = runs and specialised is None and len(allocs) == 1
        self.shape, self.dtype = (self.shapes[0], self.dtypes[0]) if self.single else (None, None)
        self.n_outputs = n_outputs
        self.specialised = specialised
        self.runs = runs and specialised is None
        # Per array to write: ``BufferPool.take``'s (shelf, nbytes, per_call) where the pool
        # serves it, else None (a plain new array); the pool of the executable whose code
        # ``function`` runs, and whether its entry checks an ``out=`` array.
        self.pooled = tuple(pooled) or (None,) * len(allocs)
        self.pool, self.checks_out = pool, checks_out


#: The FastPlan of sizes the fast path does not serve (the general path runs them).
GENERAL = FastPlan(runs=False)
