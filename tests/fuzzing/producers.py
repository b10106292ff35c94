"""Computed operands: a take, a reshape or a fill_constant placed in front of the operator.

A producer holds the same values the operand would have held as an input, so the reference
result does not change, while the compiler sees a fused or materialised producer instead of an
input. A ``raise``-mode take in front may carry a bad index of its own, which must then be the
error the run reports.
"""
from __future__ import annotations

import math

import numpy as np

from fuzzing.spec import MODES, Step


def add_producers(rng, c: dict, inputs: dict, steps: list) -> dict:
    """Replace some operands by computed tensors holding the same kind of values; returns the
    operands renamed (input name -> computed tensor's name)."""
    renamed = {}
    if c["x_producer"] != "input":
        _produce_x(rng, c, inputs, steps)
        renamed["x"] = "x_made"
    if c["src_producer"] != "input" and "src" in inputs:
        _produce_src(rng, c, inputs, steps)
        renamed["src"] = "src_made"
    if c["index_producer"] == "take" and inputs["idx"].ndim >= 1 and inputs["idx"].size > 0:
        _take_producer(rng, c, inputs, steps, inputs.pop("idx"), "idx", "idx_made")
        renamed["idx"] = "idx_made"
    return renamed


def _produce_x(rng, c, inputs, steps):
    x = inputs.pop("x")
    if c["x_producer"] == "fill" or x.size == 0:
        value = x.reshape(-1)[0].item() if x.size else (False if x.dtype == np.bool_ else 0)
        if isinstance(value, float) and not math.isfinite(value):
            value = 1.5
        steps.append(Step("x_made", "fill_constant", (), dict(shape=x.shape, value=value, dtype=x.dtype.name)))
    elif c["x_producer"] == "reshape" or x.ndim == 0:
        inputs["x_flat"] = x.reshape(-1)
        steps.append(Step("x_made", "reshape", ("x_flat",), dict(shape=x.shape)))
    else:
        _take_producer(rng, c, inputs, steps, x, "x", "x_made")


def _produce_src(rng, c, inputs, steps):
    s = inputs.pop("src")
    if c["src_producer"] == "fill" or s.ndim == 0 or s.size == 0:
        value = s.reshape(-1)[0].item() if s.size else (False if s.dtype == np.bool_ else 1)
        if isinstance(value, float) and not math.isfinite(value):
            value = -0.5
        steps.append(Step("src_made", "fill_constant", (), dict(shape=s.shape, value=value, dtype=s.dtype.name)))
    else:
        _take_producer(rng, c, inputs, steps, s, "src", "src_made")


def _take_producer(rng, c, inputs, steps, want, base, out):
    """``out = take(base_src, perm, axis=0, mode=...)`` where the rows of ``base_src`` include
    every row of ``want`` (so the consumer sees the same values) plus a few others."""
    rows = want.shape[0]
    extra = int(rng.integers(0, 3))
    order = rng.permutation(rows + extra)
    source = np.empty((rows + extra,) + want.shape[1:], want.dtype)
    for k in range(rows + extra):
        source[order[k]] = want[k] if k < rows else want[k % rows]
    perm = order[:rows].astype(c["index_dtype"])
    mode = c.get("producer_mode") or str(rng.choice(MODES))
    signed = np.dtype(c["index_dtype"]).kind == "i"
    if rng.random() < 0.5 and signed:
        perm = np.where(perm >= 0, perm - (rows + extra), perm).astype(c["index_dtype"])  # negative spelling
    if mode != "raise" and rng.random() < 0.3:
        perm = perm + (rows + extra) * (int(mode == "wrap") * 3)  # still lands on the same rows
    if mode == "fill" and rows > 0 and rng.random() < 0.5:
        perm = perm.copy()
        perm[int(rng.integers(rows))] = rows + extra + 5  # a filled row: the consumer sees fill values
    if mode == "raise" and rows > 0 and rng.random() < (0.6 if c.get("tiny_axes") else 0.2):
        perm = perm.copy()
        perm[int(rng.integers(rows))] = -(rows + extra) - 1 if signed else rows + extra  # a producer error
    inputs[f"{base}_rows"] = source
    inputs[f"{base}_perm"] = perm
    kw = dict(axis=0, mode=mode)
    if mode == "fill":
        kw["fill_value"] = 0 if want.dtype != np.bool_ else False
    steps.append(Step(out, "take", (f"{base}_rows", f"{base}_perm"), kw))
