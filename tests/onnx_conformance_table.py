"""Run the ONNX conformance cases on each backend and print (or write) the Markdown table.

Each cell is the outcome of ``check_case`` from ``tests/test_onnx_conformance.py``, the same
function the conformance test runs, so the table says what the test says.

    python tests/onnx_conformance_table.py                       # the backends the tests use
    python tests/onnx_conformance_table.py --backends cpu,cuda-emu
    python tests/onnx_conformance_table.py --write README.md  # replace the table in the page

With ``--write`` the table replaces the lines between ``<!-- conformance:begin -->`` and
``<!-- conformance:end -->`` in the given file. The exit status is 1 when a case fails.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- conformance:begin -->", "<!-- conformance:end -->"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = f"{type(exc).__name__}: {text}"
    return text if len(text) <= 90 else text[:87] + "..."


def run(backends):
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    import onnx
    import test_onnx_conformance as conformance

    rows, failures = [], 0
    for case in conformance.CASES:
        ops = sorted({n.op_type for n in case.model.graph.node})
        opset = next((o.version for o in case.model.opset_import if o.domain in ("", "ai.onnx")), "?")
        cells = []
        for backend in backends:
            try:
                conformance.check_case(case, backend)
                cells.append("pass")
            except Exception as exc:   # the cell records whatever made the case fail
                failures += 1
                cells.append(f"**FAIL** ({_one_line(exc)})".replace("|", "\\|"))
        rows.append((case.name, ", ".join(ops), opset, cells))
    header = f"| case | operator | opset | {' | '.join(backends)} |"
    rule = "|---|---|---|" + "---|" * len(backends)
    lines = [header, rule] + [f"| `{name}` | {ops} | {opset} | {' | '.join(cells)} |"
                              for name, ops, opset, cells in rows]
    passed = len(rows) * len(backends) - failures
    summary = (f"{len(rows)} cases from onnx {onnx.__version__}; {passed} of {len(rows) * len(backends)} "
               f"case-backend runs pass.")
    return "\n".join(lines) + "\n\n" + summary, failures


def write(path: str, table: str):
    with open(path) as f:
        text = f.read()
    pattern = re.compile(re.escape(BEGIN) + r".*?" + re.escape(END), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{path}: no {BEGIN} ... {END} block to replace")
    text = pattern.sub(lambda _: f"{BEGIN}\n{table}\n{END}", text)
    with open(path, "w") as f:
        f.write(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", help="comma-separated targets (default: tests/backends.py BACKENDS)")
    parser.add_argument("--write", metavar="FILE", help="replace the table block in FILE instead of printing")
    args = parser.parse_args(argv)
    if args.backends:
        backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    else:
        sys.path.insert(0, os.path.join(ROOT, "tests"))
        from backends import BACKENDS
        backends = list(BACKENDS)
    start = time.perf_counter()
    table, failures = run(backends)
    if args.write:
        write(args.write, table)
        print(f"wrote the table for {', '.join(backends)} to {args.write} "
              f"({failures} failures, {time.perf_counter() - start:.1f} s)")
    else:
        print(table)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
