"""Shrinking a failing draw: a smaller draw that fails the same way.

First the same choices are re-drawn under growing caps on rank and dimension (fewest and
smallest dimensions first), with big draws made small and producers dropped where that still
fails; then, one input at a time, the values are made simpler (zeros, small indices, a ramp).
"""
from __future__ import annotations

import time

import numpy as np

from fuzzing.check import Failure, check
from fuzzing.draws import realize
from fuzzing.spec import Spec

SHRINK_CAPS = [(1, 1), (1, 2), (2, 1), (2, 2), (1, 3), (2, 3), (3, 2), (3, 3), (4, 2), (4, 3), (5, 4), (6, 5)]
CANDIDATES_PER_CAP = 8
SHRINK_SALT = 7919  # seeds the re-draws apart from the draws themselves


def fails_with(spec, backend, category) -> Failure | None:
    try:
        check(spec, backend)
    except Failure as f:
        return f if f.category == category else None
    except Exception:  # noqa: BLE001 - a candidate the harness cannot evaluate is no reproducer
        return None
    return None


def shrink(spec: Spec, failure: Failure, backend: str, seed, seconds=30.0, check_fn=None):
    """A smaller draw that fails the same way: the same choices re-drawn under growing caps
    (fewest and smallest dimensions first), then producers dropped, then simpler values."""
    check_fn = check_fn or (lambda s: fails_with(s, backend, failure.category))
    deadline = time.monotonic() + seconds
    best, best_failure = _redrawn_smaller(spec, failure, seed, check_fn, deadline)
    return _with_simpler_values(best, best_failure, check_fn, deadline)


def _choice_variants(choices: dict) -> list:
    """The draw's choices, preceded by simpler versions of them: without producers and extra
    outputs, and small instead of big."""
    variants = [choices]
    if choices.get("big"):
        variants.insert(0, dict(choices, big=False))
    if any(choices.get(k) != "input" for k in ("x_producer", "src_producer", "index_producer")) or choices.get("all_outputs"):
        variants.insert(0, dict(choices, x_producer="input", src_producer="input", index_producer="input",
                                all_outputs=False))
    return variants


def _redrawn_smaller(spec, failure, seed, check_fn, deadline):
    """The first smaller re-draw that fails, trying every variant of the choices under caps
    from the smallest up; the draw itself if none does before the deadline."""
    for c in _choice_variants(dict(spec.choices)):
        for caps in SHRINK_CAPS:
            if time.monotonic() > deadline:
                return spec, failure
            found = _failing_candidate(c, caps, seed, spec.size(), check_fn)
            if found:
                return found
    return spec, failure


def _failing_candidate(c, caps, seed, size_to_beat, check_fn):
    for sub in range(CANDIDATES_PER_CAP):
        try:
            cand = realize(np.random.default_rng([*seed, SHRINK_SALT, caps[0], caps[1], sub]), dict(c), *caps)
        except AssertionError:
            continue
        if cand.size() >= size_to_beat:
            continue
        f = check_fn(cand)
        if f is not None:
            return cand, f
    return None


def _with_simpler_values(best, best_failure, check_fn, deadline):
    """Simpler values, one input at a time."""
    for name in list(best.inputs):
        for simpler in _simpler_values(best.inputs[name], name):
            if time.monotonic() > deadline:
                break
            cand = Spec(dict(best.inputs, **{name: simpler}), best.steps, best.outputs, best.choices)
            f = check_fn(cand)
            if f is not None:
                best, best_failure = cand, f
                break
    return best, best_failure


def _simpler_values(arr, name):
    if arr.size == 0:
        return []
    if arr.dtype.kind in "iu" and ("idx" in name or "perm" in name):
        return [np.zeros_like(arr), np.clip(arr, -2, 2).astype(arr.dtype)]
    if arr.dtype == np.bool_:
        return [np.zeros_like(arr)]
    return [np.zeros_like(arr), (np.arange(arr.size) % 7).astype(arr.dtype).reshape(arr.shape)]
