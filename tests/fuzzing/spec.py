"""A draw of the randomized differential test: input arrays and a short list of NetBuilder calls,
and the vocabulary draws are made of (operator forms, dtypes, modes, reductions).

A ``Spec`` is plain data, so that it can be evaluated by the numpy reference, compiled by
cinnlite, shrunk and printed as a script alike.
"""
from __future__ import annotations

from dataclasses import dataclass, field

KINDS = ("take", "gather", "gather_nd", "gather_nd_dims", "scatter", "scatter_nd", "scatter_nd_dims")
DATA_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "bfloat16",
               "float32", "float64", "complex64", "complex128")
INDEX_DTYPES = ("int32", "int64", "int8", "int16", "uint8", "uint16", "uint32", "uint64")
MODES = ("raise", "clip", "wrap", "fill")
REDUCTIONS = ("none", "add", "mul", "max", "min", "mean")
GATHERS = ("take", "gather", "gather_nd")
INDEXING_METHODS = ("take", "gather", "gather_nd", "scatter", "scatter_nd")


@dataclass
class Step:
    out: str
    method: str          # a NetBuilder method
    args: tuple          # names of tensors
    kwargs: dict


@dataclass
class Spec:
    inputs: dict                      # name -> np.ndarray
    steps: list
    outputs: list                     # names
    choices: dict = field(default_factory=dict)

    @property
    def main(self) -> Step:
        return self.steps[-1]

    def size(self) -> tuple:
        """What shrinking minimises: total elements, then total rank."""
        return (sum(a.size for a in self.inputs.values()), sum(a.ndim for a in self.inputs.values()))
