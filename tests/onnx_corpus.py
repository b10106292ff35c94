"""A corpus of real models: small PyTorch modules of the kinds that gather and scatter,
exported with ``torch.onnx.export`` (the exporter's default path) with symbolic sizes.

Each entry gives the module, example inputs at a size (``make_inputs(scale, seed)``) and the
input names and symbolic dimensions. ``export(entry, path)`` writes the ONNX file. Used by
tests/test_onnx_models.py and benchmarks/onnx_models.py.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


class GCNLayer(torch.nn.Module):
    """Symmetric-normalised graph convolution: a linear map, messages scaled by both degrees,
    summed at the target, plus a bias and a ReLU."""

    def __init__(self, features=16):
        super().__init__()
        self.lin = torch.nn.Linear(features, features, bias=False)
        self.bias = torch.nn.Parameter(torch.randn(features) * 0.1)

    def forward(self, x, src, dst):
        h = self.lin(x)
        ones = torch.ones_like(dst, dtype=x.dtype)
        degree = torch.zeros(x.shape[0], dtype=x.dtype).index_add(0, dst, ones) + 1.0
        scale = 1.0 / degree  # (the exporter keeps this a division)
        messages = h.index_select(0, src) * scale.index_select(0, src).unsqueeze(1)
        return torch.relu(torch.zeros_like(h).index_add(0, dst, messages) + h * scale.unsqueeze(1) + self.bias)


class SAGELayer(torch.nn.Module):
    """GraphSAGE with a mean aggregation: sum and count by target, their quotient (at least one),
    a linear map of it and one of the node itself."""

    def __init__(self, features=16):
        super().__init__()
        self.lin_neighbours = torch.nn.Linear(features, features)
        self.lin_self = torch.nn.Linear(features, features, bias=False)

    def forward(self, x, src, dst):
        total = torch.zeros_like(x).index_add(0, dst, x.index_select(0, src))
        count = torch.zeros(x.shape[0], dtype=x.dtype).index_add(0, dst, torch.ones_like(dst, dtype=x.dtype))
        mean = total / torch.maximum(count, torch.ones_like(count)).unsqueeze(1)
        return self.lin_neighbours(mean) + self.lin_self(x)


class GATLayer(torch.nn.Module):
    """Attention over edges with a scatter softmax: scores per edge, the maximum per target
    subtracted, exponentials summed per target, messages weighted by their share."""

    def __init__(self, features=16):
        super().__init__()
        self.lin = torch.nn.Linear(features, features, bias=False)
        self.att_src = torch.nn.Parameter(torch.randn(features) * 0.3)
        self.att_dst = torch.nn.Parameter(torch.randn(features) * 0.3)

    def forward(self, x, src, dst):
        h = self.lin(x)
        score = torch.nn.functional.leaky_relu((h * self.att_src).sum(1)[src] + (h * self.att_dst).sum(1)[dst], 0.2)
        top = torch.full((x.shape[0],), -1e30, dtype=x.dtype).scatter_reduce(0, dst, score, "amax")
        weight = torch.exp(score - top[dst])
        norm = torch.zeros(x.shape[0], dtype=x.dtype).index_add(0, dst, weight)
        alpha = weight / norm[dst]
        return torch.zeros_like(h).index_add(0, dst, h[src] * alpha.unsqueeze(1))


class EmbeddingBag(torch.nn.Module):
    """Sums of embedding rows per bag, bags given by offsets into a flat list of ids (as
    ``nn.EmbeddingBag(mode="sum")``): each id's bag is the number of offsets at or before it,
    minus one."""

    def __init__(self, rows=50, features=16):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(rows, features))

    def forward(self, ids, offsets):
        position = torch.arange(ids.shape[0])
        bag = (position.unsqueeze(1) >= offsets.unsqueeze(0)).to(torch.int64).sum(1) - 1
        rows = self.weight[ids]
        return torch.zeros(offsets.shape[0], self.weight.shape[1]).index_add(0, bag, rows)


class TokenEmbedding(torch.nn.Module):
    """A transformer's input: token plus position embeddings, then the last token's vector
    projected to logits."""

    def __init__(self, vocab=100, positions=64, features=16):
        super().__init__()
        self.tokens = torch.nn.Embedding(vocab, features)
        self.positions = torch.nn.Embedding(positions, features)
        self.head = torch.nn.Linear(features, vocab, bias=False)

    def forward(self, ids):
        h = self.tokens(ids) + self.positions(torch.arange(ids.shape[1])).unsqueeze(0)
        return h, self.head(h[:, -1])


class KNNGather(torch.nn.Module):
    """Point-cloud edge features: each point's k neighbours' features and relative positions,
    concatenated, mapped, and the largest taken over the neighbours (EdgeConv)."""

    def __init__(self, features=8, out=16):
        super().__init__()
        self.lin = torch.nn.Linear(features + 3, out)

    def forward(self, points, feats, neighbours):
        rel = points[neighbours] - points.unsqueeze(1)
        edge = torch.cat([feats[neighbours], rel], dim=2)
        return torch.relu(self.lin(edge)).amax(dim=1)


class TopKDispatch(torch.nn.Module):
    """Mixture-of-experts routing: each token's top-2 experts by a gate, its vector scattered
    (weighted) into the experts' rows, each expert a linear map, gathered back and combined."""

    def __init__(self, features=16, experts=4):
        super().__init__()
        self.gate = torch.nn.Linear(features, experts, bias=False)
        self.experts = torch.nn.Parameter(torch.randn(experts, features, features) * 0.2)

    def forward(self, x):
        weights, chosen = torch.topk(torch.softmax(self.gate(x), dim=1), 2, dim=1)
        tokens = x.shape[0]
        slot = chosen * tokens + torch.arange(tokens).unsqueeze(1)       # one row per (expert, token)
        rows = torch.zeros(self.experts.shape[0] * tokens, x.shape[1])
        rows = rows.index_add(0, slot.reshape(-1), x.repeat_interleave(2, dim=0))
        out = torch.matmul(rows.reshape(self.experts.shape[0], tokens, -1), self.experts)
        back = out.reshape(-1, x.shape[1])[slot.reshape(-1)].reshape(tokens, 2, -1)
        return (back * weights.unsqueeze(2)).sum(1)


def _graph_inputs(scale, seed, features=16):
    g = torch.Generator().manual_seed(seed)
    n, e = 20 * scale, 80 * scale
    return {"x": torch.randn(n, features, generator=g), "src": torch.randint(0, n, (e,), generator=g),
            "dst": torch.randint(0, n, (e,), generator=g)}


def _bag_inputs(scale, seed):
    g = torch.Generator().manual_seed(seed)
    bags = 4 * scale
    lengths = torch.randint(0, 6, (bags,), generator=g)
    offsets = torch.cumsum(lengths, 0) - lengths
    return {"ids": torch.randint(0, 50, (int(lengths.sum()) or 1,), generator=g), "offsets": offsets}


def _knn_inputs(scale, seed):
    g = torch.Generator().manual_seed(seed)
    n = 16 * scale
    return {"points": torch.randn(n, 3, generator=g), "feats": torch.randn(n, 8, generator=g),
            "neighbours": torch.randint(0, n, (n, 4), generator=g)}


@dataclass(frozen=True)
class Entry:
    name: str
    make_module: Callable
    make_inputs: Callable           # (scale, seed) -> {name: tensor}
    dynamic: dict                   # input name -> {axis: symbol}
    in_cinnlite: bool               # the whole model runs in cinnlite, without onnxruntime


GRAPH = {"x": {0: "N"}, "src": {0: "E"}, "dst": {0: "E"}}
CORPUS = [
    Entry("gcn", GCNLayer, _graph_inputs, GRAPH, True),
    Entry("graphsage", SAGELayer, _graph_inputs, GRAPH, True),
    Entry("gat", GATLayer, _graph_inputs, GRAPH, True),
    Entry("embedding_bag", EmbeddingBag, _bag_inputs, {"ids": {0: "T"}, "offsets": {0: "B"}}, True),
    Entry("token_embedding", TokenEmbedding,
          lambda scale, seed: {"ids": torch.randint(0, 100, (2 * scale, 12),
                                                    generator=torch.Generator().manual_seed(seed))},
          {"ids": {0: "B"}}, True),
    Entry("knn_gather", KNNGather, _knn_inputs, {"points": {0: "N"}, "feats": {0: "N"}, "neighbours": {0: "N"}},
          True),
    Entry("topk_dispatch", TopKDispatch,
          lambda scale, seed: {"x": torch.randn(8 * scale, 16, generator=torch.Generator().manual_seed(seed))},
          {"x": {0: "T"}}, True),
]


def export(entry: Entry, path: str) -> None:
    """Export ``entry``'s module (weights from a fixed seed) to ``path`` with symbolic sizes."""
    import warnings

    torch.manual_seed(0)
    module = entry.make_module().eval()
    inputs = entry.make_inputs(1, 0)
    dims = {name: {axis: torch.export.Dim(symbol, min=2) for axis, symbol in axes.items()}
            for name, axes in entry.dynamic.items()}
    shared: dict = {}
    for name, axes in dims.items():  # one Dim object per symbol, so equal sizes stay equal
        for axis, dim in list(axes.items()):
            axes[axis] = shared.setdefault(dim.__name__, dim)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, tuple(inputs.values()), path, input_names=list(inputs),
                          dynamic_shapes={n: dims.get(n, {}) for n in inputs}, dynamo=True, verbose=False)
