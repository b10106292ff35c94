"""cinnlite programs over Dask arrays: :func:`run`.

``run(program, **inputs)`` turns every node of a program into a *partition plan* over the
chunks of its operands, and returns lazily built dask arrays. Building them runs nothing, not
even the index chunks: every routing decision is made inside the tasks, which the scheduler the
user has (threads by default, a ``dask.distributed`` cluster when a client exists) computes.

The plans (docs/DASK.md):

- ``take`` and ``gather`` whose indexed axis is chunked: each (index chunk, table chunk) task
  resolves the index chunk's values globally (the mode's meaning is the global one), gathers the
  entries that chunk owns with cinnlite's compiled kernel, and one task per index chunk
  assembles the pieces in index order.
- ``scatter``: each update chunk scatters, with the same reduction, into a partial result per
  destination chunk (``mean``: a sum and a count; ``none``: the values and the global position
  of the update that won); the partials of one destination chunk meet in a tree reduction, and
  the last step combines them with the destination chunk (``include_self`` respected, the last
  update in global order winning for ``none``).
- elementwise and cast: block by block (``map_blocks``), one compiled kernel per block.
- every other node (``gather_nd``, ``scatter_nd``, ``take`` with ``batch_dims``): its operands
  gathered into one block, computed by the compiled program of that node.

``mode="raise"`` checks every index chunk in one task that the results depend on, and raises
the same :class:`~cinnlite.errors.IndexOutOfRangeError` as the compiled program, with the
position in the whole index array.

Each task runs a one-node program through :func:`cinnlite.compile`, whose memory and disk
caches make that one compile (or one cache load) per program and worker process, not per task;
chunk sizes that differ share one shape-generic program after the second size.

``dask`` is an optional dependency: ``pip install 'cinnlite[dask]'``.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from functools import reduce as fold

import numpy as np

from .compiler import compile as _compile
from .errors import CinnliteError, IndexOutOfRangeError
from .frontend.netbuilder import NetBuilder
from .ir.graph import Node, Program

#: Nodes computed block by block: every operand broadcast against the output, no index.
BLOCKWISE = frozenset({"add", "subtract", "multiply", "divide", "maximum", "minimum", "cast"})


class DaskNotInstalledError(CinnliteError, ImportError):
    """``dask``, which :func:`run` needs, is not installed."""


def _dask_array():
    try:
        import dask.array as da
        from dask.highlevelgraph import HighLevelGraph
    except ImportError:
        raise DaskNotInstalledError("cinnlite.dask needs dask: pip install 'cinnlite[dask]'") from None
    return da, HighLevelGraph


# -- one node on numpy blocks ------------------------------------------------------------------


#: Nodes whose compiled code serves every block size: declared with a symbol for every size.
SHAPE_GENERIC = BLOCKWISE | {"take", "gather", "scatter"}
_EXECUTABLES: dict = {}


def _declared_shapes(op: str, arrays) -> list:
    """The shapes a one-node program declares for blocks of these shapes: symbols wherever the
    node's rules allow (one compile for every chunk size), numbers elsewhere. Elementwise
    operands share a symbol per broadcast axis and keep their 1s, which broadcasting reads."""
    if op in BLOCKWISE:
        rank = max(a.ndim for a in arrays)
        return [tuple(1 if n == 1 else f"D{rank - a.ndim + j}" for j, n in enumerate(a.shape)) for a in arrays]
    if op in SHAPE_GENERIC:
        return [tuple(f"in{k}_{j}" for j in range(a.ndim)) for k, a in enumerate(arrays)]
    if op in ("gather_nd", "scatter_nd"):  # the index tuple's length stays a number
        return [tuple(n if (k, j) == (1, a.ndim - 1) else f"in{k}_{j}" for j, n in enumerate(a.shape))
                for k, a in enumerate(arrays)]
    return [tuple(a.shape) for a in arrays]


def _executable(op: str, attrs: dict, arrays):
    """The compiled one-node program of ``op`` for blocks like ``arrays``: built once per
    process and structure, from cinnlite's caches where another process compiled it."""
    shapes = _declared_shapes(op, arrays)
    key = (op, repr(sorted(attrs.items())), tuple((a.dtype.str, s) for a, s in zip(arrays, shapes)))
    exe = _EXECUTABLES.get(key)
    if exe is None:
        b = NetBuilder(f"dask_{op}")
        tensors = [b.create_input(a.dtype, shape, f"in{k}") for k, (a, shape) in enumerate(zip(arrays, shapes))]
        exe = _EXECUTABLES.setdefault(key, _compile(b.build([b._add(op, tensors, "out", **attrs)]), target="cpu"))
    return exe


def run_node(op: str, attrs: dict, *arrays):
    """``op`` with ``attrs`` on numpy blocks, through cinnlite's compiled code."""
    arrays = [np.ascontiguousarray(a) for a in arrays]
    return _executable(op, attrs, arrays)(**{f"in{k}": a for k, a in enumerate(arrays)})


@dataclass(frozen=True)
class _Spec:
    """Parameters of a task, opaque to dask (a plain tuple could read as a key)."""

    values: dict

    def __getattr__(self, name):
        if name.startswith("__") or name == "values":  # pickle probes before ``values`` exists
            raise AttributeError(name)
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None


# -- global index resolution ---------------------------------------------------------------------


def _resolve(raw: np.ndarray, size, mode: str):
    """Global positions of ``raw`` on an axis of ``size`` under ``mode`` (``size`` may be an array
    of one size per index-tuple component, broadcast along the last axis), and a mask of the
    entries that address nothing (``fill``, or ``raise`` out of range)."""
    size = np.asarray(size, dtype=np.int64)
    v = raw if raw.dtype == np.uint64 else raw.astype(np.int64)
    empty = np.broadcast_to(size == 0, raw.shape)
    if mode == "wrap":
        return np.where(size > 0, np.mod(v, np.maximum(size, 1)), 0).astype(np.int64), empty.copy()
    if mode == "clip":
        return np.clip(v, 0, np.maximum(size - 1, 0)).astype(np.int64), empty.copy()
    if raw.dtype.kind == "u":
        bad = v >= size.astype(np.uint64)
        return np.where(bad, 0, v).astype(np.int64), bad
    bad = (v >= size) | (v < -size)
    return np.where(bad, 0, np.where(v < 0, v + size, v)).astype(np.int64), bad


def _first_bad(raw: np.ndarray, size, offsets: tuple, full_shape: tuple):
    """``(global linear position, position, value, size)`` of the first out-of-range entry of an
    index block, or None."""
    _, bad = _resolve(raw, size, "raise")
    if not bad.any():
        return None
    local = np.unravel_index(int(np.flatnonzero(bad.ravel())[0]), raw.shape)
    position = tuple(int(o + p) for o, p in zip(offsets, local))
    axis_size = int(np.broadcast_to(np.asarray(size), raw.shape)[local])
    return int(np.ravel_multi_index(position, full_shape)), position, int(raw[local]), axis_size


def _check(spec, *firsts):
    """Raise the error of the first bad index over every block (the compiled program's error)."""
    found = [f for f in firsts if f is not None]
    if found:
        _, position, value, size = min(found)
        raise IndexOutOfRangeError(spec.op, spec.input, position, value, size)
    return True


def _routed(spec, index_block, start: int, stop: int) -> np.ndarray:
    """The index block for the destination (or table) chunk ``[start, stop)`` of axis 0 or of the
    indexed axis: every entry resolved globally under the mode, those of other chunks (or of no
    chunk) pointing past the chunk's end, which ``mode="fill"`` drops."""
    g, none = _resolve(index_block, spec.size, spec.mode)
    if not spec.tuples:
        return _local(g, none, start, stop)[0]
    first, _ = _local(g[..., 0], none.any(axis=-1), start, stop)
    return np.concatenate([first[..., None], g[..., 1:]], axis=-1)


def _local(g: np.ndarray, none: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Positions in the chunk ``[start, stop)``; entries elsewhere point past its end."""
    inside = ~none & (g >= start) & (g < stop)
    return np.where(inside, g - start, stop - start).astype(np.int64), inside


# -- gathers: route each index chunk's entries to the table chunks that own them ----------------


def _block_offsets(chunks, block: tuple) -> tuple:
    """Where a block starts in the whole array."""
    return tuple(int(sum(c[:b])) for c, b in zip(chunks, block))


def _bounds(chunks_of_axis) -> list:
    """``(start, stop)`` of each chunk along one axis."""
    stops = list(itertools.accumulate(chunks_of_axis))
    return list(zip([0] + stops[:-1], stops))


def _gather_part(spec, x_block, index_block, start, stop):
    """The entries of one index chunk that one table chunk owns, gathered by the compiled node.

    Where the output is the index's entries followed by slices of the table (take along axis 0,
    gather_nd), only the owned entries are gathered and sent: ``(their flat positions, their
    slices)``. Otherwise (gather, take along a later axis) the whole block is gathered with
    ``mode="fill"`` for the entries of other chunks, and sent with the mask of the owned ones."""
    local = _routed(spec, index_block, start, stop)
    inside = (local[..., 0] if spec.tuples else local) < stop - start
    attrs = dict(spec.attrs, mode="fill")
    if spec.compact:
        flat = np.flatnonzero(inside.ravel())
        rows = local.reshape((-1, local.shape[-1]) if spec.tuples else (-1,))[flat]
        return flat, run_node(spec.op, attrs, x_block, rows)
    return inside.reshape(spec.mask_shape(inside.shape)), run_node(spec.op, attrs, x_block, local)


def _assemble(spec, parts, checked, where):
    """One output block from its parts, in index order: every entry from the chunk that owns it,
    ``fill_value`` where none does."""
    if not spec.compact:
        out = parts[0][1]
        for inside, values in parts[1:]:
            out = np.where(inside, values, out)
        return out
    out = np.full((int(np.prod(where.entries)),) + spec.trailing, spec.attrs["fill_value"], spec.dtype)
    for flat, values in parts:
        out[flat] = values
    return out.reshape(tuple(where.entries) + spec.trailing)


@dataclass(frozen=True)
class _MaskShape:
    """How an index-shaped mask broadcasts against the output of take (index axes between the
    table's leading and trailing axes) or gather (the index's own shape)."""

    lead: int
    trail: int

    def __call__(self, shape):
        return (1,) * self.lead + tuple(shape) + (1,) * self.trail


def _check_keys(dsk, name, index, size, node: Node):
    """Tasks that find the first out-of-range index of every block and raise it; the key of the
    one that raises (``mode="raise"``)."""
    spec = _Spec({"op": f"{node.op} '{node.output.name}'", "input": node.inputs[1].name})  # as the runtime names it
    firsts = []
    for block in itertools.product(*(range(n) for n in index.numblocks)):
        key = (f"{name}-first",) + block
        offsets = _Spec({"offsets": _block_offsets(index.chunks, block), "shape": index.shape})
        dsk[key] = (_first_bad_task, (index.name,) + block, size, offsets)
        firsts.append(key)
    dsk[(f"{name}-check",)] = (_check, spec, *firsts)
    return (f"{name}-check",)


def _first_bad_task(block, size, where):
    return _first_bad(block, size, where.offsets, where.shape)


def _nd_routable(node: Node) -> bool:
    """An nd node in the form the plans route: index tuples along the last axis, addressing the
    leading axes of x, no batch axes."""
    attrs = node.attr_dict
    return attrs.get("dims") is None and attrs.get("index_layout") == "last" and attrs.get("batch_dims", 0) == 0 \
        and node.inputs[1].ndim > 0


def _routing(node: Node, x, index):
    """How a node's table (or destination) and index are split: the routed axis, the size (one
    per tuple component for the nd operators), and the rechunked arrays."""
    tuples = node.op.endswith("_nd")
    axis = 0 if tuples else node.attr_dict["axis"]
    x = x.rechunk({j: -1 for j in range(x.ndim) if j != axis})
    if tuples:
        index = index.rechunk({index.ndim - 1: -1})
        size = np.array(x.shape[:index.shape[-1]], dtype=np.int64)
    else:
        if node.op != "take":
            index = index.rechunk({j: -1 for j in range(index.ndim) if j != axis})
        size = x.shape[axis]
    return axis, tuples, size, x, index


def _gather_plan(node: Node, x, index, name: str):
    """take / gather / gather_nd with the table chunked along the indexed axis."""
    da, HighLevelGraph = _dask_array()
    attrs = node.attr_dict
    axis, tuples, size, x, index = _routing(node, x, index)
    if tuples:
        k = index.shape[-1]
        out_chunks = index.chunks[:-1] + tuple((n,) for n in x.shape[k:])
        lead, trail, blocks = 0, x.ndim - k, list(itertools.product(*(range(n) for n in index.numblocks[:-1])))
        blocks = [b + (0,) for b in blocks]
    elif node.op == "gather":
        out_chunks, lead, trail = index.chunks, 0, 0
    else:
        out_chunks = x.chunks[:axis] + index.chunks + x.chunks[axis + 1:]
        lead, trail = axis, x.ndim - axis - 1
    if not tuples:
        blocks = list(itertools.product(*(range(n) for n in index.numblocks)))
    dsk = {}
    checked = _check_keys(dsk, name, index, size, node) if attrs["mode"] == "raise" else None
    spec = _Spec({"op": node.op, "attrs": attrs, "size": size, "mode": attrs["mode"], "tuples": tuples,
                  "mask_shape": _MaskShape(lead, trail), "compact": lead == 0 and node.op != "gather",
                  "trailing": tuple(node.output.shape[len(node.output.shape) - trail:]) if trail else (),
                  "dtype": np.dtype(node.output.dtype.np)})
    for block in blocks:
        parts = []
        for c, (start, stop) in enumerate(_bounds(x.chunks[axis])):
            x_key = (x.name,) + tuple(c if j == axis else 0 for j in range(x.ndim))
            key = (f"{name}-part", c) + block
            dsk[key] = (_gather_part, spec, x_key, (index.name,) + block, start, stop)
            parts.append(key)
        out_block = (0,) * lead + (block[:-1] if tuples else block) + (0,) * trail
        entries = tuple(c[b] for c, b in zip(index.chunks, block))[:index.ndim - 1 if tuples else index.ndim]
        dsk[(name,) + out_block] = (_assemble, spec, parts, checked, _Spec({"entries": entries}))
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[x, index])
    return da.Array(graph, name, chunks=out_chunks, dtype=node.output.dtype.np)


# -- scatters: partial results per destination chunk, combined by a tree of the reduction --------

#: The numpy combine of two partials of each reduction, for numbers and for bool.
_COMBINE = {"add": (np.add, np.logical_or), "mul": (np.multiply, np.logical_and),
            "max": (np.maximum, np.logical_or), "min": (np.minimum, np.logical_and)}
TREE_FAN_IN = 4


def _identity(reduce: str, dtype: np.dtype):
    """The value a reduction starts from."""
    if dtype == np.bool_:
        return reduce in ("mul", "min")
    if reduce in ("add", "mean", "none"):
        return 0
    if reduce == "mul":
        return 1
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.min if reduce == "max" else info.max
    return -np.inf if reduce == "max" else np.inf


def _accumulator(dtype: np.dtype) -> np.dtype:
    """The dtype a mean's partial sums are kept in."""
    if dtype.kind in "iu":
        return np.dtype(np.int64) if dtype.kind == "i" else np.dtype(np.uint64)
    return np.dtype(np.complex128) if dtype.kind == "c" else np.dtype(np.float64)


def _local_scatter(spec, reduce: str, values, local, src):
    """``src`` scattered with ``reduce`` into ``values`` (the destination chunk's shape) by the
    compiled node; entries of other chunks point past it and are dropped (``mode="fill"``)."""
    attrs = dict(spec.attrs, reduce=reduce, mode="fill", include_self=True)
    return run_node(spec.op, attrs, values, local, src)


def _global_positions(shape, offsets, full_shape) -> np.ndarray:
    """The row-major position in the whole index array of every entry of one block."""
    grids = np.indices(shape, dtype=np.int64)
    return np.ravel_multi_index(tuple(g + o for g, o in zip(grids, offsets)), full_shape).astype(np.int64)


def _per_update(spec, index_block, src_shape, values) -> np.ndarray:
    """``values`` (one per index entry) laid out like ``src``: the nd operators' updates are
    slices, each entry's value repeated over its slice."""
    if not spec.tuples:
        return values
    lead = index_block.shape[:-1]
    return np.ascontiguousarray(np.broadcast_to(values.reshape(lead + (1,) * (len(src_shape) - len(lead))),
                                                src_shape))


def _scatter_part(spec, index_block, sources, start, stop, where):
    """One update chunk's partial result for one destination chunk: for ``none`` the values and
    the global position of the update that wrote each element, for ``mean`` a sum and a count,
    otherwise the reduction of the chunk's updates (and a count where ``include_self=False``).
    ``sources`` is the update block, or the blocks a fused chain computes it from."""
    local = _routed(spec, index_block, start, stop)
    shape, entries = where.shape, index_block.shape[:-1] if spec.tuples else index_block.shape
    src_shape = sources[0].shape if spec.chain is None else (index_block.shape[0],) + spec.chain.src_trailing
    if spec.reduce == "none":
        values = _updates_into(spec, "none", np.zeros(shape, spec.dtype), local, sources)
        positions = _global_positions(entries, where.offsets, where.full_shape)
        stamps = _local_scatter(spec, "max", np.full(shape, -1, np.int64), local,
                                _per_update(spec, index_block, src_shape, positions))
        return values, stamps
    counts = None
    if spec.reduce == "mean" or not spec.include_self:
        ones = _per_update(spec, index_block, src_shape, np.ones(entries, np.int64))
        counts = _local_scatter(spec, "add", np.zeros(shape, np.int64), local, ones)
    if spec.reduce == "mean":
        return _updates_into(spec, "add", np.zeros(shape, _accumulator(spec.dtype)), local, sources), counts
    identity = np.full(shape, _identity(spec.reduce, spec.dtype), spec.dtype)
    return _updates_into(spec, spec.reduce, identity, local, sources), counts


def _updates_into(spec, reduce: str, init, local, sources):
    """The updates scattered into ``init`` (whose dtype they are cast to): by the node itself, or
    by one compiled program of the fused chain that computes them and the scatter."""
    if spec.chain is None:
        return _local_scatter(spec, reduce, init, local, sources[0].astype(init.dtype, copy=False))
    arrays = [init, local, *sources]
    exe = spec.chain.executable(reduce, [a.dtype for a in arrays])
    return exe(**{f"in{k}": np.ascontiguousarray(a) for k, a in enumerate(arrays)})


def _combine(spec, parts):
    """Partials of one destination chunk combined into one."""
    def pair(a, b):
        if spec.reduce == "none":
            later = b[1] > a[1]
            return np.where(later, b[0], a[0]), np.maximum(a[1], b[1])
        add = _COMBINE["add"][0]
        counts = None if a[1] is None else add(a[1], b[1])
        if spec.reduce == "mean":
            return add(a[0], b[0]), counts
        numbers, logical = _COMBINE[spec.reduce]
        combine = logical if spec.dtype == np.bool_ else numbers
        return combine(a[0], b[0]).astype(spec.dtype), counts
    return fold(pair, parts)


def _finish(spec, x_block, partial, checked):
    """The destination chunk with its combined partial applied."""
    values, counts = partial
    if spec.reduce == "none":
        return np.where(counts >= 0, values, x_block)
    if spec.reduce == "mean":
        acc = values.dtype
        num = values + x_block.astype(acc) if spec.include_self else values
        den = counts + 1 if spec.include_self else np.maximum(counts, 1)
        mean = num // den.astype(acc) if acc.kind in "iu" else num / den
        return np.where(counts > 0, mean.astype(spec.dtype), x_block)
    if not spec.include_self:
        return np.where(counts > 0, values, x_block)
    numbers, logical = _COMBINE[spec.reduce]
    return (logical if spec.dtype == np.bool_ else numbers)(x_block, values).astype(spec.dtype)


def _tree(dsk, name, parts: list, spec) -> tuple:
    """A tree reduction of ``parts`` with :func:`_combine`, ``TREE_FAN_IN`` at a time; its root."""
    level = 0
    while len(parts) > 1:
        grouped = [parts[k:k + TREE_FAN_IN] for k in range(0, len(parts), TREE_FAN_IN)]
        parts = []
        for k, group in enumerate(grouped):
            key = (f"{name}-level{level}", k)
            dsk[key] = (_combine, spec, group)
            parts.append(key)
        level += 1
    return parts[0]


@dataclass(frozen=True)
class _FusedChain:
    """A scatter together with the take/elementwise nodes that compute its updates and nothing
    else (a message-passing step): per update block one compiled program gathers, computes and
    scatters, and the updates are never materialised. ``leaves`` are the chain's operands:
    ``rows`` ones split with the updates, ``whole`` ones (the gathered tables, broadcast
    operands) sent whole to the tasks."""

    nodes: tuple
    scatter: Node
    leaves: tuple  # ((tensor, "rows" | "whole"), ...)
    src_trailing: tuple

    def executable(self, reduce: str, dtypes):
        key = ("fused", reduce, repr(self.nodes), repr(self.scatter), tuple(str(d) for d in dtypes))
        exe = _EXECUTABLES.get(key)
        if exe is None:
            exe = _EXECUTABLES.setdefault(key, _compile(self._program(reduce, dtypes[0]), target="cpu"))
        return exe

    def _program(self, reduce: str, init_dtype):
        """init, routed index, leaves -> the chain, then the scatter into init: every row count
        a symbol, so one compile serves every block."""
        b = NetBuilder("dask_fused")
        x, index = self.scatter.inputs[:2]
        init = b.create_input(init_dtype, ("P",) + tuple(x.shape[1:]), "in0")
        local = b.create_input("int64", ("E",) + tuple(index.shape[1:]), "in1")
        env = {}
        for k, (t, kind) in enumerate(self.leaves):
            shape = ("E",) + tuple(t.shape[1:]) if kind == "rows" else tuple(t.shape)
            env[t.name] = b.create_input(t.dtype, shape, f"in{k + 2}")
        for node in self.nodes:
            attrs = node.attr_dict
            if node.op == "take" and attrs["mode"] == "raise":
                attrs["mode"] = "clip"  # checked over the whole index first, by the plan's check task
            env[node.output.name] = b._add(node.op, [env[t.name] for t in node.inputs], None, **attrs)
        src = env[self.scatter.inputs[2].name]
        if np.dtype(src.dtype.np) != np.dtype(init_dtype):
            src = b.cast(src, init_dtype)
        attrs = dict(self.scatter.attr_dict, reduce=reduce, mode="fill", include_self=True)
        return b.build([b._add(self.scatter.op, [init, local, src], "out", **attrs)])


def _fused_chain(scatter: Node, producers: dict, consumers: dict) -> _FusedChain | None:
    """The chain of take/elementwise nodes that only feed ``scatter``'s updates, if it holds a
    gather and its row-wise operands line up with the updates; else None."""
    index, src = scatter.inputs[1], scatter.inputs[2]
    rows = index.shape[0] if index.ndim else None
    routable_axis = scatter.op == "scatter_nd" or scatter.attr_dict.get("axis") == 0
    if not routable_axis or rows is None or src.ndim == 0 or src.shape[0] != rows \
            or (scatter.op == "scatter" and tuple(src.shape) != tuple(index.shape)):
        return None
    nodes, leaves = [], {}

    def visit(t, role):
        node = producers.get(t.name)
        inner = node is not None and consumers.get(t.name) == 1 and (
            node.op in BLOCKWISE or (node.op == "take" and node.attr_dict["axis"] == 0
                                     and node.attr_dict["batch_dims"] == 0 and node.inputs[1].ndim == 1))
        if not inner or role in ("whole", "index"):
            kind = "rows" if role != "whole" and t.ndim and t.shape[0] == rows and rows != 1 else "whole"
            leaves.setdefault(t.name, (t, kind))
            return
        if node.op == "take":
            visit(node.inputs[0], "whole")
            visit(node.inputs[1], "index")  # a leaf: the plan checks it whole
        else:
            for operand in node.inputs:
                visit(operand, "rows" if operand.ndim == src.ndim else "whole")
        nodes.append(node)

    visit(src, "rows")
    if not any(n.op == "take" for n in nodes):
        return None
    order = {id(n): k for k, n in enumerate(producers.values())}
    nodes = tuple(sorted(nodes, key=lambda n: order[id(n)]))
    return _FusedChain(nodes, scatter, tuple(leaves.values()), tuple(src.shape[1:]))


def _scatter_plan(node: Node, x, index, src, name: str, chain: _FusedChain | None = None, env=None):
    """scatter / scatter_nd with the destination chunked along the scattered axis (axis 0 for
    scatter_nd); with ``chain``, its updates computed in the same compiled program from the
    chain's leaves (``env``: the dask arrays by tensor name)."""
    da, HighLevelGraph = _dask_array()
    attrs = node.attr_dict
    axis, tuples, size, x, index = _routing(node, x, index)
    if chain is not None:
        return _fused_scatter_plan(node, x, index, name, chain, env, axis, tuples, size)
    if tuples:
        entries = index.chunks[:-1]
        src = src.rechunk(entries + tuple((n,) for n in src.shape[len(entries):]))
        blocks = [b + (0,) for b in itertools.product(*(range(n) for n in index.numblocks[:-1]))]
        src_key = lambda block: (src.name,) + block[:-1] + (0,) * (src.ndim - len(entries))  # noqa: E731
        full_shape = index.shape[:-1]
    else:
        src = src[tuple(slice(0, n) for n in index.shape)].rechunk(index.chunks)
        blocks = list(itertools.product(*(range(n) for n in index.numblocks)))
        src_key = lambda block: (src.name,) + block  # noqa: E731
        full_shape = index.shape
    dsk = {}
    checked = _check_keys(dsk, name, index, size, node) if attrs["mode"] == "raise" else None
    spec = _Spec({"op": node.op, "attrs": attrs, "reduce": attrs["reduce"], "mode": attrs["mode"], "size": size,
                  "tuples": tuples, "include_self": attrs["include_self"], "dtype": np.dtype(node.output.dtype.np),
                  "chain": None})
    for d, (start, stop) in enumerate(_bounds(x.chunks[axis])):
        block_shape = tuple(stop - start if j == axis else x.shape[j] for j in range(x.ndim))
        parts = []
        for block in blocks:
            offsets = _block_offsets(index.chunks, block)[:len(full_shape)]
            where = _Spec({"shape": block_shape, "offsets": offsets, "full_shape": full_shape})
            key = (f"{name}-part", d) + block
            dsk[key] = (_scatter_part, spec, (index.name,) + block, [src_key(block)], start, stop, where)
            parts.append(key)
        root = _tree(dsk, f"{name}-{d}", parts, spec)
        x_key = (x.name,) + tuple(d if j == axis else 0 for j in range(x.ndim))
        dsk[(name,) + x_key[1:]] = (_finish, spec, x_key, root, checked)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[x, index, src])
    return da.Array(graph, name, chunks=x.chunks, dtype=node.output.dtype.np)


def _fused_scatter_plan(node, x, index, name, chain, env, axis, tuples, size):
    """The scatter plan of a fused chain: the row-wise leaves split with the index's entries,
    the others whole; the chain's raise-mode takes checked over their whole index."""
    da, HighLevelGraph = _dask_array()
    attrs = node.attr_dict
    entry_chunks = index.chunks[0]
    index = index.rechunk({0: entry_chunks})
    leaves = []
    for t, kind in chain.leaves:
        a = env[t.name]
        leaves.append((a.rechunk((entry_chunks,) + tuple((n,) for n in a.shape[1:])) if kind == "rows"
                       else a.rechunk(-1), kind))
    dsk = {}
    checks = [_check_keys(dsk, name, index, size, node)] if attrs["mode"] == "raise" else []
    for k, n in enumerate(chain.nodes):
        if n.op == "take" and n.attr_dict["mode"] == "raise":
            leaf = dict((t.name, a) for (t, _), (a, _) in zip(chain.leaves, leaves))[n.inputs[1].name]
            checks.append(_check_keys(dsk, f"{name}-take{k}", leaf, n.inputs[0].shape[0], n))
    spec = _Spec({"op": node.op, "attrs": attrs, "reduce": attrs["reduce"], "mode": attrs["mode"], "size": size,
                  "tuples": tuples, "include_self": attrs["include_self"], "dtype": np.dtype(node.output.dtype.np),
                  "chain": chain})
    full_shape = index.shape[:-1] if tuples else index.shape
    for d, (start, stop) in enumerate(_bounds(x.chunks[axis])):
        block_shape = tuple(stop - start if j == axis else x.shape[j] for j in range(x.ndim))
        parts = []
        for e in range(len(entry_chunks)):
            block = (e,) + (0,) * (index.ndim - 1)
            sources = [(a.name, e if kind == "rows" else 0) + (0,) * (a.ndim - 1) for a, kind in leaves]
            where = _Spec({"shape": block_shape, "offsets": _block_offsets(index.chunks, block)[:len(full_shape)],
                           "full_shape": full_shape})
            key = (f"{name}-part", d, e)
            dsk[key] = (_scatter_part, spec, (index.name,) + block, sources, start, stop, where)
            parts.append(key)
        root = _tree(dsk, f"{name}-{d}", parts, spec)
        x_key = (x.name,) + tuple(d if j == axis else 0 for j in range(x.ndim))
        dsk[(name,) + x_key[1:]] = (_finish, spec, x_key, root, checks)
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=[x, index] + [a for a, _ in leaves])
    return da.Array(graph, name, chunks=x.chunks, dtype=node.output.dtype.np)


# -- the other nodes -------------------------------------------------------------------------------


def _blockwise_plan(node: Node, operands, name: str):
    """An elementwise node block by block (operands broadcast as numpy does)."""
    da, _ = _dask_array()
    spec = _Spec({"op": node.op, "attrs": node.attr_dict})
    return da.map_blocks(functools.partial(_run_spec, spec), *operands, dtype=node.output.dtype.np, name=name)


def _run_spec(spec, *blocks):
    """A task: the node ``spec`` names, on its operand blocks."""
    return run_node(spec.op, spec.attrs, *blocks)


def _one_block_plan(node: Node, operands, name: str):
    """Any node on its operands gathered into one block each."""
    da, HighLevelGraph = _dask_array()
    whole = [a.rechunk(-1) for a in operands]
    spec = _Spec({"op": node.op, "attrs": node.attr_dict})
    keys = [(a.name,) + (0,) * a.ndim for a in whole]
    dsk = {(name,) + (0,) * node.output.ndim: (_run_spec, spec, *keys)}
    graph = HighLevelGraph.from_collections(name, dsk, dependencies=whole)
    return da.Array(graph, name, chunks=tuple((n,) for n in node.output.shape), dtype=node.output.dtype.np)


def _plan(node: Node, operands: list, name: str):
    """The dask array of one node of a static program."""
    da, _ = _dask_array()
    attrs = node.attr_dict
    if node.op == "fill_constant":
        return da.full(node.output.shape, attrs["value"], dtype=node.output.dtype.np)
    if node.op == "constant":
        return da.from_array(np.asarray(attrs["value"].array if hasattr(attrs["value"], "array") else attrs["value"]))
    if node.op in BLOCKWISE:
        return _blockwise_plan(node, operands, name)
    if (node.op in ("take", "gather") and attrs.get("batch_dims", 0) == 0) \
            or (node.op == "gather_nd" and _nd_routable(node)):
        return _gather_plan(node, *operands, name)
    if node.op == "scatter" or (node.op == "scatter_nd" and _nd_routable(node)):
        return _scatter_plan(node, *operands, name)
    return _one_block_plan(node, operands, name)


# -- the entry point -------------------------------------------------------------------------------


def _as_dask(value):
    da, _ = _dask_array()
    if isinstance(value, da.Array):
        return value
    array = np.asarray(value)
    return da.from_array(array, chunks=array.shape or (), name=False)


def _static(program: Program, arrays: dict) -> Program:
    """The program at the inputs' sizes (a symbolic program's symbols bound from them)."""
    from .ir.rebuild import rebuild
    from .ir.symbolic import Dim
    bindings = {}
    for t in program.inputs:
        for axis, d in enumerate(t.shape):
            if isinstance(d, Dim) and d.name is not None:
                bindings.setdefault(d.name, int(arrays[t.name].shape[axis]))
    return rebuild(program, {t.name: tuple(arrays[t.name].shape) for t in program.inputs}, bindings)


def _fused_chains(program: Program) -> dict:
    """Every routable scatter whose updates a take/elementwise chain computes: its chain, by
    ``id`` of the scatter node."""
    producers = {n.output.name: n for n in program.nodes}
    consumers: dict = {}
    for n in program.nodes:
        for t in n.inputs:
            consumers[t.name] = consumers.get(t.name, 0) + 1
    for t in program.outputs:
        consumers[t.name] = consumers.get(t.name, 0) + 1
    chains = {}
    for n in program.nodes:
        if n.op == "scatter" or (n.op == "scatter_nd" and _nd_routable(n)):
            chain = _fused_chain(n, producers, consumers)
            if chain is not None:
                chains[id(n)] = chain
    return chains


def run(program: Program, **inputs):
    """``program`` over dask arrays (numpy arrays are one chunk): its outputs as lazily built dask
    arrays, one for each output (a single one unwrapped), computed by the caller's scheduler."""
    _dask_array()
    import dask.base

    arrays = {}
    for t in program.inputs:
        if t.name not in inputs:
            from .errors import InputError
            raise InputError(f"missing input '{t.name}' of program '{program.name}'")
        arrays[t.name] = _as_dask(inputs[t.name])
    unknown = sorted(set(inputs) - set(arrays))
    if unknown:
        from .errors import InputError
        raise InputError(f"unknown input(s) {unknown} of program '{program.name}'")
    for t in program.inputs:
        shape = arrays[t.name].shape
        if len(shape) != len(t.shape) or any(isinstance(d, int) and d != n for d, n in zip(t.shape, shape)):
            from .errors import InputError
            raise InputError(f"input '{t.name}' has shape {tuple(shape)}; the program takes {t.shape}")
    static = _static(program, arrays)
    for t in static.inputs:
        if np.dtype(arrays[t.name].dtype) != np.dtype(t.dtype.np):
            from .errors import InputTypeError
            raise InputTypeError(f"input '{t.name}' has dtype {arrays[t.name].dtype}; the program takes {t.dtype}")
    env = dict(arrays)
    token = dask.base.tokenize(str(static), *[a.name for a in arrays.values()])
    chains = _fused_chains(static)
    inner = {id(n) for chain in chains.values() for n in chain.nodes}
    for k, node in enumerate(static.nodes):
        if id(node) in inner:
            continue  # computed inside its scatter's tasks
        operands = [env.get(t.name) for t in node.inputs]  # a fused chain's updates are in no array
        name = f"cinnlite-{node.op}-{k}-{token}"
        if id(node) in chains:
            env[node.output.name] = _scatter_plan(node, *operands, name, chain=chains[id(node)], env=env)
        else:
            env[node.output.name] = _plan(node, operands, name)
    outs = [env[t.name] for t in static.outputs]
    return outs[0] if len(outs) == 1 else tuple(outs)
