"""The public API's type hints: on every public signature, in step with the values the operators
accept at run time, shipped with the package (``py.typed``), and accepted by mypy where it is
installed. A user's type checker reads these, so a wrong hint is a bug the user sees."""
from __future__ import annotations

import inspect
import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import cinnlite as cl
from cinnlite import api_types, compiler
from cinnlite.dtypes import DType
from cinnlite.ir import ops
from cinnlite.ir.graph import Node, Program, Tensor
from cinnlite.ir.symbolic import Dim
from cinnlite.runtime.executable import Executable

ROOT = Path(__file__).resolve().parent.parent


def public_functions():
    yield cl.compile
    yield from (cl.Float, cl.Int, cl.UInt, cl.Bool, cl.as_dtype)
    for name, member in vars(cl.NetBuilder).items():
        if callable(member) and (not name.startswith("_") or name == "__init__"):
            yield member
    yield from (Executable.run, Executable.__call__, Executable.source, Executable.stages.fget)
    yield from (cl.take, cl.gather, cl.gather_nd, cl.scatter, cl.scatter_nd, cl.scatter_add)


@pytest.mark.parametrize("function", list(public_functions()), ids=lambda f: f.__qualname__)
def test_every_public_signature_is_annotated(function):
    signature = inspect.signature(function)
    bare = [p.name for p in signature.parameters.values() if p.name != "self" and p.annotation is p.empty]
    assert not bare, f"{function.__qualname__}: parameters without a type: {bare}"
    assert signature.return_annotation is not signature.empty, f"{function.__qualname__}: no return type"


def test_the_literal_types_list_exactly_what_the_checks_accept():
    assert typing.get_args(api_types.IndexMode) == ops.MODES
    assert typing.get_args(api_types.Reduction) == ops.REDUCTIONS
    assert typing.get_args(api_types.IndexLayout) == ops.INDEX_LAYOUTS
    assert typing.get_args(api_types.Target) == compiler.TARGETS


def test_program_and_tensor_fields_are_typed():
    assert typing.get_type_hints(Tensor) == {"name": str, "shape": tuple[int | Dim, ...], "dtype": DType}
    assert typing.get_type_hints(Program) == {"name": str, "inputs": tuple[Tensor, ...], "nodes": tuple[Node, ...],
                                              "outputs": tuple[Tensor, ...], "assumptions": tuple}


def test_the_package_says_it_is_typed():
    assert (Path(cl.__file__).parent / "py.typed").is_file()
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    with open(ROOT / "pyproject.toml", "rb") as f:
        package_data = tomllib.load(f)["tool"]["setuptools"]["package-data"]["cinnlite"]
    assert "py.typed" in package_data


TYPICAL_USE = '''
import numpy as np
import cinnlite as cl

b = cl.NetBuilder("typed")
x = b.create_input(cl.Float(32), (4, 3), "x")
i = b.create_input("int64", [2, 3], "i")
y = b.gather(x, i, axis=0, mode="clip")
z = b.scatter_nd(b.fill_constant((4, 3), 0.0, np.float32), b.reshape(i, (2, 3, 1)), y, dims=[0], reduce="max")
exe = cl.compile(b.build([y, z]), target="cpu", threads=2)
out: np.ndarray = exe(x=np.zeros((4, 3), np.float32), i=np.zeros((2, 3), np.int64))[0]
results: dict[str, np.ndarray] = exe.run({"x": np.zeros((4, 3), np.float32), "i": [[0, 1, 2], [3, 0, 1]]})
stages: tuple[str, ...] = exe.stages
shape: tuple[int | cl.Dim, ...] = y.shape  # a size is a number or a symbol
text: str = exe.source(stages[0])
'''


def mypy(tmp_path, source: str) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy")
    path = tmp_path / "use_cinnlite.py"
    path.write_text(source)
    # Strict on the user's file only: cinnlite's own internals are not what is checked here.
    command = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--ignore-missing-imports",
               "--cache-dir", str(tmp_path / "mypy_cache"), str(path)]
    return subprocess.run(command, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, MYPYPATH=str(ROOT)))


def test_mypy_accepts_typical_use(tmp_path):
    proc = mypy(tmp_path, TYPICAL_USE)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_mypy_rejects_a_misspelt_reduction(tmp_path):
    proc = mypy(tmp_path, TYPICAL_USE + 'b.scatter(x, i, y, reduce="sum")\n')
    assert proc.returncode == 1 and '"reduce" to "scatter" of "NetBuilder" has incompatible type' in proc.stdout, \
        proc.stdout + proc.stderr


def test_the_typical_use_runs():
    exec(compile(TYPICAL_USE, "use_cinnlite.py", "exec"), {})
