"""The user's names never reach generated source as they are.

A program name is free text, and a Program may be put together without NetBuilder (as any
frontend may), so names can hold quotes, line breaks, comment delimiters or code. These tests
give the compiler such names on every backend and check that the generated LLVM IR and CUDA C
hold them only as safe identifiers or escaped comment text, that nothing they spell runs, that
results are right, and that messages and the ``run()`` dictionary keep the names as written.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import cinnlite as cl
from backends import BACKENDS
from cinnlite import NetBuilder
from cinnlite.errors import ValidationError
from cinnlite.runtime.cache import program_fingerprint

MARK = "cinnlite_name_injection_ran"


def hostile_names(marker: str) -> list:
    """Names that break out of a C string or comment, splice lines, or run ``marker``'s touch."""
    touch = f'system("touch {marker}")'
    return [
        f'x"); {touch}; //',
        f'\nextern "C" int system(const char*); static int cl_pwned = {touch};\n//',
        "closes */ a comment /* and opens one",
        "ends in a backslash\\",
        "??/",
        "quote's \"double\" and `back`",
        "line\nbreak\r\n\t tab",
        "ünïcödé ✓ 名前",
        "%41 percent",
        "",
    ]


def gather_scatter(name="p"):
    """``rows = take(x, i)`` and ``out = scatter(zeros, j, reshape(reshape(rows)), reduce="add")``:
    inputs, intermediates the CPU fuses away, and two outputs."""
    b = NetBuilder(name)
    x = b.create_input("float32", (5, 3), "x")
    i = b.create_input("int64", (4,), "i")
    j = b.create_input("int64", (4, 3), "j")
    rows = b.take(x, i, axis=0, name="rows")
    src = b.reshape(b.reshape(rows, (12,)), (4, 3))
    out = b.scatter(b.fill_constant((5, 3), 0.0, "float32"), j, src, axis=0, reduce="add", name="out")
    return b.build([rows, out])


INTERMEDIATES = ("reshape_0", "reshape_1", "fill_constant_0")


def _args():
    return {"x": np.arange(15, dtype=np.float32).reshape(5, 3), "i": np.array([4, -1, 0, 2]),
            "j": np.array([[0, 1, 2], [4, 4, 4], [1, -1, 0], [3, 3, 3]])}


def _expected(args):
    rows = args["x"][args["i"]]
    out = np.zeros((5, 3), np.float32)
    np.add.at(out, (args["j"] % 5, np.arange(3)[None, :]), rows)
    return rows, out


def renamed(program, names: dict):
    """``program`` with its tensors renamed (``names``: old name -> new), built directly from the
    graph dataclasses as a frontend may, without NetBuilder's rule on tensor names."""
    def tensor(t):
        return replace(t, name=names.get(t.name, t.name))

    nodes = tuple(replace(n, inputs=tuple(map(tensor, n.inputs)), output=tensor(n.output)) for n in program.nodes)
    return replace(program, inputs=tuple(map(tensor, program.inputs)), nodes=nodes,
                   outputs=tuple(map(tensor, program.outputs)))


def _assert_names_are_inert(exe, marker):
    """No quote of a name survives, what a name spells is only ever in a comment (identifiers
    keep its letters, never its punctuation), and the marker's command did not run."""
    stage = "llvm" if exe.target == "cpu" else "cuda"
    comment = ";" if stage == "llvm" else "//"
    source = exe.source(stage)
    assert 'system("' not in source
    for line in source.splitlines():
        if any(spelled in line for spelled in ("system(", "cl_pwned", "touch ")):
            assert line.lstrip().startswith(comment), line
    assert not marker.exists(), "code spelled by a name ran"


@pytest.mark.parametrize("backend", BACKENDS)
def test_hostile_program_names_compile_run_and_stay_comments(backend, tmp_path):
    marker = tmp_path / MARK
    args = _args()
    rows, out = _expected(args)
    for name in hostile_names(marker):
        exe = cl.compile(gather_scatter(name), target=backend, cache=False)
        got = exe(**args)
        np.testing.assert_array_equal(got[0], rows)
        np.testing.assert_array_equal(got[1], out)
        _assert_names_are_inert(exe, marker)
        with pytest.raises(cl.InputError) as info:
            exe(x=args["x"])
        assert f"program '{name}'" in str(info.value)


@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("backend", BACKENDS)
def test_hostile_tensor_names_compile_run_and_keep_the_users_names(backend, fuse, tmp_path):
    marker = tmp_path / MARK
    hostile = hostile_names(marker)
    tensors = ("x", "i", "j", "rows", "out") + INTERMEDIATES
    names = dict(zip(tensors, hostile[:5] + [hostile[7], hostile[8], hostile[9]]))
    prog = renamed(gather_scatter(hostile[1]), names)
    args = _args()
    rows, out = _expected(args)
    exe = cl.compile(prog, target=backend, fuse=fuse, cache=False)
    got = exe.run({names[k]: v for k, v in args.items()})
    assert set(got) == {names["rows"], names["out"]}
    np.testing.assert_array_equal(got[names["rows"]], rows)
    np.testing.assert_array_equal(got[names["out"]], out)
    _assert_names_are_inert(exe, marker)
    bad = dict(args, i=np.array([4, -1, 7, 2]))
    with pytest.raises(cl.IndexOutOfRangeError) as info:
        exe.run({names[k]: v for k, v in bad.items()})
    assert f"take '{names['rows']}'" in str(info.value) and f"input '{names['i']}'" in str(info.value)
    with pytest.raises(cl.InputError) as info:
        exe.run({names["x"]: args["x"]})
    assert repr(names["i"]) in str(info.value)


@pytest.mark.parametrize("backend", BACKENDS)
def test_names_that_are_equal_once_made_identifiers_stay_distinct(backend):
    """``a.b``, ``a_b``, ``a:b``, ... all read ``a_b`` with the punctuation replaced."""
    b = NetBuilder("a.b")
    spellings = ["a.b", "a_b", "a:b", "a/b", "a-b"]
    xs = [b.create_input("float32", (4,), s) for s in spellings]
    ten = b.fill_constant((4,), 10.0, "float32", name="k/ten")
    total = xs[0]
    for k, x in enumerate(xs[1:]):
        total = b.add(b.multiply(total, ten), x, name=["k.0", "k_0", "k:0", "k-0"][k])
    exe = cl.compile(b.build([total]), target=backend, fuse=False, cache=False)
    args = {s: np.full(4, k, np.float32) for k, s in enumerate(spellings)}
    np.testing.assert_array_equal(exe.run(args)["k-0"], np.full(4, 1234.0, np.float32))


def test_hostile_names_compile_with_nvrtc(tmp_path):
    pytest.importorskip("cuda.bindings.nvrtc", reason="NVRTC (the optional extra `cuda13` or `cuda12`) is not installed")
    from cinnlite.runtime import nvrtc

    hostile = hostile_names(tmp_path / MARK)
    names = {"x": hostile[0], "i": hostile[4], "j": hostile[5], "rows": hostile[2], "out": hostile[3],
             "reshape_0": hostile[6], "fill_constant_0": hostile[7]}
    for name in hostile:
        exe = cl.compile(renamed(gather_scatter(name), names), target="cuda", cache=False)
        assert nvrtc.compile_cuda(exe.source("cuda"), "sm_80", fast=True).ptx


def test_a_program_name_cannot_forge_another_programs_cache_key():
    """Written unescaped, the name ``p`` + newline + ``in y ...`` made a one-input program read
    as a program ``p`` with inputs y and x, and the cache handed one the other's code."""
    first = NetBuilder("p")
    first.create_input("float32", (3,), "y")
    x = first.create_input("float32", (4,), "x")
    first.take(x, first.constant(np.array([1, 0])), mode="clip")
    second = NetBuilder("p\nin y float32 (3,)")
    x2 = second.create_input("float32", (4,), "x")
    second.take(x2, second.constant(np.array([1, 0])), mode="clip")
    a, b = first.build(), second.build()
    assert program_fingerprint(a) != program_fingerprint(b)
    exe_a, exe_b = cl.compile(a), cl.compile(b)
    np.testing.assert_array_equal(exe_b(x=np.arange(4, dtype=np.float32)), [1.0, 0.0])
    assert exe_a is not exe_b


def test_netbuilder_tensor_names_may_not_end_in_a_line_break():
    with pytest.raises(ValidationError) as info:
        NetBuilder("p").create_input("float32", (2,), "x\n")
    assert info.value.rule == "names are identifiers"


def test_dot_text_keeps_every_name_inside_its_quotes(tmp_path):
    hostile = hostile_names(tmp_path / MARK)
    prog = renamed(gather_scatter(hostile[1]), {"x": hostile[0], "i": hostile[6], "rows": hostile[2]})
    plain = gather_scatter("p").to_dot()
    dot = prog.to_dot()
    assert len(dot.splitlines()) == len(plain.splitlines())
    for line in dot.splitlines():
        unescaped = line.replace("\\\\", "").replace('\\"', "")
        assert unescaped.count('"') % 2 == 0, line


def test_printed_graph_and_loop_nests_quote_names_that_netbuilder_could_not_make(tmp_path):
    hostile = hostile_names(tmp_path / MARK)
    names = {"x": hostile[0], "i": hostile[1], "j": hostile[6], "rows": hostile[2], "out": hostile[7]}
    prog = renamed(gather_scatter(hostile[1]), names)
    plain = gather_scatter("p")
    assert len(str(prog).splitlines()) == len(str(plain).splitlines())
    assert repr(hostile[1]) in str(prog) and repr(hostile[0]) in str(prog)
    exe, plain_exe = cl.compile(prog, cache=False), cl.compile(plain, cache=False)
    lowered = exe.source("lowered")
    assert len(lowered.splitlines()) == len(plain_exe.source("lowered").splitlines())
    assert f"kernel {hostile[7]!r}(" in lowered and "kernel rows(" in plain_exe.source("lowered")
