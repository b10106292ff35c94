"""The ONNX corpus (tests/onnx_corpus.py: models exported from PyTorch) run by
``cl.onnx.InferenceSession`` and by onnxruntime alone.

Each model is exported and both sessions are created; at the timed size their outputs are
compared with the PyTorch module's own before anything is timed (cinnlite's must agree; how far
onnxruntime's are is printed: its ScatterND with a reduction races on duplicate indices at large
sizes). Calls are then timed in interleaved rounds (cinnlite, then
onnxruntime, 60 ms apart, longer than onnxruntime's workers spin after a call) and the medians and the ratio printed, with how many of
the model's nodes cinnlite runs.

    python benchmarks/onnx_models.py [--scale 2000] [--rounds 15] [--only gcn,graphsage]
"""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402

import cinnlite as cl  # noqa: E402
import onnx_corpus  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=int, default=2000, help="input size multiplier (graphs: 20x nodes, 80x edges)")
    p.add_argument("--rounds", type=int, default=15)
    # onnxruntime's idle workers spin for about 40 ms after a call (measured here as 50 ms of CPU
    # time on its other threads after one 9 ms call): a shorter pause times the next
    # implementation on a machine whose other core is busy.
    p.add_argument("--pause", type=float, default=0.06, help="seconds between calls (default 0.06)")
    p.add_argument("--warm", type=int, default=0,
                   help="untimed calls of the same session right before each timed one (default 0: every timed call "
                        "follows the pause; with 5, the steady state of back-to-back calls)")
    p.add_argument("--only", default="", help="comma-separated model names")
    args = p.parse_args(argv)
    only = set(filter(None, args.only.split(",")))
    print(f"onnxruntime {ort.__version__} (CPUExecutionProvider, its default threads); cinnlite {cl.__version__}; "
          f"scale {args.scale}; {args.pause * 1e3:.0f} ms pause, then {args.warm} untimed call(s), before each timed one")
    print(f"{'model':<18}{'inputs':<34}{'cinnlite nodes':>16}{'cinnlite ms':>13}{'onnxruntime ms':>16}{'speedup':>9}"
          f"{'ort error':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for entry in onnx_corpus.CORPUS:
            if only and entry.name not in only:
                continue
            path = os.path.join(tmp, f"{entry.name}.onnx")
            with contextlib.redirect_stdout(io.StringIO()):
                onnx_corpus.export(entry, path)
            inputs = entry.make_inputs(args.scale, 0)
            feed = {k: v.numpy() for k, v in inputs.items()}
            torch.manual_seed(0)
            with torch.no_grad():
                expected = entry.make_module().eval()(*inputs.values())
            expected = [t.numpy() for t in (expected if isinstance(expected, tuple) else (expected,))]
            mine = cl.onnx.InferenceSession(path)
            theirs = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
            for g, w in zip(mine.run(None, feed), expected):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4, err_msg=entry.name)
            ort_error = max(float(np.abs(g - w).max()) if g.size else 0.0
                            for g, w in zip(theirs.run(None, feed), expected))
            times: dict = {"cinnlite": [], "onnxruntime": []}
            for _ in range(args.rounds):
                for name, session in (("cinnlite", mine), ("onnxruntime", theirs)):
                    time.sleep(args.pause)
                    for _ in range(args.warm):
                        session.run(None, feed)
                    t0 = time.perf_counter()
                    session.run(None, feed)
                    times[name].append(time.perf_counter() - t0)
            a, b = statistics.median(times["cinnlite"]), statistics.median(times["onnxruntime"])
            nodes = sum(len(s.nodes) for s in mine.segments)
            inside = sum(len(s.nodes) for s in mine.segments if s.kind == "cinnlite")
            shapes = " ".join(f"{k}{list(v.shape)}" for k, v in feed.items())
            print(f"{entry.name:<18}{shapes[:33]:<34}{f'{inside}/{nodes}':>16}{a * 1e3:>13.2f}{b * 1e3:>16.2f}"
                  f"{b / a:>8.2f}x{ort_error:>11.1e}")


if __name__ == "__main__":
    main()
