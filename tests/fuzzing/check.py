"""Compiling a draw with cinnlite, running it, and comparing with the references.

``check`` compiles the draw once and runs it on its own values and (with ``variants``) on
re-drawn values; each run must leave the inputs unchanged, raise exactly the acceptable
``IndexOutOfRangeError`` where the reference stops, and otherwise match the numpy reference
bit for bit and PyTorch and ONNX (where they define the draw) within a small tolerance. Any
disagreement is a ``Failure`` whose category is what shrinking preserves.
"""
from __future__ import annotations

import traceback

import numpy as np

from fuzzing.draws import ND_KINDS, revalue
from fuzzing.evaluate import reference_eval
from fuzzing.externals import ExternalCannot, onnx_value, torch_value
from fuzzing.spec import Spec

# relative, by dtype: for other libraries' order of sums
FLOAT_TOLERANCE = {"float16": 2e-3, "bfloat16": 2e-2, "float32": 1e-5, "float64": 1e-12}


class Failure(Exception):
    """A draw that cinnlite gets wrong. ``category`` is what shrinking must preserve."""

    def __init__(self, category: str, message: str):
        super().__init__(f"{category}: {message}")
        self.category = category
        self.message = message


def compile_options(spec: Spec) -> dict:
    """The draw's compile options that this cinnlite's ``compile`` takes."""
    import inspect

    import cinnlite as cl

    accepted = inspect.signature(cl.compile).parameters
    return {k: v for k, v in spec.choices.get("options", {}).items() if k in accepted}


def declared_shape(spec: Spec, name: str, arr) -> tuple:
    """An input's shape as the program declares it: in a symbolic draw every dimension is a
    symbol named after its size (``d5``), so equal sizes are one symbol and the rules that relate
    them hold; the shape-generic code then runs with the draw's sizes (0 included, which runs
    the static specialisation). An index tuple's length must be a number, so the index inputs of
    the ``_nd`` forms keep theirs."""
    if not spec.choices.get("symbolic"):
        return tuple(arr.shape)
    if spec.choices["kind"] in ND_KINDS and name.startswith("idx"):
        return tuple(arr.shape)
    return tuple(f"d{n}" for n in arr.shape)


def build(spec: Spec, backend: str):
    import cinnlite as cl

    b = cl.NetBuilder("fuzz")
    t = {name: b.create_input(arr.dtype.name, declared_shape(spec, name, arr), name) for name, arr in spec.inputs.items()}
    for st in spec.steps:
        t[st.out] = getattr(b, st.method)(*[t[a] for a in st.args], **st.kwargs, name=st.out)
    return cl.compile(b.build(outputs=[t[o] for o in spec.outputs]), target=backend, **compile_options(spec))


def same(got, want, exact=True) -> str | None:
    """None if equal, else a description. NaN equals NaN; floats compare exactly unless not exact."""
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    if got.dtype.kind == "c":  # part by part
        for part in ("real", "imag"):
            diff = same(np.ascontiguousarray(getattr(got, part)), np.ascontiguousarray(getattr(want, part)), exact)
            if diff is not None:
                return f"{part} parts: {diff}"
        return None
    if got.dtype.kind == "f" or got.dtype.name == "bfloat16":
        g, w = got.astype(np.float64), want.astype(np.float64)
        both_nan = np.isnan(g) & np.isnan(w)
        if exact:
            ok = both_nan | (g == w)
        else:
            tol = FLOAT_TOLERANCE[got.dtype.name]
            with np.errstate(invalid="ignore"):
                ok = both_nan | (g == w) | (np.abs(g - w) <= tol * np.maximum(np.abs(w), 1.0))
    else:
        ok = got == want
    if ok.all():
        return None
    p = tuple(int(i) for i in np.argwhere(~ok)[0]) if ok.ndim else ()
    return f"{int((~ok).sum())} element(s) differ; first at {p}: got {got[p]!r}, expected {want[p]!r}"


def check(spec: Spec, backend: str, externals=True, stats=None, variants=0, rng=None):
    """Raise Failure if cinnlite disagrees with a reference on this draw, or (with ``variants``)
    on the same compiled program run on that many re-drawn sets of values. The Failure's
    ``spec`` is the set of values that failed."""
    try:
        exe = build(spec, backend)
    except Exception as e:  # noqa: BLE001 - every draw is a valid program
        f = Failure("build or compile failed", f"{type(e).__module__}.{type(e).__name__}: {e}")
        f.spec = spec
        raise f from e
    runs = [spec] + [revalue(rng, spec, in_range=bool(v % 2)) for v in range(variants)]
    for s in runs:
        try:
            run_and_compare(exe, s, externals, stats)
        except Failure as f:
            f.spec = s
            raise
        if stats is not None:
            stats["runs"] = stats.get("runs", 0) + 1


def run_and_compare(exe, spec: Spec, externals, stats):
    env, errors = reference_eval(spec)
    feeds = {k: v.copy() for k, v in spec.inputs.items()}
    got, raised = _run(exe, feeds)
    for name, arr in spec.inputs.items():
        if same(feeds[name], arr) is not None:
            raise Failure("input modified", f"input {name!r} changed during the call")
    if errors:
        _expect_index_error(raised, errors, stats)
        return
    if raised is not None:
        raise Failure("unexpected IndexError", str(raised))
    for name in spec.outputs:
        diff = same(got[name], env[name])
        if diff is not None:
            raise Failure("wrong result", f"output {name!r}: {diff}")
    if externals:
        _compare_with_externals(spec, env, got, stats)


def _run(exe, feeds):
    """(outputs, None) or (None, the IndexOutOfRangeError); any other exception is a Failure."""
    import cinnlite as cl

    try:
        return exe.run(feeds), None
    except cl.IndexOutOfRangeError as e:
        return None, e
    except Exception as e:  # noqa: BLE001
        raise Failure("unexpected exception", f"{type(e).__module__}.{type(e).__name__}: {e}\n"
                      + "".join(traceback.format_exception(e)[-3:])) from e


def _expect_index_error(raised, errors, stats):
    if raised is None:
        raise Failure("no IndexError", f"expected an IndexOutOfRangeError for one of {errors}")
    found = (raised.input, tuple(raised.position), raised.value)
    if found not in [(n, tuple(p), v) for n, p, v in errors]:
        raise Failure("wrong IndexError", f"raised {raised} -> {found}; acceptable: {errors}")
    if stats is not None:
        stats["raised"] = stats.get("raised", 0) + 1


def _compare_with_externals(spec: Spec, env, got, stats):
    for lib, fn in (("torch", torch_value), ("onnx", onnx_value)):
        try:
            value = fn(spec.main, env)
        except ExternalCannot as why:
            if stats is not None:
                stats.setdefault(f"{lib} skipped", {}).setdefault(str(why), 0)
                stats[f"{lib} skipped"][str(why)] += 1
            continue
        diff = same(got["out"], value, exact=False)
        if diff is not None:
            raise Failure(f"differs from {lib}", diff)
        if stats is not None:
            stats[f"{lib} compared"] = stats.get(f"{lib} compared", 0) + 1
