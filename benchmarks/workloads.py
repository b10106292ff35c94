"""The workloads W1-W7: their inputs, their bytes moved, their numpy reference and their
cinnlite program (W8, compile time, reuses the programs of W1-W6; see compile_time.py).

A ``Workload`` makes a ``Case`` (inputs from a fixed seed, sizes divided by about 10 with
``--quick``) and builds the cinnlite program for it; the other libraries' implementations of
the same work are in peers.py.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import numpy as np

from arrays import aligned_empty, rand_f32, rand_idx

SEED = 20240607
WORKLOAD_IDS = ("W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8")


@dataclass
class Case:
    arrays: dict                      # name -> numpy array (the cinnlite input names)
    bytes_moved: int                  # minimal bytes read + written (see bytes_formula)
    bytes_formula: str
    shapes: str
    exact: bool                       # gathers are exact; reductions get a tolerance
    reference: object = None          # () -> the expected result (numpy, float64 where it sums)
    extra: dict = field(default_factory=dict)


class Workload:
    id = "W?"
    title = ""
    peers_text = ""

    def __init__(self, quick: bool):
        self.quick = quick

    def case(self, rng) -> Case:
        raise NotImplementedError

    def cinnlite_program(self, case: Case):
        raise NotImplementedError


def cinnlite_compile(program, threads: int):
    """``cl.compile(program, target="cpu", threads=threads)`` (threads only if accepted)."""
    import cinnlite as cl
    kwargs = {"target": "cpu"}
    if "threads" in inspect.signature(cl.compile).parameters:
        kwargs["threads"] = threads
    return cl.compile(program, **kwargs)


class TakeRows(Workload):
    id, title = "W1", "take rows, axis 0"
    peers_text = "torch.index_select, np.take, TVM topi.take"

    def dims(self):
        return (5_000, 128, 10_000) if self.quick else (50_000, 128, 100_000)

    def case(self, rng):
        rows, cols, n = self.dims()
        x, idx = rand_f32(rng, (rows, cols)), rand_idx(rng, rows, (n,))
        moved = n * 8 + 2 * n * cols * 4
        return Case({"x": x, "idx": idx}, moved, "idx (n*8) + gathered rows read (n*d*4) + out written (n*d*4)",
                    f"x {x.shape}, idx {idx.shape}", True, lambda: x[idx])

    def cinnlite_program(self, case):
        from cinnlite import NetBuilder
        x, idx = case.arrays["x"], case.arrays["idx"]
        b = NetBuilder("w1_take")
        xt = b.create_input("float32", x.shape, "x")
        it = b.create_input("int64", idx.shape, "idx")
        return b.build([b.take(xt, it, axis=0)])


class GatherElements(Workload):
    id, title = "W2", "gather elements, axis 1"
    peers_text = "torch.gather, np.take_along_axis, TVM topi.gather"

    def dims(self):
        return (256, 4096, 1024) if self.quick else (2048, 4096, 1024)

    def case(self, rng):
        rows, cols, k = self.dims()
        x, idx = rand_f32(rng, (rows, cols)), rand_idx(rng, cols, (rows, k))
        moved = idx.size * (8 + 4 + 4)
        return Case({"x": x, "index": idx}, moved, "index (m*8) + gathered elements read (m*4) + out written (m*4)",
                    f"x {x.shape}, index {idx.shape}", True, lambda: np.take_along_axis(x, idx, axis=1))

    def cinnlite_program(self, case):
        from cinnlite import NetBuilder
        x, idx = case.arrays["x"], case.arrays["index"]
        b = NetBuilder("w2_gather")
        xt = b.create_input("float32", x.shape, "x")
        it = b.create_input("int64", idx.shape, "index")
        return b.build([b.gather(xt, it, axis=1)])


class GatherND(Workload):
    id, title = "W3", "gather_nd, index tuples of 2"
    peers_text = "numpy / torch advanced indexing, TVM topi.gather_nd"

    def dims(self):
        return (1024, 1024, 100_000) if self.quick else (1024, 1024, 1_000_000)

    def case(self, rng):
        rows, cols, n = self.dims()
        x = rand_f32(rng, (rows, cols))
        idx = aligned_empty((n, 2), np.int64)
        idx[:, 0] = rng.integers(0, rows, n)
        idx[:, 1] = rng.integers(0, cols, n)
        moved = n * (2 * 8 + 4 + 4)
        return Case({"x": x, "index": idx}, moved, "index (n*2*8) + elements read (n*4) + out written (n*4)",
                    f"x {x.shape}, index {idx.shape}", True, lambda: x[idx[:, 0], idx[:, 1]])

    def cinnlite_program(self, case):
        from cinnlite import NetBuilder
        x, idx = case.arrays["x"], case.arrays["index"]
        b = NetBuilder("w3_gather_nd")
        xt = b.create_input("float32", x.shape, "x")
        it = b.create_input("int64", idx.shape, "index")
        return b.build([b.gather_nd(xt, it)])


class ScatterNDAddRows(Workload):
    id, title = "W4", "scatter_nd add rows (duplicates)"
    peers_text = "torch.index_add_, np.add.at"

    def dims(self):
        return (1_000, 128, 20_000) if self.quick else (10_000, 128, 200_000)

    def case(self, rng):
        rows, cols, n = self.dims()
        idx, src = rand_idx(rng, rows, (n, 1)), rand_f32(rng, (n, cols))

        def reference():
            out = np.zeros((rows, cols), np.float64)
            np.add.at(out, idx[:, 0], src)
            return out

        moved = n * 8 + n * cols * 4 + rows * cols * 4
        return Case({"index": idx, "src": src}, moved, "index (n*8) + src read (n*d*4) + out written once (r*d*4)",
                    f"zeros ({rows}, {cols}), index {idx.shape}, src {src.shape}", False, reference,
                    {"shape": (rows, cols)})

    def cinnlite_program(self, case):
        from cinnlite import NetBuilder
        idx, src = case.arrays["index"], case.arrays["src"]
        b = NetBuilder("w4_scatter_nd_add")
        zeros = b.fill_constant(case.extra["shape"], 0.0, "float32")
        it = b.create_input("int64", idx.shape, "index")
        st = b.create_input("float32", src.shape, "src")
        return b.build([b.scatter_nd(zeros, it, st, reduce="add")])


class ScatterAddAxis1(Workload):
    id, title = "W5", "scatter add, axis 1"
    peers_text = "torch.scatter_add_"

    def dims(self):
        return (256, 4096, 1024) if self.quick else (2048, 4096, 1024)

    def case(self, rng):
        rows, cols, k = self.dims()
        idx, src = rand_idx(rng, cols, (rows, k)), rand_f32(rng, (rows, k))

        def reference():
            out = np.zeros((rows, cols), np.float64)
            np.add.at(out, (np.arange(rows)[:, None], idx), src)
            return out

        moved = idx.size * (8 + 4) + rows * cols * 4
        return Case({"index": idx, "src": src}, moved, "index (m*8) + src read (m*4) + out written once (r*c*4)",
                    f"zeros ({rows}, {cols}), index {idx.shape}, src {src.shape}", False, reference,
                    {"shape": (rows, cols)})

    def cinnlite_program(self, case):
        from cinnlite import NetBuilder
        idx, src = case.arrays["index"], case.arrays["src"]
        b = NetBuilder("w5_scatter_add")
        zeros = b.fill_constant(case.extra["shape"], 0.0, "float32")
        it = b.create_input("int64", idx.shape, "index")
        st = b.create_input("float32", src.shape, "src")
        return b.build([b.scatter(zeros, it, st, axis=1, reduce="add")])


class MessagePassing(Workload):
    id, title = "W6", "message passing: scatter_nd(take)"
    peers_text = "torch index_select + index_add_; np.take + np.add.at"

    def dims(self):
        return (10_000, 64, 100_000) if self.quick else (100_000, 64, 1_000_000)

    def case(self, rng):
        nodes, feat, edges = self.dims()
        x = rand_f32(rng, (nodes, feat))
        src, dst = rand_idx(rng, nodes, (edges,)), rand_idx(rng, nodes, (edges,))

        def reference():
            out = np.zeros((nodes, feat), np.float64)
            np.add.at(out, dst, x[src])
            return out

        moved = 2 * edges * 8 + edges * feat * 4 + nodes * feat * 4
        # dst is given to cinnlite as dst[:, None] (a view): the index tuples of scatter_nd.
        return Case({"x": x, "src": src, "dst": dst[:, None]}, moved,
                    "src + dst (2*e*8) + gathered rows read (e*d*4) + out written once (n*d*4); "
                    "the e*d intermediate of the unfused form is not counted",
                    f"x {x.shape}, src/dst ({edges},), out ({nodes}, {feat})", False, reference,
                    {"shape": (nodes, feat), "intermediate_bytes": edges * feat * 4,
                     "output_bytes": nodes * feat * 4})

    def cinnlite_program(self, case):
        from cinnlite import NetBuilder
        x, src, dst = case.arrays["x"], case.arrays["src"], case.arrays["dst"]
        b = NetBuilder("w6_message_passing")
        xt = b.create_input("float32", x.shape, "x")
        st = b.create_input("int64", src.shape, "src")
        dt = b.create_input("int64", dst.shape, "dst")
        messages = b.take(xt, st, axis=0)
        zeros = b.fill_constant(case.extra["shape"], 0.0, "float32")
        return b.build([b.scatter_nd(zeros, dt, messages, reduce="add")])


class CallOverhead(Workload):
    id, title = "W7", "per-call overhead: take of 8 elements"
    peers_text = "np.take, torch.index_select"

    def case(self, rng):
        x, idx = rand_f32(rng, (8,)), rand_idx(rng, 8, (8,))
        return Case({"x": x, "idx": idx}, 8 * 8 + 2 * 8 * 4, "idx + read + write (not meaningful at this size)",
                    "x (8,), idx (8,)", True, lambda: x[idx])

    cinnlite_program = TakeRows.cinnlite_program


WORKLOADS = {cls.id: cls for cls in (TakeRows, GatherElements, GatherND, ScatterNDAddRows, ScatterAddAxis1,
                                     MessagePassing, CallOverhead)}
