"""A draw as a self-contained Python script: it rebuilds the program and its inputs with
cinnlite and numpy alone, runs it, and (unless told not to) checks the reference result or the
expected ``IndexOutOfRangeError``. The runner prints one for every failure it shrinks, and
keeps one for the draw in progress so that a crash can be reported with it.
"""
from __future__ import annotations

import numpy as np

from fuzzing.check import compile_options, declared_shape
from fuzzing.evaluate import reference_eval
from fuzzing.spec import Spec


def _literal(arr: np.ndarray) -> str:
    return f"np.array({arr.tolist()!r}, dtype={arr.dtype.name!r}).reshape({arr.shape!r})"


def _kwargs_text(kw: dict) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kw.items())


def reproducer(spec: Spec, backend: str, note: str = "", expected: bool = True) -> str:
    """A self-contained script that rebuilds the draw, runs it and (with ``expected``) checks
    the reference result."""
    env, errors = reference_eval(spec) if expected else ({}, [])
    lines = ["# " + line for line in note.splitlines()] + _program_lines(spec, backend)
    if not expected:
        lines.append("print(exe.run(inputs))")
    elif errors:
        lines += _error_check_lines(errors)
    else:
        lines += _result_check_lines(spec, env)
    return "\n".join(lines) + "\n"


def _program_lines(spec: Spec, backend: str) -> list:
    """Imports, the program built and compiled, and its inputs as literals."""
    lines = [
        "import numpy as np",
        "from numpy import nan, inf",
        "import cinnlite as cl",
        "",
        'b = cl.NetBuilder("repro")',
    ]
    for name, arr in spec.inputs.items():
        lines.append(f"{name} = b.create_input({arr.dtype.name!r}, {declared_shape(spec, name, arr)!r}, {name!r})")
    for st in spec.steps:
        args = ", ".join(list(st.args) + ([_kwargs_text(st.kwargs)] if st.kwargs else []))
        lines.append(f"{st.out} = b.{st.method}({args}, name={st.out!r})")
    options = "".join(f", {k}={v!r}" for k, v in compile_options(spec).items())
    lines.append(f"exe = cl.compile(b.build(outputs=[{', '.join(spec.outputs)}]), target={backend!r}{options})")
    lines.append("inputs = {")
    for name, arr in spec.inputs.items():
        lines.append(f"    {name!r}: {_literal(arr)},")
    lines.append("}")
    return lines


def _error_check_lines(errors) -> list:
    return ["# expected: IndexOutOfRangeError for one of (input, position, value):",
            f"# {errors}",
            "try:",
            "    exe.run(inputs)",
            "    raise AssertionError('no IndexOutOfRangeError')",
            "except cl.IndexOutOfRangeError as e:",
            "    print(e)",
            f"    assert (e.input, tuple(e.position), e.value) in {[(n, tuple(p), v) for n, p, v in errors]!r}"]


def _result_check_lines(spec: Spec, env) -> list:
    lines = ["got = exe.run(inputs)"]
    for name in spec.outputs:
        lines.append(f"expected_{name} = {_literal(env[name])}  # numpy reference")
        lines.append(f"print({name!r}, got[{name!r}].tolist())")
        lines.append(f"np.testing.assert_array_equal(got[{name!r}], expected_{name})")
    return lines
