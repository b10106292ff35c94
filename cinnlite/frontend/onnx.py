"""The ONNX importer: an ONNX model of indexing operators -> a cinnlite :class:`Program`.

Supported operators (default domain): Gather (opsets 1, 11, 13), GatherElements (11, 13),
GatherND (11, 12, 13, with ``batch_dims``), Scatter (9, 10), ScatterElements (11, 13, 16, 18,
every reduction), ScatterND (11, 13, 16, 18, every reduction), TensorScatter (24, ``linear`` and
``circular``), and the small operators such graphs carry: Constant, Identity, Cast (folded at
import time on constants) and Reshape with a constant shape.

Graph inputs become :meth:`NetBuilder.create_input` inputs and initializers become constants.
A symbolic ONNX dimension (``dim_param``, or a dimension the model leaves unnamed) becomes a
cinnlite symbol, so a model with an unknown batch compiles once for every batch.
Every ONNX index is checked at run time (ONNX says an out-of-range index is an error), so the
indexing operators use ``mode="raise"``; negative indices count from the end, as ONNX allows.

The ``onnx`` package is an optional dependency (``pip install 'cinnlite[onnx]'``); it is
imported only when a model is imported.
"""
from __future__ import annotations

import os
import re
import warnings
from collections import Counter
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from ..dtypes import ALL_DTYPES, as_dtype, bfloat16, converted
from ..errors import CinnliteError, ShapeMismatchWarning
from ..ir.graph import Program, Tensor
from ..ir.symbolic import dims_equal, exact_div, is_symbolic, prod
from .onnx_ops import EXPORTER_OPS, MULTI_OUTPUT_OPS, ExporterOps
from .onnx_support import OnnxImportError, Value as _Value
from .netbuilder import NetBuilder

SUPPORTED_OPS = ("Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND",
                 "TensorScatter", "Constant", "Identity", "Cast", "Reshape") + EXPORTER_OPS


def _node_label(index: int, node) -> str:
    """How errors name a node: by its name, or by its position and first output."""
    if node.name:
        return f"node '{node.name}' ({node.op_type})"
    return f"node {index} ({node.op_type}, output '{node.output[0] if node.output else '?'}')"


def unsupported_reason(node) -> str | None:
    """Why the importer cannot take ``node``, or None where it can (its attributes and shapes are
    checked when it is imported)."""
    if node.domain not in ("", "ai.onnx"):
        return f"operators of domain '{node.domain}' are not supported"
    if node.op_type not in SUPPORTED_OPS:
        return f"operator {node.op_type} is not supported"
    return None


class OnnxNotInstalledError(CinnliteError, ImportError):
    """The ``onnx`` package, which the importer needs, is not installed."""


def _onnx():
    try:
        import onnx
        import onnx.numpy_helper  # noqa: F401  (a submodule, imported for to_array)
    except ImportError:
        raise OnnxNotInstalledError(
            "importing ONNX models needs the onnx package: pip install 'cinnlite[onnx]'") from None
    return onnx


# -- the result of an import ------------------------------------------------------------------


@dataclass(frozen=True)
class ImportedModel:
    """A Program together with the ONNX names of its inputs and outputs.

    ONNX names are arbitrary strings; cinnlite tensor names are identifiers, so a name such as
    ``/layer/Gather_output_0`` becomes ``_layer/Gather_output_0``. ``inputs`` and ``outputs`` are
    ``(onnx name, Tensor)`` pairs in the model's order.
    """

    program: Program
    inputs: tuple
    outputs: tuple
    opset: int

    def feeds(self, arrays: dict) -> dict:
        """Input arrays keyed by ONNX input name -> keyed by Program input name."""
        by_onnx = self._program_names
        return {by_onnx.get(name, name): value for name, value in arrays.items()}

    def named_outputs(self, results: dict) -> dict:
        """``exe.run`` results keyed by Program output name -> keyed by ONNX output name."""
        return {onnx_name: results[name] for onnx_name, name in self._output_pairs}

    # Made once: a session calls the two above on every run.
    @cached_property
    def _program_names(self) -> dict:
        return {onnx_name: t.name for onnx_name, t in self.inputs}

    @cached_property
    def _output_pairs(self) -> tuple:
        return tuple((onnx_name, t.name) for onnx_name, t in self.outputs)


def from_onnx(model_or_path, shapes: dict | None = None, name: str | None = None) -> Program:
    """Import an ONNX model (a ``ModelProto``, a path or serialized bytes) as a Program.

    ``shapes`` maps graph input names to static shapes, where a static program is wanted;
    without it, a symbolic ``dim_param`` dimension is a cinnlite symbol of the same name (made an
    identifier), and a dimension the model leaves unnamed a symbol ``<input>_<axis>``.
    """
    return import_onnx(model_or_path, shapes=shapes, name=name).program


def import_onnx(model_or_path, shapes: dict | None = None, name: str | None = None) -> ImportedModel:
    """Like :func:`from_onnx`, and also return the ONNX names of the inputs and outputs."""
    model = load_model(model_or_path)
    return _Importer(model, shapes or {}, name).run()


def load_model(model_or_path):
    """A ``ModelProto`` from a ModelProto, a file path or serialized bytes."""
    onnx = _onnx()
    if isinstance(model_or_path, onnx.ModelProto):
        return model_or_path
    if isinstance(model_or_path, (bytes, bytearray)):
        try:
            return onnx.load_model_from_string(bytes(model_or_path))
        except Exception as exc:  # protobuf's DecodeError and friends
            raise OnnxImportError(f"the bytes are not an ONNX model ({_reason(exc)})") from None
    if isinstance(model_or_path, (str, os.PathLike)):
        path = os.fspath(model_or_path)
        if not os.path.exists(path):
            raise OnnxImportError(f"cannot read model '{path}': no such file")
        if os.path.isdir(path):
            raise OnnxImportError(f"cannot read model '{path}': it is a directory")
        try:
            model = onnx.load(path)
        except Exception as exc:
            raise OnnxImportError(f"cannot read model '{path}': not a valid ONNX file ({_reason(exc)})") from None
        if not model.HasField("graph"):
            raise OnnxImportError(f"cannot read model '{path}': the file holds no ONNX graph")
        return model
    raise OnnxImportError(f"from_onnx() takes an onnx.ModelProto, a path or bytes, "
                          f"got {type(model_or_path).__name__}")


@dataclass(frozen=True)
class GraphInput:
    """A graph input as the model declares it: ``shape`` is None when the model gives no shape,
    and holds None for each symbolic or unknown dimension."""

    name: str
    dtype: str
    shape: tuple | None

    @property
    def static(self) -> bool:
        return self.shape is not None and all(d is not None for d in self.shape)


def graph_inputs(model_or_path) -> list:
    """The model's graph inputs (initializers excluded), in order, as :class:`GraphInput`."""
    onnx = _onnx()
    model = load_model(model_or_path)
    initialized = {init.name for init in model.graph.initializer}
    out = []
    for vi in model.graph.input:
        if vi.name in initialized:
            continue
        dtype, shape = "?", None
        if vi.type.HasField("tensor_type"):
            tt = vi.type.tensor_type
            try:
                dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)).name
            except Exception:
                dtype = onnx.TensorProto.DataType.Name(tt.elem_type) if tt.elem_type in \
                    onnx.TensorProto.DataType.values() else "?"
            if tt.HasField("shape"):
                shape = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
        out.append(GraphInput(vi.name, dtype, shape))
    return out


def load_tensor(path, what: str = "tensor") -> np.ndarray:
    """A numpy array from a file holding one serialized ONNX ``TensorProto`` (``.pb``)."""
    onnx = _onnx()
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise OnnxImportError(f"{what}: cannot read '{path}': {exc.strerror}") from None
    tensor = onnx.TensorProto()
    try:
        tensor.ParseFromString(data)
        return np.asarray(onnx.numpy_helper.to_array(tensor))
    except Exception as exc:
        raise OnnxImportError(f"{what}: '{path}' is not a serialized ONNX tensor ({_reason(exc)})") from None


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


# -- names ----------------------------------------------------------------------------------------

def tensor_name(onnx_name: str) -> str:
    """The cinnlite tensor name for an ONNX value name (an identifier, as close as possible)."""
    name = re.sub(r"[^A-Za-z0-9_.\-:/]", "_", onnx_name)
    if not name or name[0].isdigit():
        return "_" + name
    if not re.match(r"[A-Za-z_]", name[0]):   # "/layer/Gather_output_0" -> "_layer/Gather_output_0"
        return "_" + name[1:]
    return name


class _Names:
    """Hands out unique tensor names: one per ONNX value, and fresh ones for helper tensors."""

    def __init__(self):
        self._taken: set = set()
        self._of: dict = {}

    def reserve(self, onnx_name: str) -> str:
        if onnx_name in self._of:
            return self._of[onnx_name]
        base = tensor_name(onnx_name)
        name, k = base, 1
        while name in self._taken:
            name, k = f"{base}_{k}", k + 1
        self._taken.add(name)
        self._of[onnx_name] = name
        return name

    def of(self, onnx_name: str) -> str:
        return self._of[onnx_name]

    def helper(self, base: str) -> str:
        name, k = base, 1
        while name in self._taken:
            name, k = f"{base}_{k}", k + 1
        self._taken.add(name)
        return name


# -- values: graph tensors or numpy constants ----------------------------------------------------


# -- the importer --------------------------------------------------------------------------------


class _Importer(ExporterOps):
    def __init__(self, model, shapes: dict, name: str | None):
        self.onnx = _onnx()
        self.model = model
        self.graph = model.graph
        self.shapes = dict(shapes)
        self.symbols: dict = {}  # ONNX dim_param (or unnamed dimension) -> cinnlite symbol
        self.opset = self._default_opset()
        self.names = _Names()
        self.b = NetBuilder(tensor_name(name or self.graph.name or "onnx_model"))
        self.env: dict = {}

    # .. model level ...............................................................................

    def _default_opset(self) -> int:
        versions = [o.version for o in self.model.opset_import if o.domain in ("", "ai.onnx")]
        if not versions:
            raise OnnxImportError("the model imports no opset of the default ONNX domain")
        return int(versions[0])

    def run(self) -> ImportedModel:
        g = self.graph
        for value in list(g.input) + list(g.output):
            self.names.reserve(value.name)
        for init in g.initializer:
            self.names.reserve(init.name)
        for node in g.node:
            for out in node.output:
                if out:
                    self.names.reserve(out)
        unknown = sorted(set(self.shapes) - {v.name for v in g.input})
        if unknown:
            raise OnnxImportError(f"shapes given for {', '.join(repr(n) for n in unknown)}, which "
                                  f"{'is not a graph input' if len(unknown) == 1 else 'are not graph inputs'}")
        if g.sparse_initializer:
            raise OnnxImportError("sparse initializers are not supported")

        for init in g.initializer:
            self.env[init.name] = _Value(array=self._to_array(init, f"initializer '{init.name}'"),
                                         name=self.names.of(init.name))
        inputs = []
        for vi in g.input:
            if vi.name in self.env:  # an initializer listed as an input: its value is the default
                continue
            dtype, shape = self._input_type(vi)
            t = self.b.create_input(dtype, shape, self.names.of(vi.name))
            self.env[vi.name] = _Value(tensor=t)
            inputs.append((vi.name, t))

        self._check_supported(g.node)
        for index, node in enumerate(g.node):
            self._import_node(index, node)

        outputs = self._outputs()
        try:
            program = self.b.build([t for _, t in outputs])
        except CinnliteError as exc:
            raise OnnxImportError(f"graph outputs: {exc}") from exc
        return ImportedModel(program, tuple(inputs), tuple(outputs), self.opset)

    def _to_array(self, tensor_proto, what: str) -> np.ndarray:
        try:
            arr = self.onnx.numpy_helper.to_array(tensor_proto)
        except Exception as exc:
            raise OnnxImportError(f"{what}: cannot read its value ({_reason(exc)})") from None
        return np.asarray(arr)

    def _elem_dtype(self, elem_type: int, what: str):
        onnx = self.onnx
        type_name = onnx.TensorProto.DataType.Name(elem_type) if elem_type in onnx.TensorProto.DataType.values() \
            else str(elem_type)
        try:
            np_dtype = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
            return as_dtype(np_dtype, what)
        except Exception:
            raise OnnxImportError(f"{what}: element type {type_name} is not supported (cinnlite supports "
                                  f"{', '.join(d.name for d in ALL_DTYPES)})") from None

    def _input_type(self, vi):
        what = f"graph input '{vi.name}'"
        if not vi.type.HasField("tensor_type"):
            raise OnnxImportError(f"{what}: only tensor inputs are supported, not {vi.type.WhichOneof('value')}")
        tt = vi.type.tensor_type
        dtype = self._elem_dtype(tt.elem_type, what)
        declared = None
        if tt.HasField("shape"):
            declared = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tt.shape.dim)
        given = self.shapes.get(vi.name)
        if given is not None:
            try:
                given = tuple(int(d) for d in given)
            except (TypeError, ValueError):
                raise OnnxImportError(f"{what}: the shape given for it, {given!r}, is not a tuple of "
                                      "integers") from None
            if declared is not None:
                if len(given) != len(declared):
                    raise OnnxImportError(f"{what}: the shape given, {list(given)}, has rank {len(given)}; "
                                          f"the model declares rank {len(declared)} {_fmt_shape(declared)}")
                for j, (g_dim, d_dim) in enumerate(zip(given, declared)):
                    if isinstance(d_dim, int) and g_dim != d_dim:
                        raise OnnxImportError(f"{what}: the shape given, {list(given)}, differs from the "
                                              f"model's {_fmt_shape(declared)} in dimension {j}")
            return dtype, given
        if declared is None:
            raise OnnxImportError(f"{what}: the model does not give its shape (not even its rank); pass "
                                  f"shapes={{'{vi.name}': (...)}} (cinnlite emit: --shape {vi.name}=D0,D1,...; "
                                  f"cinnlite run takes them from the input files)")
        return dtype, tuple(d if isinstance(d, int) else self._symbol(d, vi.name, j) for j, d in enumerate(declared))

    def _symbol(self, dim_param: str, input_name: str, axis: int) -> str:
        """The cinnlite symbol of a symbolic ONNX dimension: its ``dim_param`` (one name, one
        symbol, made an identifier where it is not one), or for a dimension the model leaves
        unnamed a symbol of its own, ``<input>_<axis>``."""
        key = dim_param if dim_param != "?" else f"?{input_name}:{axis}"
        if key not in self.symbols:
            base = dim_param if dim_param != "?" else f"{input_name}_{axis}"
            name = re.sub(r"\W", "_", base, flags=re.ASCII)
            name = name if re.match(r"[A-Za-z_]", name) else "d_" + name
            while name in self.symbols.values():
                name += "_"
            self.symbols[key] = name
        return self.symbols[key]

    def _outputs(self):
        outputs, used = [], set()
        for vo in self.graph.output:
            if vo.name not in self.env:
                raise OnnxImportError(f"graph output '{vo.name}' is not produced by any node, input or initializer")
            value = self.env[vo.name]
            want = self.names.of(vo.name)
            if value.is_const:
                t = self._materialize(value)
            else:
                t = value.tensor
            if t.name != want or t.name in used:
                # An output that is another value under a new name (Identity, a constant shared by
                # two outputs): give it its own tensor so every output keeps its ONNX name.
                t = self._guard(f"graph output '{vo.name}'", lambda: self.b.reshape(t, t.shape, name=want))
            used.add(t.name)
            self._check_declared(vo, t)
            outputs.append((vo.name, t))
        return outputs

    def _check_declared(self, vo, t: Tensor):
        if not vo.type.HasField("tensor_type"):
            return
        tt = vo.type.tensor_type
        what = f"graph output '{vo.name}'"
        if tt.elem_type:
            dtype = self._elem_dtype(tt.elem_type, what)
            if dtype != t.dtype:
                raise OnnxImportError(f"{what}: the model declares element type {dtype}, the graph computes {t.dtype}")
        if tt.HasField("shape"):
            declared = tuple(d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim)
            if len(declared) != len(t.shape) or any(d is not None and not is_symbolic(s) and d != s
                                                    for d, s in zip(declared, t.shape)):
                shown = _fmt_shape(tuple("?" if d is None else d for d in declared))
                warnings.warn(f"{what}: the model declares shape {shown}, the graph computes {list(t.shape)}; "
                              "the computed shape is used", ShapeMismatchWarning, stacklevel=2)

    # .. nodes .....................................................................................

    @staticmethod
    def _check_supported(nodes):
        """One error for every operator the importer lacks, with its count, naming the first node."""
        lacking = [(k, n) for k, n in enumerate(nodes) if unsupported_reason(n) is not None]
        if not lacking:
            return
        k, first = lacking[0]
        where = _node_label(k, first)
        counts = Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}" for _, n in lacking)
        raise OnnxImportError(f"{where}: {unsupported_reason(first)}; the model's operators cinnlite does not import: "
                              + ", ".join(f"{op} x{c}" for op, c in sorted(counts.items()))
                              + f" (cl.onnx.InferenceSession runs them on onnxruntime); supported: "
                              + ", ".join(SUPPORTED_OPS))

    def _import_node(self, index: int, node):
        """Import one node; ``_check_supported`` has seen every node of its graph."""
        op = node.op_type
        where = _node_label(index, node)
        schema = self._schema(where, op)
        attrs = _Attributes(self.onnx, where, node, schema, self.opset, self._to_array)
        inputs = list(node.input)
        while inputs and inputs[-1] == "":
            inputs.pop()
        if not schema.min_input <= len(inputs) <= schema.max_input:
            raise OnnxImportError(f"{where}: takes {schema.min_input}..{schema.max_input} inputs, got {len(inputs)}")
        values = []
        for name in inputs:
            if name == "":
                values.append(None)
            elif name not in self.env:
                raise OnnxImportError(f"{where}: input '{name}' is not defined before this node "
                                      "(the nodes must be in topological order)")
            else:
                values.append(self.env[name])
        if op == "If":
            return self._fold_if(where, node, values, attrs)
        handler = getattr(self, f"_op_{op}")
        outputs = [o for o in node.output if o]
        if len(outputs) != 1 and op not in MULTI_OUTPUT_OPS:
            raise OnnxImportError(f"{where}: expected one output, got {len(outputs)}")
        result = self._guard(where, lambda: handler(_NodeContext(where, outputs[0], self.names.of(outputs[0])),
                                                    values, attrs))
        # A handler of several outputs returns a tuple in the node's output order.
        for name, value in zip(node.output, result if isinstance(result, tuple) else (result,)):
            if name:
                self.env[name] = value

    def _fold_if(self, where: str, node, values, attrs):
        """An If whose condition is known at import is the branch it takes: that branch's nodes
        are imported in its place (they may read any value of the enclosing graph)."""
        cond = values[0]
        if not cond.is_const or cond.array.size != 1:
            raise OnnxImportError(f"{where}: the condition is computed from data; cinnlite imports an If only when "
                                  "its condition is known at import")
        branch = attrs.get("then_branch" if bool(cond.array.reshape(-1)[0]) else "else_branch", "GRAPH").g
        for init in branch.initializer:
            self.names.reserve(init.name)
            self.env[init.name] = _Value(array=self._to_array(init, f"{where}: initializer '{init.name}'"),
                                         name=self.names.of(init.name))
        for n in branch.node:
            for out in n.output:
                if out:
                    self.names.reserve(out)
        self._check_supported(branch.node)
        for k, n in enumerate(branch.node):
            self._import_node(k, n)
        if len(branch.output) != len([o for o in node.output if o]):
            raise OnnxImportError(f"{where}: the branch gives {len(branch.output)} outputs, the node has "
                                  f"{len(node.output)}")
        for out, value in zip(node.output, branch.output):
            if value.name not in self.env:
                raise OnnxImportError(f"{where}: branch output '{value.name}' is not computed in the branch")
            self.env[out] = self.env[value.name]

    def _schema(self, where: str, op: str):
        defs = self.onnx.defs
        try:
            schema = defs.get_schema(op, self.opset, "")
        except Exception:
            try:
                first = defs.get_schema(op).since_version
                detail = f"it was introduced in opset {first}"
            except Exception:
                detail = "it is not an ONNX operator"
            raise OnnxImportError(f"{where}: {op} does not exist in opset {self.opset} ({detail})") from None
        if schema.deprecated:
            raise OnnxImportError(f"{where}: {op} is deprecated since opset {schema.since_version} and not "
                                  f"allowed in an opset-{self.opset} model"
                                  + ("; use ScatterElements" if op == "Scatter" else ""))
        return schema

    @staticmethod
    def _guard(where: str, fn):
        try:
            return fn()
        except OnnxImportError:
            raise
        except CinnliteError as exc:
            raise OnnxImportError(f"{where}: {exc}") from exc

    # .. helpers for handlers .....................................................................

    def _materialize(self, value: _Value) -> Tensor:
        """The graph tensor of a value, adding a constant node for a numpy constant once."""
        if value.tensor is None:
            value.tensor = self.b.constant(value.array, name=value.name)
        return value.tensor

    def _tensor(self, value: _Value) -> Tensor:
        return self._materialize(value)

    # .. operators .................................................................................

    def _op_Identity(self, ctx, ins, attrs):
        return ins[0]

    #: Constant's value attributes cinnlite has a type for: (ONNX attribute type, numpy dtype).
    _CONSTANT_VALUES = {"value": ("TENSOR", None), "value_float": ("FLOAT", np.float32),
                        "value_floats": ("FLOATS", np.float32), "value_int": ("INT", np.int64),
                        "value_ints": ("INTS", np.int64)}

    def _op_Constant(self, ctx, ins, attrs):
        names = attrs.names()
        if len(names) != 1:
            raise OnnxImportError(f"{ctx.where}: needs exactly one value attribute, got {sorted(names) or 'none'}")
        (key,) = names
        if key not in self._CONSTANT_VALUES:
            raise OnnxImportError(f"{ctx.where}: attribute '{key}' is not supported (string and sparse "
                                  "constants have no cinnlite type)")
        kind, dtype = self._CONSTANT_VALUES[key]
        value = attrs.get(key, kind)
        return _Value(array=value if dtype is None else np.array(value, dtype), name=ctx.name)

    def _op_Cast(self, ctx, ins, attrs):
        onnx = self.onnx
        if self.opset < 6:  # Cast-1 names the type as a string
            name = attrs.get("to", "STRING")
            try:
                to = onnx.TensorProto.DataType.Value(name)
            except ValueError:
                raise OnnxImportError(f"{ctx.where}: attribute 'to' names an unknown type {name!r}") from None
        else:
            to = attrs.get("to", "INT")
        dtype = self._elem_dtype(to, ctx.where)
        (x,) = ins
        if x.is_const:
            if x.array.dtype.kind in "OSU":
                raise OnnxImportError(f"{ctx.where}: casting string constants is not supported")
            return _Value(array=_fold_cast(x.array, dtype.np), name=ctx.name)
        if x.tensor.dtype == dtype:
            return x
        return _Value(tensor=self.b.cast(x.tensor, dtype, name=ctx.name))

    def _op_Reshape(self, ctx, ins, attrs):
        if self.opset < 5:
            target = attrs.get("shape", "INTS")  # optional in the schema, but Reshape-1 needs it
        else:
            x, shape_value = ins
            if not shape_value.is_const:
                raise OnnxImportError(f"{ctx.where}: the shape input must be a constant (an initializer or a "
                                      "Constant node); cinnlite compiles for static shapes")
            if shape_value.array.dtype != np.int64 or shape_value.array.ndim != 1:
                raise OnnxImportError(f"{ctx.where}: the shape input must be a 1-D int64 tensor")
            target = [int(d) for d in shape_value.array]
        x = ins[0]
        shape = _onnx_reshape(ctx.where, x.shape, target, allowzero=bool(attrs.get("allowzero", "INT", 0)))
        if x.is_const:
            return _Value(array=x.array.reshape(shape), name=ctx.name)
        return _Value(tensor=self.b.reshape(x.tensor, shape, name=ctx.name))

    def _op_Gather(self, ctx, ins, attrs):
        axis = attrs.get("axis", "INT", 0)
        if ins[0].is_const and ins[1].is_const:  # shape arithmetic: fold
            try:
                return _Value(array=np.take(ins[0].array, ins[1].array, axis=axis), name=ctx.name)
            except (IndexError, ValueError, np.exceptions.AxisError) as exc:
                raise OnnxImportError(f"{ctx.where}: {exc}") from None
        x, idx = (self._tensor(v) for v in ins)
        return _Value(tensor=self.b.take(x, idx, axis=axis, mode="raise", name=ctx.name))

    def _op_GatherElements(self, ctx, ins, attrs):
        x, idx = (self._tensor(v) for v in ins)
        axis = attrs.get("axis", "INT", 0)
        return _Value(tensor=self.b.gather(x, idx, axis=axis, mode="raise", name=ctx.name))

    def _op_GatherND(self, ctx, ins, attrs):
        x, idx = (self._tensor(v) for v in ins)
        batch_dims = attrs.get("batch_dims", "INT", 0)
        return _Value(tensor=self.b.gather_nd(x, idx, batch_dims=batch_dims, mode="raise", name=ctx.name))

    def _op_Scatter(self, ctx, ins, attrs):
        return self._scatter_elements(ctx, ins, attrs.get("axis", "INT", 0), "none")

    def _op_ScatterElements(self, ctx, ins, attrs):
        return self._scatter_elements(ctx, ins, attrs.get("axis", "INT", 0), self._reduction(ctx, attrs))

    def _scatter_elements(self, ctx, ins, axis, reduce):
        x, idx, src = (self._tensor(v) for v in ins)
        if tuple(idx.shape) != tuple(src.shape):
            raise OnnxImportError(f"{ctx.where}: indices {list(idx.shape)} and updates {list(src.shape)} "
                                  "must have the same shape")
        return _Value(tensor=self.b.scatter(x, idx, src, axis=axis, reduce=reduce, mode="raise", name=ctx.name))

    def _op_ScatterND(self, ctx, ins, attrs):
        x, idx, src = (self._tensor(v) for v in ins)
        return _Value(tensor=self.b.scatter_nd(x, idx, src, reduce=self._reduction(ctx, attrs), mode="raise",
                                               name=ctx.name))

    def _reduction(self, ctx, attrs) -> str:
        value = attrs.get("reduction", "STRING", "none")
        allowed = ("none", "add", "mul", "max", "min") if self.opset >= 18 else ("none", "add", "mul")
        if value not in allowed:
            raise OnnxImportError(f"{ctx.where}: reduction '{value}' is not defined in opset {self.opset}; "
                                  f"expected one of {', '.join(allowed)}")
        return value

    def _op_TensorScatter(self, ctx, ins, attrs):
        past_v, update_v = ins[0], ins[1]
        write_v = ins[2] if len(ins) > 2 else None
        past, update = self._tensor(past_v), self._tensor(update_v)
        mode = attrs.get("mode", "STRING", "linear")
        if mode not in ("linear", "circular"):
            raise OnnxImportError(f"{ctx.where}: mode '{mode}' is not defined; expected linear or circular")
        r = past.ndim
        axis = attrs.get("axis", "INT", -2)
        if not -r <= axis < r:
            raise OnnxImportError(f"{ctx.where}: axis {axis} is out of range for a cache of rank {r}")
        axis = axis + r if axis < 0 else axis
        if axis == 0:
            raise OnnxImportError(f"{ctx.where}: axis cannot be 0 (the batch dimension)")
        if update.ndim != r or any(j != axis and update.shape[j] != past.shape[j] for j in range(r)) \
                or update.shape[axis] > past.shape[axis]:
            raise OnnxImportError(f"{ctx.where}: update {list(update.shape)} must have the shape of past_cache "
                                  f"{list(past.shape)} except along axis {axis}, where it may be shorter")
        if update.dtype != past.dtype:
            raise OnnxImportError(f"{ctx.where}: update has type {update.dtype}, past_cache has {past.dtype}")
        batch, max_len, seq_len = past.shape[0], past.shape[axis], update.shape[axis]
        if write_v is not None:
            if write_v.shape != (batch,):
                raise OnnxImportError(f"{ctx.where}: write_indices has shape {list(write_v.shape)}, expected [{batch}]")
            if write_v.np_dtype not in (np.int32, np.int64):
                raise OnnxImportError(f"{ctx.where}: write_indices must be int64 (or int32), got {write_v.np_dtype}")
        if seq_len == 0 or past.size == 0:
            return _Value(tensor=self.b.reshape(past, past.shape, name=ctx.name))
        lowering = _TensorScatterLowering(self, ctx, past, update, axis, mode, batch, max_len, seq_len)
        if write_v is None:
            index = lowering.static_index(np.zeros(batch, np.int64))
        elif write_v.is_const:
            index = lowering.static_index(write_v.array)
        else:
            index = lowering.dynamic_index(write_v.tensor)
        return _Value(tensor=self.b.scatter(past, index, update, axis=axis, mode="raise", name=ctx.name))


_REQUIRED = object()


def _type_phrase(type_name: str) -> str:
    """``an INT``, ``a FLOAT``, ``INTS``: an ONNX attribute type as a message names it."""
    if type_name.endswith("S"):
        return type_name
    return ("an " if type_name[0] in "AEIOU" else "a ") + type_name


class _Attributes:
    """A node's attributes, checked once and read by their ONNX type.

    ONNX stores an attribute as a protobuf with a type tag and one field per type, so a model
    can hold a float where an int belongs, a type of UNDEFINED, bytes that are not UTF-8, the
    same name twice, or nothing where the operator requires a value. Every such attribute is an
    :class:`OnnxImportError` naming the node and the attribute, raised here before any handler
    sees a value: each attribute must be defined for the operator in the model's opset, given
    once, hold a value (not a function's attribute reference) and have the type the schema
    declares; required ones must be present. Strings are decoded as UTF-8 and tensors read as
    arrays here, so handlers get Python values through :meth:`get`.
    """

    def __init__(self, onnx, where: str, node, schema, opset: int, to_array):
        self.where = where
        self._values: dict = {}   # name -> (ONNX type name, Python value)
        type_names = onnx.AttributeProto.AttributeType
        given = [attr.name for attr in node.attribute]
        for attr in node.attribute:
            spec = schema.attributes.get(attr.name)
            if spec is None:
                self._fail(attr.name, f"is not defined for {node.op_type} in opset {opset}")
            if given.count(attr.name) > 1:
                self._fail(attr.name, f"is given {given.count(attr.name)} times; ONNX allows each attribute once")
            if attr.ref_attr_name:
                self._fail(attr.name, f"refers to the attribute '{attr.ref_attr_name}' of an enclosing function, "
                                      "which only a node inside a function may do")
            expected = spec.type.name
            if attr.type == onnx.AttributeProto.UNDEFINED:
                self._fail(attr.name, f"has no type (UNDEFINED); expected {_type_phrase(expected)}")
            kind = type_names.Name(attr.type)
            if kind != expected:
                self._fail(attr.name, f"must be {_type_phrase(expected)}, got {_type_phrase(kind)}")
            self._values[attr.name] = (kind, self._decode(attr, kind, to_array))
        for name, spec in schema.attributes.items():
            if spec.required and name not in self._values:
                self._fail(name, "is required")

    def _fail(self, name: str, what: str):
        raise OnnxImportError(f"{self.where}: attribute '{name}' {what}")

    def _text(self, name: str, raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            self._fail(name, f"is not UTF-8 text: {raw!r}")

    def _decode(self, attr, kind: str, to_array):
        """The attribute's value as Python holds it; protobufs for types no handler reads."""
        if kind == "INT":
            return int(attr.i)
        if kind == "INTS":
            return [int(v) for v in attr.ints]
        if kind == "FLOAT":
            return float(attr.f)
        if kind == "FLOATS":
            return [float(v) for v in attr.floats]
        if kind == "STRING":
            return self._text(attr.name, attr.s)
        if kind == "STRINGS":
            return [self._text(attr.name, v) for v in attr.strings]
        if kind == "TENSOR":
            return to_array(attr.t, f"{self.where}: attribute '{attr.name}'")
        return attr

    def names(self) -> list:
        """The names of the attributes the node gives, in its order."""
        return list(self._values)

    def get(self, name: str, kind: str, default=_REQUIRED):
        """The value of attribute ``name`` of ONNX type ``kind`` ("INT", "INTS", "FLOAT",
        "FLOATS", "STRING", "STRINGS", "TENSOR"); ``default`` where the node does not give it,
        an error where there is none."""
        if name not in self._values:
            if default is _REQUIRED:
                self._fail(name, "is required")
            return default
        given, value = self._values[name]
        if given != kind:
            self._fail(name, f"must be {_type_phrase(kind)}, got {_type_phrase(given)}")
        return value


@dataclass(frozen=True)
class _NodeContext:
    where: str       # "node 'name' (Op)" for messages
    onnx_name: str   # the ONNX name of the node's output
    name: str        # the cinnlite tensor name reserved for it


class _TensorScatterLowering:
    """TensorScatter as a cinnlite ``scatter`` along the sequence axis.

    The scatter index has the update's shape; its value at ``(b, ..., s, ...)`` is the cache
    position written from update position ``s`` of batch ``b``: ``w[b] + s`` in linear mode,
    ``(w[b] + s) mod max_len`` in circular mode. With the write indices known at import time the
    index is a constant. With write indices computed at run time the positions come from
    lookup tables indexed by ``w[b]`` (cinnlite has no arithmetic operators, and a table lookup
    with ``take`` is exact):

    - circular: ``positions = take(table, w, mode="wrap")`` with
      ``table[v, s] = (v + s) mod max_len``, exact for every ``w`` since
      ``(w + s) mod M == ((w mod M) + s) mod M``.
    - linear: ``positions = take(table, w)`` with ``table[v, s] = v + s`` for the valid write
      indices ``v`` in ``[0, max_len - seq_len]``; ``take`` raises for larger ones. A negative
      ``w`` would wrap inside the table, so a second lookup flags it, and a ``take`` along a
      size-1 axis with that flag as its index raises for flagged batches.
    """

    def __init__(self, imp: _Importer, ctx, past, update, axis, mode, batch, max_len, seq_len):
        self.imp, self.b, self.ctx = imp, imp.b, ctx
        self.past, self.update, self.axis, self.mode = past, update, axis, mode
        self.batch, self.max_len, self.seq_len = batch, max_len, seq_len

    def _helper(self, suffix: str) -> str:
        return self.imp.names.helper(f"{self.ctx.name}.{suffix}")

    def static_index(self, write_indices: np.ndarray) -> Tensor:
        w = write_indices.astype(np.int64)
        steps = np.arange(self.seq_len, dtype=np.int64)
        if self.mode == "circular":
            positions = np.mod(w[:, None] + steps[None, :], self.max_len)
        else:
            bad = np.nonzero((w < 0) | (w > self.max_len - self.seq_len))[0]
            if bad.size:
                b = int(bad[0])
                raise OnnxImportError(
                    f"{self.ctx.where}: write_indices[{b}] = {int(w[b])} is out of range for linear mode: "
                    f"valid [0, {self.max_len - self.seq_len}] (max_sequence_length {self.max_len}, "
                    f"sequence_length {self.seq_len})")
            positions = w[:, None] + steps[None, :]
        index = np.broadcast_to(positions.reshape(self._pos_shape()), self.update.shape)
        return self.b.constant(np.ascontiguousarray(index), name=self._helper("index"))

    def _pos_shape(self) -> tuple:
        shape = [1] * self.update.ndim
        shape[0], shape[self.axis] = self.batch, self.seq_len
        return tuple(shape)

    def dynamic_index(self, w: Tensor) -> Tensor:
        b, M, S = self.b, self.max_len, self.seq_len
        steps = np.arange(S, dtype=np.int64)
        if self.mode == "circular":
            table = np.mod(np.arange(M, dtype=np.int64)[:, None] + steps[None, :], M)
            positions = b.take(b.constant(table, name=self._helper("position_table")), w, axis=0, mode="wrap",
                               name=self._helper("positions"))
        else:
            rows = M - S + 1     # the valid write indices 0 .. M - S
            table = np.arange(rows, dtype=np.int64)[:, None] + steps[None, :]
            positions = b.take(b.constant(table, name=self._helper("position_table")), w, axis=0, mode="raise",
                               name=self._helper("positions"))
            # Row v of a table with 2*rows entries is reached by w = v and by w = v - 2*rows; rows
            # 0 .. rows-1 are the valid w, rows rows .. 2*rows-1 are every w in [-rows, -1] that
            # the lookup above accepted. The flag is 0 for a valid w and 1 for a negative one.
            flags = np.concatenate([np.zeros(rows, np.int64), np.ones(rows, np.int64)])
            negative = b.take(b.constant(flags, name=self._helper("negative_write_index_table")), w, axis=0,
                              mode="raise", name=self._helper("negative_write_index"))
            # positions[b] seen through a size-1 axis indexed by the flag: a flag of 1 raises.
            positions = b.take(b.reshape(positions, (self.batch, 1, S), name=self._helper("positions_1")),
                               negative, axis=1, batch_dims=1, mode="raise",
                               name=self._helper("checked_positions"))
        t = b.reshape(positions, self._pos_shape(), name=self._helper("positions_b"))
        for j, size in enumerate(self.update.shape):
            if t.shape[j] != size:   # broadcast a size-1 axis: take its element `size` times
                zeros = b.constant(np.zeros(size, np.int64), name=self._helper(f"broadcast{j}"))
                t = b.take(t, zeros, axis=j, mode="raise", name=self._helper(f"index{j}"))
        return t


def _onnx_reshape(where: str, shape: tuple, target: list, allowzero: bool) -> tuple:
    """ONNX Reshape's output shape: 0 copies the input dimension (unless allowzero), -1 is inferred."""
    if target.count(-1) > 1:
        raise OnnxImportError(f"{where}: the shape {target} has more than one -1")
    if any(d < -1 for d in target):
        raise OnnxImportError(f"{where}: the shape {target} has a negative dimension")
    if allowzero and 0 in target and -1 in target:
        raise OnnxImportError(f"{where}: with allowzero=1 the shape cannot hold both 0 and -1")
    out = []
    for j, d in enumerate(target):
        if d == 0 and not allowzero:
            if j >= len(shape):
                raise OnnxImportError(f"{where}: shape entry {j} is 0 (copy the input dimension) but the "
                                      f"input {list(shape)} has no dimension {j}")
            d = shape[j]
        out.append(d)
    size = prod(shape)
    if -1 in out:
        known = prod(d for d in out if is_symbolic(d) or d != -1)
        rest = exact_div(size, known)
        if known == 0 or rest is None:
            raise OnnxImportError(f"{where}: cannot reshape {list(shape)} to {target}")
        out[out.index(-1)] = rest
    if not dims_equal(prod(out), size):
        raise OnnxImportError(f"{where}: cannot reshape {list(shape)} ({size} elements) to {target}")
    return tuple(out)


def _fold_cast(arr: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Cast a constant at import time the way ``NetBuilder.cast`` casts at run time: float to
    integer truncates toward zero and saturates at the integer's range, NaN gives 0."""
    if arr.dtype == bfloat16.np:
        arr = arr.astype(np.float32)  # exact; numpy's own functions know float32
    if arr.dtype.kind == "f" and dtype.kind in "iu":
        info = np.iinfo(dtype)
        with np.errstate(invalid="ignore"):
            clean = np.where(np.isnan(arr), 0, np.trunc(arr)).astype(np.float64)
        clipped = np.clip(clean, info.min, info.max)
        out = clipped.astype(dtype)
        # float64 cannot hold every int64: values that round up past the maximum stay at it.
        out[clean >= float(info.max)] = info.max
        return out
    with np.errstate(all="ignore"):
        return converted(arr, as_dtype(dtype))


def _fmt_shape(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"
