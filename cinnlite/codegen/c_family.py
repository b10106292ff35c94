"""What the C-family renderers share: the CUDA C renderer (``cuda.py``) writes the kernels and
the emulation's launcher calls them, so the two must agree on the templates, on the C type of
every value and buffer element, and on how a kernel's parameters are declared and passed.

- ``TEMPLATES``: the one Jinja environment of ``templates/`` (undefined variables are errors).
- ``memory_ctype`` / ``value_ctype``: the C type of an element in memory and of a value.
- ``ERROR_BUFFER_CTYPE`` / ``ERROR_BUFFER``: the element type and parameter name of the error
  buffer that kernels with ``mode="raise"`` checks take last.
- ``pointer_param``, ``pointer_from`` and ``pointer_in_params``: a kernel's pointer parameter,
  a pointer argument made from an untyped table slot, and one read from ``cuLaunchKernel``'s
  array of argument addresses.
"""
from __future__ import annotations

from pathlib import Path

import jinja2

from ..dtypes import DType
from .names import comment_text

TEMPLATES = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
    keep_trailing_newline=True,
    autoescape=False,
)
# Names of the user's program are shown in comments only through this filter (see names.py).
TEMPLATES.filters["comment"] = comment_text

CTYPES = {"bool": "unsigned char", "int8": "signed char", "int16": "short", "int32": "int",
          "int64": "long long", "uint8": "unsigned char", "uint16": "unsigned short", "uint32": "unsigned int",
          "uint64": "unsigned long long", "float16": "cl_half", "bfloat16": "cl_bf16", "float32": "float",
          "float64": "double", "complex64": "cl_c64", "complex128": "cl_c128"}

#: The error buffer: int64 elements, the last parameter of a kernel that reports index errors.
ERROR_BUFFER_CTYPE = "long long"
ERROR_BUFFER = "cl_errors"


def memory_ctype(dtype: DType) -> str:
    """The C type of one element of ``dtype`` in memory."""
    return CTYPES[dtype.name]


def value_ctype(dtype: DType) -> str:
    """The C type of a value of ``dtype`` in registers (bool is ``bool``)."""
    return "bool" if dtype.is_bool else CTYPES[dtype.name]


def pointer_param(ctype: str, name: str, writes: bool = True) -> str:
    """A kernel's parameter ``name`` pointing to ``ctype`` elements (``const`` if it only reads)."""
    return f"{'' if writes else 'const '}{ctype}* __restrict__ {name}"


def pointer_from(ctype: str, slot: str) -> str:
    """The argument for a ``ctype`` pointer parameter held, untyped, in ``slot``."""
    return f"({ctype}*){slot}"


def pointer_in_params(ctype: str, k: int, params: str = "cl_params") -> str:
    """The ``k``-th argument of ``cuLaunchKernel``'s ``params`` (addresses of the arguments)."""
    return f"*({ctype}**){params}[{k}]"
