"""``gather``: elements of ``x`` along one axis (ONNX GatherElements, ``torch.gather``).

``out[i] = x[i with i[axis] = index[i]]``, an output of ``index``'s shape; see SEMANTICS.md.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import ValidationError
from .common import check_index_dtype, check_mode, check_nonempty_axis, check_scalar, normalize_axis
from .definition import OpDef


@dataclass(frozen=True)
class GatherAttrs:
    axis: int = 0
    mode: str = "raise"
    fill_value: bool | int | float = 0


def infer_gather(inputs, axis, mode, fill_value):
    x, idx = inputs
    op = "gather"
    check_index_dtype(op, idx, idx.name)
    check_mode(op, mode)
    r = x.ndim
    axis = normalize_axis(op, axis, r)
    if idx.ndim != r:
        raise ValidationError(op, "rank(index) == rank(x)", f"index has rank {idx.ndim}, x has rank {r}", input=idx.name)
    for j in range(r):
        if j != axis and idx.shape[j] > x.shape[j]:
            raise ValidationError(op, "index.shape[j] <= x.shape[j] for j != axis",
                                  f"index.shape[{j}]={idx.shape[j]} > x.shape[{j}]={x.shape[j]}", input=idx.name)
    fill_value = check_scalar(op, "fill_value", fill_value, x.dtype)
    check_nonempty_axis(op, mode, x.shape[axis], idx)
    return GatherAttrs(axis, mode, fill_value), tuple(idx.shape), x.dtype


GATHER = OpDef("gather", operands=("x", "index"), attrs=GatherAttrs, infer=infer_gather)
