"""Soft-float helpers that generated modules define for themselves, and bfloat16 conversions.

LLVM lowers some half-precision conversions to calls into compiler-rt (``__truncdfhf2`` for
double -> half always on x86; the float <-> half ones where the CPU lacks F16C). Those symbols are
not in a Python process, so a module that converts to or from float16 defines them itself, with
round-to-nearest-even exactly as IEEE 754 (and numpy) require.

bfloat16 is no LLVM type the renderer relies on: an element is an i16 in memory, a float in
registers (every bfloat16 value is exactly a float32), and ``bf16_bits``/``bf16_value`` convert
between the two by bit manipulation, inline.
"""
from __future__ import annotations

from llvmlite import ir

I16, I32, I64 = ir.IntType(16), ir.IntType(32), ir.IntType(64)
HALF, FLOAT, DOUBLE = ir.HalfType(), ir.FloatType(), ir.DoubleType()


def _round_to_half_bits(b: ir.IRBuilder, bits, width: int, exp_bits: int, mant_bits: int):
    """IEEE binary(width) bits -> binary16 bits, round to nearest even. Branch-free."""
    t = ir.IntType(width)
    c = lambda v: ir.Constant(t, v)  # noqa: E731
    bias = (1 << (exp_bits - 1)) - 1
    drop = mant_bits - 10
    sign = b.trunc(b.lshr(bits, c(width - 16)), I16)
    sign = b.and_(sign, ir.Constant(I16, 0x8000))
    exp = b.and_(b.lshr(bits, c(mant_bits)), c((1 << exp_bits) - 1))
    mant = b.and_(bits, c((1 << mant_bits) - 1))
    e = b.sub(exp, c(bias - 15))  # the binary16 biased exponent, may be out of range

    def rne(value, shift):
        """value >> shift, rounded to nearest even (shift >= 1)."""
        h = b.lshr(value, shift)
        one = c(1)
        rem = b.and_(value, b.sub(b.shl(one, shift), one))
        halfway = b.shl(one, b.sub(shift, one))
        up = b.or_(b.icmp_unsigned(">", rem, halfway),
                   b.and_(b.icmp_unsigned("==", rem, halfway), b.icmp_unsigned("!=", b.and_(h, one), c(0))))
        return b.add(h, b.zext(up, t))

    # Normal results: exponent and mantissa, rounding may carry into the exponent (even to inf).
    normal = rne(b.or_(b.shl(e, c(mant_bits)), mant), c(drop))
    # Subnormal results (e <= 0): shift the mantissa with its implicit bit further right.
    implicit = b.or_(mant, c(1 << mant_bits))
    sub_shift = b.add(c(drop + 1), b.sub(c(0), e))
    sub_shift_safe = b.select(b.icmp_signed(">", sub_shift, c(width - 1)), c(width - 1), sub_shift)
    subnormal = rne(implicit, sub_shift_safe)
    is_nan_inf = b.icmp_unsigned("==", exp, c((1 << exp_bits) - 1))
    nan_inf = b.select(b.icmp_unsigned("!=", mant, c(0)), c(0x7E00), c(0x7C00))
    overflow = b.icmp_signed(">=", e, c(31))
    tiny = b.icmp_signed("<", e, c(-10))
    magnitude = b.select(b.icmp_signed("<=", e, c(0)), b.select(tiny, c(0), subnormal), normal)
    magnitude = b.select(overflow, c(0x7C00), magnitude)
    magnitude = b.select(is_nan_inf, nan_inf, magnitude)
    return b.or_(sign, b.trunc(magnitude, I16))


def _define(module, name, ret, arg):
    if name in module.globals:
        return None
    fn = ir.Function(module, ir.FunctionType(ret, [arg]), name)
    return fn, ir.IRBuilder(fn.append_basic_block("entry"))


def add_half_support(module: ir.Module):
    """Define the half-precision conversion routines LLVM may call."""
    for name, src, width, eb, mb in (("__truncdfhf2", DOUBLE, 64, 11, 52), ("__truncsfhf2", FLOAT, 32, 8, 23)):
        made = _define(module, name, HALF, src)
        if made:
            fn, b = made
            bits = b.bitcast(fn.args[0], ir.IntType(width))
            b.ret(b.bitcast(_round_to_half_bits(b, bits, width, eb, mb), HALF))
    made = _define(module, "__extendhfsf2", FLOAT, HALF)
    if made:
        fn, b = made
        h = b.zext(b.bitcast(fn.args[0], I16), I32)
        c = lambda v: ir.Constant(I32, v)  # noqa: E731
        sign = b.shl(b.and_(h, c(0x8000)), c(16))
        exp = b.and_(b.lshr(h, c(10)), c(0x1F))
        mant = b.and_(h, c(0x3FF))
        normal = b.or_(b.shl(b.add(exp, c(112)), c(23)), b.shl(mant, c(13)))
        inf_nan = b.or_(c(0x7F800000), b.shl(mant, c(13)))
        # Subnormal halves are exact floats: mant * 2^-24.
        sub = b.fmul(b.uitofp(mant, FLOAT), ir.Constant(FLOAT, 2.0 ** -24))
        sub_bits = b.bitcast(sub, I32)
        bits = b.select(b.icmp_unsigned("==", exp, c(0)), sub_bits,
                        b.select(b.icmp_unsigned("==", exp, c(0x1F)), inf_nan, normal))
        b.ret(b.bitcast(b.or_(bits, sign), FLOAT))


def bf16_value(b: ir.IRBuilder, bits):
    """The float32 value of bfloat16 ``bits`` (an i16): the bits are float32's upper half."""
    return b.bitcast(b.shl(b.zext(bits, I32), ir.Constant(I32, 16)), FLOAT)


def bf16_upper_half(b: ir.IRBuilder, value):
    """The bfloat16 bits (an i16) of a float32 ``value`` that holds a bfloat16 value exactly:
    its upper half. Every bfloat16 value in registers is exact (``round_bf16`` rounds what
    arithmetic and conversions make), so a store needs no rounding; and a moved element keeps
    its bits, a signalling NaN's payload too, where ``bf16_bits`` would make it quiet (a gather
    or ``where`` changed such elements before). A loaded element's bits come back unchanged,
    which lets LLVM move bfloat16 data as 16-bit integers."""
    return b.trunc(b.lshr(b.bitcast(value, I32), ir.Constant(I32, 16)), I16)


def bf16_bits(b: ir.IRBuilder, value):
    """float32 ``value`` rounded to bfloat16 bits (an i16): to nearest, ties to even (overflow
    gives infinity); a NaN stays a NaN, made quiet, with its sign (as ``ml_dtypes``)."""
    bits = b.bitcast(value, I32)
    upper = b.lshr(bits, ir.Constant(I32, 16))
    lsb = b.and_(upper, ir.Constant(I32, 1))
    rounded = b.lshr(b.add(bits, b.add(ir.Constant(I32, 0x7FFF), lsb)), ir.Constant(I32, 16))
    quiet_nan = b.or_(upper, ir.Constant(I32, 0x0040))
    return b.trunc(b.select(b.fcmp_unordered("uno", value, value), quiet_nan, rounded), I16)
