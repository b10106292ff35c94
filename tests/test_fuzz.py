"""Randomized differential test: random programs on every backend against independent references.

Each draw picks an operator form (take, gather, gather_nd slice and element forms, scatter,
scatter_nd slice and element forms), a data dtype, an index dtype, a mode and (for scatters) a
reduction, then ranks 0-6, shapes with size-0 and size-1 dimensions, axes and batch_dims (negative
spellings too), dims, index layouts, fill values and index values (in range, negative, out of
range, the index dtype's extremes). Sometimes an operand is itself computed (a take, a reshape or
a fill_constant in front), and sometimes every intermediate is an output too, so fused and
materialised producers are both exercised.

Every output is compared with the numpy reference (``tests/reference.py``); where installed,
the operator's result is also compared with PyTorch (``index_select``, ``gather``, ``scatter``,
``scatter_reduce``) and with ONNX's reference evaluator (``Gather``, ``GatherElements``,
``GatherND``, ``ScatterElements``, ``ScatterND``) on the draws those libraries define. In
``mode="raise"`` the error must name an index input, the first bad position in row-major order
and the bad value; inputs must never change.

The draws run in a child process, so a crash is reported (with the draw that caused it) instead
of killing the test run. The run is seeded and its length is a number of draws, so that
``pytest -q`` checks the same programs on every machine, however fast:

- ``CINNLITE_FUZZ_DRAWS`` or ``pytest --fuzz-draws=N``: draws per backend (default
  ``DEFAULT_DRAWS``).
- ``CINNLITE_FUZZ_SEED`` or ``pytest --fuzz-seed=N``: the seed (default fixed); draw ``k`` of
  seed ``s`` is always the same program and data.
- ``CINNLITE_FUZZ_SECONDS`` or ``pytest --fuzz-seconds=N``: an opt-in soak run that draws until
  N seconds per backend are spent instead (at least the fixed draws). Its reach depends on the
  machine's speed, which is why the default run never uses it.

The run itself is marked ``slow`` (it compiles hundreds of programs per backend): ``pytest -m
"not slow"`` keeps only the quick tests of the harness below it.

On a failure the draw is shrunk (the same choices re-drawn with fewer and smaller dimensions,
then simpler values) and printed as a self-contained Python snippet.

This file holds the tests and their options; the machinery (drawing, evaluating, checking,
shrinking, reproducers, the child-process loop) is the ``fuzzing`` package next to it.
"""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from fuzzing import check as checking
from fuzzing.check import Failure, check
from fuzzing.draws import choose, realize
from fuzzing.evaluate import reference_eval
from fuzzing.reproducer import reproducer
from fuzzing.runner import run_in_child
from fuzzing.shrink import shrink
from fuzzing.spec import DATA_DTYPES, KINDS, MODES

DEFAULT_SEED = 20240611
DEFAULT_DRAWS = 200  # per backend; every draw compiles a program, some several


def fuzz_seconds(config) -> float | None:
    """The soak run's seconds per backend, or None for the fixed number of draws."""
    value = config.getoption("--fuzz-seconds", default=None) or os.environ.get("CINNLITE_FUZZ_SECONDS")
    return float(value) if value else None


def fuzz_draws(config) -> int:
    value = config.getoption("--fuzz-draws", default=None) or os.environ.get("CINNLITE_FUZZ_DRAWS")
    return int(value) if value not in (None, "") else DEFAULT_DRAWS


def fuzz_seed(config) -> int:
    value = config.getoption("--fuzz-seed", default=None) or os.environ.get("CINNLITE_FUZZ_SEED")
    return int(value) if value not in (None, "") else DEFAULT_SEED


@pytest.mark.slow
def test_randomized_differential(backend, request, tmp_path):
    seconds, seed = fuzz_seconds(request.config), fuzz_seed(request.config)
    draws = fuzz_draws(request.config)
    proc = run_in_child(backend, draws, seed, tmp_path, seconds)
    current = tmp_path / "current.py"
    if proc.returncode != 0:
        pytest.fail(f"the fuzz process died with return code {proc.returncode} "
                    f"(negative: signal {-proc.returncode}) on this draw:\n\n"
                    f"{current.read_text() if current.exists() else '(none)'}\n{proc.stderr[-4000:]}")
    result = json.loads((tmp_path / "result.json").read_text())
    stats, failures = result["stats"], result["failures"]
    print(f"fuzz {backend}: seed {seed}, {json.dumps(stats)}")
    if failures:
        report = [f"{len(failures)} kind(s) of failure in {stats['draws']} draws (seed {seed}, {backend}):"]
        for f in failures:
            report.append(f"\n--- {f['category']} (draw {f['draw']}): {f['original'][:2000]}\n"
                          f"minimal reproducer ({f.get('path', 'not saved')}):\n{f['reproducer']}")
        pytest.fail("\n".join(report), pytrace=False)
    for lib in ("torch", "onnx"):
        if _installed(lib):
            assert stats.get(f"{lib} compared", 0) > 0, f"no draw was compared with {lib}: {stats}"


def _installed(name):
    try:
        __import__(name)
        return True
    except ImportError:
        return False


# -- the harness itself ----------------------------------------------------------------------------


def test_draws_are_valid_and_reproducible():
    """The first draws cover every form and dtype, are valid programs (the builder accepts them),
    and the same seed gives the same draw."""
    import cinnlite as cl

    kinds, dtypes, modes = set(), set(), set()
    for k in range(len(KINDS) * len(DATA_DTYPES)):
        specs = []
        for _ in range(2):
            rng = np.random.default_rng([1, k])
            specs.append(realize(rng, choose(rng, k)))
        a, b = specs
        assert repr([(s.method, s.args, s.kwargs) for s in a.steps]) == repr([(s.method, s.args, s.kwargs) for s in b.steps])
        assert list(a.inputs) == list(b.inputs)
        for name in a.inputs:
            same = (a.inputs[name].dtype, a.inputs[name].shape, a.inputs[name].tobytes())
            assert same == (b.inputs[name].dtype, b.inputs[name].shape, b.inputs[name].tobytes())  # NaNs too
        nb = cl.NetBuilder("valid")
        t = {n: nb.create_input(arr.dtype.name, arr.shape, n) for n, arr in b.inputs.items()}
        for st in b.steps:
            t[st.out] = getattr(nb, st.method)(*[t[x] for x in st.args], **st.kwargs, name=st.out)
        assert t["out"].shape == reference_eval(b)[0].get("out", np.zeros(t["out"].shape)).shape
        kinds.add(b.choices["kind"])
        dtypes.add(b.choices["dtype"])
        modes.add(b.choices["mode"])
    assert kinds == set(KINDS) and dtypes == set(DATA_DTYPES) and modes == set(MODES)


def test_reproducers_run_and_pass_on_correct_draws(backend):
    for k in range(6):
        rng = np.random.default_rng([5, k])
        spec = realize(rng, choose(rng, k))
        namespace = {}
        exec(compile(reproducer(spec, backend), f"<draw {k}>", "exec"), namespace)  # noqa: S102


def test_shrinker_finds_a_smaller_failing_draw():
    """With a fake failure (any gather whose x has a dimension of size >= 2), shrinking returns a
    draw that still fails and is no bigger, and its reproducer is plain Python."""
    def fake_check(spec):
        if spec.main.method == "gather" and any(d >= 2 for d in spec.inputs.get("x", np.zeros(0)).shape):
            return Failure("wrong result", "fake")
        return None

    for k in range(200):
        rng = np.random.default_rng([3, k])
        c = choose(rng, k)
        if c["kind"] != "gather":
            continue
        spec = realize(rng, c)
        if fake_check(spec) is None or spec.size()[0] < 20:
            continue
        small, _ = shrink(spec, fake_check(spec), "cpu", seed=[3, k], seconds=10, check_fn=fake_check)
        assert fake_check(small) is not None
        assert small.size() < spec.size()
        compile(reproducer(small, "cpu"), "<repro>", "exec")
        return
    pytest.fail("no suitable draw for the shrinker test")


def test_check_reports_wrong_results_and_missing_errors(monkeypatch):
    """The comparison itself: an executable that returns zeros, or that never raises, fails."""
    class Zeros:
        def __init__(self, spec):
            self.env, _ = reference_eval(spec)
            self.spec = spec

        def run(self, feeds):
            return {name: np.zeros_like(self.env[name]) if name in self.env else None for name in self.spec.outputs}

    monkeypatch.setattr(checking, "build", lambda spec, backend: Zeros(spec))
    seen = set()
    for k in range(300):
        rng = np.random.default_rng([11, k])
        spec = realize(rng, choose(rng, k))
        env, errors = reference_eval(spec)
        if errors:
            kind = "no IndexError"
        elif env["out"].size and np.any(env["out"] != 0):
            kind = "wrong result"
        else:
            continue
        with pytest.raises(Failure) as info:
            check(spec, "cpu", externals=False)
        assert info.value.category == kind
        seen.add(kind)
        if len(seen) == 2:
            return
    pytest.fail(f"found draws of only these kinds: {seen}")
