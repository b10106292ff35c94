"""Run ONNX models: the nodes cinnlite imports run as compiled cinnlite programs, every other node
on onnxruntime (``pip install cinnlite[onnx]``), with arrays passed between them as they are.

:class:`InferenceSession` takes onnxruntime's interface (``run(output_names, feed)``,
``get_inputs()``, ``get_outputs()``) and adds ``explain()``, which says where each node runs and
why. The graph is cut into segments: a topological order that keeps each kind of node together
as long as the dependencies allow, then runs of one kind. A cinnlite segment is imported and
compiled for the shapes of each call (so Shape, Range and the shape arithmetic exporters write
fold into constants, and cinnlite's compile cache generalises repeated sizes into one
shape-generic build); an onnxruntime segment is a model of its own, one session per input
dtypes.
"""
from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

import numpy as np

from .compiler import compile as compile_program
from .errors import CinnliteError, InputError, InputTypeError
from .frontend.onnx import (SUPPORTED_OPS, OnnxImportError, _onnx, graph_inputs, import_onnx, load_model,
                            unsupported_reason)
from .runtime.executable import host_array, input_name_mismatch

CINNLITE, ORT = "cinnlite", "onnxruntime"
_MISSING = object()


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output as onnxruntime describes it: ``type`` is ``"tensor(float)"``;
    ``shape`` holds a name or None for each dimension the model leaves open."""

    name: str
    type: str
    shape: list | None


@dataclass
class Segment:
    """Consecutive nodes that run in one place: their ``inputs`` are the values they read from
    outside, their ``outputs`` the values later segments or the graph's outputs read."""

    kind: str
    nodes: list
    inputs: list
    outputs: list
    reasons: list          # per node: why it runs on onnxruntime, or None
    fallback: str | None = None  # why a segment planned for cinnlite runs on onnxruntime after all


def _reads(node) -> list:
    """The values ``node`` reads: its inputs, and the enclosing graph's values its subgraphs
    (If's branches, Loop's body) read."""
    names = [i for i in node.input if i]
    for attr in node.attribute:
        for graph in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
            inner = {o for n in graph.node for o in n.output} | {v.name for v in graph.input} | \
                {t.name for t in graph.initializer}
            names += [i for n in graph.node for i in _reads(n) if i not in inner]
    return list(dict.fromkeys(names))


def _order(nodes, kinds):
    """A topological order that runs each kind of node as long as it can before switching."""
    produced_by = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    deps = [{produced_by[i] for i in _reads(n) if i in produced_by} for n in nodes]
    users = [[] for _ in nodes]
    for k, ds in enumerate(deps):
        for d in ds:
            users[d].append(k)
    waiting = [len(ds) for ds in deps]
    ready = [k for k in range(len(nodes)) if waiting[k] == 0]
    order, kind = [], None
    while ready:
        same = [k for k in ready if kinds[k] == kind]
        pick = min(same) if same else min(ready)
        ready.remove(pick)
        kind = kinds[pick]
        order.append(pick)
        for u in users[pick]:
            waiting[u] -= 1
            if waiting[u] == 0:
                ready.append(u)
    return order


def _sink_to_readers(runs: list, nodes: list) -> list:
    """``runs`` with every cinnlite node whose readers all run in later segments moved into the
    first of them, when that one runs in cinnlite too (then merged where runs meet).

    A value made in one cinnlite segment for another crosses as a whole array: the zeros a
    scatter starts from, the rows a gather repeats. Made in the segment that reads them, they
    fuse into their reader and are never written out. A node moves only where that makes no
    other value cross (its inputs are graph inputs, cross already, or move with it: a sum read
    later stays where the array it sums is); it moves behind its inputs only, so the order still
    runs. Nodes are visited from the last, so a chain moves together."""
    home = {k: s for s, (_, members) in enumerate(runs) for k in members}
    produced_by = {o: k for k, node in enumerate(nodes) for o in node.output if o}
    readers: dict = {}
    for k, node in enumerate(nodes):
        for name in _reads(node):
            readers.setdefault(name, []).append(k)
    moves: dict = {}  # node -> the later segment it runs in
    for s in reversed(range(len(runs))):
        if runs[s][0] == CINNLITE:
            for k in reversed(runs[s][1]):
                at = {moves.get(r, home[r]) for o in nodes[k].output if o for r in readers.get(o, ())}
                if at and min(at) > s and runs[min(at)][0] == CINNLITE:
                    moves[k] = min(at)

    def runs_in(k):
        return moves.get(k, home[k])

    def stays_put(k) -> bool:
        """Whether moving ``k`` would put it after a reader, or make a value cross segments
        that did not (one its segment makes and keeps, and its producer does not move with it)."""
        if any(runs_in(r) < moves[k] for o in nodes[k].output if o for r in readers.get(o, ())):
            return True
        for name in _reads(nodes[k]):
            p = produced_by.get(name)
            if p is not None and runs_in(p) != moves[k] and all(home[r] == home[p] for r in readers[name]):
                return True
        return False

    stuck = [k for k in moves if stays_put(k)]
    while stuck:
        for k in stuck:
            del moves[k]
        stuck = [k for k in moves if stays_put(k)]
    for t in set(moves.values()):
        arriving = [k for _, members in runs for k in members if moves.get(k) == t]  # in run order
        for k in arriving:
            runs[home[k]][1].remove(k)
        runs[t][1][:0] = arriving
    merged: list = []
    for kind, members in runs:
        if not members:
            continue
        if merged and merged[-1][0] == kind:
            merged[-1][1].extend(members)
        else:
            merged.append((kind, members))
    return merged


def partition(graph) -> list:
    """The segments of ``graph``, in an order that runs."""
    nodes = list(graph.node)
    reasons = [unsupported_reason(n) for n in nodes]
    kinds = [CINNLITE if r is None else ORT for r in reasons]
    order = _order(nodes, kinds)
    runs: list = []
    for k in order:
        if not runs or runs[-1][0] != kinds[k]:
            runs.append((kinds[k], []))
        runs[-1][1].append(k)
    runs = _sink_to_readers(runs, nodes)
    wanted = {o.name for o in graph.output}
    reads_later: list = []
    for _, members in reversed(runs):
        reads_later.append(set(wanted))
        for k in members:
            wanted |= set(_reads(nodes[k]))
    reads_later.reverse()
    initializers = {t.name for t in graph.initializer}
    segments = []
    for (kind, members), later in zip(runs, reads_later):
        made = {o for k in members for o in nodes[k].output if o}
        inputs = list(dict.fromkeys(i for k in members for i in _reads(nodes[k])
                                    if i not in made and i not in initializers))
        outputs = [o for k in members for o in nodes[k].output if o and o in later]
        segments.append(Segment(kind, [nodes[k] for k in members], inputs, outputs, [reasons[k] for k in members]))
    return segments


class InferenceSession:
    """An ONNX model ready to run (see the module's docstring): cinnlite for the nodes it
    imports on ``target``, onnxruntime for the rest."""

    def __init__(self, model_or_path, target: str = "cpu", **compile_options):
        onnx = _onnx()
        model = load_model(model_or_path)
        try:
            model = onnx.shape_inference.infer_shapes(model)
        except Exception:  # a model shape inference cannot follow still runs: types come from the arrays
            pass
        self.model, self.target, self._options = model, target, compile_options
        graph = model.graph
        self._initializers = {t.name: t for t in graph.initializer}
        self._types = {vi.name: vi.type.tensor_type.elem_type for vi in
                       list(graph.value_info) + list(graph.output) + list(graph.input)
                       if vi.type.HasField("tensor_type")}
        self.segments = partition(graph)
        self._ort = _onnxruntime()
        if self._ort is None and any(s.kind == ORT for s in self.segments):
            counts = Counter(n.op_type for s in self.segments if s.kind == ORT for n in s.nodes)
            raise OnnxImportError("the model needs onnxruntime (pip install 'cinnlite[onnx]') for the operators "
                                  "cinnlite does not import: " +
                                  ", ".join(f"{op} x{c}" for op, c in sorted(counts.items())))
        self._inputs = [d for d in graph_inputs(model) if d.name not in self._initializers]
        # What every run checks, read from the model once: a call right after a pause pays for
        # every page it touches, and walking the protobuf or asking a dtype its name touch many.
        self._input_names = [d.name for d in self._inputs]
        self._dtypes = [_dtype_or_none(d.dtype) for d in self._inputs]
        self._output_names = [o.name for o in graph.output]
        self._known_outputs = frozenset(self._output_names)
        self._accepted_shapes = [None] * len(self._inputs)
        self._built: dict = {}
        self._lock = threading.Lock()

    # -- onnxruntime's interface ---------------------------------------------------------------------

    def get_inputs(self) -> list:
        return [self._arg(vi) for vi in self.model.graph.input if vi.name not in self._initializers]

    def get_outputs(self) -> list:
        return [self._arg(vi) for vi in self.model.graph.output]

    def _arg(self, vi) -> NodeArg:
        onnx = _onnx()
        tt = vi.type.tensor_type
        type_name = onnx.TensorProto.DataType.Name(tt.elem_type).lower() if tt.elem_type else "undefined"
        shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim] \
            if tt.HasField("shape") else None
        return NodeArg(vi.name, f"tensor({type_name})", shape)

    def run(self, output_names, input_feed: dict, run_options=None) -> list:
        """The outputs named (all when None), in that order, as numpy arrays."""
        if output_names is None:
            names = self._output_names
        else:
            names = list(output_names)
            bad = [n for n in names if n not in self._known_outputs]
            if bad:
                raise InputError(f"the model has no output {bad[0]!r}; its outputs: "
                                 f"{', '.join(sorted(self._known_outputs))}")
        env = self._feed(input_feed)
        for k, segment in enumerate(self.segments):
            env.update(self._run_segment(k, segment, {n: env[n] for n in segment.inputs}))
        return [env[n] if n in env else _initializer_array(self._initializers[n]) for n in names]

    def _feed(self, feed: dict) -> dict:
        """The feed's arrays by input name, each checked against the model's declaration.

        A call after a pause pays for every line of Python it runs (the code and objects are no
        longer in the caches), so the common case is one loop: an array of the declared dtype
        and of the shape the input last accepted."""
        if not isinstance(feed, dict):
            raise InputError("run() takes a dict of input name -> array")
        if len(feed) != len(self._input_names):
            raise InputError(input_name_mismatch(self._input_names, feed))
        arrays, accepted = {}, self._accepted_shapes
        for k, (name, want) in enumerate(zip(self._input_names, self._dtypes)):
            a = feed.get(name, _MISSING)
            if a is _MISSING:
                raise InputError(input_name_mismatch(self._input_names, feed))
            if type(a) is not np.ndarray:
                a = host_array(a, f"input '{name}'")
            if a.dtype != want or a.shape != accepted[k]:
                self._check_input(k, a)
            arrays[name] = a
        return arrays

    def _check_input(self, k: int, a: np.ndarray):
        """Input ``k``'s dtype and shape against the model's declaration (``_feed``'s slow path);
        a shape that passes is the one the next call compares with first."""
        d, want = self._inputs[k], self._dtypes[k]
        if (want is None or a.dtype != want) and a.dtype.name != d.dtype:
            raise InputTypeError(f"input '{d.name}': expected dtype {d.dtype}, got {a.dtype.name} (cinnlite does "
                                 "not cast)")
        if d.shape is not None and (len(d.shape) != a.ndim or
                                    any(w is not None and w != g for w, g in zip(d.shape, a.shape))):
            shape = "[" + ", ".join("?" if w is None else str(w) for w in d.shape) + "]"
            raise InputError(f"input '{d.name}': expected shape {shape}, got {list(a.shape)}")
        if a.dtype == want:
            self._accepted_shapes[k] = a.shape

    # -- segments --------------------------------------------------------------------------------------

    def _run_segment(self, k: int, segment: Segment, arrays: dict) -> dict:
        shapes = segment.kind == CINNLITE
        key = (k, *[(n, a.dtype, a.shape if shapes else None) for n, a in arrays.items()])
        runner = self._built.get(key)
        if runner is None:
            with self._lock:
                runner = self._built.get(key)
                if runner is None:
                    runner = self._built[key] = self._build(segment, arrays)
        return runner(arrays)

    def _build(self, segment: Segment, arrays: dict):
        submodel = self._submodel(segment, arrays)
        if segment.kind == CINNLITE:
            try:
                imported = import_onnx(submodel, shapes={n: a.shape for n, a in arrays.items()})
                exe = compile_program(imported.program, target=self.target, **self._options)
            except CinnliteError as exc:
                if self._ort is None:
                    raise
                segment.kind = ORT  # what cinnlite cannot import at these shapes runs on onnxruntime
                segment.fallback = f"cinnlite could not import the segment: {exc}"
                return self._build(segment, arrays)
            return _segment_runner(imported, exe)
        options = self._ort.SessionOptions()
        # onnxruntime's idle workers spin for tens of milliseconds after a run by default, on
        # the cores the cinnlite segment after it is about to use: here they sleep instead.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = self._ort.InferenceSession(submodel.SerializeToString(), options,
                                             providers=["CPUExecutionProvider"])
        return lambda feed: dict(zip(segment.outputs, session.run(segment.outputs, feed)))

    def _submodel(self, segment: Segment, arrays: dict):
        onnx = _onnx()
        helper = onnx.helper
        used = {i for n in segment.nodes for i in _reads(n)}
        inputs = []
        for name, a in arrays.items():
            try:
                elem = helper.np_dtype_to_tensor_dtype(a.dtype)
            except Exception:
                raise InputTypeError(f"value '{name}': dtype {a.dtype} has no ONNX type") from None
            shape = list(a.shape) if segment.kind == CINNLITE else [None] * a.ndim
            inputs.append(helper.make_tensor_value_info(name, elem, shape))
        outputs = [helper.make_tensor_value_info(n, self._types.get(n, 0) if segment.kind == ORT else 0, None)
                   for n in segment.outputs]
        graph = helper.make_graph(segment.nodes, "segment", inputs, outputs,
                                  initializer=[t for n, t in self._initializers.items() if n in used])
        model = helper.make_model(graph, opset_imports=list(self.model.opset_import))
        model.ir_version = self.model.ir_version
        return model

    # -- explain ---------------------------------------------------------------------------------------

    def explain(self) -> str:
        """Which node runs where, and why those on onnxruntime do."""
        total = sum(len(s.nodes) for s in self.segments)
        mine = sum(len(s.nodes) for s in self.segments if s.kind == CINNLITE)
        lines = [f"{mine} of {total} nodes run in cinnlite ({self.target}), {total - mine} on onnxruntime; "
                 f"{len(self.segments)} segment(s)"]
        for k, s in enumerate(self.segments):
            lines.append(f"segment {k}: {s.kind}, {len(s.nodes)} node(s); reads {', '.join(s.inputs) or 'nothing'}; "
                         f"gives {', '.join(s.outputs) or 'nothing'}")
            if s.fallback:
                lines.append(f"  ({s.fallback})")
            for node, why in zip(s.nodes, s.reasons):
                label = f"{node.name or node.output[0]} ({node.op_type})"
                lines.append(f"  {label}" + (f": {why}" if why else ""))
        return "\n".join(lines)


def _onnxruntime():
    """The onnxruntime module, or None where it is not installed."""
    try:
        import onnxruntime
    except ImportError:
        return None
    return onnxruntime


def _segment_runner(imported, exe):
    """A cinnlite segment's run: the executable called with keywords, the path with the least
    Python on it (its native entry where the call allows), outputs named as in the model."""
    order = [b.name for b in exe.lowered.outputs]
    feeds, named_outputs = imported.feeds, imported.named_outputs

    def run(feed: dict) -> dict:
        values = exe(**feeds(feed))
        return named_outputs(dict(zip(order, values if len(order) > 1 else (values,))))
    return run


def _dtype_or_none(name: str):
    """The numpy dtype of that name, or None where numpy does not know the name."""
    try:
        return np.dtype(name)
    except TypeError:
        return None


def _initializer_array(tensor):
    return np.asarray(_onnx().numpy_helper.to_array(tensor))


__all__ = ["InferenceSession", "NodeArg", "SUPPORTED_OPS", "partition"]
