"""Operators that move elements copy them bit for bit on every backend: signalling NaNs keep
their payloads, negative zero its sign (SEMANTICS.md, "Data types").

The references are numpy's moves of the same bits viewed as unsigned integers, so nothing on the
reference side can quiet a NaN; every float dtype is checked, bfloat16 (which is a float32 in
registers on the CPU) and float16 (an i16 in memory) above all.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import cinnlite as cl
from cinnlite import NetBuilder

FLOATS = [np.dtype(ml_dtypes.bfloat16), np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)]


def special_bits(dtype: np.dtype, shape, rng) -> np.ndarray:
    """Random bit patterns of ``dtype``, a third of them signalling NaNs with random payloads and
    signs, some quiet NaNs and zeros of both signs."""
    bits = dtype.itemsize * 8
    u = np.dtype(f"u{dtype.itemsize}")
    mantissa = {2: 7 if dtype == np.dtype(ml_dtypes.bfloat16) else 10, 4: 23, 8: 52}[dtype.itemsize]
    exponent_all_ones = ((1 << (bits - 1 - mantissa)) - 1) << mantissa
    quiet = 1 << (mantissa - 1)
    payload = rng.integers(1, quiet, size=shape, dtype=np.uint64).astype(u)
    signs = (rng.integers(0, 2, size=shape, dtype=np.uint64) << (bits - 1)).astype(u)
    out = rng.integers(0, 1 << min(bits, 63), size=shape, dtype=np.uint64).astype(u)
    kind = rng.integers(0, 6, size=shape)
    snan = signs | u.type(exponent_all_ones) | payload
    out = np.where(kind < 2, snan, out)
    out = np.where(kind == 2, snan | u.type(quiet), out)
    out = np.where(kind == 3, signs, out)  # +0 and -0
    return out.view(dtype)


def _inputs(dtype: np.dtype, rng) -> dict:
    """Data of special bits and indices of every sign (distinct rows for the scatters)."""
    return {
        "x": special_bits(dtype, (6, 8), rng), "rows": special_bits(dtype, (5, 300), rng),
        "src": special_bits(dtype, (6, 8), rng), "mask": rng.integers(0, 2, size=(6, 8)).astype(bool),
        "updates": special_bits(dtype, (4, 8), rng), "new_rows": special_bits(dtype, (3, 8), rng),
        "index_rows": np.array([4, 0, -1, 2, 2], np.int64), "index_cols": np.array([7, 0, 3, -2, 5], np.int64),
        "gather_index": rng.integers(-6, 6, size=(4, 8)).astype(np.int64),
        "scatter_index": np.stack([rng.permutation(6)[:4] for _ in range(8)], axis=1).astype(np.int64),
        "row_index": np.array([[5], [-6], [2]], np.int64),
        "pairs": np.stack([rng.integers(-6, 6, 20), rng.integers(-8, 8, 20)], axis=1).astype(np.int64),
    }


def _moves(a: dict):
    """The program of every move, and numpy's moves of the same bits as unsigned integers."""
    b = NetBuilder("moves")
    t = {name: b.create_input(v.dtype, v.shape, name) for name, v in a.items()}
    x = t["x"]
    outs = {"take rows": b.take(x, t["index_rows"], axis=0), "take elements": b.take(x, t["index_cols"], axis=1),
            "take long rows": b.take(t["rows"], t["index_rows"], axis=0),
            "gather": b.gather(x, t["gather_index"], axis=0), "gather_nd": b.gather_nd(x, t["pairs"]),
            "scatter": b.scatter(x, t["scatter_index"], t["updates"], axis=0),
            "scatter_nd": b.scatter_nd(x, t["row_index"], t["new_rows"]),
            "where": b.where(t["mask"], x, t["src"]), "reshape": b.reshape(x, (-1,))}
    u = {name: v.view(f"u{v.dtype.itemsize}") if v.dtype in FLOATS else v for name, v in a.items()}
    xu, pairs = u["x"], a["pairs"]
    scattered, rows_scattered = xu.copy(), xu.copy()
    np.put_along_axis(scattered, a["scatter_index"], u["updates"], axis=0)
    rows_scattered[a["row_index"][:, 0]] = u["new_rows"]
    want = {"take rows": np.take(xu, a["index_rows"], axis=0), "take elements": np.take(xu, a["index_cols"], axis=1),
            "take long rows": np.take(u["rows"], a["index_rows"], axis=0),
            "gather": np.take_along_axis(xu, a["gather_index"], axis=0), "gather_nd": xu[pairs[:, 0], pairs[:, 1]],
            "scatter": scattered, "scatter_nd": rows_scattered, "where": np.where(a["mask"], xu, u["src"]),
            "reshape": xu.reshape(-1)}
    return b.build(list(outs.values())), want


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_moved_elements_keep_their_bits(backend, dtype):
    a = _inputs(dtype, np.random.default_rng(7))
    program, want = _moves(a)
    got = cl.compile(program, target=backend)(**a)
    for (name, w), g in zip(want.items(), got):
        g = np.asarray(g)
        assert g.dtype == dtype, name
        np.testing.assert_array_equal(g.view(w.dtype), w, err_msg=f"{name} of {dtype} on {backend}")
