"""A data-only codec for lowered programs: JSON text plus one blob of raw bytes, and back.

The disk compile cache stores lowered programs with it, in files that anyone able to write the
cache directory could have crafted. Decoding therefore builds nothing but the classes of
``NODE_CLASSES`` (the frozen dataclasses of the loop-nest IR), dtypes, constant arrays of the
supported dtypes, complex numbers, tuples, dicts and JSON scalars; nothing named in the data is imported, called
or evaluated, and anything else is a :class:`CodecError`.

A node is a JSON object ``{"@": class name, field: value, ...}`` with exactly the fields of its
dataclass; tuples are JSON lists; ``bytes`` and the contents of constant arrays lie in the blob
and are referred to as ``[offset, length]``. Floats keep NaN and the infinities (as Python's
``json`` writes them), and ``1``, ``1.0`` and ``True`` stay distinct, as ``Const`` needs.
"""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np

from ..dtypes import ALL_DTYPES, DType
from ..errors import CinnliteError
from . import graph as G
from . import loopnest as L
from .constant import ConstArray
from .symbolic import Dim

NODE_CLASSES = {cls.__name__: cls for cls in (
    L.Buffer, L.Const, L.Var, L.Binary, L.Cmp, L.Select, L.Cast, L.Math, L.Load, L.Every, L.For, L.Store, L.Reduce, L.If,
    L.Seq, L.Let, L.ReportIndexError, L.FlagIndexError, L.Prefetch, L.IndexCheck, L.Kernel, L.LoweredProgram,
    Dim, G.Tensor, G.Node, G.Program)}
_FIELDS = {name: tuple(f.name for f in dataclasses.fields(cls)) for name, cls in NODE_CLASSES.items()}
_FIELD_SETS = {name: frozenset(fields) for name, fields in _FIELDS.items()}
_DTYPES = {d.name: d for d in ALL_DTYPES}
_SCALARS = (type(None), bool, int, float, str)


class CodecError(CinnliteError, ValueError):
    """A value the codec does not represent, or data that is not a valid encoding."""


def dumps(value) -> tuple:
    """``value`` as (JSON text as bytes, blob)."""
    encoder = _Encoder()
    root = encoder.encode(value)
    text = json.dumps({"nodes": encoder.nodes, "value": root}, separators=(",", ":"), allow_nan=True)
    return text.encode(), bytes(encoder.blob)


def loads(text: bytes, blob) -> object:
    """The value that ``dumps`` gave ``text`` and ``blob`` for; CodecError when they are not
    such a pair."""
    decoder = _Decoder(memoryview(blob))
    try:
        top = json.loads(text, object_hook=decoder.hook)
    except CodecError:
        raise
    except (ValueError, TypeError, RecursionError) as exc:
        raise CodecError(f"not an encoded value: {exc}") from None
    if type(top) is not dict or top.keys() != {"nodes", "value"}:
        raise CodecError("not an encoded value: no node table")
    return top["value"]


class _Encoder:
    """Every object that is not a scalar, tuple or dict becomes one entry of the node table,
    after the entries it refers to, and is referred to as ``{"#": index}``. Equal entries are
    stored once: IR trees repeat subexpressions (an index expression in a check, a guard and an
    access), and decoding each only once is most of what makes loading cheap."""

    def __init__(self):
        self.nodes: list = []
        self.blob = bytearray()
        self._by_id: dict = {}    # id(object) -> its reference
        self._by_text: dict = {}  # an entry's JSON text -> its reference
        self._alive: list = []    # keeps the ids of _by_id meaningful

    def encode(self, value):
        kind = type(value)
        if kind in _SCALARS:
            return value
        if kind is tuple:
            return [self.encode(v) for v in value]
        if kind is dict:
            if not all(type(k) is str and k not in ("@", "#") for k in value):
                raise CodecError("dict keys must be strings other than '@' and '#'")
            return {k: self.encode(v) for k, v in value.items()}
        ref = self._by_id.get(id(value))
        if ref is None:
            node = self._node(value, kind)
            text = json.dumps(node, separators=(",", ":"), allow_nan=True)
            ref = self._by_text.get(text)
            if ref is None:
                self.nodes.append(node)
                ref = self._by_text[text] = {"#": len(self.nodes) - 1}
            self._by_id[id(value)] = ref
            self._alive.append(value)
        return ref

    def _node(self, value, kind) -> dict:
        if kind is bytes:
            return {"@": "bytes", "at": self._append(value)}
        if kind is DType:
            return {"@": "DType", "name": value.name}
        if kind is complex:
            return {"@": "complex", "re": value.real, "im": value.imag}
        if kind is ConstArray:
            arr = value.array
            return {"@": "ConstArray", "dtype": arr.dtype.name, "shape": list(arr.shape),
                    "at": self._append(arr.tobytes())}
        name = kind.__name__
        if NODE_CLASSES.get(name) is not kind:
            raise CodecError(f"cannot encode a {kind.__module__}.{kind.__qualname__}")
        fields = {field: self.encode(getattr(value, field)) for field in _FIELDS[name]}
        return {"@": name, **fields}

    def _append(self, data: bytes) -> list:
        offset = len(self.blob)
        self.blob += data
        return [offset, len(data)]


class _Decoder:
    """json's object hook, called on every object innermost first: node table entries are built
    in table order, so a reference can only name an entry built before it."""

    def __init__(self, blob: memoryview):
        self.blob = blob
        self.nodes: list = []

    def hook(self, obj: dict):
        if "#" in obj:
            k = obj["#"]
            if obj.keys() != {"#"} or type(k) is not int or not 0 <= k < len(self.nodes):
                raise CodecError(f"reference {str(k)[:40]} names no earlier node")
            return self.nodes[k]
        name = obj.get("@")
        if name is None:
            return {k: _value(v) for k, v in obj.items()}
        self.nodes.append(self._node(name, obj))
        return self.nodes[-1]

    def _node(self, name, obj: dict):
        if name == "bytes" and obj.keys() == {"@", "at"}:
            return bytes(_slice(self.blob, obj["at"]))
        if name == "DType" and obj.keys() == {"@", "name"}:
            dtype = _DTYPES.get(obj["name"]) if type(obj["name"]) is str else None
            if dtype is None:
                raise CodecError(f"unknown dtype {str(obj['name'])[:40]!r}")
            return dtype
        if name == "complex" and obj.keys() == {"@", "re", "im"}:
            if not all(type(obj[k]) in (int, float) for k in ("re", "im")):
                raise CodecError("a complex number has two real parts")
            return complex(obj["re"], obj["im"])
        if name == "ConstArray" and obj.keys() == {"@", "dtype", "shape", "at"}:
            return _const_array(obj, self.blob)
        fields = _FIELD_SETS.get(name) if type(name) is str else None
        if fields is None or obj.keys() - {"@"} != fields:
            raise CodecError(f"not an IR node: {sorted(obj)[:8]} with '@' = {str(name)[:40]!r}")
        return NODE_CLASSES[name](**{k: _field(v) for k, v in obj.items() if k != "@"})


def _value(v):
    return tuple(_value(x) for x in v) if type(v) is list else v


def _field(v):
    """A node's field: scalars, nodes and tuples of them, never a dict."""
    v = _value(v)
    if type(v) is dict:
        raise CodecError("a node field cannot be a dict")
    return v


def _slice(blob: memoryview, at) -> memoryview:
    if not (type(at) is list and len(at) == 2 and all(type(n) is int and n >= 0 for n in at)
            and at[0] + at[1] <= len(blob)):
        raise CodecError(f"blob reference {str(at)[:40]} is outside the blob")
    return blob[at[0]:at[0] + at[1]]


def _const_array(obj: dict, blob: memoryview) -> ConstArray:
    dtype = _DTYPES.get(obj["dtype"]) if type(obj["dtype"]) is str else None
    shape = obj["shape"]
    if dtype is None or not (type(shape) is list and all(type(d) is int and d >= 0 for d in shape)):
        raise CodecError("a constant array needs a supported dtype and a shape of sizes")
    data = _slice(blob, obj["at"])
    if len(data) != math.prod(shape) * dtype.itemsize:
        raise CodecError(f"a constant array of shape {tuple(shape)} cannot hold {len(data)} bytes")
    return ConstArray(np.frombuffer(data, dtype.np).reshape(shape))
