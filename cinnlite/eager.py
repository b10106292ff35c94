"""Eager functions: ``cl.take(a, indices)`` and friends on arrays, without building a graph.

Each function builds a one-operator program over symbolic sizes (every input dimension a symbol
of its own, so one compiled program serves every shape), compiles it once per *structure* (the
operator, its attributes, the dtypes and ranks of the operands, the target) and keeps it in a
per-process table, so a repeated call costs a dictionary lookup on top of the executable's own
call. Arguments are numpy arrays, anything ``np.asarray`` takes, or any CPU array with
``__dlpack__`` (a PyTorch tensor), taken without a copy; the result is of the caller's kind
(a PyTorch tensor in, a PyTorch tensor out, through DLPack, without a copy). ``out=`` writes the
result into a preallocated array of the right shape and dtype and returns it.
"""
from __future__ import annotations

import threading
from typing import Any, Sequence

import numpy as np

from .runtime.executable import host_array
from .api_types import IndexLayout, IndexMode, NdReduction, Reduction, Scalar, Target

#: An array: numpy's, anything np.asarray takes, or a CPU array with __dlpack__ (a PyTorch tensor).
ArrayLike = Any

_PROGRAMS: dict = {}
_LOCK = threading.Lock()


def _as_array(value):
    """``value`` as a numpy array without a copy, and a function that gives a result back in
    the caller's kind."""
    arr = host_array(value, "an operand")
    return arr, (None if arr is value or not hasattr(value, "__dlpack__") else _returner(value))


def _returner(like):
    """How a result returns to the kind of ``like``: a PyTorch tensor through DLPack."""
    module = type(like).__module__.split(".")[0]
    if module == "torch":
        import torch
        return torch.from_dlpack
    return None


def _symbolic_shape(role: str, ndim: int) -> tuple:
    return tuple(f"{role}{k}" for k in range(ndim))


def _executable(key: tuple, build, target: Target, deterministic: bool = False):
    """The executable of one structure: from the table, or built and compiled once."""
    exe = _PROGRAMS.get(key)
    if exe is None:
        from .compiler import compile
        exe = compile(build(), target=target, deterministic=deterministic)
        with _LOCK:
            exe = _PROGRAMS.setdefault(key, exe)
    return exe


def _lookup(key: tuple, *values):
    """The compiled executable of a call whose operands are all numpy arrays, or None: the
    repeated call's whole cost on top of the executable's own."""
    for v in values:
        if type(v) is not np.ndarray:
            return None
        key += (v.dtype, v.ndim)
    return _PROGRAMS.get(key)


def _run(key, build, target, operands: dict, out, deterministic=False):
    """Compile (once) and run; the result in the kind of the first array-like operand."""
    arrays, back = {}, None
    for name, value in operands.items():
        arrays[name], kind = _as_array(value)
        back = back or kind
    exe = _executable(key + tuple(x for a in arrays.values() for x in (a.dtype, a.ndim)),
                      lambda: build({n: a for n, a in arrays.items()}), target, deterministic)
    result = exe(**arrays) if out is None else exe(**arrays, out=_as_array(out)[0])
    if out is not None:
        return out
    return back(result) if back is not None else result


def _inputs(b, arrays: dict) -> dict:
    return {name: b.create_input(a.dtype, _symbolic_shape(name, a.ndim), name) for name, a in arrays.items()}


def _builder(name: str, make):
    """A program builder for ``_run``: ``make(b, tensors)`` adds the operator."""
    def build(arrays):
        from .frontend.netbuilder import NetBuilder
        b = NetBuilder(name)
        return b.build([make(b, _inputs(b, arrays))])
    return build


def take(a: ArrayLike, indices: ArrayLike, axis: int | None = None, out: Any = None, mode: IndexMode = "raise", *, fill_value: Scalar = 0,
         batch_dims: int = 0, target: Target = "cpu") -> Any:
    """``np.take``: slices of ``a`` along ``axis`` (``None``, the default, flattens ``a``)."""
    key = ("take", axis, mode, fill_value, batch_dims, target)
    if out is None:
        exe = _lookup(key, a, indices)
        if exe is not None:
            return exe(a=a, indices=indices)
    return _run(key, _builder("take", lambda b, t: b.take(t["a"], t["indices"], axis=axis, batch_dims=batch_dims,
                                                          mode=mode, fill_value=fill_value)),
                target, {"a": a, "indices": indices}, out)


def gather(x: ArrayLike, index: ArrayLike, axis: int = 0, mode: IndexMode = "raise", fill_value: Scalar = 0, out: Any = None, *,
           dim: int | None = None, target: Target = "cpu") -> Any:
    """``torch.gather`` / ONNX GatherElements: ``out[i] = x[i with i[axis] = index[i]]``."""
    axis = axis if dim is None else dim
    key = ("gather", axis, mode, fill_value, target)
    if out is None:
        exe = _lookup(key, x, index)
        if exe is not None:
            return exe(x=x, index=index)
    return _run(key, _builder("gather", lambda b, t: b.gather(t["x"], t["index"], axis=axis, mode=mode,
                                                              fill_value=fill_value)),
                target, {"x": x, "index": index}, out)


def gather_nd(x: ArrayLike, index: ArrayLike, batch_dims: int = 0, dims: Sequence[int] | None = None, index_layout: IndexLayout = "last",
              mode: IndexMode = "raise", fill_value: Scalar = 0, out: Any = None, *, target: Target = "cpu") -> Any:
    """ONNX GatherND (``dims=None``) or its element form. The index tuple length is part of the
    structure: it is the one dimension kept a number."""
    dims_key = None if dims is None else tuple(dims)
    idx = _as_array(index)[0]
    m = idx.shape[0 if index_layout == "first" else -1] if idx.ndim else 0
    key = ("gather_nd", batch_dims, dims_key, index_layout, mode, fill_value, m, target)

    def make(b, t):
        return b.gather_nd(t["x"], t["index"], batch_dims=batch_dims, dims=dims, index_layout=index_layout,
                           mode=mode, fill_value=fill_value)
    return _run(key, _tuple_builder("gather_nd", make, index_layout), target, {"x": x, "index": index}, out)


def _tuple_builder(name, make, layout):
    """A builder whose index keeps its tuple axis a number (the ``_nd`` operators need it)."""
    def build(arrays):
        from .frontend.netbuilder import NetBuilder
        b = NetBuilder(name)
        t = {}
        for role, a in arrays.items():
            shape = list(_symbolic_shape(role, a.ndim))
            if role == "index" and a.ndim:
                axis = 0 if layout == "first" else a.ndim - 1
                shape[axis] = a.shape[axis]
            t[role] = b.create_input(a.dtype, tuple(shape), role)
        return b.build([make(b, t)])
    return build


def scatter(x: ArrayLike, index: ArrayLike, src: ArrayLike, axis: int = 0, reduce: Reduction = "none", mode: IndexMode = "raise", out: Any = None, *,
            include_self: bool = True, dim: int | None = None, deterministic: bool = False,
            target: Target = "cpu") -> Any:
    """A copy of ``x`` with ``src`` combined in along ``axis`` at ``index`` (``torch.scatter``,
    ``scatter_reduce``; ONNX ScatterElements)."""
    axis = axis if dim is None else dim
    key = ("scatter", axis, reduce, mode, include_self, deterministic, target)
    if out is None:
        exe = _lookup(key, x, index, src)
        if exe is not None:
            return exe(x=x, index=index, src=src)
    return _run(key, _builder("scatter", lambda b, t: b.scatter(t["x"], t["index"], t["src"], axis=axis, reduce=reduce,
                                                                mode=mode, include_self=include_self)),
                target, {"x": x, "index": index, "src": src}, out, deterministic)


def scatter_nd(x: ArrayLike, index: ArrayLike, src: ArrayLike, dims: Sequence[int] | None = None, reduce: NdReduction = "none", index_layout: IndexLayout = "last",
               mode: IndexMode = "raise", out: Any = None, *, include_self: bool = True, deterministic: bool = False,
               target: Target = "cpu") -> Any:
    """A copy of ``x`` with ``src`` combined in at index tuples (ONNX ScatterND, TensorFlow's
    ``tensor_scatter_nd_*``)."""
    idx = _as_array(index)[0]
    m = idx.shape[0 if index_layout == "first" else -1] if idx.ndim else 0
    key = ("scatter_nd", None if dims is None else tuple(dims), reduce, index_layout, mode, include_self, m,
           deterministic, target)

    def make(b, t):
        return b.scatter_nd(t["x"], t["index"], t["src"], dims=dims, reduce=reduce, index_layout=index_layout,
                            mode=mode, include_self=include_self)
    return _run(key, _tuple_builder("scatter_nd", make, index_layout), target, {"x": x, "index": index, "src": src},
                out, deterministic)


def scatter_add(x: ArrayLike, updates: ArrayLike, index: ArrayLike, axis: int = 0, out: Any = None, *, target: Target = "cpu") -> Any:
    """CINN's ``scatter_add`` (PyTorch's ``index_add``): slice ``j`` of ``updates`` added to slice
    ``index[j]`` of a copy of ``x`` along ``axis``."""
    key = ("scatter_add", axis, target)
    return _run(key, _builder("scatter_add", lambda b, t: b.scatter_add(t["x"], t["updates"], t["index"], axis=axis)),
                target, {"x": x, "updates": updates, "index": index}, out)
