"""CUDA C renderer: a GPU-scheduled LoweredProgram becomes one CUDA C translation unit.

The boilerplate comes from Jinja templates in ``templates/`` (through ``c_family.TEMPLATES``,
shared with the emulation's launcher, as are the C types): the kernel signature, launch bounds, 64-bit thread indexing and the
grid-stride loop (``kernel.cu.j2``), the device helpers (``helpers.cu.j2``), the host-side launch
plan (``launch_plan.cu.j2``) and the host emulation's launcher (``emu_launcher.cpp.j2``).
Expressions, statements and index arithmetic are rendered here, in Python.

Every top-level statement of a kernel (after :mod:`cinnlite.ir.schedule_gpu`) is one launch: its
``gpu.grid`` loops become one flat loop over ``items`` work items, each thread taking items
``tid, tid + stride, ...``; the item is split back into the loop variables row-major. A symbolic
size (``cinnlite.ir.symbolic``) is a load of its int64 scalar buffer (``#E``), a kernel parameter
like any other buffer, so item counts, the split and strides may be run-time values; the host
computes such a launch's item count per call. On the GPU a
``Reduce`` is atomic and a ``Store`` plain. An atomic touches no memory outside its tensor but
where nothing else can work: a 16-bit element is swapped alone, and an 8-bit one (no GPU swaps a
single byte) in the aligned word or halfword around it that its helper picks inside the tensor's
bytes (the ``Reduce`` hands it the buffer and its element count); only a halfword at an odd start
or end reaches one byte past the tensor, which it writes back unchanged (docs/SEMANTICS.md,
"Reductions and duplicates"). ``ReportIndexError`` records the smallest bad position of its
check, and the index value there, in the error buffer (one ``error_record.PER_CHECK`` record per
check): the position by an atomic minimum, the value under a lock that only threads which lowered
the position take.

Value types: bool is ``bool`` in registers and one byte in memory; float16 and bfloat16 are kept
as their bits (``cl_half``, ``cl_bf16``; no ``cuda_fp16.h`` or ``cuda_bf16.h``, so the host
emulation compiles them too) and converted to float for arithmetic, rounding to nearest-even
after each operation, as the CPU backend does. A complex value is a struct of its two parts
(``cl_c64``, ``cl_c128``) with helper functions for its arithmetic; a complex ``add`` reduction is
one atomic add per part, a complex ``mul`` one is always ordered by the GPU passes. Signed integer data arithmetic wraps around (computed in
unsigned types); integer division never traps.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import ClassVar
import numpy as np

from ..dtypes import DType, complex64, complex128, converted, float16, float32, int64, uint8
from ..errors import CompileError
from ..ir.loopnest import (Binary, Buffer, Cast, Cmp, Const, Expr, For, If, Let, Load, LoweredProgram, Math, Reduce,
                           ReportIndexError, Select, Seq, Store, Var, dim_mul)
from ..ir.printer import expr_str
from ..ir.symbolic import SYMBOL_BUFFER_PREFIX
from ..ir.schedule_gpu import grid_chain
from ..ir.transform import (buffers_of, let_vars, stmt_vars, top_level, walk_expr, walk_stmt,
                            written_buffers)
from .c_family import (ERROR_BUFFER, ERROR_BUFFER_CTYPE, TEMPLATES, memory_ctype, pointer_from, pointer_in_params,
                       pointer_param, value_ctype)
from .error_record import PER_CHECK
from .names import comment_text, safe_name
from .renderer import RenderedModule, Renderer

BLOCK = 256  # threads per block; also the kernels' __launch_bounds__
#: Items a thread takes at a time in a launch larger than its grid (kernel.cu.j2): a thread
#: with one item's loads in flight leaves a large copy-like launch at half the memory bandwidth.
ITEMS_IN_FLIGHT = 4

_SUFFIX = {"bool": "b", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
           "uint16": "u16", "uint32": "u32", "uint64": "u64", "float16": "f16", "bfloat16": "bf16", "float32": "f32",
           "float64": "f64", "complex64": "c64", "complex128": "c128"}


@dataclass(frozen=True)
class _BitsFloat:
    """A 16-bit float kept as its bits: its helpers section (``needs``), its conversions to and
    from float (``from_double`` None: through float, as ``ml_dtypes`` converts) and the bits of 1."""

    need: str
    to_float: str
    from_float: str
    from_double: str | None
    one: int


_BITS_FLOATS = {"float16": _BitsFloat("f16", "cl_h2f", "cl_f2h", "cl_d2h", 0x3C00),
                "bfloat16": _BitsFloat("bf16", "cl_bf2f", "cl_f2bf", None, 0x3F80)}
_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%"}
_CMP = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Identifiers a buffer parameter must not take: C++ keywords and types, CUDA built-ins.
_RESERVED = frozenset("""
    alignas alignof and asm auto bool break case catch char class const constexpr const_cast
    continue decltype default delete do double dynamic_cast else enum explicit export extern false
    float for friend goto if inline int long mutable namespace new noexcept not nullptr operator or
    private protected public register reinterpret_cast return short signed sizeof static
    static_assert static_cast struct switch template this thread_local throw true try typedef
    typeid typename union unsigned using virtual void volatile wchar_t while xor
    threadIdx blockIdx blockDim gridDim warpSize main min max errors fmod fmodf NULL
""".split())


# The word an atomic compare-and-swap on an element of so many bits swaps.
_CAS_WORDS = {16: "unsigned short", 32: "unsigned int", 64: "unsigned long long"}


def _utype(dtype: DType) -> str:
    """The unsigned type wrap-around arithmetic of ``dtype`` is done in."""
    return "unsigned long long" if dtype.bits == 64 else "unsigned int"


# -- what the renderer hands the runtimes -------------------------------------------------------


@dataclass(frozen=True)
class Launch:
    """One ``__global__`` function and how the host launches it."""

    name: str          # the kernel symbol
    kernel: str        # the loop-nest kernel (graph node) it belongs to
    items: object      # work items of its flat grid-stride loop: an int, or an int64 IR expression
                       # over symbol buffers (a symbolic size), evaluated per call
    buffers: tuple     # the buffer names it takes, in parameter order
    slots: tuple       # their slots in LoweredProgram.buffer_table()
    ctypes: tuple      # their element C types
    errors: bool       # whether the error buffer follows the buffers


@dataclass(frozen=True)
class CudaModule(RenderedModule):
    """The rendered translation unit and its launch plan, in execution order."""

    stage: ClassVar[str] = "cuda"
    launches: tuple
    block: int
    num_checks: int             # the error buffer holds one PER_CHECK record per check
    reported_values: frozenset  # the checks whose kernels report the bad index value too


# -- device helpers -----------------------------------------------------------------------------


class _Helpers:
    """The device helper functions the kernels use, in dependency order."""

    def __init__(self):
        self.needs = set()
        self.functions = {}

    def _add(self, name, **spec):
        if name not in self.functions:
            self.functions[name] = dict(name=name, **spec)
        return name

    def bits_float(self, dtype: DType) -> _BitsFloat | None:
        """The conversions of a float kept as bits (their helpers are then emitted), or None."""
        spec = _BITS_FLOATS.get(dtype.name)
        if spec is not None:
            self.needs.add(spec.need)
        return spec

    def half(self):
        self.bits_float(float16)

    def complex(self, dtype: DType) -> str:
        """The helpers of a complex dtype (emitted then); returns their suffix."""
        self.needs.add(dtype.name)
        return _SUFFIX[dtype.name]

    def complex_cast(self, src: DType, dst: DType) -> str:
        """complex64 <-> complex128, part by part."""
        self.complex(src)
        return self._add(f"cl_{_SUFFIX[src.name]}_to_{self.complex(dst)}", kind="complex_cast",
                         src=value_ctype(src), dst=value_ctype(dst), suffix=_SUFFIX[dst.name],
                         part=value_ctype(dst.part))

    def minmax(self, op, dtype: DType) -> str:
        spec = self.bits_float(dtype)
        return self._add(f"cl_{op}_{_SUFFIX[dtype.name]}", kind="minmax", ctype=value_ctype(dtype),
                         dtype=_SUFFIX[dtype.name], is_float=dtype.is_float, cmp="<" if op == "min" else ">",
                         to_float=spec.to_float if spec else None)

    def half_arith(self, op, dtype: DType = float16) -> str:
        """Arithmetic on a 16-bit float kept as bits: in float, rounded back once."""
        spec = self.bits_float(dtype)
        expr = "fmodf(x, y)" if op == "mod" else f"x {_INFIX[op]} y"
        return self._add(f"cl_{op}_{_SUFFIX[dtype.name]}", kind="half_arith", expr=expr, ctype=value_ctype(dtype),
                         to_float=spec.to_float, from_float=spec.from_float)

    def int_div(self, op, dtype: DType) -> str:
        return self._add(f"cl_{op}_{_SUFFIX[dtype.name]}", kind="int_div", ctype=value_ctype(dtype),
                         utype=_utype(dtype), signed=dtype.is_signed, op=_INFIX[op])

    def float_to_int(self, dtype: DType) -> str:
        info = np.iinfo(dtype.np)
        lo = "(-9223372036854775807LL - 1LL)" if dtype.bits == 64 and dtype.is_signed else str(int(info.min))
        suffix = ("u" if not dtype.is_signed else "") + ("LL" if dtype.bits == 64 else "")
        return self._add(f"cl_ftoi_{_SUFFIX[dtype.name]}", kind="float_to_int", ctype=value_ctype(dtype),
                         lo=lo, hi=f"{int(info.max)}{suffix}",
                         lo_f=repr(float(info.min)), hi_f=repr(float(info.max)))

    def report(self) -> str:
        return self._add("cl_report_index_error", kind="report", ctype=ERROR_BUFFER_CTYPE, size=PER_CHECK.size,
                         position=PER_CHECK.index("position"), value=PER_CHECK.index("value"),
                         lock=PER_CHECK.index("lock"))

    def atomic(self, op, dtype: DType, emitter) -> str:
        if dtype.is_bool:
            # A bool is a byte holding 0 or 1, and only max (or) and min (and) reach it: the
            # byte's own unsigned max and min are exactly those.
            dtype = uint8
        name = f"cl_atomic_{op}_{_SUFFIX[dtype.name]}"
        if name in self.functions:
            return name
        ct = value_ctype(dtype)
        if dtype.is_complex:
            if op != "add":  # the GPU passes order complex mul (order_update_nests)
                raise CompileError(f"CUDA renderer: no atomic {op} of {dtype}; the update nest must be ordered")
            return self._add(name, kind="atomic_complex_add", ctype=ct, dtype=dtype.name)
        native = {
            ("add", "float32"): "atomicAdd(p, v)",
            ("add", "float64"): "atomicAdd(p, v)",
            ("add", "int32"): "atomicAdd(p, v)",
            ("add", "int64"): "atomicAdd((unsigned long long*)p, (unsigned long long)v)",
            ("max", "int32"): "atomicMax(p, v)",
            ("min", "int32"): "atomicMin(p, v)",
            ("max", "int64"): "atomicMax(p, v)",
            ("min", "int64"): "atomicMin(p, v)",
            # unsigned int and unsigned long long have native atomics for all three
            ("add", "uint32"): "atomicAdd(p, v)",
            ("max", "uint32"): "atomicMax(p, v)",
            ("min", "uint32"): "atomicMin(p, v)",
            ("add", "uint64"): "atomicAdd(p, v)",
            ("max", "uint64"): "atomicMax(p, v)",
            ("min", "uint64"): "atomicMin(p, v)",
        }.get((op, dtype.name))
        if native is not None:
            return self._add(name, kind="atomic_native", ctype=ct, call=native)
        combine = emitter.combine(op, dtype, "cur", "v")  # registers the helpers it calls first
        spec = dict(op=op, dtype=dtype.name, ctype=ct, combine=combine)
        if dtype.bits == 8:  # no 8-bit compare-and-swap: a window around the byte, inside the tensor
            return self._add(name, kind="atomic_cas_byte", **spec)
        # 16 bits: the native 16-bit compare-and-swap (compute capability 7.0 and newer)
        word = _CAS_WORDS[dtype.bits]
        if dtype.name == "float32":
            from_word, to_word = "__uint_as_float(assumed)", "__float_as_uint(next)"
        elif dtype.name == "float64":
            from_word = "__longlong_as_double((long long)assumed)"
            to_word = "(unsigned long long)__double_as_longlong(next)"
        else:
            from_word, to_word = f"({ct})assumed", f"({word})next"
        return self._add(name, kind="atomic_cas", bits=dtype.bits, word=word, from_word=from_word,
                         to_word=to_word, **spec)


# -- expressions and statements -----------------------------------------------------------------


class _Emitter:
    """Renders the expressions and statements of one launch; ``names`` maps buffers to their C
    parameter names."""

    def __init__(self, helpers: _Helpers, names: dict):
        self.h = helpers
        self.names = names
        self.in_index = 0  # > 0 while rendering an index, an extent or a position
        self.let_bound = set()  # the Let variables in scope
        self.reported_values = set()  # checks whose bad index value the kernels report

    def index(self, e) -> str:
        """An index, an extent or a position (int64 arithmetic rendered plainly)."""
        self.in_index += 1
        try:
            return self.expr(e)
        finally:
            self.in_index -= 1

    # -- expressions ---------------------------------------------------------------------------

    def expr(self, e) -> str:
        if isinstance(e, Const):
            return self.const(e.value, e.dtype)
        if isinstance(e, Var):
            return e.name
        if isinstance(e, Load):
            ref = self.element(e.buffer, e.indices)
            return f"({ref} != 0)" if e.buffer.dtype.is_bool else ref
        if isinstance(e, Binary):
            # int64 arithmetic on indices, or on loop variables and constants alone, stays far
            # from overflow and is rendered plainly; int64 data arithmetic wraps like the CPU's.
            # A Let's variable may hold data, so arithmetic on it wraps too.
            plain = bool(self.in_index) or not any(
                isinstance(x, Load) or (isinstance(x, Var) and x in self.let_bound) for x in walk_expr(e))
            return self.binary(e.op, e.dtype, self.expr(e.a), self.expr(e.b), divisor=e.b, plain_int64=plain)
        if isinstance(e, Cmp):
            return self.compare(e.op, e.a.dtype, self.expr(e.a), self.expr(e.b))
        if isinstance(e, Select):
            return f"({self.expr(e.cond)} ? {self.expr(e.a)} : {self.expr(e.b)})"
        if isinstance(e, Cast):
            return self.cast(self.expr(e.a), e.a.dtype, e.to)
        if isinstance(e, Math):
            return f"{e.fn}{'f' if e.dtype.bits == 32 else ''}({self.expr(e.a)})"
        raise CompileError(f"CUDA renderer: cannot render expression {e!r}")

    def const(self, value, dtype: DType) -> str:
        if dtype.is_bool:
            return "true" if value else "false"
        if dtype.name in _BITS_FLOATS:
            bits = int(converted(value, dtype).view(np.uint16))
            return f"(({value_ctype(dtype)})0x{bits:04x}u)"
        if dtype.is_complex:
            v = complex(np.array(value, dtype.np))  # the parts rounded to the dtype's
            return f"cl_make_{self.h.complex(dtype)}({self.const(v.real, dtype.part)}, {self.const(v.imag, dtype.part)})"
        if dtype.is_float:
            if dtype.bits == 32:
                x = np.float32(value)
                if not np.isfinite(x):
                    return f"__uint_as_float(0x{int(x.view(np.uint32)):08x}u)"
                text = repr(float(x)) + "f"
            else:
                x = float(value)
                if not math.isfinite(x):
                    bits = int(np.array(x, np.float64).view(np.uint64))
                    return f"__longlong_as_double((long long)0x{bits:016x}ULL)"
                text = repr(x)
            return f"({text})" if text.startswith("-") else text
        v = int(value)
        if dtype == int64:
            if v == -2**63:
                return "(-9223372036854775807LL - 1LL)"
            return f"({v}LL)" if v < 0 else f"{v}LL"
        if dtype.name == "int32":
            if v == -2**31:
                return "(-2147483647 - 1)"
            return f"({v})" if v < 0 else str(v)
        if not dtype.is_signed:  # an unsigned literal: uint64 values past the int64 range included
            return f"(({value_ctype(dtype)}){v}ULL)"
        return f"(({value_ctype(dtype)}){v})"

    def element(self, buf: Buffer, indices) -> str:
        """``name[offset]``: the row-major offset of ``indices`` in ``buf`` (64-bit). A stride
        of a symbolic shape is an expression, rendered as an index (it reads a symbol buffer)."""
        terms, fixed = [], 0
        for idx, stride in zip(indices, buf.strides):
            if isinstance(stride, Expr):
                if isinstance(idx, Const) and int(idx.value) == 0:
                    continue
                factor = self.const(int(idx.value), int64) if isinstance(idx, Const) else self.index(idx)
                terms.append(f"{factor} * {self.index(stride)}")
                continue
            if isinstance(idx, Const):
                fixed += int(idx.value) * stride
                continue
            s = self.index(idx)
            terms.append(s if stride == 1 else f"{s} * {stride}LL")
        if fixed or not terms:
            terms.append(f"{fixed}LL")
        return f"{self.names[buf.name]}[{' + '.join(terms)}]"

    def binary(self, op, dtype: DType, a: str, b: str, divisor=None, plain_int64=False) -> str:
        if dtype.is_bool:
            # On bool values max is "or" and min is "and", as for the CPU's unsigned i1.
            logical = {"and": "&&", "or": "||", "max": "||", "min": "&&"}.get(op)
            if logical is None:
                raise CompileError(f"CUDA renderer: {op} of bool values")
            return f"({a} {logical} {b})"
        if op in ("and", "or") or (dtype.is_complex and op not in ("add", "sub", "mul", "div")):
            raise CompileError(f"CUDA renderer: {op} of {dtype}")
        if dtype.is_complex:
            return f"cl_{op}_{self.h.complex(dtype)}({a}, {b})"
        if op in ("min", "max"):
            return f"{self.h.minmax(op, dtype)}({a}, {b})"
        if dtype.name in _BITS_FLOATS:
            return f"{self.h.half_arith(op, dtype)}({a}, {b})"
        if dtype.is_float:
            if op == "mod":
                return f"{'fmodf' if dtype.bits == 32 else 'fmod'}({a}, {b})"
            return f"({a} {_INFIX[op]} {b})"
        ct = value_ctype(dtype)
        if op in ("div", "mod"):
            if isinstance(divisor, Const) and int(divisor.value) not in (0, -1):
                return f"({a} {_INFIX[op]} {b})" if dtype.bits >= 32 else f"(({ct})({a} {_INFIX[op]} {b}))"
            return f"{self.h.int_div(op, dtype)}({a}, {b})"
        if dtype == int64 and plain_int64:
            return f"({a} {_INFIX[op]} {b})"
        return self.wrapping(op, dtype, a, b)

    def wrapping(self, op, dtype: DType, a: str, b: str) -> str:
        """Integer add/sub/mul that wraps around like the CPU's, without signed overflow."""
        ut = _utype(dtype)
        return f"(({value_ctype(dtype)})(({ut}){a} {_INFIX[op]} ({ut}){b}))"

    def combine(self, op, dtype: DType, a: str, b: str) -> str:
        """``combine(a, b)`` of a reduction on data of ``dtype``."""
        if dtype.is_int and op in ("add", "mul"):
            return self.wrapping(op, dtype, a, b)
        return self.binary(op, dtype, a, b)

    def compare(self, op, dtype: DType, a: str, b: str) -> str:
        if dtype.is_complex:
            raise CompileError(f"CUDA renderer: a comparison of {dtype} values")
        spec = self.h.bits_float(dtype)
        if spec is not None:
            a, b = f"{spec.to_float}({a})", f"{spec.to_float}({b})"
        # C's float comparisons are ordered, and != is true for NaN, as in the CPU backend.
        return f"({a} {_CMP[op]} {b})"

    def cast(self, a: str, src: DType, dst: DType) -> str:
        if src == dst:
            return a
        if dst.is_complex:
            suffix, part = self.h.complex(dst), dst.part
            if src.is_complex:  # part by part (C's conversions round to nearest)
                return f"{self.h.complex_cast(src, dst)}({a})"
            return f"cl_make_{suffix}({self.cast(a, src, part)}, {self.const(0.0, part)})"
        if src.is_complex:
            raise CompileError(f"CUDA renderer: a cast of {src} to {dst}")
        from_bits, to_bits = self.h.bits_float(src), self.h.bits_float(dst)
        if dst.is_bool:
            if from_bits is not None:
                return f"({from_bits.to_float}({a}) != 0.0f)"
            return f"({a} != 0)"
        if src.is_bool:
            if to_bits is not None:
                return f"({a} ? ({value_ctype(dst)})0x{to_bits.one:04x}u : ({value_ctype(dst)})0x0000u)"
            return f"(({value_ctype(dst)})({a}))"
        if to_bits is not None:
            if from_bits is not None:  # float16 <-> bfloat16: exactly to float, rounded once
                return f"{to_bits.from_float}({from_bits.to_float}({a}))"
            if src == float32:
                return f"{to_bits.from_float}({a})"
            if to_bits.from_double is not None:
                return f"{to_bits.from_double}({a})" if src.name == "float64" else \
                    f"{to_bits.from_double}((double)({a}))"
            # bfloat16: rounded to float first (C's conversions round to nearest), as ml_dtypes.
            return f"{to_bits.from_float}((float)({a}))"
        if from_bits is not None:
            if dst.is_float:
                return f"{from_bits.to_float}({a})" if dst == float32 else f"((double){from_bits.to_float}({a}))"
            a, src = f"{from_bits.to_float}({a})", float32
        if src.is_float and dst.is_int:
            return f"{self.h.float_to_int(dst)}({a})"
        return f"(({value_ctype(dst)})({a}))"

    # -- statements ----------------------------------------------------------------------------

    def stmt(self, s, depth: int) -> list:
        pad = "    " * depth
        if isinstance(s, Seq):
            return [line for st in s.stmts for line in self.stmt(st, depth)]
        if isinstance(s, Let):
            # A block of its own, so that sibling statements may bind the same names.
            inner = "    " * (depth + 1)
            lines = [f"{pad}{{"]
            for v, e in s.bindings:
                lines.append(f"{inner}const {value_ctype(v.dtype)} {v.name} = {self.expr(e)};")
                self.let_bound.add(v)
            lines += self.stmt(s.body, depth + 1)
            self.let_bound.difference_update(v for v, _ in s.bindings)
            return lines + [f"{pad}}}"]
        if isinstance(s, Store):
            value = self.expr(s.value)
            if s.buffer.dtype.is_bool:
                value = f"(unsigned char)({value})"
            return [f"{pad}{self.element(s.buffer, s.indices)} = {value};"]
        if isinstance(s, Reduce):
            if s.combine == "none":
                raise CompileError("CUDA renderer: a scatter update without reduction reached the renderer; "
                                   "the GPU pipeline must give it a winner (scatter_last_write_wins)")
            fn = self.h.atomic(s.combine, s.buffer.dtype, self)
            args = [f"&{self.element(s.buffer, s.indices)}", self.expr(s.value)]
            if s.buffer.dtype.itemsize == 1:  # the byte helpers keep to the tensor's bytes
                args += [self.names[s.buffer.name], _c_size(s.buffer.size, self.index)]
            return [f"{pad}{fn}({', '.join(args)});"]
        if isinstance(s, If):
            lines = [f"{pad}if ({self.expr(s.cond)}) {{"] + self.stmt(s.then, depth + 1)
            if s.orelse is not None:
                lines += [f"{pad}}} else {{"] + self.stmt(s.orelse, depth + 1)
            return lines + [f"{pad}}}"]
        if isinstance(s, For):
            if s.kind != "serial":
                raise CompileError(f"CUDA renderer: loop {s.var.name} of kind {s.kind} inside a launch")
            v = s.var.name
            head = f"{pad}for (long long {v} = 0; {v} < {self.index(s.extent)}; ++{v}) {{"
            return [head] + self.stmt(s.body, depth + 1) + [f"{pad}}}"]
        if isinstance(s, ReportIndexError):
            fn = self.h.report()
            if s.value is not None:
                self.reported_values.add(s.check_id)
            value = self.index(s.value) if s.value is not None else "0LL"
            return [f"{pad}{fn}({ERROR_BUFFER}, {s.check_id}, {self.index(s.position)}, {value});"]
        raise CompileError(f"CUDA renderer: cannot render statement {s!r}")


# -- launches and the module --------------------------------------------------------------------


def _product(sizes):
    """The product of sizes (ints, or int64 expressions of symbolic sizes): an int when every
    one is."""
    out = 1
    for d in sizes:
        out = dim_mul(out, d)
    return out


def _c_size(size, render) -> str:
    """A size in C: ``123LL``, or the rendering of its expression by ``render``."""
    return f"{size}LL" if isinstance(size, int) else render(size)


def _size_text(size) -> str:
    """A size for a comment: ``64``, ``#E``, ``(64 x #E)``."""
    return str(size) if isinstance(size, int) else comment_text(expr_str(size).replace(" * ", " x "))


def _split_item(extents, render=None) -> list:
    """The row-major decomposition of ``cl_item`` into one index per extent; ``render`` renders
    the extents that are expressions."""
    out = []
    for j, extent in enumerate(extents):
        inner = _product(extents[j + 1:])
        unit = isinstance(inner, int) and inner == 1
        value = "cl_item" if unit else f"cl_item / {_c_size(inner, render)}"
        if j > 0:
            value = f"{value} % {_c_size(extent, render)}" if unit else f"({value}) % {_c_size(extent, render)}"
        out.append(value)
    return out


def _symbol_cname(name: str) -> str:
    """The C parameter name of a symbol buffer: ``#E`` is ``sym_E``."""
    return "sym_" + safe_name(name[len(SYMBOL_BUFFER_PREFIX):])


class CUDARenderer(Renderer):
    """Loop-nest IR (after a GPU pipeline) -> CUDA C. ``render`` returns a :class:`CudaModule`;
    ``deterministic`` only says, in its header, that reductions were ordered."""

    stage = CudaModule.stage
    block = BLOCK

    def __init__(self, deterministic: bool = False):
        self.deterministic = deterministic

    def render(self, program: LoweredProgram) -> CudaModule:
        slots = {b.name: i for i, b in enumerate(program.buffer_table())}
        helpers = _Helpers()
        texts, launches, used_names, reported = [], [], set(), set()
        for kernel in program.kernels:
            for j, stmt in enumerate(top_level(kernel.body)):
                base = f"k_{safe_name(kernel.name)}_{j}"
                name = base
                while name in used_names:
                    name += "_"
                used_names.add(name)
                text, launch = self._launch(kernel, stmt, name, slots, helpers, reported)
                texts.append(text)
                launches.append(launch)
        plan = [dict(name=l.name, total=_size_text(l.items), args=list(l.buffers), errors=l.errors) for l in launches]
        complex_types = [dict(name=d.name, ctype=value_ctype(d), suffix=_SUFFIX[d.name], ftype=value_ctype(d.part),
                              fabs="fabsf" if d.part == float32 else "fabs")
                         for d in (complex64, complex128) if d.name in helpers.needs]
        source = TEMPLATES.get_template("module.cu.j2").render(
            program=program.name, deterministic=self.deterministic, launches=plan, block=self.block,
            num_checks=len(program.checks), error_slots=PER_CHECK.size, needs=helpers.needs, functions=list(helpers.functions.values()),
            complex_types=complex_types, kernels=texts)
        return CudaModule(program.name, source, tuple(launches), self.block, len(program.checks),
                          frozenset(reported))

    def _launch(self, kernel, stmt, name, slots, helpers, reported):
        loops, body = grid_chain(stmt)
        if not loops:
            raise CompileError(f"CUDA renderer, kernel {kernel.name}: a launch is not bound to the grid "
                               "(run a GPU pipeline first)")
        # An extent is an int, or the int64 expression of a symbolic size (it reads symbol buffers,
        # which buffers_of(stmt) then holds: the grid loops' extents are part of the launch).
        extents = [int(l.extent.value) if isinstance(l.extent, Const) else l.extent for l in loops]
        buffers, written = buffers_of(stmt), written_buffers(body)
        buffers.sort(key=lambda b: slots[b.name])
        var_names = {l.var.name for l in loops} | {s.var.name for s in walk_stmt(body) if isinstance(s, For)}
        var_names |= {v.name for v in let_vars(body)}
        for v in var_names:
            if not _IDENT.fullmatch(v) or v.startswith("cl_") or v in _RESERVED:
                raise CompileError(f"CUDA renderer: variable name {v!r} is not a safe C identifier")
        names, taken = {}, set(var_names)
        for b in buffers:
            cname = _symbol_cname(b.name) if b.name.startswith(SYMBOL_BUFFER_PREFIX) else safe_name(b.name)
            if not _IDENT.fullmatch(cname) or cname in _RESERVED or cname.startswith(("cl_", "_")):
                cname = f"b_{cname}"
            while cname in taken:
                cname += "_"
            taken.add(cname)
            names[b.name] = cname
        emitter = _Emitter(helpers, names)
        lines = emitter.stmt(body, 2)
        reported |= emitter.reported_values
        has_errors = any(isinstance(s, ReportIndexError) for s in walk_stmt(body))
        params = [pointer_param(memory_ctype(b.dtype), names[b.name], writes=b.name in written) for b in buffers]
        if has_errors:
            params.append(pointer_param(ERROR_BUFFER_CTYPE, ERROR_BUFFER))
        used = {v.name for v in stmt_vars(body)}
        grid_vars = [(l.var.name, value) for l, value in zip(loops, _split_item(extents, emitter.index))
                     if l.var.name in used]
        items = _product(extents)
        comment = f"{kernel.op} '{kernel.name}': {' x '.join(map(_size_text, extents))} items"
        text = TEMPLATES.get_template("kernel.cu.j2").render(
            comment=comment, block=self.block, name=name, params=params, total=_c_size(items, emitter.index),
            grid_vars=grid_vars, body="\n".join(lines), unroll=ITEMS_IN_FLIGHT)
        launch = Launch(name, kernel.name, items, tuple(b.name for b in buffers),
                        tuple(slots[b.name] for b in buffers), tuple(memory_ctype(b.dtype) for b in buffers),
                        has_errors)
        return text.rstrip("\n"), launch


def render_emu_launcher(module: CudaModule) -> str:
    """Host C++ that runs the module's launches in order on the CPU (see cuda_emu_prelude.h):
    ``cinnlite_emu_run`` runs the whole plan on a buffer table, and one
    ``cinnlite_emu_launch_<kernel>`` per launch takes its arguments as cuLaunchKernel does."""
    launches = []
    for l in module.launches:
        from_table = [pointer_from(c, f"cl_table[{s}]") for s, c in zip(l.slots, l.ctypes)]
        ctypes = list(l.ctypes) + ([ERROR_BUFFER_CTYPE] if l.errors else [])
        # A symbolic item count reads the symbol buffers, which the launch takes, from the table.
        names = {b: f"({pointer_from(c, f'cl_table[{s}]')})" for b, s, c in zip(l.buffers, l.slots, l.ctypes)}
        total = _c_size(l.items, _Emitter(_Helpers(), names).index)
        launches.append(dict(name=l.name, total=total, from_table=from_table + ([ERROR_BUFFER] if l.errors else []),
                             from_params=[pointer_in_params(c, k) for k, c in enumerate(ctypes)]))
    return TEMPLATES.get_template("emu_launcher.cpp.j2").render(launches=launches, block=module.block,
                                                                errors=ERROR_BUFFER, errors_ctype=ERROR_BUFFER_CTYPE)
