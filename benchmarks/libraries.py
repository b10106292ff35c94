"""The optional peer libraries, PyTorch and Apache TVM, imported once with the benchmark's
thread count.

They are imported lazily, by ``import_peers``, so that thread settings are applied first. Read
them as ``libraries.torch`` and ``libraries.tvm`` (None when not installed or broken; the
reason is in ``torch_error`` and ``tvm_error``), never with ``from libraries import torch``,
which would copy the value before the import.
"""
from __future__ import annotations

import os

torch = None
tvm = None
torch_error = None
tvm_error = None


def import_peers(threads: int, want_torch: bool = True, want_tvm: bool = True):
    """Import PyTorch and TVM if installed, with ``threads`` worker threads each."""
    global torch, tvm, tvm_error, torch_error
    os.environ.setdefault("TVM_NUM_THREADS", str(threads))
    # TVM's idle workers call sched_yield 300 000 times after every call by default, which keeps
    # a core busy for about 0.2 s here and slows whatever runs next on a two-core machine. 2 000
    # yields (about 2 ms, like PyTorch's OpenMP spin) still keep them awake within a batch of
    # calls and end before the next implementation's turn.
    os.environ.setdefault("TVM_THREAD_POOL_SPIN_COUNT", "2000")
    if want_torch:
        try:
            import torch as _torch
            _torch.set_num_threads(threads)
            torch = _torch
        except Exception as exc:  # ImportError, or a broken install
            torch_error = f"{type(exc).__name__}: {exc}"
    if want_tvm:
        try:
            import tvm as _tvm
            from tvm import te, topi  # noqa: F401  (the API the TVM peer needs)
            tvm = _tvm
        except Exception as exc:
            tvm_error = f"{type(exc).__name__}: {exc}"


def available(name: str) -> bool:
    """Whether the peer ``name`` ("numpy", "torch" or "tvm") can run here."""
    return {"numpy": True, "torch": torch is not None, "tvm": tvm is not None}[name]
