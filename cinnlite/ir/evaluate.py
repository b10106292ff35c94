"""Reference evaluator of the loop-nest IR: runs a LoweredProgram in Python, one scalar at a time.

Every pass must keep what the IR computes. The compiled programs check the passes only all
together, and through LLVM or a C++ compiler; this evaluator runs the IR as it stands between
any two passes (after lowering, fusion, each pass of ``CPU_PIPELINE``, ``GPU_PIPELINE`` and
``GPU_PIPELINE_DETERMINISTIC``), so the tests can check every pass on its own against the numpy
reference. It is written to be obviously right, not fast: use it on small shapes.

The meaning of each node is the one the renderers give it (``cinnlite/codegen/llvm.py`` and
``cuda.py``):

- integers are fixed-width: ``add``, ``sub``, ``mul`` and integer casts wrap around; ``div`` and
  ``mod`` truncate toward zero (C). A division by zero, or ``MIN / -1``, is undefined behaviour
  on the CPU (the lowering never divides by a value that can be either): it is an error here.
- floats are numpy scalars of their dtype, so float16 rounds after every operation, as both
  backends do; ``min``/``max`` propagate NaN; comparisons are ordered, except ``ne``.
- complex values are numpy complex scalars, computed on their parts (:func:`complex_parts`):
  add and subtract part by part, multiply by the plain formula, divide as numpy does (Smith's).
- casts: float to integer truncates and saturates, NaN gives 0; to bool is ``!= 0`` (NaN gives
  true); from bool gives 0 or 1.
- ``Select`` evaluates both operands, as the CPU does.
- every loop runs serially and in order, whatever its kind; ``range_begin``/``range_end`` span
  the whole stage; a ``deferred_check`` loop runs only once some ``FlagIndexError`` was met
  (anywhere earlier in the program, as in the CPU runtime).
- ``ReportIndexError``: with ``on_error="stop"`` (the CPU) the run ends at the first one; with
  ``"record"`` (the GPU) every check keeps its smallest position and the run goes on to the end.
  Either way the lowest-numbered failed check is reported, as the runtimes' ``IndexError``.

Beyond what the renderers do, the evaluator checks what no backend can see: every access is in
bounds on every axis, no element is read before something wrote it, inputs and constants are
never written, and every element of a computed output is written. Breaking any of these raises
:class:`EvaluationError`.

Each node type has one entry in ``EXPRESSIONS`` or ``STATEMENTS``: a new node is a new entry.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..dtypes import DType, converted
from .loopnest import (COMBINES, Binary, Buffer, Cast, Cmp, Const, Every, FlagIndexError, Math, For, If, Kernel, Let, Load,
                       LoweredProgram, Prefetch, Reduce, ReportIndexError, Select, Seq, Store, Var)
from .passes import RANGE_BEGIN, RANGE_END, _c_div
from .schedule_cpu import stage_extent
from .transform import kernel_stages
from .schedule_gpu import GRID

ON_ERROR = ("stop", "record")
LOOP_KINDS = ("serial", "parallel", "parallel_check", "deferred_check", "parallel_rows", GRID)


class EvaluationError(Exception):
    """The IR does something no backend may do (an out-of-bounds access, a read of an element
    nothing wrote, undefined arithmetic, ...): a bug of the pass that produced it."""


@dataclass(frozen=True)
class FailedCheck:
    """A ``mode="raise"`` check that failed: at flat ``position`` of its index tensor, with the
    bad index ``value`` (None where the IR does not report it)."""

    check_id: int
    position: int
    value: int | None


class _Stop(Exception):
    """Ends the run at the first failed check (``on_error="stop"``)."""


# -- scalar values --------------------------------------------------------------------------------
# bool values are Python bools, integers Python ints within their dtype's range, floats numpy
# scalars of their dtype.


def wrap(value: int, dtype: DType) -> int:
    """``value`` as a ``dtype`` integer: two's complement wrap-around to its width."""
    value = int(value) & ((1 << dtype.bits) - 1)
    if dtype.is_signed and value >= 1 << (dtype.bits - 1):
        value -= 1 << dtype.bits
    return value


def scalar(value, dtype: DType):
    """An element read from memory (or a constant) in the evaluator's representation."""
    if dtype.is_bool:
        return bool(value)
    if dtype.is_float or dtype.is_complex:
        return dtype.np.type(value)
    return int(value)


def _int_range(dtype: DType) -> tuple:
    info = np.iinfo(dtype.np)
    return int(info.min), int(info.max)


def _int_binary(op: str, dtype: DType, a: int, b: int) -> int:
    if op in ("div", "mod"):
        if b == 0:
            raise EvaluationError(f"integer {op} by zero ({dtype}): undefined behaviour on the CPU")
        if dtype.is_signed and b == -1 and a == _int_range(dtype)[0]:
            raise EvaluationError(f"integer {op} of {a} by -1 ({dtype}) overflows: undefined behaviour on the CPU")
        q = _c_div(a, b)
        return q if op == "div" else a - q * b
    ops = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b,
           "min": lambda: min(a, b), "max": lambda: max(a, b)}
    if op not in ops:
        raise EvaluationError(f"{op} of {dtype} values")
    return wrap(ops[op](), dtype)


def _float_binary(op: str, dtype: DType, a, b):
    if op == "min":
        return a if (a < b or a != a) else b  # NaN propagates from either side
    if op == "max":
        return a if (a > b or a != a) else b
    ops = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "mod": np.fmod}
    if op not in ops:
        raise EvaluationError(f"{op} of {dtype} values")
    with np.errstate(all="ignore"):
        return dtype.np.type(ops[op](a, b))


def complex_divide(ar, ai, br, bi):
    """numpy's complex division (``np.divide`` on complex numbers, Smith's method) on parts of
    one float type: the larger part of the divisor scales the other, and 0 / 0 gives the
    quotients by +0 (inf or NaN)."""
    one = type(br)(1)
    if abs(br) >= abs(bi):
        if br == 0 and bi == 0:
            return ar / abs(br), ai / abs(br)
        rat = bi / br
        scl = one / (br + bi * rat)
        return (ar + ai * rat) * scl, (ai - ar * rat) * scl
    rat = br / bi
    scl = one / (bi + br * rat)
    return (ar * rat + ai) * scl, (ai * rat - ar) * scl


def complex_parts(op: str, ar, ai, br, bi):
    """``op`` of complex numbers given by their parts (numpy scalars of one float type, so that
    every operation rounds): multiply is ``(ar*br - ai*bi, ar*bi + ai*br)``, with no fused
    multiply-add."""
    if op == "add":
        return ar + br, ai + bi
    if op == "sub":
        return ar - br, ai - bi
    if op == "mul":
        return ar * br - ai * bi, ar * bi + ai * br
    if op == "div":
        return complex_divide(ar, ai, br, bi)
    raise EvaluationError(f"{op} of complex values")


def _complex_binary(op: str, dtype: DType, a, b):
    part = dtype.part.np.type
    with np.errstate(all="ignore"):
        re, im = complex_parts(op, part(a.real), part(a.imag), part(b.real), part(b.imag))
    return dtype.np.type(complex(float(re), float(im)))


def _bool_binary(op: str, a: bool, b: bool) -> bool:
    # max is "or" and min is "and" on bools, as for the CPU's unsigned i1 and the CUDA renderer.
    ops = {"and": a and b, "or": a or b, "max": a or b, "min": a and b}
    if op not in ops:
        raise EvaluationError(f"{op} of bool values")
    return ops[op]


def binary(op: str, dtype: DType, a, b):
    """``op`` on two values of ``dtype``: the arithmetic of ``Binary`` and of ``Reduce`` combines."""
    if dtype.is_bool:
        return _bool_binary(op, a, b)
    if dtype.is_complex:
        return _complex_binary(op, dtype, a, b)
    if dtype.is_float:
        return _float_binary(op, dtype, a, b)
    return _int_binary(op, dtype, a, b)


def cast(value, src: DType, dst: DType):
    """``Cast``: the conversions of the renderers (see the module docstring)."""
    if src == dst:
        return value
    if dst.is_complex:
        # Part by part between complex dtypes; a real value is the real part, the other is 0.
        if src.is_complex:
            return dst.np.type(value)
        return dst.np.type(complex(float(cast(value, src, dst.part)), 0.0))
    if src.is_complex:
        raise EvaluationError(f"a cast of {src} to {dst}: complex values convert only to complex")
    if dst.is_bool:
        return bool(value != 0)
    if src.is_bool:
        return scalar(1 if value else 0, dst)
    if src.is_float and dst.is_int:
        x = float(value)
        lo, hi = _int_range(dst)
        if math.isnan(x):
            return 0
        if math.isinf(x):
            return hi if x > 0 else lo
        return min(max(math.trunc(x), lo), hi)
    if dst.is_float:
        # numpy's conversion of one element: correctly rounded, as LLVM's and CUDA's casts
        # (overflowing to infinity is the intended result, not a mistake to warn about).
        with np.errstate(over="ignore"):
            return dst.np.type(converted(np.array(value, src.np), dst))
    return wrap(value, dst)


# -- the machine ----------------------------------------------------------------------------------


class Evaluator:
    """The state of one run: ``memory`` (buffer name -> flat numpy array, shared by every view
    of that name), the loop variables in scope, whether a possibly bad index was flagged, and
    the failed checks. ``readonly`` names buffers nothing may write (inputs, constants);
    ``fresh`` names buffers whose elements must be written before they are read."""

    def __init__(self, memory: dict, readonly=(), fresh=(), on_error: str = "stop"):
        if on_error not in ON_ERROR:
            raise ValueError(f"on_error must be one of {ON_ERROR}, got {on_error!r}")
        self.memory = memory
        self.readonly = frozenset(readonly)
        self.written = {name: np.zeros(memory[name].size, bool) for name in fresh}
        self.on_error = on_error
        self.env: dict = {}
        self.flagged = False
        self.stopped = False
        self.failures: dict = {}  # check id -> FailedCheck at its smallest position

    # -- running --------------------------------------------------------------------------------

    def run_kernel(self, kernel: Kernel) -> None:
        """Run the stages of ``kernel`` in order, each with the range variables spanning it."""
        try:
            for stage in kernel_stages(kernel):
                self.env = {RANGE_BEGIN: 0, RANGE_END: stage_extent(stage)}
                self.execute(stage)
        except _Stop:
            self.stopped = True

    def first_failure(self) -> FailedCheck | None:
        """The failed check the runtimes report: the lowest-numbered one."""
        return self.failures[min(self.failures)] if self.failures else None

    def execute(self, stmt) -> None:
        rule = STATEMENTS.get(type(stmt))
        if rule is None:
            raise EvaluationError(f"no evaluation rule for the statement {type(stmt).__name__}")
        rule(self, stmt)

    def value(self, expr):
        rule = EXPRESSIONS.get(type(expr))
        if rule is None:
            raise EvaluationError(f"no evaluation rule for the expression {type(expr).__name__}")
        return rule(self, expr)

    # -- memory ---------------------------------------------------------------------------------

    def _offset(self, buf: Buffer, indices) -> int:
        """The flat offset of an access, after checking it against every axis of ``buf``."""
        if buf.name not in self.memory:
            raise EvaluationError(f"access to {buf.name}, which is no buffer of the program")
        memory = self.memory[buf.name]
        if memory.dtype != buf.dtype.np or len(indices) != len(buf.shape):
            raise EvaluationError(f"access to {buf.name} as {buf.dtype}{list(buf.shape)} with {len(indices)} "
                                  f"indices; its memory holds {memory.dtype}[{memory.size}]")
        values = [self.value(i) for i in indices]
        for axis, (i, d) in enumerate(zip(values, buf.shape)):
            if not 0 <= i < d:
                raise EvaluationError(f"{buf.name}{values}: index {i} is out of bounds on axis {axis} of size {d}")
        offset = sum(i * s for i, s in zip(values, buf.strides))
        if offset >= memory.size:
            raise EvaluationError(f"{buf.name}{values}: offset {offset} is past its {memory.size} elements")
        return offset

    def load(self, buf: Buffer, indices):
        k = self._offset(buf, indices)
        if buf.name in self.written and not self.written[buf.name][k]:
            raise EvaluationError(f"{buf.name}: element {k} is read before anything wrote it")
        return scalar(self.memory[buf.name][k], buf.dtype)

    def store(self, buf: Buffer, indices, value) -> None:
        if buf.name in self.readonly:
            raise EvaluationError(f"a write to {buf.name}, an input or constant")
        k = self._offset(buf, indices)
        self.memory[buf.name][k] = value
        if buf.name in self.written:
            self.written[buf.name][k] = True

    def check_written(self, buf: Buffer) -> None:
        """Raise unless every element of ``buf`` was written (a computed output)."""
        unwritten = np.flatnonzero(~self.written[buf.name]) if buf.name in self.written else ()
        if len(unwritten):
            raise EvaluationError(f"{buf.name}: {len(unwritten)} element(s) never written, "
                                  f"the first at flat position {int(unwritten[0])}")

    # -- checks ---------------------------------------------------------------------------------

    def fail(self, failure: FailedCheck) -> None:
        known = self.failures.get(failure.check_id)
        if known is None or failure.position < known.position:
            self.failures[failure.check_id] = failure
        if self.on_error == "stop":
            raise _Stop


# -- one rule per node ----------------------------------------------------------------------------


def _const(ev: Evaluator, e: Const):
    if e.dtype.is_int and not isinstance(e.value, (bool, np.bool_)):
        lo, hi = _int_range(e.dtype)
        if int(e.value) != e.value or not lo <= int(e.value) <= hi:
            raise EvaluationError(f"constant {e.value!r} is not a {e.dtype} value")
    return scalar(e.value, e.dtype)


def _var(ev: Evaluator, e: Var):
    if e not in ev.env:
        raise EvaluationError(f"variable {e.name} is not bound")
    return ev.env[e]


_COMPARE = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b,
            "ge": lambda a, b: a >= b, "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


def _cmp(ev: Evaluator, e: Cmp):
    return bool(_COMPARE[e.op](ev.value(e.a), ev.value(e.b)))


def _select(ev: Evaluator, e: Select):
    cond, a, b = ev.value(e.cond), ev.value(e.a), ev.value(e.b)  # both operands, as the CPU
    return a if cond else b


def _every(ev: Evaluator, e: Every):
    """Every position evaluated (no early exit, as on the CPU), so each must be in bounds."""
    outer = ev.env.get(e.var)
    holds = True
    for i in range(ev.value(e.extent)):
        ev.env[e.var] = i
        holds = bool(ev.value(e.cond)) and holds
    if outer is None:
        ev.env.pop(e.var, None)
    else:
        ev.env[e.var] = outer
    return holds


def _math(fn: str, value, dtype):
    """``Math``: numpy's function in the value's own float type."""
    with np.errstate(all="ignore"):
        return getattr(np, fn)(dtype.np.type(value))


EXPRESSIONS = {
    Const: _const,
    Var: _var,
    Binary: lambda ev, e: binary(e.op, e.dtype, ev.value(e.a), ev.value(e.b)),
    Cmp: _cmp,
    Select: _select,
    Cast: lambda ev, e: cast(ev.value(e.a), e.a.dtype, e.to),
    Math: lambda ev, e: _math(e.fn, ev.value(e.a), e.dtype),
    Load: lambda ev, e: ev.load(e.buffer, e.indices),
    Every: _every,
}


def _for(ev: Evaluator, s: For):
    if s.kind not in LOOP_KINDS:
        raise EvaluationError(f"loop {s.var.name} has the unknown kind {s.kind!r}")
    if s.kind == "deferred_check" and not ev.flagged:
        return  # the runtime runs a deferred check only after a stage flagged a bad index
    extent = ev.value(s.extent)
    outer = ev.env.get(s.var)
    for i in range(extent):
        ev.env[s.var] = i
        ev.execute(s.body)
    if outer is None:
        ev.env.pop(s.var, None)
    else:
        ev.env[s.var] = outer


def _reduce(ev: Evaluator, s: Reduce):
    if s.combine not in COMBINES:
        raise EvaluationError(f"unknown combine {s.combine!r}")
    value = ev.value(s.value)
    if s.combine != "none":
        value = binary(s.combine, s.buffer.dtype, ev.load(s.buffer, s.indices), value)
    ev.store(s.buffer, s.indices, value)


def _if(ev: Evaluator, s: If):
    if ev.value(s.cond):
        ev.execute(s.then)
    elif s.orelse is not None:
        ev.execute(s.orelse)


def _seq(ev: Evaluator, s: Seq):
    for st in s.stmts:
        ev.execute(st)


def _let(ev: Evaluator, s: Let):
    """Each binding in order, then the body; the variables are gone afterwards, as in C."""
    outer = {var: ev.env.get(var) for var, _ in s.bindings}
    for var, value in s.bindings:
        ev.env[var] = ev.value(value)
    ev.execute(s.body)
    for var, before in outer.items():
        if before is None:
            ev.env.pop(var, None)
        else:
            ev.env[var] = before


def _report(ev: Evaluator, s: ReportIndexError):
    value = ev.value(s.value) if s.value is not None else None
    ev.fail(FailedCheck(s.check_id, ev.value(s.position), value))


def _flag(ev: Evaluator, s: FlagIndexError):
    ev.flagged = True


STATEMENTS = {
    For: _for,
    Store: lambda ev, s: ev.store(s.buffer, s.indices, ev.value(s.value)),
    Reduce: _reduce,
    If: _if,
    Seq: _seq,
    Let: _let,
    ReportIndexError: _report,
    FlagIndexError: _flag,
    Prefetch: lambda ev, s: ev._offset(s.buffer, s.indices),  # in bounds; reads nothing
}


# -- entry points ---------------------------------------------------------------------------------


def _program_memory(program: LoweredProgram, inputs: dict):
    """Flat memory for every buffer of the program, and the names of the inputs and constants."""
    memory = {}
    for buf in program.inputs:
        if buf.name not in inputs:
            raise ValueError(f"missing input {buf.name!r}")
        arr = np.asarray(inputs[buf.name])
        if arr.dtype != buf.dtype.np or arr.shape != tuple(buf.shape):
            raise ValueError(f"input {buf.name!r}: expected {buf.dtype}{list(buf.shape)}, "
                             f"got {arr.dtype}{list(arr.shape)}")
        memory[buf.name] = np.array(arr, copy=True).reshape(-1)
    for buf, value in program.constants:
        memory[buf.name] = np.array(value.array, copy=True).reshape(-1)
    given = set(memory)
    for buf in program.buffer_table():
        if buf.name not in memory:
            memory[buf.name] = np.zeros(buf.size, buf.dtype.np)
    return memory, given


def evaluate(program: LoweredProgram, inputs: dict, on_error: str = "stop") -> dict:
    """Run ``program`` on ``inputs`` (name -> array) and return ``{output name: array}``.

    A failed ``mode="raise"`` check raises the ``IndexOutOfRangeError`` the runtimes raise:
    ``on_error="stop"`` ends the run at the first failure met (the CPU), ``"record"`` runs to
    the end and reports the lowest-numbered failed check at its smallest position (the GPU).
    Broken IR raises :class:`EvaluationError`."""
    memory, given = _program_memory(program, inputs)
    ev = Evaluator(memory, readonly=given, fresh=set(memory) - given, on_error=on_error)
    for kernel in program.kernels:
        ev.run_kernel(kernel)
        if ev.stopped:
            break
    failure = ev.first_failure()
    if failure is not None:
        check = next(c for c in program.checks if c.check_id == failure.check_id)
        value = failure.value
        if value is None:  # the runtime reads it back from the index tensor, which must exist
            if check.buffer not in memory:
                raise EvaluationError(f"check {check.check_id} reports no value, and its index "
                                      f"{check.buffer} is no buffer of the program")
            value = int(memory[check.buffer][failure.position])
        raise check.error(failure.position, value)
    outputs = {}
    for buf in program.outputs:
        ev.check_written(buf)
        outputs[buf.name] = memory[buf.name].reshape(buf.shape).copy()
    return outputs


def evaluate_kernel(kernel: Kernel, buffers: dict, on_error: str = "stop") -> FailedCheck | None:
    """Run one kernel on ``buffers`` (name -> C-contiguous array, written in place), which must
    hold every parameter; missing temps are allocated and must be written before they are
    read. Returns the failed check the runtimes would report, or None."""
    if not all(isinstance(a, np.ndarray) and a.flags.c_contiguous for a in buffers.values()):
        raise ValueError("evaluate_kernel writes into its buffers: pass C-contiguous numpy arrays")
    memory = {name: arr.reshape(-1) for name, arr in buffers.items()}
    fresh = set()
    for buf in kernel.temps:
        if buf.name not in memory:
            memory[buf.name] = np.zeros(buf.size, buf.dtype.np)
            fresh.add(buf.name)
    ev = Evaluator(memory, fresh=fresh, on_error=on_error)
    ev.run_kernel(kernel)
    return ev.first_failure()
