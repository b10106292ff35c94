"""An immutable, hashable array value for constant tensors in the graph."""
from __future__ import annotations

import hashlib

import numpy as np


class ConstArray:
    """A read-only numpy array that compares and hashes by content (dtype, shape, bytes)."""

    __slots__ = ("array", "_digest")

    def __init__(self, array: np.ndarray):
        arr = np.array(array, copy=True, order="C")
        arr.setflags(write=False)
        self.array = arr
        h = hashlib.sha256()
        # bfloat16's str is "<V2"; no other supported dtype is a 2-byte void, so it stays apart.
        h.update(f"{arr.dtype.str}{arr.shape}".encode())
        h.update(arr.tobytes())
        self._digest = h.hexdigest()

    @property
    def digest(self) -> str:
        return self._digest

    def __eq__(self, other):
        return isinstance(other, ConstArray) and self._digest == other._digest

    def __hash__(self):
        return hash(self._digest)

    def __repr__(self):
        if self.array.size <= 8:
            return np.array2string(self.array, separator=", ").replace("\n", "")
        return f"<{self.array.dtype}{list(self.array.shape)} {self._digest[:8]}>"
