"""Pure-numpy reference implementations of the indexing operators, as SEMANTICS.md defines them.

Written for clarity, not speed: gathers visit every output position, scatters visit every
update in row-major order of the index positions, one scalar at a time, so the order of
combination is exactly the one the contract fixes. Nothing here imports cinnlite.

Conventions shared by every function:

- Index values in ``[0, s-1]`` address that position; values in ``[-s, -1]`` address
  ``value + s`` in every mode. Any other value is out of range and ``mode`` decides:
  ``"raise"`` raises ``IndexError`` (before anything is computed), ``"clip"`` clamps
  (``< -s`` -> 0, ``> s-1`` -> s-1), ``"wrap"`` takes ``value mod s`` (Python modulo),
  ``"fill"`` gives ``fill_value`` (gathers) or drops the update (scatters).
- Scatter reductions are computed in the data dtype (bfloat16 ``add`` and ``mul`` in float32,
  rounded once at the end), one update at a time: integer ``add`` and
  ``mul`` wrap around like numpy arrays do; float ``max``/``min`` propagate NaN like
  ``np.maximum``/``np.minimum``; complex ``mul`` is :func:`complex_parts_op`'s; ``mean`` is ``(x + sum of updates) / (1 + count)`` on the
  elements some update touched: the sum accumulates in a wide type (float32 for float16 and
  bfloat16 data,
  float64 for float32 and float64, int64 wrapping around for integers, uint64 for uint64,
  complex128 for complex), then is divided by the exact count, rounded once to the data dtype
  (the floor for integers; numpy's complex division for complex).
"""
from __future__ import annotations

import numpy as np

MODES = ("raise", "clip", "wrap", "fill")
REDUCTIONS = ("none", "add", "mul", "max", "min", "mean")
#: The type a mean's sum accumulates in: every other integer dtype sums in int64.
MEAN_SUM_DTYPES = {"float16": np.float32, "bfloat16": np.float32, "float32": np.float64, "float64": np.float64,
                   "uint64": np.uint64, "complex64": np.complex128, "complex128": np.complex128}


#: The type add and mul combine in where it is not the data dtype: bfloat16 accumulates in
#: float32 and is rounded once at the end (as PyTorch's scatter_reduce on the CPU).
ACCUMULATE_DTYPES = {"bfloat16": np.float32}


def complex_parts_op(op, a, b):
    """``a op b`` for complex numbers of one dtype, on their parts, each operation rounded to
    the parts' float type: multiply ``(ar*br - ai*bi, ar*bi + ai*br)`` (no fused multiply-add,
    which numpy's own complex64 loops use on CPUs that have it), divide as numpy divides
    (Smith's method)."""
    a, b = np.asarray(a)[()], np.asarray(b)[()]
    part = np.float32 if a.dtype == np.complex64 else np.float64
    ar, ai, br, bi = part(a.real), part(a.imag), part(b.real), part(b.imag)
    with np.errstate(all="ignore"):
        if op == "add":
            re, im = ar + br, ai + bi
        elif op == "sub":
            re, im = ar - br, ai - bi
        elif op == "mul":
            re, im = ar * br - ai * bi, ar * bi + ai * br
        elif abs(br) >= abs(bi):
            if br == 0 and bi == 0:
                re, im = ar / abs(br), ai / abs(br)
            else:
                rat = bi / br
                scl = part(1) / (br + bi * rat)
                re, im = (ar + ai * rat) * scl, (ai - ar * rat) * scl
        else:
            rat = br / bi
            scl = part(1) / (bi + br * rat)
            re, im = (ar * rat + ai) * scl, (ai * rat - ar) * scl
    return a.dtype.type(complex(float(re), float(im)))


def complex_elementwise(op, a, b):
    """:func:`complex_parts_op` over broadcast arrays."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    out = np.empty(a.shape, a.dtype)
    for p in np.ndindex(a.shape):
        out[p] = complex_parts_op(op, a[p], b[p])
    return out


def is_float(dtype) -> bool:
    """A floating-point dtype: numpy's (kind "f") or ml_dtypes' bfloat16 (kind "V")."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype.name == "bfloat16"
INDEX_LAYOUTS = ("last", "first")


# -- attributes ---------------------------------------------------------------------------------


def normalize_axis(axis: int, rank: int) -> int:
    """An axis in ``[-rank, rank-1]`` as a non-negative axis."""
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _check_mode(mode):
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")


def _check_reduce(reduce, dtype):
    if reduce not in REDUCTIONS + ("sub",):
        raise ValueError(f"unknown reduce {reduce!r}")
    if dtype == np.bool_ and reduce in ("mean", "sub"):
        raise TypeError(f"reduce={reduce!r} is not defined on bool data")
    if dtype.kind == "c" and reduce in ("max", "min"):
        raise TypeError(f"reduce={reduce!r} is not defined on complex data")


def _tuples_last(index, index_layout):
    """The index with the tuple axis last, whatever the layout."""
    if index_layout not in INDEX_LAYOUTS:
        raise ValueError(f"unknown index_layout {index_layout!r}")
    index = np.asarray(index)
    return np.moveaxis(index, 0, -1) if index_layout == "first" else index


# -- one index value ----------------------------------------------------------------------------


def resolve(value: int, size: int, mode: str):
    """The position an index value addresses on an axis of ``size``, or None where
    ``mode="fill"`` fills (or drops). ``mode="raise"`` raises IndexError when out of range."""
    value = int(value)
    if mode == "clip" and size > 0:
        return min(max(value, 0), size - 1)  # numpy's clip: negative values clip to 0
    if -size <= value < size:
        return value + size if value < 0 else value
    if mode == "raise":
        raise IndexError(f"index {value} is out of range for an axis of size {size}")
    if mode == "fill":
        return None
    if size == 0:
        raise ValueError(f"mode {mode!r} cannot map an index onto an empty axis")
    if mode == "clip":
        return 0 if value < 0 else size - 1
    if mode == "wrap":
        return value % size  # Python modulo: always in [0, size-1]
    raise ValueError(f"unknown mode {mode!r}")


def resolve_all(index, sizes, mode: str):
    """Resolve every value of ``index`` (tuple axis last, one size per tuple component, or a
    single size for plain indices) up front, so that ``mode="raise"`` raises before any
    output is produced. Returns an object array of positions (None = fill/drop)."""
    index = np.asarray(index)
    out = np.empty(index.shape, dtype=object)
    for pos in np.ndindex(index.shape):
        size = sizes if isinstance(sizes, int) else sizes[pos[-1]]
        out[pos] = resolve(index[pos], size, mode)
    return out


# -- gathers ------------------------------------------------------------------------------------


def take(x, indices, axis=0, batch_dims=0, mode="raise", fill_value=0):
    """Gather slices of ``x`` along ``axis`` (``axis=None`` flattens ``x`` first)."""
    _check_mode(mode)
    x = np.asarray(x)
    indices = np.asarray(indices)
    if axis is None:
        x = x.reshape(-1)
        axis = 0
    r, q = x.ndim, indices.ndim
    axis = normalize_axis(axis, r)
    b = batch_dims + q if batch_dims < 0 else batch_dims
    if not (0 <= b <= q and b <= axis and x.shape[:b] == indices.shape[:b]):
        raise ValueError("invalid batch_dims")
    pos = resolve_all(indices, x.shape[axis], mode)
    out_shape = x.shape[:axis] + indices.shape[b:] + x.shape[axis + 1:]
    out = np.full(out_shape, fill_value, dtype=x.dtype)
    n_idx = q - b  # output axes that come from the index
    for o in np.ndindex(out_shape):
        p = pos[o[:b] + o[axis:axis + n_idx]]
        if p is not None:
            out[o] = x[o[:axis] + (p,) + o[axis + n_idx:]]
    return out


def gather(x, index, axis=0, mode="raise", fill_value=0):
    """``out[i] = x[i with i[axis] = index[i]]``; the output has the index's shape."""
    _check_mode(mode)
    x, index = np.asarray(x), np.asarray(index)
    axis = normalize_axis(axis, x.ndim)
    if index.ndim != x.ndim:
        raise ValueError("rank(index) != rank(x)")
    pos = resolve_all(index, x.shape[axis], mode)
    out = np.full(index.shape, fill_value, dtype=x.dtype)
    for i in np.ndindex(index.shape):
        if pos[i] is not None:
            src = list(i)
            src[axis] = pos[i]
            out[i] = x[tuple(src)]
    return out


def gather_nd(x, index, batch_dims=0, dims=None, index_layout="last", mode="raise", fill_value=0):
    """Gather by index tuples: the slice form (``dims=None``) or the element form."""
    _check_mode(mode)
    x = np.asarray(x)
    index = _tuples_last(index, index_layout)
    if index.ndim < 1:
        raise ValueError("index needs a tuple axis")
    m = index.shape[-1]
    lead = index.shape[:-1]
    if dims is None:
        b = batch_dims
        if not (0 <= b < min(x.ndim, index.ndim) and x.shape[:b] == index.shape[:b] and m <= x.ndim - b):
            raise ValueError("invalid gather_nd shapes")
        pos = resolve_all(index, x.shape[b:b + m], mode)
        out_shape = lead + x.shape[b + m:]
        out = np.full(out_shape, fill_value, dtype=x.dtype)
        for o in np.ndindex(out_shape):
            tup = list(pos[o[:len(lead)]])
            if any(p is None for p in tup):
                continue
            out[o] = x[o[:b] + tuple(tup) + o[len(lead):]]
        return out
    if batch_dims != 0:
        raise ValueError("batch_dims applies to the slice form only")
    dims = [normalize_axis(d, x.ndim) for d in dims]
    if len(dims) != m or len(set(dims)) != m or len(lead) != x.ndim:
        raise ValueError("invalid gather_nd dims")
    pos = resolve_all(index, [x.shape[d] for d in dims], mode)
    out = np.full(lead, fill_value, dtype=x.dtype)
    for o in np.ndindex(lead):
        src = list(o)
        tup = pos[o]
        if any(p is None for p in tup):
            continue
        for k, d in enumerate(dims):
            src[d] = tup[k]
        out[o] = x[tuple(src)]
    return out


# -- scatters -----------------------------------------------------------------------------------


class _Accumulator:
    """``out`` starts as a copy of ``x`` (for ``mean``, converted to the wide sum type);
    ``update`` combines one value into one element."""

    def __init__(self, x, reduce, include_self=True):
        _check_reduce(reduce, x.dtype)
        self.reduce = reduce
        self.include_self = include_self
        self.original = np.array(x, copy=True)
        if reduce == "mean":
            wide = MEAN_SUM_DTYPES.get(x.dtype.name, np.int64)
        elif reduce in ("add", "mul"):
            wide = ACCUMULATE_DTYPES.get(x.dtype.name, x.dtype)
        else:
            wide = x.dtype
        self.out = self.original.astype(wide)  # always a copy
        self.count = np.zeros(x.shape, dtype=np.int64)

    def update(self, target, value):
        old = self.out[target]
        if self.out.dtype != self.original.dtype:
            value = self.out.dtype.type(value)
        with np.errstate(all="ignore"):
            if self.reduce == "none" or (not self.include_self and self.count[target] == 0):
                new = value  # (without x, the first update starts the combination)
            elif self.reduce == "sub":
                new = old - value
            elif self.reduce in ("add", "mean"):
                new = old + value
            elif self.reduce == "mul":
                new = complex_parts_op("mul", old, value) if self.out.dtype.kind == "c" else old * value
            elif self.reduce == "max":
                new = np.maximum(old, value)
            else:
                new = np.minimum(old, value)
        self.out[target] = new
        self.count[target] += 1

    def result(self):
        if self.reduce != "mean":
            return self.out.astype(self.original.dtype)  # rounded once, where it accumulated wider
        dtype, sums, out = self.original.dtype, self.out, self.original  # untouched: x
        for t in np.ndindex(self.count.shape):
            if self.count[t] == 0:
                continue
            n = int(self.count[t]) + int(self.include_self)  # the original value (if counted) and every update
            total = sums[t]
            if dtype.kind == "c":
                # numpy's complex division of the complex128 sum by the count (count + 0j).
                out[t] = np.array(complex_parts_op("div", np.complex128(total), np.complex128(n))).astype(dtype)
            elif is_float(dtype):
                # The quotient of the wide sum, rounded to float64 and then to the data dtype.
                with np.errstate(all="ignore"):
                    out[t] = np.array(np.float64(total) / np.float64(n)).astype(dtype)
            else:
                out[t] = np.array(int(total) // n).astype(dtype)  # the floor, as PyTorch
        return out


def scatter(x, index, src, axis=0, reduce="none", mode="raise", include_self=True):
    """A copy of ``x``; for every index position ``p`` in row-major order, the element
    ``p`` with ``p[axis] = index[p]`` is combined with ``src[p]``."""
    _check_mode(mode)
    x, index, src = np.asarray(x), np.asarray(index), np.asarray(src)
    axis = normalize_axis(axis, x.ndim)
    if not index.ndim == src.ndim == x.ndim:
        raise ValueError("ranks differ")
    pos = resolve_all(index, x.shape[axis], mode)
    acc = _Accumulator(x, reduce, include_self)
    for p in np.ndindex(index.shape):
        if pos[p] is None:
            continue
        target = list(p)
        target[axis] = pos[p]
        acc.update(tuple(target), src[p])
    return acc.result()


def scatter_nd(x, index, src, dims=None, reduce="none", index_layout="last", mode="raise", include_self=True):
    """A copy of ``x`` with ``src`` combined in at index tuples (slice or element form)."""
    _check_mode(mode)
    x, src = np.asarray(x), np.asarray(src)
    index = _tuples_last(index, index_layout)
    if index.ndim < 1:
        raise ValueError("index needs a tuple axis")
    m = index.shape[-1]
    lead = index.shape[:-1]
    acc = _Accumulator(x, reduce, include_self)
    if dims is None:
        if m > x.ndim or src.shape != lead + x.shape[m:]:
            raise ValueError("invalid scatter_nd shapes")
        pos = resolve_all(index, x.shape[:m], mode)
        for i in np.ndindex(lead):
            tup = tuple(pos[i])
            if any(p is None for p in tup):
                continue
            for rho in np.ndindex(x.shape[m:]):
                acc.update(tup + rho, src[i + rho])
        return acc.result()
    dims = [normalize_axis(d, x.ndim) for d in dims]
    if len(dims) != m or len(set(dims)) != m or src.ndim != x.ndim or lead != src.shape:
        raise ValueError("invalid scatter_nd dims")
    pos = resolve_all(index, [x.shape[d] for d in dims], mode)
    for p in np.ndindex(src.shape):
        tup = pos[p]
        if any(v is None for v in tup):
            continue
        target = list(p)
        for k, d in enumerate(dims):
            target[d] = tup[k]
        acc.update(tuple(target), src[p])
    return acc.result()
