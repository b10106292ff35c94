"""Training a two-layer graph network with cinnlite's operators inside a PyTorch model.

The model: learnable node embeddings ``x``; layer 1 averages the neighbours' features (a mean
aggregation: gather by edge source, scatter-mean by edge target), layer 2 sums them weighted by
fixed edge weights; each layer adds a linear map of the aggregate to one of the node itself.
The same model runs three ways, differing only in the aggregations: cinnlite
(``cl.torch.compile`` of one program per aggregation, backward by ``cl.vjp``), pure PyTorch
(``index_select`` + ``scatter_reduce``/``index_add``) and PyTorch Geometric's ``scatter``.

First every implementation trains for ``--steps`` steps from the same initial weights and
the losses are compared at every step (relative difference at most 1e-5). Then training steps
(forward + backward + SGD update) are timed in interleaved rounds, a short pause between calls,
and the medians and the ratios to cinnlite printed.

    python benchmarks/gnn_training.py [--nodes 100000] [--edges 1000000] [--features 64]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np
import torch

import cinnlite as cl


def aggregation_programs(features: int):
    """The two aggregations as cinnlite programs over symbolic node and edge counts."""
    b = cl.NetBuilder("mean_aggregation")
    x = b.create_input("float32", ("N", features), "x")
    src, dst = b.create_input("int64", ("E",), "src"), b.create_input("int64", ("E",), "dst")
    messages = b.take(x, src, axis=0)
    at_dst = b.add(b.reshape(dst, (-1, 1)), b.fill_constant(messages.shape, 0, "int64"))
    mean = b.scatter(b.fill_constant(x.shape, 0, "float32"), at_dst, messages, reduce="mean", include_self=False)
    b2 = cl.NetBuilder("weighted_sum")
    h = b2.create_input("float32", ("N", features), "x")
    src2, dst2 = b2.create_input("int64", ("E",), "src"), b2.create_input("int64", ("E",), "dst")
    w = b2.create_input("float32", ("E",), "w")
    weighted = b2.multiply(b2.take(h, src2, axis=0), b2.reshape(w, (-1, 1)))
    at_dst2 = b2.add(b2.reshape(dst2, (-1, 1)), b2.fill_constant(weighted.shape, 0, "int64"))
    total = b2.scatter(b2.fill_constant(h.shape, 0, "float32"), at_dst2, weighted, reduce="add")
    return b.build([mean]), b2.build([total])


def cinnlite_aggregations(features: int):
    mean_program, sum_program = aggregation_programs(features)
    mean_f, sum_f = cl.torch.compile(mean_program), cl.torch.compile(sum_program)
    return (lambda x, src, dst: mean_f(x=x, src=src, dst=dst),
            lambda x, src, dst, w: sum_f(x=x, src=src, dst=dst, w=w))


def torch_aggregations():
    def mean(x, src, dst):
        index = dst.view(-1, 1).expand(-1, x.shape[1])
        return x.new_zeros(x.shape).scatter_reduce(0, index, x.index_select(0, src), "mean", include_self=False)

    def weighted(x, src, dst, w):
        return x.new_zeros(x.shape).index_add(0, dst, x.index_select(0, src) * w.view(-1, 1))
    return mean, weighted


def pyg_aggregations():
    from torch_geometric.utils import scatter

    def mean(x, src, dst):
        return scatter(x.index_select(0, src), dst, dim=0, dim_size=x.shape[0], reduce="mean")

    def weighted(x, src, dst, w):
        return scatter(x.index_select(0, src) * w.view(-1, 1), dst, dim=0, dim_size=x.shape[0], reduce="sum")
    return mean, weighted


class GraphNetwork(torch.nn.Module):
    def __init__(self, nodes: int, features: int, mean, weighted):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.x = torch.nn.Parameter(torch.randn(nodes, features, generator=g))
        self.lin1, self.root1 = torch.nn.Linear(features, features), torch.nn.Linear(features, features)
        self.lin2, self.root2 = torch.nn.Linear(features, features), torch.nn.Linear(features, features)
        for lin in (self.lin1, self.root1, self.lin2, self.root2):
            torch.nn.init.normal_(lin.weight, std=features ** -0.5, generator=g)
            torch.nn.init.zeros_(lin.bias)
        self.mean, self.weighted = mean, weighted

    def forward(self, src, dst, w):
        h = torch.relu(self.lin1(self.mean(self.x, src, dst)) + self.root1(self.x))
        return self.lin2(self.weighted(h, src, dst, w)) + self.root2(h)


def make_step(model, src, dst, w, target, lr=0.1):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)

    def step():
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(src, dst, w), target)
        loss.backward()
        optimizer.step()
        return loss.item()
    return step


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=100_000)
    p.add_argument("--edges", type=int, default=1_000_000)
    p.add_argument("--features", type=int, default=64)
    p.add_argument("--steps", type=int, default=20, help="training steps whose losses are compared")
    p.add_argument("--rounds", type=int, default=10, help="timed rounds (one step of each per round)")
    p.add_argument("--pause", type=float, default=0.005, help="seconds between timed calls")
    args = p.parse_args(argv)
    torch.manual_seed(1)
    n, e, f = args.nodes, args.edges, args.features
    src, dst = torch.randint(0, n, (e,)), torch.randint(0, n, (e,))
    w = torch.rand(e)
    target = torch.randn(n, f)
    impls = {"cinnlite": cinnlite_aggregations(f), "pytorch": torch_aggregations()}
    try:
        impls["pyg"] = pyg_aggregations()
    except ImportError:
        print("PyTorch Geometric is not installed: comparing with PyTorch alone")
    steps = {name: make_step(GraphNetwork(n, f, *aggs), src, dst, w, target) for name, aggs in impls.items()}
    print(f"graph: {n} nodes, {e} edges, {f} features; torch {torch.__version__}, {torch.get_num_threads()} threads")
    losses = {name: [step() for _ in range(args.steps)] for name, step in steps.items()}
    worst = 0.0
    for name in impls:
        for k, (a, b) in enumerate(zip(losses["cinnlite"], losses[name])):
            diff = abs(a - b) / max(abs(b), 1e-30)
            worst = max(worst, diff)
            if diff > 1e-5:
                sys.exit(f"loss of {name} differs from cinnlite's at step {k}: {b!r} vs {a!r}")
    print(f"losses over {args.steps} steps agree (largest relative difference {worst:.1e}); "
          f"first {losses['pytorch'][0]:.6f}, last {losses['pytorch'][-1]:.6f}")
    times = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            time.sleep(args.pause)
            t0 = time.perf_counter()
            step()
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["cinnlite"])
    print(f"{'implementation':<16}{'median step (ms)':>18}{'cinnlite speedup':>18}")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"{name:<16}{med * 1e3:>18.1f}{med / base:>17.2f}x")


if __name__ == "__main__":
    main()
