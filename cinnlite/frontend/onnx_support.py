"""What the ONNX importer's modules share: its error, and the value a node produces."""
from __future__ import annotations

import numpy as np

from ..errors import CinnliteError
from ..ir.graph import Tensor


class OnnxImportError(CinnliteError, ValueError):
    """A model the importer cannot turn into a Program: an unsupported operator, attribute,
    data type or dynamic shape, or a model that breaks the ONNX rules."""


class Value:
    """A value in the importer: a graph tensor, or a numpy constant kept for folding (turned into
    a graph constant the first time an operator needs it as a tensor)."""

    __slots__ = ("tensor", "array", "name")

    def __init__(self, tensor: Tensor | None = None, array: np.ndarray | None = None, name: str | None = None):
        self.tensor = tensor
        self.array = array
        self.name = name

    @property
    def is_const(self) -> bool:
        return self.array is not None

    @property
    def shape(self) -> tuple:
        return tuple(self.array.shape) if self.is_const else tuple(self.tensor.shape)

    @property
    def np_dtype(self) -> np.dtype:
        return self.array.dtype if self.is_const else self.tensor.dtype.np
