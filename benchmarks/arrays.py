"""Input arrays for the workloads: 64-byte aligned (TVM's zero-copy DLPack import requires it;
it costs the other implementations nothing), random float32 data and int64 indices."""
from __future__ import annotations

import numpy as np


def aligned_empty(shape, dtype, align: int = 64) -> np.ndarray:
    """An uninitialised C-contiguous array whose data starts on an ``align``-byte boundary
    (TVM's zero-copy DLPack import requires 64; it costs the others nothing)."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + align, np.uint8)
    offset = (-raw.ctypes.data) % align
    return raw[offset:offset + nbytes].view(dtype).reshape(shape)


def aligned(a: np.ndarray) -> np.ndarray:
    out = aligned_empty(a.shape, a.dtype)
    out[...] = a
    return out


def rand_f32(rng, shape) -> np.ndarray:
    out = aligned_empty(shape, np.float32)
    out[...] = rng.random(shape, dtype=np.float32)
    return out


def rand_idx(rng, high: int, shape) -> np.ndarray:
    out = aligned_empty(shape, np.int64)
    out[...] = rng.integers(0, high, size=shape, dtype=np.int64)
    return out
