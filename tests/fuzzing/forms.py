"""The shapes and attributes of each operator form a draw can take.

One function per form (take, gather, gather_nd, gather_nd with ``dims``, scatter, scatter_nd,
scatter_nd with ``dims``) draws the rank, the shapes of ``x``, the index and ``src``, and the
attributes (axis, batch_dims, dims, index layout, reduction), and says which sizes the index
values address and how big the output is. The draws module then fills the shapes with values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fuzzing.values import at_most, rand_dim, tuple_sizes


@dataclass
class Form:
    x_shape: tuple
    idx_shape: tuple
    src_shape: tuple | None      # None for the gathers
    index_sizes: object          # broadcastable to idx_shape: the size each index value addresses
    out_size: int


class Dimensions:
    """Ranks and dimensions for one attempt at a draw, within the caps. Big draws (at most rank
    3) have mostly dimensions 8-63, so that work splits across threads; with ``tiny_axes`` every
    dimension is 0 or 1."""

    def __init__(self, rng, choices: dict, max_rank: int, max_dim: int):
        self.rng, self.choices = rng, choices
        self.big = choices.get("big", False)
        self.max_rank = min(max_rank, 3) if self.big else max_rank
        self.max_dim = max_dim

    def dim(self) -> int:
        rng = self.rng
        if self.choices.get("tiny_axes"):
            return int(rng.random() < 0.6)
        return int(rng.integers(8, 64)) if self.big and rng.random() < 0.8 else rand_dim(rng, self.max_dim)

    def shape_of(self, rank: int) -> tuple:
        return tuple(self.dim() for _ in range(rank))

    def ranked(self, lowest: int) -> int:
        """A rank from ``lowest`` (or the cap, if smaller) to the cap."""
        return int(self.rng.integers(min(lowest, self.max_rank), self.max_rank + 1))


def maybe_negative(rng, value: int, n: int, allow: bool) -> int:
    """``value`` or its negative spelling ``value - n``."""
    return value - n if allow and rng.random() < 0.5 else value


def _nonempty(x_shape: list, axes, need: bool):
    """Clip and wrap need at least one element on every addressed axis."""
    if need:
        for a in axes:
            x_shape[a] = max(1, x_shape[a])


def take_form(d: Dimensions, c: dict, kw: dict, need_nonempty: bool) -> Form:
    rng = d.rng
    r = d.ranked(0 if c["axis_none"] else 1)
    x_shape = list(d.shape_of(r))
    q = int(rng.integers(0, min(4, d.max_rank) + 1))
    if c["axis_none"] or r == 0:
        kw["axis"] = None
        _nonempty(x_shape, range(r), need_nonempty)
        idx_shape = d.shape_of(q)
        return Form(tuple(x_shape), idx_shape, None, math.prod(x_shape), math.prod(idx_shape))
    axis = int(rng.integers(0, r))
    b = int(rng.integers(0, min(q, axis) + 1))
    _nonempty(x_shape, [axis], need_nonempty)
    idx_shape = tuple(x_shape[:b]) + d.shape_of(q - b)
    kw["axis"] = maybe_negative(rng, axis, r, c["negative_attrs"])
    kw["batch_dims"] = maybe_negative(rng, b, q, c["negative_attrs"])
    out_size = math.prod(x_shape[:axis]) * math.prod(idx_shape[b:]) * math.prod(x_shape[axis + 1:])
    return Form(tuple(x_shape), idx_shape, None, x_shape[axis], out_size)


def gather_form(d: Dimensions, c: dict, kw: dict, need_nonempty: bool) -> Form:
    rng = d.rng
    r = d.ranked(1)
    x_shape = list(d.shape_of(r))
    axis = int(rng.integers(0, r))
    _nonempty(x_shape, [axis], need_nonempty)
    idx_shape = tuple(d.dim() if j == axis else at_most(rng, x_shape[j]) for j in range(r))
    kw["axis"] = maybe_negative(rng, axis, r, c["negative_attrs"])
    return Form(tuple(x_shape), idx_shape, None, x_shape[axis], math.prod(idx_shape))


def gather_nd_form(d: Dimensions, c: dict, kw: dict, need_nonempty: bool) -> Form:
    rng = d.rng
    r = d.ranked(1)
    x_shape = list(d.shape_of(r))
    b = int(rng.integers(0, r))
    m = int(rng.integers(0, r - b + 1)) if rng.random() < 0.2 else int(rng.integers(min(1, r - b), r - b + 1))
    _nonempty(x_shape, range(b, b + m), need_nonempty)
    lead = tuple(x_shape[:b]) + d.shape_of(int(rng.integers(0, 3)))
    idx_shape = lead + (m,)
    kw.update(batch_dims=b, index_layout=c["layout"])
    index_sizes = tuple_sizes(x_shape, range(b, b + m), "last", idx_shape)
    return Form(tuple(x_shape), idx_shape, None, index_sizes, math.prod(lead) * math.prod(x_shape[b + m:]))


def gather_nd_dims_form(d: Dimensions, c: dict, kw: dict, need_nonempty: bool) -> Form:
    rng = d.rng
    r = d.ranked(1) if rng.random() < 0.95 else 0
    x_shape = list(d.shape_of(r))
    n_dims = int(rng.integers(min(1, r), r + 1))
    dims = [int(a) for a in rng.permutation(r)[:n_dims]]
    _nonempty(x_shape, dims, need_nonempty)
    out_shape = tuple(d.dim() if j in dims else at_most(rng, x_shape[j]) for j in range(r))
    idx_shape = out_shape + (n_dims,)
    kw.update(dims=[maybe_negative(rng, a, r, c["negative_attrs"]) for a in dims], index_layout=c["layout"])
    index_sizes = tuple_sizes(x_shape, dims, "last", idx_shape)
    return Form(tuple(x_shape), idx_shape, None, index_sizes, math.prod(out_shape))


def scatter_form(d: Dimensions, c: dict, kw: dict, need_nonempty: bool) -> Form:
    rng = d.rng
    r = d.ranked(1)
    x_shape = list(d.shape_of(r))
    axis = int(rng.integers(0, r))
    _nonempty(x_shape, [axis], need_nonempty)
    idx_shape = tuple(d.dim() if j == axis else at_most(rng, x_shape[j]) for j in range(r))
    src_shape = tuple(n + (int(rng.integers(0, 2)) if rng.random() < 0.3 else 0) for n in idx_shape)
    kw.update(axis=maybe_negative(rng, axis, r, c["negative_attrs"]), reduce=c["reduce"])
    return Form(tuple(x_shape), idx_shape, src_shape, x_shape[axis], math.prod(x_shape))


def scatter_nd_form(d: Dimensions, c: dict, kw: dict, need_nonempty: bool) -> Form:
    rng = d.rng
    r = d.ranked(0)
    x_shape = list(d.shape_of(r))
    m = int(rng.integers(0, r + 1)) if rng.random() < 0.2 else int(rng.integers(min(1, r), r + 1))
    _nonempty(x_shape, range(m), need_nonempty)
    lead = d.shape_of(int(rng.integers(0, 3)))
    idx_shape = lead + (m,)
    src_shape = lead + tuple(x_shape[m:])
    kw.update(reduce=c["reduce"], index_layout=c["layout"])
    index_sizes = tuple_sizes(x_shape, range(m), "last", idx_shape)
    return Form(tuple(x_shape), idx_shape, src_shape, index_sizes, math.prod(x_shape))


def scatter_nd_dims_form(d: Dimensions, c: dict, kw: dict, need_nonempty: bool) -> Form:
    rng = d.rng
    r = d.ranked(1)
    x_shape = list(d.shape_of(r))
    n_dims = int(rng.integers(1, r + 1))
    dims = [int(a) for a in rng.permutation(r)[:n_dims]]
    _nonempty(x_shape, dims, need_nonempty)
    src_shape = tuple(d.dim() if j in dims else at_most(rng, x_shape[j]) for j in range(r))
    idx_shape = src_shape + (n_dims,)
    kw.update(dims=[maybe_negative(rng, a, r, c["negative_attrs"]) for a in dims], reduce=c["reduce"],
              index_layout=c["layout"])
    index_sizes = tuple_sizes(x_shape, dims, "last", idx_shape)
    return Form(tuple(x_shape), idx_shape, src_shape, index_sizes, math.prod(x_shape))


FORMS = {
    "take": take_form,
    "gather": gather_form,
    "gather_nd": gather_nd_form,
    "gather_nd_dims": gather_nd_dims_form,
    "scatter": scatter_form,
    "scatter_nd": scatter_nd_form,
    "scatter_nd_dims": scatter_nd_dims_form,
}
