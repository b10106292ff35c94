"""Correctness before speed: every implementation's result is compared with the independent
numpy reference before it is timed (and again after), and a failure is recorded in the
workload's record instead of stopping the run.

Gathers must be bit-exact; the scatters with "add" are compared with a float64 reference within
a tolerance that allows float32 sums in a different order.
"""
from __future__ import annotations

import time
import traceback

import numpy as np

from peers import implementations
from workloads import Case, Workload


def check(case: Case, expected, got, name: str):
    got = np.asarray(got)
    if got.shape != np.shape(expected):
        raise AssertionError(f"{name}: shape {got.shape}, expected {np.shape(expected)}")
    if case.exact:
        np.testing.assert_array_equal(got, expected, err_msg=f"{name} disagrees with the numpy reference")
    else:
        # float32 sums of a few dozen values in different orders: a few ulp of the magnitude.
        np.testing.assert_allclose(got.astype(np.float64), expected, rtol=2e-5, atol=1e-5,
                                   err_msg=f"{name} disagrees with the float64 numpy reference")


def prepare_impls(workload: Workload, case: Case, expected, threads: int, record: dict) -> list:
    """Set every implementation up and check its first result; returns [(entry, Impl)] for the
    ones that ran and agreed. Failures are recorded in ``record`` and never stop the run."""
    ready = []
    for name, factory in implementations(workload, case, threads):
        entry = {"impl": name}
        record["impls"].append(entry)
        try:
            t0 = time.perf_counter()
            impl = factory()
            entry["setup_s"] = time.perf_counter() - t0
            entry["note"] = impl.note
            impl.run()
            check(case, expected, impl.result(), f"{workload.id} {name}")
            entry["ok"] = True
            ready.append((entry, impl))
        except Exception as exc:
            fail(record, entry, exc)
    return ready


def fail(record: dict, entry: dict, exc: Exception):
    """Mark ``entry`` failed: a wrong result or the exception, with the details in ``errors``.
    Called from an ``except`` block (the traceback is the one being handled)."""
    entry["ok"] = False
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    if isinstance(exc, AssertionError):
        entry["error"] = "WRONG RESULT"
        record["errors"].append(f"{entry['impl']}: {text}")
    else:
        entry["error"] = f"{type(exc).__name__}: {first}"[:80]
        record["errors"].append(f"{entry['impl']}: {traceback.format_exc()}")
