"""The operator of a draw in other libraries: PyTorch and ONNX's reference evaluator.

Each function returns the library's result for the draw's main step, or raises
``ExternalCannot`` where the library does not define the draw (no counterpart of the form or
mode, duplicate targets left undefined, empty tensors, a different rounding) or is not
installed. Out-of-range indices in ``clip`` and ``wrap`` mode are resolved first, since the
libraries have no such modes.
"""
from __future__ import annotations

import numpy as np

from fuzzing.evaluate import addressed_sizes
from fuzzing.spec import Step

ONNX_OPSET = 18


class ExternalCannot(Exception):
    """The external library does not define (or cannot evaluate) this draw."""


def _norm_axis(axis, r):
    return axis + r if axis < 0 else axis


def _resolved(step: Step, env, allow_negative: bool):
    """The main step's index with every out-of-range value resolved by the mode (clip, wrap),
    or ExternalCannot where the mode has no counterpart elsewhere (raise, fill). In-range
    negative values stay negative only if ``allow_negative``. Computed on Python integers, so
    that a uint64 value past the int64 range keeps its true value (no wrap to negative)."""
    raw = env[step.args[1]].astype(object)
    sizes = np.broadcast_to(addressed_sizes(step, env), raw.shape).astype(np.int64)
    inside = (raw >= -sizes) & (raw < sizes)
    mode = step.kwargs.get("mode", "raise")
    if mode == "clip":  # numpy's clip: negatives go to 0
        clipped = [min(max(int(v), 0), max(int(n) - 1, 0)) for v, n in zip(raw.ravel(), sizes.ravel())]
        return np.array(clipped, np.int64).reshape(raw.shape)
    if inside.all():
        return (raw if allow_negative else np.where(raw < 0, raw + sizes, raw)).astype(np.int64)
    if mode in ("raise", "fill"):
        raise ExternalCannot(f"{mode} with an out-of-range index")
    out = np.where(inside, raw, raw % np.maximum(sizes, 1))
    return (out if allow_negative else np.where(out < 0, out + sizes, out)).astype(np.int64)


def _onnx_index_dtype(idx):
    """ONNX indices are int32 or int64: the index's own dtype where it is one of them."""
    return idx.dtype if idx.dtype in (np.int32, np.int64) else np.int64


def _tuples_last(step, idx):
    return np.moveaxis(idx, 0, -1) if step.kwargs.get("index_layout", "last") == "first" else idx


def _scatter_targets(step: Step, env, idx):
    """The flat target of every update (element scatters) or every tuple (nd slice scatters)."""
    x = env[step.args[0]]
    if step.method == "scatter":
        axis = _norm_axis(step.kwargs.get("axis", 0), x.ndim)
        grid = list(np.indices(idx.shape, sparse=False))
        grid[axis] = idx
        return np.ravel_multi_index(tuple(grid), x.shape).reshape(-1)
    tl = _tuples_last(step, idx)
    m = tl.shape[-1]
    return np.ravel_multi_index(tuple(tl[..., k] for k in range(m)), x.shape[:m]).reshape(-1)


def _has_duplicates(targets) -> bool:
    return len(np.unique(targets)) != len(targets)


# -- PyTorch ----------------------------------------------------------------------------------------


def torch_value(step: Step, env):
    try:
        import torch
    except ImportError:
        raise ExternalCannot("torch is not installed") from None
    if any(a.size == 0 for a in (env[step.args[0]], env[step.args[1]])):
        raise ExternalCannot("empty tensors")
    by_method = {"take": _torch_take, "gather": _torch_gather, "scatter": _torch_scatter}
    try:
        if step.method in by_method:
            return by_method[step.method](torch, step, env)
    except RuntimeError as e:
        if "not implemented for" in str(e):
            raise ExternalCannot(f"torch: {str(e).splitlines()[0]}") from None
        raise
    raise ExternalCannot(f"torch has no counterpart of {step.method} in this form")


def _tensor(torch, a):
    a = np.asarray(a)
    if a.dtype.name == "bfloat16":  # torch takes no ml_dtypes arrays: through float32, exactly
        return torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(np.array(a, copy=True))


def _array(t, like):
    """A torch result as a numpy array of ``like``'s dtype (bfloat16 through float32, exactly)."""
    if like.dtype.name == "bfloat16":
        return t.float().numpy().astype(like.dtype)
    return t.numpy()


def _torch_take(torch, step: Step, env):
    x, idx, kw = env[step.args[0]], env[step.args[1]], step.kwargs
    b = kw.get("batch_dims", 0)
    if (b + idx.ndim if b < 0 else b) != 0:
        raise ExternalCannot("index_select has no batch_dims")
    axis = kw.get("axis", 0)
    xs = x.reshape(-1) if axis is None else x
    axis = 0 if axis is None else _norm_axis(axis, x.ndim)
    pos = _resolved(step, env, allow_negative=False)
    out = _tensor(torch, xs).index_select(axis, _tensor(torch, pos.reshape(-1)))
    return _array(out.reshape(xs.shape[:axis] + idx.shape + xs.shape[axis + 1:]), x)


def _torch_gather(torch, step: Step, env):
    x = env[step.args[0]]
    pos = _resolved(step, env, allow_negative=False)
    return _array(torch.gather(_tensor(torch, x), _norm_axis(step.kwargs.get("axis", 0), x.ndim), _tensor(torch, pos)), x)


def _torch_scatter(torch, step: Step, env):
    x, src, kw = env[step.args[0]], env[step.args[2]], step.kwargs
    pos = _resolved(step, env, allow_negative=False)
    axis = _norm_axis(kw.get("axis", 0), x.ndim)
    reduce = kw.get("reduce", "none")
    if reduce == "none":
        if _has_duplicates(_scatter_targets(step, env, pos)):
            raise ExternalCannot("torch.scatter is undefined for duplicate targets")
        return _array(_tensor(torch, x).scatter(axis, _tensor(torch, pos), _tensor(torch, src)), x)
    if reduce == "mean" and x.dtype.kind in "iu":
        raise ExternalCannot("torch sums an integer mean in the data dtype, wrapping; ours sums in int64")
    name = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin", "mean": "mean"}[reduce]
    return _array(_tensor(torch, x).scatter_reduce(axis, _tensor(torch, pos), _tensor(torch, src), reduce=name,
                                                   include_self=kw.get("include_self", True)), x)


# -- ONNX --------------------------------------------------------------------------------------------


def onnx_value(step: Step, env):
    try:
        from onnx import helper
        from onnx.reference import ReferenceEvaluator
    except ImportError:
        raise ExternalCannot("onnx is not installed") from None
    x = env[step.args[0]]
    op, feeds, attrs = _onnx_operator(step, env)
    names = list(feeds)
    node = helper.make_node(op, names, ["y"], **attrs)
    graph = helper.make_graph(
        [node], "fuzz",
        [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(feeds[n].dtype), feeds[n].shape) for n in names],
        [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(x.dtype), None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", ONNX_OPSET)])
    try:
        with np.errstate(all="ignore"):
            out = np.asarray(ReferenceEvaluator(model).run(None, feeds)[0])
    except Exception as e:  # noqa: BLE001 - the evaluator's own limits are not cinnlite's
        raise ExternalCannot(f"onnx.reference raised {type(e).__name__}") from None
    if out.dtype != x.dtype:
        raise ExternalCannot(f"onnx.reference gave {out.dtype} for {x.dtype}")
    return out


def _onnx_operator(step: Step, env):
    """(ONNX operator, its inputs by name, its attributes) for the main step."""
    x, idx = env[step.args[0]], env[step.args[1]]
    if x.size == 0 or idx.size == 0 or x.ndim == 0:
        raise ExternalCannot("empty or rank-0 tensors")
    if any(d == 0 for d in idx.shape):
        raise ExternalCannot("empty index")
    mode = step.kwargs.get("mode", "raise")
    pos = _resolved(step, env, allow_negative=mode in ("raise", "fill"))
    if step.method == "take":
        return _onnx_gather(step, x, idx, pos)
    if step.method == "gather":
        return _onnx_gather_elements(step, x, idx, pos)
    if step.method == "gather_nd":
        return _onnx_gather_nd(step, x, pos)
    if step.method in ("scatter", "scatter_nd"):
        return _onnx_scatter(step, env, x, idx, pos)
    raise ExternalCannot(f"ONNX has no counterpart of {step.method}")


def _onnx_gather(step, x, idx, pos):
    b = step.kwargs.get("batch_dims", 0)
    if (b + idx.ndim if b < 0 else b) != 0:
        raise ExternalCannot("ONNX Gather has no batch_dims")
    axis = step.kwargs.get("axis", 0)
    if axis is None:
        x, axis = x.reshape(-1), 0
    return "Gather", {"x": x, "i": pos.astype(_onnx_index_dtype(idx))}, dict(axis=axis)


def _onnx_gather_elements(step, x, idx, pos):
    axis = _norm_axis(step.kwargs.get("axis", 0), x.ndim)
    if any(idx.shape[j] != x.shape[j] for j in range(x.ndim) if j != axis):
        raise ExternalCannot("the ONNX reference's GatherElements needs equal cross-sections")
    return "GatherElements", {"x": x, "i": pos.astype(_onnx_index_dtype(idx))}, dict(axis=axis)


def _onnx_gather_nd(step, x, pos):
    if step.kwargs.get("dims") is not None:
        raise ExternalCannot("ONNX GatherND has no element form")
    tl = _tuples_last(step, pos)
    if tl.shape[-1] == 0:
        raise ExternalCannot("empty index tuples")
    feeds = {"x": x, "i": np.ascontiguousarray(tl).astype(np.int64)}
    return "GatherND", feeds, dict(batch_dims=step.kwargs.get("batch_dims", 0))


def _onnx_scatter(step, env, x, idx, pos):
    kw = step.kwargs
    reduce = kw.get("reduce", "none")
    if reduce in ("mean", "sub") or not kw.get("include_self", True):
        raise ExternalCannot("ONNX has no mean or difference, and always includes x")
    if x.dtype == np.bool_ and reduce != "none":
        raise ExternalCannot("ONNX defines no reduction on bool")
    if step.method == "scatter_nd" and kw.get("dims") is not None:
        raise ExternalCannot("ONNX ScatterND has no element form")
    if reduce == "none" and _has_duplicates(_scatter_targets(step, env, _resolved(step, env, False))):
        raise ExternalCannot("ONNX leaves duplicate targets undefined for reduction none")
    src = env[step.args[2]]
    if step.method == "scatter":
        axis = _norm_axis(kw.get("axis", 0), x.ndim)
        updates = np.ascontiguousarray(src[tuple(slice(0, n) for n in idx.shape)])
        return "ScatterElements", {"x": x, "i": pos.astype(_onnx_index_dtype(idx)), "u": updates}, dict(axis=axis, reduction=reduce)
    tl = _tuples_last(step, pos)
    if tl.shape[-1] == 0:
        raise ExternalCannot("empty index tuples")
    feeds = {"x": x, "i": np.ascontiguousarray(tl).astype(np.int64), "u": src}
    return "ScatterND", feeds, dict(reduction=reduce)
