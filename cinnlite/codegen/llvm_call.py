"""The CPU's call entry ``cinnlite_call``: JIT code that CPython calls as a builtin function.

A ctypes call costs 0.3-0.7 us before the code runs (each argument converted by a Python-level
``from_param``); a builtin function made of the same code (``runtime/native_call.py``) costs
about 0.05 us, the price of calling ``len``. The entry has the ``METH_FASTCALL`` signature
``PyObject *(PyObject *self, PyObject *const *args, Py_ssize_t nargs)`` and takes one numpy
array per slot of the buffer table, in slot order (``LoweredProgram.buffer_table``: the inputs
first, in program order; then the symbols, constants and the arrays to write).

It checks every input as ``Executable._check_inputs`` would accept it unchanged: exactly a
``numpy.ndarray``, of the input's dtype (numpy's own dtype object, by identity), of the input's
rank and sizes (a symbolic size against the value in its symbol's slot), C-contiguous and
aligned. Then it runs ``cinnlite_main`` and returns the first output array. Anything else, an
input it does not take as it is or a failed index check, returns ``self``: the caller then takes
the general path, which converts, explains or raises exactly as it always does. The outputs are
checked the same way, and also for being writeable and for sharing no byte with an input, since
one may be the caller's ``out=``; the other slots after the inputs are the runtime's own arrays
and are taken on trust.

``self`` is a one-element int64 array: where it holds 0, the entry keeps the GIL while main runs
(like ``ctypes.PYFUNCTYPE``); otherwise it gives the GIL up and takes it back after (like
``CFUNCTYPE``). The runtime makes one builtin function of each kind and picks per call size.

The code reads numpy's ``PyArrayObject`` fields at byte offsets from its ``data`` field, which
the runtime confirms on live arrays at start-up (``runtime/native_call.array_layout_confirmed``),
and reaches the running process through symbols the runtime registers before
loading any code (``SYMBOLS``): ``Py_IncRef``, ``PyEval_SaveThread`` and
``PyEval_RestoreThread``, the ``numpy.ndarray`` type and numpy's dtype objects.
"""
from __future__ import annotations

from llvmlite import ir

from ..dtypes import DATA_DTYPES
from ..ir.loopnest import Load, LoweredProgram
from .error_record import FIRST_FAILURE
from .llvm_sizes import size_renderable, size_value

I32, I64, PTR = ir.IntType(32), ir.IntType(64), ir.PointerType()

ENTRY = "cinnlite_call"

#: numpy's ``PyArrayObject_fields`` on a 64-bit CPython, in bytes from ``data``: the object's
#: type (the last field of PyObject_HEAD), then data, nd, dimensions, strides, base, descr, flags.
TYPE, ND, DIMENSIONS, DESCR, FLAGS = -8, 8, 16, 40, 48
#: ``NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED``; ``NPY_ARRAY_WRITEABLE``.
CONTIGUOUS_ALIGNED = 0x0001 | 0x0100
WRITEABLE = 0x0400

INCREF = "cinnlite_py_incref"
SAVE_THREAD = "cinnlite_py_save_thread"
RESTORE_THREAD = "cinnlite_py_restore_thread"
NDARRAY = "cinnlite_ndarray_type"


def dtype_symbol(name: str) -> str:
    """The symbol of numpy's dtype object for a cinnlite dtype name (``float32``)."""
    return "cinnlite_dtype_" + name


#: Every symbol the entry may use: resolved to the running process's objects at load time.
SYMBOLS = (INCREF, SAVE_THREAD, RESTORE_THREAD, NDARRAY) + tuple(dtype_symbol(d.name) for d in DATA_DTYPES)


def renders_call_entry(program: LoweredProgram) -> bool:
    """Whether the entry can check this program's inputs: each size a number or a bare symbol."""
    return all(isinstance(d, int) or (isinstance(d, Load) and not d.indices) for b in program.inputs for d in b.shape)


def checks_outputs(program: LoweredProgram) -> bool:
    """Whether the entry checks the output arrays (so that it can take ``out=``): every output
    size one ``llvm_sizes`` renders."""
    return all(size_renderable(d) for b in program.outputs for d in b.shape)


def add_call_entry(module: ir.Module, main: ir.Function, program: LoweredProgram, offset: int):
    """Add ``cinnlite_call`` to ``module``; ``offset`` is where a numpy array keeps ``data``."""
    _CallEntry(module, main, program, offset).emit()


class _CallEntry:
    """Emits the entry: the argument count, each input's checks, the buffer table, main, the result."""

    def __init__(self, module: ir.Module, main: ir.Function, program: LoweredProgram, offset: int):
        self.module, self.main, self.program, self.offset = module, main, program, offset
        self.table = program.buffer_table()
        self.slots = {b.name: k for k, b in enumerate(self.table)}
        self.fn = ir.Function(module, ir.FunctionType(PTR, [PTR, PTR, I64]), ENTRY)
        self.self_, self.args, self.nargs = self.fn.args
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.decline = self.fn.append_basic_block("decline")
        self.incref = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), INCREF)
        self.save_thread = ir.Function(module, ir.FunctionType(PTR, []), SAVE_THREAD)
        self.restore_thread = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), RESTORE_THREAD)

    def emit(self):
        b = self.b
        bufs = b.alloca(PTR, size=len(self.table), name="bufs")
        err = b.alloca(I64, size=FIRST_FAILURE.size, name="err")
        status = b.alloca(I32, name="status")
        self.require(b.icmp_signed("==", self.nargs, ir.Constant(I64, len(self.table))), "nargs")
        for k, buf in enumerate(self.program.inputs):
            self.check_input(k, buf)
        if checks_outputs(self.program):
            for buf in self.program.outputs:
                self.check_output(self.slots[buf.name], buf)
                written = self.extent(self.slots[buf.name], buf)
                for k, given in enumerate(self.program.inputs):
                    self.require_apart(written, k, given)
        for k in range(len(self.table)):
            b.store(self.field(self.arg(k), 0, PTR), b.gep(bufs, [ir.Constant(I64, k)], source_etype=PTR))
        self.run_main(bufs, err, status)
        self.require(b.icmp_signed("==", b.load(status, typ=I32), ir.Constant(I32, 0)), "ran")
        result = self.arg(self.slots[self.program.outputs[0].name])
        b.call(self.incref, [result])
        b.ret(result)
        b.position_at_end(self.decline)
        b.call(self.incref, [self.self_])
        b.ret(self.self_)

    def run_main(self, bufs, err, status):
        """Main, with the GIL given up around it where ``self`` asks for that."""
        b = self.b
        release = b.icmp_signed("!=", self.field(self.self_, 0, PTR, I64), ir.Constant(I64, 0))
        with b.if_else(release) as (released, held):
            with released:
                thread = b.call(self.save_thread, [])
                b.store(b.call(self.main, [bufs, err]), status)
                b.call(self.restore_thread, [thread])
            with held:
                b.store(b.call(self.main, [bufs, err]), status)

    def check_input(self, k: int, buf):
        """Exactly an ndarray; then its dtype, rank and flags; then (the rank known) its sizes."""
        b = self.b
        obj = self.arg(k)
        self.require(b.icmp_unsigned("==", self.field(obj, TYPE, PTR), self.global_(NDARRAY)), f"type{k}")
        same_dtype = b.icmp_unsigned("==", self.field(obj, DESCR, PTR), self.global_(dtype_symbol(buf.dtype.name)))
        same_rank = b.icmp_signed("==", self.field(obj, ND, I32), ir.Constant(I32, len(buf.shape)))
        mask = ir.Constant(I32, CONTIGUOUS_ALIGNED)
        laid_out = b.icmp_signed("==", b.and_(self.field(obj, FLAGS, I32), mask), mask)
        self.require(b.and_(b.and_(same_dtype, same_rank), laid_out), f"array{k}")
        if not buf.shape:
            return
        dims = self.field(obj, DIMENSIONS, PTR)
        ok = ir.Constant(ir.IntType(1), 1)
        for axis, d in enumerate(buf.shape):
            size = b.load(b.gep(dims, [ir.Constant(I64, axis)], source_etype=I64), typ=I64)
            ok = b.and_(ok, b.icmp_signed("==", size, self.size(d)))
        self.require(ok, f"shape{k}")

    def check_output(self, k: int, buf):
        """An output array, which may be the caller's ``out=``: checked like an input, and also
        writeable (``require_apart`` then checks that it shares no memory with an input)."""
        b = self.b
        self.check_input(k, buf)
        writeable = ir.Constant(I32, WRITEABLE)
        self.require(b.icmp_signed("==", b.and_(self.field(self.arg(k), FLAGS, I32), writeable), writeable),
                     f"writeable{k}")

    def require_apart(self, written, j: int, given):
        """An output's byte range ``written`` shares no byte with input ``j`` (both checked
        C-contiguous, so each is one range of memory): the caller's ``out=`` may be anything."""
        b = self.b
        start, end = written
        other_start, other_end = self.extent(j, given)
        apart = b.or_(b.icmp_unsigned("<=", end, other_start), b.icmp_unsigned("<=", other_end, start))
        self.require(apart, f"apart{j}")

    def extent(self, k: int, buf):
        """The byte range ``[start, end)`` of slot ``k``'s array, of ``buf``'s checked sizes."""
        b = self.b
        nbytes = ir.Constant(I64, buf.dtype.itemsize)
        for d in buf.shape:
            nbytes = b.mul(nbytes, self.size(d))
        start = b.ptrtoint(self.field(self.arg(k), 0, PTR), I64)
        return start, b.add(start, nbytes)

    def size(self, d):
        """A declared size (see ``llvm_sizes``), symbols read from their slots."""
        return size_value(self.b, d, lambda name: self.field(self.arg(self.slots[name]), 0, PTR, I64))

    def arg(self, k: int):
        return self.b.load(self.b.gep(self.args, [ir.Constant(I64, k)], source_etype=PTR), typ=PTR)

    def field(self, obj, at: int, typ, element=None):
        """The field ``at`` bytes from an array object's ``data`` field; with ``element``, the
        first element of that type its data pointer points to."""
        value = self.b.load(self.b.gep(obj, [ir.Constant(I64, self.offset + at)], source_etype=ir.IntType(8)), typ=typ)
        return value if element is None else self.b.load(value, typ=element)

    def global_(self, name: str):
        """The address of a process object the runtime registered under ``name``."""
        existing = self.module.globals.get(name)
        return existing if existing is not None else ir.GlobalVariable(self.module, ir.IntType(8), name)

    def require(self, cond, name: str):
        """Go on where ``cond`` holds; decline otherwise."""
        go_on = self.fn.append_basic_block(name)
        self.b.cbranch(cond, go_on, self.decline)
        self.b.position_at_end(go_on)
