"""The loop over draws, run in a child process so that a crash is reported instead of killing
the test run.

``run_in_child`` starts a fresh Python (disk cache off: every draw goes through the whole
compiler) that calls ``child_main``. The child checks draws ``0 .. draws-1`` of the seed (or
keeps drawing until ``seconds`` are spent), shrinks the first failure of each category, and
writes ``result.json`` (statistics and failures with their reproducers) into the work
directory; before each draw it writes that draw's script to ``current.py``, which is what the
parent reports if the child dies.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback

import numpy as np

from fuzzing.check import Failure, check
from fuzzing.draws import choose, realize
from fuzzing.reproducer import reproducer
from fuzzing.shrink import shrink

TESTS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VARIANTS_PER_DRAW = 2  # re-drawn value sets each compiled program also runs on
LONG_REPRODUCER = 20000  # characters; longer scripts are cut in the report (the file has them whole)


def run_in_child(backend: str, draws: int, seed: int, workdir, seconds: float | None):
    """Run ``child_main`` in a fresh Python process; returns the finished process."""
    code = (f"import sys; sys.path.insert(0, {TESTS_DIR!r}); from fuzzing.runner import child_main; "
            f"child_main({backend!r}, {draws!r}, {seed!r}, {str(workdir)!r}, {seconds!r})")
    env = dict(os.environ, CINNLITE_CACHE_DIR="off")  # every draw goes through the whole compiler
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          timeout=(seconds or 0) * 4 + draws * 10 + 600)


def child_main(backend: str, draws: int, seed: int, workdir: str, seconds: float | None = None,
               max_failures: int = 3):
    """Check draws ``0 .. draws-1`` (with ``seconds``, go on drawing until they are spent);
    write result.json into ``workdir``. Before each draw, current.py holds its reproducer, so a
    crash can be reported with it."""
    start = time.monotonic()
    stats = {"draws": 0, "kinds": {}, "modes": {}, "dtypes": {}}
    failures, seen = [], set()
    k = 0
    while _more(k, draws, seconds, start) and len(failures) < max_failures:
        rng = np.random.default_rng([seed, k])
        c = choose(rng, k)
        spec = realize(rng, c)
        with open(os.path.join(workdir, "current.py"), "w") as f:
            f.write(reproducer(spec, backend, note=f"draw {k} of seed {seed} on {backend}", expected=False))
        failure = _check_draw(spec, backend, stats, rng, k, seed, workdir, seen)
        if failure is not None:
            failures.append(failure)
        _count(stats, c)
        k += 1
    stats["seconds"] = round(time.monotonic() - start, 1)
    with open(os.path.join(workdir, "result.json"), "w") as f:
        json.dump(dict(stats=stats, failures=failures), f, indent=1, default=str)


def _more(k, draws, seconds, start) -> bool:
    return k < draws or (seconds is not None and time.monotonic() - start < seconds)


def _count(stats, c):
    stats["draws"] += 1
    for key, value in (("kinds", c["kind"]), ("modes", c["mode"]), ("dtypes", c["dtype"])):
        stats[key][value] = stats[key].get(value, 0) + 1


def _check_draw(spec, backend, stats, rng, k, seed, workdir, seen) -> dict | None:
    """None if the draw passes, or is a failure of a category already reported; else the
    failure to report."""
    try:
        check(spec, backend, stats=stats, variants=VARIANTS_PER_DRAW, rng=rng)
    except Failure as fail:
        if fail.category not in seen:
            seen.add(fail.category)
            return _shrunk_failure(fail, backend, k, seed, workdir)
    except Exception as e:  # noqa: BLE001 - a fault of the test harness, reported as such
        seen.add("harness error")
        return dict(draw=k, category="harness error", message=str(e), original="".join(
            traceback.format_exception(e)), reproducer=reproducer(spec, backend, expected=False))
    return None


def _shrunk_failure(fail, backend, k, seed, workdir) -> dict:
    """Shrink the failing draw, save its reproducer next to result.json, and describe it."""
    small, small_fail = shrink(fail.spec, fail, backend, seed=[seed, k])
    text = reproducer(small, backend, note=(
        f"{small_fail.category}: {small_fail.message}\n"
        f"(shrunk from draw {k} of CINNLITE_FUZZ_SEED={seed}, backend {backend})"))
    path = os.path.join(workdir, f"reproducer_draw{k}.py")
    with open(path, "w") as f:
        f.write(text)
    shown = text if len(text) < LONG_REPRODUCER else text[:3000] + "\n# ... (the whole script is in the file)"
    return dict(draw=k, category=fail.category, message=small_fail.message, original=fail.message, path=path,
                reproducer=shown)
