"""``cinnlite demo``: one message-passing step of a graph neural network, told in one screen.

Every node sums the features of its in-neighbours, each scaled by its edge's weight:
``out[dst[e]] += w[e] * x[src[e]]``, a gather, a multiply and a scatter-add. The demo shows what
cinnlite makes of it: the graph; the loop nest of the kernel that does the work, after the CPU
passes (fusion folds the three operators into it, so the edges' messages never exist in memory);
the optimised LLVM IR of that nest's hottest loop; and its time beside numpy's and PyTorch's
(PyTorch only where it is installed), once all of them agree. A last line checks a small graph
of every operator against numpy.

The demo prints the same stage texts as ``exe.source`` and ``cinnlite emit``, cut down to the
part that matters, so that the whole story fits on one screen.
"""
from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from typing import Callable, TextIO

import numpy as np

import cinnlite as cl
from cinnlite import Float, Int, NetBuilder, Program
from cinnlite.codegen.llvm import StageInfo, stage_plan

NODES, FEATURES, EDGES = 10_000, 32, 100_000
RUNS = 5                # timed runs per implementation; the median is shown
IR_LINES = 30           # the most lines of LLVM IR shown; the rest is counted, not printed


# -- the message-passing step -------------------------------------------------------------------


def build_message_passing() -> Program:
    """``out[dst[e]] += w[e] * x[src[e]]`` over every edge ``e``, as one cinnlite program."""
    b = NetBuilder("message_passing")
    x = b.create_input(Float(32), (NODES, FEATURES), "x")
    src = b.create_input(Int(64), (EDGES,), "src")
    dst = b.create_input(Int(64), (EDGES,), "dst")
    w = b.create_input(Float(32), (EDGES, 1), "w")
    messages = b.multiply(b.take(x, src, axis=0), w)
    zeros = b.fill_constant((NODES, FEATURES), 0.0, "float32")
    return b.build([b.scatter_nd(zeros, b.reshape(dst, (EDGES, 1)), messages, reduce="add")])


def message_passing_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    """A random graph: uniform edges, normal features, weights in [0, 1)."""
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((NODES, FEATURES), dtype=np.float32),
            "src": rng.integers(0, NODES, EDGES), "dst": rng.integers(0, NODES, EDGES),
            "w": rng.random((EDGES, 1), dtype=np.float32)}


def numpy_message_passing(x, src, dst, w) -> np.ndarray:
    """The idiomatic numpy spelling: materialise the messages, then ``np.add.at``, which applies
    the updates in edge order as cinnlite does, so the two agree to the bit."""
    out = np.zeros((NODES, FEATURES), np.float32)
    np.add.at(out, dst, w * x[src])
    return out


def torch_message_passing(arrays: dict[str, np.ndarray]) -> Callable[[], np.ndarray] | None:
    """PyTorch's spelling, ``index_select`` then ``index_add_``, as a function of no arguments;
    None where torch is not installed."""
    try:
        import torch
    except ImportError:
        return None
    x, src, dst, w = (torch.from_numpy(arrays[k]) for k in ("x", "src", "dst", "w"))

    def run() -> np.ndarray:
        return torch.zeros(NODES, FEATURES).index_add_(0, dst, w * x.index_select(0, src)).numpy()
    return run


# -- every operator, checked --------------------------------------------------------------------


def build_demo_program() -> Program:
    """A small graph that uses every indexing operator, with the negative, wrapped and repeated
    indices that make them interesting."""
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


def demo_inputs() -> dict[str, np.ndarray]:
    return {"x": np.arange(12, dtype=np.float32).reshape(4, 3), "i": np.array([[0, 1, 1], [3, 2, 0]], np.int64),
            "rows": np.array([2, -1, 5], np.int32)}


def reference(x, i, rows) -> tuple[np.ndarray, ...]:
    """The outputs of ``build_demo_program`` computed with numpy."""
    g = np.take_along_axis(x, i, axis=0)
    t = np.take(x, rows, axis=0, mode="wrap")
    nd = x[[0, 3], [2, -1]]
    s = np.zeros((4, 3), np.float32)
    for p in np.ndindex(i.shape):                                # row-major, last write wins
        s[i[p], p[1]] = g[p]
    acc = np.zeros((4, 3), np.float32)
    np.add.at(acc, np.mod(rows, 4), t)
    return g, t, nd, s, acc


def every_operator_matches_numpy() -> bool:
    exe = cl.compile(build_demo_program(), target="cpu")
    arrays = demo_inputs()
    return all(np.array_equal(a, w) for a, w in zip(exe(**arrays), reference(**arrays)))


# -- cutting the stage texts down to the hot loop -----------------------------------------------


def hottest_stage(exe) -> tuple[StageInfo, int]:
    """The stage function that runs the most innermost iterations, and its place among its
    kernel's stages. A deferred check runs only after an earlier stage flagged a bad index, so it
    never counts as hot."""
    plan = [info for info, _ in stage_plan(exe.lowered)]
    hot = max((info for info in plan if info.kind != "deferred_check"), key=lambda info: info.work)
    return hot, [info for info in plan if info.kernel == hot.kernel].index(hot)


def kernel_text(lowered: str, kernel: str) -> str:
    """One kernel's loop nests, out of the text of the ``lowered`` stage."""
    for text in lowered.split("\n\n"):
        if text.startswith(f"kernel {kernel}("):
            return text
    raise ValueError(f"the lowered program has no kernel {kernel!r}")


def fold_other_stages(kernel: str, hot: int) -> str:
    """The kernel's text with every top-level statement but stage ``hot`` folded onto one line:
    the stages are the kernel's top-level statements, in order (``transform.kernel_stages``)."""
    head, *body, tail = kernel.split("\n")
    allocs = [line for line in body if line.startswith("  alloc ")]
    stages: list[list[str]] = []
    for line in body[len(allocs):]:
        starts_statement = line.startswith("  ") and line[2] not in " }"
        if starts_statement or not stages:
            stages.append([])
        stages[-1].append(line)
    lines = [head] + allocs
    for k, stage in enumerate(stages):
        lines += stage if k == hot or len(stage) == 1 else [_folded(stage)]
    return "\n".join(lines + [tail])


def _folded(stage: list[str]) -> str:
    """``for c0 in 0..7 {  # kind`` and its body as ``for c0 in 0..7 { ... }  # kind (5 lines)``."""
    opening, _, comment = stage[0].partition("{")
    return f"{opening}{{ ... }}{comment} ({len(stage)} lines)"


# ``select(((uint64(v) + uint64(s)) >= uint64(2s)), 0, select((v < 0), (v + s), v))``: an index
# resolved into [0, s) (``lower._checked_position``).
_RESOLVED_INDEX = re.compile(r"select\(\(\(uint64\((?P<v>\w+(?:\[[^\[\]]*\])?)\) \+ uint64\((?P<s>\d+)\)\) >= "
                             r"uint64\((?P<twice>\d+)\)\), 0, select\(\((?P=v) < 0\), \((?P=v) \+ (?P=s)\), (?P=v)\)\)")


def abbreviate_resolved_indices(text: str) -> tuple[str, list[str]]:
    """Write every resolved index (negative counts from the end, 0 for a value the check flags)
    as ``n(v)``, and return the definitions of the names used. The expression repeats four
    times on one line of a scatter; spelled out once, the loop nest reads at a glance."""
    sizes = sorted({int(m["s"]) for m in _RESOLVED_INDEX.finditer(text) if int(m["twice"]) == 2 * int(m["s"])})
    names = {s: "n" if len(sizes) == 1 else f"n{s}" for s in sizes}

    def shorten(m: re.Match) -> str:
        size = int(m["s"])
        return f"{names[size]}({m['v']})" if size in names and int(m["twice"]) == 2 * size else m[0]
    legend = [f"where {name}(v) = select(((uint64(v) + uint64({s})) >= uint64({2 * s})), 0, "
              f"select((v < 0), (v + {s}), v))" for s, name in names.items()]
    return _RESOLVED_INDEX.sub(shorten, text), legend


@dataclass
class BasicBlock:
    """A basic block of an LLVM function's text: its label and its instruction lines."""

    label: str
    lines: list[str]

    def successors(self) -> list[str]:
        # "label %x" occurs only in terminators (br, switch, ...), never in other instructions.
        return re.findall(r"label %([-\w.$]+)", "\n".join(self.lines))

    def has_vector_code(self) -> bool:
        return any(_VECTOR_TYPE.search(line) for line in self.lines)

    def has_vector_stores(self) -> bool:
        return any(_VECTOR_STORE.search(line) for line in self.lines)


_VECTOR_TYPE = re.compile(r"<\d+ x ")
_VECTOR_STORE = re.compile(r"^\s*store <\d+ x ")
_LABEL = re.compile(r"^([-\w.$]+):")
_METADATA = re.compile(r", ![\w.]+ !\d+")      # ", !alias.scope !21": for the optimiser, not the reader


def function_blocks(module: str, symbol: str) -> list[BasicBlock]:
    """The basic blocks of the definition of ``@symbol`` in an LLVM module's text."""
    head = re.search(rf'^define [^\n]*@"?{re.escape(symbol)}"?\(', module, re.M)
    if head is None:
        raise ValueError(f"the module defines no function {symbol!r}")
    body = module[head.end():module.index("\n}", head.end())].split("\n")[1:]
    blocks = [BasicBlock("", [])]                   # the entry block may have no label
    for line in body:
        label = _LABEL.match(line)
        if label:
            blocks.append(BasicBlock(label[1], []))
        elif line.strip():
            blocks[-1].lines.append(line)
    return [b for b in blocks if b.label or b.lines]


def natural_loops(blocks: list[BasicBlock]) -> list[set[str]]:
    """The blocks of every loop, one set per back edge. LLVM lays a loop's header out before its
    latch, so an edge to a block at or above its source is a back edge."""
    position = {b.label: k for k, b in enumerate(blocks)}
    preds: dict[str, set[str]] = {b.label: set() for b in blocks}
    for b in blocks:
        for succ in b.successors():
            preds.setdefault(succ, set()).add(b.label)
    loops = []
    for b in blocks:
        for header in b.successors():
            if position.get(header, len(blocks)) <= position[b.label]:
                body, todo = {header}, [b.label]
                while todo:
                    label = todo.pop()
                    if label not in body:
                        body.add(label)
                        todo.extend(preds[label])
                loops.append(body)
    return loops


def hot_loop_blocks(blocks: list[BasicBlock]) -> tuple[list[BasicBlock], int]:
    """The blocks worth reading in a stage function: those with vector code in the innermost loop
    that stores vectors (else that has any vector code; else that loop's blocks: a loop that only
    tests indices, ahead of the loop that moves the data, is not the one to show), with one copy
    of a body the unroller repeated. Returns the blocks and how many copies of them the loop
    holds."""
    vector = {b.label for b in blocks if b.has_vector_code()}
    stores = {b.label for b in blocks if b.has_vector_stores()}
    loops = natural_loops(blocks)
    candidates = ([loop for loop in loops if loop & stores] or [loop for loop in loops if loop & vector] or loops
                  or [{b.label for b in blocks}])
    loop = min(candidates, key=len)
    keep = (loop & vector) or loop
    chosen = [b for b in blocks if b.label in keep]
    copies = [re.fullmatch(r"(.+)\.(\d+)", b.label) for b in chosen]   # the unroller's "x.1", "x.2", ...
    unrolled = [m for m in copies if m and m[1] in keep]
    first = [b for b, m in zip(chosen, copies) if not (m and m[1] in keep)]
    return first, 1 + max((int(m[2]) for m in unrolled), default=0)


def ir_lines(blocks: list[BasicBlock], limit: int = IR_LINES) -> list[str]:
    """The blocks as text without metadata attachments, cut at ``limit`` lines."""
    lines = []
    for b in blocks:
        lines.append(f"{b.label}:")
        lines += [_METADATA.sub("", line) for line in b.lines]
    if len(lines) > limit:
        lines = lines[:limit - 1] + [f"  ... {len(lines) - limit + 1} more lines"]
    return lines


# -- timing ---------------------------------------------------------------------------------------


def median_seconds(run: Callable[[], object], runs: int = RUNS) -> float:
    """The median wall time of ``runs`` calls, after one untimed call (page faults of first use
    and lazy initialisation are not what the comparison is about)."""
    run()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def agreement(got: np.ndarray, want: np.ndarray) -> str | None:
    """How closely a result matches numpy's, in words; None if it does not."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return None
    if np.array_equal(got, want):
        return "bit-identical to numpy"
    return "equal to numpy within 1e-5" if np.allclose(got, want, rtol=1e-5, atol=1e-5) else None


# -- the story --------------------------------------------------------------------------------------


def main(out: TextIO = sys.stdout) -> int:
    """Tell the story on ``out``; 0 if every result matched numpy, else 1."""
    def say(*lines: str) -> None:
        for line in lines:
            print(line, file=out)

    exe = cl.compile(build_message_passing(), target="cpu")
    say(f"cinnlite demo: message passing, out[dst[e]] += w[e] * x[src[e]], on {NODES} nodes x {FEATURES} "
        f"features and {EDGES} edges", "", "== graph ==", exe.source("graph"))

    stage, place = hottest_stage(exe)
    nest, legend = abbreviate_resolved_indices(fold_other_stages(kernel_text(exe.source("lowered"), stage.kernel),
                                                                 place))
    say("", f"== hot loop nest: kernel {stage.kernel} after fusion and the CPU passes ==", nest, *legend)

    blocks, copies = hot_loop_blocks(function_blocks(exe.source("llvm_opt"), stage.symbol))
    what = "vector code" if any(b.has_vector_code() for b in blocks) else "body"
    unrolled = f" (unrolled {copies}x, one copy shown)" if copies > 1 else ""
    say("", f"== optimised LLVM IR of {stage.symbol}: the hot loop's {what}{unrolled}, metadata dropped ==",
        *ir_lines(blocks))

    status = say_times(say, exe, message_passing_inputs())
    every_operator_ok = every_operator_matches_numpy()
    say("", "every operator (take, gather, gather_nd, scatter, scatter_nd) on a small graph: "
        + ("matches numpy" if every_operator_ok else "FAILED: differs from numpy"))
    return status if every_operator_ok else 1


def say_times(say: Callable[..., None], exe, arrays: dict[str, np.ndarray]) -> int:
    """Check cinnlite and PyTorch against numpy, then time the three; 1 if cinnlite disagrees."""
    want = numpy_message_passing(**arrays)
    verdict = agreement(exe(**arrays), want)
    say("", f"== time: median of {RUNS} runs, once the results are checked against numpy ==",
        "             median   / cinnlite")
    if verdict is None:
        say("FAILED: cinnlite's result differs from numpy's")
        return 1
    base = median_seconds(lambda: exe(**arrays))
    say(f"cinnlite {base * 1e3:9.2f} ms      1.0x  one fused kernel; {verdict}")
    numpy_time = median_seconds(lambda: numpy_message_passing(**arrays))
    say(f"numpy    {numpy_time * 1e3:9.2f} ms {numpy_time / base:8.1f}x  np.add.at(out, dst, w * x[src])")
    torch_run = torch_message_passing(arrays)
    if torch_run is None:
        say("torch    not installed (pip install torch to compare)")
        return 0
    torch_verdict = agreement(torch_run(), want)
    if torch_verdict is None:
        say("torch    not timed: its result differs from numpy's")
        return 0
    torch_time = median_seconds(torch_run)
    say(f"torch    {torch_time * 1e3:9.2f} ms {torch_time / base:8.1f}x  "
        f"zeros(n, f).index_add_(0, dst, w * x.index_select(0, src)); {torch_verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
