"""Random dimensions and values for the draws: data of every dtype (with the special floats),
index values in and out of range, and fill values.

Every function takes the draw's generator and consumes its random numbers in a fixed order, so
that draw ``k`` of a seed stays the same program and data.
"""
from __future__ import annotations

import numpy as np


def rand_dim(rng, maxd: int) -> int:
    u = rng.random()
    if u < 0.05:
        return 0
    if u < 0.30 or maxd <= 1:
        return min(1, maxd)
    return int(rng.integers(2, maxd + 1))


def at_most(rng, n: int) -> int:
    """A size no bigger than ``n``: usually ``n`` itself."""
    return n if rng.random() < 0.7 else int(rng.integers(0, n + 1))


def small_signed(rng, shape, dtype, lo, hi):
    info = np.iinfo(dtype)
    return rng.integers(max(lo, int(info.min)), min(hi, int(info.max)) + 1, size=shape).astype(dtype)


def data(rng, shape, dtype: str, kind: str) -> np.ndarray:
    return np.array(_data(rng, shape, dtype, kind), dtype=dtype).reshape(shape)


def _data(rng, shape, dtype: str, kind: str) -> np.ndarray:
    """Values of ``dtype``. kind: "any" (full integer range; floats with inf, -0.0 and NaN),
    "nonan" (as any, no NaN), "small" (sums exact in any float dtype), "factors" (powers of
    two: products exact)."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind == "c":
        if kind == "factors":  # units and powers of two: products exact in any order
            return rng.choice(np.array([1, -1, 1j, -1j, 2, 0.5j]), size=shape).astype(dt)
        part = "float32" if dt == np.complex64 else "float64"
        out = np.empty(shape, dt)
        out.real, out.imag = _data(rng, shape, part, kind), _data(rng, shape, part, kind)
        return out
    if dt.kind in "iu":
        if kind in ("small", "factors"):
            return small_signed(rng, shape, dt, -3, 3)
        info = np.iinfo(dt)
        if rng.random() < 0.5:
            return small_signed(rng, shape, dt, -20, 20)
        return rng.integers(int(info.min), int(info.max), size=shape, endpoint=True, dtype=dt)
    if kind == "small":
        return (rng.integers(-16, 17, size=shape) / 4).astype(dt)
    if kind == "factors":
        return rng.choice(np.array([-2.0, -1.0, -0.5, 0.5, 1.0, 2.0]), size=shape).astype(dt)
    with np.errstate(over="ignore"):
        values = np.asarray(rng.standard_normal(shape) * 10).astype(dt)
    specials = np.array([np.inf, -np.inf, -0.0, 0.0] + ([np.nan] if kind == "any" else []), dtype=dt)
    spots = rng.random(values.shape) < 0.08
    values[spots] = specials[rng.integers(len(specials), size=int(spots.sum()))]
    return values


def index_values(rng, shape, sizes, dtype: str, in_range: bool) -> np.ndarray:
    """Index values for ``shape``; ``sizes`` is an array broadcastable to ``shape`` holding the
    size of the axis each element addresses. Out of range (unless ``in_range``): ``size``,
    ``size+1``, ``-size-1``, far beyond on both sides, the dtype's extremes, anything. In an
    unsigned dtype, in-range values are never negative, and the negative candidates wrap
    around to huge values (uint64: past the int64 range)."""
    sizes = np.broadcast_to(np.asarray(sizes, dtype=np.int64), shape).astype(np.int64)
    info = np.iinfo(dtype)
    raw = rng.integers(-(2**62), 2**62, size=shape)
    if info.min == 0:
        inside = raw % np.maximum(sizes, 1)
    else:
        inside = raw % np.maximum(2 * sizes, 1) - sizes
    p_bad = 0.0 if in_range else float(rng.choice([0.1, 0.3, 1.0]))
    bad = (rng.random(shape) < p_bad) | (sizes == 0)
    # The extremes and the full range as int64 values whose bits are the dtype's (uint64's
    # maximum is -1): every candidate converts to ``dtype`` by wrapping around.
    lo, hi = (0, -1) if info.bits == 64 and info.min == 0 else (int(info.min), int(info.max))
    wide = np.iinfo(np.int64) if info.bits == 64 else info
    candidates = np.stack([sizes, sizes + 1, -sizes - 1, 3 * sizes + 2, -3 * sizes - 5,
                           np.full(shape, lo), np.full(shape, hi),
                           rng.integers(int(wide.min), int(wide.max), size=shape, endpoint=True)])
    pick = rng.integers(0, len(candidates), size=shape)
    out_of_range = np.take_along_axis(candidates, pick[None], axis=0)[0]
    return np.where(bad, out_of_range, inside).astype(dtype)


def tuple_sizes(x_shape, axes, layout, index_shape):
    """Per-element addressed sizes for an index whose tuple axis holds components ``axes``."""
    comp = np.array([x_shape[a] for a in axes], dtype=np.int64)
    if layout == "first":
        return comp.reshape((len(axes),) + (1,) * (len(index_shape) - 1))
    return comp


def fill_value_for(rng, dtype: str):
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return bool(rng.random() < 0.5)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        choices = [0, 1, 7, int(info.max), int(info.min)]
        return choices[int(rng.integers(len(choices)))]  # Python ints: uint64's maximum stays exact
    value = float(rng.choice([0.0, -2.5, 1.0e3, np.inf, np.nan]))
    return complex(value, float(rng.choice([0.0, 1.5, -np.inf]))) if dt.kind == "c" else value
