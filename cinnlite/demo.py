"""``cinnlite demo``: build a graph that uses every operator, compile it, run it, check it
against numpy and show the generated code."""
from __future__ import annotations

import sys

import numpy as np

import cinnlite as cl
from cinnlite import Float, Int, NetBuilder


def build_demo_program():
    b = NetBuilder("demo")
    x = b.create_input(Float(32), (4, 3), "x")
    i = b.create_input(Int(64), (2, 3), "i")
    rows = b.create_input(Int(32), (3,), "rows")
    g = b.gather(x, i, axis=0)                                   # elements along axis 0
    t = b.take(x, rows, axis=0, mode="wrap")                     # whole rows, wrapped
    nd = b.gather_nd(x, b.constant(np.array([[0, 2], [3, -1]], np.int64)))   # index tuples
    z = b.fill_constant((4, 3), 0.0, "float32")
    s = b.scatter(z, i, g, axis=0)                               # the inverse of the gather
    acc = b.scatter_nd(z, b.reshape(rows, (3, 1)), t, reduce="add", mode="wrap")  # rows summed
    return b.build([g, t, nd, s, acc])


def reference(x, i, rows):
    g = np.take_along_axis(x, i, axis=0)
    t = np.take(x, rows, axis=0, mode="wrap")
    nd = x[[0, 3], [2, -1]]
    s = np.zeros((4, 3), np.float32)
    for p in np.ndindex(i.shape):                                # row-major, last write wins
        s[i[p], p[1]] = g[p]
    acc = np.zeros((4, 3), np.float32)
    np.add.at(acc, np.mod(rows, 4), t)
    return g, t, nd, s, acc


def kernel_llvm(module_text: str, kernel: str) -> str:
    """The definitions of a kernel's stage functions in a module's text."""
    blocks = module_text.split("\ndefine ")
    prefix = f"k_{kernel}_s"
    keep = ["define " + b.split("\n}\n")[0] + "\n}" for b in blocks[1:]
            if b.split("(")[0].split("@")[-1].strip('"').startswith(prefix) and "_impl" in b.split("(")[0]]
    return "\n\n".join(keep)


def main(out=sys.stdout) -> int:
    prog = build_demo_program()
    exe = cl.compile(prog, target="cpu")
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    i = np.array([[0, 1, 1], [3, 2, 0]], np.int64)
    rows = np.array([2, -1, 5], np.int32)
    got = exe(x=x, i=i, rows=rows)
    want = reference(x, i, rows)
    ok = all(np.array_equal(a, w) for a, w in zip(got, want))
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p("== graph ==")
    p(exe.source("graph"))
    p("\n== loop nests (after the CPU passes) ==")
    p(exe.source("lowered"))
    kernel = "scatter_0"
    p(f"\n== LLVM IR of kernel {kernel} (one function per stage) ==")
    p(kernel_llvm(exe.source("llvm"), kernel))
    p("== results ==")
    for t, a, w in zip(prog.outputs, got, want):
        status = "ok" if np.array_equal(a, w) else "MISMATCH"
        p(f"{t.name} {list(a.shape)} {status}:\n{a}")
    p("\nall outputs match numpy" if ok else "\nFAILED: outputs differ from numpy")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
