"""What the CPU's call entry (``codegen/llvm_call.py``) needs of the running process: its
symbols resolved to this process's objects, and numpy's array layout confirmed where it reads it.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..codegen.llvm_call import (CONTIGUOUS_ALIGNED, DESCR, DIMENSIONS, FLAGS, INCREF, ND, NDARRAY,
                                 RESTORE_THREAD, SAVE_THREAD, TYPE, dtype_symbol)
from ..dtypes import DATA_DTYPES

#: The process's objects behind the entry's symbols; numpy's dtype objects live as long as numpy.
_OBJECTS = {NDARRAY: np.ndarray, **{dtype_symbol(d.name): d.np for d in DATA_DTYPES}}


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
