"""Data types: ``Float(32)``, ``BFloat16()``, ``Complex(64)``, ``Int(64)``, ``UInt(8)``, ``Bool()`` and
conversions.

A :class:`DType` is a frozen value; ``as_dtype`` accepts a DType, a string such as
``"float32"`` or anything numpy understands as a dtype. bfloat16 arrays are numpy arrays of
``ml_dtypes.bfloat16``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Union

import ml_dtypes
import numpy as np
import numpy.typing as npt

from .errors import DTypeError


@dataclass(frozen=True)
class DType:
    kind: str  # "float" | "bfloat" | "complex" | "int" | "uint" | "bool"
    bits: int

    @property
    def name(self) -> str:
        return "bool" if self.kind == "bool" else f"{self.kind}{self.bits}"

    @property
    def np(self) -> np.dtype:
        return _NP_DTYPES.get(self.name) or np.dtype(self.name)

    @property
    def itemsize(self) -> int:
        return 1 if self.kind == "bool" else self.bits // 8

    @property
    def is_float(self) -> bool:
        """A binary floating-point type: float16/32/64 and bfloat16."""
        return self.kind in ("float", "bfloat")

    @property
    def is_bfloat16(self) -> bool:
        return self.kind == "bfloat"

    @property
    def is_complex(self) -> bool:
        return self.kind == "complex"

    @property
    def part(self) -> "DType":
        """The dtype of a complex value's real and imaginary parts (float32 for complex64)."""
        if not self.is_complex:
            raise ValueError(f"{self} is not complex")
        return DType("float", self.bits // 2)

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_signed(self) -> bool:
        return self.kind == "int"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    def __repr__(self) -> str:
        return self.name

    __str__ = __repr__


def Float(bits: int = 32) -> DType:
    if bits not in (16, 32, 64):
        raise DTypeError("Float", "supported dtypes", f"Float({bits}) is not supported; use 16, 32 or 64")
    return DType("float", bits)


def BFloat16() -> DType:
    """bfloat16: float32's sign and exponent with 7 mantissa bits (``ml_dtypes.bfloat16``)."""
    return DType("bfloat", 16)


def Complex(bits: int = 64) -> DType:
    """complex64 (float32 parts) or complex128 (float64 parts), as numpy's."""
    if bits not in (64, 128):
        raise DTypeError("Complex", "supported dtypes", f"Complex({bits}) is not supported; use 64 or 128")
    return DType("complex", bits)


def Int(bits: int = 32) -> DType:
    if bits not in (8, 16, 32, 64):
        raise DTypeError("Int", "supported dtypes", f"Int({bits}) is not supported; use 8, 16, 32 or 64")
    return DType("int", bits)


def UInt(bits: int = 8) -> DType:
    if bits not in (8, 16, 32, 64):
        raise DTypeError("UInt", "supported dtypes", f"UInt({bits}) is not supported; use 8, 16, 32 or 64")
    return DType("uint", bits)


def Bool() -> DType:
    return DType("bool", 8)


float16, float32, float64 = Float(16), Float(32), Float(64)
bfloat16 = BFloat16()
complex64, complex128 = Complex(64), Complex(128)
int8, int16, int32, int64 = Int(8), Int(16), Int(32), Int(64)
uint8, uint16, uint32, uint64 = UInt(8), UInt(16), UInt(32), UInt(64)
bool_ = Bool()

DATA_DTYPES = (bool_, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, bfloat16, float32, float64,
               complex64, complex128)
#: Index tensors may have every integer dtype (SEMANTICS.md, "Index values").
INDEX_DTYPES = (int8, int16, int32, int64, uint8, uint16, uint32, uint64)
#: Every dtype a tensor may have: the data dtypes and the index dtypes.
ALL_DTYPES = DATA_DTYPES + tuple(d for d in INDEX_DTYPES if d not in DATA_DTYPES)
_BY_NAME = {d.name: d for d in ALL_DTYPES}
#: numpy dtypes numpy itself has no name for.
_NP_DTYPES = {"bfloat16": np.dtype(ml_dtypes.bfloat16)}


def converted(value, dtype: DType) -> np.ndarray:
    """``value`` (an array or a scalar) converted to ``dtype`` as a cast converts it
    (SEMANTICS.md): numpy's conversion, except that one to bfloat16 from anything but float32
    goes through float32, each step rounding to nearest even, as PyTorch converts. Why:
    ml_dtypes before 0.7 did so too, and from 0.7 on rounds a float64 or an integer to
    bfloat16 once (``2**24 + 2**16 + 1`` gives ``2**24 + 2**17`` there, ``2**24`` here)."""
    arr = np.asarray(value)
    if dtype.is_bfloat16 and arr.dtype not in (np.dtype(np.float32), dtype.np):
        arr = arr.astype(np.float32)
    return arr.astype(dtype.np)


def float_max(dtype: DType) -> float:
    """The largest finite value of a float dtype."""
    return float(ml_dtypes.finfo(dtype.np).max)


#: What every ``dtype`` argument accepts: a :class:`DType` (``Float(32)``), a name (``"float32"``)
#: or anything ``numpy.dtype`` accepts (``np.float32``).
DTypeLike = Union[DType, npt.DTypeLike]


def as_dtype(value: DTypeLike, op: str = "dtype") -> DType:
    """Turn a DType, a dtype name or a numpy dtype into a supported :class:`DType`."""
    if isinstance(value, DType):
        if value in ALL_DTYPES:
            return value
        raise DTypeError(op, "supported dtypes", f"dtype {value} is not supported")
    try:
        name = np.dtype(value).name
    except TypeError:
        raise DTypeError(op, "supported dtypes", f"{value!r} is not a dtype") from None
    if name not in _BY_NAME:
        supported = ", ".join(_BY_NAME)
        raise DTypeError(op, "supported dtypes", f"dtype {name} is not supported (supported: {supported})")
    return _BY_NAME[name]
