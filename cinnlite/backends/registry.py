"""The compile targets by name: the one place a target name is looked up.

A backend's module is imported the first time its target is asked for, so that ``import
cinnlite`` does not load the CUDA renderer and runtimes; the default target, the CPU, is loaded
with the registry (its LLVM start-up is paid at import, not at the first compile).
"""
from __future__ import annotations

import importlib

from ..errors import CinnliteError
from .base import Backend

#: Target name -> the module whose ``BACKEND`` it is.
_MODULES = {
    "cpu": "cinnlite.backends.cpu",
    "cuda": "cinnlite.backends.cuda",
    "cuda-emu": "cinnlite.backends.cuda_emu",
}
#: Every target's name, in the order documentation and the command line list them.
BACKENDS = tuple(_MODULES)
DEFAULT_TARGET = "cpu"

_LOADED: dict = {}


def get_backend(name) -> Backend:
    """The backend of target ``name``; a CinnliteError for a name that is none."""
    if not isinstance(name, str) or name not in _MODULES:
        raise CinnliteError(f"unknown target {name!r}; expected one of {', '.join(BACKENDS)}")
    backend = _LOADED.get(name)
    if backend is None:  # importing is thread-safe, and every thread finds the same BACKEND
        backend = importlib.import_module(_MODULES[name]).BACKEND
        if backend.name != name:
            raise CinnliteError(f"{_MODULES[name]} defines target {backend.name!r}, not {name!r}")
        _LOADED[name] = backend
    return backend


def backends_with_stage(stage: str) -> list:
    """The targets whose executables offer stage ``stage``, in ``BACKENDS`` order."""
    return [name for name in BACKENDS if stage in get_backend(name).stages]


get_backend(DEFAULT_TARGET)
