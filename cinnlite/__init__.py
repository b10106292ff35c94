"""cinnlite: a small tensor compiler for gather/scatter indexing operators.

Build a graph with :class:`NetBuilder`, compile it with :func:`compile` for the CPU (LLVM) or
CUDA, and run it on numpy arrays. See SEMANTICS.md for what each operator computes.
"""
from .autodiff import vjp
from .compiler import compile
from .eager import gather, gather_nd, scatter, scatter_add, scatter_nd, take
from .dtypes import BFloat16, Bool, Complex, DType, Float, Int, UInt, as_dtype
from .errors import (CacheWarning, CinnliteError, CinnliteWarning, CompileError, DTypeError, IndexOutOfRangeError,
                     InputError, InputTypeError, ShapeMismatchWarning, TargetUnavailableError, ThreadStartWarning,
                     ValidationError)
from .frontend.netbuilder import NetBuilder
from .ir.graph import Program, Tensor
from .ir.symbolic import Dim
from .runtime.device_array import DeviceArray

# The one place the version is written: pyproject.toml reads it ([tool.setuptools.dynamic]),
# `cinnlite --version` prints it and the compile cache keys on it.
__version__ = "0.1.0"

#: Layers over other libraries, imported when first used (``cl.dask``, ``cl.torch``, ``cl.onnx``):
#: ``import cinnlite`` never imports those libraries.
_INTEROP = ("dask", "torch", "onnx")


def __getattr__(name):
    if name in _INTEROP:
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'cinnlite' has no attribute {name!r}")


__all__ = [
    "NetBuilder", "compile", "vjp", "Program", "Tensor", "Dim", "DType", "Float", "BFloat16", "Complex", "Int", "UInt",
    "Bool", "as_dtype", "DeviceArray",
    "CinnliteError", "ValidationError", "DTypeError", "IndexOutOfRangeError", "InputError",
    "InputTypeError", "TargetUnavailableError", "CompileError", "CinnliteWarning", "ThreadStartWarning",
    "CacheWarning", "ShapeMismatchWarning", "take", "gather", "gather_nd", "scatter", "scatter_nd", "scatter_add", "__version__",
]
