"""Sizes computed in LLVM IR outside a stage: a program's main splitting a stage needs its
extent and work (``llvm.py``), the call entry checks an output's shape (``llvm_call.py``). A
size is a number, a symbolic size (a 0-d int64 buffer), or sums, differences, products,
quotients (of sizes, never negative), minima and maxima of them; anything else is not rendered there."""
from __future__ import annotations

from llvmlite import ir

from ..ir.loopnest import Binary, Const, Load

I64 = ir.IntType(64)
_OPS = ("add", "sub", "mul", "div", "min", "max")


def size_renderable(size) -> bool:
    """Whether ``size_value`` can compute ``size``."""
    if isinstance(size, (int, Const)) or (isinstance(size, Load) and not size.indices):
        return True
    return isinstance(size, Binary) and size.op in _OPS and size_renderable(size.a) and size_renderable(size.b)


def size_value(b: ir.IRBuilder, size, symbol):
    """``size`` as an i64; ``symbol(name)`` gives the value of the symbolic size ``name``."""
    if isinstance(size, int):
        return ir.Constant(I64, size)
    if isinstance(size, Const):
        return ir.Constant(I64, int(size.value))
    if isinstance(size, Load):
        return symbol(size.buffer.name)
    x, y = size_value(b, size.a, symbol), size_value(b, size.b, symbol)
    if size.op in ("min", "max"):
        return b.select(b.icmp_signed("<" if size.op == "min" else ">", x, y), x, y)
    return {"add": b.add, "sub": b.sub, "mul": b.mul, "div": b.sdiv}[size.op](x, y)
