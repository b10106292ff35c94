"""The record a failed ``mode="raise"`` check leaves for the runtime: the one definition of its
int64 slots. The renderers write them (``llvm.py``; ``cuda.py`` renders the CUDA helper from
them), the runtimes allocate and read them (``runtime/cpu.py``, ``runtime/cuda_base.py``).

- ``FIRST_FAILURE``, the CPU's: one record per call, or per chunk of a stage split across
  threads. A stage that fails stops and writes the check that failed, the flat position of the
  bad index in its index tensor and the bad value.
- ``PER_CHECK``, the GPU's (and its emulation's): one record per check, filled by whichever
  threads fail it: the smallest bad position (``NO_POSITION`` while none failed; threads lower
  it with an atomic minimum, so positions are non-negative and ``NO_POSITION`` the largest), the
  value at that position, and a lock (0 when free) under which a thread that lowered the position
  stores its value. The last slot pads the record to 32 bytes.
"""
from __future__ import annotations

from dataclasses import dataclass

#: The position slot of a ``PER_CHECK`` record whose check has not failed.
NO_POSITION = 2**63 - 1


@dataclass(frozen=True)
class ErrorRecord:
    """A record of int64 slots, named in order."""

    slots: tuple

    def index(self, name: str) -> int:
        """Where slot ``name`` is, in int64 from the start of the record."""
        return self.slots.index(name)

    @property
    def size(self) -> int:
        """How many int64 the record holds."""
        return len(self.slots)

    @property
    def nbytes(self) -> int:
        return 8 * len(self.slots)


FIRST_FAILURE = ErrorRecord(("check", "position", "value"))
PER_CHECK = ErrorRecord(("position", "value", "lock", "unused"))
